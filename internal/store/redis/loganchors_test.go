package redis_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/internal/store/redis"
	"github.com/llm4agents/llm4agents/internal/store/storetest"
)

// TestLogAnchors runs the anchors conformance suite with two DB values (two
// clients) on one fresh prefix, as two replicas would share it.
func TestLogAnchors(t *testing.T) {
	storetest.RunLogAnchors(t, func(t *testing.T, now func() time.Time) (a, b store.LogAnchors) {
		return pair(t, now)
	})
}

// The anchor keys of a tamper store, as loganchors.go lays them out.
func (tp *tamper) anchorKey(tx string) string { return "{" + tp.prefix + "}log-anchor:" + tx }
func (tp *tamper) anchorsKey() string         { return "{" + tp.prefix + "}log-anchors" }

// anchorMember is the listing's member of an anchor, as loganchors.go
// writes it.
func anchorMember(sentMs, size int64, tx string) string {
	return fmt.Sprintf("%016d%019d%s", sentMs+1e15, size, tx)
}

// anchorTx is a transaction hash for n.
func anchorTx(n int) string { return fmt.Sprintf("0x%064x", n) }

// newAnchor is a valid anchor of transaction n with size.
func newAnchor(n int, size int64) store.LogAnchor {
	a := store.LogAnchor{TxHash: anchorTx(n), Size: size, Network: "eip155:8453",
		Contract: "0xe7f1725E7734CE288F8367e1Bb143E90bb3F0512", Sender: "0x23618e81E3f5cdF7f54C3d65f7FBc0aBf5B21E8f"}
	a.Root[0], a.Root[31] = byte(n), 0xff
	return a
}

// anchorFields is a well-formed record of newAnchor(1, 3) sent at 1000 ms,
// as the store writes it.
func anchorFields() []any {
	a := newAnchor(1, 3)
	return []any{"size", "3", "root", fmt.Sprintf("%x", a.Root), "network", a.Network, "contract", a.Contract,
		"sender", a.Sender, "sent_at_ms", "1000", "block", "0"}
}

