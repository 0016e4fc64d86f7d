package storetest

import (
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/llm4agents/llm4agents/internal/store"
)

// OpenStaged opens two independent handles on one new, empty database, as
// OpenPayments does.
type OpenStaged func(t *testing.T, now func() time.Time) (a, b store.StagedLister)

// RunStagedPayments runs the conformance suite of StagedPayments against the
// backend that open opens. Every subtest opens a database of its own; handle
// a writes, handle b lists.
//
// The suite pins down: only records whose staged content type equals the one
// asked for, byte for byte, and that are settled, or pending, with a
// transaction hash are listed (never held ones, nor any without a
// transaction); they come oldest first by CreatedAt, then by Key byte by byte;
// paging after the last record of a page sees every record once; expired
// records are listed until purged, released ones never; each listed record
// equals what Payment returned before it expired; an empty content type or a
// limit outside 1..1000 fails with an error that is no sentinel.
func RunStagedPayments(t *testing.T, open OpenStaged) {
	tests := []struct {
		name string
		run  func(*stagedEnv)
	}{
		{"OnlyTheKindAsked", testStagedKind},
		{"OldestFirst", testStagedOrder},
		{"Pages", testStagedPages},
		{"ExpiredListed", testStagedExpired},
		{"Released", testStagedReleased},
		{"InvalidArguments", testStagedInvalid},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := &clock{now: start}
			a, b := open(t, c.Now)
			tc.run(&stagedEnv{payEnv: &payEnv{t: t, ctx: t.Context(), clock: c, a: a, b: b}, lb: b})
		})
	}
}

type stagedEnv struct {
	*payEnv
	lb store.StagedLister
}

const (
	stagedKind  = "application/vnd.llm4agents.topup+json"
	stagedOther = "application/json"
)

// staged claims key, stages a response of kind with it and moves it to
// state with txHash (held stays held), returning the record as stored.
func (e *stagedEnv) staged(key, kind string, state store.PaymentState, txHash string) store.PaymentClaim {
	e.t.Helper()
	c := e.mustClaim(key)
	body := []byte(`{"amount":"` + key + `"}`)
	r := store.StagedResponse{Status: http.StatusOK, ContentType: kind, Body: body, Fingerprint: "fp-" + key}
	if err := e.a.StagePayment(e.ctx, key, c.Fence, r); err != nil {
		e.t.Fatalf("StagePayment(%q): %v", key, err)
	}
	if state != store.PaymentHeld {
		e.update(key, c.Fence, state, txHash)
	}
	return e.get(key)
}

// list lists kind through handle b, from the beginning, limit at a time,
// following the pages to their end.
func (e *stagedEnv) list(kind string, limit int) []store.PaymentClaim {
	e.t.Helper()
	var all []store.PaymentClaim
	var after time.Time
	var afterKey string
	for range 1000 {
		page, err := e.lb.StagedPayments(e.ctx, kind, after, afterKey, limit)
		if err != nil {
			e.t.Fatalf("StagedPayments(%q, %v, %q, %d): %v", kind, after, afterKey, limit, err)
		}
		if len(page) > limit {
			e.t.Fatalf("StagedPayments(limit %d) returned %d records", limit, len(page))
		}
		all = append(all, page...)
		if len(page) < limit {
			return all
		}
		last := page[len(page)-1]
		after, afterKey = last.CreatedAt, last.Key
	}
	e.t.Fatal("StagedPayments pages never end")
	return nil
}

func keysOf(cs []store.PaymentClaim) []string {
	out := make([]string, 0, len(cs))
	for _, c := range cs {
		out = append(out, c.Key)
	}
	return out
}

func testStagedKind(e *stagedEnv) {
	if got := e.list(stagedKind, 10); len(got) != 0 {
		e.t.Fatalf("empty database lists %v", keysOf(got))
	}
	want := []store.PaymentClaim{e.staged("settled", stagedKind, store.PaymentSettled, txHash1)}
	e.clock.Advance(time.Millisecond)
	want = append(want, e.staged("pending", stagedKind, store.PaymentPending, txHash2))
	e.staged("held", stagedKind, store.PaymentHeld, "")
	e.staged("pending-no-tx", stagedKind, store.PaymentPending, "")
	e.staged("settled-no-tx", stagedKind, store.PaymentSettled, "")
	e.staged("other-kind", stagedOther, store.PaymentSettled, txHash1)
	e.staged("kind-in-other-case", "Application/Vnd.Llm4agents.Topup+JSON", store.PaymentSettled, txHash1)
	e.staged("kind-prefix", stagedKind+"; charset=utf-8", store.PaymentSettled, txHash1)
	e.staged("kind-truncated", stagedKind[:len(stagedKind)-1], store.PaymentSettled, txHash1)
	// Settled with nothing staged.
	c := e.mustClaim("not-staged")
	e.update("not-staged", c.Fence, store.PaymentSettled, txHash1)

	if diff := cmp.Diff(want, e.list(stagedKind, 10)); diff != "" {
		e.t.Errorf("StagedPayments(kind) (-want +got):\n%s", diff)
	}
	other := e.list(stagedOther, 10)
	if diff := cmp.Diff([]string{"other-kind"}, keysOf(other)); diff != "" {
		e.t.Errorf("StagedPayments(other kind) (-want +got):\n%s", diff)
	}
}

