package gateway

import (
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"testing"

	"github.com/llm4agents/llm4agents/internal/paywall"
	"github.com/llm4agents/llm4agents/x402"
)

// TestRefusalTable: each refusal of the paywall is answered with its own
// status and code, the retry headers of docs/REASONS.md, and the protocol
// header of its kind; a reason missing from the table is a 500, never a
// payment answer.
func TestRefusalTable(t *testing.T) {
	s := &Server{cfg: Config{Decimals: 6, AssetSymbol: "USDC"}}
	offer := &x402.PaymentRequired{X402Version: x402.Version, Error: "x",
		Accepts: []x402.PaymentRequirements{{Scheme: "exact", Network: "eip155:1", Amount: "10000"}}}
	settle := &x402.SettleResponse{ErrorReason: "invalid_exact_evm_transfer_event_mismatch", Network: "eip155:1"}
	for _, tc := range []struct {
		name       string
		rf         *paywall.RefusalError
		status     int
		retryAfter string
		noRetry    bool   // X-Should-Retry: false
		header     string // the protocol header it carries, "" for none
		message    string
	}{
		{"no payment", &paywall.RefusalError{Reason: paywall.PaymentRequired, Message: "Payment required", Required: offer, Amount: big.NewInt(10000), What: "request"},
			402, "", true, x402.HeaderPaymentRequired, "payment required: 0.01 USDC for this request"},
		{"mismatch", &paywall.RefusalError{Reason: paywall.Mismatch, Message: "No matching payment requirements", Required: offer, Amount: big.NewInt(10000), What: "top-up"},
			402, "", true, x402.HeaderPaymentRequired, "payment required: 0.01 USDC for this top-up (No matching payment requirements)"},
		{"settle failed", &paywall.RefusalError{Reason: "invalid_exact_evm_transfer_event_mismatch", Message: "m", Settlement: settle},
			402, "", true, x402.HeaderPaymentResponse, "m"},
		{"invalid payment", &paywall.RefusalError{Reason: paywall.InvalidPayment, Message: "m"}, 400, "", true, "", "m"},
		{"invalid id", &paywall.RefusalError{Reason: paywall.InvalidPaymentID, Message: "m"}, 400, "", true, "", "m"},
		{"in flight", &paywall.RefusalError{Reason: paywall.OperationInFlight, Message: "m"}, 409, "2", true, "", "m"},
		{"pending", &paywall.RefusalError{Reason: paywall.SettlementPending, Message: "m"}, 409, "5", true, "", "m"},
		{"already used", &paywall.RefusalError{Reason: paywall.AlreadyUsed, Message: "m"}, 409, "", true, "", "m"},
		{"conflict", &paywall.RefusalError{Reason: paywall.IdempotencyConflict, Message: "m"}, 409, "", true, "", "m"},
		{"request mismatch", &paywall.RefusalError{Reason: paywall.RequestMismatch, Message: "m"}, 409, "", true, "", "m"},
		{"budget", &paywall.RefusalError{Reason: paywall.ReplayBudgetSpent, Message: "m"}, 409, "", true, "", "m"},
		{"store", &paywall.RefusalError{Reason: paywall.StoreUnavailable, Message: "m"}, 503, "", false, "", "m"},
		{"recovery", &paywall.RefusalError{Reason: paywall.RecoveryUnavailable, Message: "m"}, 503, "2", true, "", "m"},
		{"facilitator", &paywall.RefusalError{Reason: paywall.FacilitatorUnavailable, Message: "m"}, 502, "", false, "", "m"},
		{"internal", &paywall.RefusalError{Reason: paywall.Internal, Message: "m"}, 500, "", false, "", "m"},
		{"unknown reason", &paywall.RefusalError{Reason: "no_such_reason", Message: "m"}, 500, "", false, "", "m"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Wrapped, as a handler may return it.
			ae := s.answerOf(fmt.Errorf("chat: %w", tc.rf))
			if ae.Status != tc.status || ae.Code != string(tc.rf.Reason) || ae.Message != tc.message {
				t.Fatalf("got %d %q %q, want %d %q %q", ae.Status, ae.Code, ae.Message, tc.status, tc.rf.Reason, tc.message)
			}
			if got := ae.Header.Get("Retry-After"); got != tc.retryAfter {
				t.Errorf("Retry-After %q, want %q", got, tc.retryAfter)
			}
			if got := ae.Header.Get("X-Should-Retry") == "false"; got != tc.noRetry {
				t.Errorf("X-Should-Retry: false is %t, want %t", got, tc.noRetry)
			}
			for _, h := range []string{x402.HeaderPaymentRequired, x402.HeaderPaymentResponse} {
				if got := ae.Header.Get(h) != ""; got != (h == tc.header) {
					t.Errorf("%s present %t, want %t", h, got, h == tc.header)
				}
			}
			if tc.status == http.StatusPaymentRequired && ae.Type != "payment_required" {
				t.Errorf("402 of type %q", ae.Type)
			}
		})
	}
}

// TestAnswerOfOtherErrors: an apiError is answered as it is; anything else is
// a 500 that says nothing of the cause.
func TestAnswerOfOtherErrors(t *testing.T) {
	s := &Server{}
	want := &apiError{Status: http.StatusTeapot, Code: "x", Message: "m"}
	if got := s.answerOf(fmt.Errorf("wrapped: %w", want)); got != want {
		t.Errorf("apiError answered as %+v", got)
	}
	got := s.answerOf(errors.New("secret detail"))
	if got.Status != http.StatusInternalServerError || got.Message != "internal error" {
		t.Errorf("plain error answered as %+v", got)
	}
}
