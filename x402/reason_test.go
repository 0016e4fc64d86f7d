package x402_test

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/llm4agents/llm4agents/x402"
)

func TestParseReason(t *testing.T) {
	tests := []struct {
		in   string
		want x402.Reason
	}{
		// Spec (x402 v2 error reasons) and legacy spellings -> what the facilitators emit.
		{"invalid_exact_evm_payload_signature", x402.ReasonEVMSignature},
		{"invalid_exact_evm_payload_recipient_mismatch", x402.ReasonEVMRecipientMismatch},
		{"invalid_exact_evm_payload_authorization_value", x402.ReasonEVMValueMismatch},
		{"invalid_exact_evm_authorization_value", x402.ReasonEVMValueMismatch},
		{"invalid_exact_evm_signature_format", x402.ReasonEVMFailedToParseSignature},
		{"invalid_exact_evm_failed_to_verify_signature", x402.ReasonEVMSignature},
		{"payment_expired", x402.ReasonEVMValidBefore},
		// Implementation spellings are already canonical.
		{"invalid_exact_evm_signature", x402.ReasonEVMSignature},
		{"invalid_exact_evm_recipient_mismatch", x402.ReasonEVMRecipientMismatch},
		{"invalid_exact_evm_payload_authorization_value_mismatch", x402.ReasonEVMValueMismatch},
		{"invalid_exact_evm_nonce_already_used", x402.ReasonEVMNonceAlreadyUsed},
		{"insufficient_funds", x402.ReasonInsufficientFunds},
		{"settlement_pending", x402.ReasonSettlementPending},
		{"invalid_exact_evm_accepted_mismatch", x402.ReasonAcceptedMismatch},
		// Unknown reasons, from newer peers or other schemes, are kept as they are.
		{"permit2_allowance_required", "permit2_allowance_required"},
		{"invalid_exact_solana_payload_mint_mismatch", "invalid_exact_solana_payload_mint_mismatch"},
		{"Invalid_Exact_EVM_Payload_Signature", "Invalid_Exact_EVM_Payload_Signature"},
		{"", ""},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got := x402.ParseReason(tc.in)
			if got != tc.want {
				t.Errorf("ParseReason(%q) = %q, want %q", tc.in, got, tc.want)
			}
			if again := x402.ParseReason(string(got)); again != got {
				t.Errorf("ParseReason is not idempotent: %q -> %q -> %q", tc.in, got, again)
			}
		})
	}
}

func TestReasonUnmarshalCanonicalizes(t *testing.T) {
	t.Run("Reason", func(t *testing.T) {
		var r x402.Reason
		if err := json.Unmarshal([]byte(`"invalid_exact_evm_payload_signature"`), &r); err != nil {
			t.Fatal(err)
		}
		if r != x402.ReasonEVMSignature {
			t.Errorf("Reason = %q, want %q", r, x402.ReasonEVMSignature)
		}
		// It is sent as it is held.
		if got := string(mustMarshal(t, r)); got != `"invalid_exact_evm_signature"` {
			t.Errorf("Marshal = %s", got)
		}
	})
	t.Run("VerifyResponse", func(t *testing.T) {
		var v x402.VerifyResponse
		if err := json.Unmarshal([]byte(`{"isValid":false,"invalidReason":"invalid_exact_evm_payload_recipient_mismatch","payer":"0x1"}`), &v); err != nil {
			t.Fatal(err)
		}
		want := x402.VerifyResponse{InvalidReason: x402.ReasonEVMRecipientMismatch, Payer: "0x1"}
		if diff := cmp.Diff(want, v); diff != "" {
			t.Errorf("VerifyResponse (-want +got):\n%s", diff)
		}
	})
	t.Run("PAYMENT-RESPONSE", func(t *testing.T) {
		s, err := x402.DecodeSettleResponse(b64(`{"success":false,"errorReason":"payment_expired","transaction":"","network":"eip155:1337"}`))
		if err != nil {
			t.Fatal(err)
		}
		if s.ErrorReason != x402.ReasonEVMValidBefore {
			t.Errorf("ErrorReason = %q, want %q", s.ErrorReason, x402.ReasonEVMValidBefore)
		}
	})
	t.Run("null leaves it empty", func(t *testing.T) {
		var v x402.VerifyResponse
		if err := json.Unmarshal([]byte(`{"isValid":false,"invalidReason":null}`), &v); err != nil {
			t.Fatal(err)
		}
		if v.InvalidReason != "" {
			t.Errorf("InvalidReason = %q, want empty", v.InvalidReason)
		}
	})
}

