package redis_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/internal/store/storetest"
)

func TestRecoveries(t *testing.T) {
	storetest.RunRecoveries(t, func(t *testing.T, now func() time.Time) (a, b store.Recoveries) {
		return pair(t, now)
	})
}

// recInput is a recovery record to begin on the tamper store, expiring an
// hour after the tamper clock.
func recInput(tp *tamper, key, op string) store.Recovery {
	return store.Recovery{
		Key: key, Payer: "0xb", Fingerprint: "fp", OperationID: op, PaymentKey: "pk", ProofHash: "ph",
		ProofUntil: tp.clock.Now().Add(time.Minute), Amount: "1", Owner: "me", ExpiresAt: tp.clock.Now().Add(time.Hour),
	}
}

// recoveryFields is a well-formed promoted recovery record, as the store
// writes it, with fence 7, operation id "op", expiring far in the future and
// with replays left: what a replay would be served from.
func recoveryFields() []any {
	return []any{"payer", "0xb", "fingerprint", "fp", "operation_id", "op", "payment_key", "pk", "proof_hash", "ph",
		"proof_until_ms", "0", "amount", "1", "state", "promoted", "network", "eip155:8453", "tx_hash", "0x1",
		"owner", "x", "fence", "7", "lease_until_ms", "0", "expires_at_ms", "9000000000000", "replays_left", "3",
		"created_at_ms", "0", "updated_at_ms", "0",
		"response_status", "200", "response_content_type", "application/json", "response_body", "{}"}
}

