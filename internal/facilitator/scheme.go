package facilitator

import (
	"context"
	"fmt"
	"slices"

	"github.com/ethereum/go-ethereum/common"

	"github.com/llm4agents/llm4agents/x402"
	"github.com/llm4agents/llm4agents/x402/evm/exact"
	"github.com/llm4agents/llm4agents/x402/evm/upto"
)

// scheme is what the facilitator needs from the verification of one x402
// scheme. Everything after verification (claims, sends, waits, verdicts) is
// the scheme-free machinery of this package, driven through payment.
type scheme interface {
	// supported is the kind the scheme adds to GET /supported.
	supported(network string, signer common.Address) x402.SupportedKind
	// route refuses requirements of the scheme this facilitator does not
	// serve, past the scheme, network and asset that Facilitator.route checks.
	route(req x402.PaymentRequirements, a Asset) *x402.VerifyError
	// check runs the verification steps that need no node. A protocol
	// failure is a *x402.VerifyError. recovered is handed to verifyForSettle.
	check(p *x402.PaymentPayload, req x402.PaymentRequirements) (pm payment, recovered bool, err error)
	// verify runs every verification step, node included.
	verify(ctx context.Context, p *x402.PaymentPayload, req x402.PaymentRequirements) (payment, error)
	// verifySettle is verify for a settle call's requirements (upto: whose
	// amount is the charge, not the maximum).
	verifySettle(ctx context.Context, p *x402.PaymentPayload, req x402.PaymentRequirements) (payment, error)
	// verifyForSettle runs the node's steps for a payment check passed.
	verifyForSettle(ctx context.Context, pm payment, recovered bool) error
	// simulate runs the settlement call against the latest state and
	// explains a failure as a *x402.VerifyError.
	simulate(ctx context.Context, pm payment) error
	// revertReason names the reason of a settlement the node refused at
	// estimation with err, a revert.
	revertReason(pm payment, err error) *x402.VerifyError
	// isRevert tells a revert at estimation (a verdict) from other send
	// errors (none).
	isRevert(err error) bool
}

// exactScheme verifies EIP-3009 payments (scheme exact).
type exactScheme struct{ v *exact.Verifier }

var _ scheme = exactScheme{}

func (exactScheme) supported(network string, _ common.Address) x402.SupportedKind {
	return x402.SupportedKind{X402Version: x402.Version, Scheme: exact.Scheme, Network: network}
}

// route: the configured EIP-712 domain is the token's: requirements naming
// another one would sign over a domain the token rejects. Refuse them without
// asking the node, with the reason the official facilitator reaches by
// simulation. An extra that does not parse is check's to refuse, with the
// official reason.
func (exactScheme) route(req x402.PaymentRequirements, a Asset) *x402.VerifyError {
	if extra, err := exact.ParseExtra(req.Extra); err == nil {
		if extra.Name != a.Name {
			return &x402.VerifyError{Reason: x402.ReasonEVMTokenNameMismatch, Message: fmt.Sprintf("token name is %q, extra.name is %q", a.Name, extra.Name)}
		}
		if extra.Version != a.Version {
			return &x402.VerifyError{Reason: x402.ReasonEVMTokenVersionMismatch, Message: fmt.Sprintf("token version is %q, extra.version is %q", a.Version, extra.Version)}
		}
	}
	return nil
}

func (s exactScheme) check(p *x402.PaymentPayload, req x402.PaymentRequirements) (payment, bool, error) {
	vd, recovered, err := s.v.Check(p, req)
	if err != nil {
		return nil, false, err
	}
	return exactPayment{vd}, recovered, nil
}

func (s exactScheme) verify(ctx context.Context, p *x402.PaymentPayload, req x402.PaymentRequirements) (payment, error) {
	vd, err := s.v.Verify(ctx, p, req)
	if err != nil {
		return nil, err
	}
	return exactPayment{vd}, nil
}

