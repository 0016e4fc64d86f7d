package x402

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
)

// The payment-identifier extension (x402 v2 spec, github.com/x402-foundation/x402
// specs/extensions/payment_identifier.md): the server declares it in
// PaymentRequired.extensions, and the client echoes the declaration in
// PaymentPayload.extensions with its id added to info, so that retries of one
// purchase carry one idempotency key.
const (
	// ExtensionPaymentID is the extension's key in both extensions maps.
	ExtensionPaymentID = "payment-identifier"
	// PaymentIDPrefix starts every id NewPaymentID makes, as in the TS generator.
	PaymentIDPrefix = "pay_"
	// MinPaymentIDLen and MaxPaymentIDLen bound an id, in characters (all ASCII).
	MinPaymentIDLen = 16
	MaxPaymentIDLen = 128
)

// PaymentIDError is a payment-identifier fault a server answers with 400. Its
// text is the official TS package's, so clients of either see one message.
type PaymentIDError string

func (e PaymentIDError) Error() string { return string(e) }

// Payment-identifier faults. Compare with errors.Is; a malformed extension wraps
// ErrPaymentIDMalformed with the detail.
const (
	// ErrPaymentIDFormat: an id outside 16-128 characters of [A-Za-z0-9_-].
	ErrPaymentIDFormat PaymentIDError = "Invalid payment ID format. ID must be 16-128 characters and contain only alphanumeric characters, hyphens, and underscores."
	// ErrPaymentIDRequired: the route requires an id and the payment carries none.
	ErrPaymentIDRequired PaymentIDError = "Server requires a payment identifier but none was provided"
	// ErrPaymentIDMalformed: the echoed extension is not of the declared shape
	// (an object whose info is an object with a boolean required and, if
	// present, a string id).
	ErrPaymentIDMalformed PaymentIDError = "payment-identifier extension is malformed"
)

// paymentIDSchema is the JSON Schema the TS and Go SDKs declare for info
// (the extension's schema, with the SDKs' id pattern).
const paymentIDSchema = `{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object",` +
	`"properties":{"required":{"type":"boolean"},"id":{"type":"string","minLength":16,"maxLength":128,"pattern":"^[a-zA-Z0-9_-]+$"}},` +
	`"required":["required"]}`

// NewPaymentID returns a fresh id: PaymentIDPrefix and 32 lowercase hex digits
// of crypto/rand, the shape of the TS generator's "pay_" + UUIDv4 without
// hyphens, with all 128 bits random.
func NewPaymentID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (it crashes instead)
	return PaymentIDPrefix + hex.EncodeToString(b[:])
}

// ValidPaymentID returns nil for an id of 16-128 characters of [A-Za-z0-9_-],
// and ErrPaymentIDFormat otherwise.
func ValidPaymentID(id string) error {
	if len(id) < MinPaymentIDLen || len(id) > MaxPaymentIDLen {
		return ErrPaymentIDFormat
	}
	for i := 0; i < len(id); i++ {
		switch c := id[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '_', c == '-':
		default:
			return ErrPaymentIDFormat
		}
	}
	return nil
}

// PaymentIDDeclaration returns the value a server puts at
// extensions["payment-identifier"] of its 402: info.required and the schema of
// info, as the official declarePaymentIdentifierExtension does.
func PaymentIDDeclaration(required bool) json.RawMessage {
	return json.RawMessage(fmt.Sprintf(`{"info":{"required":%t},"schema":%s}`, required, paymentIDSchema))
}

// paymentIDExt is the extension's shape; info keeps every field the server sent,
// so an echo only adds to it.
type paymentIDExt struct {
	info     map[string]json.RawMessage
	required bool
	id       *string // nil when info has no id
}

// parsePaymentIDExt reads an extension value: an object whose info is an
// object with a boolean required and, if present, a string id. It does not
// check the id's format.
func parsePaymentIDExt(raw json.RawMessage) (*paymentIDExt, error) {
	var ext map[string]json.RawMessage
	if !isJSONObject(raw) || json.Unmarshal(raw, &ext) != nil {
		return nil, fmt.Errorf("%w: not a JSON object", ErrPaymentIDMalformed)
	}
	var info map[string]json.RawMessage
	if rawInfo, ok := ext["info"]; !ok || !isJSONObject(rawInfo) || json.Unmarshal(rawInfo, &info) != nil {
		return nil, fmt.Errorf("%w: info is not an object", ErrPaymentIDMalformed)
	}
	p := &paymentIDExt{info: info}
	if r, ok := info["required"]; !ok || json.Unmarshal(r, &p.required) != nil || !isJSONBool(r) {
		return nil, fmt.Errorf("%w: info.required is not a boolean", ErrPaymentIDMalformed)
	}
	if rawID, ok := info["id"]; ok {
		var id string
		if !isJSONString(rawID) || json.Unmarshal(rawID, &id) != nil {
			return nil, fmt.Errorf("%w: info.id is not a string", ErrPaymentIDMalformed)
		}
		p.id = &id
	}
	return p, nil
}