// TestRecoveryForeignValues writes values the store did not write at the
// keys recoveries use, and checks that every operation touching them fails
// with an error that is no store sentinel, holds nothing, replays nothing and
// changes no key.
func TestRecoveryForeignValues(t *testing.T) {
	type op struct {
		name string
		call func(ctx context.Context, tp *tamper) (won bool, err error)
	}
	begin := func(key, opID string) op {
		return op{"BeginRecovery(" + key + ", " + opID + ")", func(ctx context.Context, tp *tamper) (bool, error) {
			_, won, err := tp.db.BeginRecovery(ctx, recInput(tp, key, opID), time.Minute)
			return won, err
		}}
	}
	stage := op{"StageRecovery", func(ctx context.Context, tp *tamper) (bool, error) {
		return false, tp.db.StageRecovery(ctx, "k", 7, store.RecordedResponse{Status: 200, Body: []byte("x")})
	}}
	promote := op{"PromoteRecovery", func(ctx context.Context, tp *tamper) (bool, error) {
		_, err := tp.db.PromoteRecovery(ctx, "op", "fp", store.SettlementRef{Network: "eip155:8453", TxHash: "0x1"}, time.Hour, 1)
		return false, err
	}}
	abandon := op{"AbandonRecovery", func(ctx context.Context, tp *tamper) (bool, error) {
		return false, tp.db.AbandonRecovery(ctx, "k", 7)
	}}
	read := op{"Recovery", func(ctx context.Context, tp *tamper) (bool, error) {
		_, err := tp.db.Recovery(ctx, "k")
		return false, err
	}}
	replay := op{"TakeReplay", func(ctx context.Context, tp *tamper) (bool, error) {
		_, took, err := tp.db.TakeReplay(ctx, "k", "op")
		return took, err
	}}
	// recordOps are the operations that read the record at "k". Promotion
	// reaches it only through an index naming it, which plantRecord writes.
	recordOps := []op{begin("k", "op2"), stage, promote, abandon, read, replay}
	plantRecord := func(fields []any) func(t *testing.T, tp *tamper) {
		return func(t *testing.T, tp *tamper) {
			tp.do(t, append([]any{"HSET", tp.db.RecoveryKey("record", "k")}, fields...)...)
			tp.do(t, "SET", tp.db.RecoveryKey("index", "op"), "k")
		}
	}
	tests := []struct {
		name  string
		plant func(t *testing.T, tp *tamper)
		ops   []op
	}{
		{"record is a string", func(t *testing.T, tp *tamper) {
			tp.do(t, "SET", tp.db.RecoveryKey("record", "k"), "foreign")
			tp.do(t, "SET", tp.db.RecoveryKey("index", "op"), "k")
		}, recordOps},
		{"record is a list", func(t *testing.T, tp *tamper) {
			tp.do(t, "RPUSH", tp.db.RecoveryKey("record", "k"), "foreign")
			tp.do(t, "SET", tp.db.RecoveryKey("index", "op"), "k")
		}, recordOps},
		{"record is another program's hash", plantRecord([]any{"user", "alice", "visits", "3"}), recordOps},
		{"record has only a response", plantRecord([]any{"response_status", "200", "response_body", "free"}), recordOps},
		{"record lacks its state", plantRecord(without(recoveryFields(), "state")), recordOps},
		{"record lacks its expiry", plantRecord(without(recoveryFields(), "expires_at_ms")), recordOps},
		{"record lacks its operation id", plantRecord(without(recoveryFields(), "operation_id")), recordOps},
		{"record has an unknown state", plantRecord(with(recoveryFields(), "state", "settled")), recordOps},
		{"record has a fence that is no number", plantRecord(with(recoveryFields(), "fence", "7x")), recordOps},
		{"record has a budget that is no number", plantRecord(with(recoveryFields(), "replays_left", "many")), recordOps},
		{"record has an expiry that is no number", plantRecord(with(recoveryFields(), "expires_at_ms", "later")), recordOps},
		{"promoted record lacks its body", plantRecord(without(recoveryFields(), "response_body")), recordOps},
		{"promoted record lacks its response", plantRecord(without(without(without(recoveryFields(),
			"response_status"), "response_content_type"), "response_body")), recordOps},
		{"promoted record has a status that is no number", plantRecord(with(recoveryFields(), "response_status", "OK")), recordOps},
		{"promoted record has a status out of range", plantRecord(with(recoveryFields(), "response_status", "1000")), recordOps},
		{"promoted record has no settlement", plantRecord(with(recoveryFields(), "tx_hash", "")), recordOps},
		{"in-flight record has a response", plantRecord(with(recoveryFields(), "state", "in_flight")), recordOps},
		{"staged record has no response", plantRecord(with(without(recoveryFields(), "response_status"), "state", "staged")), recordOps},
		{"budget over 64 bits", plantRecord(with(recoveryFields(), "replays_left", "99999999999999999999")), []op{replay}},
		{"operation index is a hash", func(t *testing.T, tp *tamper) {
			tp.do(t, "HSET", tp.db.RecoveryKey("index", "op"), "k", "k")
		}, []op{promote, begin("new", "op")}},
		{"operation index names a foreign record", func(t *testing.T, tp *tamper) {
			tp.do(t, "SET", tp.db.RecoveryKey("index", "op"), "other")
			tp.do(t, "SET", tp.db.RecoveryKey("record", "other"), "foreign")
		}, []op{promote, begin("new", "op")}},
		// Writes that would follow the record's own deletion: the index
		// must be checked first, or the record would be half replaced.
		{"index of a spent record is a hash", func(t *testing.T, tp *tamper) {
			tp.do(t, append([]any{"HSET", tp.db.RecoveryKey("record", "k")}, with(recoveryFields(), "replays_left", "0")...)...)
			tp.do(t, "HSET", tp.db.RecoveryKey("index", "op"), "k", "k")
		}, []op{begin("k", "op2")}},
		{"index of a staged record is a hash", func(t *testing.T, tp *tamper) {
			tp.do(t, append([]any{"HSET", tp.db.RecoveryKey("record", "k")}, with(recoveryFields(), "state", "staged")...)...)
			tp.do(t, "HSET", tp.db.RecoveryKey("index", "op"), "k", "k")
		}, []op{abandon}},
		{"fence counter is not a number", func(t *testing.T, tp *tamper) {
			tp.do(t, "SET", tp.db.RecoveryKey("fence", ""), "abc")
		}, []op{begin("new", "op-new")}},
		{"fence counter is a list", func(t *testing.T, tp *tamper) {
			tp.do(t, "RPUSH", tp.db.RecoveryKey("fence", ""), "1")
		}, []op{begin("new", "op-new")}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tp := newTamper(t)
			tc.plant(t, tp)
			before := tp.snapshot(t)
			for _, o := range tc.ops {
				won, err := o.call(t.Context(), tp)
				wantForeign(t, o.name, err)
				if won {
					t.Errorf("%s won a record or a replay on foreign data", o.name)
				}
			}
			if diff := cmp.Diff(before, tp.snapshot(t)); diff != "" {
				t.Errorf("keys changed (-before +after):\n%s", diff)
			}
		})
	}
}

