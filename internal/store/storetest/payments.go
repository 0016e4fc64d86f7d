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

// OpenPayments opens two independent handles (separate connection pools or
// clients, as two processes would have) on one new, empty database. Both must
// take the time from now for every lease and expiry decision and timestamp.
// It registers the handles' cleanup with t.Cleanup and stops the test with
// t.Fatal if anything fails.
type OpenPayments func(t *testing.T, now func() time.Time) (a, b store.Payments)

// RunPayments runs the store.Payments conformance suite against the backend
// that open opens. Every subtest opens a database of its own.
//
// Beyond the interface's comments, the suite pins down:
//   - ClaimPayment reads only Key, Network, Payer, Amount, Owner and ExpiresAt;
//     it refuses an empty key, a lease <= 0 and an ExpiresAt not after the
//     store's time, changing nothing.
//   - A record counts as absent from its ExpiresAt on, in every operation: a
//     claim replaces it (new fence, new details), Payment, UpdatePayment and
//     ReleasePayment answer ErrNotFound.
//   - Only PaymentHeld may be taken over, once now >= LeaseUntil.
//   - UpdatePayment allows held -> pending | settled and pending -> pending |
//     settled, with or without a transaction hash; PaymentHeld and unknown
//     states are refused with an error that is no sentinel; PaymentSettled is
//     terminal (same values: nil and no change; else ErrFenced).
//   - ReleasePayment deletes PaymentHeld and PaymentPending; PaymentSettled is
//     ErrFenced.
//   - Fences are never reused for a key, across takeover, release and expiry.
//   - StagePayment stores a response on a PaymentHeld or PaymentPending claim
//     under its fence (replacing an earlier one, surviving later updates,
//     moving UpdatedAt); Payment reads it back byte for byte. A stale fence or
//     a PaymentSettled claim is ErrFenced, an absent one ErrNotFound; a body
//     over store.MaxStagedBody or a status outside 100..599 is refused with
//     an error that is no sentinel. A released record takes it along.
func RunPayments(t *testing.T, open OpenPayments) {
	tests := []struct {
		name string
		run  func(*payEnv)
	}{
		{"Claim/Creates", testPayClaimCreates},
		{"Claim/Held", testPayClaimHeld},
		{"Claim/IndependentKeys", testPayClaimIndependentKeys},
		{"Claim/TakeoverAfterLease", testPayClaimTakeover},
		{"Claim/NoTakeoverPastHeld", testPayClaimNoTakeoverPastHeld},
		{"Claim/ExpiredCountsAsAbsent", testPayClaimExpired},
		{"Claim/InvalidArguments", testPayClaimInvalid},
		{"Claim/NearMaximumLease", testPayClaimNearMaxLease},
		{"Update/Transitions", testPayUpdateTransitions},
		{"Update/AfterLeaseWithoutTakeover", testPayUpdateAfterLease},
		{"Update/StaleFence", testPayUpdateStaleFence},
		{"Update/NotFound", testPayUpdateNotFound},
		{"Update/Terminal", testPayUpdateTerminal},
		{"Update/InvalidArguments", testPayUpdateInvalid},
		{"Release/HeldOrPending", testPayReleaseHeldOrPending},
		{"Release/StaleFence", testPayReleaseStaleFence},
		{"Release/Settled", testPayReleaseSettled},
		{"Release/NotFound", testPayReleaseNotFound},
		{"Payment/NotFound", testPayNotFound},
		{"Stage/ReadBack", testPayStageReadBack},
		{"Stage/StaleFence", testPayStageStaleFence},
		{"Stage/SettledRefused", testPayStageSettled},
		{"Stage/NotFound", testPayStageNotFound},
		{"Stage/InvalidArguments", testPayStageInvalid},
		{"Stage/GoneWithRelease", testPayStageGoneWithRelease},
		{"Race/Claim", testPayRaceClaim},
		{"Race/Takeover", testPayRaceTakeover},
		{"Race/ReplaceExpired", testPayRaceReplaceExpired},
		{"Race/ReleaseVsUpdate", testPayRaceReleaseVsUpdate},
		{"Closed", testPaymentsClosed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := &clock{now: start}
			a, b := open(t, c.Now)
			tc.run(&payEnv{t: t, ctx: t.Context(), clock: c, a: a, b: b})
		})
	}
}

// expiry is how long after start the suite's claims expire: long against the
// lease, so that leases run out well before records do.
const expiry = 24 * time.Hour

// payEnv is one subtest's database: handle a does most writes, handle b reads
// them back, so every check also shows the two handles see one database.
type payEnv struct {
	t     *testing.T
	ctx   context.Context
	clock *clock
	a, b  store.Payments
}

// input is what a caller passes to ClaimPayment for key now: it expires
// expiry from now. It sets the fields the store must ignore to values that
// would be wrong if kept.
func (e *payEnv) input(key, owner string) store.PaymentClaim {
	return store.PaymentClaim{
		Key:        key,
		Network:    "eip155:84532",
		Payer:      "0x857b06519e91e3a54538791bdbb0e22373e36b66",
		Amount:     maxUint,
		Owner:      owner,
		ExpiresAt:  e.clock.Now().Add(expiry),
		State:      store.PaymentSettled,
		TxHash:     txHash2,
		Fence:      notIssued,
		LeaseUntil: start.Add(-time.Hour),
		CreatedAt:  start.Add(-time.Hour),
		UpdatedAt:  start.Add(-time.Hour),
	}
}

