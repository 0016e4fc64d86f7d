package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/llm4agents/llm4agents/internal/store"
)

// CaptureStore is what the capture-with-receipt suite needs of a backend.
type CaptureStore interface {
	store.Ledger
	store.Receipts
	store.ReceiptCapturer
}

// OpenCapture opens two independent handles on one new, empty database, as
// OpenLedger does.
type OpenCapture func(t *testing.T, now func() time.Time) (a, b CaptureStore)

// RunCaptureWithReceipt runs the store.ReceiptCapturer conformance suite.
// Every subtest ends with an audit of the books (see Books).
//
// Beyond the interface's comments, the suite pins down: the receipt is kept
// under the capture's entry; a refused capture calls receiptOf never and
// keeps nothing; a receipt refused (taken id, queued leaf of another, or
// invalid) is rolled back alone, its leaf and row included, and the capture
// stands; a repeated capture keeps the receipt the first one kept; and
// captures of one owner at once, which a store may batch into one write,
// each keep their own receipt, one refused among them taking none of the
// others with it.
func RunCaptureWithReceipt(t *testing.T, open OpenCapture) {
	tests := []struct {
		name string
		run  func(*captureEnv)
	}{
		{"Kept", testCaptureKept},
		{"Replay", testCaptureReplay},
		{"NoReceipt", testCaptureNoReceipt},
		{"Refused", testCaptureRefused},
		{"ReceiptTaken", testCaptureReceiptTaken},
		{"LeafConflict", testCaptureLeafConflict},
		{"ReceiptInvalid", testCaptureReceiptInvalid},
		{"Concurrent", testCaptureConcurrent},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := &clock{now: start}
			a, b := open(t, c.Now)
			e := &captureEnv{ledgerEnv: ledgerEnv{t: t, ctx: t.Context(), clock: c, a: a, b: b, books: NewBooks(b)}, ca: a, cb: b}
			tc.run(e)
			e.audit()
		})
	}
}

type captureEnv struct {
	ledgerEnv
	ca, cb CaptureStore
}

// receiptFor returns a receiptOf that names the capture's entry, as the
// gateway's does, and counts its calls in n.
func receiptFor(id, envelope string, n *int) func(store.Hold, store.Entry) *store.StoredReceipt {
	return func(h store.Hold, e store.Entry) *store.StoredReceipt {
		*n++
		return &store.StoredReceipt{RequestID: id, Owner: h.Owner, KeyID: "sk-1", Seq: e.Seq, Envelope: []byte(envelope)}
	}
}

// captureWith captures call-1, the hold every test but Refused places.
func (e *captureEnv) captureWith(actual int64, receiptOf func(store.Hold, store.Entry) *store.StoredReceipt) store.CaptureResult {
	e.t.Helper()
	res, err := e.ca.CaptureWithReceipt(e.ctx, "call-1", actual, receiptOf)
	if err != nil {
		e.t.Fatalf("CaptureWithReceipt(call-1, %d): %v", actual, err)
	}
	return res
}

func (e *captureEnv) noReceipt(id string) {
	e.t.Helper()
	if r, err := e.cb.Receipt(e.ctx, id); !errors.Is(err, store.ErrNotFound) {
		e.t.Errorf("Receipt(%q) = %+v, %v; want ErrNotFound", id, r, err)
	}
}

func testCaptureKept(e *captureEnv) {
	e.credit("c1", alice, usdc, dollar)
	e.hold(holdReq("call-1", alice, 300_000))
	n := 0
	res := e.captureWith(120_000, receiptFor("call-1", `{"r":1}`, &n))
	if n != 1 || res.ReceiptErr != nil || res.Receipt == nil {
		e.t.Fatalf("CaptureWithReceipt = %+v after %d calls of receiptOf; want one receipt kept", res, n)
	}
	if res.Hold.State != store.HoldCaptured || res.Hold.Captured != 120_000 || res.Entry.Kind != store.EntryCapture {
		e.t.Errorf("capture = %+v, %+v", res.Hold, res.Entry)
	}
	got, err := e.cb.Receipt(e.ctx, "call-1")
	if err != nil || got.Seq != res.Entry.Seq || string(got.Envelope) != `{"r":1}` {
		e.t.Errorf("Receipt(call-1) = %+v, %v; want the envelope at seq %d", got, err, res.Entry.Seq)
	}
	e.balances(dollar-120_000, 0)
}

