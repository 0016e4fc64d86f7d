package redis_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/internal/store/redis"
	"github.com/llm4agents/llm4agents/internal/store/storetest"
)

// TestReceipts runs the receipts conformance suite with two DB values (two
// clients) on one fresh prefix, as two replicas would share it.
func TestReceipts(t *testing.T) {
	storetest.RunReceipts(t, func(t *testing.T, now func() time.Time) (a, b store.Receipts) {
		return pair(t, now)
	})
}

// The receipt keys of a tamper store, as receipts.go lays them out.
func (tp *tamper) receiptKey(id string) string     { return "{" + tp.prefix + "}receipt:" + id }
func (tp *tamper) receiptSeqKey() string           { return "{" + tp.prefix + "}receipt-seq" }
func (tp *tamper) receiptsKey(owner string) string { return "{" + tp.prefix + "}receipts:" + owner }
func (tp *tamper) recentReceiptsKey() string       { return "{" + tp.prefix + "}receipts-recent" }

const testOwner = "0x1111111111111111111111111111111111111111"

// newReceipt is a valid receipt of id with seq.
func newReceipt(id string, seq int64) store.StoredReceipt {
	return store.StoredReceipt{RequestID: id, Owner: testOwner, KeyID: "key_1", Seq: seq,
		Envelope: fmt.Appendf(nil, `{"receipt":{"requestId":%q},"signature":"0x00"}`, id)}
}

// receiptIDsOf lists the request ids of a page.
func receiptIDsOf(rs []store.StoredReceipt) []string {
	out := []string{}
	for _, r := range rs {
		out = append(out, r.RequestID)
	}
	return out
}

// TestReceiptsLargeSeqs checks that seqs a double cannot tell apart (above
// 2^53) are kept, ordered and bounded exactly, that a drawn seq comes
// after every explicit one put before it, and that once the counter is at
// 2^63-1 a put that draws fails without a write.
func TestReceiptsLargeSeqs(t *testing.T) {
	tp := newTamper(t)
	ctx := t.Context()
	const big = int64(1) << 53
	seqs := map[string]int64{"req_a": big + 1, "req_b": big + 2, "req_c": big, "req_d": 7, "req_e": math.MaxInt64 - 1}
	for id, seq := range seqs {
		if err := tp.db.PutReceipt(ctx, newReceipt(id, seq)); err != nil {
			t.Fatalf("PutReceipt(%s, %d): %v", id, seq, err)
		}
	}
	for id, seq := range seqs {
		if got, err := tp.db.Receipt(ctx, id); err != nil || got.Seq != seq {
			t.Errorf("Receipt(%s) = seq %d, %v; want %d", id, got.Seq, err, seq)
		}
	}
	for _, tc := range []struct {
		before int64
		want   []string
	}{
		{0, []string{"req_e", "req_b", "req_a", "req_c", "req_d"}},
		{big + 2, []string{"req_a", "req_c", "req_d"}},
		{big + 1, []string{"req_c", "req_d"}},
		{math.MaxInt64, []string{"req_e", "req_b", "req_a", "req_c", "req_d"}},
	} {
		for _, key := range []string{"", "key_1"} {
			got, err := tp.db.ReceiptsOf(ctx, store.ReceiptsQuery{Owner: testOwner, KeyID: key, Before: tc.before, Limit: 10})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, receiptIDsOf(got)); diff != "" {
				t.Errorf("ReceiptsOf(key %q, before %d) (-want +got):\n%s", key, tc.before, diff)
			}
		}
	}
	// Drawn: above every seq put so far, though it is no ledger's.
	if err := tp.db.PutReceipt(ctx, newReceipt("req_drawn", 0)); err != nil {
		t.Fatal(err)
	}
	if got, err := tp.db.Receipt(ctx, "req_drawn"); err != nil || got.Seq != math.MaxInt64 {
		t.Errorf("Receipt(req_drawn) = seq %d, %v; want %d", got.Seq, err, int64(math.MaxInt64))
	}
	// No seq is left to draw: refused, writing nothing; an explicit seq is
	// still kept.
	before := tp.contents(t)
	err := tp.db.PutReceipt(ctx, newReceipt("req_none", 0))
	if err == nil || errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrNotFound) {
		t.Errorf("PutReceipt drawing past 2^63-1 = %v, want an error that is no sentinel", err)
	}
	if diff := cmp.Diff(before, tp.contents(t)); diff != "" {
		t.Errorf("keys changed (-before +after):\n%s", diff)
	}
	if err := tp.db.PutReceipt(ctx, newReceipt("req_f", 5)); err != nil {
		t.Errorf("PutReceipt with an explicit seq after the counter ran out: %v", err)
	}
}

