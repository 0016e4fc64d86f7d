package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/llm4agents/llm4agents/internal/store"
)

// OpenSettlements opens two independent handles (separate connection pools
// or clients, as two processes would have) on one new, empty database. Both
// must take the time from now for every lease decision and timestamp. It
// registers the handles' cleanup with t.Cleanup and stops the test with
// t.Fatal if anything fails.
type OpenSettlements func(t *testing.T, now func() time.Time) (a, b store.Settlements)

// RunSettlements runs the store.Settlements conformance suite against the
// backend that open opens. Every subtest opens a database of its own.
func RunSettlements(t *testing.T, open OpenSettlements) {
	tests := []struct {
		name string
		run  func(*env)
	}{
		{"Claim/Creates", testClaimCreates},
		{"Claim/Held", testClaimHeld},
		{"Claim/IndependentKeys", testClaimIndependentKeys},
		{"Claim/TakeoverAfterExpiry", testClaimTakeover},
		{"Claim/NoTakeoverPastClaimed", testClaimNoTakeoverPastClaimed},
		{"Claim/InvalidArguments", testClaimInvalid},
		{"Claim/NearMaximumLease", testClaimNearMaxLease},
		{"Update/Transitions", testUpdateTransitions},
		{"Update/AfterLeaseWithoutTakeover", testUpdateAfterLease},
		{"Update/StaleFence", testUpdateStaleFence},
		{"Update/NotFound", testUpdateNotFound},
		{"Update/TerminalStates", testUpdateTerminal},
		{"Update/InvalidArguments", testUpdateInvalid},
		{"Release/Claimed", testReleaseClaimed},
		{"Release/StaleFence", testReleaseStaleFence},
		{"Release/PastClaimed", testReleasePastClaimed},
		{"Release/NotFound", testReleaseNotFound},
		{"RecordBroadcast/Transitions", testRecordBroadcast},
		{"RecordBroadcast/Refused", testRecordBroadcastRefused},
		{"AbandonBroadcast/Deletes", testAbandonBroadcast},
		{"AbandonBroadcast/Refused", testAbandonBroadcastRefused},
		{"MarkSuccessReported/NotSettled", testMarkNotSettled},
		{"MarkSuccessReported/Once", testMarkOnce},
		{"MarkSuccessReported/NotFound", testMarkNotFound},
		{"Settlement/NotFound", testSettlementNotFound},
		{"Unresolved/Empty", testUnresolvedEmpty},
		{"Unresolved/OrderAndLimit", testUnresolvedOrder},
		{"Unresolved/PerNetwork", testUnresolvedPerNetwork},
		{"Recent/OrderAndLimit", testRecentOrder},
		{"Recent/PerNetwork", testRecentPerNetwork},
		{"Recent/InvalidArguments", testRecentInvalid},
		{"MarkReorg/Transitions", testReorgTransitions},
		{"MarkReorg/KeepsSuccessMark", testReorgKeepsMark},
		{"MarkReorg/Refused", testReorgRefused},
		{"Race/Claim", testRaceClaim},
		{"Race/Takeover", testRaceTakeover},
		{"Race/MarkSuccessReported", testRaceMark},
		{"Race/MarkReorg", testRaceReorg},
		{"Closed", testSettlementsClosed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := &clock{now: start}
			a, b := open(t, c.Now)
			tc.run(&env{t: t, ctx: t.Context(), clock: c, a: a, b: b})
		})
	}
}

// start is where every subtest's clock begins: a whole millisecond.
var start = time.Date(2026, 3, 4, 5, 6, 7, 8_000_000, time.UTC)

const (
	lease     = time.Minute
	maxUint   = "115792089237316195423570985008687907853269984665640564039457584007913129639935" // 2^256-1
	workers   = 32
	txHash1   = "0x1111111111111111111111111111111111111111111111111111111111111111"
	txHash2   = "0x2222222222222222222222222222222222222222222222222222222222222222"
	notIssued = int64(1) << 62 // a fence no backend hands out in a test
)

// network is the network of the records input makes; otherNetwork is a
// second chain whose records share the store.
const (
	network      = "eip155:84532"
	otherNetwork = "eip155:8453"
)

// rawTx1 and rawTx2 stand for the signed transactions of txHash1 and
// txHash2: the store keeps them as given.
const (
	rawTx1 = "0x02f80001ff00"
	rawTx2 = "0x02f8aabbccddeeff00"
)

// clock is the store's clock during a subtest; safe for concurrent use.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	return c.now
}

// env is one subtest's database: handle a does most writes, handle b reads
// them back, so every check also shows the two handles see one database.
type env struct {
	t     *testing.T
	ctx   context.Context
	clock *clock
	a, b  store.Settlements
}

// input is what a caller passes to ClaimSettlement for key. It sets the
// fields the store must ignore to values that would be wrong if kept.
func input(key, owner string) store.Settlement {
	return store.Settlement{
		Key:             key,
		Network:         network,
		Asset:           "0x036cbd53842c5426634e7929541ec2318f3dcf7e",
		Payer:           "0x857b06519e91e3a54538791bdbb0e22373e36b66",
		PayTo:           "0x209693bc6afc0c5328ba36faf03c514ef312287c",
		Amount:          maxUint,
		Owner:           owner,
		State:           store.StateSettled,
		Fence:           notIssued,
		LeaseUntil:      start.Add(-time.Hour),
		SuccessReported: true,
		CreatedAt:       start.Add(-time.Hour),
		UpdatedAt:       start.Add(-time.Hour),
	}
}

