package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llm4agents/llm4agents/internal/store"
)

// OpenRecoveries opens two independent handles on one new, empty database, both
// taking the time from now for every lease and expiry decision and timestamp.
type OpenRecoveries func(t *testing.T, now func() time.Time) (a, b store.Recoveries)

// RunRecoveries runs the store.Recoveries conformance suite. Every subtest opens
// a database of its own; handle a writes, handle b reads back (and races).
//
// Beyond the interface's comments, the suite pins down:
//   - BeginRecovery refuses an empty key or operation id, a lease <= 0 and an
//     expiry not after the store's time; a live record is returned with false.
//   - Expired, in-flight-past-lease and promoted-without-replays records count
//     as absent for BeginRecovery (replaced with a new fence); a staged one
//     never does before it expires.
//   - Only the operation id finds a record to promote; an empty or partial
//     settlement reference never promotes; a fingerprint mismatch or a record
//     still in flight is ErrFenced; the same promotion twice is a no-op.
//   - TakeReplay gives out exactly the budget, even to concurrent callers on
//     two handles.
func RunRecoveries(t *testing.T, open OpenRecoveries) {
	tests := []struct {
		name string
		run  func(*recEnv)
	}{
		{"Begin/CreatesAndHolds", testRecBegin},
		{"Begin/InvalidArguments", testRecBeginInvalid},
		{"Begin/NearMaximumLease", testRecBeginNearMaxLease},
		{"Begin/TakeoverAfterLease", testRecBeginTakeover},
		{"Begin/StagedNeverTakenOver", testRecBeginStaged},
		{"Begin/ExpiredCountsAsAbsent", testRecBeginExpired},
		{"Begin/SpentBudgetCountsAsAbsent", testRecBeginSpent},
		{"Stage/ReadBack", testRecStage},
		{"Stage/Fenced", testRecStageFenced},
		{"Stage/InvalidArguments", testRecStageInvalid},
		{"Promote/ByOperationIDOnly", testRecPromoteByOp},
		{"Promote/NeedsSettlementRef", testRecPromoteNoRef},
		{"Promote/FingerprintIsChecked", testRecPromoteFingerprint},
		{"Promote/InFlightRefused", testRecPromoteInFlight},
		{"Promote/Idempotent", testRecPromoteIdempotent},
		{"Promote/NearMaximumTTL", testRecPromoteNearMaxTTL},
		{"Promote/ReplayBudgetBound", testRecPromoteReplayBound},
		{"Abandon", testRecAbandon},
		{"Replay/Budget", testRecReplayBudget},
		{"Replay/NotPromoted", testRecReplayNotPromoted},
		{"Replay/Expired", testRecReplayExpired},
		{"Race/Begin", testRecRaceBegin},
		{"Race/TakeReplay", testRecRaceReplay},
		{"Race/PromoteVsAbandon", testRecRacePromoteAbandon},
		{"Closed", testRecoveriesClosed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := &clock{now: start}
			a, b := open(t, c.Now)
			tc.run(&recEnv{t: t, ctx: t.Context(), clock: c, a: a, b: b})
		})
	}
}

type recEnv struct {
	t     *testing.T
	ctx   context.Context
	clock *clock
	a, b  store.Recoveries
}

const (
	recFP    = "fp-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	recTTL   = time.Hour
	recLease = time.Minute
)

var recRef = store.SettlementRef{Network: "eip155:84532", TxHash: txHash1}

func (e *recEnv) input(key, op string) store.Recovery {
	return store.Recovery{
		Key: key, Payer: "0x857b06519e91e3a54538791bdbb0e22373e36b66", Fingerprint: recFP, OperationID: op,
		PaymentKey: "pk-" + key, ProofHash: "ph-" + key, ProofUntil: start.Add(5 * time.Minute), Amount: maxUint,
		Owner: "replica-a", ExpiresAt: e.clock.Now().Add(2 * recTTL),
		// Ignored fields, set to values that would be wrong if kept.
		State: store.RecoveryPromoted, Settlement: recRef, ReplaysLeft: 99, Fence: notIssued,
		Response: &store.RecordedResponse{Status: 200, Body: []byte("free")},
	}
}

