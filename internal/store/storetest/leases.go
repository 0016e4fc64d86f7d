package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/llm4agents/llm4agents/internal/store"
)

// LeaseStore is what the lease suite needs of a backend: the ledger the
// leases are holds of, the leases, and the receipts a draw keeps.
type LeaseStore interface {
	store.Ledger
	store.Leases
	store.Receipts
}

// OpenLeases opens two independent handles on one new, empty database, as
// OpenLedger does.
type OpenLeases func(t *testing.T, now func() time.Time) (a, b LeaseStore)

// RunLeases runs the store.Leases conformance suite. Every subtest ends with
// an audit of the books (see Books), so a lease's entries keep every
// invariant a call's hold keeps.
//
// Beyond the interface's comments, the suite pins down: a lease's hold is
// placed and refused exactly like a call's (balance, then caps); a draw
// refused in a batch leaves the others recorded; a receipt of a refused draw
// is not kept; and draws racing from two handles never take a lease past
// its amount.
func RunLeases(t *testing.T, open OpenLeases) {
	tests := []struct {
		name string
		run  func(*leaseEnv)
	}{
		{"DrawAndClose", testLeaseDrawAndClose},
		{"CloseUndrawn", testLeaseCloseUndrawn},
		{"Refusals", testLeaseRefusals},
		{"NotACallHold", testLeaseNotACallHold},
		{"Receipts", testLeaseReceipts},
		{"LeafConflict", testLeaseLeafConflict},
		{"CostSaturates", testLeaseCostSaturates},
		{"Expiry", testLeaseExpiry},
		{"OpenLeases", testLeaseOpenLeases},
		{"InvalidArguments", testLeaseInvalid},
		{"Race/Draws", testLeaseRaceDraws},
		{"Issue", testLeaseIssue},
		{"IssueInvalid", testLeaseIssueInvalid},
		{"LostCalls", testLeaseLostCalls},
		{"Race/IssueAndDraw", testLeaseRaceIssue},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := &clock{now: start}
			a, b := open(t, c.Now)
			e := &leaseEnv{ledgerEnv: ledgerEnv{t: t, ctx: t.Context(), clock: c, a: a, b: b, books: NewBooks(b)}, la: a, lb: b}
			tc.run(e)
			e.audit()
		})
	}
}

type leaseEnv struct {
	ledgerEnv
	la, lb LeaseStore
}

func leaseReq(id string, amount int64, key *store.KeyLimits) store.HoldRequest {
	return store.HoldRequest{ID: id, Owner: alice, Asset: usdc, Amount: amount, TTL: ttl, Key: key, Lease: true}
}

// draw records draws through handle a and returns the per-draw results.
func (e *leaseEnv) draw(draws ...store.LeaseDraw) []error {
	e.t.Helper()
	errs, err := e.la.Draw(e.ctx, draws)
	if err != nil {
		e.t.Fatalf("Draw(%d draws): %v", len(draws), err)
	}
	if len(errs) != len(draws) {
		e.t.Fatalf("Draw(%d draws) returned %d results", len(draws), len(errs))
	}
	return errs
}

func (e *leaseEnv) close(id string) (store.Hold, store.Entry) {
	e.t.Helper()
	h, en, err := e.la.CloseLease(e.ctx, id)
	if err != nil {
		e.t.Fatalf("CloseLease(%q): %v", id, err)
	}
	return h, en
}

func (e *leaseEnv) wantResults(what string, got []error, want ...error) {
	e.t.Helper()
	for i := range want {
		if (want[i] == nil) != (got[i] == nil) || (want[i] != nil && !errors.Is(got[i], want[i])) {
			e.t.Errorf("%s: draw %d = %v, want %v", what, i, got[i], want[i])
		}
	}
}

