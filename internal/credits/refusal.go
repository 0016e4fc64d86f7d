package credits

import (
	"fmt"
	"time"

	"github.com/llm4agents/llm4agents/internal/store"
)

// CallReason names why a credit-paid call was refused before its upstream. It is
// the error code a client sees; the gateway maps each to an HTTP status in
// one table. Every refusal holds nothing and charges nothing.
type CallReason string

// The reasons of Calls.Admit.
const (
	// InvalidKey: no key, or one unknown, revoked or expired.
	InvalidKey CallReason = "invalid_api_key"
	// ModelNotAllowed: the key's scope leaves the model out.
	ModelNotAllowed CallReason = "model_not_allowed"
	// RateLimited: past the key's calls or tokens per minute, until
	// RetryAfter.
	RateLimited CallReason = "rate_limited"
	// RateLimitTooSmall: the call needs more tokens than the key may use in
	// a minute, so it never fits.
	RateLimitTooSmall CallReason = "rate_limit_too_small"
	// MaxCostTooLarge: the call's maximum cost is more than one hold may
	// be (store.MaxAmount).
	MaxCostTooLarge CallReason = "max_cost_too_large"
	// InsufficientCredit: the balance or one of the key's caps cannot hold
	// the call's maximum cost; Shortfall has the numbers.
	InsufficientCredit CallReason = "insufficient_credit"
	// StoreUnavailable: the store could not answer; the call fails closed.
	StoreUnavailable CallReason = "store_unavailable"
)

// RefusalError is a refused credit-paid call. Message is for the buyer: what
// happened and what to do about it. It never carries the key's secret.
type RefusalError struct {
	Reason  CallReason
	Message string
	// RetryAfter is when a RateLimited key's minute ends.
	RetryAfter time.Duration
	// Shortfall is what refused an InsufficientCredit hold: which limit,
	// the call's maximum cost and what is available.
	Shortfall *store.InsufficientError
	Err       error
}

func (r *RefusalError) Error() string {
	if r.Err != nil {
		return fmt.Sprintf("credit call refused: %s: %s: %v", r.Reason, r.Message, r.Err)
	}
	return fmt.Sprintf("credit call refused: %s: %s", r.Reason, r.Message)
}

func (r *RefusalError) Unwrap() error { return r.Err }

// storeDown is the refusal of a call the store could not admit.
func storeDown(err error) *RefusalError {
	return &RefusalError{Reason: StoreUnavailable, Err: err,
		Message: "the credit store is unavailable; nothing was charged, retry later"}
}
