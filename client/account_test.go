package client_test

import (
	"encoding/json"
	"errors"
	"io"
	"maps"
	"math/big"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/llm4agents/llm4agents/client"
	"github.com/llm4agents/llm4agents/internal/testchain"
	"github.com/llm4agents/llm4agents/x402/evm/exact"
)

// accountGateway fakes the account routes of a gateway: it hands out a
// nonce for its own origin (or the domain set in domain), takes any signed
// message naming that nonce, and answers the key, balance and receipt routes
// to the session token or an API key.
type accountGateway struct {
	srv *httptest.Server

	mu      sync.Mutex
	domain  string // the nonce's domain; "" is the server's host
	signed  string // the last message signed in with
	bearers []string
	bodies  []string
}

const (
	testSession = "sess-l4a-0123456789"
	testAPIKey  = "sk-l4a-abcdefghij"
)

func newAccountGateway(t *testing.T) *accountGateway {
	g := &accountGateway{}
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+client.PathNonce, func(w http.ResponseWriter, r *http.Request) {
		g.mu.Lock()
		domain := g.domain
		g.mu.Unlock()
		if domain == "" {
			domain = r.Host
		}
		writeJSONBody(w, http.StatusOK, map[string]any{"nonce": "n0nce1234", "expiresAt": "2030-01-01T00:00:00Z",
			"domain": domain, "uri": "http://" + r.Host, "chainId": 8453})
	})
	mux.HandleFunc("POST "+client.PathVerify, func(w http.ResponseWriter, r *http.Request) {
		var v struct{ Message, Signature string }
		if err := json.NewDecoder(r.Body).Decode(&v); err != nil || len(v.Signature) != 2+130 {
			writeJSONBody(w, http.StatusBadRequest, map[string]any{"error": map[string]string{"message": "bad", "code": "bad_request"}})
			return
		}
		g.mu.Lock()
		g.signed = v.Message
		g.mu.Unlock()
		writeJSONBody(w, http.StatusOK, map[string]any{"token": testSession, "account": testchain.DevAddress(0).Hex()})
	})
	authed := func(h func(w http.ResponseWriter, r *http.Request)) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			g.mu.Lock()
			g.bearers = append(g.bearers, r.Header.Get("Authorization"))
			g.bodies = append(g.bodies, string(b))
			g.mu.Unlock()
			switch r.Header.Get("Authorization") {
			case "Bearer " + testSession, "Bearer " + testAPIKey:
				h(w, r)
			default:
				writeJSONBody(w, http.StatusUnauthorized, map[string]any{"error": map[string]string{
					"message": "sign in first\x1b[2J", "code": "unauthorized"}})
			}
		}
	}
	key := map[string]any{"id": "0x01", "object": "api_key", "name": "agent", "account": testchain.DevAddress(0).Hex(),
		"totalCap": "500000", "models": []string{"demo"}, "ratePerMinute": 0, "createdAt": "2030-01-01T00:00:00Z"}
	mux.HandleFunc("POST "+client.PathKeys, authed(func(w http.ResponseWriter, r *http.Request) {
		created := map[string]any{"key": testAPIKey}
		maps.Copy(created, key)
		writeJSONBody(w, http.StatusCreated, created)
	}))
	mux.HandleFunc("GET "+client.PathKeys, authed(func(w http.ResponseWriter, r *http.Request) {
		writeJSONBody(w, http.StatusOK, map[string]any{"data": []any{key}})
	}))
	mux.HandleFunc("DELETE "+client.PathKeys+"/{id}", authed(func(w http.ResponseWriter, r *http.Request) {
		revoked := map[string]any{"revokedAt": "2030-01-02T00:00:00Z"}
		maps.Copy(revoked, key)
		revoked["id"] = r.PathValue("id")
		writeJSONBody(w, http.StatusOK, revoked)
	}))
	mux.HandleFunc("GET "+client.PathBalance, authed(func(w http.ResponseWriter, r *http.Request) {
		writeJSONBody(w, http.StatusOK, map[string]string{"account": testchain.DevAddress(0).Hex(), "asset": "eip155:8453/erc20:0x1",
			"balance": "1000000", "held": "10000"})
	}))
	mux.HandleFunc("GET "+client.PathReceipts, authed(func(w http.ResponseWriter, r *http.Request) {
		writeJSONBody(w, http.StatusOK, map[string]any{"data": []any{map[string]string{"limit": r.URL.Query().Get("limit"), "key_id": r.URL.Query().Get("key_id")}}})
	}))
	mux.HandleFunc("GET "+client.PathReceipts+"/{id}", authed(func(w http.ResponseWriter, r *http.Request) {
		writeJSONBody(w, http.StatusOK, map[string]string{"id": r.PathValue("id")})
	}))
	g.srv = httptest.NewServer(mux)
	t.Cleanup(g.srv.Close)
	return g
}

