package exact

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"strings"

	"github.com/ethereum/go-ethereum/common"
)

// Scheme is the scheme name this package implements.
const Scheme = "exact"

// AuthorizationJSON is the wire form of an EIP-3009 authorization: addresses as hex,
// integers as decimal strings, the nonce as 0x-prefixed 32-byte hex.
type AuthorizationJSON struct {
	From        string `json:"from"`
	To          string `json:"to"`
	Value       string `json:"value"`
	ValidAfter  string `json:"validAfter"`
	ValidBefore string `json:"validBefore"`
	Nonce       string `json:"nonce"`
}

// PayloadJSON is the wire form of PaymentPayload.payload for EIP-3009.
type PayloadJSON struct {
	Signature     string            `json:"signature"`
	Authorization AuthorizationJSON `json:"authorization"`
}

// Authorization is a parsed EIP-3009 TransferWithAuthorization message.
type Authorization struct {
	From        common.Address
	To          common.Address
	Value       *big.Int
	ValidAfter  *big.Int
	ValidBefore *big.Int
	Nonce       common.Hash
}

// JSON returns the wire form, with checksummed addresses and lowercase nonce hex as
// the official client sends them.
func (a *Authorization) JSON() AuthorizationJSON {
	return AuthorizationJSON{
		From:        a.From.Hex(),
		To:          a.To.Hex(),
		Value:       a.Value.String(),
		ValidAfter:  a.ValidAfter.String(),
		ValidBefore: a.ValidBefore.String(),
		Nonce:       a.Nonce.Hex(),
	}
}

// Payload is a parsed EIP-3009 payment payload.
type Payload struct {
	Authorization Authorization
	Signature     []byte
}

// JSON returns the wire form of the payload.
func (p *Payload) JSON() PayloadJSON {
	return PayloadJSON{Signature: "0x" + hex.EncodeToString(p.Signature), Authorization: p.Authorization.JSON()}
}

// maxSignatureBytes bounds a signature. EOA signatures are 65 bytes; EIP-1271 and
// ERC-6492 wrappers are longer but a few KiB is plenty.
const maxSignatureBytes = 8 << 10

var (
	errNotAddress = errors.New("not a 0x-prefixed 20-byte hex address")
	errChecksum   = errors.New("mixed-case address with a bad EIP-55 checksum")
	errNotUint    = errors.New("not a decimal uint256")
	errNotNonce   = errors.New("nonce is not 0x-prefixed 32-byte hex")
	errSignature  = errors.New("signature is not 0x-prefixed hex")

	maxUint256 = new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 256), big.NewInt(1))
)

// ParsePayload parses PaymentPayload.payload. Keys must be spelled exactly
// (Go's decoder alone would accept "Signature" for "signature", which the official
// facilitators would not read); unknown keys are refused, as are Permit2 payloads,
// which this package does not implement.
func ParsePayload(raw json.RawMessage) (*Payload, error) {
	return parsePayload(raw)
}

// Parse converts the wire form into typed values, refusing anything malformed.
func (w *PayloadJSON) Parse() (*Payload, error) {
	a, err := w.Authorization.Parse()
	if err != nil {
		return nil, err
	}
	sig, err := parseHexBytes(w.Signature)
	if err != nil {
		return nil, fmt.Errorf("signature: %w", err)
	}
	return &Payload{Authorization: *a, Signature: sig}, nil
}

// Parse converts the wire authorization into typed values.
func (w *AuthorizationJSON) Parse() (*Authorization, error) {
	var a Authorization
	var err error
	if a.From, err = ParseAddress(w.From); err != nil {
		return nil, fmt.Errorf("authorization.from: %w", err)
	}
	if a.To, err = ParseAddress(w.To); err != nil {
		return nil, fmt.Errorf("authorization.to: %w", err)
	}
	if a.Value, err = ParseUint256(w.Value); err != nil {
		return nil, fmt.Errorf("authorization.value: %w", err)
	}
	if a.ValidAfter, err = ParseUint256(w.ValidAfter); err != nil {
		return nil, fmt.Errorf("authorization.validAfter: %w", err)
	}
	if a.ValidBefore, err = ParseUint256(w.ValidBefore); err != nil {
		return nil, fmt.Errorf("authorization.validBefore: %w", err)
	}
	if !strings.HasPrefix(w.Nonce, "0x") || len(w.Nonce) != 66 {
		return nil, fmt.Errorf("authorization.nonce: %w", errNotNonce)
	}
	if _, err := hex.Decode(a.Nonce[:], []byte(w.Nonce[2:])); err != nil {
		return nil, fmt.Errorf("authorization.nonce: %w", errNotNonce)
	}
	return &a, nil
}