func testLeaseDrawAndClose(e *leaseEnv) {
	e.credit("c1", alice, usdc, 10*dollar)
	key := &store.KeyLimits{ID: "sk-1", TotalCap: 8 * dollar, PeriodCap: 6 * dollar, Period: time.Hour}
	l := e.hold(leaseReq("lease-1", 5*dollar, key))
	if !l.Lease || l.Drawn != 0 || l.State != store.HoldHeld {
		e.t.Errorf("Hold(lease) = %+v", l)
	}
	e.balances(5*dollar, 5*dollar)
	errs := e.draw(
		store.LeaseDraw{LeaseID: "lease-1", CallID: "call-1", Position: 1, Charged: dollar, Cost: dollar},
		store.LeaseDraw{LeaseID: "lease-1", CallID: "call-2", Position: 2, Charged: 200_000, Cost: 300_000},
		store.LeaseDraw{LeaseID: "lease-1", CallID: "call-3", Position: 3},
	)
	e.wantResults("Draw", errs, nil, nil, nil)
	// A replay of the batch changes nothing.
	e.wantResults("Draw again", e.draw(store.LeaseDraw{LeaseID: "lease-1", CallID: "call-2", Position: 2, Charged: 200_000, Cost: 300_000}), nil)
	h := e.holdRecord("lease-1")
	if h.Drawn != 1_200_000 || h.DrawnCost != 1_300_000 || h.State != store.HoldHeld {
		e.t.Errorf("lease after draws = %+v, want drawn 1200000 of cost 1300000, held", h)
	}
	// Draws stay held until the lease ends: the balance the buyer can
	// spend elsewhere never counts them twice.
	e.balances(5*dollar, 5*dollar)
	if u := e.keyUsage("sk-1", time.Hour); u.Held != 5*dollar || u.Spent != 0 || u.PeriodHeld != 5*dollar {
		e.t.Errorf("KeyUsage() with the lease open = %+v", u)
	}

	h, en := e.close("lease-1")
	if h.State != store.HoldCaptured || h.Captured != 1_200_000 || h.Actual != 1_300_000 || h.Loss != 100_000 {
		e.t.Errorf("CloseLease() = %+v, want captured 1200000, actual 1300000, loss 100000", h)
	}
	wantPostings := map[string]int64{
		store.HeldAccount(alice): -5 * dollar, store.UserAccount(alice): 5*dollar - 1_200_000,
		store.AccountRevenue: 1_300_000, store.AccountLoss: -100_000,
	}
	if en.Kind != store.EntryCapture || len(en.Postings) != len(wantPostings) {
		e.t.Errorf("CloseLease() entry = %+v", en)
	}
	for _, p := range en.Postings {
		if wantPostings[p.Account] != p.Delta {
			e.t.Errorf("posting to %s = %d, want %d", p.Account, p.Delta, wantPostings[p.Account])
		}
	}
	e.balances(10*dollar-1_200_000, 0)
	if u := e.keyUsage("sk-1", time.Hour); u.Held != 0 || u.Spent != 1_200_000 || u.PeriodSpent != 1_200_000 {
		e.t.Errorf("KeyUsage() after close = %+v", u)
	}
	h2, en2 := e.close("lease-1")
	if h2.State != h.State || h2.ResolvedSeq != h.ResolvedSeq || en2.Seq != en.Seq {
		e.t.Errorf("CloseLease() again = %+v, %+v; want the first close", h2, en2)
	}
	// A replay is answered as it was, even once its lease has ended.
	e.wantResults("Draw again after the close", e.draw(store.LeaseDraw{LeaseID: "lease-1", CallID: "call-2", Position: 2, Charged: 200_000, Cost: 300_000}), nil)
	e.wantResults("Draw again after the close, other arguments", e.draw(store.LeaseDraw{LeaseID: "lease-1", CallID: "call-2", Position: 2, Charged: 1, Cost: 1}), store.ErrConflict)
}

func testLeaseCloseUndrawn(e *leaseEnv) {
	e.credit("c1", alice, usdc, dollar)
	e.hold(leaseReq("lease-1", 400_000, nil))
	h, en := e.close("lease-1")
	if h.State != store.HoldReleased || en.Kind != store.EntryRelease || h.Captured != 0 {
		e.t.Errorf("CloseLease() of an undrawn lease = %+v, %+v; want a release", h, en)
	}
	e.balances(dollar, 0)
}

func testLeaseRefusals(e *leaseEnv) {
	e.credit("c1", alice, usdc, dollar)
	e.hold(leaseReq("lease-1", 500_000, nil))
	e.hold(leaseReq("lease-2", 100_000, nil))
	e.draw(store.LeaseDraw{LeaseID: "lease-1", CallID: "call-1", Position: 1, Charged: 100_000, Cost: 100_000})
	errs := e.draw(
		// Over the lease's amount: 100000 drawn + 400001 > 500000.
		store.LeaseDraw{LeaseID: "lease-1", CallID: "over", Position: 2, Charged: 400_001, Cost: 400_001},
		store.LeaseDraw{LeaseID: "lease-1", CallID: "fits", Position: 3, Charged: 400_000, Cost: 400_000},
		store.LeaseDraw{LeaseID: "no-such-lease", CallID: "lost", Position: 1, Charged: 1, Cost: 1},
		// call-1 again with another charge, and another call at its position.
		store.LeaseDraw{LeaseID: "lease-1", CallID: "call-1", Position: 1, Charged: 1, Cost: 1},
		store.LeaseDraw{LeaseID: "lease-1", CallID: "call-9", Position: 1, Charged: 0, Cost: 0},
		// call-1 on another lease.
		store.LeaseDraw{LeaseID: "lease-2", CallID: "call-1", Position: 1, Charged: 100_000, Cost: 100_000},
		store.LeaseDraw{LeaseID: "lease-2", CallID: "call-2", Position: 1, Charged: 50_000, Cost: 60_000},
	)
	e.wantResults("Draw", errs, store.ErrConflict, nil, store.ErrNotFound, store.ErrConflict, store.ErrConflict, store.ErrConflict, nil)
	if h := e.holdRecord("lease-1"); h.Drawn != 500_000 {
		e.t.Errorf("lease-1 drawn = %d, want 500000", h.Drawn)
	}
	if h := e.holdRecord("lease-2"); h.Drawn != 50_000 || h.DrawnCost != 60_000 {
		e.t.Errorf("lease-2 = %+v, want drawn 50000 of 60000", h)
	}
	// Draws of one batch count against each other: each fits the lease
	// alone, not both.
	e.hold(leaseReq("lease-3", 300_000, nil))
	errs = e.draw(
		store.LeaseDraw{LeaseID: "lease-3", CallID: "part-1", Position: 1, Charged: 200_000, Cost: 200_000},
		store.LeaseDraw{LeaseID: "lease-3", CallID: "part-2", Position: 2, Charged: 200_000, Cost: 200_000},
		store.LeaseDraw{LeaseID: "lease-3", CallID: "rest", Position: 3, Charged: 100_000, Cost: 150_000},
	)
	e.wantResults("Draw of parts that fit alone", errs, nil, store.ErrConflict, nil)
	if h := e.holdRecord("lease-3"); h.Drawn != 300_000 || h.DrawnCost != 350_000 {
		e.t.Errorf("lease-3 = %+v, want drawn 300000 of 350000", h)
	}
	e.close("lease-3")
	// A closed lease takes no more draws.
	e.close("lease-2")
	e.wantResults("Draw on a closed lease", e.draw(store.LeaseDraw{LeaseID: "lease-2", CallID: "late", Position: 2, Charged: 1, Cost: 1}), store.ErrConflict)
	e.close("lease-1")
	e.balances(dollar-850_000, 0)
}