func writeJSONBody(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func (g *accountGateway) account(t *testing.T) *client.Account {
	t.Helper()
	u, err := url.Parse(g.srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	return &client.Account{Base: u, Client: g.srv.Client()}
}

// TestAccountSignIn: SignIn signs an EIP-4361 message for the gateway's own
// origin and keeps the session token, which the key routes then get as the
// bearer.
func TestAccountSignIn(t *testing.T) {
	g := newAccountGateway(t)
	a := g.account(t)
	signer := exact.NewKeySigner(testchain.DevKey(0))
	if err := a.SignIn(t.Context(), signer, time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)); err != nil {
		t.Fatal(err)
	}
	if a.Token.Reveal() != testSession {
		t.Errorf("Token = %q, want the session", a.Token.Reveal())
	}
	g.mu.Lock()
	signed := g.signed
	g.mu.Unlock()
	host := strings.TrimPrefix(g.srv.URL, "http://")
	for _, want := range []string{host + " wants you to sign in with your Ethereum account:", signer.Address().Hex(),
		client.SignInStatement, "Nonce: n0nce1234", "Chain ID: 8453", "Issued At: 2030-01-01T00:00:00Z"} {
		if !strings.Contains(signed, want) {
			t.Errorf("the signed message lacks %q:\n%s", want, signed)
		}
	}

	keys, raw, err := a.Keys(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 1 || keys[0].ID != "0x01" || keys[0].TotalCap == nil || *keys[0].TotalCap != "500000" || !json.Valid(raw) {
		t.Errorf("Keys = %+v, %s", keys, raw)
	}
	g.mu.Lock()
	bearer := g.bearers[len(g.bearers)-1]
	g.mu.Unlock()
	if bearer != "Bearer "+testSession {
		t.Errorf("bearer %q, want the session token", bearer)
	}
}

// TestAccountSignInOtherOrigin: a nonce for another domain is not signed,
// and the error says why without a secret.
func TestAccountSignInOtherOrigin(t *testing.T) {
	g := newAccountGateway(t)
	g.domain = "evil.example"
	a := g.account(t)
	err := a.SignIn(t.Context(), exact.NewKeySigner(testchain.DevKey(0)), time.Now())
	if !errors.Is(err, client.ErrSignInOrigin) || !strings.Contains(err.Error(), `"evil.example"`) || !strings.HasSuffix(err.Error(), "not signing") {
		t.Fatalf("SignIn = %v, want ErrSignInOrigin", err)
	}
	if g.signed != "" || a.Token != "" {
		t.Errorf("signed %q, token set %v", g.signed, a.Token != "")
	}
}

// TestAccountCalls: each typed call sends its route and body and decodes the
// answer; a refusal is an *APIError whose text is one printable line.
func TestAccountCalls(t *testing.T) {
	g := newAccountGateway(t)
	a := g.account(t)

	_, _, err := a.Balance(t.Context())
	var ae *client.APIError
	if !errors.As(err, &ae) || ae.Status != http.StatusUnauthorized || ae.Code != "unauthorized" || ae.Route != "GET "+client.PathBalance {
		t.Fatalf("unauthorized Balance = %v", err)
	}
	if want := "GET /v1/credits/balance: the gateway answered 401 Unauthorized (unauthorized): sign in first [2J"; err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}

	a.Token = testAPIKey
	bal, _, err := a.Balance(t.Context())
	if err != nil || bal.Balance != "1000000" || bal.Held != "10000" {
		t.Fatalf("Balance = %+v, %v", bal, err)
	}
	k, _, err := a.CreateKey(t.Context(), &client.KeyRequest{Name: "agent", TotalCap: "500000", Models: []string{"demo"}})
	if err != nil || k.Key != testAPIKey {
		t.Fatalf("CreateKey = %+v, %v", k, err)
	}
	g.mu.Lock()
	body := g.bodies[len(g.bodies)-1]
	g.mu.Unlock()
	var sent map[string]any
	if err := json.Unmarshal([]byte(body), &sent); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]any{"name": "agent", "totalCap": "500000", "models": []any{"demo"}}, sent); diff != "" {
		t.Errorf("CreateKey body (-want +got):\n%s", diff)
	}
	k, _, err = a.RevokeKey(t.Context(), "0x02")
	if err != nil || k.ID != "0x02" || k.RevokedAt == nil {
		t.Fatalf("RevokeKey = %+v, %v", k, err)
	}
	envs, err := a.Receipts(t.Context(), 7, "0x01")
	if err != nil || len(envs) != 1 || string(envs[0]) != `{"key_id":"0x01","limit":"7"}` {
		t.Fatalf("Receipts = %s, %v", envs, err)
	}
	env, err := a.Receipt(t.Context(), "0xab")
	if err != nil || strings.TrimSpace(string(env)) != `{"id":"0xab"}` {
		t.Fatalf("Receipt = %s, %v", env, err)
	}
	if _, _, err := a.TopUp(t.Context(), big.NewInt(1)); !errors.As(err, &ae) || ae.Status != http.StatusMethodNotAllowed && ae.Status != http.StatusNotFound {
		t.Errorf("TopUp on a gateway without the route = %v", err)
	}
}

