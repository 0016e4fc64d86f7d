package main

import (
	"bufio"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/crypto"

	"github.com/llm4agents/llm4agents/client"
	"github.com/llm4agents/llm4agents/internal/testchain"
	"github.com/llm4agents/llm4agents/internal/upstream/upstreamtest"
	"github.com/llm4agents/llm4agents/x402"
	"github.com/llm4agents/llm4agents/x402/evm/exact"
)

// Environment variables a serve config under test names, and the upstream API
// key the fake OpenAI server wants. Tests look for both secrets in everything
// run prints or returns.
const (
	serveKeyEnv    = "LLM4AGENTS_TEST_FACILITATOR_KEY"
	serveAPIKeyEnv = "LLM4AGENTS_TEST_OPENAI_KEY"
	upstreamAPIKey = "sk-test-upstream-5ecret-0123456789abcdef"
	serveBuyer     = 1
)

// serveConfig is the YAML of a `llm4agents serve` config, field by field, so
// that tests can break one thing at a time.
type serveConfig struct {
	Listen    string // default 127.0.0.1:0
	PublicURL string // omitted when empty
	Network   string // default testNetwork
	RPC       string // "rpc_url: URL" or "rpc_url_env: NAME" line; empty omits it
	Asset     string
	PayTo     string // default dev account testPayTo
	KeyLine   string // default "key_env: serveKeyEnv"
	DSN       string // default sqlite://<temp dir>/gw.db
	Upstream  string // the YAML of upstreams[0], named "up", indented 4
	Model     string // default demo
	UpModel   string // upstream_model; omitted when empty
	Credits   string // the keys of a credits: section, indented 2; omitted when empty
	Receipts  string // the keys of a receipts: section, indented 2; omitted when empty
	Log       string // the keys of a log: section, indented 2; omitted when empty
}

func (c serveConfig) yaml(tb testing.TB) string {
	tb.Helper()
	or := func(s, def string) string {
		if s == "" {
			return def
		}
		return s
	}
	var b strings.Builder
	fmt.Fprintf(&b, "listen: %s\n", or(c.Listen, "127.0.0.1:0"))
	if c.PublicURL != "" {
		fmt.Fprintf(&b, "public_url: %s\n", c.PublicURL)
	}
	fmt.Fprintf(&b, "network:\n  id: %s\n", or(c.Network, testNetwork))
	if c.RPC != "" {
		fmt.Fprintf(&b, "  %s\n", c.RPC)
	}
	fmt.Fprintf(&b, "  asset: %s\n  asset_name: USD Coin\n  asset_version: \"2\"\n  decimals: 6\n  pay_to: %s\n",
		or(c.Asset, testchain.DevAddress(5).Hex()), or(c.PayTo, testchain.DevAddress(testPayTo).Hex()))
	fmt.Fprintf(&b, "facilitator:\n  mode: in-process\n  %s\n  settle_timeout: 10s\n", or(c.KeyLine, "key_env: "+serveKeyEnv))
	fmt.Fprintf(&b, "store:\n  dsn: %s\n", or(c.DSN, "sqlite://"+filepath.Join(tb.TempDir(), "gw.db")))
	fmt.Fprintf(&b, "limits:\n  upstream_timeout: 20s\n")
	fmt.Fprintf(&b, "upstreams:\n  - name: up\n%s\n", or(c.Upstream, "    type: demo"))
	fmt.Fprintf(&b, "models:\n  - id: %s\n    upstream: up\n", or(c.Model, "demo"))
	if c.UpModel != "" {
		fmt.Fprintf(&b, "    upstream_model: %s\n", c.UpModel)
	}
	b.WriteString("    price: { input: \"1000000\", output: \"2000000\" }   # $1 / $2 per Mtok\n    max_output_tokens: 256\n")
	if c.Credits != "" {
		fmt.Fprintf(&b, "credits:\n%s\n", c.Credits)
	}
	if c.Receipts != "" {
		fmt.Fprintf(&b, "receipts:\n%s\n", c.Receipts)
	}
	if c.Log != "" {
		fmt.Fprintf(&b, "log:\n%s\n", c.Log)
	}
	return b.String()
}

// write writes the config to a fresh file and returns its path.
func (c serveConfig) write(tb testing.TB) string {
	tb.Helper()
	return writeConfig(tb, c.yaml(tb))
}

func writeConfig(tb testing.TB, content string) string {
	tb.Helper()
	path := filepath.Join(tb.TempDir(), "llm4agents.yaml")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		tb.Fatal(err)
	}
	return path
}

// serveEnv holds the facilitator key and the upstream API key.
func serveEnv() func(string) string {
	return envMap(map[string]string{serveKeyEnv: signerKeyHex, serveAPIKeyEnv: upstreamAPIKey})
}

// headerRecorder is a RoundTripper that remembers every PAYMENT-SIGNATURE it
// sends, so that tests can look for them in the gateway's logs.
type headerRecorder struct {
	mu   sync.Mutex
	sigs []string
}

func (r *headerRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	if v := req.Header.Get(x402.HeaderPaymentSignature); v != "" {
		r.mu.Lock()
		r.sigs = append(r.sigs, v)
		r.mu.Unlock()
	}
	return http.DefaultTransport.RoundTrip(req)
}

