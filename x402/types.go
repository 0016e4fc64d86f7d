// Package x402 holds the x402 protocol version 2 wire types, the header codec and
// the typed reasons that resource servers, clients and facilitators exchange,
// and the pieces a buyer and a seller must compute alike: the request
// Fingerprint and the strict JSON check of signed or kept
// documents (CheckStrictJSON). The gateway's signed receipts are in
// x402/receipt.
//
// The package does no I/O and imports neither a database driver nor go-ethereum, so
// buyers can depend on it without inheriting the gateway's dependencies. Amounts are
// decimal strings of atomic units on the wire; scheme packages such as
// x402/evm/exact parse them once into exact integer types.
//
// Encoding follows the official npm packages (2.27.0) byte for byte where it
// matters: headers are standard padded base64 of UTF-8 JSON, HTML characters are not
// escaped, and the `accepted` requirement a client echoes is kept as raw JSON so that
// an empty `"extra":{}` survives a round trip.
package x402

import (
	"encoding/json"
	"fmt"
)

// Version is the only protocol version this package speaks.
const Version = 2

// ResourceInfo describes the protected resource a PaymentRequired is about.
type ResourceInfo struct {
	URL         string   `json:"url"`
	Description string   `json:"description,omitempty"`
	MimeType    string   `json:"mimeType,omitempty"`
	ServiceName string   `json:"serviceName,omitempty"`
	Tags        []string `json:"tags,omitempty"`
	IconURL     string   `json:"iconUrl,omitempty"`
}

// PaymentRequirements is one way to pay, as offered in PaymentRequired.accepts and
// as sent to a facilitator. Extra stays raw JSON: the official server compares it as
// a subset of the client's echo, and re-encoding it through a map would drop an
// empty object.
type PaymentRequirements struct {
	Scheme            string          `json:"scheme"`
	Network           string          `json:"network"`
	Amount            string          `json:"amount"`
	Asset             string          `json:"asset"`
	PayTo             string          `json:"payTo"`
	MaxTimeoutSeconds int64           `json:"maxTimeoutSeconds"`
	Extra             json.RawMessage `json:"extra,omitempty"`
}

// PaymentRequired is the 402 challenge carried, base64-encoded, in the
// PAYMENT-REQUIRED header.
type PaymentRequired struct {
	X402Version int                        `json:"x402Version"`
	Error       string                     `json:"error,omitempty"`
	Resource    *ResourceInfo              `json:"resource"`
	Accepts     []PaymentRequirements      `json:"accepts"`
	Extensions  map[string]json.RawMessage `json:"extensions,omitempty"`

	// rawAccepts holds accepts[i] exactly as received, for a client that must echo
	// the chosen requirement verbatim. It is nil for a value built in memory.
	rawAccepts []json.RawMessage
}

// UnmarshalJSON decodes a PaymentRequired and remembers each accepts entry as it
// was sent.
func (p *PaymentRequired) UnmarshalJSON(b []byte) error {
	type plain PaymentRequired
	var wire struct {
		plain
		Accepts []json.RawMessage `json:"accepts"`
	}
	if err := json.Unmarshal(b, &wire); err != nil {
		return err
	}
	*p = PaymentRequired(wire.plain)
	p.Accepts = make([]PaymentRequirements, len(wire.Accepts))
	for i, raw := range wire.Accepts {
		if err := json.Unmarshal(raw, &p.Accepts[i]); err != nil {
			return fmt.Errorf("accepts[%d]: %w", i, err)
		}
	}
	p.rawAccepts = wire.Accepts
	return nil
}

// RawAccepted returns accepts[i] as it was received, or its canonical encoding when
// the value was built in memory. A client echoes this as PaymentPayload.Accepted.
func (p *PaymentRequired) RawAccepted(i int) (json.RawMessage, error) {
	if i < 0 || i >= len(p.Accepts) {
		return nil, fmt.Errorf("accepts index %d out of range [0, %d)", i, len(p.Accepts))
	}
	if i < len(p.rawAccepts) {
		return p.rawAccepts[i], nil
	}
	return Marshal(p.Accepts[i])
}