func TestVerifyError(t *testing.T) {
	tests := []struct {
		name string
		err  *x402.VerifyError
		msg  string
		resp x402.VerifyResponse
	}{
		{"reason only", &x402.VerifyError{Reason: x402.ReasonInsufficientFunds, Payer: "0x1"},
			"payment invalid: insufficient_funds",
			x402.VerifyResponse{InvalidReason: x402.ReasonInsufficientFunds, Payer: "0x1"}},
		{"with message", &x402.VerifyError{Reason: x402.ReasonAcceptedMismatch, Message: "amount differs"},
			"payment invalid: invalid_exact_evm_accepted_mismatch: amount differs",
			x402.VerifyResponse{InvalidReason: x402.ReasonAcceptedMismatch, InvalidMessage: "amount differs"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.err.Error(); got != tc.msg {
				t.Errorf("Error() = %q, want %q", got, tc.msg)
			}
			if diff := cmp.Diff(&tc.resp, tc.err.Response()); diff != "" {
				t.Errorf("Response() (-want +got):\n%s", diff)
			}
		})
	}
}

// TestPermit2AndUptoReasons pins the strings of the Permit2 and upto reasons
// to those npm @x402/evm 2.27.0 emits, and our own upto reasons to what
// docs/REASONS.md lists; all are canonical as they are.
func TestPermit2AndUptoReasons(t *testing.T) {
	tests := []struct {
		got  x402.Reason
		want string
	}{
		{x402.ReasonPermit2Spender, "invalid_permit2_spender"},
		{x402.ReasonPermit2RecipientMismatch, "invalid_permit2_recipient_mismatch"},
		{x402.ReasonPermit2DeadlineExpired, "permit2_deadline_expired"},
		{x402.ReasonPermit2NotYetValid, "permit2_not_yet_valid"},
		{x402.ReasonPermit2AmountMismatch, "permit2_amount_mismatch"},
		{x402.ReasonPermit2TokenMismatch, "permit2_token_mismatch"},
		{x402.ReasonPermit2Signature, "invalid_permit2_signature"},
		{x402.ReasonPermit2AllowanceRequired, "permit2_allowance_required"},
		{x402.ReasonPermit2SimulationFailed, "permit2_simulation_failed"},
		{x402.ReasonPermit2InsufficientBalance, "permit2_insufficient_balance"},
		{x402.ReasonPermit2ProxyNotDeployed, "permit2_proxy_not_deployed"},
		{x402.ReasonPermit2InvalidAmount, "permit2_invalid_amount"},
		{x402.ReasonPermit2InvalidDestination, "permit2_invalid_destination"},
		{x402.ReasonPermit2InvalidOwner, "permit2_invalid_owner"},
		{x402.ReasonPermit2PaymentTooEarly, "permit2_payment_too_early"},
		{x402.ReasonPermit2InvalidNonce, "permit2_invalid_nonce"},
		{x402.ReasonPermit2612AmountMismatch, "permit2_2612_amount_mismatch"},
		{x402.ReasonUptoScheme, "invalid_upto_evm_scheme"},
		{x402.ReasonUptoNetworkMismatch, "invalid_upto_evm_network_mismatch"},
		{x402.ReasonUptoTransactionFailed, "invalid_upto_evm_transaction_failed"},
		{x402.ReasonUptoSettlementExceedsAmount, "invalid_upto_evm_payload_settlement_exceeds_amount"},
		{x402.ReasonUptoAmountExceedsPermitted, "upto_amount_exceeds_permitted"},
		{x402.ReasonUptoUnauthorizedFacilitator, "upto_unauthorized_facilitator"},
		{x402.ReasonUptoFacilitatorMismatch, "upto_facilitator_mismatch"},
		{x402.ReasonUptoAcceptedMismatch, "invalid_upto_evm_accepted_mismatch"},
		{x402.ReasonUptoDeadlineTooFar, "invalid_upto_evm_permit2_deadline_too_far"},
	}
	seen := make(map[x402.Reason]bool)
	for _, tc := range tests {
		if string(tc.got) != tc.want {
			t.Errorf("reason %q, want %q", tc.got, tc.want)
		}
		if seen[tc.got] {
			t.Errorf("reason %q listed twice", tc.got)
		}
		seen[tc.got] = true
		if got := x402.ParseReason(tc.want); got != tc.got {
			t.Errorf("ParseReason(%q) = %q", tc.want, got)
		}
	}
}
