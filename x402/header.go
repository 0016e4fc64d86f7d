package x402

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// HTTP header names of the protocol. Go canonicalizes header keys, so these work for
// both reading and writing.
const (
	HeaderPaymentRequired   = "Payment-Required"
	HeaderPaymentSignature  = "Payment-Signature"
	HeaderPaymentResponse   = "Payment-Response"
	HeaderSignInWithX       = "Sign-In-With-X"
	HeaderLegacyPayment     = "X-Payment"
	HeaderExtensionResponse = "Extension-Responses"
)

// MaxHeaderBytes caps the encoded size of a protocol header value. A real
// PAYMENT-SIGNATURE is about 1.5 KiB; the cap stops a hostile client from making us
// decode megabytes before any check.
const MaxHeaderBytes = 16 << 10

// Errors of the header codec. Callers branch on them with errors.Is to answer 400.
var (
	ErrHeaderEmpty     = errors.New("x402 header is empty")
	ErrHeaderTooLarge  = fmt.Errorf("x402 header exceeds %d bytes", MaxHeaderBytes)
	ErrHeaderBase64URL = errors.New("x402 header uses base64url; standard base64 with padding is required")
	ErrHeaderBase64    = errors.New("x402 header is not valid standard base64")
	ErrHeaderJSON      = errors.New("x402 header is not a JSON object")
	ErrVersion         = errors.New("unsupported x402Version; only 2 is accepted")
	ErrMissingAccepted = errors.New("payment payload has no valid accepted requirement")
	ErrMissingPayload  = errors.New("payment payload has no scheme payload")
)

// Marshal encodes v as JSON the way the official JavaScript packages do: no HTML
// escaping and no trailing newline. Use it wherever bytes are hashed or compared.
func Marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte{'\n'}), nil
}

// EncodeHeader returns the header value for v: standard padded base64 of its JSON.
func EncodeHeader(v any) (string, error) {
	b, err := Marshal(v)
	if err != nil {
		return "", fmt.Errorf("encode x402 header: %w", err)
	}
	return base64.StdEncoding.EncodeToString(b), nil
}

// DecodeHeader decodes a header value into v. It refuses oversize values, base64url,
// unpadded or otherwise invalid base64, anything but a JSON object, and member
// names that match a field of v only case-insensitively (see Unmarshal).
func DecodeHeader(value string, v any) error {
	b, err := decodeHeaderBytes(value)
	if err != nil {
		return err
	}
	if err := Unmarshal(b, v); err != nil {
		return fmt.Errorf("%w: %w", ErrHeaderJSON, err)
	}
	return nil
}

func decodeHeaderBytes(value string) ([]byte, error) {
	value = strings.TrimSpace(value)
	switch {
	case value == "":
		return nil, ErrHeaderEmpty
	case len(value) > MaxHeaderBytes:
		return nil, ErrHeaderTooLarge
	case strings.ContainsAny(value, "-_"):
		return nil, ErrHeaderBase64URL
	case strings.ContainsAny(value, "\r\n"):
		// encoding/base64 skips line breaks; the TS decoder refuses them.
		return nil, ErrHeaderBase64
	}
	b, err := base64.StdEncoding.Strict().DecodeString(value)
	if err != nil {
		return nil, ErrHeaderBase64
	}
	b = bytes.TrimSpace(b)
	if len(b) == 0 || b[0] != '{' {
		return nil, ErrHeaderJSON
	}
	return b, nil
}

// versionProbe reads only x402Version, so a payload of another version is refused
// as such rather than as a shape error.
type versionProbe struct {
	X402Version json.RawMessage `json:"x402Version"`
}

func checkVersion(b []byte) error {
	var p versionProbe
	if err := json.Unmarshal(b, &p); err != nil {
		return fmt.Errorf("%w: %w", ErrHeaderJSON, err)
	}
	if string(p.X402Version) != "2" {
		return ErrVersion
	}
	return nil
}

// DecodePaymentPayload decodes a PAYMENT-SIGNATURE header value and checks the
// protocol version and that accepted and payload are present. It does not look at
// the scheme payload: the scheme does.
func DecodePaymentPayload(value string) (*PaymentPayload, error) {
	b, err := decodeHeaderBytes(value)
	if err != nil {
		return nil, err
	}
	return ParsePaymentPayload(b)
}

// ParsePaymentPayload is DecodePaymentPayload for JSON that is already decoded
// from base64, such as the paymentPayload of a facilitator request.
func ParsePaymentPayload(b []byte) (*PaymentPayload, error) {
	var p PaymentPayload
	if err := checkNames(b, paymentPayloadTyp); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrHeaderJSON, err)
	}
	if err := json.Unmarshal(b, &p); err != nil || p.X402Version != Version {
		// Decode once in the common case; only a refusal pays for the second
		// look that tells a wrong version from a malformed payload.
		if verr := checkVersion(b); verr != nil {
			return nil, verr
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrHeaderJSON, err)
		}
	}
	if err := p.validate(); err != nil {
		return nil, err
	}
	return &p, nil
}

func (p *PaymentPayload) validate() error {
	if p.X402Version != Version {
		return ErrVersion
	}
	if !isJSONObject(p.Accepted) {
		return ErrMissingAccepted
	}
	if !isJSONObject(p.Payload) {
		return ErrMissingPayload
	}
	return nil
}

// DecodePaymentRequired decodes a PAYMENT-REQUIRED header value. Like every
// decoder here it refuses member names that differ from the protocol's only in
// case (see Unmarshal): the official decoder is case-sensitive.
func DecodePaymentRequired(value string) (*PaymentRequired, error) {
	b, err := decodeHeaderBytes(value)
	if err != nil {
		return nil, err
	}
	if err := checkNames(b, paymentRequiredTyp); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrHeaderJSON, err)
	}
	if err := checkVersion(b); err != nil {
		return nil, err
	}
	var p PaymentRequired
	if err := json.Unmarshal(b, &p); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrHeaderJSON, err)
	}
	if len(p.Accepts) == 0 {
		return nil, fmt.Errorf("%w: no accepts", ErrHeaderJSON)
	}
	return &p, nil
}

// DecodeSettleResponse decodes a PAYMENT-RESPONSE header value. Like the official
// clients it requires success, transaction and network.
func DecodeSettleResponse(value string) (*SettleResponse, error) {
	b, err := decodeHeaderBytes(value)
	if err != nil {
		return nil, err
	}
	if err := checkNames(b, settleResponseTyp); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrHeaderJSON, err)
	}
	var probe struct {
		Success     *bool   `json:"success"`
		Transaction *string `json:"transaction"`
		Network     *string `json:"network"`
	}
	if err := json.Unmarshal(b, &probe); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrHeaderJSON, err)
	}
	if probe.Success == nil || probe.Transaction == nil || probe.Network == nil {
		return nil, fmt.Errorf("%w: settle response lacks success, transaction or network", ErrHeaderJSON)
	}
	var r SettleResponse
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrHeaderJSON, err)
	}
	return &r, nil
}

func isJSONObject(b json.RawMessage) bool {
	b = bytes.TrimSpace(b)
	return len(b) >= 2 && b[0] == '{'
}
