package gateway_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"maps"
	"math/big"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llm4agents/llm4agents/client"
	"github.com/llm4agents/llm4agents/internal/chain"
	"github.com/llm4agents/llm4agents/internal/facilitator"
	"github.com/llm4agents/llm4agents/internal/gateway"
	"github.com/llm4agents/llm4agents/internal/pricing"
	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/internal/store/sqlite"
	"github.com/llm4agents/llm4agents/internal/testchain"
	"github.com/llm4agents/llm4agents/internal/upstream"
	"github.com/llm4agents/llm4agents/internal/upstream/upstreamtest"
	"github.com/llm4agents/llm4agents/x402"
	"github.com/llm4agents/llm4agents/x402/evm/exact"
	"github.com/llm4agents/llm4agents/x402/evm/upto"
)

const (
	network   = "eip155:1337"
	signerIdx = 8
	payToIdx  = 9
	buyerIdx  = 1
)

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

// env is a gateway on a simulated chain with the in-process facilitator, a
// SQLite store, and a fake OpenAI upstream that counts calls.
type env struct {
	db    *sqlite.DB
	chain *testchain.Simulated
	up    *upstreamtest.Server
	gw    *gateway.Server
	srv   *httptest.Server
}

// price makes output expensive (200 atomic units a token) so that max_tokens
// moves the quote: 32 tokens cost under a cent (quoted 10000), 256 cost 60000.
var price = pricing.Price{Input: 1_000_000, Output: 200_000_000}

func newEnv(t *testing.T) *env {
	t.Helper()
	return newEnvWith(t, nil)
}

// newEnvWith is newEnv with the gateway's facilitator wrapped by wrap, when
// not nil.
func newEnvWith(t *testing.T, wrap func(*facilitator.Facilitator) gateway.Facilitator) *env {
	t.Helper()
	return newEnvSettle(t, 10*time.Second, wrap)
}

// newEnvSettle is newEnvWith with the gateway's settle timeout.
func newEnvSettle(t *testing.T, settleTimeout time.Duration, wrap func(*facilitator.Facilitator) gateway.Facilitator) *env {
	t.Helper()
	return newEnvConfig(t, settleTimeout, wrap, nil)
}

// newEnvConfig is newEnvSettle with the gateway's Config passed through
// edit, when not nil, before the gateway is made.
func newEnvConfig(t *testing.T, settleTimeout time.Duration, wrap func(*facilitator.Facilitator) gateway.Facilitator, edit func(*gateway.Config)) *env {
	t.Helper()
	return newEnvStore(t, settleTimeout, wrap, edit, nil)
}

// newEnvStore is newEnvConfig with the gateway's store passed through
// payments, when not nil (to hide what a backend can do from the gateway).
func newEnvStore(t *testing.T, settleTimeout time.Duration, wrap func(*facilitator.Facilitator) gateway.Facilitator, edit func(*gateway.Config), payments func(store.Payments) store.Payments) *env {
	t.Helper()
	sim := testchain.NewSimulated(t)
	sim.StartAutoCommit(t, 10*time.Millisecond)
	db, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "gw.db"), discard())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := db.Close(); err != nil {
			t.Error(err)
		}
	})
	sender, err := chain.NewSender(sim.Client, sim.Keys[signerIdx], sim.ChainID,
		chain.SenderConfig{MaxFeePerGas: big.NewInt(1e12), PollInterval: 10 * time.Millisecond}, discard())
	if err != nil {
		t.Fatal(err)
	}
	fac, err := facilitator.New(facilitator.Config{
		Network: network,
		Assets:  []facilitator.Asset{{Address: sim.Token, Name: "USD Coin", Version: "2"}},
		// upto is served whether or not the gateway offers it (withUpto).
		Schemes: []string{exact.Scheme, upto.Scheme},
	}, sim.Client, sender, db, discard())
	if err != nil {
		t.Fatal(err)
	}
	up := upstreamtest.NewServer(t, upstreamtest.Config{APIKey: "sk-upstream-secret"})
	prov, err := upstream.NewOpenAI(upstream.OpenAIConfig{BaseURL: up.URL(), APIKey: "sk-upstream-secret", Timeout: 5 * time.Second}, discard())
	if err != nil {
		t.Fatal(err)
	}
	e := &env{db: db, chain: sim, up: up}
	var gwFac gateway.Facilitator = fac
	if wrap != nil {
		gwFac = wrap(fac)
	}
	e.srv = httptest.NewUnstartedServer(nil)
	cfg := gateway.Config{
		PublicURL: "http://" + e.srv.Listener.Addr().String(),
		Network:   network, Asset: sim.Token.Hex(), AssetName: "USD Coin", AssetVersion: "2", Decimals: 6,
		PayTo: sim.Addr(payToIdx).Hex(), UpstreamTimeout: 5 * time.Second, SettleTimeout: settleTimeout,
		Models: []gateway.Model{{ID: "demo", UpstreamModel: "demo-upstream", Provider: prov, Price: price, MaxOutputTokens: 256}},
	}
	if edit != nil {
		edit(&cfg)
	}
	var gwStore store.Payments = db
	if payments != nil {
		gwStore = payments(db)
	}
	gw, err := gateway.New(cfg, gwFac, gwStore, discard())
	if err != nil {
		t.Fatal(err)
	}
	e.gw = gw
	e.srv.Config.Handler = gw
	e.srv.Start()
	t.Cleanup(e.srv.Close)
	return e
}