// secrets returns the payment headers sent and the signatures in them.
func (r *headerRecorder) secrets(tb testing.TB) []string {
	tb.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, h := range r.sigs {
		p, err := x402.DecodePaymentPayload(h)
		if err != nil {
			tb.Fatalf("decode a payment the transport sent: %v", err)
		}
		out = append(out, paymentSecrets(tb, p)...)
	}
	return out
}

func postJSON(tb testing.TB, c *http.Client, url, body string) *http.Response {
	tb.Helper()
	ctx, cancel := context.WithTimeout(tb.Context(), 30*time.Second)
	tb.Cleanup(cancel) // the body is read after this returns
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		tb.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		tb.Fatalf("POST %s: %v", url, err)
	}
	return resp
}

func readBody(tb testing.TB, resp *http.Response) []byte {
	tb.Helper()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	_ = resp.Body.Close() // read-only: nothing to lose
	if err != nil {
		tb.Fatalf("read body: %v", err)
	}
	return b
}

// quote makes the request unpaid and returns the 402's one payment option,
// after checking what it offers.
func quote(tb testing.TB, base, body string, tt *testToken) x402.PaymentRequirements {
	tb.Helper()
	resp := postJSON(tb, http.DefaultClient, base+"/v1/chat/completions", body)
	b := readBody(tb, resp)
	if resp.StatusCode != http.StatusPaymentRequired {
		tb.Fatalf("unpaid call: status %d, want 402: %s", resp.StatusCode, b)
	}
	h := resp.Header.Get(x402.HeaderPaymentRequired)
	if h == "" {
		tb.Fatalf("402 without %s", x402.HeaderPaymentRequired)
	}
	pr, err := x402.DecodePaymentRequired(h)
	if err != nil {
		tb.Fatalf("decode %s: %v", x402.HeaderPaymentRequired, err)
	}
	if pr.Resource == nil || pr.Resource.URL != base+"/v1/chat/completions" {
		tb.Errorf("402 resource = %+v, want %s/v1/chat/completions (the bound address)", pr.Resource, base)
	}
	if len(pr.Accepts) != 1 {
		tb.Fatalf("402 accepts %d options, want 1: %+v", len(pr.Accepts), pr.Accepts)
	}
	a := pr.Accepts[0]
	if a.Scheme != exact.Scheme || a.Network != testNetwork || a.Asset != tt.addr.Hex() ||
		a.PayTo != testchain.DevAddress(testPayTo).Hex() || a.MaxTimeoutSeconds != 300 {
		tb.Errorf("402 option = %+v, want exact on %s, asset %s, pay to %s, 300s", a, testNetwork, tt.addr.Hex(), testchain.DevAddress(testPayTo).Hex())
	}
	var extra struct{ Name, Version string }
	if err := json.Unmarshal(a.Extra, &extra); err != nil || extra.Name != "USD Coin" || extra.Version != "2" {
		tb.Errorf("402 extra = %s, want the token's EIP-712 domain", a.Extra)
	}
	if a.Amount != "10000" {
		// A short prompt at $1/$2 per Mtok quotes the one-cent minimum.
		tb.Errorf("402 amount = %s, want 10000", a.Amount)
	}
	if !strings.Contains(string(b), "payment_required") {
		tb.Errorf("402 body = %s, want an OpenAI error with code payment_required", b)
	}
	return a
}

// checkSettled checks a paid answer's PAYMENT-RESPONSE and the transaction it
// names on the node, and that payTo received exactly amount since before.
func checkSettled(tb testing.TB, tt *testToken, resp *http.Response, before *big.Int, amount string) {
	tb.Helper()
	sr, err := client.SettleResponse(resp)
	if err != nil {
		tb.Fatalf("PAYMENT-RESPONSE: %v", err)
	}
	if !sr.Success || sr.Network != testNetwork || len(sr.Transaction) != 66 {
		tb.Fatalf("PAYMENT-RESPONSE = %+v, want success on %s with a transaction hash", sr, testNetwork)
	}
	r, err := tt.node.Client.TransactionReceipt(tb.Context(), common.HexToHash(sr.Transaction))
	if err != nil || r.Status != types.ReceiptStatusSuccessful {
		tb.Errorf("receipt of %s: %v %+v, want a successful transaction", sr.Transaction, err, r)
	}
	got := new(big.Int).Sub(tt.balance(tb, testchain.DevAddress(testPayTo)), before)
	if got.String() != amount {
		tb.Errorf("payTo received %s, want exactly the quote %s", got, amount)
	}
}

