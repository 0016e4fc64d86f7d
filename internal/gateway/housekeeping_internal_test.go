package gateway

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llm4agents/llm4agents/internal/ledger"
	"github.com/llm4agents/llm4agents/internal/store/sqlite"
)

// fakeTopUps counts its sweeps, failing each with err.
type fakeTopUps struct {
	calls chan struct{}
	err   error
}

func (f fakeTopUps) SweepTopUps(context.Context) (int, error) {
	f.calls <- struct{}{}
	return 0, f.err
}

// lockedBuffer is a bytes.Buffer a logger may write from another goroutine.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestCreditSweeperTopUps: the credit sweeper credits settled top-ups at
// once when it starts (long before the first purge of expired claims, an
// hour in), then every period; a failed top-up sweep is logged and keeps
// nothing else from running.
func TestCreditSweeperTopUps(t *testing.T) {
	db, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "gw.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	led, err := ledger.New(db, ledger.Config{Asset: "eip155:84532/erc20:0x036cbd53842c5426634e7929541ec2318f3dcf7e"}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	wait := func(calls chan struct{}, what string) {
		t.Helper()
		select {
		case <-calls:
		case <-time.After(10 * time.Second):
			t.Fatalf("no top-up sweep %s", what)
		}
	}

	// At start, without waiting for the period.
	calls := make(chan struct{}, 8)
	s := StartCreditSweeper(fakeTopUps{calls: calls}, led, db, time.Hour, slog.New(slog.DiscardHandler))
	wait(calls, "at start")
	s.Close()
	if len(calls) != 0 {
		t.Errorf("%d more sweeps within the first hour", len(calls))
	}

	// Every period, failing.
	logs := &lockedBuffer{}
	calls = make(chan struct{}, 8)
	s = StartCreditSweeper(fakeTopUps{calls: calls, err: errors.New("node down")}, led, db, 10*time.Millisecond, slog.New(slog.NewTextHandler(logs, nil)))
	wait(calls, "at start")
	wait(calls, "after a period")
	s.Close()
	if s := logs.String(); !strings.Contains(s, `msg="credit settled top-ups"`) || !strings.Contains(s, "node down") {
		t.Errorf("log:\n%s", s)
	}
}

// purgeCounter is a store that counts its purges and deletes nothing.
type purgeCounter struct {
	payments, recoveries int
}

func (p *purgeCounter) PurgeExpiredPayments(context.Context, int) (int, error) {
	p.payments++
	return 0, nil
}

func (p *purgeCounter) PurgeExpiredRecoveries(context.Context, int) (int, error) {
	p.recoveries++
	return 0, nil
}

// fakeGate answers SweepBeforePurge with waiting and err.
type fakeGate struct {
	waiting int
	err     error
}

func (g fakeGate) SweepBeforePurge(context.Context) (int, error) { return g.waiting, g.err }

// TestPurgeWaitsForTopUps: with credits on, a purge round deletes
// expired payment claims only after a top-up sweep that left none of them
// waiting for its credit and did not fail; otherwise it keeps them, purges
// the recoveries all the same, and warns with the count.
func TestPurgeWaitsForTopUps(t *testing.T) {
	for _, tc := range []struct {
		name     string
		gate     PurgeGate
		payments int
		warn     string
	}{
		{"credits off", nil, 1, ""},
		{"nothing waiting", fakeGate{}, 1, ""},
		{"an expired top-up waiting", fakeGate{waiting: 2}, 0, "waiting=2"},
		{"the sweep failed", fakeGate{err: errors.New("node down")}, 0, "node down"},
		{"waiting and failed", fakeGate{waiting: 1, err: errors.New("node down")}, 0, "waiting=1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := &purgeCounter{}
			logs := &lockedBuffer{}
			purgeRound(t.Context(), db, tc.gate, slog.New(slog.NewTextHandler(logs, nil)))
			if db.payments != tc.payments || db.recoveries != 1 {
				t.Errorf("purged payments %d times, recoveries %d; want %d, 1", db.payments, db.recoveries, tc.payments)
			}
			s := logs.String()
			switch {
			case tc.warn == "" && s != "":
				t.Errorf("log:\n%s", s)
			case tc.warn != "" && (!strings.Contains(s, "level=WARN") || !strings.Contains(s, "kept expired payment claims") || !strings.Contains(s, tc.warn)):
				t.Errorf("log:\n%s", s)
			}
		})
	}
}