func testLeaseNotACallHold(e *leaseEnv) {
	e.credit("c1", alice, usdc, dollar)
	e.hold(holdReq("call-hold", alice, 100_000))
	e.hold(leaseReq("lease-1", 100_000, nil))
	e.wantResults("Draw on a call's hold", e.draw(store.LeaseDraw{LeaseID: "call-hold", CallID: "c", Position: 1, Charged: 1, Cost: 1}), store.ErrConflict)
	if _, _, err := e.la.CloseLease(e.ctx, "call-hold"); !errors.Is(err, store.ErrConflict) {
		e.t.Errorf("CloseLease(a call's hold) = %v, want ErrConflict", err)
	}
	if _, _, err := e.la.CloseLease(e.ctx, "nothing"); !errors.Is(err, store.ErrNotFound) {
		e.t.Errorf("CloseLease(unknown) = %v, want ErrNotFound", err)
	}
	if _, _, err := e.a.Capture(e.ctx, "lease-1", 1); !errors.Is(err, store.ErrConflict) {
		e.t.Errorf("Capture(a lease) = %v, want ErrConflict", err)
	}
	if _, _, err := e.a.Release(e.ctx, "lease-1"); !errors.Is(err, store.ErrConflict) {
		e.t.Errorf("Release(a lease) = %v, want ErrConflict", err)
	}
	// The same id asked as a call's hold is another operation.
	r := leaseReq("lease-1", 100_000, nil)
	r.Lease = false
	if _, err := e.a.Hold(e.ctx, r); !errors.Is(err, store.ErrConflict) {
		e.t.Errorf("Hold(the lease's id, not a lease) = %v, want ErrConflict", err)
	}
	if h := e.hold(leaseReq("lease-1", 100_000, nil)); !h.Lease || h.State != store.HoldHeld {
		e.t.Errorf("Hold(lease) again = %+v", h)
	}
	e.release("call-hold")
	e.close("lease-1")
}

func leaseReceipt(callID string, envelope string) *store.StoredReceipt {
	return &store.StoredReceipt{RequestID: callID, Owner: alice, KeyID: "sk-1", Envelope: []byte(envelope)}
}

func testLeaseReceipts(e *leaseEnv) {
	e.credit("c1", alice, usdc, dollar)
	e.hold(leaseReq("lease-1", 500_000, nil))
	if err := e.la.PutReceipt(e.ctx, *leaseReceipt("taken", `{"other":1}`)); err != nil {
		e.t.Fatal(err)
	}
	errs := e.draw(
		store.LeaseDraw{LeaseID: "lease-1", CallID: "call-1", Position: 1, Charged: 1000, Cost: 1000, Receipt: leaseReceipt("call-1", `{"r":1}`)},
		// Its receipt conflicts with the one kept: the draw is refused too.
		store.LeaseDraw{LeaseID: "lease-1", CallID: "taken", Position: 2, Charged: 1000, Cost: 1000, Receipt: leaseReceipt("taken", `{"r":2}`)},
		// Its draw is refused: its receipt is not kept.
		store.LeaseDraw{LeaseID: "lease-1", CallID: "over", Position: 3, Charged: 600_000, Cost: 600_000, Receipt: leaseReceipt("over", `{"r":3}`)},
	)
	e.wantResults("Draw", errs, nil, store.ErrConflict, store.ErrConflict)
	r, err := e.lb.Receipt(e.ctx, "call-1")
	if err != nil || string(r.Envelope) != `{"r":1}` || r.Seq <= 0 {
		e.t.Errorf("Receipt(call-1) = %+v, %v; want the drawn call's receipt with a drawn seq", r, err)
	}
	if _, err := e.lb.Receipt(e.ctx, "over"); !errors.Is(err, store.ErrNotFound) {
		e.t.Errorf("Receipt(over) = %v, want ErrNotFound: its draw was refused", err)
	}
	if h := e.holdRecord("lease-1"); h.Drawn != 1000 {
		e.t.Errorf("drawn = %d, want 1000", h.Drawn)
	}
	// Nothing of the refused draws stands: their positions are free.
	e.wantResults("Draw at the refused positions", e.draw(
		store.LeaseDraw{LeaseID: "lease-1", CallID: "next-2", Position: 2, Charged: 1000, Cost: 1000, Receipt: leaseReceipt("next-2", `{"r":4}`)},
		store.LeaseDraw{LeaseID: "lease-1", CallID: "next-3", Position: 3, Charged: 1000, Cost: 1000},
	), nil, nil)
	e.close("lease-1")
}

