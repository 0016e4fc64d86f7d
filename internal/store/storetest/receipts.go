package storetest

import (
	"bytes"
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

// OpenReceipts opens two independent handles (separate connection pools, as
// two processes would have) on one new, empty database. Both must take the
// time from now for CreatedAt. It registers the handles' cleanup with
// t.Cleanup and stops the test with t.Fatal if anything fails.
type OpenReceipts func(t *testing.T, now func() time.Time) (a, b store.Receipts)

// RunReceipts runs the store.Receipts conformance suite against the backend
// that open opens. Every subtest opens a database of its own; handle a
// writes, handle b reads back.
//
// Beyond the interface's comments, the suite pins down: CreatedAt is the
// store's clock at the first put, to the millisecond, and a repeated put
// leaves it; the envelope comes back byte for byte; receipts of one Seq are
// ordered by request id, descending, byte by byte; invalid arguments (an
// invalid request id, owner or key id, Seq < 0, an empty or oversized
// envelope, a limit outside 1..MaxReceiptsPage, a query's invalid key id)
// fail with an error that is no sentinel, and Receipt of an invalid id is
// ErrNotFound. A query's key filter never reaches past its owner, even when
// another owner's receipt carries the same key id (the store does not make
// key ids unique; the keys table does).
//
// When the handles also implement store.RecentReceipts, the suite checks
// it too: every owner's receipts, newest first by CreatedAt and then by
// request id, both descending, byte by byte; since inclusive, to the
// millisecond; a replayed put neither moves a receipt nor lists it twice;
// envelopes byte for byte; a limit outside 1..MaxReceiptsPage is an error
// that is no sentinel.
func RunReceipts(t *testing.T, open OpenReceipts) {
	tests := []struct {
		name string
		run  func(*receiptsEnv)
	}{
		{"PutAndRead", testReceiptPut},
		{"Idempotent", testReceiptIdempotent},
		{"DrawnSeq", testReceiptDrawnSeq},
		{"Conflict", testReceiptConflict},
		{"Pages", testReceiptPages},
		{"PagesOfKey", testReceiptKeyPages},
		{"Bounds", testReceiptBounds},
		{"Recent", testRecentReceipts},
		{"RecentInvalid", testRecentReceiptsInvalid},
		{"InvalidArguments", testReceiptInvalid},
		{"Race/Put", testReceiptRace},
		{"Closed", testReceiptsClosed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := &clock{now: start}
			a, b := open(t, c.Now)
			tc.run(&receiptsEnv{t: t, ctx: t.Context(), clock: c, a: a, b: b})
		})
	}
}

type receiptsEnv struct {
	t     *testing.T
	ctx   context.Context
	clock *clock
	a, b  store.Receipts
}

const receiptOwner = "0x1111111111111111111111111111111111111111"

// testReceipt is a receipt as the gateway would store it.
func testReceipt(id, owner string, seq int64) store.StoredReceipt {
	env := fmt.Sprintf(`{"receipt":{"requestId":%q,"ledgerSeq":"%d"},"signature":"0x%s"}`, id, seq, strings.Repeat("ab", 65))
	return store.StoredReceipt{RequestID: id, Owner: owner, KeyID: "key_" + id, Seq: seq, Envelope: []byte(env)}
}

func (e *receiptsEnv) put(r store.StoredReceipt) {
	e.t.Helper()
	if err := e.a.PutReceipt(e.ctx, r); err != nil {
		e.t.Fatalf("PutReceipt(%s): %v", r.RequestID, err)
	}
}

func (e *receiptsEnv) get(h store.Receipts, id string) store.StoredReceipt {
	e.t.Helper()
	r, err := h.Receipt(e.ctx, id)
	if err != nil {
		e.t.Fatalf("Receipt(%s): %v", id, err)
	}
	return r
}