func (e *recEnv) begin(h store.Recoveries, r store.Recovery) (store.Recovery, bool) {
	e.t.Helper()
	got, ok, err := h.BeginRecovery(e.ctx, r, recLease)
	if err != nil {
		e.t.Fatalf("BeginRecovery(%q): %v", r.Key, err)
	}
	return got, ok
}

func (e *recEnv) get(key string) store.Recovery {
	e.t.Helper()
	r, err := e.b.Recovery(e.ctx, key)
	if err != nil {
		e.t.Fatalf("Recovery(%q): %v", key, err)
	}
	return r
}

var recBody = store.RecordedResponse{Status: 200, ContentType: "application/json", Body: []byte(`{"id":"x","choices":[]}`)}

// staged begins and stages a record for key with operation id op.
func (e *recEnv) staged(key, op string) store.Recovery {
	e.t.Helper()
	r, ok := e.begin(e.a, e.input(key, op))
	if !ok {
		e.t.Fatalf("BeginRecovery(%q) not held", key)
	}
	if err := e.a.StageRecovery(e.ctx, key, r.Fence, recBody); err != nil {
		e.t.Fatalf("StageRecovery: %v", err)
	}
	return e.get(key)
}

func (e *recEnv) promoted(key, op string, replays int) store.Recovery {
	e.t.Helper()
	e.staged(key, op)
	r, err := e.a.PromoteRecovery(e.ctx, op, recFP, recRef, recTTL, replays)
	if err != nil {
		e.t.Fatalf("PromoteRecovery: %v", err)
	}
	return r
}

func testRecBegin(e *recEnv) {
	in := e.input("k1", "op1")
	r, ok := e.begin(e.a, in)
	if !ok || r.State != store.RecoveryInFlight || r.Fence <= 0 || r.Response != nil || r.ReplaysLeft != 0 ||
		r.Settlement != (store.SettlementRef{}) {
		e.t.Fatalf("begin = %+v, %v", r, ok)
	}
	if !r.LeaseUntil.Equal(start.Add(recLease)) || !r.ExpiresAt.Equal(in.ExpiresAt) || !r.CreatedAt.Equal(start) ||
		r.Key != in.Key || r.Payer != in.Payer || r.Fingerprint != in.Fingerprint || r.OperationID != in.OperationID ||
		r.PaymentKey != in.PaymentKey || r.ProofHash != in.ProofHash || !r.ProofUntil.Equal(in.ProofUntil) ||
		r.Amount != in.Amount || r.Owner != in.Owner {
		e.t.Errorf("begin kept the wrong fields: %+v", r)
	}
	if got := e.get("k1"); got.Fence != r.Fence || got.State != store.RecoveryInFlight {
		e.t.Errorf("read back %+v", got)
	}
	// A twin, on the other handle, is refused and sees the first record.
	twin := e.input("k1", "op2")
	twin.Owner = "replica-b"
	got, ok := e.begin(e.b, twin)
	if ok || got.Fence != r.Fence || got.OperationID != "op1" || got.Owner != "replica-a" {
		e.t.Errorf("twin = %+v, %v", got, ok)
	}
	if _, err := e.b.Recovery(e.ctx, "absent"); !errors.Is(err, store.ErrNotFound) {
		e.t.Errorf("Recovery(absent) = %v, want ErrNotFound", err)
	}
}

func testRecBeginInvalid(e *recEnv) {
	for name, tc := range map[string]struct {
		mod   func(*store.Recovery)
		lease time.Duration
	}{
		"empty key":      {func(r *store.Recovery) { r.Key = "" }, recLease},
		"empty op":       {func(r *store.Recovery) { r.OperationID = "" }, recLease},
		"zero lease":     {func(*store.Recovery) {}, 0},
		"negative lease": {func(*store.Recovery) {}, -time.Second},
		"no expiry":      {func(r *store.Recovery) { r.ExpiresAt = time.Time{} }, recLease},
		"past expiry":    {func(r *store.Recovery) { r.ExpiresAt = start }, recLease},
	} {
		in := e.input("k", "op")
		tc.mod(&in)
		_, ok, err := e.a.BeginRecovery(e.ctx, in, tc.lease)
		if err == nil || ok || errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrFenced) {
			e.t.Errorf("%s: BeginRecovery = %v, %v; want an error that is no sentinel", name, ok, err)
		}
	}
	if _, err := e.b.Recovery(e.ctx, "k"); !errors.Is(err, store.ErrNotFound) {
		e.t.Errorf("a refused begin left a record: %v", err)
	}
}

