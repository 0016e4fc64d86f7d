package upto

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"strings"

	"github.com/ethereum/go-ethereum/common"

	"github.com/llm4agents/llm4agents/x402/evm/exact"
)

// Scheme is the scheme name this package implements.
const Scheme = "upto"

// TokenPermissionsJSON is the wire form of Permit2's TokenPermissions.
type TokenPermissionsJSON struct {
	Token  string `json:"token"`
	Amount string `json:"amount"`
}

// WitnessJSON is the wire form of the upto witness.
type WitnessJSON struct {
	To          string `json:"to"`
	Facilitator string `json:"facilitator"`
	ValidAfter  string `json:"validAfter"`
}

// AuthorizationJSON is the wire form of payload.permit2Authorization: addresses
// as hex, integers (the nonce too) as decimal strings.
type AuthorizationJSON struct {
	From      string               `json:"from"`
	Permitted TokenPermissionsJSON `json:"permitted"`
	Spender   string               `json:"spender"`
	Nonce     string               `json:"nonce"`
	Deadline  string               `json:"deadline"`
	Witness   WitnessJSON          `json:"witness"`
}

// PayloadJSON is the wire form of PaymentPayload.payload for upto.
type PayloadJSON struct {
	Signature     string            `json:"signature"`
	Authorization AuthorizationJSON `json:"permit2Authorization"`
}

// TokenPermissions is the token and maximum amount a permit allows.
type TokenPermissions struct {
	Token  common.Address
	Amount *big.Int
}

// Witness is the data the payer binds into the permit beside Permit2's own
// fields: who is paid, which facilitator may settle, and from when.
type Witness struct {
	To          common.Address
	Facilitator common.Address
	ValidAfter  *big.Int
}

// Authorization is a parsed PermitWitnessTransferFrom message, with the payer
// (from) that signed it. Its Nonce is a Permit2 nonce: any uint256, consumed as
// one bit of the payer's nonce bitmap.
type Authorization struct {
	From      common.Address
	Permitted TokenPermissions
	Spender   common.Address
	Nonce     *big.Int
	Deadline  *big.Int
	Witness   Witness
}

// JSON returns the wire form, with checksummed addresses and a decimal nonce as
// the official client sends them.
func (a *Authorization) JSON() AuthorizationJSON {
	return AuthorizationJSON{
		From:      a.From.Hex(),
		Permitted: TokenPermissionsJSON{Token: a.Permitted.Token.Hex(), Amount: a.Permitted.Amount.String()},
		Spender:   a.Spender.Hex(),
		Nonce:     a.Nonce.String(),
		Deadline:  a.Deadline.String(),
		Witness: WitnessJSON{
			To:          a.Witness.To.Hex(),
			Facilitator: a.Witness.Facilitator.Hex(),
			ValidAfter:  a.Witness.ValidAfter.String(),
		},
	}
}

// Payload is a parsed upto payment payload.
type Payload struct {
	Authorization Authorization
	Signature     []byte
}

// JSON returns the wire form of the payload.
func (p *Payload) JSON() PayloadJSON {
	return PayloadJSON{Signature: "0x" + hex.EncodeToString(p.Signature), Authorization: p.Authorization.JSON()}
}

// maxSignatureBytes bounds a signature. EOA signatures are 65 bytes; EIP-1271
// wallets' are longer but a few KiB is plenty.
const maxSignatureBytes = 8 << 10

var (
	errNotNonce  = errors.New("nonce is neither a decimal uint256 nor 0x-prefixed hex of at most 32 bytes")
	errSignature = errors.New("signature is not 0x-prefixed hex of at most 8 KiB")
)

// ParsePayload parses PaymentPayload.payload. Keys must be spelled exactly (Go's
// decoder alone would accept "Signature" for "signature", which the official
// facilitator would not read); unknown and duplicate keys are refused, every
// key is required, and every leaf must be a string. An empty signature string
// parses (to nil) so that verification can name the fault.
func ParsePayload(raw json.RawMessage) (*Payload, error) {
	w, err := scanPayload(raw)
	if err != nil {
		return nil, err
	}
	return w.Parse()
}

// Parse converts the wire form into typed values, refusing anything malformed.
func (w *PayloadJSON) Parse() (*Payload, error) {
	a, err := w.Authorization.Parse()
	if err != nil {
		return nil, err
	}
	sig, err := parseSignature(w.Signature)
	if err != nil {
		return nil, fmt.Errorf("signature: %w", err)
	}
	return &Payload{Authorization: *a, Signature: sig}, nil
}