func testReceiptPut(e *receiptsEnv) {
	want := testReceipt("req_1", receiptOwner, 7)
	e.put(want)
	want.CreatedAt = start.Truncate(time.Millisecond)
	if diff := cmp.Diff(want, e.get(e.b, "req_1")); diff != "" {
		e.t.Errorf("Receipt (-want +got):\n%s", diff)
	}
	// A call drawn without a key: KeyID comes back empty.
	nokey := testReceipt("req_2", receiptOwner, 8)
	nokey.KeyID = ""
	e.put(nokey)
	if got := e.get(e.b, "req_2"); got.KeyID != "" {
		e.t.Errorf("KeyID = %q, want empty", got.KeyID)
	}
	if _, err := e.b.Receipt(e.ctx, "req_absent"); !errors.Is(err, store.ErrNotFound) {
		e.t.Errorf("Receipt of an absent id: %v, want ErrNotFound", err)
	}
	// Binary bytes of the envelope survive as they are (it is evidence).
	raw := testReceipt("req_3", receiptOwner, 9)
	raw.Envelope = []byte{0, 1, 2, 0xff, '\n', '{'}
	e.put(raw)
	if got := e.get(e.b, "req_3"); !bytes.Equal(got.Envelope, raw.Envelope) {
		e.t.Errorf("Envelope = %x, want %x", got.Envelope, raw.Envelope)
	}
}

func testReceiptIdempotent(e *receiptsEnv) {
	r := testReceipt("req_1", receiptOwner, 7)
	e.put(r)
	first := e.get(e.b, "req_1")
	e.clock.Advance(time.Minute)
	// The same envelope again, from the other handle and in a fresh slice:
	// a retry of the same capture, which changes nothing.
	again := r
	again.Envelope = bytes.Clone(r.Envelope)
	if err := e.b.PutReceipt(e.ctx, again); err != nil {
		e.t.Fatalf("PutReceipt again: %v", err)
	}
	if diff := cmp.Diff(first, e.get(e.a, "req_1")); diff != "" {
		e.t.Errorf("a repeated put changed the receipt (-first +now):\n%s", diff)
	}
}

// testReceiptDrawnSeq: a receipt put with Seq 0 (an x402 payment's, with no
// ledger entry) gets a new positive seq from the store, distinct and
// increasing, kept on a replay; it pages with the others; a replay with
// another envelope is ErrConflict.
func testReceiptDrawnSeq(e *receiptsEnv) {
	var seqs []int64
	for i := range 3 {
		id := fmt.Sprintf("x402_%d", i)
		e.put(testReceipt(id, receiptOwner, 0))
		got := e.get(e.b, id)
		if got.Seq <= 0 || (len(seqs) > 0 && got.Seq <= seqs[len(seqs)-1]) {
			e.t.Fatalf("drawn seqs %v then %d, want positive and increasing", seqs, got.Seq)
		}
		seqs = append(seqs, got.Seq)
	}
	again := testReceipt("x402_1", receiptOwner, 0)
	if err := e.b.PutReceipt(e.ctx, again); err != nil {
		e.t.Fatalf("a replayed put with seq 0: %v", err)
	}
	if got := e.get(e.a, "x402_1"); got.Seq != seqs[1] {
		e.t.Errorf("a replay moved the seq from %d to %d", seqs[1], got.Seq)
	}
	other := again
	other.Envelope = []byte(`{"another":"receipt"}`)
	if err := e.a.PutReceipt(e.ctx, other); !errors.Is(err, store.ErrConflict) {
		e.t.Errorf("a put with seq 0 and another envelope: %v, want ErrConflict", err)
	}
	page, err := e.b.ReceiptsOf(e.ctx, store.ReceiptsQuery{Owner: receiptOwner, Before: seqs[2], Limit: 10})
	if err != nil || len(page) != 2 || page[0].RequestID != "x402_1" || page[1].RequestID != "x402_0" {
		e.t.Errorf("the page before seq %d: %v, %v", seqs[2], receiptIDs(page), err)
	}
}