func testRecBeginTakeover(e *recEnv) {
	first, _ := e.begin(e.a, e.input("k", "op1"))
	e.clock.Advance(recLease - time.Millisecond)
	if _, ok := e.begin(e.b, e.input("k", "op2")); ok {
		e.t.Fatal("taken over before the lease ended")
	}
	e.clock.Advance(time.Millisecond)
	r, ok := e.begin(e.b, e.input("k", "op2"))
	if !ok || r.Fence == first.Fence || r.OperationID != "op2" {
		e.t.Fatalf("takeover = %+v, %v", r, ok)
	}
	// The dead holder's fence is stale everywhere.
	if err := e.a.StageRecovery(e.ctx, "k", first.Fence, recBody); !errors.Is(err, store.ErrFenced) {
		e.t.Errorf("stage with the stale fence = %v, want ErrFenced", err)
	}
	if err := e.a.AbandonRecovery(e.ctx, "k", first.Fence); !errors.Is(err, store.ErrFenced) {
		e.t.Errorf("abandon with the stale fence = %v, want ErrFenced", err)
	}
	// The old operation id no longer promotes anything.
	if _, err := e.a.PromoteRecovery(e.ctx, "op1", recFP, recRef, recTTL, 1); !errors.Is(err, store.ErrNotFound) {
		e.t.Errorf("promote the taken-over op = %v, want ErrNotFound", err)
	}
}

func testRecBeginStaged(e *recEnv) {
	st := e.staged("k", "op1")
	e.clock.Advance(recLease * 10)
	r, ok := e.begin(e.b, e.input("k", "op2"))
	if ok || r.Fence != st.Fence || r.State != store.RecoveryStaged {
		e.t.Errorf("a staged record was taken over: %+v, %v", r, ok)
	}
}

func testRecBeginExpired(e *recEnv) {
	e.promoted("k", "op1", 3)
	// promoted moved the expiry to now+ttl; jump past it.
	e.clock.Advance(recTTL)
	if _, err := e.b.Recovery(e.ctx, "k"); !errors.Is(err, store.ErrNotFound) {
		e.t.Errorf("Recovery of an expired record = %v, want ErrNotFound", err)
	}
	if _, _, err := e.b.TakeReplay(e.ctx, "k", "op1"); !errors.Is(err, store.ErrNotFound) {
		e.t.Errorf("TakeReplay of an expired record = %v, want ErrNotFound", err)
	}
	r, ok := e.begin(e.b, e.input("k", "op2"))
	if !ok || r.State != store.RecoveryInFlight || r.OperationID != "op2" || r.Response != nil {
		e.t.Errorf("begin over an expired record = %+v, %v", r, ok)
	}
}

func testRecBeginSpent(e *recEnv) {
	e.promoted("k", "op1", 1)
	if _, ok := e.begin(e.b, e.input("k", "op2")); ok {
		e.t.Fatal("a promoted record with replays left was replaced")
	}
	if _, took, err := e.b.TakeReplay(e.ctx, "k", "op1"); err != nil || !took {
		e.t.Fatalf("TakeReplay = %v, %v", took, err)
	}
	r, ok := e.begin(e.b, e.input("k", "op2"))
	if !ok || r.OperationID != "op2" || r.State != store.RecoveryInFlight {
		e.t.Errorf("begin over a spent record = %+v, %v", r, ok)
	}
}

func testRecStage(e *recEnv) {
	r, _ := e.begin(e.a, e.input("k", "op"))
	e.clock.Advance(time.Second)
	big := bytes.Repeat([]byte{0, 0xff, '\n'}, 1000)
	want := store.RecordedResponse{Status: 200, ContentType: "text/event-stream", Body: big}
	if err := e.a.StageRecovery(e.ctx, "k", r.Fence, want); err != nil {
		e.t.Fatal(err)
	}
	got := e.get("k")
	if got.State != store.RecoveryStaged || got.Response == nil || got.Response.Status != 200 ||
		got.Response.ContentType != want.ContentType || !bytes.Equal(got.Response.Body, big) || !got.UpdatedAt.Equal(start.Add(time.Second)) {
		e.t.Errorf("staged = %+v", got)
	}
	// Staging again replaces the answer.
	if err := e.a.StageRecovery(e.ctx, "k", r.Fence, recBody); err != nil {
		e.t.Fatal(err)
	}
	if got := e.get("k"); !bytes.Equal(got.Response.Body, recBody.Body) {
		e.t.Errorf("restaged body = %q", got.Response.Body)
	}
	// An empty body is an answer, not "nothing staged".
	if err := e.a.StageRecovery(e.ctx, "k", r.Fence, store.RecordedResponse{Status: 204}); err != nil {
		e.t.Fatal(err)
	}
	if got := e.get("k"); got.Response == nil || got.Response.Status != 204 || len(got.Response.Body) != 0 {
		e.t.Errorf("empty staged = %+v", got.Response)
	}
}