// logAppender is the part of store.ReceiptLog the leaf conflict needs.
type logAppender interface {
	AppendLog(ctx context.Context, entries []store.LogEntry) error
}

func testLeaseLeafConflict(e *leaseEnv) {
	la, ok := e.la.(logAppender)
	if !ok {
		e.t.Skip("the backend keeps no receipt log")
	}
	e.credit("c1", alice, usdc, dollar)
	e.hold(leaseReq("lease-1", 500_000, nil))
	if err := la.AppendLog(e.ctx, []store.LogEntry{{RequestID: "call-2", Leaf: []byte("another leaf")}}); err != nil {
		e.t.Fatal(err)
	}
	withLeaf := func(id string) *store.StoredReceipt {
		r := leaseReceipt(id, `{"r":"`+id+`"}`)
		r.Leaf = []byte("leaf of " + id)
		return r
	}
	errs := e.draw(
		store.LeaseDraw{LeaseID: "lease-1", CallID: "call-1", Position: 1, Charged: 10, Cost: 10, Receipt: withLeaf("call-1")},
		store.LeaseDraw{LeaseID: "lease-1", CallID: "call-2", Position: 2, Charged: 10, Cost: 10, Receipt: withLeaf("call-2")},
		store.LeaseDraw{LeaseID: "lease-1", CallID: "call-3", Position: 3, Charged: 10, Cost: 10, Receipt: withLeaf("call-3")},
	)
	// Refused alone, as a receipt that conflicts is; the others stand.
	e.wantResults("Draw", errs, nil, store.ErrConflict, nil)
	if _, err := e.lb.Receipt(e.ctx, "call-2"); !errors.Is(err, store.ErrNotFound) {
		e.t.Errorf("Receipt(call-2) = %v, want ErrNotFound: its draw was refused", err)
	}
	if h := e.holdRecord("lease-1"); h.Drawn != 20 {
		e.t.Errorf("drawn = %d, want 20", h.Drawn)
	}
	// Nothing of the refused draw stands: its position is free.
	e.wantResults("Draw at the refused position", e.draw(
		store.LeaseDraw{LeaseID: "lease-1", CallID: "call-4", Position: 2, Charged: 10, Cost: 10, Receipt: withLeaf("call-4")}), nil)
	e.close("lease-1")
}

func testLeaseCostSaturates(e *leaseEnv) {
	// A lease's total cost stops at MaxAmount: what is above it is loss
	// that no book needs, and the sums stay inside int64.
	e.credit("c1", alice, usdc, dollar)
	e.hold(leaseReq("lease-1", 500_000, nil))
	for i := range 3 {
		errs := e.draw(store.LeaseDraw{LeaseID: "lease-1", CallID: fmt.Sprintf("call-%d", i), Position: int64(i + 1), Charged: 100, Cost: store.MaxAmount})
		e.wantResults("Draw", errs, nil)
	}
	// And within one batch.
	errs := e.draw(
		store.LeaseDraw{LeaseID: "lease-1", CallID: "batch-1", Position: 4, Charged: 100, Cost: store.MaxAmount},
		store.LeaseDraw{LeaseID: "lease-1", CallID: "batch-2", Position: 5, Charged: 100, Cost: store.MaxAmount},
	)
	e.wantResults("Draw of a batch", errs, nil, nil)
	if h := e.holdRecord("lease-1"); h.Drawn != 500 || h.DrawnCost != store.MaxAmount {
		e.t.Errorf("lease = drawn %d cost %d, want 500 and MaxAmount", h.Drawn, h.DrawnCost)
	}
	if h, _ := e.close("lease-1"); h.Captured != 500 || h.Actual != store.MaxAmount {
		e.t.Errorf("CloseLease() = %+v", h)
	}
	e.balances(dollar-500, 0)
}