// Parse converts the wire authorization into typed values.
func (w *AuthorizationJSON) Parse() (*Authorization, error) {
	var a Authorization
	var err error
	addrs := []struct {
		name string
		in   string
		out  *common.Address
	}{
		{"from", w.From, &a.From},
		{"permitted.token", w.Permitted.Token, &a.Permitted.Token},
		{"spender", w.Spender, &a.Spender},
		{"witness.to", w.Witness.To, &a.Witness.To},
		{"witness.facilitator", w.Witness.Facilitator, &a.Witness.Facilitator},
	}
	for _, f := range addrs {
		if *f.out, err = exact.ParseAddress(f.in); err != nil {
			return nil, fmt.Errorf("permit2Authorization.%s: %w", f.name, err)
		}
	}
	ints := []struct {
		name string
		in   string
		out  **big.Int
	}{
		{"permitted.amount", w.Permitted.Amount, &a.Permitted.Amount},
		{"deadline", w.Deadline, &a.Deadline},
		{"witness.validAfter", w.Witness.ValidAfter, &a.Witness.ValidAfter},
	}
	for _, f := range ints {
		if *f.out, err = exact.ParseUint256(f.in); err != nil {
			return nil, fmt.Errorf("permit2Authorization.%s: %w", f.name, err)
		}
	}
	if a.Nonce, err = ParseNonce(w.Nonce); err != nil {
		return nil, fmt.Errorf("permit2Authorization.nonce: %w", err)
	}
	return &a, nil
}

// ParseNonce parses a Permit2 nonce. The official implementations send a
// canonical decimal string; the scheme's specification shows 0x-prefixed hex,
// which is accepted too when it has 1 to 64 hex digits (at most 32 bytes, so
// always within uint256). JSON writes it back in decimal.
func ParseNonce(s string) (*big.Int, error) {
	if h, ok := strings.CutPrefix(s, "0x"); ok {
		if len(h) == 0 || len(h) > 64 {
			return nil, errNotNonce
		}
		for i := 0; i < len(h); i++ {
			if !isHexDigit(h[i]) {
				return nil, errNotNonce
			}
		}
		n, _ := new(big.Int).SetString(h, 16)
		return n, nil
	}
	n, err := exact.ParseUint256(s)
	if err != nil {
		return nil, errNotNonce
	}
	return n, nil
}

func isHexDigit(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// parseSignature decodes 0x-prefixed hex; "" and "0x" are an empty (missing)
// signature, which verification reports as such.
func parseSignature(s string) ([]byte, error) {
	if s == "" || s == "0x" {
		return nil, nil
	}
	if !strings.HasPrefix(s, "0x") || len(s)%2 != 0 || len(s) > 2+2*maxSignatureBytes {
		return nil, errSignature
	}
	b, err := hex.DecodeString(s[2:])
	if err != nil {
		return nil, errSignature
	}
	return b, nil
}

// Extra is the scheme's PaymentRequirements.extra. FacilitatorAddress is the one
// address allowed to settle; the resource server copies it from the
// facilitator's /supported answer. Name and Version describe the token's
// EIP-2612 domain and are used only by gas-sponsoring extensions (not
// implemented here); they are kept so that they round-trip.
type Extra struct {
	FacilitatorAddress common.Address
	Name               string
	Version            string
}

// ParseExtra reads requirements.extra. facilitatorAddress is required, as the
// official client refuses to sign without it; name and version are optional
// strings. Keys are matched exactly (encoding/json alone would take
// "FacilitatorAddress" too); other keys (a payment flow, extension hints) are
// ignored, since servers may add them.
func ParseExtra(raw json.RawMessage) (Extra, error) {
	var e Extra
	if len(raw) == 0 {
		return e, errors.New("extra is missing")
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return e, fmt.Errorf("extra: %w", err)
	}
	str := func(key string) (string, bool, error) {
		v, ok := m[key]
		if !ok {
			return "", false, nil
		}
		var s string
		if err := json.Unmarshal(v, &s); err != nil || string(v) == "null" {
			return "", true, fmt.Errorf("extra.%s is not a string", key)
		}
		return s, true, nil
	}
	fa, ok, err := str("facilitatorAddress")
	if err != nil {
		return e, err
	}
	if !ok {
		return e, errors.New("extra.facilitatorAddress is required")
	}
	if e.FacilitatorAddress, err = exact.ParseAddress(fa); err != nil {
		return e, fmt.Errorf("extra.facilitatorAddress: %w", err)
	}
	if e.Name, _, err = str("name"); err != nil {
		return e, err
	}
	if e.Version, _, err = str("version"); err != nil {
		return e, err
	}
	return e, nil
}