// TestReceiptsForeignValues writes values the store did not write at the
// receipt keys, and checks that every operation touching them fails with an
// error that is no store sentinel and changes no key.
func TestReceiptsForeignValues(t *testing.T) {
	type op struct {
		name string
		call func(ctx context.Context, db *redis.DB) error
	}
	put := op{"PutReceipt", func(ctx context.Context, db *redis.DB) error { return db.PutReceipt(ctx, newReceipt("req_1", 3)) }}
	get := op{"Receipt", func(ctx context.Context, db *redis.DB) error { _, err := db.Receipt(ctx, "req_1"); return err }}
	draw := op{"PutReceipt(drawn)", func(ctx context.Context, db *redis.DB) error { return db.PutReceipt(ctx, newReceipt("req_2", 0)) }}
	list := op{"ReceiptsOf", func(ctx context.Context, db *redis.DB) error {
		_, err := db.ReceiptsOf(ctx, store.ReceiptsQuery{Owner: testOwner, Limit: 10})
		return err
	}}
	recent := op{"RecentReceipts", func(ctx context.Context, db *redis.DB) error {
		_, err := db.RecentReceipts(ctx, time.UnixMilli(0), 10)
		return err
	}}
	fields := func() []any {
		return []any{"owner", testOwner, "key_id", "key_1", "seq", "3", "envelope", string(newReceipt("req_1", 3).Envelope), "created_at_ms", "1000"}
	}
	tests := []struct {
		name  string
		plant func(t *testing.T, tp *tamper)
		ops   []op
	}{
		{"record is a string", func(t *testing.T, tp *tamper) {
			tp.do(t, "SET", tp.receiptKey("req_1"), "foreign")
		}, []op{put, get}},
		{"record is another program's hash", func(t *testing.T, tp *tamper) {
			tp.do(t, "HSET", tp.receiptKey("req_1"), "user", "alice")
		}, []op{put, get}},
		{"record lacks its envelope", func(t *testing.T, tp *tamper) {
			tp.do(t, append([]any{"HSET", tp.receiptKey("req_1")}, without(fields(), "envelope")...)...)
		}, []op{put, get}},
		{"record has seq zero", func(t *testing.T, tp *tamper) {
			tp.do(t, append([]any{"HSET", tp.receiptKey("req_1")}, with(fields(), "seq", "0")...)...)
		}, []op{put, get}},
		{"record has a seq over 2^63-1", func(t *testing.T, tp *tamper) {
			tp.do(t, append([]any{"HSET", tp.receiptKey("req_1")}, with(fields(), "seq", "9223372036854775808")...)...)
		}, []op{put, get}},
		{"counter is no number", func(t *testing.T, tp *tamper) {
			tp.do(t, "SET", tp.receiptSeqKey(), "seven")
		}, []op{put, draw}},
		{"counter is a hash", func(t *testing.T, tp *tamper) {
			tp.do(t, "HSET", tp.receiptSeqKey(), "n", "1")
		}, []op{put, draw}},
		{"listing is a string", func(t *testing.T, tp *tamper) {
			tp.do(t, "SET", tp.receiptsKey(testOwner), "foreign")
		}, []op{put, list}},
		{"listing has a member that is no receipt's", func(t *testing.T, tp *tamper) {
			tp.do(t, "ZADD", tp.receiptsKey(testOwner), "0", "foreign")
		}, []op{list}},
		{"listing names a record of another seq", func(t *testing.T, tp *tamper) {
			tp.do(t, append([]any{"HSET", tp.receiptKey("req_1")}, fields()...)...)
			tp.do(t, "ZADD", tp.receiptsKey(testOwner), "0", fmt.Sprintf("%019dreq_1", 4))
		}, []op{list}},
		{"listing names a record of another owner", func(t *testing.T, tp *tamper) {
			tp.do(t, append([]any{"HSET", tp.receiptKey("req_1")}, with(fields(), "owner", "0x22")...)...)
			tp.do(t, "ZADD", tp.receiptsKey(testOwner), "0", fmt.Sprintf("%019dreq_1", 3))
		}, []op{list}},
		{"recent listing is a string", func(t *testing.T, tp *tamper) {
			tp.do(t, "SET", tp.recentReceiptsKey(), "foreign")
		}, []op{put, draw, recent}},
		{"recent listing scores a record at another time", func(t *testing.T, tp *tamper) {
			tp.do(t, append([]any{"HSET", tp.receiptKey("req_1")}, fields()...)...)
			tp.do(t, "ZADD", tp.recentReceiptsKey(), "2000", "req_1")
		}, []op{recent}},
		{"recent listing names a malformed record", func(t *testing.T, tp *tamper) {
			tp.do(t, append([]any{"HSET", tp.receiptKey("req_1")}, without(fields(), "envelope")...)...)
			tp.do(t, "ZADD", tp.recentReceiptsKey(), "1000", "req_1")
		}, []op{recent}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tp := newTamper(t)
			tc.plant(t, tp)
			before := tp.contents(t)
			for _, o := range tc.ops {
				err := o.call(t.Context(), tp.db)
				wantForeign(t, o.name, err)
			}
			if diff := cmp.Diff(before, tp.contents(t)); diff != "" {
				t.Errorf("keys changed (-before +after):\n%s", diff)
			}
		})
	}
}