// payer returns an http.Client that pays as dev account i.
func (e *env) payer(i int) (*http.Client, *client.Transport) {
	tr := &client.Transport{
		Signer: exact.NewKeySigner(e.chain.Keys[i]),
		Policy: client.Policy{
			MaxPerRequest: big.NewInt(1_000_000), Budget: big.NewInt(100_000_000),
			Assets: []client.Asset{{Network: network, Address: e.chain.Token.Hex()}},
		},
	}
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}, tr
}

const chatBody = `{"model":"demo","messages":[{"role":"user","content":"Say hello"}],"max_tokens":32}`

// post posts a chat completion body with c and hdr.
func (e *env) post(t *testing.T, c *http.Client, body string, hdr http.Header) *http.Response {
	t.Helper()
	return postJSON(t, c, e.srv.URL+"/v1/chat/completions", body, hdr)
}

// postJSON posts a JSON body to url with c and hdr.
func postJSON(t *testing.T, c *http.Client, url, body string, hdr http.Header) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	maps.Copy(req.Header, hdr)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func readAll(t *testing.T, resp *http.Response) []byte {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close() // after reading, a close error tells a test nothing
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func errorCode(t *testing.T, b []byte) string {
	t.Helper()
	var eb struct {
		Error struct {
			Code string `json:"code"`
			Type string `json:"type"`
		} `json:"error"`
	}
	if err := json.Unmarshal(b, &eb); err != nil {
		t.Fatalf("not an OpenAI error body: %s", b)
	}
	return eb.Error.Code
}

func TestUnpaidGets402WithQuote(t *testing.T) {
	e := newEnv(t)
	resp := e.post(t, http.DefaultClient, chatBody, nil)
	body := readAll(t, resp)
	if resp.StatusCode != http.StatusPaymentRequired {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	if got := resp.Header.Get("Cache-Control"); got != "no-store" {
		t.Errorf("Cache-Control = %q", got)
	}
	pr, err := x402.DecodePaymentRequired(resp.Header.Get(x402.HeaderPaymentRequired))
	if err != nil {
		t.Fatal(err)
	}
	if len(pr.Accepts) != 1 || pr.Accepts[0].Scheme != "exact" || pr.Accepts[0].Network != network || pr.Accepts[0].MaxTimeoutSeconds != 300 {
		t.Fatalf("accepts = %+v", pr.Accepts)
	}
	// Prompt tokens are few, max_tokens 32: far below a cent, so one cent.
	if pr.Accepts[0].Amount != "10000" {
		t.Errorf("amount = %s, want 10000 (one cent)", pr.Accepts[0].Amount)
	}
	if !strings.HasSuffix(pr.Resource.URL, "/v1/chat/completions") {
		t.Errorf("resource = %+v", pr.Resource)
	}
	if code := errorCode(t, body); code != "payment_required" {
		t.Errorf("code = %s", code)
	}
	if !bytes.Contains(body, []byte("0.01 USDC")) {
		t.Errorf("body does not state the price: %s", body)
	}
	if e.up.Calls() != 0 {
		t.Errorf("upstream called %d times for an unpaid request", e.up.Calls())
	}
}

func TestPaidCompletion(t *testing.T) {
	e := newEnv(t)
	c, tr := e.payer(buyerIdx)
	before := e.chain.BalanceOf(t, e.chain.Addr(payToIdx))
	resp := e.post(t, c, chatBody, http.Header{"Authorization": {"Bearer unused"}, "Cookie": {"session=secret"}})
	body := readAll(t, resp)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	sr, err := client.SettleResponse(resp)
	if err != nil || !sr.Success || sr.Transaction == "" {
		t.Fatalf("settle response %+v, %v", sr, err)
	}
	if got := new(big.Int).Sub(e.chain.BalanceOf(t, e.chain.Addr(payToIdx)), before); got.Int64() != 10000 {
		t.Errorf("payTo received %s, want 10000", got)
	}
	if tr.Spent().Int64() != 10000 {
		t.Errorf("client spent %s", tr.Spent())
	}
	var comp struct {
		Choices []struct {
			Message struct{ Content string } `json:"message"`
		} `json:"choices"`
		Usage *struct {
			PromptTokens int64 `json:"prompt_tokens"`
		} `json:"usage"`
		X struct {
			Charged     string `json:"charged"`
			Transaction string `json:"transaction"`
		} `json:"x_llm4agents"`
	}
	if err := json.Unmarshal(body, &comp); err != nil {
		t.Fatalf("body %s: %v", body, err)
	}
	if len(comp.Choices) == 0 || comp.Usage == nil || comp.X.Charged != "10000" || comp.X.Transaction != sr.Transaction {
		t.Errorf("completion = %s", body)
	}
	if resp.Header.Get("X-Llm4agents-Charged") != "10000" {
		t.Errorf("charged header = %q", resp.Header.Get("X-Llm4agents-Charged"))
	}
	// What reached the upstream: its own key, the upstream model name, never the
	// client's credentials or payment (D11).
	last := e.up.LastRequest()
	for _, h := range []string{"Cookie", "Payment-Signature", "X-Payment", "Sign-In-With-X"} {
		if last.Header.Get(h) != "" {
			t.Errorf("upstream received %s", h)
		}
	}
	if got := last.Header.Get("Authorization"); got != "Bearer sk-upstream-secret" {
		t.Errorf("upstream Authorization = %q", got)
	}
	if !bytes.Contains(last.Body, []byte(`"model":"demo-upstream"`)) {
		t.Errorf("upstream body = %s", last.Body)
	}
	if e.up.Calls() != 1 {
		t.Errorf("upstream calls = %d", e.up.Calls())
	}
}

func TestDefaultCapInjected(t *testing.T) {
	e := newEnv(t)
	c, _ := e.payer(buyerIdx)
	resp := e.post(t, c, `{"model":"demo","messages":[{"role":"user","content":"hi"}]}`, nil)
	readAll(t, resp)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if !bytes.Contains(e.up.LastRequest().Body, []byte(`"max_tokens":256`)) {
		t.Errorf("upstream body lacks the default cap: %s", e.up.LastRequest().Body)
	}
}

func TestPaidStream(t *testing.T) {
	e := newEnv(t)
	c, _ := e.payer(buyerIdx)
	resp := e.post(t, c, `{"model":"demo","stream":true,"messages":[{"role":"user","content":"Say hello"}],"max_tokens":32}`, nil)
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, readAll(t, resp))
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("content type %q", ct)
	}
	sr, err := client.SettleResponse(resp)
	if err != nil || !sr.Success {
		t.Fatalf("settle response %+v, %v", sr, err)
	}
	var events []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			events = append(events, d)
		}
	}
	if len(events) < 3 || events[len(events)-1] != "[DONE]" {
		t.Fatalf("events = %q", events)
	}
	usage := events[len(events)-2]
	if !strings.Contains(usage, `"usage"`) || !strings.Contains(usage, `"x_llm4agents"`) || !strings.Contains(usage, `"charged":"10000"`) {
		t.Errorf("usage chunk = %s", usage)
	}
	if !bytes.Contains(e.up.LastRequest().Body, []byte(`"include_usage":true`)) {
		t.Errorf("include_usage not injected: %s", e.up.LastRequest().Body)
	}
}