// claimed is the record a claim of in at now with lease l must create,
// apart from its fence.
func claimed(in store.Settlement, now time.Time, l time.Duration) store.Settlement {
	in.State = store.StateClaimed
	in.LeaseUntil = now.Add(l)
	in.SuccessReported = false
	in.CreatedAt = now
	in.UpdatedAt = now
	return in
}

func (e *env) claim(h store.Settlements, s store.Settlement, l time.Duration) (store.Settlement, bool) {
	e.t.Helper()
	got, ok, err := h.ClaimSettlement(e.ctx, s, l)
	if err != nil {
		e.t.Fatalf("ClaimSettlement(%q, %v): %v", s.Key, l, err)
	}
	return got, ok
}

// mustClaim claims a new record for key through handle a, owned by "a".
func (e *env) mustClaim(key string) store.Settlement {
	e.t.Helper()
	got, ok := e.claim(e.a, input(key, "a"), lease)
	if !ok {
		e.t.Fatalf("ClaimSettlement(%q) = %+v, false; want true", key, got)
	}
	return got
}

func (e *env) get(key string) store.Settlement {
	e.t.Helper()
	got, err := e.b.Settlement(e.ctx, key)
	if err != nil {
		e.t.Fatalf("Settlement(%q): %v", key, err)
	}
	return got
}

func (e *env) update(key string, fence int64, state store.SettlementState, txHash, reason string) {
	e.t.Helper()
	if err := e.a.UpdateSettlement(e.ctx, key, fence, state, txHash, reason); err != nil {
		e.t.Fatalf("UpdateSettlement(%q, %d, %s): %v", key, fence, state, err)
	}
}

func (e *env) record(key string, fence int64, txHash, raw string) {
	e.t.Helper()
	if err := e.a.RecordBroadcast(e.ctx, key, fence, txHash, raw); err != nil {
		e.t.Fatalf("RecordBroadcast(%q, %d, %s): %v", key, fence, txHash, err)
	}
}

// inState claims key and moves it to state (claimed, broadcast, settled or
// failed), returning the record as stored.
func (e *env) inState(key string, state store.SettlementState) store.Settlement {
	e.t.Helper()
	s := e.mustClaim(key)
	switch state {
	case store.StateClaimed:
	case store.StateBroadcast:
		e.record(key, s.Fence, txHash1, rawTx1)
	case store.StateSettled:
		e.update(key, s.Fence, state, txHash1, "")
	case store.StateFailed:
		e.update(key, s.Fence, state, "", "transaction_failed")
	default:
		e.t.Fatalf("inState: unknown state %q", state)
	}
	return e.get(key)
}

// unchanged fails the test if the record for key differs from want.
func (e *env) unchanged(key string, want store.Settlement) {
	e.t.Helper()
	if diff := cmp.Diff(want, e.get(key)); diff != "" {
		e.t.Errorf("record %q changed (-before +after):\n%s", key, diff)
	}
}

func (e *env) gone(key string) {
	e.t.Helper()
	for _, h := range []store.Settlements{e.a, e.b} {
		if got, err := h.Settlement(e.ctx, key); !errors.Is(err, store.ErrNotFound) {
			e.t.Errorf("Settlement(%q) = %+v, %v; want ErrNotFound", key, got, err)
		}
	}
}

func testClaimCreates(e *env) {
	in := input("k", "a")
	got, ok := e.claim(e.a, in, lease)
	if !ok {
		e.t.Fatalf("ClaimSettlement() won = false, want true")
	}
	if got.Fence <= 0 || got.Fence == notIssued {
		e.t.Errorf("Fence = %d, want a new positive fence", got.Fence)
	}
	want := claimed(in, start, lease)
	want.Fence = got.Fence
	if diff := cmp.Diff(want, got); diff != "" {
		e.t.Errorf("ClaimSettlement() record (-want +got):\n%s", diff)
	}
	for name, h := range map[string]store.Settlements{"a": e.a, "b": e.b} {
		stored, err := h.Settlement(e.ctx, "k")
		if err != nil {
			e.t.Fatalf("handle %s: Settlement(): %v", name, err)
		}
		if diff := cmp.Diff(got, stored); diff != "" {
			e.t.Errorf("handle %s: stored record differs from the returned one (-returned +stored):\n%s", name, diff)
		}
	}
}

func testClaimHeld(e *env) {
	first := e.mustClaim("k")
	// Up to the last millisecond of the lease, through either handle, the
	// claim stays with its holder and nothing changes.
	e.clock.Advance(lease - time.Millisecond)
	other := input("k", "b")
	other.Amount = "1"
	for name, h := range map[string]store.Settlements{"a": e.a, "b": e.b} {
		got, ok := e.claim(h, other, lease)
		if ok {
			e.t.Errorf("handle %s: second ClaimSettlement() won = true, want false", name)
		}
		if diff := cmp.Diff(first, got); diff != "" {
			e.t.Errorf("handle %s: second ClaimSettlement() record (-first claim +got):\n%s", name, diff)
		}
	}
	e.unchanged("k", first)
}