// TestServeEndToEnd runs `llm4agents serve --config FILE` against anvil with
// each kind of upstream and pays through it as an agent would.
func TestServeEndToEnd(t *testing.T) {
	tests := []struct {
		name string
		// cfg returns the config's upstream; up is nil for the demo upstream.
		cfg func(t *testing.T) (serveConfig, *upstreamtest.Server)
	}{
		{name: "demo upstream", cfg: func(t *testing.T) (serveConfig, *upstreamtest.Server) {
			return serveConfig{Upstream: "    type: demo"}, nil
		}},
		{name: "openai upstream", cfg: func(t *testing.T) (serveConfig, *upstreamtest.Server) {
			up := upstreamtest.NewServer(t, upstreamtest.Config{APIKey: upstreamAPIKey})
			return serveConfig{
				Upstream: fmt.Sprintf("    type: openai\n    base_url: %s\n    api_key_env: %s\n    timeout: 10s", up.URL(), serveAPIKeyEnv),
				Model:    "gpt-4o-mini", UpModel: "gpt-4o-mini-2024-07-18",
			}, up
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tt := deployToken(t)
			cfg, up := tc.cfg(t)
			cfg.RPC, cfg.Asset = "rpc_url: "+tt.node.URL, tt.addr.Hex()
			model := cfg.Model
			if model == "" {
				model = "demo"
			}
			proc := startCmd(t, []string{"serve", "--config", cfg.write(t)}, serveEnv(), "gateway listening on ")
			base := proc.url
			payTo := testchain.DevAddress(testPayTo)
			rec := &headerRecorder{}
			tr := &client.Transport{
				Base:   rec,
				Signer: exact.NewKeySigner(testchain.DevKey(serveBuyer)),
				Policy: client.Policy{
					MaxPerRequest: big.NewInt(100_000), Budget: big.NewInt(1_000_000),
					Assets: []client.Asset{{Network: testNetwork, Address: tt.addr.Hex()}},
				},
			}
			buyer := &http.Client{Transport: tr, Timeout: 30 * time.Second}
			completion := `{"model":"` + model + `","messages":[{"role":"user","content":"What does x402 do?"}],"max_tokens":64}`
			stream := `{"model":"` + model + `","stream":true,"messages":[{"role":"user","content":"Stream a short answer."}],"max_tokens":48}`
			spent := new(big.Int)

			t.Run("listening log", func(t *testing.T) {
				var line struct {
					Msg       string `json:"msg"`
					Addr      string `json:"addr"`
					PublicURL string `json:"public_url"`
				}
				for l := range strings.Lines(proc.stderr.String()) {
					if json.Unmarshal([]byte(l), &line) == nil && line.Msg == "gateway listening" {
						break
					}
					line.Msg = ""
				}
				if line.Msg == "" || "http://"+line.Addr != base || line.PublicURL != base {
					t.Errorf("stderr has no \"gateway listening\" line with addr and public_url %s (got %+v):\n%s", base, line, proc.stderr)
				}
			})

			t.Run("unpaid is 402", func(t *testing.T) {
				quote(t, base, completion, tt)
				if up != nil && up.Calls() != 0 {
					t.Errorf("upstream called %d times for an unpaid request", up.Calls())
				}
			})

			t.Run("paid completion", func(t *testing.T) {
				q := quote(t, base, completion, tt)
				before := tt.balance(t, payTo)
				resp := postJSON(t, buyer, base+"/v1/chat/completions", completion)
				body := readBody(t, resp)
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("paid call: status %d: %s", resp.StatusCode, body)
				}
				checkSettled(t, tt, resp, before, q.Amount)
				spent.Add(spent, mustAmount(q.Amount))
				var comp struct {
					Choices []struct {
						Message struct{ Content string } `json:"message"`
					} `json:"choices"`
					Usage *struct {
						PromptTokens     int64 `json:"prompt_tokens"`
						CompletionTokens int64 `json:"completion_tokens"`
					} `json:"usage"`
				}
				if err := json.Unmarshal(body, &comp); err != nil || len(comp.Choices) == 0 || comp.Choices[0].Message.Content == "" ||
					comp.Usage == nil || comp.Usage.PromptTokens == 0 || comp.Usage.CompletionTokens == 0 {
					t.Errorf("paid call answered %s, want a completion with content and usage", body)
				}
				if up != nil {
					last := up.LastRequest()
					if got := last.Header.Get("Authorization"); got != "Bearer "+upstreamAPIKey {
						t.Errorf("upstream Authorization %.12q…, want the configured key", got)
					}
					if last.Header.Get(x402.HeaderPaymentSignature) != "" {
						t.Error("the payment reached the upstream")
					}
					if !strings.Contains(string(last.Body), `"model":"`+cfg.UpModel+`"`) {
						t.Errorf("upstream body %s, want model %s", last.Body, cfg.UpModel)
					}
				}
			})

			t.Run("paid stream", func(t *testing.T) {
				q := quote(t, base, stream, tt)
				before := tt.balance(t, payTo)
				resp := postJSON(t, buyer, base+"/v1/chat/completions", stream)
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("paid stream: status %d: %s", resp.StatusCode, readBody(t, resp))
				}
				defer func() { _ = resp.Body.Close() }()
				if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
					t.Errorf("stream Content-Type %q", ct)
				}
				var events []string
				sc := bufio.NewScanner(resp.Body)
				for sc.Scan() {
					if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
						events = append(events, d)
					}
				}
				if err := sc.Err(); err != nil {
					t.Fatalf("read stream: %v", err)
				}
				if len(events) < 3 || events[len(events)-1] != "[DONE]" {
					t.Fatalf("stream events %q, want chunks, a usage chunk and [DONE]", events)
				}
				var content strings.Builder
				for _, e := range events[:len(events)-1] {
					var ch struct {
						Choices []struct {
							Delta struct{ Content string } `json:"delta"`
						} `json:"choices"`
					}
					if err := json.Unmarshal([]byte(e), &ch); err != nil {
						t.Fatalf("stream event %q is not JSON: %v", e, err)
					}
					for _, c := range ch.Choices {
						content.WriteString(c.Delta.Content)
					}
				}
				if content.Len() == 0 {
					t.Errorf("stream carried no content: %q", events)
				}
				if u := events[len(events)-2]; !strings.Contains(u, `"usage"`) || !strings.Contains(u, `"charged":"`+q.Amount+`"`) {
					t.Errorf("last chunk %s, want usage and the charge %s", u, q.Amount)
				}
				checkSettled(t, tt, resp, before, q.Amount)
				spent.Add(spent, mustAmount(q.Amount))
			})

			t.Run("buyer spent the quotes", func(t *testing.T) {
				if tr.Spent().Cmp(spent) != 0 {
					t.Errorf("transport spent %s, want %s", tr.Spent(), spent)
				}
				if got := tt.balance(t, payTo); got.Cmp(spent) != 0 {
					t.Errorf("payTo holds %s, want %s", got, spent)
				}
				if up != nil && up.Calls() != 2 {
					t.Errorf("upstream calls = %d, want 2 (one per paid request)", up.Calls())
				}
			})

			t.Run("models", func(t *testing.T) {
				resp, err := http.Get(base + "/v1/models")
				if err != nil {
					t.Fatal(err)
				}
				b := readBody(t, resp)
				var list struct {
					Object string `json:"object"`
					Data   []struct {
						ID      string `json:"id"`
						Pricing struct {
							Asset     string `json:"asset"`
							Network   string `json:"network"`
							Decimals  int    `json:"decimals"`
							Input     string `json:"input_per_million_tokens"`
							Output    string `json:"output_per_million_tokens"`
							MaxOutput int64  `json:"max_output_tokens"`
							MinCharge string `json:"minimum_charge"`
						} `json:"pricing"`
					} `json:"data"`
				}
				if resp.StatusCode != http.StatusOK || json.Unmarshal(b, &list) != nil || len(list.Data) != 1 {
					t.Fatalf("GET /v1/models: %d %s, want one model", resp.StatusCode, b)
				}
				m := list.Data[0]
				if m.ID != model || m.Pricing.Asset != tt.addr.Hex() || m.Pricing.Network != testNetwork || m.Pricing.Decimals != 6 ||
					m.Pricing.Input != "1000000" || m.Pricing.Output != "2000000" || m.Pricing.MaxOutput != 256 || m.Pricing.MinCharge != "10000" {
					t.Errorf("model = %+v, want %s at 1000000/2000000 on %s", m, model, testNetwork)
				}
			})

			t.Run("dashboard without sign-in", func(t *testing.T) {
				status, body := getURL(t, base+"/dashboard")
				if status != http.StatusNotFound || !strings.Contains(string(body), "receipts.enabled") {
					t.Errorf("GET /dashboard without receipts: %d %s, want a 404 that says how to turn it on", status, body)
				}
			})

			t.Run("health and metrics", func(t *testing.T) {
				for _, p := range []string{"/healthz", "/readyz", "/metrics"} {
					resp, err := http.Get(base + p)
					if err != nil {
						t.Fatal(err)
					}
					b := readBody(t, resp)
					if resp.StatusCode != http.StatusOK {
						t.Errorf("GET %s: %d %s", p, resp.StatusCode, b)
					}
					if p == "/metrics" && (!strings.Contains(string(b), "# TYPE") || !strings.Contains(string(b), `llm4agents_facilitator_reorgs_total{outcome="dropped"} 0`)) {
						t.Errorf("GET /metrics is not Prometheus text with the facilitator's reorg counter:\n%.300s", b)
					}
				}
			})

			t.Run("graceful shutdown", func(t *testing.T) {
				start := time.Now()
				if err := proc.stop(); err != nil {
					t.Fatalf("run returned %v after cancel, want nil", err)
				}
				if d := time.Since(start); d > 5*time.Second {
					t.Errorf("shutdown took %s", d)
				}
				if resp, err := http.Get(base + "/healthz"); err == nil {
					_ = resp.Body.Close()
					t.Error("the gateway still answers after run returned")
				}
			})

			secrets := append(rec.secrets(t), signerKeyHex, upstreamAPIKey)
			if len(secrets) != 4+2 {
				t.Errorf("recorded %d payment secrets, want 4 (two payments)", len(secrets)-2)
			}
			assertNoSecret(t, "stdout", proc.stdout.String(), secrets...)
			assertNoSecret(t, "stderr", proc.stderr.String(), secrets...)
		})
	}
}