func testCaptureReplay(e *captureEnv) {
	e.credit("c1", alice, usdc, dollar)
	e.hold(holdReq("call-1", alice, 300_000))
	n := 0
	first := e.captureWith(120_000, receiptFor("call-1", `{"r":1}`, &n))
	// The same receipt again: kept as it is.
	again := e.captureWith(120_000, receiptFor("call-1", `{"r":1}`, &n))
	if again.Entry.Seq != first.Entry.Seq || again.ReceiptErr != nil {
		e.t.Errorf("repeated capture = %+v; want entry %d and the receipt kept", again, first.Entry.Seq)
	}
	// A receipt signed again (another envelope): refused, the first stays.
	other := e.captureWith(120_000, receiptFor("call-1", `{"r":2}`, &n))
	if !errors.Is(other.ReceiptErr, store.ErrConflict) || other.Receipt != nil || other.Entry.Seq != first.Entry.Seq {
		e.t.Errorf("capture with another receipt = %+v; want the capture and ErrConflict for the receipt", other)
	}
	if got, _ := e.cb.Receipt(e.ctx, "call-1"); string(got.Envelope) != `{"r":1}` {
		e.t.Errorf("Receipt(call-1) = %s, want the first", got.Envelope)
	}
	e.balances(dollar-120_000, 0)
}

func testCaptureNoReceipt(e *captureEnv) {
	e.credit("c1", alice, usdc, dollar)
	e.hold(holdReq("call-1", alice, 300_000))
	res := e.captureWith(50_000, func(store.Hold, store.Entry) *store.StoredReceipt { return nil })
	if res.Hold.Captured != 50_000 || res.Receipt != nil || res.ReceiptErr != nil {
		e.t.Errorf("CaptureWithReceipt without a receipt = %+v", res)
	}
	e.noReceipt("call-1")
	e.balances(dollar-50_000, 0)
}

func testCaptureRefused(e *captureEnv) {
	e.credit("c1", alice, usdc, dollar)
	e.hold(holdReq("released", alice, 100_000))
	e.release("released")
	e.hold(leaseReq("lease-1", 100_000, nil))
	for _, tc := range []struct {
		id   string
		want error
	}{
		{"released", store.ErrConflict},
		{"lease-1", store.ErrConflict},
		{"no-such-hold", store.ErrNotFound},
	} {
		n := 0
		_, err := e.ca.CaptureWithReceipt(e.ctx, tc.id, 10, receiptFor(tc.id, `{"r":1}`, &n))
		if !errors.Is(err, tc.want) || n != 0 {
			e.t.Errorf("CaptureWithReceipt(%s) = %v after %d receiptOf calls; want %v and none", tc.id, err, n, tc.want)
		}
		e.noReceipt(tc.id)
	}
	if _, err := e.ca.CaptureWithReceipt(e.ctx, "released", -1, nil); err == nil {
		e.t.Error("CaptureWithReceipt with a negative cost succeeded")
	}
	e.a.(store.Leases).CloseLease(e.ctx, "lease-1") //nolint:errcheck // the books below say whether it closed
	e.balances(dollar, 0)
}

func testCaptureReceiptTaken(e *captureEnv) {
	e.credit("c1", alice, usdc, dollar)
	e.hold(holdReq("call-1", alice, 300_000))
	if err := e.ca.PutReceipt(e.ctx, store.StoredReceipt{RequestID: "call-1", Owner: alice, Envelope: []byte(`{"x402":1}`)}); err != nil {
		e.t.Fatal(err)
	}
	n := 0
	res := e.captureWith(70_000, receiptFor("call-1", `{"r":1}`, &n))
	if !errors.Is(res.ReceiptErr, store.ErrConflict) || res.Hold.Captured != 70_000 {
		e.t.Errorf("CaptureWithReceipt over a kept receipt = %+v; want the capture and ErrConflict", res)
	}
	if got, _ := e.cb.Receipt(e.ctx, "call-1"); string(got.Envelope) != `{"x402":1}` {
		e.t.Errorf("Receipt(call-1) = %s, want the one kept before", got.Envelope)
	}
	e.balances(dollar-70_000, 0)
}

func testCaptureLeafConflict(e *captureEnv) {
	la, ok := e.ca.(logAppender)
	if !ok {
		e.t.Skip("the backend keeps no receipt log")
	}
	e.credit("c1", alice, usdc, dollar)
	e.hold(holdReq("call-1", alice, 300_000))
	if err := la.AppendLog(e.ctx, []store.LogEntry{{RequestID: "call-1", Leaf: []byte("another leaf")}}); err != nil {
		e.t.Fatal(err)
	}
	n := 0
	withLeaf := func(h store.Hold, en store.Entry) *store.StoredReceipt {
		r := receiptFor("call-1", `{"r":1}`, &n)(h, en)
		r.Leaf = []byte("leaf of call-1")
		return r
	}
	res := e.captureWith(70_000, withLeaf)
	if !errors.Is(res.ReceiptErr, store.ErrConflict) || res.Receipt != nil || res.Hold.Captured != 70_000 {
		e.t.Errorf("CaptureWithReceipt with a conflicting leaf = %+v; want the capture and ErrConflict", res)
	}
	// The receipt's row went with its leaf: no kept receipt misses the log.
	e.noReceipt("call-1")
	e.balances(dollar-70_000, 0)
}