func testLeaseExpiry(e *leaseEnv) {
	e.credit("c1", alice, usdc, dollar)
	key := &store.KeyLimits{ID: "sk-1", TotalCap: dollar, PeriodCap: store.NoCap}
	for _, id := range []string{"drawn", "undrawn"} {
		r := leaseReq(id, 300_000, key)
		r.TTL = time.Minute
		e.hold(r)
	}
	e.draw(store.LeaseDraw{LeaseID: "drawn", CallID: "call-1", Position: 1, Charged: 100_000, Cost: 120_000})
	e.clock.Advance(time.Minute)
	if n := e.sweep(e.b, 10); n != 2 {
		e.t.Errorf("sweep ended %d leases, want 2", n)
	}
	// The replica died: what it recorded is billed, the rest returns.
	if h := e.holdRecord("drawn"); h.State != store.HoldCaptured || h.Captured != 100_000 || h.Loss != 20_000 {
		e.t.Errorf("swept drawn lease = %+v, want captured 100000 with loss 20000", h)
	}
	if h := e.holdRecord("undrawn"); h.State != store.HoldExpired {
		e.t.Errorf("swept undrawn lease = %+v, want expired", h)
	}
	e.balances(dollar-100_000, 0)
	if u := e.keyUsage("sk-1", 0); u.Held != 0 || u.Spent != 100_000 {
		e.t.Errorf("KeyUsage() after the sweep = %+v", u)
	}
	e.wantResults("Draw after the sweep", e.draw(store.LeaseDraw{LeaseID: "drawn", CallID: "late", Position: 2, Charged: 1, Cost: 1}), store.ErrConflict)
	if h, _ := e.close("drawn"); h.State != store.HoldCaptured || h.Captured != 100_000 {
		e.t.Errorf("CloseLease() after the sweep = %+v, want the sweep's capture", h)
	}
	if h, _ := e.close("undrawn"); h.State != store.HoldExpired {
		e.t.Errorf("CloseLease() after the sweep = %+v, want the expiry", h)
	}
}

func testLeaseOpenLeases(e *leaseEnv) {
	e.credit("c1", alice, usdc, dollar)
	e.credit("c2", bob, usdc, dollar)
	e.hold(leaseReq("lease-1", 100_000, nil))
	e.clock.Advance(time.Millisecond)
	e.hold(leaseReq("lease-2", 200_000, &store.KeyLimits{ID: "sk-1", TotalCap: store.NoCap, PeriodCap: store.NoCap}))
	e.hold(holdReq("a-call", alice, 1000))
	r := leaseReq("bobs", 100, nil)
	r.Owner = bob
	e.hold(r)
	e.draw(store.LeaseDraw{LeaseID: "lease-2", CallID: "call-1", Position: 1, Charged: 50, Cost: 60})
	e.close("lease-1")
	e.hold(leaseReq("lease-3", 300, nil))
	book, err := e.lb.OpenLeases(e.ctx, alice, usdc)
	if err != nil {
		e.t.Fatal(err)
	}
	got := book.Leases
	var ids []string
	for _, h := range got {
		ids = append(ids, h.ID)
	}
	if fmt.Sprint(ids) != "[lease-2 lease-3]" || got[0].Drawn != 50 || got[0].KeyID != "sk-1" {
		e.t.Errorf("OpenLeases(alice) = %+v, want lease-2 (drawn 50, key sk-1) then lease-3", got)
	}
	// lease-1 drew nothing and went back; lease-2, lease-3 and a-call are held.
	wantHeld := int64(200_000 + 300 + 1000)
	if book.Held != wantHeld || book.Available != dollar-wantHeld {
		e.t.Errorf("OpenLeases(alice) balances = available %d, held %d; want %d, %d", book.Available, book.Held, dollar-wantHeld, wantHeld)
	}
	if got, err := e.lb.OpenLeases(e.ctx, alice, eurc); err != nil || len(got.Leases) != 0 || got.Available != 0 || got.Held != 0 {
		e.t.Errorf("OpenLeases(alice, eurc) = %v, %v; want none", got, err)
	}
	_, err = e.lb.OpenLeases(e.ctx, "Not An Owner", usdc)
	noSentinel(e.t, "OpenLeases(invalid owner)", err)
	for _, id := range []string{"lease-2", "lease-3", "bobs"} {
		e.close(id)
	}
	e.release("a-call")
}

