package redis_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/internal/store/redis"
	"github.com/llm4agents/llm4agents/internal/store/storetest"
)

// TestReceiptLog runs the receipt log conformance suite with two DB values
// (two clients) on one fresh prefix, as two replicas would share it.
func TestReceiptLog(t *testing.T) {
	storetest.RunReceiptLog(t, func(t *testing.T, now func() time.Time) (a, b storetest.ReceiptLogStore) {
		return pair(t, now)
	})
}

// BenchmarkReceiptLog runs the receipt log benchmarks every backend shares,
// on the server's clock, one fresh prefix per run.
func BenchmarkReceiptLog(b *testing.B) {
	storetest.RunReceiptLogBenchmarks(b, func(b *testing.B) storetest.ReceiptLogStore {
		u, _ := freshURL(b)
		return open(b, u, nil)
	})
}

// The log's keys of a tamper store, as receiptlog.go lays them out.
func (tp *tamper) logKey(name string) string { return "{" + tp.prefix + "}log-" + name }

// contents returns every key of the store with its type and contents, to
// show that an operation changed nothing. Unlike tamper.snapshot's DUMP, it
// does not depend on how Redis lays a key out: a large hash's DUMP changes
// when a read moves its incremental rehashing on.
func (tp *tamper) contents(t *testing.T) map[string]string {
	t.Helper()
	ctx := t.Context()
	out := map[string]string{}
	iter := tp.raw.Scan(ctx, 0, "{"+tp.prefix+"}*", 1000).Iterator()
	for iter.Next(ctx) {
		k := iter.Val()
		typ, err := tp.raw.Type(ctx, k).Result()
		if err != nil {
			t.Fatalf("TYPE %s: %v", k, err)
		}
		var v any
		switch typ {
		case "string":
			v, err = tp.raw.Get(ctx, k).Result()
		case "hash":
			var m map[string]string
			m, err = tp.raw.HGetAll(ctx, k).Result()
			v = m // fmt prints a map's keys sorted
		case "zset":
			v, err = tp.raw.ZRangeWithScores(ctx, k, 0, -1).Result()
		case "list":
			v, err = tp.raw.LRange(ctx, k, 0, -1).Result()
		case "set":
			var members []string
			members, err = tp.raw.SMembers(ctx, k).Result()
			slices.Sort(members)
			v = members
		default:
			t.Fatalf("key %s is a %s", k, typ)
		}
		if err != nil {
			t.Fatalf("read %s: %v", k, err)
		}
		out[k] = fmt.Sprintf("%s %#v", typ, v)
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// entries are the log entries of ids, each with a leaf of its own.
func entries(ids ...string) []store.LogEntry {
	out := make([]store.LogEntry, len(ids))
	for i, id := range ids {
		out[i] = store.LogEntry{RequestID: id, Leaf: append([]byte{0, 0xff}, id...)}
	}
	return out
}

// numbered are n request ids with prefix.
func numbered(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%d", prefix, i)
	}
	return out
}

// hashesAt are n hashes from storage index from on.
func hashesAt(from, n int64) []store.LogHash {
	out := make([]store.LogHash, n)
	for i := range out {
		out[i] = store.LogHash{Index: from + int64(i), Hash: sha256.Sum256(fmt.Appendf(nil, "%d", from+int64(i)))}
	}
	return out
}

// TestReceiptLogRefusalsWriteNothing checks, key by key and byte by byte
// (DUMP), that a refused call leaves the store as it was, with the refusal
// found as late as it can be: after a full batch of ids and hashes was
// checked. The suite sees the log only through the interface; this sees
// every key, so a script that wrote before its last check would fail here.
func TestReceiptLogRefusalsWriteNothing(t *testing.T) {
	tp := newTamper(t)
	ctx := t.Context()
	ids := numbered("req_", store.MaxLogBatch)
	if err := tp.db.AppendLog(ctx, entries(ids...)); err != nil {
		t.Fatal(err)
	}
	// Never leased: no fence integrates, not even the zero state's.
	if err := tp.db.IntegrateLog(ctx, 0, 0, ids[:1], nil, []byte("cp")); !errors.Is(err, store.ErrFenced) {
		t.Errorf("IntegrateLog before any lease = %v, want ErrFenced", err)
	}
	st, held, err := tp.db.TakeLogLease(ctx, "alice", time.Minute)
	if err != nil || !held {
		t.Fatalf("TakeLogLease = %v, %v", held, err)
	}
	if err := tp.db.IntegrateLog(ctx, st.Fence, 0, []string{"req_done"}, nil, []byte("cp")); !errors.Is(err, store.ErrFenced) {
		t.Errorf("IntegrateLog of an id never queued = %v, want ErrFenced", err)
	}
	if err := tp.db.AppendLog(ctx, entries("req_done")); err != nil {
		t.Fatal(err)
	}
	if err := tp.db.IntegrateLog(ctx, st.Fence, 0, []string{"req_done"}, hashesAt(0, 1), []byte("cp 1")); err != nil {
		t.Fatal(err)
	}
	full := hashesAt(1, store.MaxLogHashes)
	lateStored := append(hashesAt(1, store.MaxLogHashes-1), hashesAt(0, 1)...)
	lateRepeated := append(hashesAt(1, store.MaxLogHashes-1), hashesAt(5, 1)...)
	lastDone := append(append([]string{}, ids[:store.MaxLogBatch-1]...), "req_done")
	otherLeaf := entries(numbered("req_new_", store.MaxLogBatch-1)...)
	otherLeaf = append(otherLeaf, store.LogEntry{RequestID: "req_7", Leaf: []byte("another leaf")})
	conflicting := newReceipt("req_9", 9)
	conflicting.Leaf = []byte("another leaf")
	tests := []struct {
		name   string
		call   func() error
		fenced bool // ErrFenced, ErrConflict, or an error that is no sentinel
		is     error
	}{
		{"IntegrateLog with a stale fence", func() error {
			return tp.db.IntegrateLog(ctx, st.Fence-1, 1, ids, full, []byte("cp"))
		}, true, store.ErrFenced},
		{"IntegrateLog with a fence never issued", func() error {
			return tp.db.IntegrateLog(ctx, st.Fence+1, 1, ids, full, []byte("cp"))
		}, true, store.ErrFenced},
		{"IntegrateLog at another size", func() error {
			return tp.db.IntegrateLog(ctx, st.Fence, 0, ids, full, []byte("cp"))
		}, true, store.ErrFenced},
		{"IntegrateLog with an integrated id last", func() error {
			return tp.db.IntegrateLog(ctx, st.Fence, 1, lastDone, full, []byte("cp"))
		}, true, store.ErrFenced},
		{"IntegrateLog with a stored hash index last", func() error {
			return tp.db.IntegrateLog(ctx, st.Fence, 1, ids, lateStored, []byte("cp"))
		}, false, nil},
		{"IntegrateLog with a hash index repeated last", func() error {
			return tp.db.IntegrateLog(ctx, st.Fence, 1, ids, lateRepeated, []byte("cp"))
		}, false, nil},
		{"AppendLog with a conflicting leaf last", func() error {
			return tp.db.AppendLog(ctx, otherLeaf)
		}, true, store.ErrConflict},
		{"PutReceipt with a conflicting leaf", func() error {
			return tp.db.PutReceipt(ctx, conflicting)
		}, true, store.ErrConflict},
	}
	for _, tc := range tests {
		before := tp.contents(t)
		err := tc.call()
		switch {
		case tc.fenced && !errors.Is(err, tc.is):
			t.Errorf("%s = %v, want %v", tc.name, err, tc.is)
		case !tc.fenced && (err == nil || errors.Is(err, store.ErrFenced) || errors.Is(err, store.ErrConflict)):
			t.Errorf("%s = %v, want an error that is no sentinel", tc.name, err)
		}
		if diff := cmp.Diff(before, tp.contents(t)); diff != "" {
			t.Errorf("%s changed keys (-before +after):\n%s", tc.name, diff)
		}
	}
	// The same batch, unrefused, integrates whole.
	if err := tp.db.IntegrateLog(ctx, st.Fence, 1, ids, full, []byte("cp")); err != nil {
		t.Fatalf("IntegrateLog of the full batch: %v", err)
	}
	if got, err := tp.db.LogState(ctx); err != nil || got.Size != 1+store.MaxLogBatch {
		t.Errorf("LogState = size %d, %v; want %d", got.Size, err, 1+store.MaxLogBatch)
	}
}

// TestReceiptLogForeignValues writes values the store did not write at the
// log's keys, and checks that every operation touching them fails with an
// error that is no store sentinel and changes no key.
func TestReceiptLogForeignValues(t *testing.T) {
	type op struct {
		name string
		call func(ctx context.Context, db *redis.DB) error
	}
	appendOne := op{"AppendLog", func(ctx context.Context, db *redis.DB) error { return db.AppendLog(ctx, entries("req_1")) }}
	appendNew := op{"AppendLog(new)", func(ctx context.Context, db *redis.DB) error { return db.AppendLog(ctx, entries("req_2")) }}
	putLeaf := op{"PutReceipt", func(ctx context.Context, db *redis.DB) error {
		r := newReceipt("req_2", 2)
		r.Leaf = entries("req_2")[0].Leaf
		return db.PutReceipt(ctx, r)
	}}
	entry := op{"LogEntry", func(ctx context.Context, db *redis.DB) error { _, err := db.LogEntry(ctx, "req_1"); return err }}
	pending := op{"PendingLog", func(ctx context.Context, db *redis.DB) error { _, err := db.PendingLog(ctx, 10); return err }}
	take := op{"TakeLogLease", func(ctx context.Context, db *redis.DB) error {
		_, _, err := db.TakeLogLease(ctx, "alice", time.Minute)
		return err
	}}
	release := op{"ReleaseLogLease", func(ctx context.Context, db *redis.DB) error { return db.ReleaseLogLease(ctx, "alice", 1) }}
	state := op{"LogState", func(ctx context.Context, db *redis.DB) error { _, err := db.LogState(ctx); return err }}
	integrate := op{"IntegrateLog", func(ctx context.Context, db *redis.DB) error {
		return db.IntegrateLog(ctx, 1, 0, []string{"req_1"}, hashesAt(0, 1), []byte("cp"))
	}}
	hashes := op{"LogHashes", func(ctx context.Context, db *redis.DB) error { _, err := db.LogHashes(ctx, []int64{0}); return err }}
	leaves := op{"LogLeaves", func(ctx context.Context, db *redis.DB) error { _, err := db.LogLeaves(ctx, 0, 1); return err }}
	leaf := string(entries("req_1")[0].Leaf)
	stateFields := func() []any {
		return []any{"size", "0", "checkpoint", "", "holder", "alice", "fence", "1", "lease_until_ms", "1000"}
	}
	// queued plants req_1 pending, and a lease alice holds under fence 1.
	queued := func(t *testing.T, tp *tamper) {
		tp.do(t, "HSET", tp.logKey("leaves"), "req_1", leaf)
		tp.do(t, "ZADD", tp.logKey("pending"), "1", "req_1")
		tp.do(t, "SET", tp.logKey("queue"), "1")
		tp.do(t, append([]any{"HSET", tp.logKey("state")}, stateFields()...)...)
	}
	tests := []struct {
		name  string
		plant func(t *testing.T, tp *tamper)
		ops   []op
	}{
		{"leaves are a string", func(t *testing.T, tp *tamper) {
			tp.do(t, "SET", tp.logKey("leaves"), "foreign")
		}, []op{appendOne, appendNew, putLeaf, entry}},
		{"leaf is empty", func(t *testing.T, tp *tamper) {
			tp.do(t, "HSET", tp.logKey("leaves"), "req_1", "")
		}, []op{appendOne, entry}},
		{"entry is neither pending nor integrated", func(t *testing.T, tp *tamper) {
			tp.do(t, "HSET", tp.logKey("leaves"), "req_1", leaf)
		}, []op{entry}},
		{"entry has an index that is no number", func(t *testing.T, tp *tamper) {
			tp.do(t, "HSET", tp.logKey("leaves"), "req_1", leaf)
			tp.do(t, "HSET", tp.logKey("index"), "req_1", "x")
		}, []op{entry}},
		{"entry is both pending and integrated", func(t *testing.T, tp *tamper) {
			queued(t, tp)
			tp.do(t, "HSET", tp.logKey("index"), "req_1", "0")
		}, []op{integrate}},
		{"index is a string", func(t *testing.T, tp *tamper) {
			queued(t, tp)
			tp.do(t, "SET", tp.logKey("index"), "foreign")
		}, []op{integrate, entry}},
		{"queue is a string", func(t *testing.T, tp *tamper) {
			tp.do(t, "SET", tp.logKey("pending"), "foreign")
		}, []op{appendNew, putLeaf, pending}},
		{"queue is a string under a lease", func(t *testing.T, tp *tamper) {
			queued(t, tp)
			tp.do(t, "DEL", tp.logKey("pending"))
			tp.do(t, "SET", tp.logKey("pending"), "foreign")
		}, []op{integrate, entry}},
		{"queue counter is no number", func(t *testing.T, tp *tamper) {
			tp.do(t, "SET", tp.logKey("queue"), "many")
		}, []op{appendNew, putLeaf}},
		{"queue counter is at 2^53", func(t *testing.T, tp *tamper) {
			tp.do(t, "SET", tp.logKey("queue"), "9007199254740991")
		}, []op{appendNew, putLeaf}},
		{"queue names an entry without its leaf", func(t *testing.T, tp *tamper) {
			tp.do(t, "ZADD", tp.logKey("pending"), "1", "req_1")
		}, []op{pending}},
		{"state is a string", func(t *testing.T, tp *tamper) {
			tp.do(t, "SET", tp.logKey("state"), "foreign")
		}, []op{take, release, state, integrate, leaves}},
		{"state lacks its fence", func(t *testing.T, tp *tamper) {
			tp.do(t, append([]any{"HSET", tp.logKey("state")}, without(stateFields(), "fence")...)...)
		}, []op{take, release, state, integrate, leaves}},
		{"state has a fence at 2^53", func(t *testing.T, tp *tamper) {
			tp.do(t, append([]any{"HSET", tp.logKey("state")}, with(stateFields(), "fence", "9007199254740992")...)...)
		}, []op{take, release, state, integrate, leaves}},
		{"state has a size but no checkpoint", func(t *testing.T, tp *tamper) {
			tp.do(t, append([]any{"HSET", tp.logKey("state")}, with(stateFields(), "size", "3")...)...)
		}, []op{take, release, state, integrate, leaves}},
		{"index of leaf ids is a string", func(t *testing.T, tp *tamper) {
			queued(t, tp)
			tp.do(t, "SET", tp.logKey("ids"), "foreign")
		}, []op{integrate}},
		{"hashes are a string", func(t *testing.T, tp *tamper) {
			queued(t, tp)
			tp.do(t, "SET", tp.logKey("hashes"), "foreign")
		}, []op{integrate, hashes}},
		{"hash of another length", func(t *testing.T, tp *tamper) {
			tp.do(t, "HSET", tp.logKey("hashes"), "0", "short")
		}, []op{hashes}},
		{"leaf index names no entry", func(t *testing.T, tp *tamper) {
			tp.do(t, append([]any{"HSET", tp.logKey("state")}, with(with(stateFields(), "size", "1"), "checkpoint", "cp")...)...)
			tp.do(t, "HSET", tp.logKey("ids"), "0", "req_1")
		}, []op{leaves}},
		{"leaf index names an entry of another index", func(t *testing.T, tp *tamper) {
			tp.do(t, append([]any{"HSET", tp.logKey("state")}, with(with(stateFields(), "size", "1"), "checkpoint", "cp")...)...)
			tp.do(t, "HSET", tp.logKey("ids"), "0", "req_1")
			tp.do(t, "HSET", tp.logKey("index"), "req_1", "5")
			tp.do(t, "HSET", tp.logKey("leaves"), "req_1", leaf)
		}, []op{leaves}},
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

// TestReceiptLogKeys checks, on the server's clock, that the keys of
// receipts and the log carry the prefix as their hash tag, that none has a
// TTL but the recent listing of receipts (an index, see receipts.go), and
// that the lease and the receipt's listing are judged by the server's time.
func TestReceiptLogKeys(t *testing.T) {
	u, prefix := freshURL(t)
	db := open(t, u, nil)
	tp := &tamper{db: db, raw: rawClient(t, testURL(t)), prefix: prefix}
	ctx := t.Context()
	before := time.Now()
	r := newReceipt("req_1", 0)
	r.Leaf = []byte("leaf")
	if err := db.PutReceipt(ctx, r); err != nil {
		t.Fatal(err)
	}
	if err := db.AppendLog(ctx, entries("req_2")); err != nil {
		t.Fatal(err)
	}
	st, held, err := db.TakeLogLease(ctx, "alice", time.Minute)
	if err != nil || !held {
		t.Fatalf("TakeLogLease = %v, %v", held, err)
	}
	// The server runs on this machine, so its clock is near ours.
	if d := st.LeaseUntil.Sub(before.Add(time.Minute)); d < -5*time.Second || d > 5*time.Second {
		t.Errorf("LeaseUntil = %v, %v away from this machine's clock plus the lease", st.LeaseUntil, d)
	}
	if err := db.IntegrateLog(ctx, st.Fence, 0, []string{"req_1"}, hashesAt(0, 1), []byte("cp")); err != nil {
		t.Fatal(err)
	}
	got, err := db.RecentReceipts(ctx, before.Add(-5*time.Second), 10)
	if err != nil || len(got) != 1 || got[0].RequestID != "req_1" {
		t.Errorf("RecentReceipts(5 s before) = %v, %v; want req_1", receiptIDsOf(got), err)
	}
	recent := tp.recentReceiptsKey()
	if tag := hashTag(recent); tag != prefix {
		t.Errorf("key %q has hash tag %q, want the prefix %q", recent, tag, prefix)
	}
	if d, err := tp.raw.PTTL(ctx, recent).Result(); err != nil || d <= 0 || d > store.RecentRetention {
		t.Errorf("PTTL %s = %v, %v; want up to %v", recent, d, err, store.RecentRetention)
	}
	keys := tp.contents(t)
	delete(keys, recent)
	want := []string{
		"{" + prefix + "}receipt:req_1", "{" + prefix + "}receipt-seq", "{" + prefix + "}receipts:" + testOwner,
		"{" + prefix + "}receipts-key:" + testOwner + ":key_1",
		tp.logKey("leaves"), tp.logKey("pending"), tp.logKey("queue"),
		tp.logKey("state"), tp.logKey("index"), tp.logKey("ids"), tp.logKey("hashes"),
	}
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