func testCaptureReceiptInvalid(e *captureEnv) {
	e.credit("c1", alice, usdc, dollar)
	e.hold(holdReq("call-1", alice, 300_000))
	res := e.captureWith(70_000, func(h store.Hold, en store.Entry) *store.StoredReceipt {
		return &store.StoredReceipt{RequestID: "call-1", Owner: h.Owner, Seq: en.Seq} // no envelope
	})
	if res.ReceiptErr == nil || res.Receipt != nil || res.Hold.Captured != 70_000 {
		e.t.Errorf("CaptureWithReceipt with an invalid receipt = %+v; want the capture and an error", res)
	}
	e.noReceipt("call-1")
	e.balances(dollar-70_000, 0)
}

// testCaptureConcurrent captures calls of one owner at once, so that the
// store may batch them, with a receipt (and a leaf, where the store keeps a
// log) each; one call's id holds another receipt already.
func testCaptureConcurrent(e *captureEnv) {
	const calls, taken, cost = 24, "call-7", 10_000
	_, withLeaves := e.ca.(logAppender)
	e.credit("c1", alice, usdc, dollar)
	for i := range calls {
		e.hold(holdReq(fmt.Sprintf("call-%d", i), alice, 30_000))
	}
	if err := e.ca.PutReceipt(e.ctx, store.StoredReceipt{RequestID: taken, Owner: alice, Envelope: []byte(`{"x402":1}`)}); err != nil {
		e.t.Fatal(err)
	}
	results := make([]store.CaptureResult, calls)
	errs := make([]error, calls)
	var wg sync.WaitGroup
	for i := range calls {
		wg.Go(func() {
			id := fmt.Sprintf("call-%d", i)
			results[i], errs[i] = e.ca.CaptureWithReceipt(e.ctx, id, cost, func(h store.Hold, en store.Entry) *store.StoredReceipt {
				r := &store.StoredReceipt{RequestID: id, Owner: h.Owner, KeyID: "sk-1", Seq: en.Seq, Envelope: []byte(`{"call":"` + id + `"}`)}
				if withLeaves {
					r.Leaf = []byte("leaf of " + id)
				}
				return r
			})
		})
	}
	wg.Wait()
	for i, res := range results {
		id := fmt.Sprintf("call-%d", i)
		if errs[i] != nil {
			e.t.Errorf("CaptureWithReceipt(%s): %v", id, errs[i])
			continue
		}
		if res.Hold.State != store.HoldCaptured || res.Hold.Captured != cost {
			e.t.Errorf("capture of %s = %+v", id, res.Hold)
		}
		got, err := e.cb.Receipt(e.ctx, id)
		if id == taken {
			if !errors.Is(res.ReceiptErr, store.ErrConflict) || res.Receipt != nil || string(got.Envelope) != `{"x402":1}` {
				e.t.Errorf("capture of %s over a kept receipt = %+v, kept %s; want ErrConflict and the first kept", id, res, got.Envelope)
			}
			continue
		}
		if res.ReceiptErr != nil || res.Receipt == nil {
			e.t.Errorf("capture of %s = %+v; want its receipt kept", id, res)
		}
		if err != nil || got.Seq != res.Entry.Seq || string(got.Envelope) != `{"call":"`+id+`"}` {
			e.t.Errorf("Receipt(%s) = %+v, %v; want its own at seq %d", id, got, err, res.Entry.Seq)
		}
	}
	if withLeaves {
		// A leaf queued under an id refuses another: every kept receipt's
		// leaf is queued, and the refused one's is not.
		la := e.ca.(logAppender)
		for i := range calls {
			id := fmt.Sprintf("call-%d", i)
			err := la.AppendLog(e.ctx, []store.LogEntry{{RequestID: id, Leaf: []byte("another leaf")}})
			if queued := errors.Is(err, store.ErrConflict); queued != (id != taken) {
				e.t.Errorf("AppendLog(%s, another leaf) = %v; want ErrConflict only for a kept receipt's id", id, err)
			}
		}
	}
	e.balances(dollar-calls*cost, 0)
}
