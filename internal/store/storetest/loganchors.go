package storetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/llm4agents/llm4agents/internal/store"
)

// OpenLogAnchors opens two independent handles (separate connection pools,
// as two processes would have) on one new, empty database. Both must stamp
// records by now. It registers the handles' cleanup with t.Cleanup and stops
// the test with t.Fatal if anything fails.
type OpenLogAnchors func(t *testing.T, now func() time.Time) (a, b store.LogAnchors)

// RunLogAnchors runs the store.LogAnchors conformance suite against the
// backend that open opens. Every subtest opens a database of its own; handle
// a writes, handle b reads back, and the races split their callers between
// both.
//
// Beyond the interface's comments, the suite pins down: a new store lists no
// anchor (an empty list, not nil); SentAt is the store's clock when the
// transaction was first recorded, to the millisecond, in UTC; a record
// repeated with addresses in another case is the same record; ConfirmAnchor
// of the block already confirmed succeeds and changes nothing; a refused call
// changes nothing.
func RunLogAnchors(t *testing.T, open OpenLogAnchors) {
	tests := []struct {
		name string
		run  func(*anchorsEnv)
	}{
		{"Record/Listed", testAnchorsListed},
		{"Record/Idempotent", testAnchorsIdempotent},
		{"Record/Conflict", testAnchorsConflict},
		{"Record/InvalidArguments", testAnchorsInvalid},
		{"Confirm", testAnchorsConfirm},
		{"Confirm/InvalidArguments", testAnchorsConfirmInvalid},
		{"List/InvalidArguments", testAnchorsListInvalid},
		{"Race/Record", testAnchorsRace},
		{"Closed", testAnchorsClosed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := &clock{now: start}
			a, b := open(t, c.Now)
			tc.run(&anchorsEnv{t: t, ctx: t.Context(), clock: c, a: a, b: b})
		})
	}
}

type anchorsEnv struct {
	t     *testing.T
	ctx   context.Context
	clock *clock
	a, b  store.LogAnchors
}

const (
	anchorNetwork  = "eip155:8453"
	anchorContract = "0xe7f1725E7734CE288F8367e1Bb143E90bb3F0512"
	anchorSender   = "0x23618e81E3f5cdF7f54C3d65f7FBc0aBf5B21E8f"
)

// anchorTx is the transaction hash the suite uses for n.
func anchorTx(n int) string { return fmt.Sprintf("0x%064x", n) }

// testAnchor is the anchor of transaction n, for the checkpoint of size.
func testAnchor(n int, size int64) store.LogAnchor {
	a := store.LogAnchor{TxHash: anchorTx(n), Size: size, Network: anchorNetwork, Contract: anchorContract, Sender: anchorSender}
	copy(a.Root[:], fmt.Appendf(nil, "root of %d in %d", size, n))
	return a
}

func (e *anchorsEnv) record(a store.LogAnchor) {
	e.t.Helper()
	if err := e.a.RecordAnchor(e.ctx, a); err != nil {
		e.t.Fatalf("RecordAnchor(%s): %v", a.TxHash, err)
	}
}

// list lists through b, at most MaxLogAnchors.
func (e *anchorsEnv) list() []store.LogAnchor {
	e.t.Helper()
	got, err := e.b.LogAnchors(e.ctx, store.MaxLogAnchors)
	if err != nil {
		e.t.Fatalf("LogAnchors: %v", err)
	}
	return got
}

// unchanged fails the test if the listing differs from before.
func (e *anchorsEnv) unchanged(what string, before []store.LogAnchor) {
	e.t.Helper()
	if diff := cmp.Diff(before, e.list()); diff != "" {
		e.t.Errorf("%s changed the anchors (-before +after):\n%s", what, diff)
	}
}

// sent is a as listed once recorded at t.
func sent(a store.LogAnchor, t time.Time) store.LogAnchor {
	a.SentAt = t
	return a
}