// TestLogAnchorsForeignValues writes values the store did not write at the
// anchor keys, and checks that every operation touching them fails with an
// error that is no store sentinel and changes no key.
func TestLogAnchorsForeignValues(t *testing.T) {
	type op struct {
		name string
		call func(ctx context.Context, db *redis.DB) error
	}
	record := op{"RecordAnchor", func(ctx context.Context, db *redis.DB) error { return db.RecordAnchor(ctx, newAnchor(1, 3)) }}
	confirm := op{"ConfirmAnchor", func(ctx context.Context, db *redis.DB) error { return db.ConfirmAnchor(ctx, anchorTx(1), 5) }}
	recordNew := op{"RecordAnchor(new)", func(ctx context.Context, db *redis.DB) error { return db.RecordAnchor(ctx, newAnchor(2, 4)) }}
	list := op{"LogAnchors", func(ctx context.Context, db *redis.DB) error { _, err := db.LogAnchors(ctx, 10); return err }}
	recordOps := []op{record, confirm}
	// listed plants the record of anchor 1 with fields and its member.
	listed := func(t *testing.T, tp *tamper, fields []any) {
		tp.do(t, append([]any{"HSET", tp.anchorKey(anchorTx(1))}, fields...)...)
		tp.do(t, "ZADD", tp.anchorsKey(), "0", anchorMember(1000, 3, anchorTx(1)))
	}

	tests := []struct {
		name  string
		plant func(t *testing.T, tp *tamper)
		ops   []op
	}{
		{"anchor record is a string", func(t *testing.T, tp *tamper) {
			tp.do(t, "SET", tp.anchorKey(anchorTx(1)), "foreign")
		}, recordOps},
		{"anchor record is a list", func(t *testing.T, tp *tamper) {
			tp.do(t, "RPUSH", tp.anchorKey(anchorTx(1)), "foreign")
		}, recordOps},
		{"anchor record is another program's hash", func(t *testing.T, tp *tamper) {
			tp.do(t, "HSET", tp.anchorKey(anchorTx(1)), "user", "alice", "visits", "3")
		}, recordOps},
		{"anchor record lacks its block", func(t *testing.T, tp *tamper) {
			tp.do(t, append([]any{"HSET", tp.anchorKey(anchorTx(1))}, without(anchorFields(), "block")...)...)
		}, recordOps},
		{"anchor record has a size that is no number", func(t *testing.T, tp *tamper) {
			tp.do(t, append([]any{"HSET", tp.anchorKey(anchorTx(1))}, with(anchorFields(), "size", "3x")...)...)
		}, recordOps},
		{"anchor record has size zero", func(t *testing.T, tp *tamper) {
			tp.do(t, append([]any{"HSET", tp.anchorKey(anchorTx(1))}, with(anchorFields(), "size", "0")...)...)
		}, recordOps},
		{"anchor record has a size over 2^63-1", func(t *testing.T, tp *tamper) {
			tp.do(t, append([]any{"HSET", tp.anchorKey(anchorTx(1))}, with(anchorFields(), "size", "9223372036854775808")...)...)
		}, recordOps},
		{"anchor record has a negative block", func(t *testing.T, tp *tamper) {
			tp.do(t, append([]any{"HSET", tp.anchorKey(anchorTx(1))}, with(anchorFields(), "block", "-1")...)...)
		}, recordOps},
		{"anchor record has a time of 30 digits", func(t *testing.T, tp *tamper) {
			tp.do(t, append([]any{"HSET", tp.anchorKey(anchorTx(1))}, with(anchorFields(), "sent_at_ms", strings.Repeat("9", 30))...)...)
		}, recordOps},
		{"anchor record has a root that is not hex", func(t *testing.T, tp *tamper) {
			tp.do(t, append([]any{"HSET", tp.anchorKey(anchorTx(1))}, with(anchorFields(), "root", strings.Repeat("g", 64))...)...)
		}, recordOps},
		{"anchor record has a short root", func(t *testing.T, tp *tamper) {
			tp.do(t, append([]any{"HSET", tp.anchorKey(anchorTx(1))}, with(anchorFields(), "root", "ff")...)...)
		}, recordOps},
		{"listing is a string", func(t *testing.T, tp *tamper) {
			tp.do(t, "SET", tp.anchorsKey(), "foreign")
		}, []op{recordNew, list}},
		{"listing is another program's set", func(t *testing.T, tp *tamper) {
			tp.do(t, "ZADD", tp.anchorsKey(), "0", "foreign")
		}, []op{list}},
		{"listing names a record that is a string", func(t *testing.T, tp *tamper) {
			tp.do(t, "ZADD", tp.anchorsKey(), "0", anchorMember(1000, 3, anchorTx(1)))
			tp.do(t, "SET", tp.anchorKey(anchorTx(1)), "foreign")
		}, []op{list}},
		{"listing names a record of another time", func(t *testing.T, tp *tamper) {
			listed(t, tp, with(anchorFields(), "sent_at_ms", "2000"))
		}, []op{list}},
		{"listing names a record of another size", func(t *testing.T, tp *tamper) {
			listed(t, tp, with(anchorFields(), "size", "30"))
		}, []op{list}},
		{"listing names a record with a bad root", func(t *testing.T, tp *tamper) {
			listed(t, tp, with(anchorFields(), "root", "ff"))
		}, []op{list}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tp := newTamper(t)
			tc.plant(t, tp)
			before := tp.snapshot(t)
			for _, o := range tc.ops {
				err := o.call(t.Context(), tp.db)
				wantForeign(t, o.name, err)
			}
			if diff := cmp.Diff(before, tp.snapshot(t)); diff != "" {
				t.Errorf("keys changed (-before +after):\n%s", diff)
			}
		})
	}
}

