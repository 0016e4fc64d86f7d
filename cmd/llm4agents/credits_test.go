package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/google/go-cmp/cmp"

	"github.com/llm4agents/llm4agents/internal/credits"
	"github.com/llm4agents/llm4agents/internal/devchain"
	"github.com/llm4agents/llm4agents/internal/store/sqlite"
	"github.com/llm4agents/llm4agents/internal/testchain"
	"github.com/llm4agents/llm4agents/x402"
	"github.com/llm4agents/llm4agents/x402/receipt"
)

// accountGateway is the gateway's account side for the CLI: the real
// sign-in and key routes (internal/credits on SQLite) and the receipt
// signer with its well-known document, plus top-up, balance and receipt
// routes written here to the contract the gateway serves them by.
type accountGateway struct {
	URL    string
	auth   *credits.Auth
	signer *credits.Signer
	rec    *payRecorder

	mu       sync.Mutex
	bearers  []string // every Authorization value received
	receipts [][]byte // envelopes GET /v1/receipts serves, newest first
	// listQueries are the query strings GET /v1/receipts received.
	listQueries []string
	keys        map[string]bool
	// nonceDomain, when set, replaces the domain of the nonce answer.
	nonceDomain string
	// ask, when set, is the amount the top-up's 402 asks instead of the one
	// requested.
	ask string
}

func startAccountGateway(tb testing.TB) *accountGateway {
	tb.Helper()
	db, err := sqlite.Open(tb.Context(), filepath.Join(tb.TempDir(), "gw.db"), nil)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = db.Close() })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	origin := "http://" + ln.Addr().String()
	auth, err := credits.NewAuth(db, origin, 1337, nil)
	if err != nil {
		tb.Fatal(err)
	}
	key, err := crypto.GenerateKey()
	if err != nil {
		tb.Fatal(err)
	}
	signer, err := credits.NewSigner(key, big.NewInt(1337))
	if err != nil {
		tb.Fatal(err)
	}
	g := &accountGateway{URL: origin, auth: auth, signer: signer, keys: map[string]bool{}}
	accounts := credits.NewHandler(auth, db, nil)
	mux := http.NewServeMux()
	mux.Handle("/v1/auth/nonce", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if g.nonceDomain == "" {
			accounts.ServeHTTP(w, r)
			return
		}
		rw := httptest.NewRecorder()
		accounts.ServeHTTP(rw, r)
		var n map[string]any
		_ = json.Unmarshal(rw.Body.Bytes(), &n)
		n["domain"] = g.nonceDomain
		_ = json.NewEncoder(w).Encode(n)
	}))
	mux.Handle("/v1/auth/verify", accounts)
	mux.Handle("/v1/keys", g.keepKeys(accounts))
	mux.Handle("/v1/keys/", accounts)
	mux.Handle(receipt.WellKnownPath, credits.WellKnownHandler(signer.WellKnown()))
	mux.HandleFunc("POST /v1/credits/topup", g.topUp)
	mux.HandleFunc("GET /v1/credits/balance", g.owner(func(w http.ResponseWriter, owner string) {
		writeTestJSON(w, map[string]string{"account": owner, "asset": fakeAsset, "balance": "1500000", "held": "20000"})
	}))
	listReceipts := g.owner(func(w http.ResponseWriter, _ string) {
		g.mu.Lock()
		defer g.mu.Unlock()
		data := make([]json.RawMessage, len(g.receipts))
		for i, b := range g.receipts {
			data[i] = b
		}
		writeTestJSON(w, map[string]any{"object": "list", "data": data})
	})
	mux.HandleFunc("GET /v1/receipts", func(w http.ResponseWriter, r *http.Request) {
		g.mu.Lock()
		g.listQueries = append(g.listQueries, r.URL.RawQuery)
		g.mu.Unlock()
		listReceipts(w, r)
	})
	mux.HandleFunc("GET /v1/receipts/{id}", g.owner(func(w http.ResponseWriter, _ string) {
		g.mu.Lock()
		defer g.mu.Unlock()
		if len(g.receipts) == 0 {
			http.NotFound(w, nil)
			return
		}
		_, _ = w.Write(g.receipts[0])
	}))
	g.rec = &payRecorder{next: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.mu.Lock()
		if v := r.Header.Get("Authorization"); v != "" {
			g.bearers = append(g.bearers, v)
		}
		g.mu.Unlock()
		mux.ServeHTTP(w, r)
	})}
	srv := &httptest.Server{Listener: ln, Config: &http.Server{Handler: g.rec, ReadHeaderTimeout: 10 * time.Second}}
	srv.Start()
	tb.Cleanup(srv.Close)
	return g
}

