package paywall

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"math/big"

	"github.com/ethereum/go-ethereum/common"

	"github.com/llm4agents/llm4agents/x402"
	"github.com/llm4agents/llm4agents/x402/evm/exact"
	"github.com/llm4agents/llm4agents/x402/evm/upto"
)

// authorization is the signed payment a request presents, of whichever
// scheme its offer names: what the paywall reads of it itself, before and
// beside the facilitator (the claim key, the time window, the proof of
// control).
type authorization interface {
	payer() common.Address
	// claimKey is the authorization's on-chain identity (D4), the key of its
	// claim: one authorization, one claim, whichever request presents it.
	claimKey(network string, asset common.Address) string
	// window is when the chain takes the authorization: from after, and
	// strictly before before.
	window() (after, before *big.Int)
	// value is the most the authorization can pay: the amount of an exact
	// authorization, the permitted maximum of an upto one.
	value() *big.Int
	// proofHash identifies the authorization with its signature (D15): the
	// nonce of a settled authorization is public on chain, its signature is
	// not required to be.
	proofHash() string
	// reasons are the scheme's refusals of a window.
	reasons() windowReasons
}

// windowReasons are the reasons of the time-window refusals (D6), which each
// scheme names in its own words, and the names of the window's two ends in
// its payload, for the messages.
type windowReasons struct {
	after, before string
	// tooFar: valid for longer than the 402 allows (ours).
	tooFar x402.Reason
	// notYet: not valid yet.
	notYet x402.Reason
	// expiring: expired, or expiring before the request can be settled.
	expiring x402.Reason
}

// exactAuth is an EIP-3009 authorization (scheme exact).
type exactAuth struct{ p *exact.Payload }

var _ authorization = exactAuth{}

func (a exactAuth) payer() common.Address { return a.p.Authorization.From }

func (a exactAuth) claimKey(network string, asset common.Address) string {
	return exact.Key(network, asset, a.p.Authorization.From, a.p.Authorization.Nonce)
}

func (a exactAuth) window() (after, before *big.Int) {
	return a.p.Authorization.ValidAfter, a.p.Authorization.ValidBefore
}

func (a exactAuth) value() *big.Int { return a.p.Authorization.Value }

func (a exactAuth) proofHash() string { return hashJSON(a.p.JSON()) }

func (exactAuth) reasons() windowReasons {
	return windowReasons{
		after: "validAfter", before: "validBefore",
		tooFar:   x402.ReasonEVMValidBeforeTooFar,
		notYet:   x402.ReasonEVMValidAfter,
		expiring: x402.ReasonEVMValidBefore,
	}
}

// uptoAuth is a Permit2 witness transfer through the x402 upto proxy
// (scheme upto): at most its permitted amount, settled for the charge.
type uptoAuth struct{ p *upto.Payload }

var _ authorization = uptoAuth{}

func (a uptoAuth) payer() common.Address { return a.p.Authorization.From }

// claimKey: Permit2 keeps one nonce space per owner, whatever the token.
func (a uptoAuth) claimKey(network string, _ common.Address) string {
	return upto.Key(network, a.p.Authorization.From, a.p.Authorization.Nonce)
}

// window: Permit2 takes the permit while block.timestamp <= deadline; the
// deadline stands for the window's end, one second early.
func (a uptoAuth) window() (after, before *big.Int) {
	return a.p.Authorization.Witness.ValidAfter, a.p.Authorization.Deadline
}

func (a uptoAuth) value() *big.Int { return a.p.Authorization.Permitted.Amount }

func (a uptoAuth) proofHash() string { return hashJSON(a.p.JSON()) }

func (uptoAuth) reasons() windowReasons {
	return windowReasons{
		after: "witness.validAfter", before: "deadline",
		tooFar:   x402.ReasonUptoDeadlineTooFar,
		notYet:   x402.ReasonPermit2NotYetValid,
		expiring: x402.ReasonPermit2DeadlineExpired,
	}
}

// hashJSON is the hex SHA-256 of v's JSON encoding.
func hashJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return "" // unreachable: the wire types hold strings only
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// parseAuthorization reads the payload of a payment for offer's scheme.
func parseAuthorization(offer x402.PaymentRequirements, raw json.RawMessage) (authorization, error) {
	switch offer.Scheme {
	case exact.Scheme:
		p, err := exact.ParsePayload(raw)
		if err != nil {
			return nil, err
		}
		return exactAuth{p}, nil
	case upto.Scheme:
		p, err := upto.ParsePayload(raw)
		if err != nil {
			return nil, err
		}
		return uptoAuth{p}, nil
	}
	return nil, errUnknownScheme
}

// spent reports whether a facilitator's reason says the authorization was
// used on chain already: exact's nonce_already_used, or Permit2's
// permit2_invalid_nonce for an upto permit.
func spent(r x402.Reason) bool {
	return r == x402.ReasonEVMNonceAlreadyUsed || r == x402.ReasonPermit2InvalidNonce
}

// isUptoKey reports whether a claim key is an upto permit's (upto.Key).
func isUptoKey(key string) bool {
	_, _, _, err := upto.ParseKey(key)
	return err == nil
}