// TestReceiptsSkipsMissing checks that a member of a listing whose record
// was deleted by hand is skipped and does not use up the limit, in an
// owner's listing and in the recent one.
func TestReceiptsSkipsMissing(t *testing.T) {
	tp := newTamper(t)
	ctx := t.Context()
	for i := 1; i <= 3; i++ {
		if err := tp.db.PutReceipt(ctx, newReceipt(fmt.Sprintf("req_%d", i), int64(i))); err != nil {
			t.Fatal(err)
		}
	}
	tp.do(t, "DEL", tp.receiptKey("req_3"))
	got, err := tp.db.ReceiptsOf(ctx, store.ReceiptsQuery{Owner: testOwner, Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"req_2", "req_1"}, receiptIDsOf(got)); diff != "" {
		t.Errorf("ReceiptsOf (-want +got):\n%s", diff)
	}
	got, err = tp.db.RecentReceipts(ctx, time.UnixMilli(0), 2)
	if err != nil {
		t.Fatal(err)
	}
	// Put in one millisecond: by request id, descending.
	if diff := cmp.Diff([]string{"req_2", "req_1"}, receiptIDsOf(got)); diff != "" {
		t.Errorf("RecentReceipts (-want +got):\n%s", diff)
	}
}

// TestRecentReceiptsForget checks that the recent listing, unlike the
// receipts, forgets what is older than store.RecentRetention and carries
// that TTL, and that a receipt kept before the listing existed (here: the
// listing deleted) is left out of it, a replay not adding it.
func TestRecentReceiptsForget(t *testing.T) {
	tp := newTamper(t)
	ctx := t.Context()
	first := tp.clock.Now()
	for _, id := range []string{"req_old", "req_unlisted"} {
		if err := tp.db.PutReceipt(ctx, newReceipt(id, 0)); err != nil {
			t.Fatal(err)
		}
	}
	tp.do(t, "ZREM", tp.recentReceiptsKey(), "req_unlisted")
	tp.clock.Advance(store.RecentRetention + time.Millisecond)
	for _, id := range []string{"req_new", "req_unlisted"} {
		if err := tp.db.PutReceipt(ctx, newReceipt(id, 0)); err != nil {
			t.Fatal(err)
		}
	}

	ids, err := tp.raw.ZRange(ctx, tp.recentReceiptsKey(), 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"req_new"}, ids); diff != "" {
		t.Errorf("recent listing (-want +got):\n%s", diff)
	}
	ttl, err := tp.raw.PTTL(ctx, tp.recentReceiptsKey()).Result()
	if err != nil {
		t.Fatal(err)
	}
	if ttl <= 0 || ttl > store.RecentRetention {
		t.Errorf("recent listing TTL = %v, want up to %v", ttl, store.RecentRetention)
	}
	got, err := tp.db.RecentReceipts(ctx, first, 10)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"req_new"}, receiptIDsOf(got)); diff != "" {
		t.Errorf("RecentReceipts (-want +got):\n%s", diff)
	}
	// The receipts themselves stay: they are evidence.
	for _, id := range []string{"req_old", "req_unlisted"} {
		if _, err := tp.db.Receipt(ctx, id); err != nil {
			t.Errorf("Receipt(%s) = %v, want it kept", id, err)
		}
	}
}
