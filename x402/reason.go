package x402

import "fmt"

// Reason is a machine-readable verify or settle failure code, as carried in
// invalidReason and errorReason. The constants are the strings the official
// facilitators emit; ParseReason also accepts the spec's spellings. Kinds are
// append-only.
type Reason string

// Reasons shared by every scheme (x402 v2 spec, github.com/x402-foundation/x402
// specs/x402-specification-v2.md).
const (
	ReasonInsufficientFunds       Reason = "insufficient_funds"
	ReasonInvalidNetwork          Reason = "invalid_network"
	ReasonInvalidPayload          Reason = "invalid_payload"
	ReasonInvalidRequirements     Reason = "invalid_payment_requirements"
	ReasonInvalidScheme           Reason = "invalid_scheme"
	ReasonUnsupportedScheme       Reason = "unsupported_scheme"
	ReasonInvalidVersion          Reason = "invalid_x402_version"
	ReasonInvalidTransactionState Reason = "invalid_transaction_state"
	ReasonUnexpectedVerifyError   Reason = "unexpected_verify_error"
	ReasonUnexpectedSettleError   Reason = "unexpected_settle_error"
	ReasonUnsupportedPayloadType  Reason = "unsupported_payload_type"
	ReasonSettlementPending       Reason = "settlement_pending"
)

// Reasons of the EVM exact scheme, as the official TS 2.27 and Go 2.11
// facilitators spell them.
const (
	ReasonEVMScheme                 Reason = "invalid_exact_evm_scheme"
	ReasonEVMNetworkMismatch        Reason = "invalid_exact_evm_network_mismatch"
	ReasonEVMMissingDomain          Reason = "invalid_exact_evm_missing_eip712_domain"
	ReasonEVMRecipientMismatch      Reason = "invalid_exact_evm_recipient_mismatch"
	ReasonEVMSignature              Reason = "invalid_exact_evm_signature"
	ReasonEVMValidBefore            Reason = "invalid_exact_evm_payload_authorization_valid_before"
	ReasonEVMValidAfter             Reason = "invalid_exact_evm_payload_authorization_valid_after"
	ReasonEVMValueMismatch          Reason = "invalid_exact_evm_payload_authorization_value_mismatch"
	ReasonEVMUndeployedSmartWallet  Reason = "invalid_exact_evm_payload_undeployed_smart_wallet"
	ReasonEVMTransactionFailed      Reason = "invalid_exact_evm_transaction_failed"
	ReasonEVMTransferEventMismatch  Reason = "invalid_exact_evm_transfer_event_mismatch"
	ReasonEVMTokenNameMismatch      Reason = "invalid_exact_evm_token_name_mismatch"
	ReasonEVMTokenVersionMismatch   Reason = "invalid_exact_evm_token_version_mismatch"
	ReasonEVMEIP3009NotSupported    Reason = "invalid_exact_evm_eip3009_not_supported"
	ReasonEVMNonceAlreadyUsed       Reason = "invalid_exact_evm_nonce_already_used"
	ReasonEVMInsufficientBalance    Reason = "invalid_exact_evm_insufficient_balance"
	ReasonEVMSimulationFailed       Reason = "invalid_exact_evm_transaction_simulation_failed"
	ReasonEVMFailedToParseSignature Reason = "invalid_exact_evm_failed_to_parse_signature"
	ReasonEVMPayload                Reason = "invalid_exact_evm_payload"
	ReasonEVMMissingSignature       Reason = "invalid_exact_evm_payload_missing_signature"
	ReasonAssetNotDeployed          Reason = "asset_not_deployed_contract"
	ReasonEIP6492FactoryNotAllowed  Reason = "eip6492_factory_not_allowed"
)

// Reasons of Permit2 payments, shared by the exact (Permit2 variant) and upto
// schemes, as the official TS 2.27 and Go 2.11 facilitators spell them.
const (
	ReasonPermit2Spender             Reason = "invalid_permit2_spender"
	ReasonPermit2RecipientMismatch   Reason = "invalid_permit2_recipient_mismatch"
	ReasonPermit2DeadlineExpired     Reason = "permit2_deadline_expired"
	ReasonPermit2NotYetValid         Reason = "permit2_not_yet_valid"
	ReasonPermit2AmountMismatch      Reason = "permit2_amount_mismatch"
	ReasonPermit2TokenMismatch       Reason = "permit2_token_mismatch"
	ReasonPermit2Signature           Reason = "invalid_permit2_signature"
	ReasonPermit2AllowanceRequired   Reason = "permit2_allowance_required"
	ReasonPermit2SimulationFailed    Reason = "permit2_simulation_failed"
	ReasonPermit2InsufficientBalance Reason = "permit2_insufficient_balance"
	ReasonPermit2ProxyNotDeployed    Reason = "permit2_proxy_not_deployed"
	ReasonPermit2InvalidAmount       Reason = "permit2_invalid_amount"
	ReasonPermit2InvalidDestination  Reason = "permit2_invalid_destination"
	ReasonPermit2InvalidOwner        Reason = "permit2_invalid_owner"
	ReasonPermit2PaymentTooEarly     Reason = "permit2_payment_too_early"
	ReasonPermit2InvalidNonce        Reason = "permit2_invalid_nonce"
	ReasonPermit2612AmountMismatch   Reason = "permit2_2612_amount_mismatch"
)