func testClaimIndependentKeys(e *env) {
	k1 := e.mustClaim("k1")
	k2 := e.mustClaim("k2")
	if k1.Fence == k2.Fence {
		e.t.Errorf("two claims got the same fence %d", k1.Fence)
	}
	e.unchanged("k1", k1)
	e.unchanged("k2", k2)
}

func testClaimTakeover(e *env) {
	first := e.mustClaim("k")
	// The lease ends at LeaseUntil: from that instant the claim may be taken.
	now := e.clock.Advance(lease)
	// Another authorization with the same nonce (the payer signed two): the
	// record now describes the one its new holder sends.
	in := input("k", "b")
	in.Amount, in.PayTo = "1", "0x00000000000000000000000000000000000000b2"
	const lease2 = 2 * time.Minute
	got, ok := e.claim(e.b, in, lease2)
	if !ok {
		e.t.Fatalf("ClaimSettlement() after expiry won = false, want true; record %+v", got)
	}
	if got.Fence <= first.Fence {
		e.t.Errorf("takeover Fence = %d, want more than %d", got.Fence, first.Fence)
	}
	want := first
	want.Owner = "b"
	want.Amount, want.PayTo = in.Amount, in.PayTo
	want.Fence = got.Fence
	want.LeaseUntil = now.Add(lease2)
	want.UpdatedAt = now
	if diff := cmp.Diff(want, got); diff != "" {
		e.t.Errorf("takeover record (-want +got):\n%s", diff)
	}
	e.unchanged("k", got)

	// The new lease holds against everyone, the old holder included.
	if again, ok := e.claim(e.a, input("k", "a"), lease); ok {
		e.t.Errorf("ClaimSettlement() right after takeover won = true, want false; record %+v", again)
	}
	// The old holder is fenced off.
	if err := e.a.UpdateSettlement(e.ctx, "k", first.Fence, store.StateBroadcast, txHash1, ""); !errors.Is(err, store.ErrFenced) {
		e.t.Errorf("UpdateSettlement(old fence) = %v, want ErrFenced", err)
	}
	if err := e.a.ReleaseSettlement(e.ctx, "k", first.Fence); !errors.Is(err, store.ErrFenced) {
		e.t.Errorf("ReleaseSettlement(old fence) = %v, want ErrFenced", err)
	}
	e.unchanged("k", got)
	// The new holder writes.
	e.update("k", got.Fence, store.StateBroadcast, txHash1, "")
}

func testClaimNoTakeoverPastClaimed(e *env) {
	for _, state := range []store.SettlementState{store.StateBroadcast, store.StateSettled, store.StateFailed} {
		key := "k-" + string(state)
		before := e.inState(key, state)
		e.clock.Advance(100 * lease)
		got, ok := e.claim(e.b, input(key, "b"), lease)
		if ok {
			e.t.Errorf("%s: ClaimSettlement() long after expiry won = true, want false", state)
		}
		if diff := cmp.Diff(before, got); diff != "" {
			e.t.Errorf("%s: ClaimSettlement() record (-stored +got):\n%s", state, diff)
		}
		e.unchanged(key, before)
	}
}

func testClaimInvalid(e *env) {
	tests := []struct {
		name  string
		key   string
		lease time.Duration
	}{
		{"empty key", "", lease},
		{"zero lease", "k", 0},
		{"negative lease", "k", -time.Second},
	}
	for _, tc := range tests {
		if got, ok, err := e.a.ClaimSettlement(e.ctx, input(tc.key, "a"), tc.lease); err == nil || ok {
			e.t.Errorf("%s: ClaimSettlement() = %+v, %v, %v; want an error", tc.name, got, ok, err)
		}
		e.gone(tc.key)
	}
}

type step struct {
	state          store.SettlementState
	txHash, reason string
}

func testUpdateTransitions(e *env) {
	tests := []struct {
		name  string
		steps []step
	}{
		{"broadcast then settled", []step{{store.StateBroadcast, txHash1, ""}, {store.StateSettled, txHash1, ""}}},
		{"replacement transaction", []step{{store.StateBroadcast, txHash1, ""}, {store.StateBroadcast, txHash2, ""}, {store.StateSettled, txHash2, ""}}},
		{"broadcast then failed", []step{{store.StateBroadcast, txHash1, ""}, {store.StateFailed, txHash1, "transaction_failed"}}},
		{"settled from claimed", []step{{store.StateSettled, txHash1, ""}}},
		{"failed from claimed", []step{{store.StateFailed, "", "invalid_signature"}}},
	}
	for i, tc := range tests {
		key := fmt.Sprintf("k%d", i)
		s := e.mustClaim(key)
		for _, st := range tc.steps {
			now := e.clock.Advance(time.Second)
			if err := e.a.UpdateSettlement(e.ctx, key, s.Fence, st.state, st.txHash, st.reason); err != nil {
				e.t.Fatalf("%s: UpdateSettlement(%+v): %v", tc.name, st, err)
			}
			s.State, s.TxHash, s.Reason, s.UpdatedAt = st.state, st.txHash, st.reason, now
			if diff := cmp.Diff(s, e.get(key)); diff != "" {
				e.t.Errorf("%s: after %+v (-want +got):\n%s", tc.name, st, diff)
			}
		}
	}
}