func testLeaseInvalid(e *leaseEnv) {
	e.credit("c1", alice, usdc, dollar)
	e.hold(leaseReq("lease-1", 500_000, nil))
	ok := store.LeaseDraw{LeaseID: "lease-1", CallID: "call-1", Position: 1, Charged: 1, Cost: 1}
	many := make([]store.LeaseDraw, store.MaxDrawBatch+1)
	for i := range many {
		many[i] = ok
		many[i].CallID, many[i].Position = fmt.Sprintf("call-%d", i), int64(i+1)
	}
	for _, tc := range []struct {
		name  string
		draws []store.LeaseDraw
	}{
		{"none", nil},
		{"too many", many},
		{"bad lease id", []store.LeaseDraw{{LeaseID: "a b", CallID: "c", Position: 1}}},
		{"bad call id", []store.LeaseDraw{{LeaseID: "lease-1", CallID: "", Position: 1}}},
		{"position 0", []store.LeaseDraw{{LeaseID: "lease-1", CallID: "c", Position: 0}}},
		{"position too big", []store.LeaseDraw{{LeaseID: "lease-1", CallID: "c", Position: store.MaxLeasePosition + 1}}},
		{"negative charge", []store.LeaseDraw{{LeaseID: "lease-1", CallID: "c", Position: 1, Charged: -1, Cost: 0}}},
		{"cost below charge", []store.LeaseDraw{{LeaseID: "lease-1", CallID: "c", Position: 1, Charged: 2, Cost: 1}}},
		{"cost too big", []store.LeaseDraw{{LeaseID: "lease-1", CallID: "c", Position: 1, Charged: 1, Cost: store.MaxAmount + 1}}},
		{"receipt of another call", []store.LeaseDraw{{LeaseID: "lease-1", CallID: "c", Position: 1, Receipt: leaseReceipt("d", "{}")}}},
		{"invalid receipt", []store.LeaseDraw{{LeaseID: "lease-1", CallID: "c", Position: 1, Receipt: leaseReceipt("c", "")}}},
		{"one bad of two", []store.LeaseDraw{ok, {LeaseID: "lease-1", CallID: "c", Position: 0}}},
	} {
		_, err := e.la.Draw(e.ctx, tc.draws)
		noSentinel(e.t, "Draw("+tc.name+")", err)
	}
	if h := e.holdRecord("lease-1"); h.Drawn != 0 {
		e.t.Errorf("invalid draws drew %d", h.Drawn)
	}
	_, _, err := e.la.CloseLease(e.ctx, "a b")
	noSentinel(e.t, "CloseLease(invalid id)", err)
	e.close("lease-1")
}

func testLeaseRaceDraws(e *leaseEnv) {
	const amount, workers, each = 100_000, 8, 10
	e.credit("c1", alice, usdc, dollar)
	e.hold(leaseReq("lease-1", amount, nil))
	// 80 draws of 1,500 race for 100,000: 66 fit.
	var mu sync.Mutex
	drawn := int64(0)
	var wg sync.WaitGroup
	for w := range workers {
		h := e.la
		if w%2 == 1 {
			h = e.lb
		}
		wg.Go(func() {
			for i := range each {
				n := int64(w*each + i + 1)
				errs, err := h.Draw(e.ctx, []store.LeaseDraw{{LeaseID: "lease-1", CallID: fmt.Sprintf("call-%d", n), Position: n, Charged: 1500, Cost: 1500}})
				if err != nil {
					e.t.Errorf("Draw: %v", err)
					return
				}
				switch {
				case errs[0] == nil:
					mu.Lock()
					drawn += 1500
					mu.Unlock()
				case !errors.Is(errs[0], store.ErrConflict):
					e.t.Errorf("Draw refused with %v, want ErrConflict", errs[0])
				}
			}
		})
	}
	wg.Wait()
	if drawn != 66*1500 {
		e.t.Errorf("racing draws drew %d, want %d (every draw that fit, none past the lease)", drawn, 66*1500)
	}
	if h := e.holdRecord("lease-1"); h.Drawn != drawn {
		e.t.Errorf("lease drawn = %d, the callers were told %d", h.Drawn, drawn)
	}
	e.close("lease-1")
	e.balances(dollar-drawn, 0)
}

func (e *leaseEnv) issue(marks ...store.LeaseMark) []error {
	e.t.Helper()
	errs, err := e.la.Issue(e.ctx, marks)
	if err != nil {
		e.t.Fatalf("Issue(%d marks): %v", len(marks), err)
	}
	if len(errs) != len(marks) {
		e.t.Fatalf("Issue(%d marks) returned %d results", len(marks), len(errs))
	}
	return errs
}

func (e *leaseEnv) wantIssued(id string, want int64) {
	e.t.Helper()
	if h := e.holdRecord(id); h.Issued != want {
		e.t.Errorf("lease %s issued = %d, want %d", id, h.Issued, want)
	}
}