// TestServePublicURL: a public_url derived from listen :0 becomes the bound
// address; one written in the file is kept.
func TestServePublicURL(t *testing.T) {
	bound := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 41234}
	tests := []struct {
		listen, public, want string
	}{
		{"127.0.0.1:0", "http://127.0.0.1:0", "http://127.0.0.1:41234"},
		{":0", "http://127.0.0.1:0", "http://127.0.0.1:41234"},
		{"0.0.0.0:0", "http://127.0.0.1:0", "http://127.0.0.1:41234"},
		{"localhost:0", "http://localhost:0", "http://localhost:41234"},
		{"[::1]:0", "http://[::1]:0", "http://[::1]:41234"},
		{"127.0.0.1:0", "https://llm.example.com", "https://llm.example.com"},
		{"127.0.0.1:0", "http://127.0.0.1:9000/prefix", "http://127.0.0.1:9000/prefix"},
		{"127.0.0.1:8080", "http://127.0.0.1:8080", "http://127.0.0.1:8080"},
		{"127.0.0.1:8080", "https://llm.example.com", "https://llm.example.com"},
	}
	for _, tc := range tests {
		if got := boundPublicURL(tc.public, tc.listen, bound); got != tc.want {
			t.Errorf("boundPublicURL(%q, %q, %s) = %q, want %q", tc.public, tc.listen, bound, got, tc.want)
		}
	}
}

