package client

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/ethereum/go-ethereum/common"

	"github.com/llm4agents/llm4agents/x402"
)

// HeaderIdempotencyKey names the request header that, when present, keys the
// journal entry of a call instead of the request's x402.Fingerprint.
const HeaderIdempotencyKey = "Idempotency-Key"

// modelOf returns the top-level "model" string of a JSON object body, or "".
func modelOf(body []byte) string {
	var m map[string]any
	if json.Unmarshal(body, &m) != nil {
		return ""
	}
	s, _ := m["model"].(string)
	return s
}

// requestFingerprint computes the x402.Fingerprint of req, reading its body through
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
		return x402.Fingerprint(method, path, "", nil), nil
	}
	defer func() { _ = body.Close() }()
	buf, err := io.ReadAll(io.LimitReader(body, limit+1))
	if err != nil {
		return "", err
	}
	if int64(len(buf)) <= limit {
		if !json.Valid(buf) {
			return x402.Fingerprint(method, path, "", buf), nil
		}
		return x402.Fingerprint(method, path, modelOf(buf), buf), nil
	}
	h := sha256.New()
	h.Write(buf)
	if _, err := io.Copy(h, body); err != nil {
		return "", err
	}
	return x402.FingerprintRaw(method, path, "", [sha256.Size]byte(h.Sum(nil))), nil
}

// journalKey names a logical call: the origin and the payer, then the
// Idempotency-Key when the caller gave one, else the x402.Fingerprint. It is a hash,
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