// held is the record a claim of in at now with lease l must create, apart
// from its fence.
func held(in store.PaymentClaim, now time.Time, l time.Duration) store.PaymentClaim {
	in.State = store.PaymentHeld
	in.TxHash = ""
	in.LeaseUntil = now.Add(l)
	in.CreatedAt = now
	in.UpdatedAt = now
	return in
}

func (e *payEnv) claim(h store.Payments, c store.PaymentClaim, l time.Duration) (store.PaymentClaim, bool) {
	e.t.Helper()
	got, ok, err := h.ClaimPayment(e.ctx, c, l)
	if err != nil {
		e.t.Fatalf("ClaimPayment(%q, %v): %v", c.Key, l, err)
	}
	return got, ok
}

// mustClaim claims a new record for key through handle a, owned by "a".
func (e *payEnv) mustClaim(key string) store.PaymentClaim {
	e.t.Helper()
	got, ok := e.claim(e.a, e.input(key, "a"), lease)
	if !ok {
		e.t.Fatalf("ClaimPayment(%q) = %+v, false; want true", key, got)
	}
	return got
}

func (e *payEnv) get(key string) store.PaymentClaim {
	e.t.Helper()
	got, err := e.b.Payment(e.ctx, key)
	if err != nil {
		e.t.Fatalf("Payment(%q): %v", key, err)
	}
	return got
}

func (e *payEnv) update(key string, fence int64, state store.PaymentState, txHash string) {
	e.t.Helper()
	if err := e.a.UpdatePayment(e.ctx, key, fence, state, txHash); err != nil {
		e.t.Fatalf("UpdatePayment(%q, %d, %s, %q): %v", key, fence, state, txHash, err)
	}
}

// inState claims key and moves it to state (held, pending or settled, with
// txHash1), returning the record as stored.
func (e *payEnv) inState(key string, state store.PaymentState) store.PaymentClaim {
	e.t.Helper()
	c := e.mustClaim(key)
	switch state {
	case store.PaymentHeld:
	case store.PaymentPending, store.PaymentSettled:
		e.update(key, c.Fence, state, txHash1)
	default:
		e.t.Fatalf("inState: unknown state %q", state)
	}
	return e.get(key)
}

// unchanged fails the test if the record for key differs from want.
func (e *payEnv) unchanged(key string, want store.PaymentClaim) {
	e.t.Helper()
	if diff := cmp.Diff(want, e.get(key)); diff != "" {
		e.t.Errorf("record %q changed (-before +after):\n%s", key, diff)
	}
}

// gone fails the test unless both handles find no record for key.
func (e *payEnv) gone(key string) {
	e.t.Helper()
	for name, h := range map[string]store.Payments{"a": e.a, "b": e.b} {
		if got, err := h.Payment(e.ctx, key); !errors.Is(err, store.ErrNotFound) {
			e.t.Errorf("handle %s: Payment(%q) = %+v, %v; want ErrNotFound", name, key, got, err)
		}
	}
}

func testPayClaimCreates(e *payEnv) {
	in := e.input("k", "a")
	got, ok := e.claim(e.a, in, lease)
	if !ok {
		e.t.Fatalf("ClaimPayment() won = false, want true")
	}
	if got.Fence <= 0 || got.Fence == notIssued {
		e.t.Errorf("Fence = %d, want a new positive fence", got.Fence)
	}
	want := held(in, start, lease)
	want.Fence = got.Fence
	if diff := cmp.Diff(want, got); diff != "" {
		e.t.Errorf("ClaimPayment() record (-want +got):\n%s", diff)
	}
	for name, h := range map[string]store.Payments{"a": e.a, "b": e.b} {
		stored, err := h.Payment(e.ctx, "k")
		if err != nil {
			e.t.Fatalf("handle %s: Payment(): %v", name, err)
		}
		if diff := cmp.Diff(got, stored); diff != "" {
			e.t.Errorf("handle %s: stored record differs from the returned one (-returned +stored):\n%s", name, diff)
		}
	}
}

func testPayClaimHeld(e *payEnv) {
	first := e.mustClaim("k")
	// Up to the last millisecond of the lease, through either handle, the
	// claim stays with its holder and nothing changes: the second
	// presentation never reaches the upstream.
	e.clock.Advance(lease - time.Millisecond)
	other := e.input("k", "b")
	other.Amount = "1"
	other.ExpiresAt = start.Add(2 * expiry)
	for name, h := range map[string]store.Payments{"a": e.a, "b": e.b} {
		got, ok := e.claim(h, other, lease)
		if ok {
			e.t.Errorf("handle %s: second ClaimPayment() won = true, want false", name)
		}
		if diff := cmp.Diff(first, got); diff != "" {
			e.t.Errorf("handle %s: second ClaimPayment() record (-first claim +got):\n%s", name, diff)
		}
	}
	e.unchanged("k", first)
}