// signedHeader builds a PAYMENT-SIGNATURE for the 402 a request gets.
func (e *env) signedHeader(t *testing.T, body string, i int) string {
	t.Helper()
	return encodeHeader(t, e.signedPayload(t, body, i))
}

// signedPayload answers the 402 of body with a payment of dev account i.
func (e *env) signedPayload(t *testing.T, body string, i int) *x402.PaymentPayload {
	t.Helper()
	resp := e.post(t, http.DefaultClient, body, nil)
	readAll(t, resp)
	pr, err := x402.DecodePaymentRequired(resp.Header.Get(x402.HeaderPaymentRequired))
	if err != nil {
		t.Fatal(err)
	}
	p, err := exact.NewPaymentPayload(t.Context(), exact.NewKeySigner(e.chain.Keys[i]), pr, 0, exact.SignOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// encodeHeader is v as a header value.
func encodeHeader(t *testing.T, v any) string {
	t.Helper()
	h, err := x402.EncodeHeader(v)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// TestSamePaymentTwice: a second presentation of one authorization, later or
// concurrent, is refused before the upstream.
func TestSamePaymentTwice(t *testing.T) {
	e := newEnv(t)
	h := e.signedHeader(t, chatBody, buyerIdx)
	before := e.chain.BalanceOf(t, e.chain.Addr(payToIdx))

	const n = 16
	codes := make(chan int, n)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, e.srv.URL+"/v1/chat/completions", strings.NewReader(chatBody))
			req.Header.Set(x402.HeaderPaymentSignature, h)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				codes <- -1
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			codes <- resp.StatusCode
		})
	}
	wg.Wait()
	close(codes)
	count := map[int]int{}
	for c := range codes {
		count[c]++
	}
	// One pays; a twin that arrives after it finished is a replay of its
	// recorded answer (D14, D15: the same PAYMENT-SIGNATURE is the proof).
	if count[http.StatusOK] < 1 || count[http.StatusOK]+count[http.StatusConflict] != n {
		t.Errorf("statuses = %v, want 200s (one paid, the rest replays) and 409s", count)
	}
	if e.up.Calls() != 1 {
		t.Errorf("upstream calls = %d, want 1", e.up.Calls())
	}
	if got := new(big.Int).Sub(e.chain.BalanceOf(t, e.chain.Addr(payToIdx)), before); got.Int64() != 10000 {
		t.Errorf("payTo received %s, want 10000", got)
	}
	// Later, once more: the recovery lookup (D0, before verify) finds the
	// promoted answer, and the same PAYMENT-SIGNATURE proves control (D15):
	// the recorded answer, no upstream call, no second transfer.
	resp := e.post(t, http.DefaultClient, chatBody, http.Header{x402.HeaderPaymentSignature: {h}})
	b := readAll(t, resp)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Llm4agents-Replay") != "promoted" {
		t.Errorf("later replay: %d %s", resp.StatusCode, b)
	}
	if got := new(big.Int).Sub(e.chain.BalanceOf(t, e.chain.Addr(payToIdx)), before); got.Int64() != 10000 {
		t.Errorf("payTo received %s after the replay, want 10000", got)
	}
	if e.up.Calls() != 1 {
		t.Errorf("upstream calls after replay = %d", e.up.Calls())
	}
}