func testLeaseIssue(e *leaseEnv) {
	e.credit("c1", alice, usdc, dollar)
	r := leaseReq("lease-1", 500_000, nil)
	r.Issued = 8
	if h := e.hold(r); h.Issued != 8 {
		e.t.Errorf("Hold(lease, issued 8) = %+v, want issued 8", h)
	}
	e.hold(leaseReq("lease-2", 100_000, nil))
	e.wantIssued("lease-2", 0)
	// A repeated Hold does not compare the mark: it returns the lease as
	// it stands.
	r.Issued = 3
	if h := e.hold(r); h.Issued != 8 {
		e.t.Errorf("Hold(lease) again = issued %d, want 8 as it stands", h.Issued)
	}
	e.hold(holdReq("call-hold", alice, 1000))

	// Raised, never lowered: a lower or equal mark and a repeat are no-ops.
	for _, step := range []struct {
		mark, want int64
	}{{20, 20}, {20, 20}, {12, 20}, {21, 21}, {store.MaxLeasePosition, store.MaxLeasePosition}, {5, store.MaxLeasePosition}} {
		e.wantResults(fmt.Sprintf("Issue(%d)", step.mark), e.issue(store.LeaseMark{LeaseID: "lease-2", Mark: step.mark}), nil)
		e.wantIssued("lease-2", step.want)
	}
	// One batch: each mark stands or is refused alone, and two marks of one
	// lease leave the higher.
	e.close("lease-2")
	errs := e.issue(
		store.LeaseMark{LeaseID: "lease-1", Mark: 40},
		store.LeaseMark{LeaseID: "lease-2", Mark: store.MaxLeasePosition}, // closed
		store.LeaseMark{LeaseID: "no-such-lease", Mark: 1},
		store.LeaseMark{LeaseID: "call-hold", Mark: 1},
		store.LeaseMark{LeaseID: "lease-1", Mark: 30},
	)
	e.wantResults("Issue of a batch", errs, nil, store.ErrConflict, store.ErrNotFound, store.ErrConflict, nil)
	e.wantIssued("lease-1", 40)
	e.wantIssued("call-hold", 0)
	// A closed lease keeps the mark it had: a late mark changes nothing.
	e.wantIssued("lease-2", store.MaxLeasePosition)
	e.close("lease-1")
	e.wantResults("Issue on a closed lease", e.issue(store.LeaseMark{LeaseID: "lease-1", Mark: 41}), store.ErrConflict)
	e.wantIssued("lease-1", 40)
	e.release("call-hold")
}

func testLeaseIssueInvalid(e *leaseEnv) {
	e.credit("c1", alice, usdc, dollar)
	e.hold(leaseReq("lease-1", 500_000, nil))
	many := make([]store.LeaseMark, store.MaxDrawBatch+1)
	for i := range many {
		many[i] = store.LeaseMark{LeaseID: "lease-1", Mark: int64(i + 1)}
	}
	for _, tc := range []struct {
		name  string
		marks []store.LeaseMark
	}{
		{"none", nil},
		{"too many", many},
		{"bad lease id", []store.LeaseMark{{LeaseID: "a b", Mark: 1}}},
		{"mark 0", []store.LeaseMark{{LeaseID: "lease-1", Mark: 0}}},
		{"negative mark", []store.LeaseMark{{LeaseID: "lease-1", Mark: -5}}},
		{"mark too big", []store.LeaseMark{{LeaseID: "lease-1", Mark: store.MaxLeasePosition + 1}}},
		{"huge mark", []store.LeaseMark{{LeaseID: "lease-1", Mark: 1 << 62}}},
		{"one bad of two", []store.LeaseMark{{LeaseID: "lease-1", Mark: 9}, {LeaseID: "lease-1", Mark: -1}}},
	} {
		_, err := e.la.Issue(e.ctx, tc.marks)
		noSentinel(e.t, "Issue("+tc.name+")", err)
	}
	e.wantIssued("lease-1", 0)
	for _, tc := range []struct {
		name   string
		issued int64
		lease  bool
	}{
		{"negative", -1, true},
		{"too big", store.MaxLeasePosition + 1, true},
		{"on a call's hold", 1, false},
	} {
		r := leaseReq("lease-2", 1000, nil)
		r.Issued, r.Lease = tc.issued, tc.lease
		_, err := e.la.Hold(e.ctx, r)
		noSentinel(e.t, "Hold(issued "+tc.name+")", err)
	}
	if _, err := e.lb.HoldRecord(e.ctx, "lease-2"); !errors.Is(err, store.ErrNotFound) {
		e.t.Errorf("HoldRecord(lease-2) = %v, want ErrNotFound: every hold was invalid", err)
	}
	e.close("lease-1")
}