func testRecStageFenced(e *recEnv) {
	r := e.promoted("k", "op", 1)
	if err := e.a.StageRecovery(e.ctx, "k", r.Fence, recBody); !errors.Is(err, store.ErrFenced) {
		e.t.Errorf("stage a promoted record = %v, want ErrFenced", err)
	}
	if err := e.a.StageRecovery(e.ctx, "absent", 1, recBody); !errors.Is(err, store.ErrNotFound) {
		e.t.Errorf("stage an absent record = %v, want ErrNotFound", err)
	}
	r2, _ := e.begin(e.a, e.input("k2", "op2"))
	if err := e.a.StageRecovery(e.ctx, "k2", r2.Fence+1000, recBody); !errors.Is(err, store.ErrFenced) {
		e.t.Errorf("stage with a stale fence = %v, want ErrFenced", err)
	}
}

func testRecStageInvalid(e *recEnv) {
	r, _ := e.begin(e.a, e.input("k", "op"))
	for name, resp := range map[string]store.RecordedResponse{
		"status 99":  {Status: 99},
		"status 600": {Status: 600},
		"too large":  {Status: 200, Body: make([]byte, store.MaxStagedBody+1)},
	} {
		err := e.a.StageRecovery(e.ctx, "k", r.Fence, resp)
		if err == nil || errors.Is(err, store.ErrFenced) || errors.Is(err, store.ErrNotFound) {
			e.t.Errorf("%s: StageRecovery = %v, want an error that is no sentinel", name, err)
		}
	}
	if got := e.get("k"); got.State != store.RecoveryInFlight || got.Response != nil {
		e.t.Errorf("a refused stage changed the record: %+v", got)
	}
}

// testRecPromoteByOp: R3's "identical output never cross-promotes" at the
// store: two records with the same fingerprint and the same answer; promoting
// one operation id leaves the other staged.
func testRecPromoteByOp(e *recEnv) {
	e.staged("a", "op-a")
	e.staged("b", "op-b")
	e.clock.Advance(time.Second)
	r, err := e.a.PromoteRecovery(e.ctx, "op-a", recFP, recRef, recTTL, 3)
	if err != nil {
		e.t.Fatal(err)
	}
	if r.Key != "a" || r.State != store.RecoveryPromoted || r.Settlement != recRef || r.ReplaysLeft != 3 ||
		!r.ExpiresAt.Equal(start.Add(time.Second+recTTL)) {
		e.t.Errorf("promoted = %+v", r)
	}
	if got := e.get("b"); got.State != store.RecoveryStaged || got.Settlement != (store.SettlementRef{}) {
		e.t.Errorf("the twin with identical output moved: %+v", got)
	}
	for _, op := range []string{"op-c", "OP-B", "op-b ", "op"} {
		if _, err := e.a.PromoteRecovery(e.ctx, op, recFP, recRef, recTTL, 1); !errors.Is(err, store.ErrNotFound) {
			e.t.Errorf("promote %q = %v, want ErrNotFound", op, err)
		}
	}
	if _, err := e.a.PromoteRecovery(e.ctx, "", recFP, recRef, recTTL, 1); err == nil || errors.Is(err, store.ErrNotFound) {
		e.t.Errorf("promote with no operation id = %v, want an error that is no sentinel", err)
	}
	if got := e.get("b"); got.State != store.RecoveryStaged {
		e.t.Errorf("b after the bad promotions: %+v", got)
	}
}

