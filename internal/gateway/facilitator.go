package gateway

import (
	"context"

	"github.com/llm4agents/llm4agents/x402"
)

// Facilitator is what the gateway needs of an x402 facilitator: verifying a
// payment before the call and settling it after. The in-process
// *facilitator.Facilitator and the remote *facilitator.Client both have these
// methods. Both answer protocol failures as responses (isValid or success
// false, with a Reason) and return an error only when they could not reach a
// verdict (a node that is down, a cancelled context).
//
// A Facilitator may also confirm, from the chain, a settlement whose answer
// was lost (see the confirmer interfaces of paywall.go and recovery.go); the
// gateway finds that by a type assertion.
type Facilitator interface {
	Verify(ctx context.Context, p *x402.PaymentPayload, req x402.PaymentRequirements) (*x402.VerifyResponse, error)
	Settle(ctx context.Context, p *x402.PaymentPayload, req x402.PaymentRequirements) (*x402.SettleResponse, error)
}