// TestRecoveryStaleIndex checks that an operation id index that outlived its
// record (the record replaced by another operation, or replaced by hand)
// promotes nothing and takes no replay, and that an operation id a live
// record carries is not given to a second record.
func TestRecoveryStaleIndex(t *testing.T) {
	tp := newTamper(t)
	ctx := t.Context()
	ref := store.SettlementRef{Network: "eip155:8453", TxHash: "0x1"}
	a, ok, err := tp.db.BeginRecovery(ctx, recInput(tp, "k", "op1"), time.Minute)
	if err != nil || !ok {
		t.Fatalf("BeginRecovery() = %v, %v", ok, err)
	}
	if err := tp.db.StageRecovery(ctx, "k", a.Fence, store.RecordedResponse{Status: 200}); err != nil {
		t.Fatal(err)
	}
	// A second record may not take op1 while k carries it.
	if _, ok, err := tp.db.BeginRecovery(ctx, recInput(tp, "k2", "op1"), time.Minute); err == nil || ok ||
		errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrFenced) {
		t.Errorf("BeginRecovery(k2, op1) = %v, %v; want an error that is no sentinel", ok, err)
	}
	// Point op2's index at k by hand: k carries op1, so op2 finds nothing.
	tp.do(t, "SET", tp.db.RecoveryKey("index", "op2"), "k")
	if _, err := tp.db.PromoteRecovery(ctx, "op2", "fp", ref, time.Hour, 1); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("PromoteRecovery(op2 through a stale index) = %v, want ErrNotFound", err)
	}
	if r, err := tp.db.Recovery(ctx, "k"); err != nil || r.State != store.RecoveryStaged {
		t.Errorf("k after the refused promotion = %+v, %v", r, err)
	}
	// Once k is abandoned, its index is gone and op1 may be used again.
	if err := tp.db.AbandonRecovery(ctx, "k", a.Fence); err != nil {
		t.Fatal(err)
	}
	if n, err := tp.raw.Exists(ctx, tp.db.RecoveryKey("index", "op1")).Result(); err != nil || n != 0 {
		t.Errorf("op1's index after abandon: EXISTS = %d, %v; want 0", n, err)
	}
	if _, ok, err := tp.db.BeginRecovery(ctx, recInput(tp, "k2", "op1"), time.Minute); err != nil || !ok {
		t.Errorf("BeginRecovery(k2, op1) after abandon = %v, %v", ok, err)
	}
}

// TestRecoveryFenceCounterLost checks that a record key's fences keep
// growing when the counter was deleted by hand: a replacement never hands out
// a fence the record's earlier holder could still write with.
func TestRecoveryFenceCounterLost(t *testing.T) {
	tp := newTamper(t)
	ctx := t.Context()
	first, ok, err := tp.db.BeginRecovery(ctx, recInput(tp, "k", "op1"), time.Minute)
	if err != nil || !ok {
		t.Fatalf("BeginRecovery() = %v, %v", ok, err)
	}
	tp.do(t, "DEL", tp.db.RecoveryKey("fence", ""))
	tp.clock.Advance(time.Minute) // the lease is over: k may be taken again
	second, ok, err := tp.db.BeginRecovery(ctx, recInput(tp, "k", "op2"), time.Minute)
	if err != nil || !ok || second.Fence <= first.Fence {
		t.Fatalf("BeginRecovery() again = fence %d, %v, %v; want a fence above %d", second.Fence, ok, err, first.Fence)
	}
	if err := tp.db.StageRecovery(ctx, "k", first.Fence, store.RecordedResponse{Status: 200}); !errors.Is(err, store.ErrFenced) {
		t.Errorf("StageRecovery(first holder's fence) = %v, want ErrFenced", err)
	}
}

