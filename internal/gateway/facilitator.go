package gateway

import "github.com/llm4agents/llm4agents/internal/paywall"

// Facilitator is what the gateway needs of an x402 facilitator: verifying a
// payment before the call and settling it after. Its consumer is the paywall
// (internal/paywall), which defines it; the in-process
// *facilitator.Facilitator and the remote *facilitator.Client both satisfy it.
// Both answer protocol failures as responses (isValid or success false, with
// a reason) and return an error only when they could not reach a verdict (a
// node that is down, a cancelled context).
//
// A Facilitator may also confirm, from the chain, a settlement whose answer
// was lost (the confirmer interfaces of internal/paywall); the paywall finds
// that by a type assertion.
type Facilitator = paywall.Facilitator