func testReceiptConflict(e *receiptsEnv) {
	r := testReceipt("req_1", receiptOwner, 7)
	e.put(r)
	tests := []struct {
		name   string
		change func(*store.StoredReceipt)
	}{
		{"envelope", func(r *store.StoredReceipt) { r.Envelope = append(bytes.Clone(r.Envelope), ' ') }},
		{"owner", func(r *store.StoredReceipt) { r.Owner = "0x2222222222222222222222222222222222222222" }},
		{"seq", func(r *store.StoredReceipt) { r.Seq++ }},
		{"key", func(r *store.StoredReceipt) { r.KeyID = "key_other" }},
		{"no key", func(r *store.StoredReceipt) { r.KeyID = "" }},
	}
	for _, tc := range tests {
		other := r
		tc.change(&other)
		if err := e.b.PutReceipt(e.ctx, other); !errors.Is(err, store.ErrConflict) {
			e.t.Errorf("PutReceipt with another %s: %v, want ErrConflict", tc.name, err)
		}
	}
	if diff := cmp.Diff(r.Envelope, e.get(e.a, "req_1").Envelope); diff != "" {
		e.t.Errorf("a conflicting put changed the envelope (-want +got):\n%s", diff)
	}
}

func testReceiptPages(e *receiptsEnv) {
	const other = "0x2222222222222222222222222222222222222222"
	// Seqs out of put order, another owner's receipt in between, two
	// receipts on one seq.
	for _, r := range []store.StoredReceipt{
		testReceipt("req_c", receiptOwner, 30),
		testReceipt("req_a", receiptOwner, 10),
		testReceipt("req_x", other, 20),
		testReceipt("req_e", receiptOwner, 50),
		testReceipt("req_b", receiptOwner, 20),
		testReceipt("req_d", receiptOwner, 40),
		testReceipt("req_d2", receiptOwner, 40),
	} {
		e.put(r)
	}
	tests := []struct {
		name   string
		owner  string
		before int64
		limit  int
		want   []string
	}{
		{"newest first", receiptOwner, 0, 100, []string{"req_e", "req_d2", "req_d", "req_c", "req_b", "req_a"}},
		{"negative before is from the newest", receiptOwner, -5, 2, []string{"req_e", "req_d2"}},
		{"limit", receiptOwner, 0, 3, []string{"req_e", "req_d2", "req_d"}},
		{"before is exclusive", receiptOwner, 40, 100, []string{"req_c", "req_b", "req_a"}},
		{"before between seqs", receiptOwner, 35, 1, []string{"req_c"}},
		{"before the first", receiptOwner, 10, 100, []string{}},
		{"other owner", other, 0, 100, []string{"req_x"}},
		{"unknown owner", "0x3333333333333333333333333333333333333333", 0, 100, []string{}},
	}
	for _, tc := range tests {
		got, err := e.b.ReceiptsOf(e.ctx, store.ReceiptsQuery{Owner: tc.owner, Before: tc.before, Limit: tc.limit})
		if err != nil {
			e.t.Errorf("%s: ReceiptsOf: %v", tc.name, err)
			continue
		}
		if diff := cmp.Diff(tc.want, receiptIDs(got)); diff != "" {
			e.t.Errorf("%s: ReceiptsOf (-want +got):\n%s", tc.name, diff)
		}
	}
	// Paging with the last seq seen walks every receipt once. (Seqs are
	// distinct in a ledger; the one pair here shares a page of 3.)
	walked := walkReceipts(e, store.ReceiptsQuery{Owner: receiptOwner, Limit: 3})
	if diff := cmp.Diff([]string{"req_e", "req_d2", "req_d", "req_c", "req_b", "req_a"}, walked); diff != "" {
		e.t.Errorf("paging (-want +got):\n%s", diff)
	}
	// A full page is a whole receipt each, envelope included.
	got, err := e.b.ReceiptsOf(e.ctx, store.ReceiptsQuery{Owner: receiptOwner, Limit: 1})
	if err != nil || len(got) != 1 {
		e.t.Fatalf("ReceiptsOf: %v, %d receipts", err, len(got))
	}
	want := testReceipt("req_e", receiptOwner, 50)
	want.CreatedAt = start.Truncate(time.Millisecond)
	if diff := cmp.Diff(want, got[0]); diff != "" {
		e.t.Errorf("ReceiptsOf receipt (-want +got):\n%s", diff)
	}
}

