package storetest

import (
	"errors"
	"math"
	"time"

	"github.com/llm4agents/llm4agents/internal/store"
)

// Leases, TTLs and budgets at their bounds, where the backends' arithmetic
// once differed.

// nearMaxLease is the longest lease there is. Kept to the millisecond, it
// is nearMaxLeaseMs, rounded up as every lease is.
const (
	nearMaxLease   = time.Duration(math.MaxInt64)
	nearMaxLeaseMs = math.MaxInt64/int64(time.Millisecond) + 1
)

// afterNearMaxLease is when a lease of nearMaxLease taken at t ends.
func afterNearMaxLease(t time.Time) time.Time {
	return time.UnixMilli(t.UnixMilli() + nearMaxLeaseMs).UTC()
}

func testClaimNearMaxLease(e *env) {
	got, won, err := e.a.ClaimSettlement(e.ctx, input("k", "a"), nearMaxLease)
	if err != nil || !won {
		e.t.Fatalf("ClaimSettlement(lease %v) = %v, %v; want held, nil", nearMaxLease, won, err)
	}
	if want := afterNearMaxLease(start); !got.LeaseUntil.Equal(want) {
		e.t.Errorf("LeaseUntil = %v, want %v", got.LeaseUntil, want)
	}
	// A century on, the lease still holds.
	e.clock.Advance(100 * 365 * 24 * time.Hour)
	again, won, err := e.b.ClaimSettlement(e.ctx, input("k", "b"), lease)
	if err != nil || won || again.Owner != "a" || again.Fence != got.Fence {
		e.t.Errorf("ClaimSettlement() a century later = owner %q, fence %d, %v, %v; want a's claim (fence %d), false, nil",
			again.Owner, again.Fence, won, err, got.Fence)
	}
}

func testPayClaimNearMaxLease(e *payEnv) {
	got, won, err := e.a.ClaimPayment(e.ctx, e.input("k", "a"), nearMaxLease)
	if err != nil || !won {
		e.t.Fatalf("ClaimPayment(lease %v) = %v, %v; want held, nil", nearMaxLease, won, err)
	}
	if want := afterNearMaxLease(start); !got.LeaseUntil.Equal(want) {
		e.t.Errorf("LeaseUntil = %v, want %v", got.LeaseUntil, want)
	}
	// Until the record expires, the lease holds.
	e.clock.Advance(expiry - time.Millisecond)
	again, won, err := e.b.ClaimPayment(e.ctx, e.input("k", "b"), lease)
	if err != nil || won || again.Owner != "a" || again.Fence != got.Fence {
		e.t.Errorf("ClaimPayment() before expiry = owner %q, fence %d, %v, %v; want a's claim (fence %d), false, nil",
			again.Owner, again.Fence, won, err, got.Fence)
	}
}

func testRecBeginNearMaxLease(e *recEnv) {
	got, won, err := e.a.BeginRecovery(e.ctx, e.input("k", "op"), nearMaxLease)
	if err != nil || !won {
		e.t.Fatalf("BeginRecovery(lease %v) = %v, %v; want held, nil", nearMaxLease, won, err)
	}
	if want := afterNearMaxLease(start); !got.LeaseUntil.Equal(want) {
		e.t.Errorf("LeaseUntil = %v, want %v", got.LeaseUntil, want)
	}
	// Until the record expires, the lease holds.
	e.clock.Advance(2*recTTL - time.Millisecond)
	again, won, err := e.b.BeginRecovery(e.ctx, e.input("k", "op2"), recLease)
	if err != nil || won || again.OperationID != "op" || again.Fence != got.Fence {
		e.t.Errorf("BeginRecovery() before expiry = op %q, fence %d, %v, %v; want the first (fence %d), false, nil",
			again.OperationID, again.Fence, won, err, got.Fence)
	}
}

func testRecPromoteNearMaxTTL(e *recEnv) {
	e.staged("k", "op")
	got, err := e.a.PromoteRecovery(e.ctx, "op", recFP, recRef, nearMaxLease, 1)
	if err != nil {
		e.t.Fatalf("PromoteRecovery(ttl %v) = %v", nearMaxLease, err)
	}
	if want := afterNearMaxLease(start); !got.ExpiresAt.Equal(want) {
		e.t.Errorf("ExpiresAt = %v, want %v", got.ExpiresAt, want)
	}
	e.clock.Advance(100 * 365 * 24 * time.Hour)
	if _, took, err := e.b.TakeReplay(e.ctx, "k", "op"); err != nil || !took {
		e.t.Errorf("TakeReplay() a century later = %v, %v; want true, nil", took, err)
	}
}

func testRecPromoteReplayBound(e *recEnv) {
	e.staged("k", "op")
	_, err := e.a.PromoteRecovery(e.ctx, "op", recFP, recRef, recTTL, store.MaxReplays+1)
	if err == nil || errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrFenced) {
		e.t.Errorf("PromoteRecovery(replays %d) = %v, want an error that is no sentinel", store.MaxReplays+1, err)
	}
	if got := e.get("k"); got.State != store.RecoveryStaged {
		e.t.Errorf("after the refused promotion the record is %s, want staged", got.State)
	}
	got, err := e.a.PromoteRecovery(e.ctx, "op", recFP, recRef, recTTL, store.MaxReplays)
	if err != nil || got.ReplaysLeft != store.MaxReplays {
		e.t.Errorf("PromoteRecovery(replays %d) = %d left, %v; want %d, nil", store.MaxReplays, got.ReplaysLeft, err, store.MaxReplays)
	}
}
