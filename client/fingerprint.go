package client

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/ethereum/go-ethereum/common"

	"github.com/llm4agents/llm4agents/x402"
)

// HeaderIdempotencyKey names the request header that, when present, keys the
// journal entry of a call instead of the request's Fingerprint (DECISIONS D26).
const HeaderIdempotencyKey = "Idempotency-Key"

// Fingerprint is DECISIONS D14's request fingerprint: the hex SHA-256 of the
// canonical JSON of {method, path, model, body}, where canonical means sorted
// keys, no insignificant whitespace, no HTML escaping, and numbers as written.
//
// A body that is one valid JSON value enters as that value, so bodies that
// differ only in whitespace or key order have one fingerprint. Any other body
// (empty, form data, JSON with trailing bytes) enters as "rawSha256", the hex
// SHA-256 of its bytes, under its own key so it never collides with a JSON
// body. The gateway computes the same for JSON bodies, which are all it
// accepts.
func Fingerprint(method, path, model string, body []byte) string {
	doc := map[string]any{"method": method, "path": path, "model": model}
	if v, ok := canonicalBody(body); ok {
		doc["body"] = v
	} else {
		sum := sha256.Sum256(body)
		doc["rawSha256"] = hex.EncodeToString(sum[:])
	}
	return hashDoc(doc)
}

func hashDoc(doc map[string]any) string {
	b, err := x402.Marshal(doc)
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

// modelOf returns the top-level "model" string of a JSON object body, or "".
func modelOf(v any) string {
	if m, ok := v.(map[string]any); ok {
		if s, ok := m["model"].(string); ok {
			return s
		}
	}
	return ""
}

// requestFingerprint computes the Fingerprint of req, reading its body through
// replay. path is the request URI (path and query: two queries are two
// calls). A body over limit is hashed as raw bytes without being held.
func requestFingerprint(req *http.Request, replay func() (io.ReadCloser, error), limit int64) (string, error) {
	body, err := replay()
	if err != nil {
		return "", err
	}
	path := req.URL.RequestURI()
	method := req.Method
	if method == "" {
		method = http.MethodGet
	}
	if body == nil || body == http.NoBody {
		return Fingerprint(method, path, "", nil), nil
	}
	defer func() { _ = body.Close() }()
	buf, err := io.ReadAll(io.LimitReader(body, limit+1))
	if err != nil {
		return "", err
	}
	if int64(len(buf)) <= limit {
		v, ok := canonicalBody(buf)
		if !ok {
			return Fingerprint(method, path, "", buf), nil
		}
		return Fingerprint(method, path, modelOf(v), buf), nil
	}
	h := sha256.New()
	h.Write(buf)
	if _, err := io.Copy(h, body); err != nil {
		return "", err
	}
	return hashDoc(map[string]any{"method": method, "path": path, "model": "", "rawSha256": hex.EncodeToString(h.Sum(nil))}), nil
}

// journalKey names a logical call: the origin and the payer, then the
// Idempotency-Key when the caller gave one, else the Fingerprint. It is a hash,
// so a header of any bytes makes a key that survives the journal's JSON.
func journalKey(u *url.URL, payer common.Address, idempotencyKey, fingerprint string) string {
	origin := strings.ToLower(u.Scheme) + "://" + strings.ToLower(hostPort(u))
	kind, name := "fp", fingerprint
	if idempotencyKey != "" {
		kind, name = "idem", idempotencyKey
	}
	sum := sha256.Sum256([]byte(strings.Join([]string{kind, origin, payer.Hex(), name}, "\x00")))
	return kind + ":" + hex.EncodeToString(sum[:])
}