func testUpdateAfterLease(e *env) {
	// An expired lease only lets someone take the claim over; until someone
	// does, the holder's fence is still good.
	s := e.mustClaim("k")
	now := e.clock.Advance(10 * lease)
	e.update("k", s.Fence, store.StateBroadcast, txHash1, "")
	s.State, s.TxHash, s.UpdatedAt = store.StateBroadcast, txHash1, now
	e.unchanged("k", s)
}

func testUpdateStaleFence(e *env) {
	s := e.mustClaim("k")
	for _, fence := range []int64{s.Fence - 1, s.Fence + 1, 0, notIssued} {
		if err := e.a.UpdateSettlement(e.ctx, "k", fence, store.StateBroadcast, txHash1, ""); !errors.Is(err, store.ErrFenced) {
			e.t.Errorf("UpdateSettlement(fence %d, record's %d) = %v, want ErrFenced", fence, s.Fence, err)
		}
	}
	e.unchanged("k", s)
}

func testUpdateNotFound(e *env) {
	if err := e.a.UpdateSettlement(e.ctx, "absent", 1, store.StateBroadcast, txHash1, ""); !errors.Is(err, store.ErrNotFound) {
		e.t.Errorf("UpdateSettlement(absent) = %v, want ErrNotFound", err)
	}
	e.gone("absent")
}

func testUpdateTerminal(e *env) {
	// Settled and failed are final: the writer that finds one resolved by
	// someone else gets ErrFenced and must stop; repeating the values the
	// record already holds is harmless and changes nothing.
	tests := []struct {
		from  store.SettlementState
		write step
		err   error
	}{
		{store.StateSettled, step{store.StateSettled, txHash1, ""}, nil},
		{store.StateSettled, step{store.StateSettled, txHash2, ""}, store.ErrFenced},
		{store.StateSettled, step{store.StateBroadcast, txHash1, ""}, store.ErrFenced},
		{store.StateSettled, step{store.StateFailed, txHash1, "reorged"}, store.ErrFenced},
		{store.StateFailed, step{store.StateFailed, "", "transaction_failed"}, nil},
		{store.StateFailed, step{store.StateFailed, "", "other"}, store.ErrFenced},
		{store.StateFailed, step{store.StateBroadcast, txHash1, ""}, store.ErrFenced},
		{store.StateFailed, step{store.StateSettled, txHash1, ""}, store.ErrFenced},
	}
	for i, tc := range tests {
		key := fmt.Sprintf("k%d", i)
		before := e.inState(key, tc.from)
		e.clock.Advance(time.Second)
		err := e.a.UpdateSettlement(e.ctx, key, before.Fence, tc.write.state, tc.write.txHash, tc.write.reason)
		if !errors.Is(err, tc.err) {
			e.t.Errorf("%s -> %+v: UpdateSettlement() = %v, want %v", tc.from, tc.write, err, tc.err)
		}
		e.unchanged(key, before)
	}
}

func testUpdateInvalid(e *env) {
	s := e.mustClaim("k")
	tests := []struct {
		name string
		step step
	}{
		// Back to claimed would let a broadcast record be released or taken
		// over and its authorization broadcast again.
		{"back to claimed", step{store.StateClaimed, "", ""}},
		{"unknown state", step{"mined", txHash1, ""}},
		{"broadcast without hash", step{store.StateBroadcast, "", ""}},
		{"settled without hash", step{store.StateSettled, "", ""}},
		{"failed without reason", step{store.StateFailed, txHash1, ""}},
	}
	for _, tc := range tests {
		if err := e.a.UpdateSettlement(e.ctx, "k", s.Fence, tc.step.state, tc.step.txHash, tc.step.reason); err == nil {
			e.t.Errorf("%s: UpdateSettlement(%+v) = nil, want an error", tc.name, tc.step)
		}
	}
	e.unchanged("k", s)
	// The same from broadcast.
	e.update("k", s.Fence, store.StateBroadcast, txHash1, "")
	s = e.get("k")
	if err := e.a.UpdateSettlement(e.ctx, "k", s.Fence, store.StateClaimed, "", ""); err == nil {
		e.t.Errorf("UpdateSettlement(broadcast -> claimed) = nil, want an error")
	}
	e.unchanged("k", s)
}

func testReleaseClaimed(e *env) {
	first := e.mustClaim("k")
	if err := e.a.ReleaseSettlement(e.ctx, "k", first.Fence); err != nil {
		e.t.Fatalf("ReleaseSettlement(): %v", err)
	}
	e.gone("k")
	if err := e.a.ReleaseSettlement(e.ctx, "k", first.Fence); !errors.Is(err, store.ErrNotFound) {
		e.t.Errorf("second ReleaseSettlement() = %v, want ErrNotFound", err)
	}
	// The authorization can be claimed again, under a fence never used
	// before, so the first holder's token cannot write the new record.
	now := e.clock.Advance(time.Second)
	in := input("k", "b")
	second, ok := e.claim(e.b, in, lease)
	if !ok {
		e.t.Fatalf("ClaimSettlement() after release won = false, want true")
	}
	if second.Fence <= first.Fence {
		e.t.Errorf("Fence after release and claim = %d, want more than the released %d", second.Fence, first.Fence)
	}
	want := claimed(in, now, lease)
	want.Fence = second.Fence
	if diff := cmp.Diff(want, second); diff != "" {
		e.t.Errorf("claim after release (-want +got):\n%s", diff)
	}
	if err := e.a.UpdateSettlement(e.ctx, "k", first.Fence, store.StateBroadcast, txHash1, ""); !errors.Is(err, store.ErrFenced) {
		e.t.Errorf("UpdateSettlement(released fence) = %v, want ErrFenced", err)
	}
	if err := e.a.ReleaseSettlement(e.ctx, "k", first.Fence); !errors.Is(err, store.ErrFenced) {
		e.t.Errorf("ReleaseSettlement(released fence) = %v, want ErrFenced", err)
	}
	e.unchanged("k", second)
}