func testStagedOrder(e *stagedEnv) {
	// Keys whose byte order differs from a locale's ("B" < "a" < "b" by
	// bytes), some created in one millisecond.
	e.staged("b", stagedKind, store.PaymentSettled, txHash1)
	e.clock.Advance(time.Millisecond)
	e.staged("a", stagedKind, store.PaymentSettled, txHash1)
	e.staged("B", stagedKind, store.PaymentPending, txHash1)
	e.staged("_", stagedKind, store.PaymentSettled, txHash1)
	e.clock.Advance(time.Second)
	e.staged("A", stagedKind, store.PaymentSettled, txHash1)
	// Settled later than it was created: the order is by creation.
	c := e.mustClaim("late")
	if err := e.a.StagePayment(e.ctx, "late", c.Fence, store.StagedResponse{Status: http.StatusOK, ContentType: stagedKind}); err != nil {
		e.t.Fatal(err)
	}
	e.clock.Advance(time.Minute)
	e.staged("z", stagedKind, store.PaymentSettled, txHash1)
	e.update("late", c.Fence, store.PaymentSettled, txHash2)

	want := []string{"b", "B", "_", "a", "A", "late", "z"}
	if diff := cmp.Diff(want, keysOf(e.list(stagedKind, 100))); diff != "" {
		e.t.Errorf("order (-want +got):\n%s", diff)
	}
}

func testStagedPages(e *stagedEnv) {
	var want []store.PaymentClaim
	for i := range 7 {
		if i%3 == 0 {
			e.clock.Advance(time.Millisecond) // three records share each millisecond
		}
		want = append(want, e.staged(fmt.Sprintf("k%d", i), stagedKind, store.PaymentSettled, txHash1))
	}
	for _, limit := range []int{1, 2, 3, 6, 7, 8, 1000} {
		if diff := cmp.Diff(want, e.list(stagedKind, limit)); diff != "" {
			e.t.Errorf("limit %d (-want +got):\n%s", limit, diff)
		}
	}
	// After the last record: nothing more.
	last := want[len(want)-1]
	if page, err := e.lb.StagedPayments(e.ctx, stagedKind, last.CreatedAt, last.Key, 10); err != nil || len(page) != 0 {
		e.t.Errorf("after the last record: %v, %v", keysOf(page), err)
	}
	// After a record in the middle of a millisecond: the rest of it first.
	mid := want[4]
	page, err := e.lb.StagedPayments(e.ctx, stagedKind, mid.CreatedAt, mid.Key, 2)
	if err != nil {
		e.t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"k5", "k6"}, keysOf(page)); diff != "" {
		e.t.Errorf("after %s (-want +got):\n%s", mid.Key, diff)
	}
}

func testStagedExpired(e *stagedEnv) {
	want := []store.PaymentClaim{e.staged("old", stagedKind, store.PaymentSettled, txHash1)}
	e.clock.Advance(expiry) // "old" expires now
	if _, err := e.b.Payment(e.ctx, "old"); !errors.Is(err, store.ErrNotFound) {
		e.t.Fatalf("Payment(expired) = %v, want ErrNotFound", err)
	}
	want = append(want, e.staged("new", stagedKind, store.PaymentPending, txHash2))
	if diff := cmp.Diff(want, e.list(stagedKind, 10)); diff != "" {
		e.t.Errorf("with an expired record (-want +got):\n%s", diff)
	}
	// A claim replacing the expired record takes it off the list until it
	// is staged and settled again.
	e.mustClaim("old")
	if diff := cmp.Diff([]string{"new"}, keysOf(e.list(stagedKind, 10))); diff != "" {
		e.t.Errorf("after the expired record was replaced (-want +got):\n%s", diff)
	}
}

func testStagedReleased(e *stagedEnv) {
	c := e.staged("gone", stagedKind, store.PaymentPending, txHash1)
	e.staged("kept", stagedKind, store.PaymentSettled, txHash1)
	if err := e.a.ReleasePayment(e.ctx, "gone", c.Fence); err != nil {
		e.t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"kept"}, keysOf(e.list(stagedKind, 10))); diff != "" {
		e.t.Errorf("after a release (-want +got):\n%s", diff)
	}
}

func testStagedInvalid(e *stagedEnv) {
	e.staged("k", stagedKind, store.PaymentSettled, txHash1)
	for _, tc := range []struct {
		name  string
		kind  string
		limit int
	}{
		{"empty content type", "", 10},
		{"zero limit", stagedKind, 0},
		{"negative limit", stagedKind, -1},
		{"limit over 1000", stagedKind, 1001},
		{"huge limit", stagedKind, int(^uint(0) >> 1)},
	} {
		got, err := e.lb.StagedPayments(e.ctx, tc.kind, time.Time{}, "", tc.limit)
		switch {
		case err == nil:
			e.t.Errorf("%s: StagedPayments() = %v, nil; want an error", tc.name, keysOf(got))
		case errors.Is(err, store.ErrNotFound), errors.Is(err, store.ErrFenced):
			e.t.Errorf("%s: StagedPayments() = %v; want an error that is no sentinel", tc.name, err)
		}
	}
	if got, err := e.lb.StagedPayments(e.ctx, stagedKind, time.Time{}, "", 1000); err != nil || len(got) != 1 {
		e.t.Errorf("limit 1000: %v, %v", keysOf(got), err)
	}
}