// PaymentIDDeclared reports whether the extensions of a 402 declare the
// payment-identifier extension and whether they require an id. Like the
// official clients, a declaration of the wrong shape counts as none.
func PaymentIDDeclared(extensions map[string]json.RawMessage) (declared, required bool) {
	raw, ok := extensions[ExtensionPaymentID]
	if !ok {
		return false, false
	}
	p, err := parsePaymentIDExt(raw)
	if err != nil {
		return false, false
	}
	return true, p.required
}

// AppendPaymentID returns a copy of a 402's extensions, ready for
// PaymentPayload.extensions, with id added to the payment-identifier
// declaration's info; the server's fields are kept, since a client may only add
// to them. When the 402 does not declare the extension the copy is returned
// without an id, as the official appendPaymentIdentifierToExtensions does. An
// invalid id is ErrPaymentIDFormat. The input map is not modified.
func AppendPaymentID(extensions map[string]json.RawMessage, id string) (map[string]json.RawMessage, error) {
	if err := ValidPaymentID(id); err != nil {
		return nil, err
	}
	out := make(map[string]json.RawMessage, len(extensions))
	maps.Copy(out, extensions)
	raw, ok := extensions[ExtensionPaymentID]
	if !ok {
		return out, nil
	}
	p, err := parsePaymentIDExt(raw)
	if err != nil {
		return out, nil //nolint:nilerr // a malformed declaration is no declaration (TS isPaymentIdentifierExtension)
	}
	var ext map[string]json.RawMessage
	if err := json.Unmarshal(raw, &ext); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrPaymentIDMalformed, err) // unreachable: parsed above
	}
	idJSON, err := Marshal(id)
	if err != nil {
		return nil, fmt.Errorf("encode payment id: %w", err)
	}
	p.info["id"] = idJSON
	if ext["info"], err = Marshal(p.info); err != nil {
		return nil, fmt.Errorf("encode payment-identifier info: %w", err)
	}
	if out[ExtensionPaymentID], err = Marshal(ext); err != nil {
		return nil, fmt.Errorf("encode payment-identifier extension: %w", err)
	}
	return out, nil
}

// PaymentIDFromPayload returns the payment-identifier id a payment carries in
// its extensions, or "" when it carries none. A payment without an id is
// ErrPaymentIDRequired when required is set; an extension of the wrong shape
// wraps ErrPaymentIDMalformed; an id of the wrong format is ErrPaymentIDFormat.
// Each is a 400, and nothing is charged.
func PaymentIDFromPayload(p *PaymentPayload, required bool) (string, error) {
	absent := func() (string, error) {
		if required {
			return "", ErrPaymentIDRequired
		}
		return "", nil
	}
	ext := bytes.TrimSpace(p.Extensions)
	if len(ext) == 0 || string(ext) == "null" {
		return absent()
	}
	var all map[string]json.RawMessage
	if !isJSONObject(ext) || json.Unmarshal(ext, &all) != nil {
		return "", fmt.Errorf("%w: extensions is not a JSON object", ErrPaymentIDMalformed)
	}
	raw, ok := all[ExtensionPaymentID]
	if !ok {
		return absent()
	}
	e, err := parsePaymentIDExt(raw)
	if err != nil {
		return "", err
	}
	if e.id == nil {
		return absent()
	}
	if err := ValidPaymentID(*e.id); err != nil {
		return "", err
	}
	return *e.id, nil
}

func isJSONBool(b json.RawMessage) bool {
	b = bytes.TrimSpace(b)
	return string(b) == "true" || string(b) == "false"
}

func isJSONString(b json.RawMessage) bool {
	b = bytes.TrimSpace(b)
	return len(b) >= 2 && b[0] == '"'
}