// walkReceipts pages through q with the last seq seen (at most 10 pages)
// and returns the ids in the order the pages gave them.
func walkReceipts(e *receiptsEnv, q store.ReceiptsQuery) []string {
	var walked []string
	for range 10 {
		page, err := e.b.ReceiptsOf(e.ctx, q)
		if err != nil {
			e.t.Fatalf("ReceiptsOf page: %v", err)
		}
		if len(page) == 0 {
			break
		}
		walked = append(walked, receiptIDs(page)...)
		q.Before = page[len(page)-1].Seq
	}
	return walked
}

// receiptIDs lists the request ids of rs, in order; empty, never nil.
func receiptIDs(rs []store.StoredReceipt) []string {
	out := []string{}
	for _, r := range rs {
		out = append(out, r.RequestID)
	}
	return out
}

// testReceiptKeyPages: a query with a key id selects that key's receipts of
// the owner only (a delegated key must not read what the owner's
// other keys spent), pages like the owner's list, and never selects another
// owner's receipts.
func testReceiptKeyPages(e *receiptsEnv) {
	const other = "0x2222222222222222222222222222222222222222"
	withKey := func(r store.StoredReceipt, key string) store.StoredReceipt {
		r.KeyID = key
		return r
	}
	for _, r := range []store.StoredReceipt{
		withKey(testReceipt("req_a1", receiptOwner, 10), "key_a"),
		withKey(testReceipt("req_b1", receiptOwner, 20), "key_b"),
		withKey(testReceipt("req_n1", receiptOwner, 25), ""),
		withKey(testReceipt("req_a2", receiptOwner, 30), "key_a"),
		withKey(testReceipt("req_x1", other, 35), "key_x"),
		// Another owner's receipt under key_a's id: no key table stops it
		// here, so the owner must filter too.
		withKey(testReceipt("req_x2", other, 36), "key_a"),
		withKey(testReceipt("req_b2", receiptOwner, 40), "key_b"),
		withKey(testReceipt("req_a3", receiptOwner, 50), "key_a"),
		withKey(testReceipt("req_a4", receiptOwner, 50), "key_a"),
	} {
		e.put(r)
	}
	tests := []struct {
		name string
		q    store.ReceiptsQuery
		want []string
	}{
		{"every key", store.ReceiptsQuery{Owner: receiptOwner, Limit: 100},
			[]string{"req_a4", "req_a3", "req_b2", "req_a2", "req_n1", "req_b1", "req_a1"}},
		{"one key", store.ReceiptsQuery{Owner: receiptOwner, KeyID: "key_a", Limit: 100},
			[]string{"req_a4", "req_a3", "req_a2", "req_a1"}},
		{"the other key", store.ReceiptsQuery{Owner: receiptOwner, KeyID: "key_b", Limit: 100}, []string{"req_b2", "req_b1"}},
		{"key and limit", store.ReceiptsQuery{Owner: receiptOwner, KeyID: "key_a", Limit: 1}, []string{"req_a4"}},
		{"key and before", store.ReceiptsQuery{Owner: receiptOwner, KeyID: "key_a", Before: 50, Limit: 100}, []string{"req_a2", "req_a1"}},
		{"key before its first", store.ReceiptsQuery{Owner: receiptOwner, KeyID: "key_b", Before: 20, Limit: 100}, []string{}},
		{"another owner's key", store.ReceiptsQuery{Owner: receiptOwner, KeyID: "key_x", Limit: 100}, []string{}},
		{"a key id shared with another owner", store.ReceiptsQuery{Owner: other, KeyID: "key_a", Limit: 100}, []string{"req_x2"}},
		{"unknown key", store.ReceiptsQuery{Owner: receiptOwner, KeyID: "key_none", Limit: 100}, []string{}},
	}
	for _, tc := range tests {
		got, err := e.b.ReceiptsOf(e.ctx, tc.q)
		if err != nil {
			e.t.Errorf("%s: ReceiptsOf: %v", tc.name, err)
			continue
		}
		if diff := cmp.Diff(tc.want, receiptIDs(got)); diff != "" {
			e.t.Errorf("%s: ReceiptsOf (-want +got):\n%s", tc.name, diff)
		}
		for _, r := range got {
			if r.Owner != tc.q.Owner || tc.q.KeyID != "" && r.KeyID != tc.q.KeyID {
				e.t.Errorf("%s: ReceiptsOf gave %s of owner %s, key %q", tc.name, r.RequestID, r.Owner, r.KeyID)
			}
		}
	}
	// Paging one key with the last seq seen walks its receipts once.
	walked := walkReceipts(e, store.ReceiptsQuery{Owner: receiptOwner, KeyID: "key_a", Limit: 2})
	if diff := cmp.Diff([]string{"req_a4", "req_a3", "req_a2", "req_a1"}, walked); diff != "" {
		e.t.Errorf("paging one key (-want +got):\n%s", diff)
	}
}