// PaymentPayload is what a client sends, base64-encoded, in the PAYMENT-SIGNATURE
// header. Accepted, Payload and Extensions stay raw: Accepted must echo the offer
// exactly, and Payload is decoded by the scheme that owns it.
type PaymentPayload struct {
	X402Version int             `json:"x402Version"`
	Resource    *ResourceInfo   `json:"resource,omitempty"`
	Accepted    json.RawMessage `json:"accepted"`
	Payload     json.RawMessage `json:"payload"`
	Extensions  json.RawMessage `json:"extensions,omitempty"`
}

// AcceptedRequirements decodes the requirement the client says it paid for.
func (p *PaymentPayload) AcceptedRequirements() (PaymentRequirements, error) {
	var r PaymentRequirements
	if len(p.Accepted) == 0 {
		return r, ErrMissingAccepted
	}
	if err := json.Unmarshal(p.Accepted, &r); err != nil {
		return r, ErrMissingAccepted
	}
	return r, nil
}

// VerifyResponse is the body of a facilitator's /verify answer.
type VerifyResponse struct {
	IsValid        bool            `json:"isValid"`
	InvalidReason  Reason          `json:"invalidReason,omitempty"`
	InvalidMessage string          `json:"invalidMessage,omitempty"`
	Payer          string          `json:"payer,omitempty"`
	Extra          json.RawMessage `json:"extra,omitempty"`
	Extensions     json.RawMessage `json:"extensions,omitempty"`
}

// SettleResponse is the body of a facilitator's /settle answer and the content of
// the PAYMENT-RESPONSE header. Transaction and Network are always sent, even on
// failure, because the official clients reject an answer without them.
type SettleResponse struct {
	Success      bool            `json:"success"`
	ErrorReason  Reason          `json:"errorReason,omitempty"`
	ErrorMessage string          `json:"errorMessage,omitempty"`
	Payer        string          `json:"payer,omitempty"`
	Transaction  string          `json:"transaction"`
	Network      string          `json:"network"`
	Amount       string          `json:"amount,omitempty"`
	Extensions   json.RawMessage `json:"extensions,omitempty"`
	Extra        json.RawMessage `json:"extra,omitempty"`
}

// SupportedKind is one (version, scheme, network) a facilitator serves. Network is
// always concrete: the official resource server looks kinds up by exact string.
type SupportedKind struct {
	X402Version int             `json:"x402Version"`
	Scheme      string          `json:"scheme"`
	Network     string          `json:"network"`
	Extra       json.RawMessage `json:"extra,omitempty"`
}

// SupportedResponse is the body of a facilitator's /supported answer. Extensions and
// Signers are always present (as [] and {} when empty).
type SupportedResponse struct {
	Kinds      []SupportedKind     `json:"kinds"`
	Extensions []string            `json:"extensions"`
	Signers    map[string][]string `json:"signers"`
}

// MarshalJSON sends nil Kinds, Extensions and Signers as [] and {}, never null: a
// peer that checks the field types must see an array and an object.
func (s SupportedResponse) MarshalJSON() ([]byte, error) {
	type plain SupportedResponse
	p := plain(s)
	if p.Kinds == nil {
		p.Kinds = []SupportedKind{}
	}
	if p.Extensions == nil {
		p.Extensions = []string{}
	}
	if p.Signers == nil {
		p.Signers = map[string][]string{}
	}
	return Marshal(p)
}

// FacilitatorRequest is the body of /verify and /settle.
type FacilitatorRequest struct {
	X402Version         int                 `json:"x402Version"`
	PaymentPayload      PaymentPayload      `json:"paymentPayload"`
	PaymentRequirements PaymentRequirements `json:"paymentRequirements"`
}
