package postgres

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/internal/store/storetest"
)

// TestLeases runs the credit lease conformance suite with two DB values
// (two pools) on one fresh schema, as two processes would share it.
func TestLeases(t *testing.T) {
	storetest.RunLeases(t, func(t *testing.T, now func() time.Time) (a, b storetest.LeaseStore) {
		_, dsn := freshSchema(t)
		return open(t, dsn, now, nil), open(t, dsn, now, nil)
	})
}

// testLeases credits testOwner and places the leases ids of amount each
// through db.
func testLeases(t *testing.T, db *DB, amount int64, ids ...string) {
	t.Helper()
	ctx := t.Context()
	if _, err := db.Credit(ctx, "c1", testOwner, testAsset, store.MaxAmount); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		r := store.HoldRequest{ID: id, Owner: testOwner, Asset: testAsset, Amount: amount, TTL: time.Minute, Lease: true}
		if _, err := db.Hold(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
}

func drawReceipt(callID, envelope string) *store.StoredReceipt {
	return &store.StoredReceipt{RequestID: callID, Owner: testOwner, Envelope: []byte(envelope), Leaf: []byte("leaf " + envelope)}
}

// TestLeaseDrawRacesOnCallID draws each call on two leases at once, from two
// pools: the leases' locks do not order the two, so one of them finds the
// call id (and its receipt and leaf) taken when it writes and runs its
// batch again. Exactly one draw of each call is recorded, with its own
// receipt and leaf, and the other refused without a trace.
func TestLeaseDrawRacesOnCallID(t *testing.T) {
	ctx := t.Context()
	_, dsn := freshSchema(t)
	log, logs := logger()
	a, b := open(t, dsn, nil, log), open(t, dsn, nil, log)
	testLeases(t, a, 1_000_000, "lease-a", "lease-b")
	const calls, charge = 40, 100
	won := map[string]int{}
	for i := range calls {
		call := fmt.Sprintf("call-%d", i)
		var wg sync.WaitGroup
		errs := map[string]error{}
		var mu sync.Mutex
		for _, side := range []struct {
			db    *DB
			lease string
		}{{a, "lease-a"}, {b, "lease-b"}} {
			wg.Go(func() {
				res, err := side.db.Draw(ctx, []store.LeaseDraw{{LeaseID: side.lease, CallID: call, Position: int64(i + 1),
					Charged: charge, Cost: charge, Receipt: drawReceipt(call, side.lease)}})
				if err != nil {
					t.Errorf("Draw(%s on %s): %v", call, side.lease, err)
					return
				}
				mu.Lock()
				defer mu.Unlock()
				errs[side.lease] = res[0]
			})
		}
		wg.Wait()
		var winner string
		for lease, err := range errs {
			switch {
			case err == nil && winner == "":
				winner = lease
			case err == nil:
				t.Fatalf("%s was drawn on both leases", call)
			case !errors.Is(err, store.ErrConflict):
				t.Errorf("Draw(%s on %s) refused with %v, want ErrConflict", call, lease, err)
			}
		}
		if winner == "" {
			t.Fatalf("%s was drawn on neither lease: %v", call, errs)
		}
		won[winner]++
		r, err := b.Receipt(ctx, call)
		if err != nil || string(r.Envelope) != winner {
			t.Errorf("Receipt(%s) = %q, %v; want the receipt of its draw on %s", call, r.Envelope, err, winner)
		}
	}
	for _, lease := range []string{"lease-a", "lease-b"} {
		h, err := a.HoldRecord(ctx, lease)
		if err != nil {
			t.Fatal(err)
		}
		if want := int64(won[lease]) * charge; h.Drawn != want || h.DrawnCost != want {
			t.Errorf("%s drew %d of cost %d, want %d", lease, h.Drawn, h.DrawnCost, want)
		}
	}
	var leaves int
	conn := rawConn(t, ctx, dsn)
	defer func() { _ = conn.Close(ctx) }()
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM log_entries WHERE leaf = convert_to('leaf ' || (
    SELECT lease_id FROM ledger_lease_draws WHERE call_id = request_id), 'UTF8')`).Scan(&leaves); err != nil {
		t.Fatal(err)
	}
	if leaves != calls {
		t.Errorf("%d leaves queued are their draw's, want %d", leaves, calls)
	}
	// Timing decides how often the write finds the id taken rather than
	// the read: both are correct, the count says what was exercised.
	t.Logf("%d batches ran again", strings.Count(logs.String(), "raced a concurrent write"))
}

// TestLeaseCloseRacesDraws closes a lease while batches draw on it from
// another pool: the close captures exactly the draws that were recorded,
// and every draw after it is refused.
func TestLeaseCloseRacesDraws(t *testing.T) {
	ctx := t.Context()
	_, dsn := freshSchema(t)
	a, b := open(t, dsn, nil, nil), open(t, dsn, nil, nil)
	testLeases(t, a, 1_000_000, "lease-1")
	var drawn int64
	started, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for i := range 200 {
			if i == 10 {
				close(started) // the close races the batches from here on
			}
			batch := make([]store.LeaseDraw, 5)
			for j := range batch {
				n := int64(i*len(batch) + j + 1)
				batch[j] = store.LeaseDraw{LeaseID: "lease-1", CallID: fmt.Sprintf("call-%d", n), Position: n, Charged: 10, Cost: 11}
			}
			res, err := b.Draw(ctx, batch)
			if err != nil {
				t.Errorf("Draw: %v", err)
				return
			}
			for _, err := range res {
				switch {
				case err == nil:
					drawn += 10
				case !errors.Is(err, store.ErrConflict):
					t.Errorf("Draw refused with %v, want ErrConflict", err)
				}
			}
		}
	}()
	select {
	case <-started:
	case <-done:
		t.Fatal("the draws stopped before the close")
	}
	h, e, err := a.CloseLease(ctx, "lease-1")
	if err != nil {
		t.Fatal(err)
	}
	<-done
	if h.State != store.HoldCaptured || h.Captured != drawn || h.Actual != drawn/10*11 {
		t.Errorf("CloseLease() = %+v; the draws recorded charged %d", h, drawn)
	}
	if e.Kind != store.EntryCapture {
		t.Errorf("CloseLease() entry = %+v, want a capture", e)
	}
	if bal, err := a.Balance(ctx, store.UserAccount(testOwner), testAsset); err != nil || bal != store.MaxAmount-drawn {
		t.Errorf("Balance() = %d, %v; want %d", bal, err, store.MaxAmount-drawn)
	}
}