// recentHandles returns the handles as store.RecentReceipts, skipping the
// test when the backend does not list every owner's receipts.
func (e *receiptsEnv) recentHandles() (a, b store.RecentReceipts) {
	e.t.Helper()
	a, okA := e.a.(store.RecentReceipts)
	b, okB := e.b.(store.RecentReceipts)
	if !okA || !okB {
		e.t.Skipf("%T does not implement store.RecentReceipts", e.a)
	}
	return a, b
}

// testRecentReceipts: the operator's listing holds every owner's receipts,
// ordered by the time the store kept them, not by seq, owner or id.
func testRecentReceipts(e *receiptsEnv) {
	ra, rb := e.recentHandles()
	const (
		owner2 = "0x2222222222222222222222222222222222222222"
		owner3 = "0x3333333333333333333333333333333333333333"
	)
	// The oldest has the highest id and the newest the lowest, and seqs
	// run against time too, so that only CreatedAt can give the order.
	old := testReceipt("req_z", receiptOwner, 90)
	e.put(old)
	since := e.clock.Advance(time.Second)
	first := testReceipt("req_y", owner2, 80)
	e.put(first)
	t2 := e.clock.Advance(time.Second)
	// Two in one millisecond, one with a seq the store draws and no key:
	// by request id, descending.
	sameA := testReceipt("req_b", receiptOwner, 70)
	sameB := testReceipt("req_c", owner3, 0)
	sameB.KeyID = ""
	e.put(sameA)
	e.put(sameB)
	t3 := e.clock.Advance(time.Second)
	// Binary bytes come back as they are (a receipt is evidence).
	newest := testReceipt("req_a", owner2, 60)
	newest.Envelope = []byte{0, 1, 2, 0xff, '\n', '{'}
	e.put(newest)
	// A replay of the first, later and from the other handle, keeps its
	// CreatedAt and its place.
	if err := e.b.PutReceipt(e.ctx, first); err != nil {
		e.t.Fatalf("PutReceipt again: %v", err)
	}

	at := func(r store.StoredReceipt, created time.Time) store.StoredReceipt {
		r.CreatedAt = created.Truncate(time.Millisecond)
		return r
	}
	sameB.Seq = e.get(e.b, sameB.RequestID).Seq // drawn by the store
	all := []store.StoredReceipt{
		at(newest, t3), at(sameB, t2), at(sameA, t2), at(first, since), at(old, start),
	}
	for _, limit := range []int{1, 2, 3, 4, 100, store.MaxReceiptsPage} {
		for name, h := range map[string]store.RecentReceipts{"a": ra, "b": rb} {
			got, err := h.RecentReceipts(e.ctx, since, limit)
			if err != nil {
				e.t.Fatalf("handle %s: RecentReceipts(since, %d): %v", name, limit, err)
			}
			if diff := cmp.Diff(all[:min(limit, 4)], got); diff != "" {
				e.t.Errorf("handle %s: RecentReceipts(since, %d) (-want +got):\n%s", name, limit, diff)
			}
		}
	}
	tests := []struct {
		name  string
		since time.Time
		want  []string
	}{
		{"from before the first", start.Add(-time.Hour), []string{"req_a", "req_c", "req_b", "req_y", "req_z"}},
		{"since is inclusive", start, []string{"req_a", "req_c", "req_b", "req_y", "req_z"}},
		{"a millisecond later", start.Add(time.Millisecond), []string{"req_a", "req_c", "req_b", "req_y"}},
		{"one millisecond's two", t2, []string{"req_a", "req_c", "req_b"}},
		{"the newest", t3, []string{"req_a"}},
		{"after the newest", t3.Add(time.Millisecond), []string{}},
		{"the zero time", time.Time{}, []string{"req_a", "req_c", "req_b", "req_y", "req_z"}},
	}
	for _, tc := range tests {
		got, err := rb.RecentReceipts(e.ctx, tc.since, 100)
		if err != nil {
			e.t.Errorf("%s: RecentReceipts: %v", tc.name, err)
			continue
		}
		if diff := cmp.Diff(tc.want, receiptIDs(got)); diff != "" {
			e.t.Errorf("%s: RecentReceipts (-want +got):\n%s", tc.name, diff)
		}
	}
}

