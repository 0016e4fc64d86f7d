//go:build l4a_unsafe_noclaim

package paywall

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/llm4agents/llm4agents/internal/store"
)

// This file exists only in binaries built with -tags l4a_unsafe_noclaim, for
// the control run of the multi-replica tests: with
// LLM4AGENTS_UNSAFE_NO_CLAIM=1 the paywall's claim on an authorization always
// succeeds, so every concurrent copy of one PAYMENT-SIGNATURE reaches the
// upstream, the double spend that the claim prevents. A test that
// does not see it with the claim off proves nothing with the claim on.

// unsafeNoClaimEnv switches the claim off in this build only.
const unsafeNoClaimEnv = "LLM4AGENTS_UNSAFE_NO_CLAIM"

// noClaim is read once, when the process starts.
var noClaim = os.Getenv(unsafeNoClaimEnv) == "1"

func init() {
	if noClaim {
		_, _ = fmt.Fprintf(os.Stderr, "llm4agents: UNSAFE test build: %s=1, payment claims are switched off; never run this in production\n", unsafeNoClaimEnv)
	}
}

// claimSwitchedOff reports LLM4AGENTS_UNSAFE_NO_CLAIM=1: the paywall then
// takes neither its payment claim (claims) nor its recovery record, the
// second claim on an authorization.
func claimSwitchedOff() bool { return noClaim }

// claims returns the paywall's store, or with the claim switched off a store
// whose claims are always won.
func (p *Paywall) claims() store.Payments {
	if noClaim {
		return noClaimPayments{p.payments}
	}
	return p.payments
}

// noClaimPayments claims every authorization for every caller, each time with
// a fresh fence, and writes nothing: releases, updates and staging are no-ops,
// so every claim stays winnable. Reads go to the real store (and find nothing
// this wrapper wrote).
type noClaimPayments struct{ store.Payments }

// noClaimFence hands out fences no real store uses (they count down from -1).
var noClaimFence atomic.Int64

func (noClaimPayments) ClaimPayment(_ context.Context, c store.PaymentClaim, lease time.Duration) (store.PaymentClaim, bool, error) {
	now := time.Now()
	c.State, c.Fence, c.LeaseUntil, c.CreatedAt, c.UpdatedAt = store.PaymentHeld, noClaimFence.Add(-1), now.Add(lease), now, now
	c.TxHash, c.Staged = "", nil
	return c, true, nil
}

func (noClaimPayments) ReleasePayment(context.Context, string, int64) error { return nil }

func (noClaimPayments) UpdatePayment(context.Context, string, int64, store.PaymentState, string) error {
	return nil
}

func (noClaimPayments) StagePayment(context.Context, string, int64, store.StagedResponse) error {
	return nil
}

var _ store.Payments = noClaimPayments{}