func testRecPromoteNoRef(e *recEnv) {
	e.staged("k", "op")
	for name, ref := range map[string]store.SettlementRef{
		"empty": {}, "no tx": {Network: "eip155:1"}, "no network": {TxHash: txHash1},
	} {
		if _, err := e.a.PromoteRecovery(e.ctx, "op", recFP, ref, recTTL, 1); err == nil || errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrFenced) {
			e.t.Errorf("%s ref: promote = %v, want an error that is no sentinel", name, err)
		}
	}
	for name, tc := range map[string]struct {
		ttl     time.Duration
		replays int
	}{"zero ttl": {0, 1}, "zero budget": {recTTL, 0}, "negative budget": {recTTL, -1}} {
		if _, err := e.a.PromoteRecovery(e.ctx, "op", recFP, recRef, tc.ttl, tc.replays); err == nil {
			e.t.Errorf("%s: promote succeeded", name)
		}
	}
	if got := e.get("k"); got.State != store.RecoveryStaged {
		e.t.Errorf("record after refused promotions: %+v", got)
	}
}

func testRecPromoteFingerprint(e *recEnv) {
	e.staged("k", "op")
	if _, err := e.a.PromoteRecovery(e.ctx, "op", "fp-other", recRef, recTTL, 1); !errors.Is(err, store.ErrFenced) {
		e.t.Errorf("promote with another fingerprint = %v, want ErrFenced", err)
	}
	if got := e.get("k"); got.State != store.RecoveryStaged {
		e.t.Errorf("record after a mismatched promotion: %+v", got)
	}
}

func testRecPromoteInFlight(e *recEnv) {
	e.begin(e.a, e.input("k", "op"))
	if _, err := e.a.PromoteRecovery(e.ctx, "op", recFP, recRef, recTTL, 1); !errors.Is(err, store.ErrFenced) {
		e.t.Errorf("promote an in-flight record = %v, want ErrFenced", err)
	}
}

func testRecPromoteIdempotent(e *recEnv) {
	first := e.promoted("k", "op", 2)
	e.clock.Advance(time.Second)
	again, err := e.b.PromoteRecovery(e.ctx, "op", recFP, recRef, recTTL, 5)
	if err != nil || again.ReplaysLeft != 2 || !again.ExpiresAt.Equal(first.ExpiresAt) {
		e.t.Errorf("promote again = %+v, %v; want no change", again, err)
	}
	other := store.SettlementRef{Network: recRef.Network, TxHash: txHash2}
	if _, err := e.b.PromoteRecovery(e.ctx, "op", recFP, other, recTTL, 1); !errors.Is(err, store.ErrFenced) {
		e.t.Errorf("promote with another settlement = %v, want ErrFenced", err)
	}
}

func testRecAbandon(e *recEnv) {
	r, _ := e.begin(e.a, e.input("k", "op"))
	if err := e.a.AbandonRecovery(e.ctx, "k", r.Fence); err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.b.Recovery(e.ctx, "k"); !errors.Is(err, store.ErrNotFound) {
		e.t.Errorf("abandoned record still there: %v", err)
	}
	st := e.staged("k2", "op2")
	if err := e.b.AbandonRecovery(e.ctx, "k2", st.Fence); err != nil {
		e.t.Fatal(err)
	}
	// Abandoned (its payment did not settle): its operation id promotes
	// nothing any more, so the answer is never replayed.
	if _, err := e.a.PromoteRecovery(e.ctx, "op2", recFP, recRef, recTTL, 1); !errors.Is(err, store.ErrNotFound) {
		e.t.Errorf("promote an abandoned record = %v, want ErrNotFound", err)
	}
	p := e.promoted("k3", "op3", 1)
	if err := e.a.AbandonRecovery(e.ctx, "k3", p.Fence); !errors.Is(err, store.ErrFenced) {
		e.t.Errorf("abandon a promoted record = %v, want ErrFenced", err)
	}
	if err := e.a.AbandonRecovery(e.ctx, "absent", 1); !errors.Is(err, store.ErrNotFound) {
		e.t.Errorf("abandon an absent record = %v, want ErrNotFound", err)
	}
}

