package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llm4agents/llm4agents/internal/chat"
	"github.com/llm4agents/llm4agents/internal/ledger"
	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/internal/store/postgres"
	"github.com/llm4agents/llm4agents/internal/testdb"
)

// leaseBackend is a store the issued-mark tests run on, with its ledger.
type leaseBackend struct {
	name string
	open func(t *testing.T) (*ledger.Ledger, ledger.LeaseStore, *testClock)
}

// leaseBackends are SQLite and PostgreSQL (skipped without its server, as
// testdb says).
var leaseBackends = []leaseBackend{
	{"sqlite", func(t *testing.T) (*ledger.Ledger, ledger.LeaseStore, *testClock) {
		l, db, clk := newLedger(t)
		return l, db, clk
	}},
	{"postgres", func(t *testing.T) (*ledger.Ledger, ledger.LeaseStore, *testClock) {
		db, err := postgres.Open(t.Context(), testdb.PostgresDSN(t, "ledger"), nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = db.Close() })
		clk := &testClock{now: time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)}
		db.Now = clk.Now
		l, err := ledger.New(db, ledger.Config{Asset: ledger.AssetID(network, token)}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return l, db, clk
	}},
}

// markStore records, for each lease by its hold entry's seq (the high half
// of a call's Ref), the issued mark the store has committed, and fails
// Issue while failIssue is set (or every failEvery-th call).
type markStore struct {
	ledger.LeaseStore
	failIssue atomic.Bool
	failEvery int64
	calls     atomic.Int64

	mu     sync.Mutex
	marks  map[int64]int64  // hold seq -> committed mark
	seqOf  map[string]int64 // lease id -> hold seq
	issued []string         // lease ids in the order their marks were raised
}

var errIssueDown = errors.New("issue: store is down")

func newMarkStore(st ledger.LeaseStore) *markStore {
	return &markStore{LeaseStore: st, marks: map[int64]int64{}, seqOf: map[string]int64{}}
}

func (m *markStore) Hold(ctx context.Context, r store.HoldRequest) (store.Hold, error) {
	h, err := m.LeaseStore.Hold(ctx, r)
	if err == nil && h.Lease {
		m.mu.Lock()
		m.seqOf[h.ID] = h.Seq
		m.marks[h.Seq] = max(m.marks[h.Seq], h.Issued)
		m.mu.Unlock()
	}
	return h, err
}

func (m *markStore) Issue(ctx context.Context, marks []store.LeaseMark) ([]error, error) {
	n := m.calls.Add(1)
	if m.failIssue.Load() || (m.failEvery > 0 && n%m.failEvery == 0) {
		return nil, errIssueDown
	}
	results, err := m.LeaseStore.Issue(ctx, marks)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for i, mk := range marks {
		if results[i] == nil {
			seq := m.seqOf[mk.LeaseID]
			m.marks[seq] = max(m.marks[seq], mk.Mark)
			m.issued = append(m.issued, mk.LeaseID)
		}
	}
	return results, nil
}

// leases is how many leases were placed.
func (m *markStore) leases() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.seqOf)
}

// check fails t unless the ticket's position is within its lease's
// committed mark.
func (m *markStore) check(t *testing.T, tk *ledger.Ticket) {
	t.Helper()
	ref := tk.Ref()
	seq, pos := ref.Int64()>>32, ref.Int64()&(1<<32-1)
	m.mu.Lock()
	mark := m.marks[seq]
	m.mu.Unlock()
	if pos > mark {
		t.Errorf("call handed position %d of lease %d, whose committed mark is %d: answered unaccounted", pos, seq, mark)
	}
}