func testRecordBroadcast(e *env) {
	s := e.mustClaim("k")
	now := e.clock.Advance(time.Second)
	e.record("k", s.Fence, txHash1, rawTx1)
	want := s
	want.State, want.TxHash, want.RawTx, want.UpdatedAt = store.StateBroadcast, txHash1, rawTx1, now
	e.unchanged("k", want)

	// A replacement is recorded over the first transaction.
	now = e.clock.Advance(time.Second)
	e.record("k", s.Fence, txHash2, rawTx2)
	want.TxHash, want.RawTx, want.UpdatedAt = txHash2, rawTx2, now
	e.unchanged("k", want)

	// Past its lease a broadcast record is not taken over: it is resolved
	// from the chain.
	e.clock.Advance(2 * lease)
	if got, ok := e.claim(e.b, input("k", "b"), lease); ok {
		e.t.Errorf("ClaimSettlement() of a broadcast record won = true, want false; record %+v", got)
	}
	e.unchanged("k", want)

	// Resolving it keeps the transaction's bytes.
	now = e.clock.Advance(time.Second)
	e.update("k", s.Fence, store.StateSettled, txHash2, "")
	want.State, want.UpdatedAt = store.StateSettled, now
	e.unchanged("k", want)
	listed, err := e.b.UnresolvedSettlements(e.ctx, network, 10)
	if err != nil || len(listed) != 0 {
		e.t.Errorf("UnresolvedSettlements() = %+v, %v; want none", listed, err)
	}
}

func testRecordBroadcastRefused(e *env) {
	s := e.mustClaim("k")
	tests := []struct {
		name  string
		fence int64
		hash  string
		raw   string
		want  error // nil: any error that is not a sentinel
	}{
		{"stale fence", s.Fence + 1, txHash1, rawTx1, store.ErrFenced},
		{"not issued fence", notIssued, txHash1, rawTx1, store.ErrFenced},
		{"no hash", s.Fence, "", rawTx1, nil},
		{"no raw transaction", s.Fence, txHash1, "", nil},
		{"no hex digits", s.Fence, txHash1, "0x", nil},
		{"no 0x", s.Fence, txHash1, rawTx1[2:], nil},
		{"odd length", s.Fence, txHash1, rawTx1 + "0", nil},
		{"not hex", s.Fence, txHash1, "0x02zz", nil},
		{"raw transaction too large", s.Fence, txHash1, "0x" + strings.Repeat("00", store.MaxRawTx+1), nil},
	}
	for _, tc := range tests {
		err := e.a.RecordBroadcast(e.ctx, "k", tc.fence, tc.hash, tc.raw)
		switch {
		case err == nil:
			e.t.Errorf("%s: RecordBroadcast() = nil, want an error", tc.name)
		case tc.want != nil && !errors.Is(err, tc.want):
			e.t.Errorf("%s: RecordBroadcast() = %v, want %v", tc.name, err, tc.want)
		case tc.want == nil && (errors.Is(err, store.ErrFenced) || errors.Is(err, store.ErrNotFound)):
			e.t.Errorf("%s: RecordBroadcast() = %v, want a plain error", tc.name, err)
		}
	}
	e.unchanged("k", s)
	if err := e.a.RecordBroadcast(e.ctx, "absent", s.Fence, txHash1, rawTx1); !errors.Is(err, store.ErrNotFound) {
		e.t.Errorf("RecordBroadcast(absent) = %v, want ErrNotFound", err)
	}
	// A resolved record takes no transaction any more.
	for _, state := range []store.SettlementState{store.StateSettled, store.StateFailed} {
		key := "k-" + string(state)
		before := e.inState(key, state)
		if err := e.a.RecordBroadcast(e.ctx, key, before.Fence, txHash2, rawTx2); !errors.Is(err, store.ErrFenced) {
			e.t.Errorf("%s: RecordBroadcast() = %v, want ErrFenced", state, err)
		}
		e.unchanged(key, before)
	}
}

func testAbandonBroadcast(e *env) {
	first := e.inState("k", store.StateBroadcast)
	if err := e.a.AbandonBroadcast(e.ctx, "k", first.Fence, txHash1); err != nil {
		e.t.Fatalf("AbandonBroadcast(): %v", err)
	}
	e.gone("k")
	if err := e.a.AbandonBroadcast(e.ctx, "k", first.Fence, txHash1); !errors.Is(err, store.ErrNotFound) {
		e.t.Errorf("second AbandonBroadcast() = %v, want ErrNotFound", err)
	}
	listed, err := e.b.UnresolvedSettlements(e.ctx, network, 10)
	if err != nil || len(listed) != 0 {
		e.t.Errorf("UnresolvedSettlements() = %+v, %v; want none", listed, err)
	}
	// The authorization can be claimed again, under a new fence.
	second, ok := e.claim(e.b, input("k", "b"), lease)
	if !ok || second.Fence <= first.Fence || second.RawTx != "" || second.TxHash != "" {
		e.t.Errorf("ClaimSettlement() after abandon = %+v, %v; want a new claim without a transaction", second, ok)
	}
}