// TestBadInput: each refused, none charged, no upstream call.
func TestBadInput(t *testing.T) {
	e := newEnv(t)
	otherModelHdr := func() string {
		// A payment made for a different price: a longer max_tokens quote.
		return e.signedHeader(t, `{"model":"demo","messages":[{"role":"user","content":"x"}],"max_tokens":256}`, buyerIdx)
	}
	big := `{"model":"demo","messages":[{"role":"user","content":"` + strings.Repeat("a", 2<<20) + `"}]}`
	tests := []struct {
		name   string
		body   string
		hdr    http.Header
		path   string
		status int
		code   string
	}{
		{"malformed json", `{"model":`, nil, "", 400, "invalid_request"},
		{"not an object", `[1,2]`, nil, "", 400, "invalid_request"},
		{"no messages", `{"model":"demo","messages":[]}`, nil, "", 400, "invalid_request"},
		{"unknown model", `{"model":"gpt-9","messages":[{"role":"user","content":"x"}]}`, nil, "", 404, "model_not_found"},
		{"max_tokens above cap", `{"model":"demo","messages":[{"role":"user","content":"x"}],"max_tokens":100000}`, nil, "", 400, "max_tokens_too_large"},
		{"negative max_tokens", `{"model":"demo","messages":[{"role":"user","content":"x"}],"max_tokens":-1}`, nil, "", 400, "invalid_request"},
		{"body over limit", big, nil, "", 413, "request_too_large"},
		{"garbage payment header", chatBody, http.Header{x402.HeaderPaymentSignature: {"%%%"}}, "", 400, "invalid_payment"},
		{"url-safe payment header", chatBody, http.Header{x402.HeaderPaymentSignature: {"eyJ4NDAyVmVyc2lvbiI6Mn0_-"}}, "", 400, "invalid_payment"},
		{"payment for another price", chatBody, http.Header{x402.HeaderPaymentSignature: {otherModelHdr()}}, "", 402, "invalid_exact_evm_accepted_mismatch"},
		{"key and payment", chatBody, http.Header{x402.HeaderPaymentSignature: {"x"}, "Authorization": {"Bearer sk-l4a-abc"}}, "", 400, "key_and_payment"},
		{"payment on a free route", "", http.Header{x402.HeaderPaymentSignature: {"x"}}, "/v1/models", 400, "payment_not_required"},
		{"unknown route", "", nil, "/v1/nothing", 404, "not_found"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			method, path := http.MethodPost, "/v1/chat/completions"
			if tc.path != "" {
				method, path = http.MethodGet, tc.path
			}
			req, _ := http.NewRequestWithContext(t.Context(), method, e.srv.URL+path, strings.NewReader(tc.body))
			maps.Copy(req.Header, tc.hdr)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b := readAll(t, resp)
			if resp.StatusCode != tc.status || errorCode(t, b) != tc.code {
				t.Errorf("got %d %s, want %d %s", resp.StatusCode, b, tc.status, tc.code)
			}
		})
	}
	if e.up.Calls() != 0 {
		t.Errorf("upstream called %d times for bad input", e.up.Calls())
	}
	if got := e.chain.BalanceOf(t, e.chain.Addr(payToIdx)); got.Sign() != 0 {
		t.Errorf("payTo received %s for bad input", got)
	}
}