func TestOneLine(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"plain", "plain"},
		{"a\nb\r\x1b[2Jc\x7f", "a b  [2Jc "},
		{"\u0085next line", " next line"},
		{strings.Repeat("x", 12), "xxxxxxxxxx..."},
	} {
		if got := client.OneLine(tc.in, 10); got != tc.want {
			t.Errorf("OneLine(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestKeyUpdateJSON: a field left nil is absent (kept), a limit set to ""
// is null (removed).
func TestKeyUpdateJSON(t *testing.T) {
	str := func(s string) *string { return &s }
	n, zero, p := 5, int64(0), int64(60)
	tests := []struct {
		name string
		u    client.KeyUpdate
		want string
	}{
		{"nothing", client.KeyUpdate{}, `{}`},
		{"values", client.KeyUpdate{Name: str("a"), TotalCap: str("10"), PeriodCap: str("5"), PeriodSeconds: &p, ExpiresAt: str("2027-01-01T00:00:00Z"),
			Models: []string{"m"}, RatePerMinute: &n, TokensPerMinute: &zero},
			`{"expiresAt":"2027-01-01T00:00:00Z","models":["m"],"name":"a","periodCap":"5","periodSeconds":60,"ratePerMinute":5,"tokensPerMinute":0,"totalCap":"10"}`},
		{"removed", client.KeyUpdate{Name: str(""), TotalCap: str(""), PeriodCap: str(""), ExpiresAt: str(""), Models: []string{}},
			`{"expiresAt":null,"models":[],"name":"","periodCap":null,"periodSeconds":null,"totalCap":null}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, err := json.Marshal(&tc.u)
			if err != nil || string(b) != tc.want {
				t.Errorf("Marshal() = %s, %v, want %s", b, err, tc.want)
			}
		})
	}
}