func testAbandonBroadcastRefused(e *env) {
	s := e.inState("k", store.StateBroadcast)
	for _, tc := range []struct {
		name  string
		fence int64
		hash  string
	}{
		{"stale fence", s.Fence + 1, txHash1},
		// The holder recorded another transaction since the caller looked:
		// that one may be on its way to the node.
		{"other transaction", s.Fence, txHash2},
	} {
		if err := e.a.AbandonBroadcast(e.ctx, "k", tc.fence, tc.hash); !errors.Is(err, store.ErrFenced) {
			e.t.Errorf("%s: AbandonBroadcast() = %v, want ErrFenced", tc.name, err)
		}
	}
	e.unchanged("k", s)
	// Only a broadcast record is abandoned: a claimed one is released, a
	// resolved one stays.
	for _, state := range []store.SettlementState{store.StateClaimed, store.StateSettled, store.StateFailed} {
		key := "k-" + string(state)
		before := e.inState(key, state)
		if err := e.a.AbandonBroadcast(e.ctx, key, before.Fence, before.TxHash); !errors.Is(err, store.ErrFenced) {
			e.t.Errorf("%s: AbandonBroadcast() = %v, want ErrFenced", state, err)
		}
		e.unchanged(key, before)
	}
}

func testReleaseStaleFence(e *env) {
	s := e.mustClaim("k")
	for _, fence := range []int64{s.Fence - 1, s.Fence + 1, notIssued} {
		if err := e.a.ReleaseSettlement(e.ctx, "k", fence); !errors.Is(err, store.ErrFenced) {
			e.t.Errorf("ReleaseSettlement(fence %d, record's %d) = %v, want ErrFenced", fence, s.Fence, err)
		}
	}
	e.unchanged("k", s)
}

func testReleasePastClaimed(e *env) {
	for _, state := range []store.SettlementState{store.StateBroadcast, store.StateSettled, store.StateFailed} {
		key := "k-" + string(state)
		before := e.inState(key, state)
		if err := e.a.ReleaseSettlement(e.ctx, key, before.Fence); !errors.Is(err, store.ErrFenced) {
			e.t.Errorf("%s: ReleaseSettlement() = %v, want ErrFenced", state, err)
		}
		e.unchanged(key, before)
	}
}

func testReleaseNotFound(e *env) {
	if err := e.a.ReleaseSettlement(e.ctx, "absent", 1); !errors.Is(err, store.ErrNotFound) {
		e.t.Errorf("ReleaseSettlement(absent) = %v, want ErrNotFound", err)
	}
}

func testMarkNotSettled(e *env) {
	for _, state := range []store.SettlementState{store.StateClaimed, store.StateBroadcast, store.StateFailed} {
		key := "k-" + string(state)
		before := e.inState(key, state)
		e.clock.Advance(time.Second)
		if set, err := e.a.MarkSuccessReported(e.ctx, key); set || err != nil {
			e.t.Errorf("%s: MarkSuccessReported() = %v, %v; want false, nil", state, set, err)
		}
		e.unchanged(key, before)
	}
}

func testMarkOnce(e *env) {
	s := e.inState("k", store.StateSettled)
	now := e.clock.Advance(time.Second)
	set, err := e.a.MarkSuccessReported(e.ctx, "k")
	if err != nil || !set {
		e.t.Fatalf("first MarkSuccessReported() = %v, %v; want true, nil", set, err)
	}
	s.SuccessReported, s.UpdatedAt = true, now
	e.unchanged("k", s)
	e.clock.Advance(time.Second)
	for name, h := range map[string]store.Settlements{"a": e.a, "b": e.b} {
		if set, err := h.MarkSuccessReported(e.ctx, "k"); set || err != nil {
			e.t.Errorf("handle %s: later MarkSuccessReported() = %v, %v; want false, nil", name, set, err)
		}
	}
	// Writing the settled values again leaves the mark alone.
	e.update("k", s.Fence, store.StateSettled, s.TxHash, "")
	e.unchanged("k", s)
}

func testMarkNotFound(e *env) {
	if set, err := e.a.MarkSuccessReported(e.ctx, "absent"); set || !errors.Is(err, store.ErrNotFound) {
		e.t.Errorf("MarkSuccessReported(absent) = %v, %v; want false, ErrNotFound", set, err)
	}
}

func testSettlementNotFound(e *env) {
	e.gone("absent")
}

func testUnresolvedEmpty(e *env) {
	for _, n := range []string{network, store.AllNetworks} {
		got, err := e.a.UnresolvedSettlements(e.ctx, n, 10)
		if err != nil || len(got) != 0 {
			e.t.Errorf("UnresolvedSettlements(%q) = %+v, %v; want none", n, got, err)
		}
	}
}