func testRecReplayBudget(e *recEnv) {
	e.promoted("k", "op", 3)
	for i := 2; i >= 0; i-- {
		r, took, err := e.b.TakeReplay(e.ctx, "k", "op")
		if err != nil || !took || r.ReplaysLeft != i || r.Response == nil || !bytes.Equal(r.Response.Body, recBody.Body) {
			e.t.Fatalf("replay %d: %+v, %v, %v", 3-i, r, took, err)
		}
	}
	r, took, err := e.b.TakeReplay(e.ctx, "k", "op")
	if err != nil || took || r.ReplaysLeft != 0 {
		e.t.Errorf("replay past the budget = %+v, %v, %v", r, took, err)
	}
	if _, _, err := e.b.TakeReplay(e.ctx, "k", "other-op"); !errors.Is(err, store.ErrNotFound) {
		e.t.Errorf("replay with another operation id = %v, want ErrNotFound", err)
	}
}

func testRecReplayNotPromoted(e *recEnv) {
	e.staged("k", "op")
	if _, _, err := e.b.TakeReplay(e.ctx, "k", "op"); !errors.Is(err, store.ErrNotFound) {
		e.t.Errorf("replay a staged record = %v, want ErrNotFound", err)
	}
	if _, _, err := e.b.TakeReplay(e.ctx, "absent", "op"); !errors.Is(err, store.ErrNotFound) {
		e.t.Errorf("replay an absent record = %v, want ErrNotFound", err)
	}
}

func testRecReplayExpired(e *recEnv) {
	e.promoted("k", "op", 3)
	e.clock.Advance(recTTL - time.Millisecond)
	if _, took, err := e.b.TakeReplay(e.ctx, "k", "op"); err != nil || !took {
		e.t.Fatalf("replay just before expiry = %v, %v", took, err)
	}
	e.clock.Advance(time.Millisecond)
	if _, _, err := e.b.TakeReplay(e.ctx, "k", "op"); !errors.Is(err, store.ErrNotFound) {
		e.t.Errorf("replay at expiry = %v, want ErrNotFound", err)
	}
}

func testRecRaceBegin(e *recEnv) {
	var wins atomic.Int32
	var wg sync.WaitGroup
	for i := range workers {
		wg.Go(func() {
			h := e.a
			if i%2 == 1 {
				h = e.b
			}
			_, ok, err := h.BeginRecovery(e.ctx, e.input("k", fmt.Sprintf("op-%d", i)), recLease)
			if err != nil {
				e.t.Errorf("BeginRecovery: %v", err)
			}
			if ok {
				wins.Add(1)
			}
		})
	}
	wg.Wait()
	if wins.Load() != 1 {
		e.t.Errorf("%d concurrent begins won, want 1", wins.Load())
	}
}

func testRecRaceReplay(e *recEnv) {
	const budget = 5
	e.promoted("k", "op", budget)
	var took atomic.Int32
	var wg sync.WaitGroup
	for i := range workers {
		wg.Go(func() {
			h := e.a
			if i%2 == 1 {
				h = e.b
			}
			_, ok, err := h.TakeReplay(e.ctx, "k", "op")
			if err != nil {
				e.t.Errorf("TakeReplay: %v", err)
			}
			if ok {
				took.Add(1)
			}
		})
	}
	wg.Wait()
	if took.Load() != budget {
		e.t.Errorf("%d replays taken concurrently, want exactly %d", took.Load(), budget)
	}
}

func testRecRacePromoteAbandon(e *recEnv) {
	for i := range 8 {
		key, op := fmt.Sprintf("k%d", i), fmt.Sprintf("op%d", i)
		st := e.staged(key, op)
		var perr, aerr error
		var wg sync.WaitGroup
		wg.Go(func() { _, perr = e.a.PromoteRecovery(e.ctx, op, recFP, recRef, recTTL, 1) })
		wg.Go(func() { aerr = e.b.AbandonRecovery(e.ctx, key, st.Fence) })
		wg.Wait()
		r, err := e.b.Recovery(e.ctx, key)
		switch {
		case perr == nil && aerr == nil:
			e.t.Errorf("%s: both promote and abandon succeeded", key)
		case perr == nil:
			if err != nil || r.State != store.RecoveryPromoted || !errors.Is(aerr, store.ErrFenced) {
				e.t.Errorf("%s: promoted, then %+v, %v (abandon %v)", key, r, err, aerr)
			}
		case aerr == nil:
			if !errors.Is(err, store.ErrNotFound) || !errors.Is(perr, store.ErrNotFound) {
				e.t.Errorf("%s: abandoned, then %v (promote %v)", key, err, perr)
			}
		default:
			e.t.Errorf("%s: promote %v, abandon %v", key, perr, aerr)
		}
	}
}