func testPayClaimIndependentKeys(e *payEnv) {
	k1 := e.mustClaim("k1")
	k2 := e.mustClaim("k2")
	if k1.Fence == k2.Fence {
		e.t.Errorf("two claims got the same fence %d", k1.Fence)
	}
	e.unchanged("k1", k1)
	e.unchanged("k2", k2)
}

func testPayClaimTakeover(e *payEnv) {
	first := e.mustClaim("k")
	// The lease ends at LeaseUntil: from that instant the claim may be taken.
	now := e.clock.Advance(lease)
	in := e.input("k", "b")
	in.Network, in.Payer, in.Amount = "eip155:8453", "0x0000000000000000000000000000000000000001", "1"
	in.ExpiresAt = start.Add(2 * expiry) // the record keeps what the first claim stored
	const lease2 = 2 * time.Minute
	got, ok := e.claim(e.b, in, lease2)
	if !ok {
		e.t.Fatalf("ClaimPayment() after the lease won = false, want true; record %+v", got)
	}
	if got.Fence <= first.Fence {
		e.t.Errorf("takeover Fence = %d, want more than %d", got.Fence, first.Fence)
	}
	want := first
	want.Owner = "b"
	want.Fence = got.Fence
	want.LeaseUntil = now.Add(lease2)
	want.UpdatedAt = now
	if diff := cmp.Diff(want, got); diff != "" {
		e.t.Errorf("takeover record (-want +got):\n%s", diff)
	}
	e.unchanged("k", got)

	// The new lease holds against everyone, the old holder included.
	if again, ok := e.claim(e.a, e.input("k", "a"), lease); ok {
		e.t.Errorf("ClaimPayment() right after takeover won = true, want false; record %+v", again)
	}
	// The old holder is fenced off.
	for _, st := range []store.PaymentState{store.PaymentPending, store.PaymentSettled} {
		if err := e.a.UpdatePayment(e.ctx, "k", first.Fence, st, txHash1); !errors.Is(err, store.ErrFenced) {
			e.t.Errorf("UpdatePayment(old fence, %s) = %v, want ErrFenced", st, err)
		}
	}
	if err := e.a.ReleasePayment(e.ctx, "k", first.Fence); !errors.Is(err, store.ErrFenced) {
		e.t.Errorf("ReleasePayment(old fence) = %v, want ErrFenced", err)
	}
	e.unchanged("k", got)
	// The new holder writes.
	e.update("k", got.Fence, store.PaymentSettled, txHash1)
}

func testPayClaimNoTakeoverPastHeld(e *payEnv) {
	// Pending and settled records are held until resolved or expired,
	// however long ago their lease ended.
	for _, state := range []store.PaymentState{store.PaymentPending, store.PaymentSettled} {
		key := "k-" + string(state)
		before := e.inState(key, state)
		for _, later := range []time.Duration{10 * lease, expiry - 10*lease - time.Millisecond} {
			now := e.clock.Advance(later)
			got, ok := e.claim(e.b, e.input(key, "b"), lease)
			if ok {
				e.t.Errorf("%s at %v: ClaimPayment() after the lease won = true, want false", state, now)
			}
			if diff := cmp.Diff(before, got); diff != "" {
				e.t.Errorf("%s at %v: ClaimPayment() record (-stored +got):\n%s", state, now, diff)
			}
			e.unchanged(key, before)
		}
	}
}

func testPayClaimExpired(e *payEnv) {
	// From ExpiresAt on, a record of any state counts as absent, even a held
	// one under a live lease: the chain no longer accepts its authorization.
	for _, state := range []store.PaymentState{store.PaymentHeld, store.PaymentPending, store.PaymentSettled} {
		key := "k-" + string(state)
		in := e.input(key, "a")
		in.ExpiresAt = e.clock.Now().Add(lease)
		first, ok := e.claim(e.a, in, 2*lease) // the lease outlives the record
		if !ok {
			e.t.Fatalf("%s: ClaimPayment() won = false, want true", state)
		}
		if state != store.PaymentHeld {
			e.update(key, first.Fence, state, txHash1)
			first = e.get(key)
		}
		// The last millisecond before expiry, the record stands.
		e.clock.Advance(lease - time.Millisecond)
		e.unchanged(key, first)
		if got, ok := e.claim(e.b, e.input(key, "b"), lease); ok {
			e.t.Errorf("%s: ClaimPayment() just before expiry won = true, want false; record %+v", state, got)
		}
		e.unchanged(key, first)

		now := e.clock.Advance(time.Millisecond)
		e.gone(key)
		if err := e.a.UpdatePayment(e.ctx, key, first.Fence, store.PaymentSettled, txHash1); !errors.Is(err, store.ErrNotFound) {
			e.t.Errorf("%s: UpdatePayment(expired) = %v, want ErrNotFound", state, err)
		}
		if err := e.a.ReleasePayment(e.ctx, key, first.Fence); !errors.Is(err, store.ErrNotFound) {
			e.t.Errorf("%s: ReleasePayment(expired) = %v, want ErrNotFound", state, err)
		}
		e.gone(key)

		// A claim replaces it: nothing of the expired record is kept.
		in2 := e.input(key, "b")
		in2.Network, in2.Payer, in2.Amount = "eip155:8453", "0x0000000000000000000000000000000000000001", "1"
		got, ok := e.claim(e.b, in2, lease)
		if !ok {
			e.t.Fatalf("%s: ClaimPayment() after expiry won = false, want true; record %+v", state, got)
		}
		if got.Fence <= first.Fence {
			e.t.Errorf("%s: Fence after expiry = %d, want more than the expired record's %d", state, got.Fence, first.Fence)
		}
		want := held(in2, now, lease)
		want.Fence = got.Fence
		if diff := cmp.Diff(want, got); diff != "" {
			e.t.Errorf("%s: claim after expiry (-want +got):\n%s", state, diff)
		}
		e.unchanged(key, got)
		// The expired record's fence writes nothing.
		if err := e.a.UpdatePayment(e.ctx, key, first.Fence, store.PaymentSettled, txHash1); !errors.Is(err, store.ErrFenced) {
			e.t.Errorf("%s: UpdatePayment(expired record's fence) = %v, want ErrFenced", state, err)
		}
		if err := e.a.ReleasePayment(e.ctx, key, first.Fence); !errors.Is(err, store.ErrFenced) {
			e.t.Errorf("%s: ReleasePayment(expired record's fence) = %v, want ErrFenced", state, err)
		}
		e.unchanged(key, got)
	}
}

