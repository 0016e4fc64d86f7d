package postgres

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/internal/store/storetest"
)

// TestLedger runs the ledger conformance suite, property test included, with
// two DB values (two pools) on one fresh schema, as two processes would
// share it.
func TestLedger(t *testing.T) {
	storetest.RunLedger(t, func(t *testing.T, now func() time.Time) (a, b store.Ledger) {
		_, dsn := freshSchema(t)
		return open(t, dsn, now, nil), open(t, dsn, now, nil)
	})
}

// BenchmarkLedger runs the ledger benchmarks every backend shares, on the
// server's clock, one fresh schema per run.
func BenchmarkLedger(b *testing.B) {
	storetest.RunLedgerBenchmarks(b, func(b *testing.B) store.Ledger {
		_, dsn := freshSchema(b)
		return open(b, dsn, nil, nil)
	})
}

// BenchmarkLedgerOneCaller measures the latency of each write of the
// credit path with one caller, so no queueing: a Hold through a key with
// both caps, then its Capture, on the server's clock.
func BenchmarkLedgerOneCaller(b *testing.B) {
	_, dsn := freshSchema(b)
	db := open(b, dsn, nil, nil)
	ctx := b.Context()
	if _, err := db.Credit(ctx, "c0", testOwner, testAsset, store.MaxAmount); err != nil {
		b.Fatal(err)
	}
	key := &store.KeyLimits{ID: "k1", TotalCap: store.NoCap, PeriodCap: store.MaxAmount, Period: 24 * time.Hour}
	var hold, capture []time.Duration
	i := 0
	for b.Loop() {
		id := fmt.Sprintf("h%d", i)
		i++
		t0 := time.Now()
		if _, err := db.Hold(ctx, store.HoldRequest{ID: id, Owner: testOwner, Asset: testAsset, Amount: 30_000, TTL: time.Minute, Key: key}); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if _, _, err := db.Capture(ctx, id, 12_345); err != nil {
			b.Fatal(err)
		}
		hold, capture = append(hold, t1.Sub(t0)), append(capture, time.Since(t1))
	}
	for name, lat := range map[string][]time.Duration{"hold": hold, "capture": capture} {
		slices.Sort(lat)
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, name+"-p50-ms")
		b.ReportMetric(float64(lat[(len(lat)*99)/100].Microseconds())/1000, name+"-p99-ms")
	}
}

const (
	testOwner = "0x857b06519e91e3a54538791bdbb0e22373e36b66"
	testAsset = "eip155:84532/erc20:0x036cbd53842c5426634e7929541ec2318f3dcf7e"
)

// TestLedgerServerClock checks the production path, DB.Now nil: the
// server's clock stamps entries and holds and places a hold in its cap
// window.
func TestLedgerServerClock(t *testing.T) {
	ctx := t.Context()
	_, dsn := freshSchema(t)
	db := open(t, dsn, nil, nil)
	before := serverMs(t, db)
	e, err := db.Credit(ctx, "c1", testOwner, testAsset, 1000)
	if err != nil {
		t.Fatal(err)
	}
	const period = time.Hour
	h, err := db.Hold(ctx, store.HoldRequest{ID: "h1", Owner: testOwner, Asset: testAsset, Amount: 10, TTL: time.Minute,
		Key: &store.KeyLimits{ID: "k1", TotalCap: store.NoCap, PeriodCap: 100, Period: period}})
	if err != nil {
		t.Fatal(err)
	}
	after := serverMs(t, db)
	for what, ts := range map[string]time.Time{"entry": e.CreatedAt, "hold": h.CreatedAt} {
		if ms := ts.UnixMilli(); ms < before || ms > after {
			t.Errorf("%s CreatedAt = %d, want the server's time, in [%d, %d]", what, ms, before, after)
		}
	}
	if !h.ExpiresAt.Equal(h.CreatedAt.Add(time.Minute)) || !h.KeyPeriodStart.Equal(store.PeriodStart(h.CreatedAt, period)) {
		t.Errorf("hold = %+v, want ExpiresAt CreatedAt + 1m and the window of CreatedAt", h)
	}
	u, err := db.KeyUsage(ctx, "k1", testAsset, period)
	if err != nil {
		t.Fatal(err)
	}
	// The hour may have turned since the hold.
	if start := store.PeriodStart(time.UnixMilli(serverMs(t, db)), period); !u.PeriodStart.Equal(start) && !u.PeriodStart.Equal(h.KeyPeriodStart) {
		t.Errorf("KeyUsage() window starts %v, want %v", u.PeriodStart, start)
	}
}