// TestRecoveryTTL checks that Redis forgets a recovery record and its index
// by itself at the record's expiry, measured on the store's clock, and that
// promotion moves both TTLs to the new expiry.
func TestRecoveryTTL(t *testing.T) {
	ctx := t.Context()
	tp := newTamper(t) // its clock is months away from the server's
	pttl := func(key string) time.Duration {
		t.Helper()
		d, err := tp.raw.PTTL(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	near := func(what string, got, want time.Duration) {
		t.Helper()
		// Within a second above and five below (slow test machines).
		if got > want+time.Second || got < want-5*time.Second {
			t.Errorf("%s: PTTL = %v, want about %v", what, got, want)
		}
	}
	in := recInput(tp, "k", "op")
	in.ExpiresAt = tp.clock.Now().Add(2 * time.Hour)
	r, ok, err := tp.db.BeginRecovery(ctx, in, time.Minute)
	if err != nil || !ok {
		t.Fatalf("BeginRecovery() = %v, %v", ok, err)
	}
	rec, idx := tp.db.RecoveryKey("record", "k"), tp.db.RecoveryKey("index", "op")
	near("record", pttl(rec), 2*time.Hour)
	near("index", pttl(idx), 2*time.Hour)
	if err := tp.db.StageRecovery(ctx, "k", r.Fence, store.RecordedResponse{Status: 200}); err != nil {
		t.Fatal(err)
	}
	near("record after staging", pttl(rec), 2*time.Hour)
	tp.clock.Advance(time.Minute)
	if _, err := tp.db.PromoteRecovery(ctx, "op", "fp", store.SettlementRef{Network: "n:1", TxHash: "0x1"}, 10*time.Minute, 2); err != nil {
		t.Fatal(err)
	}
	near("promoted record", pttl(rec), 10*time.Minute)
	near("promoted index", pttl(idx), 10*time.Minute)
	if _, _, err := tp.db.TakeReplay(ctx, "k", "op"); err != nil {
		t.Fatal(err)
	}
	near("record after a replay", pttl(rec), 10*time.Minute)
	if d := pttl(tp.db.RecoveryKey("fence", "")); d != -1 {
		t.Errorf("fence counter PTTL = %v, want none (-1): a counter that restarted could hand out a fence again", d)
	}
}

// TestRecoveryLargeBody checks that a recorded answer of the largest size
// allowed, holding every byte value, survives staging, promotion and replay
// byte for byte, and that one byte more is refused without touching the
// record.
func TestRecoveryLargeBody(t *testing.T) {
	tp := newTamper(t)
	ctx := t.Context()
	r, ok, err := tp.db.BeginRecovery(ctx, recInput(tp, "k", "op"), time.Minute)
	if err != nil || !ok {
		t.Fatalf("BeginRecovery() = %v, %v", ok, err)
	}
	body := make([]byte, store.MaxStagedBody)
	for i := range body {
		body[i] = byte(i * 7)
	}
	want := store.RecordedResponse{Status: 200, ContentType: "text/event-stream; charset=\xff\x00", Body: body}
	if err := tp.db.StageRecovery(ctx, "k", r.Fence, want); err != nil {
		t.Fatal(err)
	}
	if err := tp.db.StageRecovery(ctx, "k", r.Fence, store.RecordedResponse{Status: 200, Body: make([]byte, store.MaxStagedBody+1)}); err == nil {
		t.Error("StageRecovery(MaxStagedBody+1) = nil, want an error")
	}
	if _, err := tp.db.PromoteRecovery(ctx, "op", "fp", store.SettlementRef{Network: "n:1", TxHash: "0x1"}, time.Hour, 1); err != nil {
		t.Fatal(err)
	}
	got, took, err := tp.db.TakeReplay(ctx, "k", "op")
	if err != nil || !took || got.Response == nil {
		t.Fatalf("TakeReplay() = %+v, %v, %v", got.Response, took, err)
	}
	if got.Response.Status != want.Status || got.Response.ContentType != want.ContentType || !bytes.Equal(got.Response.Body, want.Body) {
		t.Errorf("replayed response differs: status %d, type %q, %d bytes (equal: %v)", got.Response.Status,
			got.Response.ContentType, len(got.Response.Body), bytes.Equal(got.Response.Body, want.Body))
	}
}

// TestRecoveryPrefixIsolation checks that two stores on one Redis database
// under different key prefixes never see each other's records: same keys,
// same operation ids, independent fences and budgets.
func TestRecoveryPrefixIsolation(t *testing.T) {
	ctx := t.Context()
	clk := &fakeClock{now: time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)}
	ua, _ := freshURL(t)
	ub, _ := freshURL(t)
	a := open(t, ua, clk.Now)
	b := open(t, ub, clk.Now)
	in := store.Recovery{Key: "k", Fingerprint: "fp", OperationID: "op", Owner: "a", ExpiresAt: clk.Now().Add(time.Hour)}
	ref := store.SettlementRef{Network: "n:1", TxHash: "0x1"}

	ra, ok, err := a.BeginRecovery(ctx, in, time.Minute)
	if err != nil || !ok {
		t.Fatalf("a.BeginRecovery() = %v, %v", ok, err)
	}
	if err := a.StageRecovery(ctx, "k", ra.Fence, store.RecordedResponse{Status: 200, Body: []byte("a's answer")}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.PromoteRecovery(ctx, "op", "fp", ref, time.Hour, 1); err != nil {
		t.Fatal(err)
	}
	// b sees none of it: not the record, not the operation id.
	if _, err := b.Recovery(ctx, "k"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("b.Recovery(k) = %v, want ErrNotFound", err)
	}
	if _, _, err := b.TakeReplay(ctx, "k", "op"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("b.TakeReplay(k) = %v, want ErrNotFound", err)
	}
	if _, err := b.PromoteRecovery(ctx, "op", "fp", ref, time.Hour, 1); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("b.PromoteRecovery(op) = %v, want ErrNotFound", err)
	}
	// b may begin the same key and operation id for itself; a's record and
	// budget stay as they were.
	in.Owner = "b"
	if rb, ok, err := b.BeginRecovery(ctx, in, time.Minute); err != nil || !ok || rb.Owner != "b" {
		t.Errorf("b.BeginRecovery() = %+v, %v, %v", rb, ok, err)
	}
	got, took, err := a.TakeReplay(ctx, "k", "op")
	if err != nil || !took || got.Response == nil || string(got.Response.Body) != "a's answer" {
		t.Errorf("a.TakeReplay() = %+v, %v, %v", got, took, err)
	}
}

// TestRecoveryKeyLayout checks that every key recoveries write carries the
// prefix as its hash tag, whatever bytes the record keys and operation ids
// hold, and that such records read back, promote and replay.
func TestRecoveryKeyLayout(t *testing.T) {
	tp := newTamper(t)
	ctx := t.Context()
	odd := []string{"{x}", "}{", "a{b}c", "\x00\xff*?[]\\", "plain", strings.Repeat("k", 10_000)}
	for _, k := range odd {
		r, ok, err := tp.db.BeginRecovery(ctx, recInput(tp, k, "op"+k), time.Minute)
		if err != nil || !ok {
			t.Fatalf("BeginRecovery(%q) = %v, %v", k, ok, err)
		}
		if err := tp.db.StageRecovery(ctx, k, r.Fence, store.RecordedResponse{Status: 200, Body: []byte(k)}); err != nil {
			t.Fatal(err)
		}
		p, err := tp.db.PromoteRecovery(ctx, "op"+k, "fp", store.SettlementRef{Network: "n:1", TxHash: "0x1"}, time.Hour, 1)
		if err != nil || p.Key != k {
			t.Fatalf("PromoteRecovery(%q) = %q, %v", "op"+k, p.Key, err)
		}
		got, took, err := tp.db.TakeReplay(ctx, k, "op"+k)
		if err != nil || !took || string(got.Response.Body) != k {
			t.Errorf("TakeReplay(%q) = %v, %v", k, took, err)
		}
	}
	keys := tp.snapshot(t)
	if want := 2*len(odd) + 1; len(keys) != want {
		t.Errorf("the store wrote %d keys, want %d (a record and an index per key, one counter)", len(keys), want)
	}
	for k := range keys {
		if tag := hashTag(k); tag != tp.prefix {
			t.Errorf("key %q has hash tag %q, want the prefix %q", k, tag, tp.prefix)
		}
	}
}

// TestRecoveryServerClock checks the record's times come from the server's
// clock when DB.Now is nil.
func TestRecoveryServerClock(t *testing.T) {
	ctx := t.Context()
	a, b := pair(t, nil)
	before := time.Now()
	in := store.Recovery{Key: "k", Fingerprint: "fp", OperationID: "op", Owner: "a", ExpiresAt: before.Add(time.Hour)}
	r, ok, err := a.BeginRecovery(ctx, in, time.Minute)
	if err != nil || !ok {
		t.Fatalf("BeginRecovery() = %v, %v", ok, err)
	}
	// The server runs on this machine, so its clock is near ours.
	if d := r.CreatedAt.Sub(before); d < -5*time.Second || d > 5*time.Second {
		t.Errorf("CreatedAt = %v, %v away from this machine's clock; want the server's time", r.CreatedAt, d)
	}
	if d := r.LeaseUntil.Sub(r.CreatedAt); d != time.Minute {
		t.Errorf("lease = %v, want 1m", d)
	}
	if _, ok, err := b.BeginRecovery(ctx, in, time.Minute); ok || err != nil {
		t.Errorf("BeginRecovery() on the other store = %v, %v; want held", ok, err)
	}
}