func testAnchorsListed(e *anchorsEnv) {
	if got := e.list(); got == nil || len(got) != 0 {
		e.t.Errorf("a new store lists %#v, want an empty list", got)
	}
	t0 := e.clock.Now()
	e.record(testAnchor(1, 3))
	t1 := e.clock.Advance(time.Second)
	e.record(testAnchor(2, 5))
	// Within one millisecond, the larger size first, then the larger hash.
	e.record(testAnchor(4, 5))
	e.record(testAnchor(3, 4))
	t2 := e.clock.Advance(time.Millisecond)
	// A record's fields are kept whatever they are: a size below the last,
	// another network, lowercase addresses, a zero root.
	odd := store.LogAnchor{TxHash: anchorTx(5), Size: 1, Network: "eip155:1", Contract: strings.ToLower(anchorContract), Sender: strings.ToLower(anchorSender)}
	if err := e.b.RecordAnchor(e.ctx, odd); err != nil {
		e.t.Fatalf("RecordAnchor through b: %v", err)
	}
	want := []store.LogAnchor{sent(odd, t2), sent(testAnchor(4, 5), t1), sent(testAnchor(2, 5), t1), sent(testAnchor(3, 4), t1), sent(testAnchor(1, 3), t0)}
	if diff := cmp.Diff(want, e.list()); diff != "" {
		e.t.Errorf("LogAnchors (-want +got):\n%s", diff)
	}
	for _, limit := range []int{1, 2, 5, 6} {
		got, err := e.b.LogAnchors(e.ctx, limit)
		if diff := cmp.Diff(want[:min(limit, len(want))], got); err != nil || diff != "" {
			e.t.Errorf("LogAnchors(%d): %v (-want +got):\n%s", limit, err, diff)
		}
	}
	// The largest size comes back whole.
	big := testAnchor(6, 1<<62)
	e.clock.Advance(time.Millisecond)
	e.record(big)
	if got := e.list()[0]; got.TxHash != big.TxHash || got.Size != big.Size {
		e.t.Errorf("newest = %+v, want the anchor of size 2^62", got)
	}
}

func testAnchorsIdempotent(e *anchorsEnv) {
	a := testAnchor(1, 3)
	e.record(a)
	t0 := e.clock.Now()
	if err := e.a.ConfirmAnchor(e.ctx, a.TxHash, 42); err != nil {
		e.t.Fatal(err)
	}
	before := e.list()
	// Again later, from either handle, with addresses in another case: the
	// first record stays, its SentAt and its block too.
	e.clock.Advance(time.Minute)
	again := a
	again.Contract, again.Sender = "0x"+strings.ToUpper(a.Contract[2:]), strings.ToLower(a.Sender)
	again.SentAt, again.Block = e.clock.Now(), 7 // not read
	for _, h := range []store.LogAnchors{e.a, e.b} {
		if err := h.RecordAnchor(e.ctx, again); err != nil {
			e.t.Errorf("RecordAnchor again: %v", err)
		}
	}
	e.unchanged("RecordAnchor again", before)
	want := sent(a, t0)
	want.Block = 42
	if diff := cmp.Diff([]store.LogAnchor{want}, e.list()); diff != "" {
		e.t.Errorf("LogAnchors (-want +got):\n%s", diff)
	}
}

func testAnchorsConflict(e *anchorsEnv) {
	a := testAnchor(1, 3)
	e.record(a)
	for name, change := range map[string]func(*store.LogAnchor){
		"another size":     func(x *store.LogAnchor) { x.Size++ },
		"another root":     func(x *store.LogAnchor) { x.Root[31]++ },
		"another network":  func(x *store.LogAnchor) { x.Network = "eip155:1" },
		"another contract": func(x *store.LogAnchor) { x.Contract = anchorSender },
		"another sender":   func(x *store.LogAnchor) { x.Sender = anchorContract },
	} {
		before := e.list()
		x := a
		change(&x)
		if err := e.b.RecordAnchor(e.ctx, x); !errors.Is(err, store.ErrConflict) {
			e.t.Errorf("RecordAnchor with %s: %v, want ErrConflict", name, err)
		}
		e.unchanged("RecordAnchor with "+name, before)
	}
}

func testAnchorsInvalid(e *anchorsEnv) {
	e.record(testAnchor(1, 3))
	for name, change := range map[string]func(*store.LogAnchor){
		"no transaction":                  func(x *store.LogAnchor) { x.TxHash = "" },
		"an uppercase transaction":        func(x *store.LogAnchor) { x.TxHash = "0x" + strings.Repeat("A", 64) },
		"a short transaction":             func(x *store.LogAnchor) { x.TxHash = x.TxHash[:65] },
		"a transaction without 0x":        func(x *store.LogAnchor) { x.TxHash = "00" + x.TxHash[2:] },
		"size zero":                       func(x *store.LogAnchor) { x.Size = 0 },
		"a negative size":                 func(x *store.LogAnchor) { x.Size = -1 },
		"no network":                      func(x *store.LogAnchor) { x.Network = "" },
		"a network over 64 bytes":         func(x *store.LogAnchor) { x.Network = "eip155:" + strings.Repeat("1", 58) },
		"no contract":                     func(x *store.LogAnchor) { x.Contract = "" },
		"a contract that is not hex":      func(x *store.LogAnchor) { x.Contract = "0x" + strings.Repeat("g", 40) },
		"a sender of 41 digits":           func(x *store.LogAnchor) { x.Sender += "0" },
		"an invalid record of a known tx": func(x *store.LogAnchor) { x.TxHash = anchorTx(1); x.Size = 0 },
	} {
		before := e.list()
		x := testAnchor(2, 5)
		change(&x)
		noSentinel(e.t, "RecordAnchor with "+name, e.b.RecordAnchor(e.ctx, x))
		e.unchanged("RecordAnchor with "+name, before)
	}
}