// TestLedgerCreditOverflow checks that a credit never takes an owner's user
// plus held balance past int64, so that no release can overflow later. The
// balance is set near the limit by hand: reaching it with credits of at most
// store.MaxAmount would take thousands of them.
func TestLedgerCreditOverflow(t *testing.T) {
	ctx := t.Context()
	_, dsn := freshSchema(t)
	db := open(t, dsn, nil, nil)
	if _, err := db.Credit(ctx, "c1", testOwner, testAsset, 1000); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Hold(ctx, store.HoldRequest{ID: "h1", Owner: testOwner, Asset: testAsset, Amount: 400, TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	// user 600, held 400: lift user so that user + held = MaxInt64 - 10.
	admin(t, dsn, `UPDATE ledger_balances SET balance = $1 WHERE account = $2`,
		int64(math.MaxInt64-10-400), store.UserAccount(testOwner))
	_, err := db.Credit(ctx, "c2", testOwner, testAsset, 11)
	if err == nil || errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrInsufficient) {
		t.Fatalf("Credit() past int64 = %v, want an error that is no sentinel", err)
	}
	if _, err := db.Credit(ctx, "c2", testOwner, testAsset, 10); err != nil {
		t.Fatalf("Credit() to exactly int64's maximum: %v", err)
	}
	_, e, err := db.Release(ctx, "h1")
	if err != nil {
		t.Fatalf("Release(): %v", err)
	}
	if got := e.Postings[1]; got.Account != store.UserAccount(testOwner) || got.BalanceAfter != math.MaxInt64 {
		t.Errorf("release posting = %+v, want the user balance at MaxInt64", got)
	}
}

// TestLedgerHostileIDs checks that ids made of every character an id may
// hold, quotes, backslashes and SQL syntax included, are stored and read
// back as they are.
func TestLedgerHostileIDs(t *testing.T) {
	ctx := t.Context()
	_, dsn := freshSchema(t)
	db := open(t, dsn, nil, nil)
	var all strings.Builder
	for c := byte('!'); c < 0x7f; c++ {
		all.WriteByte(c)
	}
	ids := []string{`x');DROP/**/TABLE/**/ledger_entries;--`, `a'b"c\d%_e$1`, all.String()}
	for i, id := range ids {
		if _, err := db.Credit(ctx, id, testOwner, testAsset, 100); err != nil {
			t.Fatalf("Credit(%q): %v", id, err)
		}
		key := &store.KeyLimits{ID: id, TotalCap: 1000, PeriodCap: 1000, Period: time.Hour}
		h, err := db.Hold(ctx, store.HoldRequest{ID: id, Owner: testOwner, Asset: testAsset, Amount: 10, TTL: time.Minute, Key: key})
		if err != nil || h.ID != id || h.KeyID != id {
			t.Fatalf("Hold(%q) = %+v, %v", id, h, err)
		}
		if _, _, err := db.Capture(ctx, id, 7); err != nil {
			t.Fatalf("Capture(%q): %v", id, err)
		}
		if u, err := db.KeyUsage(ctx, id, testAsset, time.Hour); err != nil || u.Spent != 7 || u.PeriodSpent != 7 {
			t.Errorf("KeyUsage(%q) = %+v, %v", id, u, err)
		}
		stmt, err := db.Entries(ctx, store.UserAccount(testOwner), testAsset, 0, store.MaxEntries)
		if err != nil || len(stmt) != 3*(i+1) {
			t.Fatalf("Entries() = %d entries, %v", len(stmt), err)
		}
		for _, e := range stmt[3*i:] {
			if e.OpID != id {
				t.Errorf("entry %+v, want op id %q", e, id)
			}
		}
	}
	if b, err := db.Balance(ctx, store.AccountRevenue, testAsset); err != nil || b != 7*int64(len(ids)) {
		t.Errorf("revenue = %d, %v", b, err)
	}
}

// TestLedgerClosedDB checks that every ledger method of a closed DB fails
// with an error saying so, never a panic and never a sentinel.
func TestLedgerClosedDB(t *testing.T) {
	_, dsn := freshSchema(t)
	db, err := Open(t.Context(), dsn, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	calls := map[string]func() error{
		"Credit": func() error { _, err := db.Credit(ctx, "c", testOwner, testAsset, 1); return err },
		"Hold": func() error {
			_, err := db.Hold(ctx, store.HoldRequest{ID: "h", Owner: testOwner, Asset: testAsset, TTL: time.Minute})
			return err
		},
		"Capture":             func() error { _, _, err := db.Capture(ctx, "h", 1); return err },
		"Release":             func() error { _, _, err := db.Release(ctx, "h"); return err },
		"ReleaseExpiredHolds": func() error { _, err := db.ReleaseExpiredHolds(ctx, 1); return err },
		"HoldRecord":          func() error { _, err := db.HoldRecord(ctx, "h"); return err },
		"Balance":             func() error { _, err := db.Balance(ctx, store.AccountRevenue, testAsset); return err },
		"Entries": func() error {
			_, err := db.Entries(ctx, store.AccountRevenue, testAsset, 0, 1)
			return err
		},
		"KeyUsage": func() error { _, err := db.KeyUsage(ctx, "k", testAsset, time.Hour); return err },
	}
	for name, call := range calls {
		err := call()
		if err == nil || !strings.Contains(err.Error(), "closed") {
			t.Errorf("%s on a closed DB = %v, want an error saying it is closed", name, err)
		}
		for _, s := range []error{store.ErrNotFound, store.ErrConflict, store.ErrInsufficient} {
			if errors.Is(err, s) {
				t.Errorf("%s on a closed DB = %v, a store sentinel", name, err)
			}
		}
	}
}

// waitFor runs fn in a goroutine and returns a channel that yields its
// error.
func waitFor(fn func() error) <-chan error {
	done := make(chan error, 1)
	go func() { done <- fn() }()
	return done
}

// blocked fails the test unless ch yields nothing for a while.
func blocked(t *testing.T, what string, ch <-chan error) {
	t.Helper()
	select {
	case err := <-ch:
		t.Fatalf("%s returned (%v) while it should wait", what, err)
	case <-time.After(300 * time.Millisecond):
	}
}

// returns fails the test unless ch yields nil soon.
func returns(t *testing.T, what string, ch <-chan error) {
	t.Helper()
	select {
	case err := <-ch:
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("%s did not return", what)
	}
}

// TestLedgerStatementsUnderLoad pages user and held statements while
// credits, holds and captures of several owners commit through two handles,
// each page starting after the last seq seen, and checks that the pages saw
// every entry: no entry of those accounts committed with a seq below one
// already read (store.Entry promises it for them, not for the system
// accounts).
func TestLedgerStatementsUnderLoad(t *testing.T) {
	ctx := t.Context()
	_, dsn := freshSchema(t)
	a, b := open(t, dsn, nil, nil), open(t, dsn, nil, nil)
	owners := []string{"0xa1", "0xa2", "0xa3", "0xa4"}
	accounts := []string{store.UserAccount(owners[0]), store.HeldAccount(owners[0]), store.UserAccount(owners[1]), store.HeldAccount(owners[1])}

	stop := make(chan struct{})
	var writers sync.WaitGroup
	errs := make(chan error, 16)
	for w := range 8 {
		l := []*DB{a, b}[w%2]
		owner := owners[(w/2)%len(owners)] // each owner through both handles
		writers.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				id := fmt.Sprintf("w%d-%d", w, i)
				if _, err := l.Credit(ctx, id, owner, testAsset, 100); err != nil {
					errs <- err
					return
				}
				if _, err := l.Hold(ctx, store.HoldRequest{ID: id, Owner: owner, Asset: testAsset, Amount: 60, TTL: time.Minute}); err != nil {
					errs <- err
					return
				}
				if _, _, err := l.Capture(ctx, id, 40); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	seen := map[string][]int64{}
	page := func(account string) error {
		s := seen[account]
		var after int64
		if len(s) > 0 {
			after = s[len(s)-1]
		}
		es, err := b.Entries(ctx, account, testAsset, after, 50)
		for _, e := range es {
			seen[account] = append(seen[account], e.Seq)
		}
		return err
	}
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		for _, acct := range accounts {
			if err := page(acct); err != nil {
				t.Fatal(err)
			}
		}
	}
	close(stop)
	writers.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for _, acct := range accounts {
		for {
			n := len(seen[acct])
			if err := page(acct); err != nil {
				t.Fatal(err)
			}
			if len(seen[acct]) == n {
				break
			}
		}
		var all []int64
		for after := int64(0); ; {
			es, err := b.Entries(ctx, acct, testAsset, after, store.MaxEntries)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range es {
				all = append(all, e.Seq)
			}
			if len(es) < store.MaxEntries {
				break
			}
			after = es[len(es)-1].Seq
		}
		if missed := len(all) - len(seen[acct]); missed != 0 {
			t.Errorf("%s: paging while writes committed saw %d of %d entries", acct, len(seen[acct]), len(all))
		}
		t.Logf("%s: %d entries", acct, len(all))
	}
}

// TestLedgerGroupCommit checks that concurrent writes of one owner through
// one DB share transactions (rows written by one transaction have one
// xmin), and that the lines are gone once the writes are done.
func TestLedgerGroupCommit(t *testing.T) {
	ctx := t.Context()
	_, dsn := freshSchema(t)
	db := open(t, dsn, nil, nil)
	if _, err := db.Credit(ctx, "c0", testOwner, testAsset, store.MaxAmount); err != nil {
		t.Fatal(err)
	}
	const n = 64
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			id := fmt.Sprintf("h%d", i)
			if _, err := db.Hold(ctx, store.HoldRequest{ID: id, Owner: testOwner, Asset: testAsset, Amount: 1, TTL: time.Minute}); err != nil {
				errs <- err
				return
			}
			if _, _, err := db.Capture(ctx, id, 1); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	var entries, txs int
	if err := db.pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT xmin::text) FROM ledger_entries`).Scan(&entries, &txs); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d entries in %d transactions", entries, txs)
	if entries != 2*n+1 || txs >= entries {
		t.Errorf("%d entries in %d transactions, want %d entries in fewer transactions", entries, txs, 2*n+1)
	}
	if n := db.lines.Len(); n != 0 {
		t.Errorf("%d lines left behind", n)
	}
}

// TestLedgerBatchFallback checks that when one statement of a batch fails,
// which rolls back the whole batch, every write runs again on its own: the
// others succeed, and each is applied once.
func TestLedgerBatchFallback(t *testing.T) {
	ctx := t.Context()
	_, dsn := freshSchema(t)
	db := open(t, dsn, nil, nil)
	if _, err := db.Credit(ctx, "c0", testOwner, testAsset, 1000); err != nil {
		t.Fatal(err)
	}
	// The owner's rows exist, so each statement decides at once.
	credit := func(id string, verdict *string, seq **int64) *lineWrite {
		var prevSeq, created, after *int64
		var prevArgs *string
		args := fmt.Sprintf("owner=%s asset=%s amount=%d", testOwner, testAsset, 10)
		return &lineWrite{sql: creditStmt,
			args: []any{nil, id, testOwner, testAsset, int64(10), store.UserAccount(testOwner), store.HeldAccount(testOwner), args},
			dest: []any{verdict, &prevSeq, &prevArgs, seq, &created, &after}}
	}
	var v1, v2 string
	var s1, s2 *int64
	var one int
	bad := &lineWrite{sql: `SELECT 1/0`, dest: []any{&one}}
	batch := []*lineWrite{credit("c1", &v1, &s1), bad, credit("c2", &v2, &s2)}
	db.send(ctx, batch)
	if batch[0].err != nil || batch[2].err != nil || v1 != verdictOK || v2 != verdictOK || s1 == nil || s2 == nil {
		t.Errorf("good writes of a failed batch: %v %q %v, %v %q %v; want both applied", batch[0].err, v1, s1, batch[2].err, v2, s2)
	}
	if bad.err == nil {
		t.Error("the failing write reported no error")
	}
	if b, err := db.Balance(ctx, store.UserAccount(testOwner), testAsset); err != nil || b != 1020 {
		t.Errorf("balance = %d, %v; want 1020: each good credit once", b, err)
	}
}

// TestLedgerQueuedWriteWithdrawn checks the two fates of a write whose
// context ends: one still queued behind its owner's write in flight is
// withdrawn and writes nothing; one already sent runs to its end, and its
// caller gets its outcome.
func TestLedgerQueuedWriteWithdrawn(t *testing.T) {
	ctx := t.Context()
	_, dsn := freshSchema(t)
	db := open(t, dsn, nil, nil)
	if _, err := db.Credit(ctx, "c0", testOwner, testAsset, 1000); err != nil {
		t.Fatal(err)
	}
	// Another process holds the owner's balance: the next write waits on
	// the server, and the one after it in the line.
	other := rawConn(t, ctx, dsn)
	t.Cleanup(func() { _ = other.Close(context.Background()) })
	if _, err := other.Exec(ctx, "BEGIN"); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Exec(ctx, `SELECT 1 FROM ledger_balances WHERE account = $1 FOR UPDATE`, store.UserAccount(testOwner)); err != nil {
		t.Fatal(err)
	}
	sentCtx, cancelSent := context.WithCancel(ctx)
	sent := waitFor(func() error {
		_, err := db.Hold(sentCtx, store.HoldRequest{ID: "sent", Owner: testOwner, Asset: testAsset, Amount: 100, TTL: time.Minute})
		return err
	})
	time.Sleep(200 * time.Millisecond) // the hold is on the server, waiting for the lock
	queuedCtx, cancelQueued := context.WithCancel(ctx)
	queued := waitFor(func() error {
		_, err := db.Hold(queuedCtx, store.HoldRequest{ID: "queued", Owner: testOwner, Asset: testAsset, Amount: 100, TTL: time.Minute})
		return err
	})
	blocked(t, "the queued Hold()", queued)
	cancelQueued()
	select {
	case err := <-queued:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("queued Hold() after its context ended = %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the queued Hold() did not return when its context ended")
	}
	cancelSent()
	blocked(t, "the sent Hold() after its context ended", sent)
	if _, err := other.Exec(ctx, "COMMIT"); err != nil {
		t.Fatal(err)
	}
	returns(t, "the sent Hold()", sent)
	if h, err := db.HoldRecord(ctx, "sent"); err != nil || h.State != store.HoldHeld {
		t.Errorf("HoldRecord(sent) = %+v, %v; want it held", h, err)
	}
	if _, err := db.HoldRecord(ctx, "queued"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("HoldRecord(queued) = %v, want ErrNotFound: a withdrawn write wrote nothing", err)
	}
	if diff := cmp.Diff([]int64{900, 100}, balances(t, db)); diff != "" {
		t.Errorf("user and held (-want +got):\n%s", diff)
	}
}

// balances returns testOwner's user and held balances.
func balances(t *testing.T, db *DB) []int64 {
	t.Helper()
	var out []int64
	for _, acct := range []string{store.UserAccount(testOwner), store.HeldAccount(testOwner)} {
		b, err := db.Balance(t.Context(), acct, testAsset)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

// TestLedgerSharedKeys runs holds, captures, releases and sweeps of owners
// that share keys, through two handles, and checks that none fails (a
// deadlock between two owners' writes through two keys is retried) and
// that the books and the caps hold.
func TestLedgerSharedKeys(t *testing.T) {
	ctx := t.Context()
	_, dsn := freshSchema(t)
	clk := &testClock{now: time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)}
	a, b := open(t, dsn, clk.Now, nil), open(t, dsn, clk.Now, nil)
	owners := []string{"0xa1", "0xa2", "0xa3"}
	keys := []store.KeyLimits{
		{ID: "shared-1", TotalCap: 50_000, PeriodCap: 20_000, Period: time.Hour},
		{ID: "shared-2", TotalCap: 40_000, PeriodCap: store.NoCap},
	}
	books := storetest.NewBooks(b)
	for _, o := range owners {
		books.Track(o, testAsset)
		if _, err := a.Credit(ctx, "c-"+o, o, testAsset, 1_000_000); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for w := range 12 {
		l := []*DB{a, b}[w%2]
		owner := owners[w%len(owners)]
		wg.Go(func() {
			for i := range 25 {
				id := fmt.Sprintf("w%d-%d", w, i)
				key := keys[(w+i)%len(keys)]
				_, err := l.Hold(ctx, store.HoldRequest{ID: id, Owner: owner, Asset: testAsset, Amount: 1_000, TTL: time.Minute, Key: &key})
				switch {
				case errors.Is(err, store.ErrInsufficient):
					continue
				case err != nil:
					errs <- err
					return
				}
				switch i % 3 {
				case 0:
					_, _, err = l.Capture(ctx, id, 700)
				case 1:
					_, _, err = l.Release(ctx, id)
				default:
					_, err = l.ReleaseExpiredHolds(ctx, 10)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for _, k := range keys {
		u, err := a.KeyUsage(ctx, k.ID, testAsset, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if u.Held+u.Spent > k.TotalCap || (k.PeriodCap != store.NoCap && u.PeriodHeld+u.PeriodSpent > k.PeriodCap) {
			t.Errorf("key %s over its caps: %+v", k.ID, u)
		}
	}
	clk.Advance(2 * time.Minute)
	for {
		swept, err := a.ReleaseExpiredHolds(ctx, 100)
		if err != nil {
			t.Fatal(err)
		}
		if swept.Released < 100 {
			break
		}
	}
	for _, err := range books.Check(ctx) {
		t.Error(err)
	}
	for _, o := range owners {
		if h, err := a.Balance(ctx, store.HeldAccount(o), testAsset); err != nil || h != 0 {
			t.Errorf("%s holds %d after the sweep, %v", o, h, err)
		}
	}
}

// TestLedgerReplayNotRefused checks that a hold racing another with its id,
// whose statement found the balance spent by that other one once it got the
// owner's lock, returns the other's hold rather than a refusal: its
// snapshot could not see the other's entry, so it reads it again.
func TestLedgerReplayNotRefused(t *testing.T) {
	ctx := t.Context()
	_, dsn := freshSchema(t)
	a, b := open(t, dsn, nil, nil), open(t, dsn, nil, nil)
	if _, err := a.Credit(ctx, "c0", testOwner, testAsset, 100); err != nil {
		t.Fatal(err)
	}
	other := rawConn(t, ctx, dsn)
	t.Cleanup(func() { _ = other.Close(context.Background()) })
	if _, err := other.Exec(ctx, "BEGIN"); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Exec(ctx, `SELECT 1 FROM ledger_balances WHERE account = $1 FOR UPDATE`, store.UserAccount(testOwner)); err != nil {
		t.Fatal(err)
	}
	r := store.HoldRequest{ID: "h1", Owner: testOwner, Asset: testAsset, Amount: 100, TTL: time.Minute}
	var ha, hb store.Hold
	doneA := waitFor(func() error { var err error; ha, err = a.Hold(ctx, r); return err })
	doneB := waitFor(func() error { var err error; hb, err = b.Hold(ctx, r); return err })
	blocked(t, "the holds", doneA)
	if _, err := other.Exec(ctx, "COMMIT"); err != nil {
		t.Fatal(err)
	}
	returns(t, "Hold() through a", doneA)
	returns(t, "Hold() through b", doneB)
	if diff := cmp.Diff(ha, hb); diff != "" {
		t.Errorf("the two holds differ (-a +b):\n%s", diff)
	}
}

// Crash test (D21): processes running random ledger operations on
// one schema are killed with SIGKILL at random moments, with statements and
// batches in flight; then the books must still balance, every operation
// must have been applied once or not at all, and a recovering process must
// be able to finish the work. The server finishes or rolls back what a
// killed process sent, on its own.

// crashChildEnv, when set to "seed", makes TestLedgerCrashChild run the
// crash workload on the schema crashDSNEnv names.
const (
	crashChildEnv   = "LLM4AGENTS_TEST_LEDGER_CRASH_CHILD"
	crashDSNEnv     = "LLM4AGENTS_TEST_LEDGER_CRASH_DSN"
	crashIntentsEnv = "LLM4AGENTS_TEST_LEDGER_CRASH_INTENTS"
)

// TestLedgerCrashChild is the process TestLedgerCrash kills; it does
// nothing in a normal run.
func TestLedgerCrashChild(t *testing.T) {
	seedText := os.Getenv(crashChildEnv)
	if seedText == "" {
		t.Skip("only run as the child of TestLedgerCrash")
	}
	seed, err := strconv.ParseUint(seedText, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(os.Getenv(crashIntentsEnv), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	db, err := Open(t.Context(), os.Getenv(crashDSNEnv), nil)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println("child running") // the parent starts its timer on this line
	// Runs until killed; the deadline only stops a child whose parent died.
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := storetest.RunLedgerCrashWorkload(ctx, db, seed, 8, f); err != nil {
		t.Fatal(err)
	}
}

// TestLedgerCrash kills five workload processes in a row, each at a random
// moment, on one schema, then checks what they left.
func TestLedgerCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and kills processes")
	}
	_, dsn := freshSchema(t)
	// The children name themselves, so that the check can wait for the
	// server to finish what they sent: a killed client's COMMIT can still
	// land after it is gone, and a check reading meanwhile would see a
	// transaction half of its reads before and half after.
	app := fmt.Sprintf("ledger-crash-%d", time.Now().UnixNano())
	childDSN := withParam(t, dsn, "application_name", app)
	intents := filepath.Join(t.TempDir(), "intents.jsonl")
	r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0)) //nolint:gosec // G404: random kill times, not secrets
	for run := range 5 {
		seed := uint64(run + 1)
		delay := time.Duration(500+r.IntN(1500)) * time.Millisecond
		killChild(t, childDSN, intents, seed, delay)
	}
	watcher := rawConn(t, t.Context(), dsn)
	t.Cleanup(func() { _ = watcher.Close(context.Background()) })
	untilServer(t, watcher, app, "the killed children's sessions to end",
		`SELECT count(*) = 0 FROM pg_stat_activity WHERE application_name = $1`)
	// The children ran on the server's clock; the check moves its own
	// clock, from now, past every hold's TTL.
	clk := &testClock{now: time.Now().Truncate(time.Millisecond)}
	db := open(t, dsn, clk.Now, nil)
	data, err := os.ReadFile(intents)
	if err != nil {
		t.Fatal(err)
	}
	storetest.CheckLedgerAfterCrash(t, db, clk.Advance, data)
}

// killChild starts the workload process on dsn and kills it delay after it
// says it runs.
func killChild(t *testing.T, dsn, intents string, seed uint64, delay time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestLedgerCrashChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d", crashChildEnv, seed), crashDSNEnv+"="+dsn, crashIntentsEnv+"="+intents)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	n, err := stdout.Read(buf)
	if err != nil || !strings.Contains(string(buf[:n]), "child running") {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("child %d did not start: %q %v; stderr: %s", seed, buf[:n], err, stderr.String())
	}
	time.Sleep(delay)
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		out, _ := stdout.Read(buf)
		t.Fatalf("child %d ended with %v before it was killed; stdout %q stderr: %s", seed, err, buf[:out], stderr.String())
	}
	t.Logf("child %d killed after %v", seed, delay)
}