func testPayClaimInvalid(e *payEnv) {
	tests := []struct {
		name    string
		key     string
		lease   time.Duration
		expires func(now time.Time) time.Time
	}{
		{"empty key", "", lease, func(now time.Time) time.Time { return now.Add(expiry) }},
		{"zero lease", "k", 0, func(now time.Time) time.Time { return now.Add(expiry) }},
		{"negative lease", "k", -time.Second, func(now time.Time) time.Time { return now.Add(expiry) }},
		{"no expiry", "k", lease, func(time.Time) time.Time { return time.Time{} }},
		{"expires now", "k", lease, func(now time.Time) time.Time { return now }},
		{"expired", "k", lease, func(now time.Time) time.Time { return now.Add(-time.Millisecond) }},
	}
	try := func(what string, in store.PaymentClaim, l time.Duration) {
		e.t.Helper()
		if got, ok, err := e.a.ClaimPayment(e.ctx, in, l); err == nil || ok {
			e.t.Errorf("%s: ClaimPayment() = %+v, %v, %v; want an error", what, got, ok, err)
		} else if errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrFenced) {
			e.t.Errorf("%s: ClaimPayment() = %v, want an error that is no store sentinel", what, err)
		}
	}
	for _, tc := range tests {
		in := e.input(tc.key, "a")
		in.ExpiresAt = tc.expires(e.clock.Now())
		try(tc.name, in, tc.lease)
		e.gone(tc.key)
	}
	// Invalid arguments leave an existing record alone, even a takeable one.
	first := e.mustClaim("k")
	e.clock.Advance(lease)
	for _, tc := range tests[1:] {
		in := e.input("k", "b")
		in.ExpiresAt = tc.expires(e.clock.Now())
		try(tc.name+" on a takeable record", in, tc.lease)
	}
	e.unchanged("k", first)
}

// payStep is one write of UpdatePayment.
type payStep struct {
	state  store.PaymentState
	txHash string
}

func testPayUpdateTransitions(e *payEnv) {
	P, S := store.PaymentPending, store.PaymentSettled
	tests := []struct {
		name  string
		steps []payStep
	}{
		{"pending then settled", []payStep{{P, txHash1}, {S, txHash1}}},
		{"replacement transaction", []payStep{{P, txHash1}, {P, txHash2}, {S, txHash2}}},
		{"pending again, same transaction", []payStep{{P, txHash1}, {P, txHash1}, {S, txHash1}}},
		{"settled from held", []payStep{{S, txHash1}}},
		// A settle answer may name no transaction (a remote facilitator's
		// pending, a nonce found used): the claim must still leave held, or
		// it could be taken over once its lease ends.
		{"settled without hash", []payStep{{S, ""}}},
		{"pending without hash", []payStep{{P, ""}, {P, txHash1}, {S, txHash1}}},
		{"pending then settled without hash", []payStep{{P, txHash1}, {S, ""}}},
	}
	for i, tc := range tests {
		key := fmt.Sprintf("k%d", i)
		c := e.mustClaim(key)
		for _, st := range tc.steps {
			now := e.clock.Advance(time.Second)
			if err := e.a.UpdatePayment(e.ctx, key, c.Fence, st.state, st.txHash); err != nil {
				e.t.Fatalf("%s: UpdatePayment(%+v): %v", tc.name, st, err)
			}
			c.State, c.TxHash, c.UpdatedAt = st.state, st.txHash, now
			if diff := cmp.Diff(c, e.get(key)); diff != "" {
				e.t.Errorf("%s: after %+v (-want +got):\n%s", tc.name, st, diff)
			}
		}
	}
}

func testPayUpdateAfterLease(e *payEnv) {
	// An ended lease only lets someone take the claim over; until someone
	// does, the holder's fence is still good.
	c := e.mustClaim("k")
	now := e.clock.Advance(10 * lease)
	e.update("k", c.Fence, store.PaymentPending, txHash1)
	c.State, c.TxHash, c.UpdatedAt = store.PaymentPending, txHash1, now
	e.unchanged("k", c)
}