// testRecentReceiptsInvalid: a limit outside 1..MaxReceiptsPage is refused
// with an error that is no sentinel, and the largest limit is taken.
func testRecentReceiptsInvalid(e *receiptsEnv) {
	ra, _ := e.recentHandles()
	e.put(testReceipt("req_1", receiptOwner, 1))
	for _, limit := range []int{0, -1, store.MaxReceiptsPage + 1} {
		got, err := ra.RecentReceipts(e.ctx, start, limit)
		if err == nil || errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrConflict) {
			e.t.Errorf("RecentReceipts(limit %d) = %d receipts, %v; want a plain error", limit, len(got), err)
		}
	}
	if got, err := ra.RecentReceipts(e.ctx, start, store.MaxReceiptsPage); err != nil || len(got) != 1 {
		e.t.Errorf("RecentReceipts(limit %d) = %d receipts, %v; want 1", store.MaxReceiptsPage, len(got), err)
	}
}

func testReceiptBounds(e *receiptsEnv) {
	// The largest envelope is stored and read back whole; one byte more is
	// refused.
	largest := testReceipt("req_big", receiptOwner, 1)
	largest.Envelope = bytes.Repeat([]byte{'x'}, store.MaxReceiptBytes)
	e.put(largest)
	if got := e.get(e.b, "req_big"); len(got.Envelope) != store.MaxReceiptBytes {
		e.t.Errorf("Envelope of %d bytes, want %d", len(got.Envelope), store.MaxReceiptBytes)
	}
	over := testReceipt("req_over", receiptOwner, 2)
	over.Envelope = bytes.Repeat([]byte{'x'}, store.MaxReceiptBytes+1)
	if err := e.a.PutReceipt(e.ctx, over); err == nil {
		e.t.Error("PutReceipt of an envelope over MaxReceiptBytes succeeded")
	}
	// The largest seq the ledger can give, and a full page of receipts.
	top := testReceipt("req_top", receiptOwner, 1<<62)
	e.put(top)
	if got := e.get(e.b, "req_top"); got.Seq != 1<<62 {
		e.t.Errorf("Seq = %d, want %d", got.Seq, int64(1<<62))
	}
	for i := range 5 {
		e.put(testReceipt(fmt.Sprintf("req_%d", i), receiptOwner, int64(100+i)))
	}
	got, err := e.b.ReceiptsOf(e.ctx, store.ReceiptsQuery{Owner: receiptOwner, Limit: store.MaxReceiptsPage})
	if err != nil {
		e.t.Fatalf("ReceiptsOf with the largest limit: %v", err)
	}
	if len(got) != 7 {
		e.t.Errorf("ReceiptsOf gave %d receipts, want 7", len(got))
	}
}

