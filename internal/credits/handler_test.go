package credits

import (
	"crypto/ecdsa"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/crypto"
	"github.com/google/go-cmp/cmp"

	"github.com/llm4agents/llm4agents/internal/store"
)

// server is the account routes on a fresh store behind httptest.
type server struct {
	t    *testing.T
	srv  *httptest.Server
	clk  *testClock
	logs *logBuffer
	h    *Handler
}

func newServer(t *testing.T) *server {
	t.Helper()
	logs := &logBuffer{}
	clk := &testClock{now: t0}
	st := openStore(t, clk)
	auth, err := NewAuth(st, testOrigin, testChain, logs.logger())
	if err != nil {
		t.Fatal(err)
	}
	auth.Now = clk.Now
	h := NewHandler(auth, st, logs.logger())
	h.Now = clk.Now
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &server{t: t, srv: srv, clk: clk, logs: logs, h: h}
}

// do sends a request and returns the status and the body.
func (s *server) do(method, path, contentType, body string, header http.Header) (int, http.Header, string) {
	s.t.Helper()
	req, err := http.NewRequestWithContext(s.t.Context(), method, s.srv.URL+path, strings.NewReader(body))
	if err != nil {
		s.t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for k, vs := range header {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	resp, err := s.srv.Client().Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		s.t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, string(b)
}

// signIn signs wallet in through the routes and returns the session token.
func (s *server) signIn(wallet *ecdsa.PrivateKey) string {
	s.t.Helper()
	status, _, body := s.do(http.MethodPost, PathNonce, "", "", nil)
	if status != http.StatusOK {
		s.t.Fatalf("nonce: %d %s", status, body)
	}
	var n nonceResponse
	if err := json.Unmarshal([]byte(body), &n); err != nil {
		s.t.Fatal(err)
	}
	if n.Domain != testHost || n.URI != testOrigin || n.ChainID != testChain {
		s.t.Errorf("nonce response = %+v", n)
	}
	text := message(wallet, n.Nonce, s.clk.Now()).String()
	status, hdr, body := s.do(http.MethodPost, PathVerify, "application/json", verifyBody(text, personalSign(s.t, wallet, text)), nil)
	if status != http.StatusOK {
		s.t.Fatalf("verify: %d %s", status, body)
	}
	if hdr.Get("Cache-Control") != "no-store" {
		s.t.Error("the session token's answer may be cached")
	}
	var v verifyResponse
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		s.t.Fatal(err)
	}
	if v.Account != strings.ToLower(crypto.PubkeyToAddress(wallet.PublicKey).Hex()) {
		s.t.Errorf("verify account = %q", v.Account)
	}
	return v.Token
}

func verifyBody(text string, sig []byte) string {
	b, _ := json.Marshal(map[string]string{"message": text, "signature": "0x" + hex.EncodeToString(sig)})
	return string(b)
}

func bearer(token string) http.Header { return http.Header{"Authorization": {"Bearer " + token}} }

// errorCode decodes an OpenAI error body and returns its code; it fails on
// any other shape.
func errorCode(t *testing.T, body string) string {
	t.Helper()
	var e struct {
		Error struct {
			Message string `json:"message"`
			Type    string `json:"type"`
			Code    string `json:"code"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(body), &e); err != nil || e.Error.Code == "" || e.Error.Type == "" || e.Error.Message == "" {
		t.Fatalf("not an OpenAI error body: %s", body)
	}
	return e.Error.Code
}

func TestHandlerFlow(t *testing.T) {
	s := newServer(t)
	alice, bob := newWallet(t), newWallet(t)
	token := s.signIn(alice)
	bobToken := s.signIn(bob)

	create := `{"name":"agent one","totalCap":"5000000","periodCap":"1000000","periodSeconds":86400,` +
		`"expiresAt":"2026-12-30T06:00:00Z","models":["gpt-4o-mini","gpt-4o","gpt-4o"],"ratePerMinute":60,"tokensPerMinute":90000}`
	status, hdr, body := s.do(http.MethodPost, PathKeys, "application/json", create, bearer(token))
	if status != http.StatusCreated {
		t.Fatalf("create: %d %s", status, body)
	}
	if hdr.Get("Cache-Control") != "no-store" {
		t.Error("the new key's answer may be cached")
	}
	var created keyView
	if err := json.Unmarshal([]byte(body), &created); err != nil {
		t.Fatal(err)
	}
	secret := created.Key
	if !wellFormed(secret, KeyPrefix) || created.ID != KeyID(secret) {
		t.Fatalf("created key %q with id %q", secret[:min(len(secret), 10)], created.ID)
	}
	str := func(s string) *string { return &s }
	day := int64(86400)
	want := keyView{ID: created.ID, Object: "api_key", Name: "agent one", Account: strings.ToLower(crypto.PubkeyToAddress(alice.PublicKey).Hex()),
		TotalCap: str("5000000"), PeriodCap: str("1000000"), PeriodSeconds: &day, ExpiresAt: str("2026-12-30T06:00:00Z"),
		Models: []string{"gpt-4o", "gpt-4o-mini"}, RatePerMinute: 60, TokensPerMinute: 90000, CreatedAt: "2026-11-30T06:00:00Z"}
	withKey := want
	withKey.Key = secret
	if diff := cmp.Diff(withKey, created); diff != "" {
		t.Errorf("create mismatch (-want +got):\n%s", diff)
	}
	// A key with no limits at all.
	s.clk.Advance(time.Millisecond)
	status, _, body = s.do(http.MethodPost, PathKeys, "application/json", `{}`, bearer(token))
	if status != http.StatusCreated {
		t.Fatalf("create bare: %d %s", status, body)
	}
	var bare keyView
	_ = json.Unmarshal([]byte(body), &bare)
	if bare.TotalCap != nil || bare.PeriodCap != nil || bare.ExpiresAt != nil || len(bare.Models) != 0 || bare.RatePerMinute != 0 {
		t.Errorf("bare key = %+v", bare)
	}

	// The list never shows a secret or a hash.
	status, _, body = s.do(http.MethodGet, PathKeys, "", "", bearer(token))
	if status != http.StatusOK {
		t.Fatalf("list: %d %s", status, body)
	}
	assertNoSecret(t, "list", body, secret, secret[len(KeyPrefix):], HashSecret(secret), bare.Key)
	var list keyList
	if err := json.Unmarshal([]byte(body), &list); err != nil || len(list.Data) != 2 {
		t.Fatalf("list = %s, %v", body, err)
	}
	bare.Key = ""
	if diff := cmp.Diff(keyList{Object: "list", Data: []keyView{want, bare}}, list); diff != "" {
		t.Errorf("list mismatch (-want +got):\n%s", diff)
	}
	// Bob sees none of them and cannot revoke them.
	if _, _, body := s.do(http.MethodGet, PathKeys, "", "", bearer(bobToken)); !strings.Contains(body, `"data":[]`) {
		t.Errorf("bob's list = %s", body)
	}
	if status, _, body := s.do(http.MethodDelete, PathKeys+"/"+created.ID, "", "", bearer(bobToken)); status != http.StatusNotFound || errorCode(t, body) != "key_not_found" {
		t.Errorf("bob revokes alice's key: %d %s", status, body)
	}

	s.clk.Advance(time.Second - time.Millisecond)
	status, _, body = s.do(http.MethodDelete, PathKeys+"/"+created.ID, "", "", bearer(token))
	if status != http.StatusOK {
		t.Fatalf("revoke: %d %s", status, body)
	}
	var revoked keyView
	_ = json.Unmarshal([]byte(body), &revoked)
	if revoked.RevokedAt == nil || *revoked.RevokedAt != "2026-11-30T06:00:01Z" {
		t.Errorf("revoked = %+v", revoked)
	}
	// The revoked key no longer authenticates.
	keys := NewKeys(s.h.st.(KeyStore), nil)
	if _, err := keys.Authenticate(t.Context(), secret); err == nil {
		t.Error("a revoked key authenticates")
	}
	// The session ends after SessionTTL.
	s.clk.Advance(SessionTTL)
	if status, _, body := s.do(http.MethodGet, PathKeys, "", "", bearer(token)); status != http.StatusUnauthorized || errorCode(t, body) != "session_required" {
		t.Errorf("list after the session expired: %d %s", status, body)
	}
	assertNoSecret(t, "log", s.logs.String(), secret, secret[len(KeyPrefix):], token, bobToken, HashSecret(secret))
}

func TestHandlerHostile(t *testing.T) {
	s := newServer(t)
	wallet := newWallet(t)
	token := s.signIn(wallet)
	auth := bearer(token)
	validVerify := func() string {
		_, _, body := s.do(http.MethodPost, PathNonce, "", "", nil)
		var n nonceResponse
		_ = json.Unmarshal([]byte(body), &n)
		text := message(wallet, n.Nonce, s.clk.Now()).String()
		return verifyBody(text, personalSign(t, wallet, text))
	}
	otherKey, _, _ := NewKey()
	tests := []struct {
		name        string
		method      string
		path        string
		contentType string
		body        string
		header      http.Header
		status      int
		code        string
	}{
		// Routes and methods.
		{"unknown route", http.MethodGet, "/v1/nothing", "", "", nil, 404, "not_found"},
		{"nonce GET", http.MethodGet, PathNonce, "", "", nil, 405, "method_not_allowed"},
		{"verify GET", http.MethodGet, PathVerify, "", "", nil, 405, "method_not_allowed"},
		{"keys PUT", http.MethodPut, PathKeys, "application/json", "{}", auth, 405, "method_not_allowed"},
		{"key GET", http.MethodGet, PathKeys + "/x", "", "", auth, 405, "method_not_allowed"},
		{"key PUT", http.MethodPut, PathKeys + "/x", "application/json", "{}", auth, 405, "method_not_allowed"},
		{"update no session", http.MethodPatch, PathKeys + "/x", "application/json", `{"name":"a"}`, nil, 401, "session_required"},
		// Nonce bodies.
		{"nonce body not JSON", http.MethodPost, PathNonce, "", "hello", nil, 400, "invalid_json"},
		{"nonce body with a field", http.MethodPost, PathNonce, "application/json", `{"a":1}`, nil, 400, "invalid_json"},
		{"nonce body too large", http.MethodPost, PathNonce, "application/json", "{" + strings.Repeat(" ", 100) + "}", nil, 413, "request_too_large"},
		// Verify bodies.
		{"verify no content type", http.MethodPost, PathVerify, "", `{}`, nil, 415, "unsupported_media_type"},
		{"verify text/plain", http.MethodPost, PathVerify, "text/plain", `{}`, nil, 415, "unsupported_media_type"},
		{"verify empty", http.MethodPost, PathVerify, "application/json", ``, nil, 400, "invalid_json"},
		{"verify array", http.MethodPost, PathVerify, "application/json", `[]`, nil, 400, "invalid_json"},
		{"verify null", http.MethodPost, PathVerify, "application/json", `null`, nil, 400, "invalid_json"},
		{"verify missing signature", http.MethodPost, PathVerify, "application/json", `{"message":"x"}`, nil, 400, "invalid_request"},
		{"verify unknown field", http.MethodPost, PathVerify, "application/json", `{"message":"x","signature":"0x","extra":1}`, nil, 400, "invalid_json"},
		{"verify duplicate field", http.MethodPost, PathVerify, "application/json", `{"message":"x","message":"y","signature":"0x"}`, nil, 400, "invalid_json"},
		{"verify trailing data", http.MethodPost, PathVerify, "application/json", `{"message":"x","signature":"0x"} {}`, nil, 400, "invalid_json"},
		{"verify wrong types", http.MethodPost, PathVerify, "application/json", `{"message":1,"signature":2}`, nil, 400, "invalid_json"},
		{"verify bad signature hex", http.MethodPost, PathVerify, "application/json", `{"message":"x","signature":"0xzz"}`, nil, 400, "invalid_signature"},
		{"verify garbage message", http.MethodPost, PathVerify, "application/json", `{"message":"x","signature":"0x` + strings.Repeat("00", 65) + `"}`, nil, 400, "invalid_sign_in_message"},
		{"verify invalid UTF-8", http.MethodPost, PathVerify, "application/json", "{\"message\":\"\xff\",\"signature\":\"0x\"}", nil, 400, "invalid_json"},
		{"verify too large", http.MethodPost, PathVerify, "application/json", `{"message":"` + strings.Repeat("a", maxVerifyBody) + `","signature":"0x"}`, nil, 413, "request_too_large"},
		// Sessions.
		{"keys no session", http.MethodGet, PathKeys, "", "", nil, 401, "session_required"},
		{"keys API key as session", http.MethodGet, PathKeys, "", "", bearer(otherKey), 401, "session_required"},
		{"keys basic auth", http.MethodGet, PathKeys, "", "", http.Header{"Authorization": {"Basic " + token}}, 401, "session_required"},
		{"keys two authorizations", http.MethodGet, PathKeys, "", "", http.Header{"Authorization": {"Bearer " + token, "Bearer " + token}}, 401, "session_required"},
		{"keys unknown session", http.MethodGet, PathKeys, "", "", bearer(SessionPrefix + strings.Repeat("a", 52)), 401, "session_required"},
		{"keys lower-case bearer", http.MethodGet, PathKeys, "", "", http.Header{"Authorization": {"bearer " + token}}, 401, "session_required"},
		{"create no session", http.MethodPost, PathKeys, "application/json", `{}`, nil, 401, "session_required"},
		{"revoke no session", http.MethodDelete, PathKeys + "/x", "", "", nil, 401, "session_required"},
		// Create bodies.
		{"create no content type", http.MethodPost, PathKeys, "", `{}`, auth, 415, "unsupported_media_type"},
		{"create unknown field", http.MethodPost, PathKeys, "application/json", `{"owner":"0x0"}`, auth, 400, "invalid_json"},
		{"create cap as number", http.MethodPost, PathKeys, "application/json", `{"totalCap":5}`, auth, 400, "invalid_json"},
		{"create negative cap", http.MethodPost, PathKeys, "application/json", `{"totalCap":"-1"}`, auth, 400, "invalid_total_cap"},
		{"create cap with leading zero", http.MethodPost, PathKeys, "application/json", `{"totalCap":"01"}`, auth, 400, "invalid_total_cap"},
		{"create cap fraction", http.MethodPost, PathKeys, "application/json", `{"totalCap":"1.5"}`, auth, 400, "invalid_total_cap"},
		{"create cap too large", http.MethodPost, PathKeys, "application/json", `{"totalCap":"1000000000000001"}`, auth, 400, "invalid_total_cap"},
		{"create cap huge", http.MethodPost, PathKeys, "application/json", `{"totalCap":"99999999999999999999999"}`, auth, 400, "invalid_total_cap"},
		{"create period cap alone", http.MethodPost, PathKeys, "application/json", `{"periodCap":"1"}`, auth, 400, "invalid_period_cap"},
		{"create period alone", http.MethodPost, PathKeys, "application/json", `{"periodSeconds":60}`, auth, 400, "invalid_period_cap"},
		{"create period zero", http.MethodPost, PathKeys, "application/json", `{"periodCap":"1","periodSeconds":0}`, auth, 400, "invalid_period_cap"},
		{"create period too long", http.MethodPost, PathKeys, "application/json", `{"periodCap":"1","periodSeconds":999999999}`, auth, 400, "invalid_period_cap"},
		{"create period fraction", http.MethodPost, PathKeys, "application/json", `{"periodCap":"1","periodSeconds":1.5}`, auth, 400, "invalid_json"},
		{"create expired", http.MethodPost, PathKeys, "application/json", `{"expiresAt":"2026-11-30T06:00:00Z"}`, auth, 400, "invalid_expires_at"},
		{"create expiry far", http.MethodPost, PathKeys, "application/json", `{"expiresAt":"2099-01-01T00:00:00Z"}`, auth, 400, "invalid_expires_at"},
		{"create expiry not a time", http.MethodPost, PathKeys, "application/json", `{"expiresAt":"tomorrow"}`, auth, 400, "invalid_expires_at"},
		{"create negative rate", http.MethodPost, PathKeys, "application/json", `{"ratePerMinute":-1}`, auth, 400, "invalid_rate_limit"},
		{"create huge rate", http.MethodPost, PathKeys, "application/json", `{"ratePerMinute":99999999999999999999}`, auth, 400, "invalid_json"},
		{"create negative token rate", http.MethodPost, PathKeys, "application/json", `{"tokensPerMinute":-1}`, auth, 400, "invalid_rate_limit"},
		{"create token rate too high", http.MethodPost, PathKeys, "application/json", `{"tokensPerMinute":10000000001}`, auth, 400, "invalid_rate_limit"},
		{"create token rate not an integer", http.MethodPost, PathKeys, "application/json", `{"tokensPerMinute":1.5}`, auth, 400, "invalid_json"},
		{"create token rate as a string", http.MethodPost, PathKeys, "application/json", `{"tokensPerMinute":"100"}`, auth, 400, "invalid_json"},
		{"create name with newline", http.MethodPost, PathKeys, "application/json", `{"name":"a\nb"}`, auth, 400, "invalid_name"},
		{"create name too long", http.MethodPost, PathKeys, "application/json", `{"name":"` + strings.Repeat("a", store.MaxKeyName+1) + `"}`, auth, 400, "invalid_name"},
		{"create model with space", http.MethodPost, PathKeys, "application/json", `{"models":["gpt 4"]}`, auth, 400, "invalid_models"},
		{"create empty model", http.MethodPost, PathKeys, "application/json", `{"models":[""]}`, auth, 400, "invalid_models"},
		{"create too many models", http.MethodPost, PathKeys, "application/json", `{"models":[` + strings.Repeat(`"m",`, store.MaxKeyModels) + `"m"]}`, auth, 400, "invalid_models"},
		{"create nested duplicate", http.MethodPost, PathKeys, "application/json", `{"models":["a"],"models":["b"]}`, auth, 400, "invalid_json"},
		{"create too large", http.MethodPost, PathKeys, "application/json", `{"name":"` + strings.Repeat("a", maxKeyBody) + `"}`, auth, 413, "request_too_large"},
		// Revoke ids.
		{"revoke unknown", http.MethodDelete, PathKeys + "/0x" + strings.Repeat("0", 64), "", "", auth, 404, "key_not_found"},
		{"revoke invalid id", http.MethodDelete, PathKeys + "/a%20b", "", "", auth, 400, "invalid_key_id"},
		{"revoke empty id", http.MethodDelete, PathKeys + "/", "", "", auth, 400, "invalid_key_id"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			status, hdr, body := s.do(tc.method, tc.path, tc.contentType, tc.body, tc.header)
			if status != tc.status {
				t.Fatalf("status %d, want %d: %s", status, tc.status, body)
			}
			if got := errorCode(t, body); got != tc.code {
				t.Errorf("code %q, want %q: %s", got, tc.code, body)
			}
			if ct := hdr.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q", ct)
			}
			assertNoSecret(t, "body", body, token, otherKey)
		})
	}
	// None of that created a key, and the session still works.
	if _, _, body := s.do(http.MethodGet, PathKeys, "", "", auth); !strings.Contains(body, `"data":[]`) {
		t.Errorf("hostile requests created keys: %s", body)
	}
	// A valid verify body still works after all that (nothing was burnt).
	if status, _, body := s.do(http.MethodPost, PathVerify, "application/json", validVerify(), nil); status != http.StatusOK {
		t.Errorf("verify after hostile requests: %d %s", status, body)
	}
	assertNoSecret(t, "log", s.logs.String(), token, otherKey)
}

func TestHandlerSignInRefusals(t *testing.T) {
	s := newServer(t)
	wallet := newWallet(t)
	_, _, body := s.do(http.MethodPost, PathNonce, "", "", nil)
	var n nonceResponse
	_ = json.Unmarshal([]byte(body), &n)
	for name, tc := range map[string]struct {
		edit func(*Message)
		code string
	}{
		"other origin": {func(m *Message) { m.Domain = "evil.example.com" }, string(ReasonOrigin)},
		"stale":        {func(m *Message) { m.IssuedAt = t0.Add(-time.Hour) }, string(ReasonStale)},
		"foreign":      {func(m *Message) { m.Nonce = "abcdefgh12345678" }, string(ReasonNonce)},
	} {
		m := message(wallet, n.Nonce, t0)
		tc.edit(m)
		text := m.String()
		sig := personalSign(t, wallet, text)
		status, _, body := s.do(http.MethodPost, PathVerify, "application/json", verifyBody(text, sig), nil)
		if status != http.StatusUnauthorized || errorCode(t, body) != tc.code {
			t.Errorf("%s: %d %s, want 401 %s", name, status, body, tc.code)
		}
		assertNoSecret(t, name+" body", body, text, hex.EncodeToString(sig), n.Nonce)
	}
	// Reused: the first sign-in spends the nonce.
	text := message(wallet, n.Nonce, t0).String()
	vb := verifyBody(text, personalSign(t, wallet, text))
	if status, _, body := s.do(http.MethodPost, PathVerify, "application/json", vb, nil); status != http.StatusOK {
		t.Fatalf("first sign-in: %d %s", status, body)
	}
	if status, _, body := s.do(http.MethodPost, PathVerify, "application/json", vb, nil); status != http.StatusUnauthorized || errorCode(t, body) != string(ReasonNonce) {
		t.Errorf("reused nonce: %d %s", status, body)
	}
	assertNoSecret(t, "log", s.logs.String(), text, n.Nonce)
}

func TestHandlerNonceRate(t *testing.T) {
	s := newServer(t)
	s.h.NoncesPerMinute = 3
	for i := range 3 {
		if status, _, body := s.do(http.MethodPost, PathNonce, "", "", nil); status != http.StatusOK {
			t.Fatalf("nonce %d: %d %s", i, status, body)
		}
	}
	if status, _, body := s.do(http.MethodPost, PathNonce, "", "", nil); status != http.StatusTooManyRequests || errorCode(t, body) != "rate_limited" {
		t.Errorf("4th nonce: %d %s", status, body)
	}
	// Sign-in attempts have their own bound: the nonces spent above do not
	// count against them.
	for i := range 3 {
		if status, _, body := s.do(http.MethodPost, PathVerify, "application/json", `{"message":"x","signature":"0x00"}`, nil); status != http.StatusBadRequest {
			t.Fatalf("verify %d: %d %s", i, status, body)
		}
	}
	if status, _, body := s.do(http.MethodPost, PathVerify, "application/json", `{"message":"x","signature":"0x00"}`, nil); status != http.StatusTooManyRequests || errorCode(t, body) != "rate_limited" {
		t.Errorf("4th sign-in attempt: %d %s", status, body)
	}
}

func TestHandlerUpdateKey(t *testing.T) {
	s := newServer(t)
	alice, bob := newWallet(t), newWallet(t)
	token, bobToken := s.signIn(alice), s.signIn(bob)
	auth := bearer(token)
	create := `{"name":"agent","totalCap":"5000000","periodCap":"1000000","periodSeconds":86400,` +
		`"expiresAt":"2026-12-30T06:00:00Z","models":["gpt-4o"],"ratePerMinute":60,"tokensPerMinute":90000}`
	status, _, body := s.do(http.MethodPost, PathKeys, "application/json", create, auth)
	if status != http.StatusCreated {
		t.Fatalf("create: %d %s", status, body)
	}
	var created keyView
	if err := json.Unmarshal([]byte(body), &created); err != nil {
		t.Fatal(err)
	}
	secret := created.Key
	created.Key = ""
	path := PathKeys + "/" + created.ID
	patch := func(token, path, body string) (int, string) {
		t.Helper()
		status, _, out := s.do(http.MethodPatch, path, "application/json", body, bearer(token))
		return status, out
	}
	view := func(body string) keyView {
		t.Helper()
		var v keyView
		if err := json.Unmarshal([]byte(body), &v); err != nil {
			t.Fatalf("decode %s: %v", body, err)
		}
		return v
	}

	bad := []struct {
		name, body string
		status     int
		code       string
	}{
		{"empty object", `{}`, 400, "nothing_to_change"},
		{"not an object", `[]`, 400, "invalid_json"},
		{"unknown field", `{"owner":"0x0"}`, 400, "invalid_json"},
		{"duplicate field", `{"name":"a","name":"b"}`, 400, "invalid_json"},
		{"cap as number", `{"totalCap":5}`, 400, "invalid_json"},
		{"negative cap", `{"totalCap":"-1"}`, 400, "invalid_total_cap"},
		{"period cap alone", `{"periodCap":"1"}`, 400, "invalid_period_cap"},
		{"period alone", `{"periodSeconds":60}`, 400, "invalid_period_cap"},
		{"period cap null alone", `{"periodCap":null}`, 400, "invalid_period_cap"},
		{"period cap with null period", `{"periodCap":"1","periodSeconds":null}`, 400, "invalid_period_cap"},
		{"period zero", `{"periodCap":"1","periodSeconds":0}`, 400, "invalid_period_cap"},
		{"expired", `{"expiresAt":"2026-11-30T06:00:00Z"}`, 400, "invalid_expires_at"},
		{"negative rate", `{"ratePerMinute":-1}`, 400, "invalid_rate_limit"},
		{"token rate too high", `{"tokensPerMinute":10000000001}`, 400, "invalid_rate_limit"},
		{"name with newline", `{"name":"a\nb"}`, 400, "invalid_name"},
		{"model with space", `{"models":["gpt 4"]}`, 400, "invalid_models"},
		{"a good field and a bad one", `{"name":"ok","totalCap":"x"}`, 400, "invalid_total_cap"},
		{"too large", `{"name":"` + strings.Repeat("a", maxKeyBody) + `"}`, 413, "request_too_large"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			status, body := patch(token, path, tc.body)
			if status != tc.status || errorCode(t, body) != tc.code {
				t.Errorf("PATCH %s = %d %s, want %d %s", tc.body, status, body, tc.status, tc.code)
			}
		})
	}
	if status, _, body := s.do(http.MethodPatch, path, "", `{"name":"x"}`, auth); status != 415 {
		t.Errorf("PATCH without a content type = %d %s", status, body)
	}
	// None of that changed the key.
	_, _, body = s.do(http.MethodGet, PathKeys, "", "", auth)
	if diff := cmp.Diff(keyList{Object: "list", Data: []keyView{created}}, listOf(t, body)); diff != "" {
		t.Errorf("key changed by refused updates (-want +got):\n%s", diff)
	}

	str := func(s string) *string { return &s }
	hour := int64(3600)
	steps := []struct {
		name, body string
		change     func(*keyView)
	}{
		{"lower the total cap", `{"totalCap":"1000"}`, func(v *keyView) { v.TotalCap = str("1000") }},
		{"remove the caps and expiry", `{"totalCap":null,"periodCap":null,"periodSeconds":null,"expiresAt":null}`, func(v *keyView) {
			v.TotalCap, v.PeriodCap, v.PeriodSeconds, v.ExpiresAt = nil, nil, nil, nil
		}},
		{"set a period cap", `{"periodCap":"500","periodSeconds":3600}`, func(v *keyView) { v.PeriodCap, v.PeriodSeconds = str("500"), &hour }},
		{"rates, models, name, expiry", `{"ratePerMinute":5,"tokensPerMinute":1000,"models":["b","a","b"],"name":"renamed","expiresAt":"2026-12-01T00:00:00Z"}`,
			func(v *keyView) {
				v.RatePerMinute, v.TokensPerMinute, v.Models, v.Name, v.ExpiresAt = 5, 1000, []string{"a", "b"}, "renamed", str("2026-12-01T00:00:00Z")
			}},
		{"null models, rates, name and expiry", `{"models":null,"ratePerMinute":null,"tokensPerMinute":null,"name":null,"expiresAt":null}`, func(v *keyView) {
			v.Models, v.RatePerMinute, v.TokensPerMinute, v.Name, v.ExpiresAt = []string{}, 0, 0, "", nil
		}},
	}
	want := created
	for _, step := range steps {
		status, body := patch(token, path, step.body)
		if status != http.StatusOK {
			t.Fatalf("%s: %d %s", step.name, status, body)
		}
		assertNoSecret(t, step.name, body, secret, HashSecret(secret))
		step.change(&want)
		if diff := cmp.Diff(want, view(body)); diff != "" {
			t.Errorf("%s mismatch (-want +got):\n%s", step.name, diff)
		}
	}
	// The key still authenticates, with its new limits.
	k, err := NewKeys(s.h.st.(KeyStore), nil).Authenticate(t.Context(), secret)
	if err != nil || k.TotalCap != store.NoCap || k.PeriodCap != 500 || k.Name != "" {
		t.Errorf("Authenticate() after updates = %+v, %v", k, err)
	}

	// Another owner's key and an unknown one are alike; a revoked key is a conflict.
	if status, body := patch(bobToken, path, `{"totalCap":"0"}`); status != 404 || errorCode(t, body) != "key_not_found" {
		t.Errorf("bob updates alice's key: %d %s", status, body)
	}
	if status, body := patch(token, PathKeys+"/0x"+strings.Repeat("0", 64), `{"totalCap":"0"}`); status != 404 || errorCode(t, body) != "key_not_found" {
		t.Errorf("update an unknown key: %d %s", status, body)
	}
	if status, body := patch(token, PathKeys+"/a%20b", `{"totalCap":"0"}`); status != 400 || errorCode(t, body) != "invalid_key_id" {
		t.Errorf("update an invalid id: %d %s", status, body)
	}
	if status, _, body := s.do(http.MethodPatch, path, "application/json", `{"totalCap":"0"}`, nil); status != 401 || errorCode(t, body) != "session_required" {
		t.Errorf("update without a session: %d %s", status, body)
	}
	if status, _, body := s.do(http.MethodDelete, path, "", "", auth); status != http.StatusOK {
		t.Fatalf("revoke: %d %s", status, body)
	}
	if status, body := patch(token, path, `{"totalCap":"0"}`); status != 409 || errorCode(t, body) != "key_revoked" {
		t.Errorf("update a revoked key: %d %s", status, body)
	}
	assertNoSecret(t, "log", s.logs.String(), secret, token, bobToken, HashSecret(secret))
}

func listOf(t *testing.T, body string) keyList {
	t.Helper()
	var l keyList
	if err := json.Unmarshal([]byte(body), &l); err != nil {
		t.Fatalf("decode %s: %v", body, err)
	}
	return l
}

// TestHandlerUpdateKeyRace: two owners' tabs change different limits of one
// key at the same time, many times over; every change is kept, none is
// overwritten by the other's stale copy of the key.
func TestHandlerUpdateKeyRace(t *testing.T) {
	s := newServer(t)
	token := s.signIn(newWallet(t))
	created := s.createKey(token, `{"name":"agent"}`)
	path := PathKeys + "/" + created.ID
	for round := range 30 {
		name, rate := fmt.Sprintf("agent-%d", round), round+1
		var wg sync.WaitGroup
		for _, change := range []string{fmt.Sprintf(`{"name":%q}`, name), fmt.Sprintf(`{"ratePerMinute":%d}`, rate)} {
			wg.Go(func() {
				if status, _, body := s.do(http.MethodPatch, path, "application/json", change, bearer(token)); status != http.StatusOK {
					t.Errorf("PATCH %s = %d %s", change, status, body)
				}
			})
		}
		wg.Wait()
		_, _, body := s.do(http.MethodGet, PathKeys, "", "", bearer(token))
		got := listOf(t, body).Data[0]
		if got.Name != name || got.RatePerMinute != rate {
			t.Fatalf("round %d: name %q, rate %d; want %q and %d: a change was lost", round, got.Name, got.RatePerMinute, name, rate)
		}
	}
}

// createKey creates a key with body through the account routes, signed in
// with token, and returns it as created (its secret included).
func (s *server) createKey(token, body string) keyView {
	s.t.Helper()
	status, _, out := s.do(http.MethodPost, PathKeys, "application/json", body, bearer(token))
	if status != http.StatusCreated {
		s.t.Fatalf("create: %d %s", status, out)
	}
	var created keyView
	if err := json.Unmarshal([]byte(out), &created); err != nil {
		s.t.Fatal(err)
	}
	return created
}

// TestSignInHandler: a handler of the sign-in routes alone (a gateway that
// sells no credits) signs a wallet in, and answers every key route 404,
// a session token included.
func TestSignInHandler(t *testing.T) {
	s := newServer(t)
	h := NewSignInHandler(s.h.auth, s.logs.logger())
	s.srv.Config.Handler = h
	token := s.signIn(newWallet(t))
	if token == "" {
		t.Fatal("no session token")
	}
	for _, tc := range []struct{ method, path string }{
		{http.MethodGet, PathKeys}, {http.MethodPost, PathKeys}, {http.MethodDelete, PathKeys + "/k1"},
		{http.MethodPatch, PathKeys + "/k1"}, {http.MethodGet, "/v1/auth/other"},
	} {
		status, _, body := s.do(tc.method, tc.path, "application/json", `{}`, bearer(token))
		if status != http.StatusNotFound || errorCode(t, body) != "not_found" {
			t.Errorf("%s %s: %d %s", tc.method, tc.path, status, body)
		}
	}
	assertNoSecret(t, "log", s.logs.String(), token)
}