func testAnchorsConfirm(e *anchorsEnv) {
	a, b := testAnchor(1, 3), testAnchor(2, 4)
	e.record(a)
	e.record(b)
	t0 := e.clock.Now()
	if err := e.b.ConfirmAnchor(e.ctx, a.TxHash, 10); err != nil {
		e.t.Fatalf("ConfirmAnchor: %v", err)
	}
	wantA, wantB := sent(a, t0), sent(b, t0)
	wantA.Block = 10
	if diff := cmp.Diff([]store.LogAnchor{wantB, wantA}, e.list()); diff != "" {
		e.t.Errorf("LogAnchors after a confirmation (-want +got):\n%s", diff)
	}
	// The same block again changes nothing; a reorg moves it to another.
	for _, block := range []int64{10, 12, 1 << 62} {
		if err := e.a.ConfirmAnchor(e.ctx, a.TxHash, block); err != nil {
			e.t.Errorf("ConfirmAnchor(%d): %v", block, err)
		}
		wantA.Block = block
		if diff := cmp.Diff([]store.LogAnchor{wantB, wantA}, e.list()); diff != "" {
			e.t.Errorf("LogAnchors after ConfirmAnchor(%d) (-want +got):\n%s", block, diff)
		}
	}
	before := e.list()
	if err := e.a.ConfirmAnchor(e.ctx, anchorTx(3), 10); !errors.Is(err, store.ErrNotFound) {
		e.t.Errorf("ConfirmAnchor of a transaction never recorded: %v, want ErrNotFound", err)
	}
	e.unchanged("ConfirmAnchor of a transaction never recorded", before)
}

func testAnchorsConfirmInvalid(e *anchorsEnv) {
	e.record(testAnchor(1, 3))
	for _, tc := range []struct {
		hash  string
		block int64
	}{
		{anchorTx(1), 0}, {anchorTx(1), -1}, {"", 1}, {strings.ToUpper(anchorTx(1)), 1}, {anchorTx(1)[:10], 1},
	} {
		before := e.list()
		noSentinel(e.t, fmt.Sprintf("ConfirmAnchor(%q, %d)", tc.hash, tc.block), e.b.ConfirmAnchor(e.ctx, tc.hash, tc.block))
		e.unchanged("an invalid ConfirmAnchor", before)
	}
}

func testAnchorsListInvalid(e *anchorsEnv) {
	for _, limit := range []int{0, -1, store.MaxLogAnchors + 1} {
		_, err := e.b.LogAnchors(e.ctx, limit)
		noSentinel(e.t, fmt.Sprintf("LogAnchors(%d)", limit), err)
	}
}

// testAnchorsRace records one transaction from both handles at once, half
// as one anchor and half as another: exactly one is kept, every record of
// it succeeds and every record of the other is ErrConflict.
func testAnchorsRace(e *anchorsEnv) {
	const racers = 16
	one, other := testAnchor(1, 3), testAnchor(1, 4)
	errs := make([]error, racers)
	var wg sync.WaitGroup
	begin := make(chan struct{})
	for i := range racers {
		h, a := e.a, one
		if i%2 == 1 {
			h = e.b
		}
		if i%4 >= 2 {
			a = other
		}
		wg.Go(func() {
			<-begin
			errs[i] = h.RecordAnchor(e.ctx, a)
		})
	}
	close(begin)
	wg.Wait()
	got := e.list()
	if len(got) != 1 {
		e.t.Fatalf("LogAnchors = %+v, want one anchor", got)
	}
	winner := 0
	if got[0].Size == other.Size {
		winner = 1
	}
	for i, err := range errs {
		switch which := i % 4 / 2; {
		case which == winner && err != nil:
			e.t.Errorf("a record of the kept anchor failed: %v", err)
		case which != winner && !errors.Is(err, store.ErrConflict):
			e.t.Errorf("a record of the other anchor: %v, want ErrConflict", err)
		}
	}
}

func testAnchorsClosed(e *anchorsEnv) {
	a := testAnchor(1, 3)
	e.record(a)
	checkClosed(e.t, e.a, []closedCall{
		{"RecordAnchor", func() error { return e.a.RecordAnchor(e.ctx, testAnchor(2, 4)) }},
		{"ConfirmAnchor", func() error { return e.a.ConfirmAnchor(e.ctx, a.TxHash, 1) }},
		{"LogAnchors", func() error { _, err := e.a.LogAnchors(e.ctx, 10); return err }},
	})
	// The other handle is still open, and nothing changed.
	if diff := cmp.Diff([]store.LogAnchor{sent(a, start)}, e.list()); diff != "" {
		e.t.Errorf("other handle: LogAnchors (-want +got):\n%s", diff)
	}
}
