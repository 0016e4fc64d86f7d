package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llm4agents/llm4agents/internal/chat"
	"github.com/llm4agents/llm4agents/internal/ledger"
	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/internal/store/sqlite"
)

func leaseConfig(replica string) ledger.LeaseConfig {
	return ledger.LeaseConfig{Replica: replica, Window: 5 * time.Second, TTL: time.Minute}
}

func newLeases(t *testing.T, l *ledger.Ledger, st ledger.LeaseStore, cfg ledger.LeaseConfig, now func() time.Time) *ledger.Leases {
	t.Helper()
	ls, err := l.NewLeases(st, cfg, now)
	if err != nil {
		t.Fatal(err)
	}
	return ls
}

// call is a call of 1,000 prompt tokens bound to 1,000 output tokens at
// mini's price: a maximum cost of 750 atomic units.
func call(id string, key *ledger.Key) ledger.Call {
	return ledger.Call{RequestID: id, Payer: payer, Key: key, PromptTokens: 1000, OutputBound: 1000, Price: mini}
}

func TestLeasesChargeAndClose(t *testing.T) {
	l, db, clk := newLedger(t)
	topUp(t, l, "t1", 10_000_000)
	ls := newLeases(t, l, db, leaseConfig("r1"), clk.Now)
	key := &ledger.Key{ID: "sk-1"}

	t1, err := ls.Reserve(t.Context(), call("c1", key))
	if err != nil {
		t.Fatal(err)
	}
	t2, err := ls.Reserve(t.Context(), call("c2", key))
	if err != nil {
		t.Fatal(err)
	}
	// One lease for both calls: the second reference follows the first.
	if d := new(big.Int).Sub(t2.Ref(), t1.Ref()); d.Cmp(big.NewInt(1)) != 0 {
		t.Errorf("refs %v and %v are not consecutive positions of one lease", t1.Ref(), t2.Ref())
	}
	var kept *store.StoredReceipt
	ch := ls.Charge(t1, chat.Usage{PromptTokens: 500, CompletionTokens: 200}, mini, func(c ledger.Charge) *store.StoredReceipt {
		kept = &store.StoredReceipt{RequestID: "c1", Owner: owner, KeyID: "sk-1", Envelope: []byte(`{"receipt":1}`)}
		return kept
	})
	if ch.Charged.Int64() != 195 || ch.Ref.Cmp(t1.Ref()) != 0 {
		t.Errorf("Charge() = charged %v, ref %v; want 195 at %v", ch.Charged, ch.Ref, t1.Ref())
	}
	ls.Release(t2)
	// Above its maximum: charged the maximum, the rest is the operator's.
	t3, err := ls.Reserve(t.Context(), call("c3", key))
	if err != nil {
		t.Fatal(err)
	}
	if ch := ls.Charge(t3, chat.Usage{PromptTokens: 1000, CompletionTokens: 5000}, mini, nil); ch.Charged.Int64() != 750 || ch.Loss.Int64() != 2400 {
		t.Errorf("Charge() above the maximum = %v charged, %v loss; want 750, 2400", ch.Charged, ch.Loss)
	}
	if !ls.Flush(t.Context()) {
		t.Fatal("Flush() did not empty the queue")
	}
	if r, err := db.Receipt(t.Context(), "c1"); err != nil || string(r.Envelope) != `{"receipt":1}` {
		t.Errorf("Receipt(c1) = %+v, %v", r, err)
	}
	if err := ls.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	avail, held := balance(t, l)
	if avail != 10_000_000-195-750 || held != 0 {
		t.Errorf("balance after close = %d available, %d held; want %d, 0", avail, held, 10_000_000-195-750)
	}
	u, err := l.KeyUsage(t.Context(), *key)
	if err != nil || u.Spent != 945 || u.Held != 0 {
		t.Errorf("KeyUsage() = %+v, %v; want spent 945", u, err)
	}
	if _, err := ls.Reserve(t.Context(), call("c4", key)); !errors.Is(err, ledger.ErrLeasesClosed) {
		t.Errorf("Reserve() after Close = %v, want ErrLeasesClosed", err)
	}
}

