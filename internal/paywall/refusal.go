package paywall

import (
	"encoding/json"
	"fmt"
	"math/big"

	"github.com/llm4agents/llm4agents/x402"
)

// Reason names why a payment was refused. It is the error code a client sees
// (docs/REASONS.md): the official x402 reason where one exists, else ours.
type Reason string

// Refusals without an offer. Each has one HTTP status in the gateway's table.
const (
	// InvalidPayment: PAYMENT-SIGNATURE or its payload cannot be decoded.
	InvalidPayment Reason = "invalid_payment"
	// InvalidPaymentID: the payment-identifier extension is missing where
	// required, or malformed.
	InvalidPaymentID Reason = "invalid_payment_identifier"
	// OperationInFlight: another request holds this authorization's claim or
	// record; retry with the same payment (D29).
	OperationInFlight Reason = "operation_in_flight"
	// SettlementPending: the settlement was broadcast, or its answer lost, and
	// the chain does not show it yet; retry with the same payment.
	SettlementPending Reason = "settlement_pending"
	// AlreadyUsed: the authorization is spent on chain; sign a new one.
	AlreadyUsed Reason = "payment_already_used"
	// IdempotencyConflict: the payment identifier or authorization was used
	// for a different request.
	IdempotencyConflict Reason = "idempotency_conflict"
	// RequestMismatch: the payment's staged answer is another request's.
	RequestMismatch Reason = "payment_request_mismatch"
	// ReplayBudgetSpent: the recorded answer was replayed as often as allowed.
	ReplayBudgetSpent Reason = "replay_budget_spent"
	// StoreUnavailable: the store did not answer; nothing was charged.
	StoreUnavailable Reason = "store_unavailable"
	// RecoveryUnavailable: a paid answer exists but cannot be read back now.
	RecoveryUnavailable Reason = "recovery_unavailable"
	// FacilitatorUnavailable: verify did not answer; nothing was charged.
	FacilitatorUnavailable Reason = "facilitator_unavailable"
	// Internal: a fault of ours before anything was charged.
	Internal Reason = "internal_error"
)

// The reason texts of a 402 offer (PaymentRequired.error) that the official
// server sends too.
const (
	textRequired = "Payment required"
	textNoMatch  = "No matching payment requirements"
)

// Reasons of a 402 that offers payment: the offer is in RefusalError.Required.
// A refusal by verify or by the windows of D6 carries the facilitator's
// reason (x402.Reason*) instead.
const (
	// PaymentRequired: no payment was presented.
	PaymentRequired Reason = "payment_required"
	// V1NotAccepted: x402 v1's X-PAYMENT was presented.
	V1NotAccepted Reason = "x402_v1_not_accepted"
	// Mismatch: the payment was made for another offer (D7).
	Mismatch Reason = Reason(x402.ReasonAcceptedMismatch)
	// UptoMismatch: an upto payment was made for another offer (D7).
	UptoMismatch Reason = Reason(x402.ReasonUptoAcceptedMismatch)
	// NotProven: the payment does not prove control of the identifier whose
	// answer it asks for (D15).
	NotProven Reason = "payment_not_proven"
)

// SettlementFailed is the reason of a failed settlement whose facilitator
// named none.
const SettlementFailed Reason = "settlement_failed"

// RefusalError is a payment refused: nothing of it reaches the upstream, and
// nothing is charged unless Settlement says so.
type RefusalError struct {
	Reason Reason
	// Message says what happened, for the client. For a 402 offer it is the
	// offer's own reason text (PaymentRequired.error): the gateway says the
	// price around it.
	Message string
	// Required, when set, is the 402 offer to send (PAYMENT-REQUIRED).
	Required *x402.PaymentRequired
	// Amount and What are the offer's price and what it buys ("request",
	// "top-up"), for the message of a 402.
	Amount *big.Int
	What   string
	// Settlement, when set, is the failed settlement's answer
	// (PAYMENT-RESPONSE on a 402 without an offer).
	Settlement *x402.SettleResponse
	// Err is the detail for the log, never sent.
	Err error
}

func (r *RefusalError) Error() string {
	if r.Err != nil {
		return fmt.Sprintf("payment refused: %s: %s: %v", r.Reason, r.Message, r.Err)
	}
	return fmt.Sprintf("payment refused: %s: %s", r.Reason, r.Message)
}

func (r *RefusalError) Unwrap() error { return r.Err }

func refusal(reason Reason, msg string) *RefusalError {
	return &RefusalError{Reason: reason, Message: msg}
}

// alreadyUsed refuses an authorization the chain shows spent.
func alreadyUsed() error {
	return refusal(AlreadyUsed, "this payment authorization was already spent on an earlier request; sign a new one")
}