// TestLogAnchorsOrder checks the listing's order where the bytes of plain
// decimals would get it wrong: sizes of different lengths, up to the
// largest, and times on both sides of 1970; and that a time out of the
// range the order holds is refused without a write.
func TestLogAnchorsOrder(t *testing.T) {
	tp := newTamper(t)
	ctx := t.Context()
	at := func(ms int64) time.Time { return time.UnixMilli(ms).UTC() }
	set := func(ms int64) {
		tp.clock.mu.Lock()
		defer tp.clock.mu.Unlock()
		tp.clock.now = at(ms)
	}
	var want []store.LogAnchor
	n := 0
	rec := func(ms int64, sizes ...int64) {
		t.Helper()
		set(ms)
		for _, size := range sizes {
			n++
			a := newAnchor(n, size)
			if err := tp.db.RecordAnchor(ctx, a); err != nil {
				t.Fatalf("RecordAnchor(%d at %d ms): %v", size, ms, err)
			}
			a.SentAt = at(ms)
			want = append(want, a)
		}
	}
	rec(-1e15+1, 1)
	rec(-1000, 10, 9)
	rec(-1, 2)
	rec(0, 100, math.MaxInt64, 99)
	rec(9, 1)
	rec(10, 1)
	rec(1e15-1, 7)
	// Newest first: by time, then size (anchors 1 to 10 in the order
	// recorded).
	wantOrder := []int{10, 9, 8, 6, 5, 7, 4, 2, 3, 1}
	var wantList []store.LogAnchor
	for _, i := range wantOrder {
		wantList = append(wantList, want[i-1])
	}
	got, err := tp.db.LogAnchors(ctx, store.MaxLogAnchors)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(wantList, got); diff != "" {
		t.Errorf("LogAnchors (-want +got):\n%s", diff)
	}
	// The largest block reads back whole, and the order stays.
	if err := tp.db.ConfirmAnchor(ctx, anchorTx(8), math.MaxInt64); err != nil {
		t.Fatal(err)
	}
	wantList[2].Block = math.MaxInt64
	if got, err := tp.db.LogAnchors(ctx, store.MaxLogAnchors); err != nil || !cmp.Equal(wantList, got) {
		t.Errorf("LogAnchors after ConfirmAnchor = %v (-want +got):\n%s", err, cmp.Diff(wantList, got))
	}

	before := tp.snapshot(t)
	for _, ms := range []int64{1e15, -1e15, math.MaxInt64 / 2} {
		set(ms)
		err := tp.db.RecordAnchor(ctx, newAnchor(100, 1))
		if err == nil || errors.Is(err, store.ErrConflict) {
			t.Errorf("RecordAnchor at %d ms = %v, want an error that is no sentinel", ms, err)
		}
	}
	if diff := cmp.Diff(before, tp.snapshot(t)); diff != "" {
		t.Errorf("keys changed (-before +after):\n%s", diff)
	}
}

// TestLogAnchorsSkipsMissing checks that a member of the listing whose
// record was deleted by hand is skipped and does not use up the limit.
func TestLogAnchorsSkipsMissing(t *testing.T) {
	tp := newTamper(t)
	ctx := t.Context()
	for i := 1; i <= 3; i++ {
		if err := tp.db.RecordAnchor(ctx, newAnchor(i, 3)); err != nil {
			t.Fatal(err)
		}
		tp.clock.Advance(time.Millisecond)
	}
	tp.do(t, "DEL", tp.anchorKey(anchorTx(3)))
	got, err := tp.db.LogAnchors(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].TxHash != anchorTx(2) || got[1].TxHash != anchorTx(1) {
		t.Errorf("LogAnchors(2) = %+v, want anchors 2 and 1", got)
	}
}

// TestLogAnchorsKeys checks, on the server's clock, that SentAt is the
// server's time, that the keys carry the prefix as their hash tag, and that
// neither the records nor the listing expire.
func TestLogAnchorsKeys(t *testing.T) {
	u, prefix := freshURL(t)
	db := open(t, u, nil)
	tp := &tamper{db: db, raw: rawClient(t, testURL(t)), prefix: prefix}
	ctx := t.Context()
	before := time.Now()
	for i := 1; i <= 2; i++ {
		if err := db.RecordAnchor(ctx, newAnchor(i, int64(i))); err != nil {
			t.Fatal(err)
		}
	}
	got, err := db.LogAnchors(ctx, 10)
	if err != nil || len(got) != 2 {
		t.Fatalf("LogAnchors = %+v, %v; want two anchors", got, err)
	}
	for _, a := range got {
		// The server runs on this machine, so its clock is near ours.
		if d := a.SentAt.Sub(before); d < -5*time.Second || d > 5*time.Second || a.SentAt.Location() != time.UTC {
			t.Errorf("SentAt = %v, %v away from this machine's clock; want the server's time in UTC", a.SentAt, d)
		}
	}
	keys := tp.snapshot(t)
	want := []string{tp.anchorKey(anchorTx(1)), tp.anchorKey(anchorTx(2)), tp.anchorsKey()}
	if len(keys) != len(want) {
		t.Errorf("the store wrote keys %v, want %v", keys, want)
	}
	for _, k := range want {
		if _, ok := keys[k]; !ok {
			t.Errorf("no key %s", k)
		}
		if tag := hashTag(k); tag != prefix {
			t.Errorf("key %q has hash tag %q, want the prefix %q", k, tag, prefix)
		}
		if d, err := tp.raw.PTTL(ctx, k).Result(); err != nil || d != -1 {
			t.Errorf("PTTL %s = %v, %v; want no TTL (-1)", k, d, err)
		}
	}
}