func testPayUpdateStaleFence(e *payEnv) {
	for _, state := range []store.PaymentState{store.PaymentHeld, store.PaymentPending, store.PaymentSettled} {
		key := "k-" + string(state)
		c := e.inState(key, state)
		e.clock.Advance(time.Second)
		for _, fence := range []int64{c.Fence - 1, c.Fence + 1, 0, notIssued} {
			for _, write := range []payStep{{store.PaymentPending, txHash1}, {store.PaymentSettled, txHash1}} {
				if err := e.a.UpdatePayment(e.ctx, key, fence, write.state, write.txHash); !errors.Is(err, store.ErrFenced) {
					e.t.Errorf("%s: UpdatePayment(fence %d, record's %d, %+v) = %v, want ErrFenced", state, fence, c.Fence, write, err)
				}
			}
		}
		e.unchanged(key, c)
	}
}

func testPayUpdateNotFound(e *payEnv) {
	for _, st := range []store.PaymentState{store.PaymentPending, store.PaymentSettled} {
		if err := e.a.UpdatePayment(e.ctx, "absent", 1, st, txHash1); !errors.Is(err, store.ErrNotFound) {
			e.t.Errorf("UpdatePayment(absent, %s) = %v, want ErrNotFound", st, err)
		}
	}
	e.gone("absent")
	// A released record is absent too.
	c := e.mustClaim("k")
	if err := e.a.ReleasePayment(e.ctx, "k", c.Fence); err != nil {
		e.t.Fatalf("ReleasePayment(): %v", err)
	}
	if err := e.a.UpdatePayment(e.ctx, "k", c.Fence, store.PaymentSettled, txHash1); !errors.Is(err, store.ErrNotFound) {
		e.t.Errorf("UpdatePayment(released) = %v, want ErrNotFound", err)
	}
	e.gone("k")
}

func testPayUpdateTerminal(e *payEnv) {
	// Settled is final: the writer that finds it settled by someone else gets
	// ErrFenced and must stop; repeating the values the record already holds
	// is harmless and changes nothing, UpdatedAt included.
	tests := []struct {
		settled string // the settled record's transaction hash
		write   payStep
		err     error
	}{
		{txHash1, payStep{store.PaymentSettled, txHash1}, nil},
		{txHash1, payStep{store.PaymentSettled, txHash2}, store.ErrFenced},
		{txHash1, payStep{store.PaymentSettled, ""}, store.ErrFenced},
		{txHash1, payStep{store.PaymentPending, txHash1}, store.ErrFenced},
		{txHash1, payStep{store.PaymentPending, txHash2}, store.ErrFenced},
		{"", payStep{store.PaymentSettled, ""}, nil},
		{"", payStep{store.PaymentSettled, txHash1}, store.ErrFenced},
		{"", payStep{store.PaymentPending, ""}, store.ErrFenced},
	}
	for i, tc := range tests {
		key := fmt.Sprintf("k%d", i)
		c := e.mustClaim(key)
		e.update(key, c.Fence, store.PaymentSettled, tc.settled)
		before := e.get(key)
		e.clock.Advance(time.Second)
		err := e.a.UpdatePayment(e.ctx, key, before.Fence, tc.write.state, tc.write.txHash)
		if !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) {
			e.t.Errorf("settled %q -> %+v: UpdatePayment() = %v, want %v", tc.settled, tc.write, err, tc.err)
		}
		e.unchanged(key, before)
	}
}

func testPayUpdateInvalid(e *payEnv) {
	tests := []struct {
		name string
		step payStep
	}{
		// Back to held would let a pending or settled claim be taken over and
		// its authorization reach the upstream again.
		{"back to held", payStep{store.PaymentHeld, ""}},
		{"back to held with hash", payStep{store.PaymentHeld, txHash1}},
		{"unknown state", payStep{"mined", txHash1}},
		{"empty state", payStep{"", txHash1}},
	}
	for _, from := range []store.PaymentState{store.PaymentHeld, store.PaymentPending, store.PaymentSettled} {
		key := "k-" + string(from)
		c := e.inState(key, from)
		e.clock.Advance(time.Second)
		for _, tc := range tests {
			err := e.a.UpdatePayment(e.ctx, key, c.Fence, tc.step.state, tc.step.txHash)
			if err == nil {
				e.t.Errorf("%s: %s: UpdatePayment(%+v) = nil, want an error", from, tc.name, tc.step)
			} else if errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrFenced) {
				// A sentinel would tell the caller it lost its claim.
				e.t.Errorf("%s: %s: UpdatePayment(%+v) = %v, want an error that is no store sentinel", from, tc.name, tc.step, err)
			}
		}
		e.unchanged(key, c)
	}
}