// TestServeExplicitPublicURL: with listen :0 and a public_url in the file, the
// 402 names the public_url, not the bound address.
func TestServeExplicitPublicURL(t *testing.T) {
	tt := deployToken(t)
	cfg := serveConfig{RPC: "rpc_url: " + tt.node.URL, Asset: tt.addr.Hex(), PublicURL: "https://llm.example.com/gw/"}
	proc := startCmd(t, []string{"serve", "--config", cfg.write(t)}, serveEnv(), "gateway listening on ")
	resp := postJSON(t, http.DefaultClient, proc.url+"/v1/chat/completions", `{"model":"demo","messages":[{"role":"user","content":"hi"}]}`)
	readBody(t, resp)
	pr, err := x402.DecodePaymentRequired(resp.Header.Get(x402.HeaderPaymentRequired))
	if resp.StatusCode != http.StatusPaymentRequired || err != nil {
		t.Fatalf("unpaid call: %d, %v", resp.StatusCode, err)
	}
	if want := "https://llm.example.com/gw/v1/chat/completions"; pr.Resource == nil || pr.Resource.URL != want {
		t.Errorf("402 resource = %+v, want %s", pr.Resource, want)
	}
}

// serveErrorCase is one refused `llm4agents serve`.
type serveErrorCase struct {
	name    string
	args    []string            // after "serve"
	getenv  func(string) string // default serveEnv()
	wantErr []string            // every one must be in the error
}

// runServeErrors runs each case and checks that it fails in bounded time with
// the wanted message, never listens, and never prints a secret.
func runServeErrors(t *testing.T, tests []serveErrorCase, secrets ...string) {
	t.Helper()
	secrets = append(secrets, signerKeyHex, signerKeyHex[:63], upstreamAPIKey)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			getenv := tc.getenv
			if getenv == nil {
				getenv = serveEnv()
			}
			stdout, stderr, err := runBounded(t, 15*time.Second, append([]string{"serve"}, tc.args...), getenv)
			if err == nil {
				t.Fatalf("run succeeded, want an error containing %q", tc.wantErr)
			}
			for _, want := range tc.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("err = %q, want it to contain %q", err, want)
				}
			}
			if !strings.HasPrefix(err.Error(), "serve: ") && !strings.Contains(err.Error(), "flag") {
				t.Errorf("err = %q, want it to start with \"serve: \"", err)
			}
			if strings.Contains(stdout, "listening") {
				t.Errorf("stdout = %q, want no listener", stdout)
			}
			assertNoSecret(t, "error", err.Error(), secrets...)
			assertNoSecret(t, "stderr", stderr, secrets...)
			assertNoSecret(t, "stdout", stdout, secrets...)
		})
	}
}

// lineOf returns the 1-based line of the first line of s that contains sub.
func lineOf(tb testing.TB, s, sub string) int {
	tb.Helper()
	n := 0
	for l := range strings.Lines(s) {
		n++
		if strings.Contains(l, sub) {
			return n
		}
	}
	tb.Fatalf("%q not in:\n%s", sub, s)
	return 0
}