// testLeaseLostCalls: the sweep ending a lease reports the positions up to
// its issued mark without a draw, once; a lease closed by its replica, one
// with no mark, and one whose every issued position drew report nothing.
func testLeaseLostCalls(e *leaseEnv) {
	e.credit("c1", alice, usdc, dollar)
	key := &store.KeyLimits{ID: "sk-1", TotalCap: store.NoCap, PeriodCap: store.NoCap}
	lease := func(id string, issued int64) {
		r := leaseReq(id, 100_000, key)
		r.TTL, r.Issued = time.Minute, issued
		e.hold(r)
	}
	draws := func(id string, positions ...int64) {
		e.t.Helper()
		var ds []store.LeaseDraw
		for _, p := range positions {
			ds = append(ds, store.LeaseDraw{LeaseID: id, CallID: fmt.Sprintf("%s/%d", id, p), Position: p, Charged: 100, Cost: 100})
		}
		for i, err := range e.draw(ds...) {
			if err != nil {
				e.t.Fatalf("draw %d on %s: %v", i, id, err)
			}
		}
	}
	lease("dead", 8)
	e.wantResults("Issue", e.issue(store.LeaseMark{LeaseID: "dead", Mark: 10}), nil)
	draws("dead", 1, 2, 3, 5, 8, 9) // 10 issued, 6 drawn: 4 lost at most
	lease("closed", 10)
	draws("closed", 1, 2)
	lease("unmarked", 0) // placed before marks were kept: no bound
	draws("unmarked", 1)
	lease("all-drawn", 3)
	draws("all-drawn", 1, 2, 3)
	lease("beyond", 4) // a draw past the mark leaves the mark's positions
	draws("beyond", 1, 6)
	e.close("closed")
	if h := e.holdRecord("closed"); h.Issued != 10 || h.State != store.HoldCaptured {
		e.t.Errorf("closed lease = %+v", h)
	}

	e.clock.Advance(time.Minute)
	swept := e.sweepLost(e.b, 10)
	if swept.Released != 4 {
		e.t.Errorf("sweep released %d, want 4 (dead, unmarked, all-drawn, beyond)", swept.Released)
	}
	got := map[string]store.LostCalls{}
	for _, l := range swept.Lost {
		got[l.LeaseID] = l
	}
	want := map[string]store.LostCalls{
		"dead":   {LeaseID: "dead", KeyID: "sk-1", Calls: 4},
		"beyond": {LeaseID: "beyond", KeyID: "sk-1", Calls: 3},
	}
	if len(got) != len(want) || len(swept.Lost) != len(want) {
		e.t.Errorf("sweep lost = %+v, want %+v", swept.Lost, want)
	}
	for id, w := range want {
		if got[id] != w {
			e.t.Errorf("sweep lost of %s = %+v, want %+v", id, got[id], w)
		}
	}
	if h := e.holdRecord("dead"); h.State != store.HoldCaptured || h.Captured != 600 {
		e.t.Errorf("swept dead lease = %+v, want its 6 draws captured", h)
	}
	// Ended once: the next sweep, on either handle, reports nothing.
	for _, h := range []store.Ledger{e.a, e.b} {
		if again := e.sweepLost(h, 10); again.Released != 0 || len(again.Lost) != 0 {
			e.t.Errorf("sweep again = %+v, want nothing", again)
		}
	}
	// Closing a swept lease returns the sweep's end and counts nothing.
	if h, _ := e.close("dead"); h.State != store.HoldCaptured {
		e.t.Errorf("CloseLease(dead) after the sweep = %+v", h)
	}
}

// testLeaseRaceIssue races marks from one handle against draws and a
// close from the other on the same leases: no deadlock, marks never go
// down, and a lease once closed takes no mark.
func testLeaseRaceIssue(e *leaseEnv) {
	const leases, rounds = 4, 40
	e.credit("c1", alice, usdc, dollar)
	ids := make([]string, leases)
	for i := range ids {
		ids[i] = fmt.Sprintf("lease-%d", i)
		e.hold(leaseReq(ids[i], 100_000, nil))
	}
	errc := make(chan error, 2*rounds+1)
	var wg sync.WaitGroup
	wg.Go(func() {
		for r := range rounds {
			// Each mark batch names the leases in another order.
			marks := make([]store.LeaseMark, leases)
			for i := range marks {
				marks[i] = store.LeaseMark{LeaseID: ids[(i+r)%leases], Mark: int64(r + 1)}
			}
			results, err := e.la.Issue(e.ctx, marks)
			if err != nil {
				errc <- fmt.Errorf("issue: %w", err)
				return
			}
			for i, rerr := range results {
				if rerr != nil && (marks[i].LeaseID != ids[0] || !errors.Is(rerr, store.ErrConflict)) {
					errc <- fmt.Errorf("Issue(%s) = %w", marks[i].LeaseID, rerr)
				}
			}
		}
	})
	wg.Go(func() {
		for r := range rounds {
			draws := make([]store.LeaseDraw, leases)
			for i := range draws {
				id := ids[leases-1-(i+r)%leases]
				draws[i] = store.LeaseDraw{LeaseID: id, CallID: fmt.Sprintf("%s/%d", id, r+1), Position: int64(r + 1), Charged: 1, Cost: 1}
			}
			if _, err := e.lb.Draw(e.ctx, draws); err != nil {
				errc <- fmt.Errorf("draw: %w", err)
				return
			}
			if r == rounds/2 {
				if _, _, err := e.lb.CloseLease(e.ctx, ids[0]); err != nil {
					errc <- fmt.Errorf("CloseLease: %w", err)
				}
			}
		}
	})
	wg.Wait()
	close(errc)
	for err := range errc {
		e.t.Error(err)
	}
	for _, id := range ids[1:] {
		e.wantIssued(id, rounds)
		e.close(id)
	}
	if h := e.holdRecord(ids[0]); h.Issued > rounds || h.State != store.HoldCaptured {
		e.t.Errorf("lease closed during the race = %+v", h)
	}
}