func testPayReleaseHeldOrPending(e *payEnv) {
	for _, state := range []store.PaymentState{store.PaymentHeld, store.PaymentPending} {
		key := "k-" + string(state)
		first := e.inState(key, state)
		if err := e.a.ReleasePayment(e.ctx, key, first.Fence); err != nil {
			e.t.Fatalf("%s: ReleasePayment(): %v", state, err)
		}
		e.gone(key)
		if err := e.a.ReleasePayment(e.ctx, key, first.Fence); !errors.Is(err, store.ErrNotFound) {
			e.t.Errorf("%s: second ReleasePayment() = %v, want ErrNotFound", state, err)
		}
		// The authorization can be claimed again, under a fence never used
		// before, so the first holder's token cannot write the new record.
		now := e.clock.Advance(time.Second)
		in := e.input(key, "b")
		second, ok := e.claim(e.b, in, lease)
		if !ok {
			e.t.Fatalf("%s: ClaimPayment() after release won = false, want true", state)
		}
		if second.Fence <= first.Fence {
			e.t.Errorf("%s: Fence after release and claim = %d, want more than the released %d", state, second.Fence, first.Fence)
		}
		want := held(in, now, lease)
		want.Fence = second.Fence
		if diff := cmp.Diff(want, second); diff != "" {
			e.t.Errorf("%s: claim after release (-want +got):\n%s", state, diff)
		}
		if err := e.a.UpdatePayment(e.ctx, key, first.Fence, store.PaymentSettled, txHash1); !errors.Is(err, store.ErrFenced) {
			e.t.Errorf("%s: UpdatePayment(released fence) = %v, want ErrFenced", state, err)
		}
		if err := e.a.ReleasePayment(e.ctx, key, first.Fence); !errors.Is(err, store.ErrFenced) {
			e.t.Errorf("%s: ReleasePayment(released fence) = %v, want ErrFenced", state, err)
		}
		e.unchanged(key, second)
	}
	// The lease does not matter to the holder.
	c := e.mustClaim("late")
	e.clock.Advance(10 * lease)
	if err := e.a.ReleasePayment(e.ctx, "late", c.Fence); err != nil {
		e.t.Errorf("ReleasePayment() after the lease: %v", err)
	}
	e.gone("late")
}

func testPayReleaseStaleFence(e *payEnv) {
	for _, state := range []store.PaymentState{store.PaymentHeld, store.PaymentPending} {
		key := "k-" + string(state)
		c := e.inState(key, state)
		for _, fence := range []int64{c.Fence - 1, c.Fence + 1, 0, notIssued} {
			if err := e.a.ReleasePayment(e.ctx, key, fence); !errors.Is(err, store.ErrFenced) {
				e.t.Errorf("%s: ReleasePayment(fence %d, record's %d) = %v, want ErrFenced", state, fence, c.Fence, err)
			}
		}
		e.unchanged(key, c)
	}
}

func testPayReleaseSettled(e *payEnv) {
	// A settled authorization was spent: releasing it would let it reach the
	// upstream again.
	c := e.inState("k", store.PaymentSettled)
	for _, fence := range []int64{c.Fence, c.Fence + 1} {
		if err := e.a.ReleasePayment(e.ctx, "k", fence); !errors.Is(err, store.ErrFenced) {
			e.t.Errorf("ReleasePayment(settled, fence %d) = %v, want ErrFenced", fence, err)
		}
	}
	e.unchanged("k", c)
}

func testPayReleaseNotFound(e *payEnv) {
	if err := e.a.ReleasePayment(e.ctx, "absent", 1); !errors.Is(err, store.ErrNotFound) {
		e.t.Errorf("ReleasePayment(absent) = %v, want ErrNotFound", err)
	}
}

func testPayNotFound(e *payEnv) {
	e.gone("absent")
	e.mustClaim("k")
	e.gone("other")
}

// payOutcome is what one racing worker got.
type payOutcome struct {
	worker int
	c      store.PaymentClaim
	won    bool
	err    error
}

// race runs fn in n goroutines, released at once, and returns what each got.
// Worker i runs on handle a if i is even, b if odd. Workers report over a
// channel; only the test goroutine fails the test, and judging the errors is
// left to the caller.
func (e *payEnv) race(n int, fn func(h store.Payments, worker int) payOutcome) []payOutcome {
	e.t.Helper()
	startGun := make(chan struct{})
	results := make(chan payOutcome, n)
	var wg sync.WaitGroup
	for i := range n {
		h := e.a
		if i%2 == 1 {
			h = e.b
		}
		wg.Go(func() {
			<-startGun
			r := fn(h, i)
			r.worker = i
			results <- r
		})
	}
	close(startGun)
	wg.Wait()
	close(results)
	out := make([]payOutcome, n)
	for r := range results {
		out[r.worker] = r
	}
	return out
}

// claimRace has workers claim key at once, each as owner(i) with in's
// details, and returns the one winner, failing the test unless exactly one won
// and every other worker saw the winner's claim.
func (e *payEnv) claimRace(what string, in store.PaymentClaim) payOutcome {
	e.t.Helper()
	out := e.race(workers, func(h store.Payments, i int) payOutcome {
		c := in
		c.Owner = owner(i)
		got, won, err := h.ClaimPayment(e.ctx, c, lease)
		return payOutcome{c: got, won: won, err: err}
	})
	var won []payOutcome
	for _, r := range out {
		if r.err != nil {
			e.t.Errorf("%s: worker %d: %v", what, r.worker, r.err)
		}
		if r.won {
			won = append(won, r)
		}
	}
	if len(won) != 1 {
		var who []string
		for _, r := range won {
			who = append(who, fmt.Sprintf("worker %d (owner %q, fence %d)", r.worker, r.c.Owner, r.c.Fence))
		}
		e.t.Fatalf("%s: %d of %d concurrent callers won, want exactly 1: %s", what, len(won), len(out), strings.Join(who, ", "))
	}
	w := won[0]
	if w.c.Owner != owner(w.worker) {
		e.t.Errorf("%s: winner %d got a record owned by %q", what, w.worker, w.c.Owner)
	}
	for _, r := range out {
		if r.err == nil && !r.won && (r.c.Fence != w.c.Fence || r.c.Owner != w.c.Owner) {
			e.t.Errorf("%s: worker %d saw owner %q fence %d; the winner is %q with fence %d",
				what, r.worker, r.c.Owner, r.c.Fence, w.c.Owner, w.c.Fence)
		}
	}
	e.unchanged(in.Key, w.c)
	return w
}