// TestServeConfigErrors: hostile command lines and config files fail fast,
// before any chain I/O, saying what is wrong and never repeating a secret.
func TestServeConfigErrors(t *testing.T) {
	dead := closedPortURL(t)
	valid := serveConfig{RPC: "rpc_url: " + dead}.yaml(t)
	// An unknown key inside network, on a line the error must name.
	unknown := strings.Replace(valid, "  decimals: 6\n", "  decimals: 6\n  chain_id: 1337\n", 1)
	unknownLine := lineOf(t, unknown, "chain_id:")
	dir := t.TempDir()
	huge := writeConfig(t, valid+"# "+strings.Repeat("x", 1<<20)+"\n")
	const password = "hunter2-rpc-5ecret"
	const pathKey = "pathkey0123456789abcdef5ecret"

	tests := []serveErrorCase{
		{name: "missing --config", args: nil, wantErr: []string{"serve: --config is required"}},
		{name: "empty --config", args: []string{"--config", ""}, wantErr: []string{"serve: --config is required"}},
		{name: "extra argument", args: []string{"--config", writeConfig(t, valid), signerKeyHex}, wantErr: []string{"unexpected argument"}},
		{name: "unknown flag", args: []string{"--bogus"}, wantErr: []string{"flag provided but not defined: -bogus"}},
		{name: "nonexistent file", args: []string{"--config", filepath.Join(dir, "absent.yaml")}, wantErr: []string{"absent.yaml", "no such file or directory"}},
		{name: "a directory", args: []string{"--config", dir}, wantErr: []string{"is a directory"}},
		{name: "larger than 1 MiB", args: []string{"--config", huge}, wantErr: []string{"larger than 1048576 bytes"}},
		{name: "empty file", args: []string{"--config", writeConfig(t, "")}, wantErr: []string{"the configuration is empty"}},
		{name: "invalid YAML", args: []string{"--config", writeConfig(t, "listen: [127.0.0.1:0\nnetwork: {\n")}, wantErr: []string{"serve: ", "line "}},
		{name: "tabs for indentation", args: []string{"--config", writeConfig(t, "network:\n\tid: eip155:1337\n")}, wantErr: []string{"line 2"}},
		{name: "second document", args: []string{"--config", writeConfig(t, valid+"---\nlisten: 127.0.0.1:1\n")}, wantErr: []string{"second YAML document"}},
		{name: "unknown key", args: []string{"--config", writeConfig(t, unknown)},
			wantErr: []string{fmt.Sprintf("network.chain_id (line %d)", unknownLine), `unknown key "chain_id"`}},
		{name: "every problem at once", args: []string{"--config", writeConfig(t, strings.Replace(
			serveConfig{RPC: "rpc_url: " + dead, PayTo: "0x0000000000000000000000000000000000000000"}.yaml(t), "decimals: 6", "decimals: 60", 1))},
			wantErr: []string{"network.decimals (line 8): 60 is more than 36", "network.pay_to (line 9): is the zero address"}},
		{name: "decimal price", args: []string{"--config", writeConfig(t, strings.Replace(valid, `input: "1000000"`, `input: "0.15"`, 1))},
			wantErr: []string{"models[0].price.input", `"0.15" must be whole atomic units`, `"150000"`}},
		{name: "rpc_url with credentials", args: []string{"--config", writeConfig(t, serveConfig{RPC: "rpc_url: http://user:" + password + "@127.0.0.1:1"}.yaml(t))},
			wantErr: []string{"network.rpc_url", "must not carry credentials"}},
		{name: "base_url with credentials", args: []string{"--config", writeConfig(t, serveConfig{RPC: "rpc_url: " + dead,
			Upstream: "    base_url: https://user:" + password + "@api.example.com/v1"}.yaml(t))},
			wantErr: []string{"upstreams[0].base_url", "must not carry credentials"}},
		{name: "key in the file", args: []string{"--config", writeConfig(t, serveConfig{RPC: "rpc_url: " + dead, KeyLine: "key: " + signerKeyHex}.yaml(t))},
			wantErr: []string{`unknown key "key"`}},
		{name: "rpc_url closed port", args: []string{"--config", writeConfig(t, valid)}, wantErr: []string{"serve: read chain id", "connection refused"}},
		{name: "rpc_url_env closed port", args: []string{"--config", writeConfig(t, serveConfig{RPC: "rpc_url_env: LLM4AGENTS_TEST_RPC"}.yaml(t))},
			getenv:  envMap(map[string]string{serveKeyEnv: signerKeyHex, "LLM4AGENTS_TEST_RPC": dead + "/v3/" + pathKey}),
			wantErr: []string{"serve: read chain id", "connection refused"}},
		{name: "rpc_url_env ws closed port", args: []string{"--config", writeConfig(t, serveConfig{RPC: "rpc_url_env: LLM4AGENTS_TEST_RPC"}.yaml(t))},
			getenv:  envMap(map[string]string{serveKeyEnv: signerKeyHex, "LLM4AGENTS_TEST_RPC": "ws" + strings.TrimPrefix(dead, "http") + "/v3/" + pathKey + "?key=" + pathKey}),
			wantErr: []string{"serve: dial node", "connection refused"}},
		{name: "rpc_url_env unset", args: []string{"--config", writeConfig(t, serveConfig{RPC: "rpc_url_env: LLM4AGENTS_TEST_RPC"}.yaml(t))},
			wantErr: []string{"serve: network", "LLM4AGENTS_TEST_RPC is not set"}},
		{name: "rpc_url_env not a URL", args: []string{"--config", writeConfig(t, serveConfig{RPC: "rpc_url_env: LLM4AGENTS_TEST_RPC"}.yaml(t))},
			getenv:  envMap(map[string]string{serveKeyEnv: signerKeyHex, "LLM4AGENTS_TEST_RPC": "ftp://" + pathKey}),
			wantErr: []string{"serve: network", "LLM4AGENTS_TEST_RPC", "must be an absolute"}},
	}
	runServeErrors(t, tests, password, pathKey)
}