// ParseAddress parses a 0x-prefixed hex address. All-lowercase and all-uppercase
// are accepted; a mixed-case address must carry a valid EIP-55 checksum, because
// the official facilitator treats a bad checksum as malformed.
func ParseAddress(s string) (common.Address, error) {
	if len(s) != 42 || (!strings.HasPrefix(s, "0x") && !strings.HasPrefix(s, "0X")) {
		return common.Address{}, errNotAddress
	}
	var a common.Address
	if _, err := hex.Decode(a[:], []byte(s[2:])); err != nil {
		return common.Address{}, errNotAddress
	}
	if body := s[2:]; mixedCase(body) && !checksumMatches(a, body) {
		return common.Address{}, errChecksum
	}
	return a, nil
}

// mixedCase reports whether hex digits contain both lower- and upper-case letters.
func mixedCase(hexDigits string) bool {
	var lower, upper bool
	for i := 0; i < len(hexDigits); i++ {
		switch c := hexDigits[i]; {
		case 'a' <= c && c <= 'f':
			lower = true
		case 'A' <= c && c <= 'F':
			upper = true
		}
	}
	return lower && upper
}

// checksumMatches reports whether body, the 40 hex digits of a, carries a's EIP-55
// checksum. It is a.Hex()[2:] == body without the allocations.
func checksumMatches(a common.Address, body string) bool {
	var lower [40]byte
	hex.Encode(lower[:], a[:])
	h := keccak256(lower[:])
	for i, c := range lower {
		nibble := h[i/2] >> 4
		if i%2 == 1 {
			nibble = h[i/2] & 0xf
		}
		if c > '9' && nibble > 7 {
			c -= 'a' - 'A'
		}
		if body[i] != c {
			return false
		}
	}
	return true
}

// ParseUint256 parses a canonical decimal string (no sign, no leading zeros) that
// fits in 256 bits.
func ParseUint256(s string) (*big.Int, error) { return parseDecimal(s) }

func parseUint256Bytes(b []byte) (*big.Int, error) { return parseDecimal(b) }

// parseDecimal does the work of ParseUint256 on a string or its bytes, without
// a regular expression and, for values below 10^19, without a string.
func parseDecimal[T string | []byte](s T) (*big.Int, error) {
	if len(s) == 0 || len(s) > 78 || (s[0] == '0' && len(s) > 1) {
		return nil, errNotUint
	}
	var small uint64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return nil, errNotUint
		}
		small = small*10 + uint64(c-'0')
	}
	if len(s) <= 19 {
		return new(big.Int).SetUint64(small), nil
	}
	n, ok := new(big.Int).SetString(string(s), 10)
	if !ok || n.Cmp(maxUint256) > 0 {
		return nil, errNotUint
	}
	return n, nil
}

// parseHexBytes decodes 0x-prefixed hex; "" is an empty (missing) signature,
// which verification reports as such.
func parseHexBytes(s string) ([]byte, error) {
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

// isDecimal reports whether s is a canonical decimal (digits, no leading zero).
func isDecimal(s string) bool {
	if s == "" || (s[0] == '0' && len(s) > 1) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// ChainID returns the chain id of a CAIP-2 `eip155:<id>` network.
func ChainID(network string) (*big.Int, error) {
	ref, ok := strings.CutPrefix(network, "eip155:")
	if !ok || len(ref) > 20 || ref == "0" || !isDecimal(ref) {
		return nil, fmt.Errorf("network %q is not eip155:<chain id>", network)
	}
	id, _ := new(big.Int).SetString(ref, 10)
	return id, nil
}

// Extra is the scheme's PaymentRequirements.extra: the token's EIP-712 domain.
type Extra struct {
	Name                string `json:"name"`
	Version             string `json:"version"`
	AssetTransferMethod string `json:"assetTransferMethod,omitempty"`
}

// ParseExtra reads the EIP-712 domain name and version from requirements.extra.
func ParseExtra(raw json.RawMessage) (Extra, error) {
	var e Extra
	if len(raw) == 0 {
		return e, errors.New("extra is missing")
	}
	if err := json.Unmarshal(raw, &e); err != nil {
		return e, fmt.Errorf("extra: %w", err)
	}
	if e.Name == "" || e.Version == "" {
		return e, errors.New("extra.name and extra.version are required")
	}
	if e.AssetTransferMethod != "" && e.AssetTransferMethod != "eip3009" {
		return e, fmt.Errorf("assetTransferMethod %q is not supported", e.AssetTransferMethod)
	}
	return e, nil
}