// TestLeasesCapAcrossReplicas runs 200 concurrent calls through one key on
// two replicas (two store handles, two Leases): what they admit never passes
// the key's cap, and every charge reaches the books.
func TestLeasesCapAcrossReplicas(t *testing.T) {
	l, _, clk := newLedger(t)
	topUp(t, l, "t1", 10_000_000)
	path := filepath.Join(t.TempDir(), "shared.db")
	var replicas []*ledger.Leases
	var led *ledger.Ledger
	for i := range 2 {
		db, err := sqlite.Open(t.Context(), path, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = db.Close() })
		db.Now = clk.Now
		lr, err := ledger.New(db, ledger.Config{Asset: ledger.AssetID(network, token)}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			led = lr
			topUp(t, lr, "t1", 1_000_000)
		}
		ls := newLeases(t, lr, db, leaseConfig(fmt.Sprintf("r%d", i)), clk.Now)
		ctx, cancel := context.WithCancel(t.Context())
		go ls.Run(ctx)
		t.Cleanup(cancel)
		replicas = append(replicas, ls)
	}
	const capAmount = 100_000 // 133 calls of 750
	key := &ledger.Key{ID: "sk-cap", TotalCap: big.NewInt(capAmount)}
	var admitted, refused atomic.Int64
	var wg sync.WaitGroup
	for i := range 200 {
		ls := replicas[i%2]
		wg.Go(func() {
			tk, err := ls.Reserve(t.Context(), call(fmt.Sprintf("c%d", i), key))
			var ie *store.InsufficientError
			switch {
			case errors.As(err, &ie):
				refused.Add(1)
				return
			case err != nil:
				t.Errorf("Reserve(): %v", err)
				return
			}
			admitted.Add(1)
			ls.Charge(tk, chat.Usage{PromptTokens: 1000, CompletionTokens: 1000}, mini, nil)
		})
	}
	wg.Wait()
	for _, ls := range replicas {
		if err := ls.Close(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	spent := admitted.Load() * 750
	if spent > capAmount {
		t.Errorf("admitted %d calls of 750 = %d, over the cap of %d", admitted.Load(), spent, capAmount)
	}
	if admitted.Load()+refused.Load() != 200 {
		t.Errorf("%d admitted + %d refused, want 200", admitted.Load(), refused.Load())
	}
	u, err := led.KeyUsage(t.Context(), *key)
	if err != nil || u.Spent != spent || u.Held != 0 {
		t.Errorf("KeyUsage() = %+v, %v; want spent %d (every admitted call), held 0", u, err, spent)
	}
	for _, ls := range replicas {
		if n := ls.Stats().Snapshot(); n.Unbilled != 0 {
			t.Errorf("%d draws were refused by the store", n.Unbilled)
		}
	}
}

// TestLeasesBalanceWhileLeasesTurn reads a balance while another replica
// opens and closes leases on the same account with calls that cost
// nothing: the balance must not move. Read in two snapshots, a lease placed
// or closed between them shows its slice twice or not at all.
func TestLeasesBalanceWhileLeasesTurn(t *testing.T) {
	l, db, clk := newLedger(t)
	const total = 10_000_000
	topUp(t, l, "t1", total)
	turner := newLeases(t, l, db, leaseConfig("r1"), clk.Now)
	reader := newLeases(t, l, db, leaseConfig("r2"), clk.Now)
	key := &ledger.Key{ID: "sk-1"}

	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	wg.Go(func() {
		defer cancel()
		for i := range 150 {
			tk, err := turner.Reserve(ctx, call(fmt.Sprintf("c%d", i), key))
			if ctx.Err() != nil {
				return
			}
			if err != nil {
				t.Errorf("Reserve(): %v", err)
				return
			}
			turner.Charge(tk, chat.Usage{}, mini, nil)
			if !turner.Quiesce(ctx) {
				t.Error("Quiesce() left a lease open")
				return
			}
		}
	})
	reads := 0
	for ctx.Err() == nil {
		b, err := reader.Balance(ctx, payer)
		if ctx.Err() != nil {
			break
		}
		reads++
		if err != nil || b.Available.Int64() != total || b.Held.Sign() != 0 {
			t.Errorf("Balance() = %v available, %v held, %v; want %d, 0", b.Available, b.Held, err, total)
			cancel()
		}
	}
	wg.Wait()
	t.Logf("%d balance reads", reads)
}

// TestLeasesReplicaDies: a replica that dies between flushes loses the
// draws it had not written, and only those; the sweep ends its lease at the
// TTL, capturing what was written and returning the rest.
func TestLeasesReplicaDies(t *testing.T) {
	l, db, clk := newLedger(t)
	topUp(t, l, "t1", 1_000_000)
	ls := newLeases(t, l, db, leaseConfig("r1"), clk.Now)
	key := &ledger.Key{ID: "sk-1"}
	charge := func(n int) {
		for range n {
			tk, err := ls.Reserve(t.Context(), call("c", key))
			if err != nil {
				t.Fatal(err)
			}
			ls.Charge(tk, chat.Usage{PromptTokens: 1000, CompletionTokens: 1000}, mini, nil)
		}
	}
	charge(3)
	if !ls.Flush(t.Context()) {
		t.Fatal("Flush() failed")
	}
	charge(2) // never written: the replica dies here
	if _, held := balance(t, l); held == 0 {
		t.Fatal("no lease held")
	}
	clk.Advance(time.Minute)
	if n, err := l.SweepExpired(t.Context()); err != nil || n == 0 {
		t.Fatalf("SweepExpired() = %d, %v; want the dead replica's leases ended", n, err)
	}
	avail, held := balance(t, l)
	if avail != 1_000_000-3*750 || held != 0 {
		t.Errorf("balance after the sweep = %d, %d held; want %d: the written draws billed, the rest returned", avail, held, 1_000_000-3*750)
	}
}

// faultyStore fails its writes while down is set.
type faultyStore struct {
	ledger.LeaseStore
	down atomic.Bool
}

var errDown = errors.New("store is down")

func (f *faultyStore) Hold(ctx context.Context, r store.HoldRequest) (store.Hold, error) {
	if f.down.Load() {
		return store.Hold{}, errDown
	}
	return f.LeaseStore.Hold(ctx, r)
}

func (f *faultyStore) Draw(ctx context.Context, d []store.LeaseDraw) ([]error, error) {
	if f.down.Load() {
		return nil, errDown
	}
	return f.LeaseStore.Draw(ctx, d)
}

func (f *faultyStore) Issue(ctx context.Context, m []store.LeaseMark) ([]error, error) {
	if f.down.Load() {
		return nil, errDown
	}
	return f.LeaseStore.Issue(ctx, m)
}

// TestLeasesStoreDown: with the store down, calls go on from the lease in
// memory until it is spent, the queue of unwritten draws is full or the
// lease's issued positions are used, then fail closed; once the store is
// back every draw is written.
func TestLeasesStoreDown(t *testing.T) {
	l, db, clk := newLedger(t)
	topUp(t, l, "t1", 1_000_000)
	fs := &faultyStore{LeaseStore: db}
	cfg := leaseConfig("r1")
	cfg.FlushBatch, cfg.MaxPending = 4, 8
	ls := newLeases(t, l, fs, cfg, clk.Now)
	key := &ledger.Key{ID: "sk-1"}
	first, err := ls.Reserve(t.Context(), call("c0", key)) // opens a lease of 1,500: two calls
	if err != nil {
		t.Fatal(err)
	}
	fs.down.Store(true)
	ls.Charge(first, chat.Usage{PromptTokens: 1000, CompletionTokens: 1000}, mini, nil)
	second, err := ls.Reserve(t.Context(), call("c1", key))
	if err != nil {
		t.Fatalf("Reserve() from the lease in memory with the store down: %v", err)
	}
	ls.Charge(second, chat.Usage{PromptTokens: 1000, CompletionTokens: 1000}, mini, nil)
	if _, err := ls.Reserve(t.Context(), call("c2", key)); !errors.Is(err, errDown) {
		t.Errorf("Reserve() past the lease with the store down = %v, want the store's error", err)
	}
	if ls.Flush(t.Context()) {
		t.Error("Flush() with the store down reported success")
	}
	fs.down.Store(false)
	if !ls.Flush(t.Context()) {
		t.Fatal("Flush() with the store back failed")
	}
	if err := ls.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if avail, held := balance(t, l); avail != 1_000_000-1500 || held != 0 {
		t.Errorf("balance = %d, %d held; want both calls billed", avail, held)
	}
}

// TestLeasesBacklog: draws that cannot be written fill the queue, and calls
// are refused before it overflows.
func TestLeasesBacklog(t *testing.T) {
	l, db, clk := newLedger(t)
	topUp(t, l, "t1", 1_000_000)
	fs := &faultyStore{LeaseStore: db}
	cfg := leaseConfig("r1")
	cfg.FlushBatch, cfg.MaxPending = 4, 8
	cfg.MaxSize = 1_000_000
	ls := newLeases(t, l, fs, cfg, clk.Now)
	key := &ledger.Key{ID: "sk-1"}
	tk, err := ls.Reserve(t.Context(), call("c0", key))
	if err != nil {
		t.Fatal(err)
	}
	fs.down.Store(true)
	ls.Charge(tk, chat.Usage{PromptTokens: 1, CompletionTokens: 1}, mini, nil)
	for i := 1; ; i++ {
		tk, err := ls.Reserve(t.Context(), call("c", key))
		if errors.Is(err, ledger.ErrBacklog) {
			if i != cfg.MaxPending {
				t.Errorf("refused at call %d, want %d", i, cfg.MaxPending)
			}
			break
		}
		if err != nil || i > cfg.MaxPending {
			t.Fatalf("Reserve() %d = %v", i, err)
		}
		ls.Charge(tk, chat.Usage{PromptTokens: 1, CompletionTokens: 1}, mini, nil)
		ls.Flush(t.Context())
	}
	fs.down.Store(false)
	if err := ls.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// TestLeasesCapChange: a key whose caps changed is served from a new lease
// placed under the new caps.
func TestLeasesCapChange(t *testing.T) {
	l, db, clk := newLedger(t)
	topUp(t, l, "t1", 1_000_000)
	ls := newLeases(t, l, db, leaseConfig("r1"), clk.Now)
	t1, err := ls.Reserve(t.Context(), call("c1", &ledger.Key{ID: "sk-1"}))
	if err != nil {
		t.Fatal(err)
	}
	ls.Release(t1)
	_, err = ls.Reserve(t.Context(), call("c2", &ledger.Key{ID: "sk-1", TotalCap: big.NewInt(500)}))
	var ie *store.InsufficientError
	if !errors.As(err, &ie) || ie.Limit != store.LimitKeyTotal || ie.Requested != 750 {
		t.Errorf("Reserve() under a lowered cap = %v, want a key_total refusal for 750", err)
	}
	if err := ls.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// TestLeasesPeriodBoundary: a lease counts against the cap period it was
// placed in and admits no call of the next one; the next period's calls
// draw on a lease placed in it.
func TestLeasesPeriodBoundary(t *testing.T) {
	l, db, clk := newLedger(t)
	topUp(t, l, "t1", 1_000_000)
	// 100 ms before the end of an hour.
	end := clk.Now().Truncate(time.Hour).Add(time.Hour)
	clk.Advance(end.Sub(clk.Now()) - 100*time.Millisecond)
	ls := newLeases(t, l, db, leaseConfig("r1"), clk.Now)
	key := &ledger.Key{ID: "sk-1", PeriodCap: big.NewInt(1000), Period: time.Hour}
	charge := func() {
		t.Helper()
		tk, err := ls.Reserve(t.Context(), call("c", key))
		if err != nil {
			t.Fatal(err)
		}
		ls.Charge(tk, chat.Usage{PromptTokens: 1000, CompletionTokens: 1000}, mini, nil)
	}
	charge() // 750 of the hour's 1,000
	if _, err := ls.Reserve(t.Context(), call("c", key)); err == nil {
		t.Fatal("a second call of 750 fit an hour's cap of 1,000")
	}
	clk.Advance(200 * time.Millisecond) // the next hour
	charge()
	if err := ls.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	u, err := l.KeyUsage(t.Context(), *key)
	if err != nil {
		t.Fatal(err)
	}
	if u.Spent != 1500 || u.PeriodSpent != 750 || !u.PeriodStart.Equal(end) {
		t.Errorf("KeyUsage() = %+v; want 1500 spent, 750 of it in the hour from %v", u, end)
	}
}