func testUnresolvedOrder(e *env) {
	// Keys sort against their age, so the order must come from CreatedAt.
	oldest := e.inState("z-claimed", store.StateClaimed)
	e.clock.Advance(time.Second)
	e.inState("y-broadcast", store.StateBroadcast)
	e.clock.Advance(time.Second)
	e.inState("x-settled", store.StateSettled)
	e.clock.Advance(time.Second)
	e.inState("w-failed", store.StateFailed)
	e.clock.Advance(time.Second)
	e.inState("v-claimed", store.StateClaimed)
	e.clock.Advance(time.Second)
	released := e.mustClaim("u-released")
	if err := e.a.ReleaseSettlement(e.ctx, "u-released", released.Fence); err != nil {
		e.t.Fatalf("ReleaseSettlement(): %v", err)
	}
	// A takeover does not make the oldest record younger.
	e.clock.Advance(lease)
	if _, ok := e.claim(e.b, input("z-claimed", "b"), lease); !ok {
		e.t.Fatalf("takeover of %q failed", oldest.Key)
	}

	// With one network in the store, its list and the list of every
	// network are the same.
	want := []store.Settlement{e.get("z-claimed"), e.get("y-broadcast"), e.get("v-claimed")}
	for _, n := range []string{network, store.AllNetworks} {
		for _, limit := range []int{1, 2, 3, 100} {
			for name, h := range map[string]store.Settlements{"a": e.a, "b": e.b} {
				if diff := cmp.Diff(want[:min(limit, len(want))], e.unresolved(h, n, limit)); diff != "" {
					e.t.Errorf("handle %s: UnresolvedSettlements(%q, %d) (-want +got):\n%s", name, n, limit, diff)
				}
			}
		}
	}

	// Resolving the oldest takes it off the lists.
	e.update("z-claimed", e.get("z-claimed").Fence, store.StateSettled, txHash1, "")
	for _, n := range []string{network, store.AllNetworks} {
		if diff := cmp.Diff(want[1:], e.unresolved(e.a, n, 100)); diff != "" {
			e.t.Errorf("UnresolvedSettlements(%q) after settling the oldest (-want +got):\n%s", n, diff)
		}
	}
}

func (e *env) unresolved(h store.Settlements, network string, limit int) []store.Settlement {
	e.t.Helper()
	got, err := h.UnresolvedSettlements(e.ctx, network, limit)
	if err != nil {
		e.t.Fatalf("UnresolvedSettlements(%q, %d): %v", network, limit, err)
	}
	return got
}

// claimOn claims key on network n through handle a and moves it to state
// (see inState).
func (e *env) claimOn(n, key string, state store.SettlementState) store.Settlement {
	e.t.Helper()
	in := input(key, "a")
	in.Network = n
	s, ok := e.claim(e.a, in, lease)
	if !ok {
		e.t.Fatalf("ClaimSettlement(%q) = %+v, false; want true", key, s)
	}
	switch state {
	case store.StateClaimed:
	case store.StateBroadcast:
		e.record(key, s.Fence, txHash1, rawTx1)
	case store.StateSettled:
		e.update(key, s.Fence, state, txHash1, "")
	default:
		e.t.Fatalf("claimOn: state %q", state)
	}
	return e.get(key)
}

// testUnresolvedPerNetwork: with one facilitator per chain on a shared
// store, each lists its own network's unresolved records, and the limit
// counts those only. Another chain with more old records than a page (its
// node down for a while) must not hide the newest record of this one: a
// reconciler that never sees a record never resolves it, and its buyer
// waits forever.
func testUnresolvedPerNetwork(e *env) {
	// Interleaved in time, so that neither network's records come as a
	// block.
	var mine, theirs, every []store.Settlement
	for i := range 3 {
		m := e.claimOn(network, fmt.Sprintf("mine-%d", i), []store.SettlementState{store.StateClaimed, store.StateBroadcast}[i%2])
		e.clock.Advance(time.Millisecond)
		o := e.claimOn(otherNetwork, fmt.Sprintf("theirs-%d", i), store.StateBroadcast)
		e.clock.Advance(time.Millisecond)
		mine, theirs, every = append(mine, m), append(theirs, o), append(every, m, o)
	}
	e.claimOn(network, "mine-settled", store.StateSettled)
	e.claimOn(otherNetwork, "theirs-settled", store.StateSettled)
	for _, tc := range []struct {
		network string
		want    []store.Settlement
	}{
		{network, mine},
		{otherNetwork, theirs},
		{store.AllNetworks, every},
		{"eip155:1", nil},
	} {
		for _, limit := range []int{1, 2, 100} {
			for name, h := range map[string]store.Settlements{"a": e.a, "b": e.b} {
				got := e.unresolved(h, tc.network, limit)
				if diff := cmp.Diff(tc.want[:min(limit, len(tc.want))], got, cmpopts.EquateEmpty()); diff != "" {
					e.t.Errorf("handle %s: UnresolvedSettlements(%q, %d) (-want +got):\n%s", name, tc.network, limit, diff)
				}
			}
		}
	}

	// 150 more of the other network's, all older than our newest record:
	// a page of 100, as the reconciler reads, still holds all of ours.
	for i := range 150 {
		e.claimOn(otherNetwork, fmt.Sprintf("stuck-%03d", i), []store.SettlementState{store.StateClaimed, store.StateBroadcast}[i%2])
	}
	e.clock.Advance(time.Millisecond)
	newest := e.claimOn(network, "mine-newest", store.StateClaimed)
	if diff := cmp.Diff(append(slices.Clip(mine), newest), e.unresolved(e.b, network, 100)); diff != "" {
		e.t.Errorf("UnresolvedSettlements(%q, 100) behind 150 records of %q (-want +got):\n%s", network, otherNetwork, diff)
	}
	if got := e.unresolved(e.b, otherNetwork, 100); len(got) != 100 || got[0].Key != theirs[0].Key || got[99].Key != "stuck-096" {
		e.t.Errorf("UnresolvedSettlements(%q, 100) = %d records; want 100, from %q to stuck-096", otherNetwork, len(got), theirs[0].Key)
	}
	// Releasing and settling take a record off its network's list.
	e.clock.Advance(time.Millisecond)
	if err := e.a.ReleaseSettlement(e.ctx, newest.Key, newest.Fence); err != nil {
		e.t.Fatalf("ReleaseSettlement(): %v", err)
	}
	e.update(mine[1].Key, mine[1].Fence, store.StateSettled, txHash1, "")
	if diff := cmp.Diff([]store.Settlement{mine[0], mine[2]}, e.unresolved(e.b, network, 100)); diff != "" {
		e.t.Errorf("UnresolvedSettlements(%q) after a release and a settlement (-want +got):\n%s", network, diff)
	}
}