// operationInFlight refuses a copy of a payment whose record another request
// holds.
func operationInFlight() error {
	return refusal(OperationInFlight, "a request with this payment identifier is still running; retry later to receive its answer")
}

// settlementUnresolved is the refusal of a settlement whose outcome the chain
// does not show yet: the answer is kept with the claim, and a retry with the
// same payment receives it once the settlement is seen paid.
func settlementUnresolved() error {
	return refusal(SettlementPending, "this payment's settlement is not confirmed on chain yet; retry the same request with the same payment to receive the answer")
}

func recoveryPending() error {
	return refusal(SettlementPending, "this request's settlement is still pending on chain; retry later")
}

func idempotencyConflict() error {
	return refusal(IdempotencyConflict, "this payment identifier or authorization was used for a different request; use a new one for a new request")
}

// replayBudgetSpent refuses a copy of a payment whose recorded answer was
// replayed as many times as allowed. Nothing is charged and nothing is served.
func replayBudgetSpent() error {
	return refusal(ReplayBudgetSpent, "the answer to this payment was already replayed as many times as allowed; nothing was charged")
}

func requestMismatch() error {
	return refusal(RequestMismatch, "this payment was made for a different request; its answer is kept for that request")
}

// storeDown is the refusal of a store that did not answer, counted.
func (p *Paywall) storeDown(err error) error {
	p.metrics.Payment("store_down")
	return &RefusalError{Reason: StoreUnavailable, Message: "the payment could not be looked up; nothing was charged", Err: err}
}

// recoveryFailed is the refusal when a paid answer could not be recovered now
// (the store or the chain failed): never a free answer, and the buyer is told
// to retry with the same payment.
func (p *Paywall) recoveryFailed(err error) error {
	p.metrics.Payment("store_down")
	return &RefusalError{Reason: RecoveryUnavailable, Err: err,
		Message: "the answer to this paid request could not be recovered right now; retry with the same payment"}
}

func facilitatorDown(err error) error {
	return &RefusalError{Reason: FacilitatorUnavailable, Err: err,
		Message: "the payment could not be verified right now; nothing was charged"}
}

// paymentIDError is the refusal of a payment-identifier fault; the text is the
// official TS package's.
func paymentIDError(err error) error {
	return refusal(InvalidPaymentID, err.Error()+"; nothing was charged")
}

// challenge is the 402 that asks for q's payment (D10), with the reason
// text of x402's PaymentRequired.error. Retries of one purchase carry one
// payment-identifier (D14): a request's offer declares it when answers are
// recorded; a top-up's never does (it keeps no record; its retry is the
// same PAYMENT-SIGNATURE).
func (p *Paywall) challenge(q *Quote, reason Reason, text string, detail error) error {
	pr := &x402.PaymentRequired{X402Version: x402.Version, Error: text, Resource: q.Resource, Accepts: q.accepts()}
	if p.recoveries != nil && q.What != WhatTopUp {
		pr.Extensions = map[string]json.RawMessage{x402.ExtensionPaymentID: x402.PaymentIDDeclaration(q.PaymentIDRequired)}
	}
	return &RefusalError{Reason: reason, Message: text, Required: pr, Amount: q.Amount, What: q.What, Err: detail}
}

// verifyChallenge is the 402 of a payment refused by a check that has an
// x402 reason (verify, the windows of D6).
func (p *Paywall) verifyChallenge(q *Quote, reason x402.Reason, detail error) error {
	return p.challenge(q, Reason(reason), string(reason), detail)
}

// settleRefusal is the 402 after a failed settlement: PAYMENT-RESPONSE and no
// PAYMENT-REQUIRED, as the official server answers (D10).
func settleRefusal(sr *x402.SettleResponse) error {
	reason := Reason(sr.ErrorReason)
	if reason == "" {
		reason = SettlementFailed
	}
	return &RefusalError{Reason: reason, Message: settleMessage(sr), Settlement: sr}
}

func settleMessage(sr *x402.SettleResponse) string {
	switch sr.ErrorReason {
	case x402.ReasonSettlementPending:
		return fmt.Sprintf("the payment was broadcast (%s) but is not confirmed yet; retry the same request with the same payment to receive the answer", sr.Transaction)
	case x402.ReasonEVMNonceAlreadyUsed, x402.ReasonPermit2InvalidNonce:
		return "this payment authorization was already spent; the answer is withheld"
	default:
		return fmt.Sprintf("the payment could not be settled (%s); the answer is withheld and nothing was charged", sr.ErrorReason)
	}
}