func testReceiptInvalid(e *receiptsEnv) {
	ok := testReceipt("req_1", receiptOwner, 1)
	tests := []struct {
		name   string
		change func(*store.StoredReceipt)
	}{
		{"empty request id", func(r *store.StoredReceipt) { r.RequestID = "" }},
		{"request id with a space", func(r *store.StoredReceipt) { r.RequestID = "req 1" }},
		{"long request id", func(r *store.StoredReceipt) { r.RequestID = strings.Repeat("r", 1000) }},
		{"empty owner", func(r *store.StoredReceipt) { r.Owner = "" }},
		{"upper-case owner", func(r *store.StoredReceipt) { r.Owner = strings.ToUpper(receiptOwner) }},
		{"key id with a newline", func(r *store.StoredReceipt) { r.KeyID = "key\n1" }},
		{"negative seq", func(r *store.StoredReceipt) { r.Seq = -1 }},
		{"empty envelope", func(r *store.StoredReceipt) { r.Envelope = nil }},
	}
	for _, tc := range tests {
		r := ok
		tc.change(&r)
		err := e.a.PutReceipt(e.ctx, r)
		if err == nil || errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrNotFound) {
			e.t.Errorf("PutReceipt with %s: %v, want a plain error", tc.name, err)
		}
	}
	for _, limit := range []int{0, -1, store.MaxReceiptsPage + 1} {
		if _, err := e.b.ReceiptsOf(e.ctx, store.ReceiptsQuery{Owner: receiptOwner, Limit: limit}); err == nil {
			e.t.Errorf("ReceiptsOf with limit %d succeeded", limit)
		}
	}
	for _, q := range []struct {
		name string
		q    store.ReceiptsQuery
	}{
		{"an invalid owner", store.ReceiptsQuery{Owner: "Not An Owner", Limit: 10}},
		{"no owner", store.ReceiptsQuery{KeyID: "key_1", Limit: 10}},
		{"a key id with a newline", store.ReceiptsQuery{Owner: receiptOwner, KeyID: "key\n1", Limit: 10}},
		{"a key id with a space", store.ReceiptsQuery{Owner: receiptOwner, KeyID: "key 1", Limit: 10}},
		{"a key id with a quote", store.ReceiptsQuery{Owner: receiptOwner, KeyID: "key' OR ''='", Limit: 10}},
		{"a long key id", store.ReceiptsQuery{Owner: receiptOwner, KeyID: strings.Repeat("k", 1000), Limit: 10}},
		{"a key and no limit", store.ReceiptsQuery{Owner: receiptOwner, KeyID: "key_1"}},
	} {
		_, err := e.b.ReceiptsOf(e.ctx, q.q)
		if err == nil || errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrConflict) {
			e.t.Errorf("ReceiptsOf with %s: %v, want a plain error", q.name, err)
		}
	}
	if _, err := e.b.Receipt(e.ctx, "req 1"); !errors.Is(err, store.ErrNotFound) {
		e.t.Errorf("Receipt of an invalid id: %v, want ErrNotFound", err)
	}
	// Nothing invalid was stored.
	if got, err := e.b.ReceiptsOf(e.ctx, store.ReceiptsQuery{Owner: receiptOwner, Limit: 10}); err != nil || len(got) != 0 {
		e.t.Errorf("ReceiptsOf after invalid puts: %d receipts, %v", len(got), err)
	}
}

// testReceiptRace puts one request id from both handles at once, half with
// one envelope and half with another: exactly one envelope is stored, every
// put of it succeeds and every put of the other is ErrConflict.
func testReceiptRace(e *receiptsEnv) {
	const workers = 16
	r1 := testReceipt("req_race", receiptOwner, 5)
	r2 := r1
	r2.Envelope = append(bytes.Clone(r1.Envelope), ' ')
	type result struct {
		which int
		err   error
	}
	results := make(chan result, workers)
	var wg sync.WaitGroup
	begin := make(chan struct{})
	for i := range workers {
		wg.Go(func() {
			h, r := e.a, r1
			if i%2 == 1 {
				h = e.b
			}
			if i%4 >= 2 {
				r = r2
			}
			<-begin
			results <- result{which: i % 4 / 2, err: h.PutReceipt(e.ctx, r)}
		})
	}
	close(begin)
	wg.Wait()
	close(results)
	stored := e.get(e.b, "req_race")
	winner := 0
	if bytes.Equal(stored.Envelope, r2.Envelope) {
		winner = 1
	}
	for res := range results {
		switch {
		case res.which == winner && res.err != nil:
			e.t.Errorf("a put of the stored envelope failed: %v", res.err)
		case res.which != winner && !errors.Is(res.err, store.ErrConflict):
			e.t.Errorf("a put of the other envelope: %v, want ErrConflict", res.err)
		}
	}
}