// keepKeys notes the keys POST /v1/keys creates, which the balance and
// receipt routes then accept.
func (g *accountGateway) keepKeys(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rw := httptest.NewRecorder()
		next.ServeHTTP(rw, r)
		var k struct {
			Key string `json:"key"`
		}
		if json.Unmarshal(rw.Body.Bytes(), &k) == nil && k.Key != "" {
			g.mu.Lock()
			g.keys[k.Key] = true
			g.mu.Unlock()
		}
		maps.Copy(w.Header(), rw.Header())
		w.WriteHeader(rw.Code)
		_, _ = w.Write(rw.Body.Bytes())
	})
}

// owner authenticates a bearer session token or a known sk-l4a- key.
func (g *accountGateway) owner(serve func(w http.ResponseWriter, owner string)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		token, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if s, err := g.auth.Session(r.Context(), token); err == nil {
			serve(w, s.Owner)
			return
		}
		g.mu.Lock()
		known := g.keys[token]
		g.mu.Unlock()
		if !known {
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = io.WriteString(w, `{"error":{"message":"sign in or send an API key","type":"authentication_error","code":"session_required"}}`)
			return
		}
		serve(w, "0xkeyowner")
	}
}

// topUp asks a 402 for the amount requested and credits the payer.
func (g *accountGateway) topUp(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Amount string `json:"amount"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, "bad body", http.StatusBadRequest)
		return
	}
	ask := req.Amount
	if g.ask != "" {
		ask = g.ask
	}
	header := r.Header.Get(x402.HeaderPaymentSignature)
	if header == "" {
		h, err := x402.EncodeHeader(x402.PaymentRequired{X402Version: 2, Resource: &x402.ResourceInfo{URL: g.URL + r.URL.Path},
			Accepts: []x402.PaymentRequirements{fakeOffer("exact", fakeNetwork, ask)}})
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set(x402.HeaderPaymentRequired, h)
		w.WriteHeader(http.StatusPaymentRequired)
		return
	}
	p, err := x402.DecodePaymentPayload(header)
	if err != nil {
		http.Error(w, "bad payment", http.StatusBadRequest)
		return
	}
	acc, _ := p.AcceptedRequirements()
	sr, err := x402.EncodeHeader(x402.SettleResponse{Success: true, Transaction: fakeTx, Network: fakeNetwork})
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set(x402.HeaderPaymentResponse, sr)
	writeTestJSON(w, map[string]any{"account": strings.ToLower(devchain.Address(demoBuyer).Hex()), "credited": acc.Amount,
		"balance": acc.Amount, "transaction": fakeTx, "ledger_seq": 7})
}

func writeTestJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// addReceipt signs a receipt for amount with the gateway's key (or, when
// forger is not nil, with that key instead) and serves it first.
func (g *accountGateway) addReceipt(tb testing.TB, amount int64, forge func(*receipt.Receipt)) receipt.Receipt {
	tb.Helper()
	r := receipt.Receipt{
		RequestID: common.BytesToHash(crypto.Keccak256([]byte(fmt.Sprint(amount, len(g.receipts))))),
		Account:   devchain.Address(demoBuyer), Model: "demo",
		InputTokens: big.NewInt(12), OutputTokens: big.NewInt(30), Amount: big.NewInt(amount),
		BalanceAfter: big.NewInt(1_000_000 - amount), LedgerSeq: big.NewInt(int64(len(g.receipts) + 1)), IssuedAt: 1_800_000_000,
		Rail: receipt.RailCredits,
	}
	signed, err := g.signer.Sign(r)
	if err != nil {
		tb.Fatal(err)
	}
	if forge != nil {
		forge(&signed.Receipt) // changed after signing: the signature no longer covers it
	}
	env, err := signed.JSON()
	if err != nil {
		tb.Fatal(err)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.receipts = append([][]byte{env}, g.receipts...)
	return signed.Receipt
}

// secrets are what the CLI must never print: the wallet keys and every
// bearer (session token or API key) the gateway received.
func (g *accountGateway) secrets() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := devKeysHex()
	for _, b := range g.bearers {
		out = append(out, strings.TrimPrefix(b, "Bearer "))
	}
	return out
}

func (g *accountGateway) checkClean(tb testing.TB, stdout, stderr string, err error, allowed ...string) {
	tb.Helper()
	for _, s := range g.secrets() {
		skip := false
		for _, a := range allowed {
			skip = skip || s == a
		}
		if skip {
			continue
		}
		assertNoSecret(tb, "stdout", stdout, s)
		assertNoSecret(tb, "stderr", stderr, s)
		if err != nil {
			assertNoSecret(tb, "the error", err.Error(), s)
		}
	}
}

var skKey = regexp.MustCompile(`sk-l4a-[A-Za-z0-9_-]+`)

// TestKeysLifecycle signs in with the wallet against the real sign-in and
// key routes, creates a key (shown once, with a warning), lists it,
// revokes it, and never prints the session token or the wallet key.
func TestKeysLifecycle(t *testing.T) {
	g := startAccountGateway(t)
	gw := "--gateway=" + g.URL
	stdout, stderr, err := runBuyer(t, []string{"keys", "create", gw, "--name", "ci", "--total-cap", "1.5", "--period-cap", "250000", "--period", "24h", "--model", "demo", "--rate", "60", "--tokens-per-minute", "90000"}, buyerEnv(), "")
	if err != nil {
		t.Fatalf("keys create: %v\n%s", err, stderr)
	}
	key := strings.TrimSpace(stdout)
	if !skKey.MatchString(key) || strings.Count(stdout, "\n") != 1 {
		t.Fatalf("stdout %q, want the key alone on one line", stdout)
	}
	for _, want := range []string{"shown once and cannot be shown again", `"ci"; total cap 1.50; 0.25 per 24h0m0s; models demo; 60/min; 90000 tokens/min`} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	g.checkClean(t, stdout, stderr, err, key)

	stdout, stderr, err = runBuyer(t, []string{"keys", "list", gw}, buyerEnv(), "")
	if err != nil {
		t.Fatalf("keys list: %v\n%s", err, stderr)
	}
	id := strings.Fields(stdout)[0]
	if !strings.Contains(stdout, "total cap 1.50") || strings.Contains(stdout, "REVOKED") || strings.Contains(stdout, "sk-l4a-") {
		t.Errorf("list:\n%s", stdout)
	}
	g.checkClean(t, stdout, stderr, err)

	// update: a lowered cap, a cap removed, new rates; the rest is kept.
	for _, step := range []struct {
		args []string
		want string
	}{
		{[]string{"--total-cap", "0.5", "--rate", "5"}, `"ci"; total cap 0.50; 0.25 per 24h0m0s; models demo; 5/min; 90000 tokens/min`},
		{[]string{"--period-cap", "none", "--tokens-per-minute", "0", "--any-model"}, `"ci"; total cap 0.50; 5/min`},
		{[]string{"--total-cap", "none", "--name", "renamed", "--model", "demo"}, `"renamed"; models demo; 5/min`},
	} {
		stdout, stderr, err = runBuyer(t, append([]string{"keys", "update", gw, id}, step.args...), buyerEnv(), "")
		if err != nil || stdout != "updated "+id+" "+step.want+"\n" {
			t.Errorf("keys update %v: %v\n%s%s\nwant %s", step.args, err, stdout, stderr, step.want)
		}
		g.checkClean(t, stdout, stderr, err, key)
	}
	reqs := g.rec.requests()
	if last := reqs[len(reqs)-1]; last.Method != http.MethodPatch || string(last.Body) != `{"models":["demo"],"name":"renamed","totalCap":null}` {
		t.Errorf("last request %s %s", last.Method, last.Body)
	}

	stdout, stderr, err = runBuyer(t, []string{"keys", "revoke", gw, id}, buyerEnv(), "")
	if err != nil || !strings.HasPrefix(stdout, "revoked "+id) {
		t.Fatalf("keys revoke: %v\n%s%s", err, stdout, stderr)
	}
	stdout, _, err = runBuyer(t, []string{"keys", "list", "--json", gw}, buyerEnv(), "")
	var list struct {
		Data []struct {
			ID        string  `json:"id"`
			RevokedAt *string `json:"revokedAt"`
		} `json:"data"`
	}
	if err != nil || json.Unmarshal([]byte(stdout), &list) != nil || len(list.Data) != 1 || list.Data[0].RevokedAt == nil {
		t.Errorf("list --json after revoke: %v\n%s", err, stdout)
	}
	g.checkClean(t, stdout, "", err)

	_, _, err = runBuyer(t, []string{"keys", "update", gw, id, "--rate", "1"}, buyerEnv(), "")
	if err == nil || !strings.Contains(err.Error(), "409") || !strings.Contains(err.Error(), "key_revoked") {
		t.Errorf("update of a revoked key: %v", err)
	}
	_, _, err = runBuyer(t, []string{"keys", "update", gw, "nosuchkey1", "--rate", "1"}, buyerEnv(), "")
	if err == nil || !strings.Contains(err.Error(), "404") || !strings.Contains(err.Error(), "key_not_found") {
		t.Errorf("update of an unknown id: %v", err)
	}
	_, _, err = runBuyer(t, []string{"keys", "revoke", gw, "nosuchkey1"}, buyerEnv(), "")
	if err == nil || !strings.Contains(err.Error(), "404") || !strings.Contains(err.Error(), "key_not_found") {
		t.Errorf("revoke of an unknown id: %v", err)
	}
}

// TestKeysSignInStaysOnGateway: a nonce answer that names another domain is
// never signed, and no verify request is sent.
func TestKeysSignInStaysOnGateway(t *testing.T) {
	g := startAccountGateway(t)
	g.nonceDomain = "bank.example"
	_, _, err := runBuyer(t, []string{"keys", "list", "--gateway", g.URL}, buyerEnv(), "")
	if err == nil || !strings.Contains(err.Error(), "not signing") || !strings.Contains(err.Error(), "public_url") {
		t.Fatalf("err = %v, want a refusal to sign that says what to do", err)
	}
	for _, r := range g.rec.requests() {
		if r.Path == "/v1/auth/verify" {
			t.Error("a sign-in was sent for another domain")
		}
	}
}

// TestCreditsTopUp pays the top-up once, for the amount asked and no more.
func TestCreditsTopUp(t *testing.T) {
	asset := "--asset=" + fakeNetwork + "/" + fakeAsset
	t.Run("paid", func(t *testing.T) {
		g := startAccountGateway(t)
		stdout, stderr, err := runBuyer(t, []string{"credits", "topup", "--gateway", g.URL, asset, "--amount", "1.5"}, buyerEnv(), "")
		if err != nil {
			t.Fatalf("topup: %v\n%s", err, stderr)
		}
		if want := "credited 1.50 (1500000 atomic units) to 0x"; !strings.Contains(stdout, want) || !strings.Contains(stdout, fakeTx) {
			t.Errorf("stdout %q, want %q and the transaction", stdout, want)
		}
		if n := len(g.rec.payments()); n != 1 {
			t.Errorf("%d payments, want 1", n)
		}
		noSecrets(t, g.rec, stdout, stderr, err)
	})
	t.Run("asked more than the amount", func(t *testing.T) {
		g := startAccountGateway(t)
		g.ask = "1500001"
		stdout, stderr, err := runBuyer(t, []string{"credits", "topup", "--gateway", g.URL, asset, "--amount", "1500000"}, buyerEnv(), "")
		if err == nil || !strings.Contains(err.Error(), "nothing was signed or paid") {
			t.Fatalf("err = %v, want a refusal", err)
		}
		if !strings.Contains(stderr, "over_maximum") && !strings.Contains(stderr, "over the per-request maximum") {
			t.Errorf("stderr does not say why:\n%s", stderr)
		}
		if n := len(g.rec.payments()); n != 0 {
			t.Errorf("%d payments, want none", n)
		}
		noSecrets(t, g.rec, stdout, stderr, err)
	})
}

// TestCreditsBalance asks with a key from the environment, and with the
// wallet's sign-in.
func TestCreditsBalance(t *testing.T) {
	g := startAccountGateway(t)
	key, _, err := runBuyer(t, []string{"keys", "create", "--gateway", g.URL}, buyerEnv(), "")
	if err != nil {
		t.Fatal(err)
	}
	key = strings.TrimSpace(key)
	for name, getenv := range map[string]func(string) string{
		"api key": envMap(map[string]string{apiKeyEnv: key}),
		"wallet":  buyerEnv(),
	} {
		t.Run(name, func(t *testing.T) {
			stdout, stderr, err := runBuyer(t, []string{"credits", "balance", "--gateway", g.URL}, getenv, "")
			if err != nil {
				t.Fatalf("balance: %v\n%s", err, stderr)
			}
			for _, want := range []string{"balance 1.50 (1500000 atomic units)", "held    0.02 (20000 atomic units)"} {
				if !strings.Contains(stdout, want) {
					t.Errorf("stdout lacks %q:\n%s", want, stdout)
				}
			}
			g.checkClean(t, stdout, stderr, err)
		})
	}
	_, _, err = runBuyer(t, []string{"credits", "balance", "--gateway", g.URL}, envMap(map[string]string{apiKeyEnv: "sk-l4a-unknown"}), "")
	if err == nil || !strings.Contains(err.Error(), "401") || strings.Contains(err.Error(), "sk-l4a-unknown") {
		t.Errorf("unknown key: %v", err)
	}
}

// TestCreditsReceipts verifies each receipt against the gateway's published
// signer; a receipt changed after signing fails, and so does the command.
func TestCreditsReceipts(t *testing.T) {
	g := startAccountGateway(t)
	g.addReceipt(t, 10_000, nil)
	g.addReceipt(t, 20_000, nil)
	stdout, stderr, err := runBuyer(t, []string{"credits", "receipts", "--gateway", g.URL}, buyerEnv(), "")
	if err != nil {
		t.Fatalf("receipts: %v\n%s", err, stderr)
	}
	want := "receipt verified (signer " + g.signer.Address().Hex() + ")"
	if strings.Count(stdout, want) != 2 || !strings.Contains(stdout, "amount   0.02 (20000 atomic units)") {
		t.Errorf("stdout:\n%s", stdout)
	}
	g.checkClean(t, stdout, stderr, err)

	g.addReceipt(t, 30_000, func(r *receipt.Receipt) { r.Amount = big.NewInt(3) })
	stdout, _, err = runBuyer(t, []string{"credits", "receipts", "--json", "--gateway", g.URL}, buyerEnv(), "")
	if err == nil || !strings.Contains(err.Error(), "1 of 3 receipts do not verify") {
		t.Fatalf("err = %v, want one failure", err)
	}
	var out struct {
		Data []struct {
			Verified bool   `json:"verified"`
			Error    string `json:"error"`
		} `json:"data"`
		Failed int `json:"failed"`
	}
	if jerr := json.Unmarshal([]byte(stdout), &out); jerr != nil || out.Failed != 1 || out.Data[0].Verified || out.Data[0].Error == "" || !out.Data[1].Verified {
		t.Errorf("--json: %v\n%s", jerr, stdout)
	}

	stdout, _, err = runBuyer(t, []string{"credits", "receipts", "--id", "0xabc", "--gateway", g.URL}, buyerEnv(), "")
	if err == nil || !strings.Contains(stdout, "receipt NOT verified") {
		t.Errorf("--id of the forged receipt: %v\n%s", err, stdout)
	}
}

// TestCreditsReceiptsKeyID: signed in with the wallet, --key-id asks the
// gateway for one key's receipts (key_id=); without it, for every key's.
func TestCreditsReceiptsKeyID(t *testing.T) {
	keyID := "0x" + strings.Repeat("ab", 32)
	tests := []struct {
		name      string
		args      []string
		wantQuery string
	}{
		{"every key", nil, "limit=20"},
		{"one key", []string{"--key-id", keyID}, "key_id=" + keyID + "&limit=20"},
		{"one key, a page", []string{"--key-id=" + keyID, "--limit", "5"}, "key_id=" + keyID + "&limit=5"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := startAccountGateway(t)
			g.addReceipt(t, 10_000, nil)
			args := append([]string{"credits", "receipts", "--gateway", g.URL}, tc.args...)
			stdout, stderr, err := runBuyer(t, args, buyerEnv(), "")
			if err != nil || strings.Count(stdout, "receipt verified") != 1 {
				t.Fatalf("receipts: %v\n%s%s", err, stdout, stderr)
			}
			g.mu.Lock()
			got := slices.Clone(g.listQueries)
			g.mu.Unlock()
			if diff := cmp.Diff([]string{tc.wantQuery}, got); diff != "" {
				t.Errorf("GET /v1/receipts queries (-want +got):\n%s", diff)
			}
		})
	}
}

// TestCreditsReceiptsHelp: the help says who sees which receipts.
func TestCreditsReceiptsHelp(t *testing.T) {
	_, stderr, err := runBuyer(t, []string{"credits", "receipts", "-h"}, buyerEnv(), "")
	if !errors.Is(err, flag.ErrHelp) {
		t.Errorf("err = %v, want flag.ErrHelp", err)
	}
	for _, want := range []string{"every key's receipts", "only the receipts of that key's own calls", "-key-id"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("help lacks %q:\n%s", want, stderr)
		}
	}
}

// TestPayVerifiesReceipt: pay checks a response's X-Llm4agents-Receipt
// against the origin's well-known signer.
func TestPayVerifiesReceipt(t *testing.T) {
	g := startAccountGateway(t)
	good := g.addReceipt(t, 10_000, nil)
	other, err := crypto.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	forger, err := credits.NewSigner(other, big.NewInt(1337))
	if err != nil {
		t.Fatal(err)
	}
	forged, err := forger.Sign(good)
	if err != nil {
		t.Fatal(err)
	}
	signed, err := g.signer.Sign(good)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, wantStderr, wantErr string
		r                         credits.SignedReceipt
		garbage                   bool
	}{
		{name: "signed by the gateway", r: signed, wantStderr: "receipt verified (signer " + g.signer.Address().Hex() + ")"},
		{name: "signed by another key", r: forged, wantStderr: "receipt NOT verified", wantErr: "receipt does not verify"},
		{name: "garbage", garbage: true, wantStderr: "receipt NOT verified: client: malformed receipt", wantErr: "receipt does not verify"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mux := http.NewServeMux()
			mux.Handle(receipt.WellKnownPath, credits.WellKnownHandler(g.signer.WellKnown()))
			mux.HandleFunc("/v1/chat/completions", func(w http.ResponseWriter, _ *http.Request) {
				h := "bm90IGEgcmVjZWlwdA=="
				if !tc.garbage {
					var err error
					if h, err = tc.r.Header(); err != nil {
						t.Error(err)
					}
				}
				w.Header().Set(receipt.Header, h)
				_, _ = io.WriteString(w, `{"ok":true}`)
			})
			srv := httptest.NewServer(mux)
			defer srv.Close()
			stdout, stderr, err := runBuyer(t, []string{"pay", "--json", "-d", demoChatBody, srv.URL + "/v1/chat/completions"}, buyerEnv(), "")
			if !strings.Contains(stderr, tc.wantStderr) {
				t.Errorf("stderr lacks %q:\n%s", tc.wantStderr, stderr)
			}
			if (tc.wantErr == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("err = %v, want %q", err, tc.wantErr)
			}
			var res struct {
				Receipt *struct {
					Receipt  json.RawMessage `json:"receipt"`
					Verified bool            `json:"verified"`
					Signer   string          `json:"signer"`
				} `json:"receipt"`
			}
			if jerr := json.Unmarshal([]byte(stdout), &res); jerr != nil || res.Receipt == nil {
				t.Fatalf("--json: %v\n%s", jerr, stdout)
			}
			if res.Receipt.Verified != (tc.wantErr == "") || (!tc.garbage && !strings.Contains(string(res.Receipt.Receipt), `"amount":"10000"`)) {
				t.Errorf("--json receipt %+v", res.Receipt)
			}
		})
	}
}

// TestAccountBadInput: flags and arguments are checked before anything is
// sent, and no error repeats a secret.
func TestAccountBadInput(t *testing.T) {
	g := startAccountGateway(t)
	gw := "--gateway=" + g.URL
	tests := []struct {
		args    []string
		env     map[string]string
		wantErr string
	}{
		{[]string{"keys"}, nil, "a subcommand is required"},
		{[]string{"keys", "rotate", gw}, nil, `unknown subcommand "rotate"`},
		{[]string{"credits", "spend", gw}, nil, `unknown subcommand "spend"`},
		{[]string{"keys", "list"}, nil, "--gateway URL is required"},
		{[]string{"keys", "list", "--gateway", g.URL + "/v1?token=secret"}, nil, "give the origin only"},
		{[]string{"keys", "list", gw, "extra"}, nil, "takes no arguments"},
		{[]string{"keys", "revoke", gw, "../../v1/keys"}, nil, "give one key id"},
		{[]string{"keys", "revoke", gw}, nil, "give one key id"},
		{[]string{"keys", "create", gw, "--total-cap", "0.0000001"}, nil, "more than 6 decimals"},
		{[]string{"keys", "update", gw, "--rate", "1"}, nil, "give one key id"},
		{[]string{"keys", "update", gw, "a/b", "--rate", "1"}, nil, "give one key id"},
		{[]string{"keys", "update", gw, "0x01"}, nil, "nothing to change"},
		{[]string{"keys", "update", gw, "0x01", "--json"}, nil, "nothing to change"},
		{[]string{"keys", "update", gw, "0x01", "--total-cap", "0.0000001"}, nil, "more than 6 decimals"},
		{[]string{"keys", "update", gw, "0x01", "--total-cap", "nothing"}, nil, "--total-cap"},
		{[]string{"keys", "update", gw, "0x01", "--period-cap", "1"}, nil, "go together"},
		{[]string{"keys", "update", gw, "0x01", "--period", "1h"}, nil, "go together"},
		{[]string{"keys", "update", gw, "0x01", "--period-cap", "none", "--period", "1h"}, nil, "takes no --period"},
		{[]string{"keys", "update", gw, "0x01", "--period-cap", "1", "--period", "1500ms"}, nil, "whole number of seconds"},
		{[]string{"keys", "update", gw, "0x01", "--expires", "tomorrow"}, nil, "--expires"},
		{[]string{"keys", "update", gw, "0x01", "--rate", "-1"}, nil, "--rate"},
		{[]string{"keys", "update", gw, "0x01", "--tokens-per-minute", "99999999999"}, nil, "--tokens-per-minute must be 0"},
		{[]string{"keys", "update", gw, "0x01", "--model", "a", "--any-model"}, nil, "exclude each other"},
		{[]string{"keys", "update", gw, "0x01", "--model", ","}, nil, "--any-model"},
		{[]string{"keys", "create", gw, "--period-cap", "1"}, nil, "go together"},
		{[]string{"keys", "create", gw, "--expires", "tomorrow"}, nil, "--expires"},
		{[]string{"keys", "create", gw, "--rate", "-1"}, nil, "--rate"},
		{[]string{"keys", "create", gw, "--tokens-per-minute", "-5"}, nil, "--tokens-per-minute"},
		{[]string{"keys", "create", gw, "--tokens-per-minute", "1e9"}, nil, "tokens-per-minute"},
		{[]string{"keys", "create", gw, "--tokens-per-minute", "99999999999"}, nil, "--tokens-per-minute must be 0 (no limit) to 10000000000"},
		{[]string{"keys", "list", gw}, map[string]string{}, "no wallet key"},
		{[]string{"credits", "topup", gw}, nil, "--amount is required"},
		{[]string{"credits", "topup", gw, "--amount", "0"}, nil, "positive amount"},
		{[]string{"credits", "topup", gw, "--amount", "1", "--budget", "5"}, nil, "bounded by --amount alone"},
		{[]string{"credits", "receipts", gw, "--limit", "0"}, nil, "--limit 0"},
		{[]string{"credits", "receipts", gw, "--id", "a/b"}, nil, "not a request id"},
		{[]string{"credits", "receipts", gw, "--key-id", "a/b"}, nil, "--key-id is not a key id"},
		{[]string{"credits", "receipts", gw, "--key-id", "0x1&limit=1000"}, nil, "--key-id is not a key id"},
		{[]string{"credits", "receipts", gw, "--key-id", "sk-l4a-secretvalue"}, nil, "not an API key or token"},
		{[]string{"credits", "receipts", gw, "--key-id", "0x01", "--id", "0x02"}, nil, "not both"},
		{[]string{"credits", "receipts", gw, "--key-id", "0x01"}, map[string]string{apiKeyEnv: "sk-l4a-secretvalue"}, "needs a wallet sign-in"},
		{[]string{"credits", "balance", gw}, map[string]string{apiKeyEnv: "not-a-key-secretvalue"}, "not an sk-l4a- key"},
	}
	for _, tc := range tests {
		t.Run(strings.ReplaceAll(strings.Join(tc.args, " "), g.URL, "GW"), func(t *testing.T) {
			env := map[string]string{walletKeyEnv: buyerKeyHex}
			if tc.env != nil {
				env = tc.env
			}
			before := len(g.rec.requests())
			_, _, err := runBuyer(t, tc.args, envMap(env), "")
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want %q", err, tc.wantErr)
			}
			if strings.Contains(err.Error(), "secret") {
				t.Errorf("error repeats a secret: %v", err)
			}
			if tc.wantErr != "404" && len(g.rec.requests()) != before {
				t.Errorf("%d requests sent on bad input", len(g.rec.requests())-before)
			}
		})
	}
}

// TestCreditsServeGateway runs the commands against `serve` with credits on,
// on a real node: a top-up paid on chain, a key made by a wallet sign-in,
// the balance asked with that key, and a call paid from credit whose receipt
// pay verifies.
func TestCreditsServeGateway(t *testing.T) {
	tt := deployToken(t)
	rk, err := crypto.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	receiptHex := fmt.Sprintf("%x", crypto.FromECDSA(rk))
	cfg := serveConfig{RPC: "rpc_url: " + tt.node.URL, Asset: tt.addr.Hex(), Credits: creditsOn}
	proc := startCmd(t, []string{"serve", "--config", cfg.write(t)}, envMap(map[string]string{serveKeyEnv: signerKeyHex, serveReceiptKeyEnv: receiptHex}), "gateway listening on ")
	gw := "--gateway=" + proc.url
	wallet := envMap(map[string]string{walletKeyEnv: fmt.Sprintf("%x", crypto.FromECDSA(testchain.DevKey(serveBuyer)))})

	stdout, stderr, err := runBuyer(t, []string{"credits", "topup", gw, "--asset", testNetwork + "/" + tt.addr.Hex(), "--amount", "0.5"}, wallet, "")
	if err != nil || !strings.Contains(stdout, "credited 0.50 (500000 atomic units)") {
		t.Fatalf("topup: %v\n%s%s", err, stdout, stderr)
	}
	stdout, stderr, err = runBuyer(t, []string{"keys", "create", gw, "--name", "e2e"}, wallet, "")
	if err != nil {
		t.Fatalf("keys create: %v\n%s", err, stderr)
	}
	key := strings.TrimSpace(stdout)
	withKey := envMap(map[string]string{apiKeyEnv: key})
	stdout, stderr, err = runBuyer(t, []string{"credits", "balance", gw}, withKey, "")
	if err != nil || !strings.Contains(stdout, "balance 0.50 (500000 atomic units)") {
		t.Fatalf("balance: %v\n%s%s", err, stdout, stderr)
	}
	_, stderr, err = runBuyer(t, []string{"pay", "-H", "Authorization: Bearer " + key, "-d", demoChatBody, proc.url + "/v1/chat/completions"}, wallet, "")
	if err != nil || !strings.Contains(stderr, "receipt verified (signer "+crypto.PubkeyToAddress(rk.PublicKey).Hex()+")") {
		t.Fatalf("pay from credit: %v\n%s", err, stderr)
	}
	assertNoSecret(t, "stderr", stderr, key)
	stdout, stderr, err = runBuyer(t, []string{"credits", "receipts", gw}, withKey, "")
	if err != nil || strings.Count(stdout, "receipt verified") != 1 {
		t.Fatalf("receipts: %v\n%s%s", err, stdout, stderr)
	}
}
