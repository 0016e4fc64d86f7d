package sqlite

import (
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/llm4agents/llm4agents/internal/store"
)

// TestLedgerStatementsPrepared runs every ledger write, on every path that
// has a statement of its own (a hold through a key with both caps, refused
// by each limit, replayed; a capture with a loss, a release, an expiry), and
// checks that each statement ran prepared: a query missing from
// ledgerStatements would be compiled on every call again.
func TestLedgerStatementsPrepared(t *testing.T) {
	ctx := t.Context()
	clk := time.Now().Truncate(time.Millisecond)
	db, err := Open(ctx, filepath.Join(t.TempDir(), "llm4agents.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := db.Close(); err != nil {
			t.Error(err)
		}
	})
	db.Now = func() time.Time { return clk }
	const owner, asset = "0xabc", "eip155:1/erc20:0xa0b8"
	key := &store.KeyLimits{ID: "k1", TotalCap: 500, PeriodCap: 300, Period: time.Hour}
	hold := func(id string, amount int64) store.HoldRequest {
		return store.HoldRequest{ID: id, Owner: owner, Asset: asset, Amount: amount, TTL: time.Minute, Key: key}
	}
	steps := []preparedStep{
		{"credit", func() error { _, err := db.Credit(ctx, "c1", owner, asset, 1000); return err }},
		{"credit replay", func() error { _, err := db.Credit(ctx, "c1", owner, asset, 1000); return err }},
		{"hold", func() error { _, err := db.Hold(ctx, hold("h1", 100)); return err }},
		{"hold replay", func() error { _, err := db.Hold(ctx, hold("h1", 100)); return err }},
		{"hold over the balance", func() error { return refused(db.Hold(ctx, hold("h2", 2000))) }},
		{"hold over the period cap", func() error { return refused(db.Hold(ctx, hold("h3", 250))) }},
		{"capture with a loss", func() error { _, _, err := db.Capture(ctx, "h1", 150); return err }},
		{"capture replay", func() error { _, _, err := db.Capture(ctx, "h1", 150); return err }},
		{"hold to release", func() error { _, err := db.Hold(ctx, hold("h4", 10)); return err }},
		{"release", func() error { _, _, err := db.Release(ctx, "h4"); return err }},
		{"release replay", func() error { _, _, err := db.Release(ctx, "h4"); return err }},
		{"hold over the total cap", func() error {
			key = &store.KeyLimits{ID: "k1", TotalCap: 100, PeriodCap: store.NoCap}
			return refused(db.Hold(ctx, hold("h5", 10)))
		}},
		{"hold to expire", func() error {
			key = nil
			_, err := db.Hold(ctx, hold("h6", 10))
			return err
		}},
		{"expire", func() error {
			clk = clk.Add(time.Hour)
			swept, err := db.ReleaseExpiredHolds(ctx, 10)
			if err == nil && swept.Released != 1 {
				t.Errorf("ReleaseExpiredHolds() = %+v, want 1 released", swept)
			}
			return err
		}},
	}
	runPrepared(t, db, steps)
}

// preparedStep is one write of a test that its statements run prepared.
type preparedStep struct {
	name string
	run  func() error
}

// runPrepared runs steps on db, in order, and fails at the first that
// fails or runs a statement of a wtx unprepared.
func runPrepared(t *testing.T, db *DB, steps []preparedStep) {
	t.Helper()
	before := unpreparedRuns.Load()
	for _, s := range steps {
		if err := s.run(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if n := unpreparedRuns.Load() - before; n != 0 {
			t.Fatalf("%s: %d statements ran unprepared", s.name, n)
		}
	}
	if db.statements() == nil {
		t.Fatal("no statements prepared")
	}
}

// refused returns nil if err is a refused hold.
func refused(_ store.Hold, err error) error {
	if err == nil {
		return errors.New("hold not refused")
	}
	if errors.Is(err, store.ErrInsufficient) {
		return nil
	}
	return err
}