func (s exactScheme) verifySettle(ctx context.Context, p *x402.PaymentPayload, req x402.PaymentRequirements) (payment, error) {
	return s.verify(ctx, p, req)
}

func (s exactScheme) verifyForSettle(ctx context.Context, pm payment, recovered bool) error {
	return s.v.VerifyForSettle(ctx, pm.(exactPayment).vd, recovered)
}

func (s exactScheme) simulate(ctx context.Context, pm payment) error {
	return s.v.Simulate(ctx, pm.(exactPayment).vd)
}

func (exactScheme) revertReason(pm payment, err error) *x402.VerifyError {
	msg := exact.RevertReasonOf(err)
	return &x402.VerifyError{Reason: exact.ReasonForRevert(msg), Payer: pm.Payer().Hex(), Message: msg}
}

func (exactScheme) isRevert(err error) bool { return exact.IsRevert(err) }

// uptoScheme verifies Permit2 witness transfers through the x402 upto proxy
// (scheme upto). In a settle call the requirements' amount is the charge the
// resource server chose, at most the permit's amount (upto.CheckSettle).
type uptoScheme struct{ v *upto.Verifier }

var _ scheme = uptoScheme{}

// supported names the signer in extra.facilitatorAddress: the proxy lets only
// the permit's witness.facilitator settle it, so a resource server copies it
// into its requirements and the buyer signs it into the witness.
func (uptoScheme) supported(network string, signer common.Address) x402.SupportedKind {
	extra, _ := x402.Marshal(map[string]string{"facilitatorAddress": signer.Hex()})
	return x402.SupportedKind{X402Version: x402.Version, Scheme: upto.Scheme, Network: network, Extra: extra}
}

// route refuses requirements whose extra names another facilitator: a
// payment signed for them could only be settled by that one.
// An extra that does not parse is check's to refuse, with the official
// reason.
func (s uptoScheme) route(req x402.PaymentRequirements, _ Asset) *x402.VerifyError {
	if extra, err := upto.ParseExtra(req.Extra); err == nil && !slices.Contains(s.v.Facilitators, extra.FacilitatorAddress) {
		return &x402.VerifyError{Reason: x402.ReasonUptoFacilitatorMismatch,
			Message: fmt.Sprintf("extra.facilitatorAddress %s is not this facilitator", extra.FacilitatorAddress.Hex())}
	}
	return nil
}

func (s uptoScheme) check(p *x402.PaymentPayload, req x402.PaymentRequirements) (payment, bool, error) {
	vd, recovered, err := s.v.CheckSettle(p, req)
	if err != nil {
		return nil, false, err
	}
	return uptoPayment{vd}, recovered, nil
}

func (s uptoScheme) verify(ctx context.Context, p *x402.PaymentPayload, req x402.PaymentRequirements) (payment, error) {
	vd, err := s.v.Verify(ctx, p, req)
	if err != nil {
		return nil, err
	}
	return uptoPayment{vd}, nil
}

func (s uptoScheme) verifySettle(ctx context.Context, p *x402.PaymentPayload, req x402.PaymentRequirements) (payment, error) {
	vd, err := s.v.VerifySettle(ctx, p, req)
	if err != nil {
		return nil, err
	}
	return uptoPayment{vd}, nil
}

func (s uptoScheme) verifyForSettle(ctx context.Context, pm payment, recovered bool) error {
	return s.v.VerifyForSettle(ctx, pm.(uptoPayment).vd, recovered)
}

func (s uptoScheme) simulate(ctx context.Context, pm payment) error {
	return s.v.Simulate(ctx, pm.(uptoPayment).vd)
}

func (uptoScheme) revertReason(pm payment, err error) *x402.VerifyError {
	data := upto.RevertData(err)
	msg := upto.RevertName(data)
	if msg == "" {
		msg = "settle reverted"
	}
	return &x402.VerifyError{Reason: upto.ReasonForRevert(data), Payer: pm.Payer().Hex(), Message: msg}
}

func (uptoScheme) isRevert(err error) bool { return upto.RevertData(err) != nil }