func testPayRaceClaim(e *payEnv) {
	for round := range 4 {
		key := fmt.Sprintf("k%d", round)
		e.claimRace("ClaimPayment", e.input(key, ""))
	}
}

func testPayRaceTakeover(e *payEnv) {
	for round := range 4 {
		key := fmt.Sprintf("k%d", round)
		first := e.mustClaim(key)
		e.clock.Advance(lease)
		w := e.claimRace("takeover", e.input(key, ""))
		if w.c.Fence <= first.Fence {
			e.t.Errorf("takeover Fence = %d, want more than %d", w.c.Fence, first.Fence)
		}
		if !w.c.CreatedAt.Equal(first.CreatedAt) || !w.c.ExpiresAt.Equal(first.ExpiresAt) {
			e.t.Errorf("takeover record %+v does not keep the first claim's %+v", w.c, first)
		}
	}
}

func testPayRaceReplaceExpired(e *payEnv) {
	for round, state := range []store.PaymentState{store.PaymentHeld, store.PaymentPending, store.PaymentSettled, store.PaymentHeld} {
		key := fmt.Sprintf("k%d", round)
		first := e.inState(key, state)
		now := e.clock.Advance(first.ExpiresAt.Sub(e.clock.Now()))
		in := e.input(key, "")
		in.ExpiresAt = now.Add(expiry)
		w := e.claimRace("replace expired "+string(state), in)
		if w.c.Fence <= first.Fence {
			e.t.Errorf("replacement Fence = %d, want more than %d", w.c.Fence, first.Fence)
		}
		if w.c.State != store.PaymentHeld || !w.c.CreatedAt.Equal(now) {
			e.t.Errorf("replacement record %+v, want a new held claim created %v", w.c, now)
		}
	}
}

func testPayRaceReleaseVsUpdate(e *payEnv) {
	// Each key's holder releases and settles at once, through different
	// handles: exactly one of the two may take effect. Workers 2k and 2k+1
	// race on key k; which of them releases alternates with k, so both
	// handles do both.
	const keys = workers
	claims := make([]store.PaymentClaim, keys)
	for k := range keys {
		claims[k] = e.mustClaim(fmt.Sprintf("k%d", k))
	}
	releases := func(worker int) bool { return (worker+worker/2)%2 == 0 }
	out := e.race(2*keys, func(h store.Payments, i int) payOutcome {
		c := claims[i/2]
		var err error
		if releases(i) {
			err = h.ReleasePayment(e.ctx, c.Key, c.Fence)
		} else {
			err = h.UpdatePayment(e.ctx, c.Key, c.Fence, store.PaymentSettled, txHash1)
		}
		return payOutcome{won: err == nil, err: err}
	})
	for k, c := range claims {
		rel, upd := out[2*k], out[2*k+1]
		if !releases(rel.worker) {
			rel, upd = upd, rel
		}
		switch {
		case rel.won && !upd.won:
			if !errors.Is(upd.err, store.ErrNotFound) {
				e.t.Errorf("%s: release won, UpdatePayment() = %v, want ErrNotFound", c.Key, upd.err)
			}
			e.gone(c.Key)
		case upd.won && !rel.won:
			if !errors.Is(rel.err, store.ErrFenced) {
				e.t.Errorf("%s: update won, ReleasePayment() = %v, want ErrFenced", c.Key, rel.err)
			}
			if got := e.get(c.Key); got.State != store.PaymentSettled || got.TxHash != txHash1 || got.Fence != c.Fence {
				e.t.Errorf("%s: update won, record %+v, want settled with %s under fence %d", c.Key, got, txHash1, c.Fence)
			}
		default:
			e.t.Errorf("%s: ReleasePayment() = %v and UpdatePayment(settled) = %v; want exactly one to succeed", c.Key, rel.err, upd.err)
		}
	}
}