// TestUpstreamFailureChargesNothing: upstream faults settle nothing and give
// the authorization back, so the same payment works once the upstream heals.
func TestUpstreamFailureChargesNothing(t *testing.T) {
	faults := []struct {
		name   string
		fault  upstreamtest.Fault
		stream bool
	}{
		{"500", upstreamtest.Fault{Status: 500}, false},
		{"429", upstreamtest.Fault{Status: 429}, false},
		{"hang", upstreamtest.Fault{Hang: true}, false},
		{"stream 500", upstreamtest.Fault{Status: 500}, true},
		{"stream garbage before first chunk", upstreamtest.Fault{Garbage: true}, true},
		{"stream dropped before first chunk", upstreamtest.Fault{Drop: true}, true},
	}
	for _, f := range faults {
		t.Run(f.name, func(t *testing.T) {
			e := newEnv(t)
			body := chatBody
			if f.stream {
				body = `{"model":"demo","stream":true,"messages":[{"role":"user","content":"Say hello"}],"max_tokens":32}`
			}
			h := e.signedHeader(t, body, buyerIdx)
			e.up.SetFault(f.fault)
			resp := e.post(t, http.DefaultClient, body, http.Header{x402.HeaderPaymentSignature: {h}})
			b := readAll(t, resp)
			if resp.StatusCode < 400 || resp.StatusCode == http.StatusPaymentRequired {
				t.Fatalf("status %d: %s", resp.StatusCode, b)
			}
			if resp.Header.Get(x402.HeaderPaymentResponse) != "" {
				t.Errorf("a failed upstream call carries PAYMENT-RESPONSE")
			}
			if got := e.chain.BalanceOf(t, e.chain.Addr(payToIdx)); got.Sign() != 0 {
				t.Fatalf("charged %s for a failed upstream", got)
			}
			// The upstream heals; the same authorization now pays, once.
			e.up.SetFault(upstreamtest.Fault{})
			resp = e.post(t, http.DefaultClient, body, http.Header{x402.HeaderPaymentSignature: {h}})
			b = readAll(t, resp)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("retry with the same payment: %d %s", resp.StatusCode, b)
			}
			if got := e.chain.BalanceOf(t, e.chain.Addr(payToIdx)); got.Int64() != 10000 {
				t.Errorf("payTo received %s, want 10000", got)
			}
		})
	}
}