// TestLeasesIssueGuard: a lease hands out no position above the mark the
// store has committed. With the store refusing to raise marks, calls go on
// up to the mark, then wait for it and are refused (ErrNotIssued), never
// served unaccounted; once the store takes marks again, calls go on.
func TestLeasesIssueGuard(t *testing.T) {
	for _, b := range leaseBackends {
		t.Run(b.name, func(t *testing.T) {
			l, st, clk := b.open(t)
			topUp(t, l, "t1", 10_000_000)
			ms := newMarkStore(st)
			cfg := leaseConfig("r1")
			cfg.MaxSize = 10_000_000
			ls := newLeases(t, l, ms, cfg, clk.Now)
			key := &ledger.Key{ID: "sk-1"}

			ms.failIssue.Store(true)
			var served int
			for i := range 2 * ledger.MinHeadroom {
				start := time.Now()
				tk, err := ls.Reserve(t.Context(), call(fmt.Sprintf("c%d", i), key))
				if err != nil {
					if !errors.Is(err, ledger.ErrNotIssued) || !errors.Is(err, errIssueDown) {
						t.Fatalf("Reserve() %d past the mark = %v, want ErrNotIssued with the store's error", i, err)
					}
					if d := time.Since(start); d > 2*time.Second {
						t.Errorf("refused after %v: a write that failed should end the wait", d)
					}
					break
				}
				ms.check(t, tk)
				served++
				ls.Charge(tk, chat.Usage{PromptTokens: 10, CompletionTokens: 10}, mini, nil)
			}
			if served != ledger.MinHeadroom {
				t.Errorf("served %d calls with marks refused, want the lease's first mark, %d", served, ledger.MinHeadroom)
			}
			if n := ls.Stats().Snapshot(); n.IssueWaits != 1 || n.IssueRefused != 1 || n.IssueErrors == 0 {
				t.Errorf("stats = %+v, want one call waited and refused, and a failed write", n)
			}

			ms.failIssue.Store(false)
			for i := range 20 {
				tk, err := ls.Reserve(t.Context(), call(fmt.Sprintf("d%d", i), key))
				if err != nil {
					t.Fatalf("Reserve() with the store back: %v", err)
				}
				ms.check(t, tk)
				ls.Charge(tk, chat.Usage{PromptTokens: 10, CompletionTokens: 10}, mini, nil)
			}
			if err := ls.Close(t.Context()); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestLeasesIssueRace runs calls of three keys from many goroutines while
// the flusher raises marks and a third of the mark writes fail: every call
// admitted is within its lease's committed mark, every refusal is
// ErrNotIssued, and every draw is written.
func TestLeasesIssueRace(t *testing.T) {
	for _, b := range leaseBackends {
		t.Run(b.name, func(t *testing.T) {
			l, st, clk := b.open(t)
			topUp(t, l, "t1", 100_000_000)
			ms := newMarkStore(st)
			ms.failEvery = 3
			cfg := leaseConfig("r1")
			cfg.FlushInterval = 2 * time.Millisecond
			ls := newLeases(t, l, ms, cfg, clk.Now)
			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan struct{})
			go func() {
				defer close(done)
				ls.Run(ctx)
			}()

			const workers, each = 8, 60
			var served, refused atomic.Int64
			var wg sync.WaitGroup
			for w := range workers {
				key := &ledger.Key{ID: fmt.Sprintf("sk-%d", w%3)}
				wg.Go(func() {
					for i := range each {
						tk, err := ls.Reserve(t.Context(), call(fmt.Sprintf("c%d-%d", w, i), key))
						if errors.Is(err, ledger.ErrNotIssued) {
							refused.Add(1)
							continue
						}
						if err != nil {
							t.Errorf("Reserve(): %v", err)
							return
						}
						ms.check(t, tk)
						served.Add(1)
						ls.Charge(tk, chat.Usage{PromptTokens: 10, CompletionTokens: 10}, mini, nil)
					}
				})
			}
			wg.Wait()
			cancel()
			<-done
			if err := ls.Close(t.Context()); err != nil {
				t.Fatal(err)
			}
			n := ls.Stats().Snapshot()
			if n.Drawn != served.Load() || n.Unbilled != 0 {
				t.Errorf("stats = %+v; want %d draws written, none unbilled", n, served.Load())
			}
			if n.IssueRefused != refused.Load() {
				t.Errorf("IssueRefused = %d, %d calls were refused", n.IssueRefused, refused.Load())
			}
			t.Logf("%d served, %d refused; %d mark writes (%d failed), %d calls waited", served.Load(), refused.Load(), n.Issues, n.IssueErrors, n.IssueWaits)
		})
	}
}

// TestLeasesReplicaDiesLostCalls kills a replica (no Close) after some of
// its calls were written and others not: the sweep that ends its lease
// counts a bound of at least the calls answered and not written, and at
// most those plus the headroom the lease was issued ahead. A replica that
// closes its leases counts nothing.
func TestLeasesReplicaDiesLostCalls(t *testing.T) {
	for _, b := range leaseBackends {
		t.Run(b.name, func(t *testing.T) {
			tests := []struct {
				name               string
				written, unwritten int
				closed             bool
			}{
				{"none lost", 5, 0, false},
				{"within the first mark", 3, 4, false},
				{"past several marks", 3, 40, false},
				{"closed", 3, 40, true},
			}
			for _, tc := range tests {
				t.Run(tc.name, func(t *testing.T) {
					l, st, clk := b.open(t)
					topUp(t, l, "t1", 10_000_000)
					ms := newMarkStore(st)
					cfg := leaseConfig("r1")
					cfg.MaxSize = 10_000_000
					ls := newLeases(t, l, ms, cfg, clk.Now)
					key := &ledger.Key{ID: "sk-1"}
					charge := func(n int) (charged int64) {
						t.Helper()
						for range n {
							tk, err := ls.Reserve(t.Context(), call("c", key))
							if err != nil {
								t.Fatal(err)
							}
							ms.check(t, tk)
							charged += ls.Charge(tk, chat.Usage{PromptTokens: 10, CompletionTokens: 10}, mini, nil).Charged.Int64()
						}
						return charged
					}
					written := charge(tc.written)
					if !ls.Flush(t.Context()) {
						t.Fatal("Flush() failed")
					}
					charge(tc.unwritten) // never written, unless closed
					if !ls.WaitOpenings(t.Context()) {
						t.Fatal("a lease opened ahead of need was not placed")
					}
					if tc.closed {
						if err := ls.Close(t.Context()); err != nil {
							t.Fatal(err)
						}
					}
					clk.Advance(2 * time.Minute)
					if _, err := l.SweepExpired(t.Context()); err != nil {
						t.Fatal(err)
					}
					lost := l.LostCalls()
					if tc.closed {
						if lost != 0 {
							t.Errorf("LostCalls() = %d after a close, want 0", lost)
						}
						return
					}
					// Each lease the replica held open (the one its calls
					// drew on, and the next, opened ahead of need) was
					// issued ahead of its calls by the headroom of a key
					// this slow: the floor.
					leases := int64(ms.leases())
					if lo, hi := int64(tc.unwritten), int64(tc.unwritten)+ledger.MinHeadroom*leases; lost < lo || lost > hi {
						t.Errorf("LostCalls() = %d, want within [%d, %d]: %d calls answered and not written, %d leases", lost, lo, hi, tc.unwritten, leases)
					}
					// Counted once: a second sweep finds nothing more.
					if _, err := l.SweepExpired(t.Context()); err != nil || l.LostCalls() != lost {
						t.Errorf("LostCalls() after a second sweep = %d, %v; want %d", l.LostCalls(), err, lost)
					}
					avail, held := balance(t, l)
					if want := 10_000_000 - written; avail != want || held != 0 {
						t.Errorf("balance after the sweep = %d, %d held; want %d: the written calls billed", avail, held, want)
					}
				})
			}
		})
	}
}