// TestServeChainErrors: configurations only the node, the key or the machine
// can refuse, against a real node.
func TestServeChainErrors(t *testing.T) {
	tt := deployToken(t)
	rpc := "rpc_url: " + tt.node.URL
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = busy.Close() })
	cfg := func(c serveConfig) []string {
		c.RPC = rpc
		if c.Asset == "" {
			c.Asset = tt.addr.Hex()
		}
		return []string{"--config", c.write(t)}
	}
	keyIs := func(v string) func(string) string {
		return envMap(map[string]string{serveKeyEnv: v, serveAPIKeyEnv: upstreamAPIKey})
	}
	eoa := testchain.DevAddress(5).Hex()
	other, _ := deployDomain(t, tt.node, "USD Coin", "1")
	broke := brokeKey(t)
	remote := func(c serveConfig) []string {
		c.RPC = rpc
		return []string{"--config", writeConfig(t, remoteFacilitator(t, c))}
	}
	tests := []serveErrorCase{
		{name: "network of another chain", args: cfg(serveConfig{Network: "eip155:8453"}),
			wantErr: []string{"network.id eip155:8453 does not match the node's chain id 1337 (chain at " + tt.node.URL + ")"}},
		{name: "asset without code", args: cfg(serveConfig{Asset: eoa}),
			wantErr: []string{"network.asset " + eoa + " has no contract code on eip155:1337 (chain at " + tt.node.URL + ")"}},
		{name: "asset of another version", args: cfg(serveConfig{Asset: other.Hex()}),
			wantErr: []string{`network.asset_version is "2" but the token's EIP-712 domain says "1"`}},
		{name: "signer without gas", args: cfg(serveConfig{}), getenv: keyIs(hex.EncodeToString(crypto.FromECDSA(broke))),
			wantErr: []string{"facilitator.key_env is the key of signer " + crypto.PubkeyToAddress(broke.PublicKey).Hex() + ", which has no balance on eip155:1337"}},
		{name: "remote facilitator, asset without code", args: remote(serveConfig{Asset: eoa}),
			wantErr: []string{"network.asset " + eoa + " has no contract code on eip155:1337"}},
		{name: "key env unset", args: cfg(serveConfig{}), getenv: envMap(nil),
			wantErr: []string{"facilitator key", serveKeyEnv + " is not set"}},
		{name: "key env blank", args: cfg(serveConfig{}), getenv: keyIs(" \t\n"),
			wantErr: []string{"facilitator key", serveKeyEnv + " is not set"}},
		{name: "key garbage", args: cfg(serveConfig{}), getenv: keyIs("correct horse battery staple"),
			wantErr: []string{"the facilitator key is not a 32-byte hex private key"}},
		{name: "key truncated", args: cfg(serveConfig{}), getenv: keyIs(signerKeyHex[:63]),
			wantErr: []string{"the facilitator key is not a 32-byte hex private key"}},
		{name: "key with junk after", args: cfg(serveConfig{}), getenv: keyIs(signerKeyHex + "zz"),
			wantErr: []string{"the facilitator key is not a 32-byte hex private key"}},
		{name: "key too long", args: cfg(serveConfig{}), getenv: keyIs(signerKeyHex + "00"),
			wantErr: []string{"the facilitator key is not a 32-byte hex private key"}},
		{name: "key zero", args: cfg(serveConfig{}), getenv: keyIs(strings.Repeat("0", 64)),
			wantErr: []string{"the facilitator key is not a 32-byte hex private key"}},
		{name: "key file missing", args: cfg(serveConfig{KeyLine: "key_file: " + filepath.Join(t.TempDir(), "absent.key")}),
			wantErr: []string{"facilitator key", "absent.key", "no such file"}},
		{name: "key file garbage", args: cfg(serveConfig{KeyLine: "key_file: " + writeFile(t, "0x"+signerKeyHex[:40]+"\n")}),
			wantErr: []string{"the facilitator key is not a 32-byte hex private key"}},
		{name: "upstream key env unset", getenv: envMap(map[string]string{serveKeyEnv: signerKeyHex}),
			args:    cfg(serveConfig{Upstream: "    base_url: http://127.0.0.1:1/v1\n    api_key_env: " + serveAPIKeyEnv}),
			wantErr: []string{"upstream up", serveAPIKeyEnv + " is not set"}},
		{name: "store in a missing directory", args: cfg(serveConfig{DSN: "sqlite://" + filepath.Join(t.TempDir(), "absent", "gw.db")}),
			wantErr: []string{"gw.db"}},
		{name: "listen address in use", args: cfg(serveConfig{Listen: busy.Addr().String()}),
			wantErr: []string{"serve: listen", "address already in use"}},
	}
	runServeErrors(t, tests)
}

// remoteFacilitator is the YAML of c with a remote facilitator in place of
// the in-process one.
func remoteFacilitator(tb testing.TB, c serveConfig) string {
	tb.Helper()
	in := "  mode: in-process\n  key_env: " + serveKeyEnv + "\n"
	y := c.yaml(tb)
	if !strings.Contains(y, in) {
		tb.Fatalf("no in-process facilitator in:\n%s", y)
	}
	return strings.Replace(y, in, "  mode: remote\n  url: http://127.0.0.1:1\n", 1)
}

// TestServeRemoteFacilitator: with a remote facilitator the gateway checks
// the node it is given (TestServeChainErrors has its failure), and starts
// without one, with nothing to check.
func TestServeRemoteFacilitator(t *testing.T) {
	tt := deployToken(t)
	for _, c := range []serveConfig{
		{RPC: "rpc_url: " + tt.node.URL, Asset: tt.addr.Hex()},
		{Asset: testchain.DevAddress(5).Hex()}, // no node: not checked
	} {
		proc := startCmd(t, []string{"serve", "--config", writeConfig(t, remoteFacilitator(t, c))}, envMap(nil), "gateway listening on ")
		if err := proc.stop(); err != nil {
			t.Errorf("run returned %v after cancel, want nil", err)
		}
	}
}