// Reasons of the EVM upto scheme, as the official TS 2.27 facilitator spells
// them.
const (
	ReasonUptoScheme                  Reason = "invalid_upto_evm_scheme"
	ReasonUptoNetworkMismatch         Reason = "invalid_upto_evm_network_mismatch"
	ReasonUptoTransactionFailed       Reason = "invalid_upto_evm_transaction_failed"
	ReasonUptoSettlementExceedsAmount Reason = "invalid_upto_evm_payload_settlement_exceeds_amount"
	ReasonUptoAmountExceedsPermitted  Reason = "upto_amount_exceeds_permitted"
	ReasonUptoUnauthorizedFacilitator Reason = "upto_unauthorized_facilitator"
	ReasonUptoFacilitatorMismatch     Reason = "upto_facilitator_mismatch"
)

// Reasons of our own, for checks no official facilitator makes. Each is documented
// in docs/REASONS.md.
const (
	// ReasonAcceptedMismatch: payload.accepted disagrees with the requirements on
	// scheme, network, amount, asset, payTo, maxTimeoutSeconds or extra.
	ReasonAcceptedMismatch Reason = "invalid_exact_evm_accepted_mismatch"
	// ReasonEVMValidBeforeTooFar: validBefore is later than now + maxTimeoutSeconds
	// + 30 s, so the payment outlives what the 402 promised.
	ReasonEVMValidBeforeTooFar Reason = "invalid_exact_evm_payload_authorization_valid_before_too_far"
	// ReasonEVMAssetNotSupported: the facilitator is not configured for this token.
	ReasonEVMAssetNotSupported Reason = "invalid_exact_evm_asset_not_supported"
	// ReasonEVMCounterfactualWallet: an ERC-6492 wrapper for a wallet that is not
	// deployed yet; refused for now.
	ReasonEVMCounterfactualWallet Reason = "invalid_exact_evm_counterfactual_wallet_not_supported"
	// ReasonUptoAcceptedMismatch: as ReasonAcceptedMismatch, for an upto payment.
	ReasonUptoAcceptedMismatch Reason = "invalid_upto_evm_accepted_mismatch"
	// ReasonUptoDeadlineTooFar: the permit's deadline is later than now +
	// maxTimeoutSeconds + 30 s, so the permit outlives what the 402 promised.
	ReasonUptoDeadlineTooFar Reason = "invalid_upto_evm_permit2_deadline_too_far"
)

// reasonAliases maps the spec's and legacy spellings to what the official
// facilitators emit, so input in either form compares equal.
var reasonAliases = map[Reason]Reason{
	"invalid_exact_evm_payload_signature":           ReasonEVMSignature,
	"invalid_exact_evm_payload_recipient_mismatch":  ReasonEVMRecipientMismatch,
	"invalid_exact_evm_payload_authorization_value": ReasonEVMValueMismatch,
	"invalid_exact_evm_authorization_value":         ReasonEVMValueMismatch,
	"invalid_exact_evm_signature_format":            ReasonEVMFailedToParseSignature,
	"invalid_exact_evm_failed_to_verify_signature":  ReasonEVMSignature,
	"payment_expired":                               ReasonEVMValidBefore,
}

// ParseReason returns the canonical form of a reason received on the wire.
// Unknown reasons are kept as they are: new kinds appear in newer peers.
func ParseReason(s string) Reason {
	r := Reason(s)
	if canon, ok := reasonAliases[r]; ok {
		return canon
	}
	return r
}

// UnmarshalText canonicalizes a reason as it is decoded.
func (r *Reason) UnmarshalText(b []byte) error {
	*r = ParseReason(string(b))
	return nil
}

// VerifyError is a payment that failed verification for a protocol reason. It is
// not an infrastructure error: a facilitator answers it with HTTP 200 and
// isValid:false.
type VerifyError struct {
	Reason  Reason
	Payer   string
	Message string
}

func (e *VerifyError) Error() string {
	if e.Message == "" {
		return fmt.Sprintf("payment invalid: %s", e.Reason)
	}
	return fmt.Sprintf("payment invalid: %s: %s", e.Reason, e.Message)
}

// Response converts the error into the /verify answer.
func (e *VerifyError) Response() *VerifyResponse {
	return &VerifyResponse{IsValid: false, InvalidReason: e.Reason, InvalidMessage: e.Message, Payer: e.Payer}
}