func testPayStageReadBack(e *payEnv) {
	for _, state := range []store.PaymentState{store.PaymentHeld, store.PaymentPending} {
		key := "k-" + string(state)
		c := e.inState(key, state)
		if c.Staged != nil {
			e.t.Fatalf("%s: new claim has a staged response %+v", state, c.Staged)
		}
		e.clock.Advance(time.Second)
		first := store.StagedResponse{Status: 200, ContentType: "application/json", Body: []byte(`{"id":"x"}`), Fingerprint: "f1"}
		if err := e.a.StagePayment(e.ctx, key, c.Fence, first); err != nil {
			e.t.Fatalf("%s: StagePayment: %v", state, err)
		}
		want := c
		want.Staged = &first
		want.UpdatedAt = e.clock.Now()
		e.unchanged(key, want)
		// Staging again replaces it, binary bytes intact.
		e.clock.Advance(time.Second)
		second := store.StagedResponse{Status: 200, ContentType: "text/event-stream", Body: []byte("data: \x00\xff\n\ndata: [DONE]\n\n"), Fingerprint: "f2"}
		if err := e.a.StagePayment(e.ctx, key, c.Fence, second); err != nil {
			e.t.Fatalf("%s: StagePayment again: %v", state, err)
		}
		want.Staged = &second
		want.UpdatedAt = e.clock.Now()
		e.unchanged(key, want)
		// It survives the move to pending and to settled.
		e.update(key, c.Fence, store.PaymentSettled, txHash1)
		if got := e.get(key); got.State != store.PaymentSettled || cmp.Diff(&second, got.Staged) != "" {
			e.t.Errorf("%s: after settling, record = %+v", state, got)
		}
	}
	// An empty body is staged as empty, not as nothing.
	c := e.mustClaim("empty")
	if err := e.a.StagePayment(e.ctx, "empty", c.Fence, store.StagedResponse{Status: 204}); err != nil {
		e.t.Fatal(err)
	}
	if got := e.get("empty"); got.Staged == nil || got.Staged.Status != 204 || len(got.Staged.Body) != 0 {
		e.t.Errorf("empty staged response read back as %+v", got.Staged)
	}
}

func testPayStageStaleFence(e *payEnv) {
	for _, state := range []store.PaymentState{store.PaymentHeld, store.PaymentPending} {
		key := "k-" + string(state)
		c := e.inState(key, state)
		e.clock.Advance(time.Second)
		for _, fence := range []int64{c.Fence - 1, c.Fence + 1, 0, notIssued} {
			err := e.a.StagePayment(e.ctx, key, fence, store.StagedResponse{Status: 200, Body: []byte("x")})
			if !errors.Is(err, store.ErrFenced) {
				e.t.Errorf("%s: StagePayment(fence %d, record's %d) = %v, want ErrFenced", state, fence, c.Fence, err)
			}
		}
		e.unchanged(key, c)
	}
}

func testPayStageSettled(e *payEnv) {
	c := e.inState("k", store.PaymentSettled)
	e.clock.Advance(time.Second)
	if err := e.a.StagePayment(e.ctx, "k", c.Fence, store.StagedResponse{Status: 200, Body: []byte("x")}); !errors.Is(err, store.ErrFenced) {
		e.t.Errorf("StagePayment(settled) = %v, want ErrFenced", err)
	}
	e.unchanged("k", c)
}

func testPayStageNotFound(e *payEnv) {
	if err := e.a.StagePayment(e.ctx, "absent", 1, store.StagedResponse{Status: 200, Body: []byte("x")}); !errors.Is(err, store.ErrNotFound) {
		e.t.Errorf("StagePayment(absent) = %v, want ErrNotFound", err)
	}
	e.gone("absent")
	// An expired record is absent too.
	c := e.mustClaim("k")
	e.clock.Advance(expiry)
	if err := e.a.StagePayment(e.ctx, "k", c.Fence, store.StagedResponse{Status: 200, Body: []byte("x")}); !errors.Is(err, store.ErrNotFound) {
		e.t.Errorf("StagePayment(expired) = %v, want ErrNotFound", err)
	}
}

func testPayStageInvalid(e *payEnv) {
	c := e.mustClaim("k")
	e.clock.Advance(time.Second)
	for name, r := range map[string]store.StagedResponse{
		"status 0":   {Status: 0, Body: []byte("x")},
		"status 600": {Status: 600, Body: []byte("x")},
		"too large":  {Status: 200, Body: make([]byte, store.MaxStagedBody+1)},
	} {
		err := e.a.StagePayment(e.ctx, "k", c.Fence, r)
		if err == nil || errors.Is(err, store.ErrFenced) || errors.Is(err, store.ErrNotFound) {
			e.t.Errorf("%s: StagePayment = %v, want an error that is no sentinel", name, err)
		}
	}
	e.unchanged("k", c)
	// Exactly the limit is accepted.
	if err := e.a.StagePayment(e.ctx, "k", c.Fence, store.StagedResponse{Status: 200, Body: make([]byte, store.MaxStagedBody)}); err != nil {
		e.t.Errorf("StagePayment(%d bytes) = %v", store.MaxStagedBody, err)
	}
}

func testPayStageGoneWithRelease(e *payEnv) {
	c := e.inState("k", store.PaymentPending)
	if err := e.a.StagePayment(e.ctx, "k", c.Fence, store.StagedResponse{Status: 200, Body: []byte("x")}); err != nil {
		e.t.Fatal(err)
	}
	if err := e.a.ReleasePayment(e.ctx, "k", c.Fence); err != nil {
		e.t.Fatal(err)
	}
	if got := e.mustClaim("k"); got.Staged != nil {
		e.t.Errorf("a claim after a release has the released one's staged response %+v", got.Staged)
	}
}