// TestServeNodeURLNotLogged: an RPC URL from rpc_url_env carries a provider
// key in its path; payments work through it, and when the node goes away the
// errors the gateway logs and answers never repeat the key.
func TestServeNodeURLNotLogged(t *testing.T) {
	tt := deployToken(t)
	const providerKey = "prov1der-key-0123456789abcdef"
	target, err := url.Parse(tt.node.URL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	var proxied atomic.Int64
	provider := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v3/"+providerKey || r.URL.Query().Get("apikey") != providerKey {
			http.Error(w, "unknown key", http.StatusUnauthorized)
			return
		}
		proxied.Add(1)
		r.URL.Path, r.URL.RawQuery = "/", ""
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(provider.Close)

	cfg := serveConfig{RPC: "rpc_url_env: LLM4AGENTS_TEST_RPC", Asset: tt.addr.Hex()}
	getenv := envMap(map[string]string{serveKeyEnv: signerKeyHex, "LLM4AGENTS_TEST_RPC": provider.URL + "/v3/" + providerKey + "?apikey=" + providerKey})
	proc := startCmd(t, []string{"serve", "--config", cfg.write(t)}, getenv, "gateway listening on ")
	rec := &headerRecorder{}
	tr := &client.Transport{
		Base: rec, Signer: exact.NewKeySigner(testchain.DevKey(serveBuyer)),
		Policy: client.Policy{MaxPerRequest: big.NewInt(100_000), Budget: big.NewInt(1_000_000),
			Assets: []client.Asset{{Network: testNetwork, Address: tt.addr.Hex()}}},
	}
	buyer := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	body := `{"model":"demo","messages":[{"role":"user","content":"hi"}]}`

	resp := postJSON(t, buyer, proc.url+"/v1/chat/completions", body)
	if b := readBody(t, resp); resp.StatusCode != http.StatusOK {
		t.Fatalf("paid call through the provider URL: %d %s", resp.StatusCode, b)
	}
	if proxied.Load() == 0 {
		t.Fatal("no RPC call reached the provider with its key")
	}

	provider.Close() // the node goes away
	resp = postJSON(t, buyer, proc.url+"/v1/chat/completions", strings.Replace(body, "hi", "hi again", 1))
	b := readBody(t, resp)
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(string(b), "facilitator_unavailable") {
		t.Errorf("paid call with the node gone: %d %s, want 502 facilitator_unavailable", resp.StatusCode, b)
	}
	if err := proc.stop(); err != nil {
		t.Errorf("run returned %v after cancel, want nil", err)
	}
	logs := proc.stderr.String()
	if !strings.Contains(logs, "connection refused") {
		t.Errorf("stderr does not log the node's failure:\n%s", logs)
	}
	secrets := append(rec.secrets(t), providerKey, signerKeyHex)
	assertNoSecret(t, "stderr", logs, secrets...)
	assertNoSecret(t, "stdout", proc.stdout.String(), secrets...)
	assertNoSecret(t, "response", string(b), secrets...)
}

// TestServeFallback: `serve` from YAML with a model whose upstream is down
// and whose fallback answers: the paid call is answered by the fallback,
// under its own model name, and settles once, for the model's price; the
// attempts show in /metrics by provider.
func TestServeFallback(t *testing.T) {
	tt := deployToken(t)
	up := upstreamtest.NewServer(t, upstreamtest.Config{APIKey: upstreamAPIKey, Models: []string{"backup-model"}})
	cfg := serveConfig{
		RPC: "rpc_url: " + tt.node.URL, Asset: tt.addr.Hex(),
		// Nothing listens on port 1: the first provider is unreachable.
		Upstream: "    base_url: http://127.0.0.1:1/v1\n    timeout: 5s\n    failures_to_open: 2\n    open_for: 1m",
	}
	doc := strings.Replace(cfg.yaml(t), "models:\n", fmt.Sprintf("  - name: backup\n    base_url: %s\n    api_key_env: %s\n    timeout: 5s\nmodels:\n",
		up.URL(), serveAPIKeyEnv), 1)
	doc = strings.Replace(doc, "    upstream: up\n", "    upstream: up\n    fallbacks:\n      - upstream: backup\n        upstream_model: backup-model\n", 1)
	proc := startCmd(t, []string{"serve", "--config", writeConfig(t, doc)}, serveEnv(), "gateway listening on ")
	tr := &client.Transport{
		Signer: exact.NewKeySigner(testchain.DevKey(serveBuyer)),
		Policy: client.Policy{
			MaxPerRequest: big.NewInt(100_000), Budget: big.NewInt(1_000_000),
			Assets: []client.Asset{{Network: testNetwork, Address: tt.addr.Hex()}},
		},
	}
	buyer := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	body := `{"model":"demo","messages":[{"role":"user","content":"Who answers?"}],"max_tokens":32}`
	for i := range 3 {
		q := quote(t, proc.url, body, tt)
		before := tt.balance(t, testchain.DevAddress(testPayTo))
		resp := postJSON(t, buyer, proc.url+"/v1/chat/completions", body)
		b := readBody(t, resp)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("call %d: status %d: %s", i, resp.StatusCode, b)
		}
		checkSettled(t, tt, resp, before, q.Amount)
	}
	if up.Calls() != 3 {
		t.Errorf("the fallback answered %d calls, want 3", up.Calls())
	}
	resp, err := http.Get(proc.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	m := readBody(t, resp)
	// Two failures open the first provider's circuit: the third call goes
	// to the fallback first.
	for _, want := range []string{
		`llm4agents_upstream_attempts_total{outcome="failed",provider="up"} 2`,
		`llm4agents_upstream_attempts_total{outcome="ok",provider="backup"} 3`,
	} {
		if !strings.Contains(string(m), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}
