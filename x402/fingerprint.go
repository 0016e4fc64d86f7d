package x402

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
)

// Fingerprint is the request fingerprint: the hex SHA-256 of the
// canonical JSON of {method, path, model, body}, where canonical means sorted
// keys, no insignificant whitespace, no HTML escaping, and numbers as written.
// The buyer keys its journal with it and the seller records it with each
// payment, so both compute it here and can never disagree.
//
// A body that is one valid JSON value enters as that value, so bodies that
// differ only in whitespace or key order have one fingerprint. Any other body
// (empty, form data, JSON with trailing bytes) enters as "rawSha256", the hex
// SHA-256 of its bytes, under its own key so it never collides with a JSON
// body (see FingerprintRaw).
func Fingerprint(method, path, model string, body []byte) string {
	if v, ok := canonicalBody(body); ok {
		return hashDoc(map[string]any{"method": method, "path": path, "model": model, "body": v})
	}
	return FingerprintRaw(method, path, model, sha256.Sum256(body))
}

// FingerprintRaw is the Fingerprint of a body that is not taken as JSON, given
// the SHA-256 of its bytes: what Fingerprint computes for such a body, for a
// caller that hashes a body too large to hold as it streams.
func FingerprintRaw(method, path, model string, bodySHA256 [sha256.Size]byte) string {
	return hashDoc(map[string]any{"method": method, "path": path, "model": model, "rawSha256": hex.EncodeToString(bodySHA256[:])})
}

func hashDoc(doc map[string]any) string {
	b, err := Marshal(doc)
	if err != nil {
		// Unreachable: the document holds strings, json.Number and what
		// encoding/json decoded. Stay deterministic anyway.
		b = fmt.Appendf(nil, "%v", doc)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// canonicalBody decodes a body that is exactly one JSON value, keeping numbers
// as written.
func canonicalBody(body []byte) (any, bool) {
	if !json.Valid(body) {
		return nil, false
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, false
	}
	return v, true
}