// outcome is what one racing worker got.
type outcome struct {
	worker int
	s      store.Settlement
	won    bool
	err    error
}

// race runs fn in workers goroutines, alternating between the two handles,
// released at once, and returns what each got. Workers report over a
// channel; only the test goroutine fails the test.
func (e *env) race(fn func(h store.Settlements, worker int) (store.Settlement, bool, error)) []outcome {
	e.t.Helper()
	startGun := make(chan struct{})
	results := make(chan outcome, workers)
	var wg sync.WaitGroup
	for i := range workers {
		h := e.a
		if i%2 == 1 {
			h = e.b
		}
		wg.Go(func() {
			<-startGun
			s, won, err := fn(h, i)
			results <- outcome{worker: i, s: s, won: won, err: err}
		})
	}
	close(startGun)
	wg.Wait()
	close(results)
	var out []outcome
	for r := range results {
		if r.err != nil {
			e.t.Errorf("worker %d: %v", r.worker, r.err)
		}
		out = append(out, r)
	}
	return out
}

// winner returns the one outcome that won, failing the test unless exactly
// one did.
func (e *env) winner(what string, out []outcome) outcome {
	e.t.Helper()
	var won []outcome
	for _, r := range out {
		if r.won {
			won = append(won, r)
		}
	}
	if len(won) != 1 {
		var who []string
		for _, r := range won {
			who = append(who, fmt.Sprintf("worker %d (owner %q, fence %d)", r.worker, r.s.Owner, r.s.Fence))
		}
		e.t.Fatalf("%s: %d of %d concurrent callers won, want exactly 1: %s", what, len(won), len(out), strings.Join(who, ", "))
	}
	return won[0]
}

func owner(worker int) string { return fmt.Sprintf("w%02d", worker) }

func testRaceClaim(e *env) {
	for round := range 4 {
		key := fmt.Sprintf("k%d", round)
		out := e.race(func(h store.Settlements, i int) (store.Settlement, bool, error) {
			return h.ClaimSettlement(e.ctx, input(key, owner(i)), lease)
		})
		w := e.winner("ClaimSettlement", out)
		for _, r := range out {
			if r.err == nil && (r.s.Fence != w.s.Fence || r.s.Owner != owner(w.worker)) {
				e.t.Errorf("worker %d saw owner %q fence %d; the winner is %q with fence %d",
					r.worker, r.s.Owner, r.s.Fence, owner(w.worker), w.s.Fence)
			}
		}
		e.unchanged(key, w.s)
	}
}

func testRaceTakeover(e *env) {
	first := e.mustClaim("k")
	e.clock.Advance(lease)
	out := e.race(func(h store.Settlements, i int) (store.Settlement, bool, error) {
		return h.ClaimSettlement(e.ctx, input("k", owner(i)), lease)
	})
	w := e.winner("takeover", out)
	if w.s.Fence <= first.Fence {
		e.t.Errorf("takeover Fence = %d, want more than %d", w.s.Fence, first.Fence)
	}
	for _, r := range out {
		if r.err == nil && r.s.Fence != w.s.Fence {
			e.t.Errorf("worker %d saw fence %d; the winner has %d", r.worker, r.s.Fence, w.s.Fence)
		}
	}
	e.unchanged("k", w.s)
}

func testRaceMark(e *env) {
	for round := range 4 {
		key := fmt.Sprintf("k%d", round)
		e.inState(key, store.StateSettled)
		out := e.race(func(h store.Settlements, _ int) (store.Settlement, bool, error) {
			set, err := h.MarkSuccessReported(e.ctx, key)
			return store.Settlement{}, set, err
		})
		e.winner("MarkSuccessReported", out)
		if s := e.get(key); !s.SuccessReported {
			e.t.Errorf("record %q: SuccessReported = false after the race", key)
		}
	}
}