// TestClientGoneBeforeSettlement: the client leaves while the upstream is still
// producing its first chunk; nothing is broadcast, the upstream is cancelled.
func TestClientGoneBeforeSettlement(t *testing.T) {
	e := newEnv(t)
	body := `{"model":"demo","stream":true,"messages":[{"role":"user","content":"Say hello"}],"max_tokens":32}`
	h := e.signedHeader(t, body, buyerIdx)
	e.up.SetFault(upstreamtest.Fault{HeaderDelay: 2 * time.Second})
	// The client leaves once the upstream has the request (under load the
	// gateway may take long to get there; a fixed client timeout could leave
	// before the upstream is called at all).
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go func() {
		defer cancel()
		for deadline := time.Now().Add(30 * time.Second); e.up.Calls() == 0 && time.Now().Before(deadline); {
			time.Sleep(5 * time.Millisecond)
		}
	}()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, e.srv.URL+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set(x402.HeaderPaymentSignature, h)
	if resp, err := http.DefaultClient.Do(req); err == nil {
		_ = resp.Body.Close()
		t.Fatalf("request finished with %d; want the client to give up", resp.StatusCode)
	}
	select {
	case <-e.up.ClientGone():
	case <-time.After(5 * time.Second):
		t.Error("the upstream request was not cancelled")
	}
	time.Sleep(200 * time.Millisecond)
	if got := e.chain.BalanceOf(t, e.chain.Addr(payToIdx)); got.Sign() != 0 {
		t.Errorf("charged %s for a client that left before settlement", got)
	}
	// The authorization is free again.
	e.up.SetFault(upstreamtest.Fault{})
	resp := e.post(t, http.DefaultClient, body, http.Header{x402.HeaderPaymentSignature: {h}})
	readAll(t, resp)
	if resp.StatusCode != http.StatusOK {
		t.Errorf("same payment after the client left: %d", resp.StatusCode)
	}
}

func TestModels(t *testing.T) {
	e := newEnv(t)
	resp, err := http.Get(e.srv.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	b := readAll(t, resp)
	var list struct {
		Data []struct {
			ID      string `json:"id"`
			Pricing struct {
				Input     string `json:"input_per_million_tokens"`
				MinCharge string `json:"minimum_charge"`
			} `json:"pricing"`
		} `json:"data"`
	}
	if err := json.Unmarshal(b, &list); err != nil || len(list.Data) != 1 {
		t.Fatalf("models = %s", b)
	}
	if m := list.Data[0]; m.ID != "demo" || m.Pricing.Input != "1000000" || m.Pricing.MinCharge != "10000" {
		t.Errorf("model = %+v", m)
	}
	for _, p := range []string{"/healthz", "/readyz", "/metrics"} {
		resp, err := http.Get(e.srv.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		readAll(t, resp)
		if resp.StatusCode != 200 {
			t.Errorf("%s: %d", p, resp.StatusCode)
		}
	}
}
