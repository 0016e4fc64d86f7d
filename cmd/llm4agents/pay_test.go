package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/google/go-cmp/cmp"

	"github.com/llm4agents/llm4agents/internal/config"
	"github.com/llm4agents/llm4agents/internal/devchain"
	"github.com/llm4agents/llm4agents/x402"
	"github.com/llm4agents/llm4agents/x402/receipt"
)

// buyerKeyHex is the demo buyer's key as LLM4AGENTS_WALLET_KEY holds it.
var buyerKeyHex = "0x" + hex.EncodeToString(crypto.FromECDSA(devchain.Key(demoBuyer)))

func buyerEnv() func(string) string { return envMap(map[string]string{walletKeyEnv: buyerKeyHex}) }

// payRecorder is an http.Handler in front of a seller that keeps every request
// it sees, so that tests can count the payments sent and look for their
// headers in the CLI's output.
type payRecorder struct {
	next http.Handler
	mu   sync.Mutex
	reqs []recordedRequest
}

type recordedRequest struct {
	Method, Path string
	Header       http.Header
	Body         []byte
}

func (r *payRecorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	req.Body = io.NopCloser(bytes.NewReader(body))
	r.mu.Lock()
	r.reqs = append(r.reqs, recordedRequest{Method: req.Method, Path: req.URL.Path, Header: req.Header.Clone(), Body: body})
	r.mu.Unlock()
	r.next.ServeHTTP(w, req)
}

func (r *payRecorder) requests() []recordedRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]recordedRequest(nil), r.reqs...)
}

// payments returns the PAYMENT-SIGNATURE values the seller received.
func (r *payRecorder) payments() []string {
	var out []string
	for _, q := range r.requests() {
		if v := q.Header.Get(x402.HeaderPaymentSignature); v != "" {
			out = append(out, v)
		}
	}
	return out
}

// demoGateway is what `llm4agents demo` runs, kept up for a test: the embedded
// chain with its token, the buyer DevKey(demoBuyer) holding 10 tokens, and the
// gateway with the demo model on a loopback port, behind a payRecorder.
type demoGateway struct {
	URL   string // http://127.0.0.1:port
	chain *devchain.Chain
	payTo common.Address
	rec   *payRecorder
}

func startDemoGateway(tb testing.TB) *demoGateway {
	tb.Helper()
	ctx := context.Background() // the gateway outlives this function; cleanups stop it
	log := slog.New(slog.DiscardHandler)
	c, err := devchain.Start(ctx, 20*time.Millisecond, log)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = c.Close() })
	if err := c.Mint(ctx, devchain.Address(demoBuyer), big.NewInt(10_000_000)); err != nil {
		tb.Fatal(err)
	}
	cfg := config.Demo()
	payTo := devchain.Address(demoPayTo)
	cfg.Network.Asset, cfg.Network.PayTo = c.Token.Hex(), payTo.Hex()
	cfg.Log.Anchor.Contract = c.Anchor.Hex()
	cfg.Store.DSN = "sqlite://" + filepath.Join(tb.TempDir(), "demo.db")
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	cfg.PublicURL = "http://" + ln.Addr().String()
	if err := cfg.Validate(); err != nil {
		tb.Fatal(err)
	}
	parts, err := buildGateway(ctx, cfg, c.Client, devchain.Key(demoFacilitator), envMap(nil), log)
	if err != nil {
		tb.Fatal(err)
	}
	rec := &payRecorder{next: parts.server}
	srvCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- serve(srvCtx, ln, rec, 5*time.Second) }()
	tb.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			tb.Errorf("gateway: %v", err)
		}
		parts.close()
	})
	return &demoGateway{URL: cfg.PublicURL, chain: c, payTo: payTo, rec: rec}
}

func (g *demoGateway) balance(tb testing.TB, a common.Address) *big.Int {
	tb.Helper()
	b, err := g.chain.BalanceOf(tb.Context(), a)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// assetFlag allows the demo token, and nothing else.
func (g *demoGateway) assetFlag() string {
	return "--asset=" + devchain.Network + "/" + g.chain.Token.Hex()
}

// runBuyer runs pay or chat to completion with stdin, and fails the test if it
// takes longer than limit.
func runBuyer(tb testing.TB, args []string, getenv func(string) string, stdin string) (stdout, stderr string, err error) {
	tb.Helper()
	const limit = 60 * time.Second
	ctx, cancel := context.WithTimeout(tb.Context(), limit)
	defer cancel()
	var out, errOut syncBuffer
	e := env{getenv: getenv, stdout: &out, stderr: &errOut}
	done := make(chan error, 1)
	go func() {
		switch args[0] {
		case "pay":
			done <- runPay(ctx, args[1:], e, strings.NewReader(stdin))
		case "chat":
			done <- runChat(ctx, args[1:], e, strings.NewReader(stdin))
		default:
			done <- run(ctx, args, getenv, &out, &errOut)
		}
	}()
	select {
	case err = <-done:
	case <-time.After(limit + 5*time.Second):
		tb.Fatalf("%q still running after %s", args, limit)
	}
	return out.String(), errOut.String(), err
}

// noSecrets checks that no key and no payment header the seller received
// shows up in the output or the error.
func noSecrets(tb testing.TB, rec *payRecorder, stdout, stderr string, err error) {
	tb.Helper()
	secrets := append(devKeysHex(), rec.payments()...)
	for _, p := range rec.payments() {
		// The signature inside the header, in case something prints it decoded.
		if pp, derr := x402.DecodePaymentPayload(p); derr == nil {
			var w struct {
				Signature string `json:"signature"`
			}
			if json.Unmarshal(pp.Payload, &w) == nil && w.Signature != "" {
				secrets = append(secrets, w.Signature)
			}
		}
	}
	assertNoSecret(tb, "stdout", stdout, secrets...)
	assertNoSecret(tb, "stderr", stderr, secrets...)
	if err != nil {
		assertNoSecret(tb, "the error", err.Error(), secrets...)
	}
}

const demoChatBody = `{"model":"demo","messages":[{"role":"user","content":"What does x402 do?"}],"max_tokens":32}`

var txLine = regexp.MustCompile(`payment of 10000 atomic units = 0\.01 to 0xa0Ee7A142d267C1f36714E4a8F75612F20a79720 on eip155:1337: settled in transaction (0x[0-9a-f]{64}); spent 0\.01 of 1\.00`)

// TestPayDemoGateway pays the demo gateway from the command line: a paid
// completion, its --json form and a --dry-run, each checked against the chain.
func TestPayDemoGateway(t *testing.T) {
	g := startDemoGateway(t)
	url := g.URL + "/v1/chat/completions"

	t.Run("paid completion", func(t *testing.T) {
		before := g.balance(t, g.payTo)
		paid := len(g.rec.payments())
		stdout, stderr, err := runBuyer(t, []string{"pay", g.assetFlag(), "-d", demoChatBody, url}, buyerEnv(), "")
		if err != nil {
			t.Fatalf("pay: %v\nstderr:\n%s", err, stderr)
		}
		var comp struct {
			Object  string `json:"object"`
			Choices []struct {
				Message struct{ Content string } `json:"message"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(stdout), &comp); err != nil || comp.Object != "chat.completion" || len(comp.Choices) == 0 ||
			!strings.HasPrefix(comp.Choices[0].Message.Content, "This is the llm4agents demo model") {
			t.Errorf("stdout is not the demo completion (%v):\n%s", err, stdout)
		}
		if !txLine.MatchString(stderr) {
			t.Errorf("stderr lacks the settlement summary %s:\n%s", txLine, stderr)
		}
		if got := new(big.Int).Sub(g.balance(t, g.payTo), before); got.Int64() != 10_000 {
			t.Errorf("payTo received %s, want 10000", got)
		}
		if n := len(g.rec.payments()) - paid; n != 1 {
			t.Errorf("%d payments sent, want 1", n)
		}
		noSecrets(t, g.rec, stdout, stderr, err)
	})

	t.Run("json", func(t *testing.T) {
		stdout, stderr, err := runBuyer(t, []string{"pay", "--json", g.assetFlag(), "-d", demoChatBody, url}, buyerEnv(), "")
		if err != nil {
			t.Fatalf("pay --json: %v\nstderr:\n%s", err, stderr)
		}
		var res struct {
			Request         string
			Status          int
			Paid            *optionJSON
			PaymentResponse *x402.SettleResponse
			Charged         string
			// Receipt: the payment's signed receipt (docs/DESIGN.md D30),
			// verified against the gateway's published signer.
			Receipt *struct {
				Receipt   *receipt.Receipt
				Signature string
				Verified  bool
				Signer    string
			}
			Headers       map[string]string
			Body          json.RawMessage
			Spent, Budget string
			Error         string
		}
		dec := json.NewDecoder(strings.NewReader(stdout))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&res); err != nil {
			t.Fatalf("stdout is not one JSON result: %v\n%s", err, stdout)
		}
		if dec.More() {
			t.Errorf("stdout holds more than one JSON value:\n%s", stdout)
		}
		var body struct {
			Object string `json:"object"`
		}
		if err := json.Unmarshal(res.Body, &body); err != nil || body.Object != "chat.completion" {
			t.Errorf("body = %s (%v), want the completion as JSON", res.Body, err)
		}
		if res.Request != "POST "+url || res.Status != 200 || res.Error != "" {
			t.Errorf("result = %+v", res)
		}
		want := &optionJSON{Index: new(0), Scheme: "exact", Network: devchain.Network, Asset: g.chain.Token.Hex(), Amount: "10000", AmountTokens: "0.01",
			PayTo: g.payTo.Hex(), MaxTimeoutSeconds: 300, Extra: json.RawMessage(`{"name":"USD Coin","version":"2"}`), Pay: true}
		if diff := cmp.Diff(want, res.Paid); diff != "" {
			t.Errorf("paid (-want +got):\n%s", diff)
		}
		if res.PaymentResponse == nil || !res.PaymentResponse.Success || len(res.PaymentResponse.Transaction) != 66 {
			t.Errorf("paymentResponse = %+v, want a success with a transaction", res.PaymentResponse)
		}
		if res.Receipt == nil || !res.Receipt.Verified || res.Receipt.Receipt == nil || res.Receipt.Receipt.Rail != receipt.RailExact ||
			res.Receipt.Receipt.Amount.Int64() != 10_000 {
			t.Errorf("receipt = %+v, want the payment's, verified", res.Receipt)
		}
		if res.Headers["payment-response"] == "" || !strings.HasPrefix(res.Headers["content-type"], "application/json") {
			t.Errorf("headers = %v, want payment-response and content-type", res.Headers)
		}
		if res.Spent != "10000" || res.Budget != "1000000" || res.Charged != "10000" {
			t.Errorf("charged %s, spent %s of %s, want 10000, 10000 of 1000000", res.Charged, res.Spent, res.Budget)
		}
		noSecrets(t, g.rec, stdout, stderr, err)
	})

	t.Run("dry run", func(t *testing.T) {
		before := g.balance(t, g.payTo)
		paid := len(g.rec.payments())
		// No key: a dry run signs nothing.
		stdout, stderr, err := runBuyer(t, []string{"pay", "--dry-run", g.assetFlag(), "-d", demoChatBody, url}, envMap(nil), "")
		if err != nil {
			t.Fatalf("pay --dry-run: %v\nstderr:\n%s", err, stderr)
		}
		want := []string{
			"POST " + url,
			`402 Payment Required ("Payment required"): 1 payment option(s); amounts in whole tokens read at 6 decimals (--decimals)`,
			"resource " + url + ` ("chat completion with demo: 13 prompt tokens, up to 32 output tokens")`,
			"[0] exact on eip155:1337",
			"    amount   10000 atomic units = 0.01",
			`    asset    ` + g.chain.Token.Hex() + ` ("USD Coin" version "2", as the server names it)`,
			"    pay to   0xa0Ee7A142d267C1f36714E4a8F75612F20a79720",
			"    valid    300s",
			"    verdict  PAY: would be paid",
			"policy: at most 0.10 per payment, 1.00 in all; assets eip155:1337/" + g.chain.Token.Hex() + "; pay to any address; upto prefer",
			"dry run: nothing was signed or paid.",
		}
		checkLines(t, stdout, want)
		if stderr != "" {
			t.Errorf("stderr = %q, want nothing", stderr)
		}
		if n := len(g.rec.payments()) - paid; n != 0 {
			t.Errorf("a dry run sent %d payments", n)
		}
		if got := g.balance(t, g.payTo); got.Cmp(before) != 0 {
			t.Errorf("a dry run moved %s", new(big.Int).Sub(got, before))
		}
	})

	t.Run("dry run json", func(t *testing.T) {
		stdout, _, err := runBuyer(t, []string{"pay", "--dry-run", "--json", "--max-per-payment", "5000", g.assetFlag(), "-d", demoChatBody, url}, envMap(nil), "")
		if err != nil {
			t.Fatal(err)
		}
		var res payJSON
		if err := json.Unmarshal([]byte(stdout), &res); err != nil {
			t.Fatalf("stdout is not JSON: %v\n%s", err, stdout)
		}
		if !res.DryRun || res.Status != 402 || len(res.Options) != 1 {
			t.Fatalf("result = %+v", res)
		}
		if o := res.Options[0]; o.Pay || o.RefusalError != "over_maximum" || o.Amount != "10000" || o.AmountTokens != "0.01" {
			t.Errorf("option = %+v, want refused over_maximum", o)
		}
	})

	t.Run("repeat within budget", func(t *testing.T) {
		before := g.balance(t, g.payTo)
		// Two calls fit the budget of 0.02; the third is refused, unsigned.
		stdout, stderr, err := runBuyer(t, []string{"pay", "--repeat", "3", "--budget", "0.02", g.assetFlag(), "-d", demoChatBody, url}, buyerEnv(), "")
		if err == nil || !strings.Contains(err.Error(), "no payment option is allowed") {
			t.Errorf("err = %v, want the third call refused", err)
		}
		for _, want := range []string{
			"[1/3] 200 OK; payment of 10000 atomic units = 0.01",
			"; spent 0.01 of 0.02\n",
			"[2/3] 200 OK; payment of 10000 atomic units = 0.01",
			"; spent 0.02 of 0.02\n",
			"    verdict  refused (over_budget): amount 10000 is over the remaining budget 0",
		} {
			if !strings.Contains(stderr, want) {
				t.Errorf("stderr lacks %q:\n%s", want, stderr)
			}
		}
		if n := strings.Count(stdout, `"object":"chat.completion"`); n != 2 {
			t.Errorf("stdout holds %d completions, want 2", n)
		}
		if got := new(big.Int).Sub(g.balance(t, g.payTo), before); got.Int64() != 20_000 {
			t.Errorf("payTo received %s, want 20000", got)
		}
		noSecrets(t, g.rec, stdout, stderr, err)
	})
}

// checkLines checks that each of want is a line of out, in order.
func checkLines(tb testing.TB, out string, want []string) {
	tb.Helper()
	lines := strings.Split(out, "\n")
	at := 0
	for _, w := range want {
		found := false
		for at < len(lines) {
			l := lines[at]
			at++
			if l == w || (strings.HasSuffix(w, " ") && strings.HasPrefix(l, w)) {
				found = true
				break
			}
		}
		if !found {
			tb.Errorf("output lacks, after what came before, the line %q\noutput:\n%s", w, out)
			return
		}
	}
}

// TestPayRefusedByPolicy: options the spending flags do not allow are refused
// with a reason, nothing is signed, nothing reaches the gateway paid.
func TestPayRefusedByPolicy(t *testing.T) {
	g := startDemoGateway(t)
	url := g.URL + "/v1/chat/completions"
	other := devchain.Address(5).Hex()
	tests := []struct {
		name string
		args []string
		want string // the verdict line
	}{
		{"over maximum", []string{g.assetFlag(), "--max-per-payment", "0.001"}, "verdict  refused (over_maximum): amount 10000 is over the per-request maximum 1000"},
		{"over maximum, atomic units", []string{g.assetFlag(), "--max-per-payment", "9999"}, "verdict  refused (over_maximum): amount 10000 is over the per-request maximum 9999"},
		{"over budget", []string{g.assetFlag(), "--budget", "0.009999"}, "verdict  refused (over_budget): amount 10000 is over the remaining budget 9999"},
		{"unknown asset", []string{"--asset", devchain.Network + "/" + other}, "verdict  refused (asset): asset " + g.chain.Token.Hex() + " is not allowed on eip155:1337 by the policy"},
		{"default assets", nil, "verdict  refused (network): network eip155:1337 is not allowed by the policy"},
		{"mismatched network", []string{"--network", "eip155:8453", "--asset", g.chain.Token.Hex()}, "verdict  refused (network): network eip155:1337 is not allowed by the policy"},
		{"pay-to", []string{g.assetFlag(), "--pay-to", other}, "verdict  refused (pay_to): recipient 0xa0Ee7A142d267C1f36714E4a8F75612F20a79720 is not allowed by the policy"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := g.balance(t, g.payTo)
			paid := len(g.rec.payments())
			args := append(append([]string{"pay"}, tc.args...), "-d", demoChatBody, url)
			stdout, stderr, err := runBuyer(t, args, buyerEnv(), "")
			if err == nil || !strings.Contains(err.Error(), "nothing was signed or paid") {
				t.Errorf("err = %v, want a refusal", err)
			}
			if !strings.Contains(stderr, tc.want) {
				t.Errorf("stderr lacks %q:\n%s", tc.want, stderr)
			}
			if stdout != "" {
				t.Errorf("stdout = %q, want nothing", stdout)
			}
			if n := len(g.rec.payments()) - paid; n != 0 {
				t.Errorf("%d payments sent, want none", n)
			}
			if got := g.balance(t, g.payTo); got.Cmp(before) != 0 {
				t.Errorf("payTo balance moved by %s", new(big.Int).Sub(got, before))
			}
			noSecrets(t, g.rec, stdout, stderr, err)

			// The dry run says the same, and exits 0.
			dry := append([]string{"pay", "--dry-run"}, args[1:]...)
			stdout, _, err = runBuyer(t, dry, envMap(nil), "")
			if err != nil || !strings.Contains(stdout, tc.want) {
				t.Errorf("dry run: err %v, stdout lacks %q:\n%s", err, tc.want, stdout)
			}
		})
	}
	t.Run("pay-to allowed", func(t *testing.T) {
		_, stderr, err := runBuyer(t, []string{"pay", g.assetFlag(), "--pay-to", other, "--pay-to", g.payTo.Hex(), "-d", demoChatBody, url}, buyerEnv(), "")
		if err != nil || !txLine.MatchString(stderr) {
			t.Errorf("err = %v; stderr:\n%s", err, stderr)
		}
	})
}

// --- A fake seller, for answers the gateway never gives ---

const (
	fakeNetwork = "eip155:1337"
	fakeAsset   = "0x5FbDB2315678afecb367f032d93F642f64180aa3"
	fakeTx      = "0x1111111111111111111111111111111111111111111111111111111111111111"
)

var fakePayTo = devchain.Address(demoPayTo).Hex()

func fakeOffer(scheme, network, amount string) x402.PaymentRequirements {
	return x402.PaymentRequirements{Scheme: scheme, Network: network, Amount: amount, Asset: fakeAsset, PayTo: fakePayTo,
		MaxTimeoutSeconds: 60, Extra: json.RawMessage(`{"name":"USD Coin","version":"2"}`)}
}

func paymentRequired(tb testing.TB, url string, accepts ...x402.PaymentRequirements) string {
	tb.Helper()
	h, err := x402.EncodeHeader(x402.PaymentRequired{X402Version: 2, Error: "Payment required", Resource: &x402.ResourceInfo{URL: url}, Accepts: accepts})
	if err != nil {
		tb.Fatal(err)
	}
	return h
}

func settled(tb testing.TB, success bool, reason x402.Reason) string {
	tb.Helper()
	sr := x402.SettleResponse{Success: success, ErrorReason: reason, Transaction: fakeTx, Network: fakeNetwork}
	if !success {
		sr.Transaction = ""
	}
	h, err := x402.EncodeHeader(sr)
	if err != nil {
		tb.Fatal(err)
	}
	return h
}

// fakeSeller serves answer behind a payRecorder.
func fakeSeller(tb testing.TB, answer func(w http.ResponseWriter, r *http.Request, paid bool)) (*httptest.Server, *payRecorder) {
	tb.Helper()
	rec := &payRecorder{next: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		answer(w, r, r.Header.Get(x402.HeaderPaymentSignature) != "")
	})}
	srv := httptest.NewServer(rec)
	tb.Cleanup(srv.Close)
	return srv, rec
}

// TestPayHostileSellers: answers a seller should not give. Each is a clear
// error or a clear warning, never a second payment, and never a payment that
// the spending flags do not allow.
func TestPayHostileSellers(t *testing.T) {
	elsewhere, elsewhereRec := fakeSeller(t, func(w http.ResponseWriter, _ *http.Request, _ bool) {
		w.WriteHeader(http.StatusOK)
	})
	offer := fakeOffer("exact", fakeNetwork, "10000")
	tests := []struct {
		name       string
		answer     func(tb testing.TB, url string) func(w http.ResponseWriter, r *http.Request, paid bool)
		args       []string
		wantErr    string // "" means success
		wantStdout string
		wantStderr []string
		payments   int // PAYMENT-SIGNATURE requests the seller must see
	}{
		{
			name: "paid",
			answer: func(tb testing.TB, url string) func(http.ResponseWriter, *http.Request, bool) {
				return func(w http.ResponseWriter, _ *http.Request, paid bool) {
					if !paid {
						w.Header().Set(x402.HeaderPaymentRequired, paymentRequired(tb, url, offer))
						w.WriteHeader(http.StatusPaymentRequired)
						return
					}
					w.Header().Set(x402.HeaderPaymentResponse, settled(tb, true, ""))
					_, _ = io.WriteString(w, "the goods")
				}
			},
			wantStdout: "the goods",
			wantStderr: []string{"200 OK; payment of 10000 atomic units = 0.01 to " + fakePayTo + " on eip155:1337: settled in transaction " + fakeTx},
			payments:   1,
		},
		{
			name: "402 without PAYMENT-REQUIRED",
			answer: func(testing.TB, string) func(http.ResponseWriter, *http.Request, bool) {
				return func(w http.ResponseWriter, _ *http.Request, _ bool) { w.WriteHeader(http.StatusPaymentRequired) }
			},
			wantErr: "402 without a PAYMENT-REQUIRED header; nothing was signed or paid",
		},
		{
			name: "garbage PAYMENT-REQUIRED",
			answer: func(testing.TB, string) func(http.ResponseWriter, *http.Request, bool) {
				return func(w http.ResponseWriter, _ *http.Request, _ bool) {
					w.Header().Set(x402.HeaderPaymentRequired, "%%% not base64 %%%")
					w.WriteHeader(http.StatusPaymentRequired)
				}
			},
			wantErr: "undecodable PAYMENT-REQUIRED header",
		},
		{
			name: "PAYMENT-REQUIRED that is not a challenge",
			answer: func(testing.TB, string) func(http.ResponseWriter, *http.Request, bool) {
				return func(w http.ResponseWriter, _ *http.Request, _ bool) {
					w.Header().Set(x402.HeaderPaymentRequired, base64.StdEncoding.EncodeToString([]byte(`{"x402Version":2,"accepts":[]}`)))
					w.WriteHeader(http.StatusPaymentRequired)
				}
			},
			wantErr: "undecodable PAYMENT-REQUIRED header",
		},
		{
			name: "402 again after payment",
			answer: func(tb testing.TB, url string) func(http.ResponseWriter, *http.Request, bool) {
				return func(w http.ResponseWriter, _ *http.Request, _ bool) {
					w.Header().Set(x402.HeaderPaymentRequired, paymentRequired(tb, url, offer))
					w.WriteHeader(http.StatusPaymentRequired)
				}
			},
			wantErr:    "402 again after the payment; not paying a second time",
			wantStderr: []string{"402 Payment Required; payment of 10000 atomic units = 0.01", "not settled (no PAYMENT-RESPONSE); the server asked again after the payment, and it was not paid twice; spent 0.00 of 1.00"},
			payments:   1,
		},
		{
			name: "402 again with a failed settlement",
			answer: func(tb testing.TB, url string) func(http.ResponseWriter, *http.Request, bool) {
				return func(w http.ResponseWriter, _ *http.Request, paid bool) {
					if paid {
						w.Header().Set(x402.HeaderPaymentResponse, settled(tb, false, x402.ReasonEVMSignature))
					} else {
						w.Header().Set(x402.HeaderPaymentRequired, paymentRequired(tb, url, offer))
					}
					w.WriteHeader(http.StatusPaymentRequired)
				}
			},
			wantErr:    "402 again after the payment",
			wantStderr: []string{"refused (invalid_exact_evm_signature); the server asked again after the payment"},
			payments:   1,
		},
		{
			name: "PAYMENT-RESPONSE that does not decode",
			answer: func(tb testing.TB, url string) func(http.ResponseWriter, *http.Request, bool) {
				return func(w http.ResponseWriter, _ *http.Request, paid bool) {
					if !paid {
						w.Header().Set(x402.HeaderPaymentRequired, paymentRequired(tb, url, offer))
						w.WriteHeader(http.StatusPaymentRequired)
						return
					}
					w.Header().Set(x402.HeaderPaymentResponse, "{not base64}")
					_, _ = io.WriteString(w, "served anyway")
				}
			},
			wantStdout: "served anyway",
			wantStderr: []string{"200 OK; payment of 10000 atomic units = 0.01", ": the PAYMENT-RESPONSE header does not decode (x402 header is not valid standard base64)"},
			payments:   1,
		},
		{
			name: "paid, then the body cut short",
			answer: func(tb testing.TB, url string) func(http.ResponseWriter, *http.Request, bool) {
				return func(w http.ResponseWriter, _ *http.Request, paid bool) {
					if !paid {
						w.Header().Set(x402.HeaderPaymentRequired, paymentRequired(tb, url, offer))
						w.WriteHeader(http.StatusPaymentRequired)
						return
					}
					conn, buf, err := http.NewResponseController(w).Hijack()
					if err != nil {
						return
					}
					_, _ = buf.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n" + x402.HeaderPaymentResponse + ": " + settled(tb, true, "") + "\r\n\r\nhalf")
					_ = buf.Flush()
					_ = conn.Close()
				}
			},
			wantErr:    "read the response body: unexpected EOF",
			wantStdout: "half",
			wantStderr: []string{"200 OK; payment of 10000 atomic units = 0.01", "settled in transaction " + fakeTx},
			payments:   1,
		},
		{
			name: "402 again after payment, to a stranger only",
			answer: func(tb testing.TB, url string) func(http.ResponseWriter, *http.Request, bool) {
				stranger := offer
				stranger.PayTo = devchain.Address(6).Hex()
				return func(w http.ResponseWriter, _ *http.Request, paid bool) {
					if paid {
						w.Header().Set(x402.HeaderPaymentRequired, paymentRequired(tb, url, stranger))
					} else {
						w.Header().Set(x402.HeaderPaymentRequired, paymentRequired(tb, url, offer))
					}
					w.WriteHeader(http.StatusPaymentRequired)
				}
			},
			args:       []string{"--pay-to", fakePayTo},
			wantErr:    "402 again after the payment; not paying a second time",
			wantStderr: []string{"the server asked again after the payment, and it was not paid twice"},
			payments:   1,
		},
		{
			name: "redirect to another origin",
			answer: func(testing.TB, string) func(http.ResponseWriter, *http.Request, bool) {
				return func(w http.ResponseWriter, r *http.Request, _ bool) {
					http.Redirect(w, r, elsewhere.URL+"/loot?k=v", http.StatusFound)
				}
			},
			wantErr:    "the server answered 302 Found",
			wantStdout: "<a href=\"" + elsewhere.URL + "/loot?k=v\">Found</a>.\n\n",
			wantStderr: []string{"; not following the redirect to " + elsewhere.URL + "/loot (another origin: payment headers are never sent there)"},
		},
		{
			name: "redirect to another origin after payment",
			answer: func(tb testing.TB, url string) func(http.ResponseWriter, *http.Request, bool) {
				return func(w http.ResponseWriter, r *http.Request, paid bool) {
					if !paid {
						w.Header().Set(x402.HeaderPaymentRequired, paymentRequired(tb, url, offer))
						w.WriteHeader(http.StatusPaymentRequired)
						return
					}
					http.Redirect(w, r, elsewhere.URL+"/loot", http.StatusTemporaryRedirect)
				}
			},
			wantErr:    "the server answered 307 Temporary Redirect",
			wantStdout: "<a href=\"" + elsewhere.URL + "/loot\">Temporary Redirect</a>.\n\n",
			wantStderr: []string{"not following the redirect to " + elsewhere.URL + "/loot"},
			payments:   1,
		},
		{
			name: "only nvm:erc4337",
			answer: func(tb testing.TB, url string) func(http.ResponseWriter, *http.Request, bool) {
				return func(w http.ResponseWriter, _ *http.Request, _ bool) {
					w.Header().Set(x402.HeaderPaymentRequired, paymentRequired(tb, url, fakeOffer("nvm:erc4337", fakeNetwork, "10000")))
					w.WriteHeader(http.StatusPaymentRequired)
				}
			},
			wantErr:    "no payment option is allowed",
			wantStderr: []string{"[0] nvm:erc4337 on eip155:1337", "verdict  refused (nevermined): requires a Nevermined account"},
		},
		{
			name: "only a foreign scheme",
			answer: func(tb testing.TB, url string) func(http.ResponseWriter, *http.Request, bool) {
				return func(w http.ResponseWriter, _ *http.Request, _ bool) {
					w.Header().Set(x402.HeaderPaymentRequired, paymentRequired(tb, url, fakeOffer("x-barter", fakeNetwork, "10000")))
					w.WriteHeader(http.StatusPaymentRequired)
				}
			},
			wantErr:    "no payment option is allowed",
			wantStderr: []string{`verdict  refused (foreign_scheme): foreign scheme "x-barter", never paid`},
		},
		{
			name: "a hostile amount",
			answer: func(tb testing.TB, url string) func(http.ResponseWriter, *http.Request, bool) {
				return func(w http.ResponseWriter, _ *http.Request, _ bool) {
					w.Header().Set(x402.HeaderPaymentRequired, paymentRequired(tb, url, fakeOffer("exact", fakeNetwork, "-1"), fakeOffer("exact", fakeNetwork, "1e9")))
					w.WriteHeader(http.StatusPaymentRequired)
				}
			},
			wantErr:    "no payment option is allowed",
			wantStderr: []string{`amount   "-1" (not an amount)`, `amount   "1e9" (not an amount)`, "verdict  refused (offer)"},
		},
		{
			name: "pay-to filters one option, the other is paid",
			answer: func(tb testing.TB, url string) func(http.ResponseWriter, *http.Request, bool) {
				stranger := offer
				stranger.PayTo = devchain.Address(6).Hex()
				return func(w http.ResponseWriter, r *http.Request, paid bool) {
					if !paid {
						w.Header().Set(x402.HeaderPaymentRequired, paymentRequired(tb, url, stranger, offer))
						w.WriteHeader(http.StatusPaymentRequired)
						return
					}
					p, err := x402.DecodePaymentPayload(r.Header.Get(x402.HeaderPaymentSignature))
					if err != nil {
						http.Error(w, err.Error(), http.StatusBadRequest)
						return
					}
					acc, _ := p.AcceptedRequirements()
					if acc.PayTo != fakePayTo {
						http.Error(w, "paid the stranger", http.StatusTeapot)
						return
					}
					w.Header().Set(x402.HeaderPaymentResponse, settled(tb, true, ""))
					_, _ = io.WriteString(w, "ok")
				}
			},
			args:       []string{"--pay-to", fakePayTo},
			wantStdout: "ok",
			wantStderr: []string{"settled in transaction"},
			payments:   1,
		},
		{
			// Go's JSON decoder matches keys regardless of case and keeps the
			// last; the official one is case-sensitive. A challenge that the
			// two would read differently is refused, and nothing is paid.
			name: "pay-to with two accepts keys",
			answer: func(tb testing.TB, url string) func(http.ResponseWriter, *http.Request, bool) {
				stranger := func(i int) x402.PaymentRequirements {
					o := offer
					o.PayTo = devchain.Address(i).Hex()
					return o
				}
				raw, err := json.Marshal(map[string]any{
					"x402Version": 2, "resource": map[string]string{"url": url},
					"accepts": []x402.PaymentRequirements{stranger(6), stranger(7)},
				})
				if err != nil {
					tb.Fatal(err)
				}
				second, err := json.Marshal([]x402.PaymentRequirements{stranger(5), offer})
				if err != nil {
					tb.Fatal(err)
				}
				raw = append(raw[:len(raw)-1], []byte(`,"Accepts":`+string(second)+`}`)...)
				return func(w http.ResponseWriter, r *http.Request, paid bool) {
					if !paid {
						w.Header().Set(x402.HeaderPaymentRequired, base64.StdEncoding.EncodeToString(raw))
						w.WriteHeader(http.StatusPaymentRequired)
						return
					}
					p, err := x402.DecodePaymentPayload(r.Header.Get(x402.HeaderPaymentSignature))
					if err != nil {
						http.Error(w, err.Error(), http.StatusBadRequest)
						return
					}
					if acc, _ := p.AcceptedRequirements(); acc.PayTo != fakePayTo {
						http.Error(w, "paid a stranger", http.StatusTeapot)
						return
					}
					w.Header().Set(x402.HeaderPaymentResponse, settled(tb, true, ""))
					_, _ = io.WriteString(w, "ok")
				}
			},
			args:    []string{"--pay-to", fakePayTo},
			wantErr: "402 with an undecodable PAYMENT-REQUIRED header: x402 header is not a JSON object: member names must match the protocol's field names exactly: a member differs from \"accepts\" only in case; nothing was signed or paid",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var url string
			srv, rec := fakeSeller(t, func(w http.ResponseWriter, r *http.Request, paid bool) {
				tc.answer(t, url)(w, r, paid)
			})
			url = srv.URL + "/paid"
			elsewhereBefore := len(elsewhereRec.requests())
			args := append(append([]string{"pay", "--asset", fakeNetwork + "/" + fakeAsset}, tc.args...), url)
			stdout, stderr, err := runBuyer(t, args, buyerEnv(), "")
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("err = %v, want nil\nstderr:\n%s", err, stderr)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("err = %v, want one containing %q\nstderr:\n%s", err, tc.wantErr, stderr)
			}
			if stdout != tc.wantStdout {
				t.Errorf("stdout = %q, want %q", stdout, tc.wantStdout)
			}
			for _, want := range tc.wantStderr {
				if !strings.Contains(stderr, want) {
					t.Errorf("stderr lacks %q:\n%s", want, stderr)
				}
			}
			if n := len(rec.payments()); n != tc.payments {
				t.Errorf("the seller got %d payments, want %d", n, tc.payments)
			}
			if n := len(elsewhereRec.requests()) - elsewhereBefore; n != 0 {
				t.Errorf("another origin got %d requests, want none", n)
			}
			noSecrets(t, rec, stdout, stderr, err)
		})
	}
}

// TestPayMixedOffer: the dry run lists every option of a 402 with its label;
// the payable one is the one paid.
func TestPayMixedOffer(t *testing.T) {
	var url string
	srv, rec := fakeSeller(t, func(w http.ResponseWriter, _ *http.Request, paid bool) {
		if paid {
			w.Header().Set(x402.HeaderPaymentResponse, settled(t, true, ""))
			_, _ = io.WriteString(w, "ok")
			return
		}
		upfront := fakeOffer("exact", fakeNetwork, "20000")
		upfront.Extra = json.RawMessage(`{"name":"USD Coin","version":"2","paymentFlow":"upfront"}`)
		w.Header().Set(x402.HeaderPaymentRequired, paymentRequired(t, url,
			fakeOffer("nvm:erc4337", "eip155:8453", "10000"),
			fakeOffer("nvm:card-delegation", "eip155:8453", "10000"),
			upfront,
			fakeOffer("exact", fakeNetwork, "10000"),
			fakeOffer("exact", "eip155:8453", "10000"),
			fakeOffer("x-barter", fakeNetwork, "1"),
		))
		w.WriteHeader(http.StatusPaymentRequired)
	})
	url = srv.URL + "/paid"
	args := []string{"pay", "--dry-run", "--asset", fakeNetwork + "/" + fakeAsset, url}
	stdout, _, err := runBuyer(t, args, envMap(nil), "")
	if err != nil {
		t.Fatal(err)
	}
	checkLines(t, stdout, []string{
		"GET " + url,
		`402 Payment Required ("Payment required"): 6 payment option(s); amounts in whole tokens read at 6 decimals (--decimals)`,
		"[0] nvm:erc4337 on eip155:8453",
		"    verdict  refused (nevermined): requires a Nevermined account",
		"[1] nvm:card-delegation on eip155:8453",
		"    verdict  refused (nevermined): requires a Nevermined account",
		"[2] exact on eip155:1337",
		"    amount   20000 atomic units = 0.02",
		"    verdict  refused (not_chosen): payable, but option [3] is preferred",
		"[3] exact on eip155:1337",
		"    verdict  PAY: would be paid",
		"[4] exact on eip155:8453",
		"    verdict  refused (network): network eip155:8453 is not allowed by the policy",
		"[5] x-barter on eip155:1337",
		`    verdict  refused (foreign_scheme): foreign scheme "x-barter", never paid`,
		"dry run: nothing was signed or paid.",
	})
	if n := len(rec.payments()); n != 0 {
		t.Fatalf("the dry run sent %d payments", n)
	}

	stdout, stderr, err := runBuyer(t, []string{"pay", "--asset", fakeNetwork + "/" + fakeAsset, url}, buyerEnv(), "")
	if err != nil || stdout != "ok" {
		t.Fatalf("pay: %v, stdout %q\nstderr:\n%s", err, stdout, stderr)
	}
	pays := rec.payments()
	if len(pays) != 1 {
		t.Fatalf("%d payments, want 1", len(pays))
	}
	p, err := x402.DecodePaymentPayload(pays[0])
	if err != nil {
		t.Fatal(err)
	}
	if acc, _ := p.AcceptedRequirements(); acc.Amount != "10000" || acc.Scheme != "exact" || acc.Network != fakeNetwork {
		t.Errorf("paid %+v, want option [3]", acc)
	}

	// --json names the option paid by its place in the 402's accepts.
	stdout, stderr, err = runBuyer(t, []string{"pay", "--json", "--asset", fakeNetwork + "/" + fakeAsset, url}, buyerEnv(), "")
	if err != nil {
		t.Fatalf("pay --json: %v\nstderr:\n%s", err, stderr)
	}
	var res struct{ Paid *optionJSON }
	if err := json.Unmarshal([]byte(stdout), &res); err != nil || res.Paid == nil {
		t.Fatalf("pay --json: %v, no paid option in\n%s", err, stdout)
	}
	if res.Paid.Index == nil || *res.Paid.Index != 3 || res.Paid.Amount != "10000" {
		t.Errorf("paid = %s, want option [3] with its index", stdout)
	}
}

// TestPayRequest: the method, headers and body given on the command line are
// what the seller receives, on the unpaid request and on the paid one.
func TestPayRequest(t *testing.T) {
	var url string
	srv, rec := fakeSeller(t, func(w http.ResponseWriter, _ *http.Request, paid bool) {
		if !paid {
			w.Header().Set(x402.HeaderPaymentRequired, paymentRequired(t, url, fakeOffer("exact", fakeNetwork, "10000")))
			w.WriteHeader(http.StatusPaymentRequired)
			return
		}
		w.Header().Set(x402.HeaderPaymentResponse, settled(t, true, ""))
	})
	url = srv.URL + "/paid?q=1"
	file := filepath.Join(t.TempDir(), "body.json")
	if err := os.WriteFile(file, []byte(`{"from":"file"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name                 string
		args                 []string
		stdin                string
		method, body, ctype  string
		extraName, extraWant string
	}{
		{name: "GET", args: []string{url}, method: "GET"},
		{name: "inline JSON body", args: []string{"-d", `{"a":1}`, url}, method: "POST", body: `{"a":1}`, ctype: "application/json"},
		{name: "text body", args: []string{"-d", "plain", url}, method: "POST", body: "plain"},
		{name: "body from a file", args: []string{"-X", "PUT", "-d", "@" + file, url}, method: "PUT", body: `{"from":"file"}`, ctype: "application/json"},
		{name: "body from stdin", args: []string{"-d", "@-", "-H", "Content-Type: text/csv", url}, stdin: "a,b\n", method: "POST", body: "a,b\n", ctype: "text/csv"},
		{name: "headers, flags after the URL", args: []string{url, "-H", "X-Tag: one, two", "-H", "x-tag: three"}, method: "GET", extraName: "X-Tag", extraWant: "one, two|three"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n := len(rec.requests())
			args := append([]string{"pay", "--asset", fakeNetwork + "/" + fakeAsset}, tc.args...)
			if _, stderr, err := runBuyer(t, args, buyerEnv(), tc.stdin); err != nil {
				t.Fatalf("pay: %v\nstderr:\n%s", err, stderr)
			}
			reqs := rec.requests()[n:]
			if len(reqs) != 2 || reqs[0].Header.Get(x402.HeaderPaymentSignature) != "" || reqs[1].Header.Get(x402.HeaderPaymentSignature) == "" {
				t.Fatalf("the seller got %d requests, want one unpaid then one paid", len(reqs))
			}
			for i, r := range reqs {
				if r.Method != tc.method || string(r.Body) != tc.body || r.Header.Get("Content-Type") != tc.ctype {
					t.Errorf("request %d: %s body %q type %q, want %s %q %q", i, r.Method, r.Body, r.Header.Get("Content-Type"), tc.method, tc.body, tc.ctype)
				}
				if tc.extraName != "" {
					if got := strings.Join(r.Header.Values(tc.extraName), "|"); got != tc.extraWant {
						t.Errorf("request %d: %s = %q, want %q", i, tc.extraName, got, tc.extraWant)
					}
				}
			}
		})
	}
}

// TestPayBadInput: flags, URLs, headers and keys that are wrong fail before
// anything is sent, with an error that names the problem and repeats no
// secret.
func TestPayBadInput(t *testing.T) {
	srv, rec := fakeSeller(t, func(w http.ResponseWriter, _ *http.Request, _ bool) { w.WriteHeader(http.StatusOK) })
	url := srv.URL + "/paid"
	const secretURL = "http://user:hunter2@127.0.0.1:1/x?api_key=sk-l4a-secret"
	keyFile := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(keyFile, []byte(buyerKeyHex+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	badKeyFile := filepath.Join(t.TempDir(), "badkey")
	const badKey = "0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690z"
	if err := os.WriteFile(badKeyFile, []byte(badKey), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		wantErr string
	}{
		{"no URL", []string{"pay"}, nil, "pay: a URL is required"},
		{"two URLs", []string{"pay", url, url}, nil, "2 URLs given"},
		{"not a URL", []string{"pay", "::nope"}, nil, "not an absolute http:// or https:// URL"},
		{"ftp URL", []string{"pay", "ftp://127.0.0.1/x"}, nil, "not an absolute http:// or https:// URL"},
		{"relative URL", []string{"pay", "/v1/chat/completions"}, nil, "not an absolute http:// or https:// URL"},
		{"header without colon", []string{"pay", "-H", "Authorization Bearer sk-l4a-secret", url}, nil, "-H #1: want 'Name: value'"},
		{"header with a bad name", []string{"pay", "-H", "Bad Name: sk-l4a-secret", url}, nil, "-H #1: want 'Name: value'"},
		{"header with a line break", []string{"pay", "-H", "X-A: ok", "-H", "X-B: sk-l4a-secret\r\nX-C: 1", url}, nil, "-H #2 (X-B): the value holds a line break"},
		{"Host header", []string{"pay", "-H", "Host: example.com", url}, nil, "Host is set by the HTTP client"},
		{"bad method", []string{"pay", "-X", "GE T", url}, nil, "-X is not an HTTP method name"},
		{"missing body file", []string{"pay", "-d", "@/nonexistent/body", url}, nil, "no such file"},
		{"bad amount", []string{"pay", "--max-per-payment", "1e6", url}, nil, `--max-per-payment: amount "1e6" is not a non-negative number`},
		{"negative amount", []string{"pay", "--budget", "-1", url}, nil, "--budget: amount"},
		{"too many decimals", []string{"pay", "--max-per-payment", "0.0000001", url}, nil, "has more than 6 decimals"},
		{"bad decimals", []string{"pay", "--decimals", "-1", url}, nil, "--decimals -1 is outside"},
		{"bad network", []string{"pay", "--network", "base", url}, nil, `--network "base"`},
		{"unknown network for USDC", []string{"pay", "--network", "eip155:1337", url}, nil, "no default asset (USDC) is known there"},
		{"asset without network", []string{"pay", "--asset", fakeAsset, url}, nil, "names no network"},
		{"bad asset", []string{"pay", "--asset", "eip155:1337/0x123", url}, nil, `--asset "eip155:1337/0x123"`},
		{"asset off the networks", []string{"pay", "--network", "eip155:8453", "--asset", "eip155:1337/" + fakeAsset, url}, nil, "is not among --network"},
		{"bad pay-to", []string{"pay", "--pay-to", "nobody", url}, nil, `--pay-to "nobody"`},
		{"repeat zero", []string{"pay", "--repeat", "0", url}, nil, "--repeat 0 is outside"},
		{"dry run with repeat", []string{"pay", "--dry-run", "--repeat", "2", url}, nil, "--dry-run sends one request"},
		{"no key", []string{"pay", url}, nil, "no wallet key: use --key-file PATH or set LLM4AGENTS_WALLET_KEY"},
		{"bad key in env", []string{"pay", url}, map[string]string{walletKeyEnv: badKey}, "wallet key: not a 32-byte hex private key"},
		{"short key in env", []string{"pay", url}, map[string]string{walletKeyEnv: "0x1234"}, "wallet key: not a 32-byte hex private key"},
		{"bad key file", []string{"pay", "--key-file", badKeyFile, url}, nil, "wallet key: not a 32-byte hex private key"},
		{"missing key file", []string{"pay", "--key-file", "/nonexistent/key", url}, nil, "wallet key: read secret file"},
		{"key file and env", []string{"pay", "--key-file", keyFile, url}, map[string]string{walletKeyEnv: buyerKeyHex}, "both --key-file and LLM4AGENTS_WALLET_KEY are set"},
		{"unknown flag", []string{"pay", "--bogus", url}, nil, "flag provided but not defined: -bogus"},
		{"chat without url", []string{"chat"}, nil, "chat: --url is required"},
		{"chat with a bad url", []string{"chat", "--url", secretURL + "#frag"}, nil, "chat: --url must not have a query or a fragment"},
		{"chat with an extra argument", []string{"chat", "--url", url, "now"}, nil, "unexpected argument #1"},
		{"chat without a key", []string{"chat", "--url", url}, nil, "no wallet key"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n := len(rec.requests())
			stdout, stderr, err := runBuyer(t, tc.args, envMap(tc.env), "")
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("err = %v, want one containing %q", err, tc.wantErr)
			}
			if stdout != "" {
				t.Errorf("stdout = %q, want nothing", stdout)
			}
			if got := len(rec.requests()) - n; got != 0 {
				t.Errorf("%d requests sent, want none", got)
			}
			secrets := append(devKeysHex(), "hunter2", "sk-l4a-secret", strings.TrimPrefix(badKey, "0x")[:40])
			assertNoSecret(t, "stderr", stderr, secrets...)
			if err != nil {
				assertNoSecret(t, "the error", err.Error(), secrets...)
			}
		})
	}
	t.Run("key file", func(t *testing.T) {
		_, stderr, err := runBuyer(t, []string{"pay", "--key-file", keyFile, url}, envMap(nil), "")
		if err != nil {
			t.Fatalf("pay --key-file: %v\nstderr:\n%s", err, stderr)
		}
		if strings.Contains(stderr, "can be read by other users") {
			t.Errorf("a 0600 key file drew a warning:\n%s", stderr)
		}
		if err := os.Chmod(keyFile, 0o644); err != nil {
			t.Fatal(err)
		}
		_, stderr, err = runBuyer(t, []string{"pay", "--key-file", keyFile, url}, envMap(nil), "")
		if err != nil || !strings.Contains(stderr, "warning: the key file "+keyFile+" can be read by other users") {
			t.Errorf("err %v; a 0644 key file drew no warning:\n%s", err, stderr)
		}
		assertNoSecret(t, "stderr", stderr, devKeysHex()...)
	})
	t.Run("URL secrets are not echoed", func(t *testing.T) {
		_, stderr, err := runBuyer(t, []string{"pay", secretURL}, buyerEnv(), "")
		if err == nil {
			t.Fatal("a request to a closed port succeeded")
		}
		if !strings.Contains(err.Error(), "GET http://127.0.0.1:1/x") {
			t.Errorf("err = %v, want it to name the request without its secrets", err)
		}
		for _, s := range []string{"hunter2", "sk-l4a-secret"} {
			if strings.Contains(err.Error()+stderr, s) {
				t.Errorf("output repeats %q: %v\n%s", s, err, stderr)
			}
		}
	})
}

// TestPayAmounts: the money flags, both forms, and their formatting.
func TestPayAmounts(t *testing.T) {
	tests := []struct {
		in       string
		decimals int
		want     string // atomic units; "" means an error
		format   string // formatAmount of want at decimals
	}{
		{"0.05", 6, "50000", "0.05"},
		{"50000", 6, "50000", "0.05"},
		{"1.00", 6, "1000000", "1.00"},
		{"1.", 6, "", ""},
		{".5", 6, "", ""},
		{"0.000001", 6, "1", "0.000001"},
		{"0.0000001", 6, "", ""},
		{"0", 6, "0", "0.00"},
		{" 0.10 ", 6, "100000", "0.10"},
		{"1.5", 0, "", ""},
		{"15", 0, "15", "15"},
		{"1.5", 1, "15", "1.5"},
		{"1.5", 18, "1500000000000000000", "1.50"},
		{"-1", 6, "", ""},
		{"+1", 6, "", ""},
		{"1e6", 6, "", ""},
		{"1_000", 6, "", ""},
		{"0x10", 6, "", ""},
		{"", 6, "", ""},
		{"１", 6, "", ""}, // a fullwidth digit
		{"115792089237316195423570985008687907853269984665640564039457584007913129639935", 0, "115792089237316195423570985008687907853269984665640564039457584007913129639935", "115792089237316195423570985008687907853269984665640564039457584007913129639935"},
		{"115792089237316195423570985008687907853269984665640564039457584007913129639936", 0, "", ""},
		{"115792089237316195423570985008687907853269984665640564039457.584007913129639936", 18, "", ""},
		{strings.Repeat("9", 101), 6, "", ""},
	}
	for _, tc := range tests {
		got, err := parseAmount(tc.in, tc.decimals)
		switch {
		case tc.want == "" && err == nil:
			t.Errorf("parseAmount(%q, %d) = %s, want an error", tc.in, tc.decimals, got)
		case tc.want != "" && err != nil:
			t.Errorf("parseAmount(%q, %d): %v", tc.in, tc.decimals, err)
		case tc.want != "" && got.String() != tc.want:
			t.Errorf("parseAmount(%q, %d) = %s, want %s", tc.in, tc.decimals, got, tc.want)
		case tc.want != "":
			if f := formatAmount(got, tc.decimals); f != tc.format {
				t.Errorf("formatAmount(%s, %d) = %q, want %q", got, tc.decimals, f, tc.format)
			}
		}
	}
}

// TestPayJournal: a call whose paid request never got an answer (the
// connection dropped on every retry) is run again as a new process would. With
// --journal the second run sends the payment the first one signed; without it,
// a second payment is signed, which is what --journal is for.
func TestPayJournal(t *testing.T) {
	var url string
	var answering sync.Mutex // held: the seller drops paid requests
	drop := true
	srv, rec := fakeSeller(t, func(w http.ResponseWriter, r *http.Request, paid bool) {
		if !paid {
			w.Header().Set(x402.HeaderPaymentRequired, paymentRequired(t, url, fakeOffer("exact", fakeNetwork, "10000")))
			w.WriteHeader(http.StatusPaymentRequired)
			return
		}
		answering.Lock()
		d := drop
		answering.Unlock()
		if d {
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				_ = conn.Close()
			}
			return
		}
		w.Header().Set(x402.HeaderPaymentResponse, settled(t, true, ""))
		_, _ = io.WriteString(w, "ok")
	})
	url = srv.URL + "/paid"
	setDrop := func(v bool) {
		answering.Lock()
		drop = v
		answering.Unlock()
	}
	distinct := func() int {
		seen := map[string]bool{}
		for _, p := range rec.payments() {
			seen[p] = true
		}
		return len(seen)
	}

	for _, tc := range []struct {
		name    string
		journal bool
		want    int // distinct payments after both runs
	}{
		{"with --journal", true, 1},
		{"without", false, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := distinct()
			args := []string{"pay", "--asset", fakeNetwork + "/" + fakeAsset, url}
			if tc.journal {
				args = append(args, "--journal", filepath.Join(t.TempDir(), "journal"))
			}
			setDrop(true)
			stdout, stderr, err := runBuyer(t, args, buyerEnv(), "")
			if err == nil {
				t.Fatalf("the first run succeeded against a seller that drops the connection; stderr:\n%s", stderr)
			}
			noSecrets(t, rec, stdout, stderr, err)
			if n := distinct() - base; n != 1 {
				t.Fatalf("the first run sent %d distinct payments, want 1 (retried)", n)
			}
			setDrop(false)
			stdout, stderr, err = runBuyer(t, args, buyerEnv(), "")
			if err != nil || stdout != "ok" {
				t.Fatalf("the second run: %v, stdout %q\nstderr:\n%s", err, stdout, stderr)
			}
			noSecrets(t, rec, stdout, stderr, err)
			if n := distinct() - base; n != tc.want {
				t.Errorf("%d distinct payments over both runs, want %d", n, tc.want)
			}
		})
	}
}

// FuzzPayHeaders: parseHeaders never panics, and what it accepts net/http can
// send: token names and values without line breaks.
func FuzzPayHeaders(f *testing.F) {
	for _, s := range []string{"X-A: b", "X-A:", ": v", "X A: b", "X-A: b\r\nX-B: c", "Host: x", "X-A: \x00", "Ünï: v", "X-A: a:b:c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		h, err := parseHeaders([]string{s})
		if err != nil {
			if strings.Contains(err.Error(), s) && len(s) > 8 {
				t.Fatalf("the error %q repeats the header", err)
			}
			return
		}
		for name, vs := range h {
			if !isToken(name) {
				t.Fatalf("accepted the name %q", name)
			}
			for _, v := range vs {
				if strings.ContainsAny(v, "\r\n\x00") {
					t.Fatalf("accepted the value %q", v)
				}
			}
		}
	})
}

// FuzzPayWithAccepts: filtering a hostile PAYMENT-REQUIRED header never
// panics, and keeping every option keeps the challenge as it decodes.
func FuzzPayWithAccepts(f *testing.F) {
	good, err := x402.EncodeHeader(x402.PaymentRequired{X402Version: 2, Resource: &x402.ResourceInfo{URL: "http://x/"},
		Accepts: []x402.PaymentRequirements{fakeOffer("exact", fakeNetwork, "1"), fakeOffer("nvm:erc4337", fakeNetwork, "2")}})
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range []string{good, "", "e30=", "W10=", base64.StdEncoding.EncodeToString([]byte(`{"x402Version":2,"accepts":{}}`)),
		base64.StdEncoding.EncodeToString([]byte(`{"x402Version":2,"accepts":[1,"a",null]}`))} {
		f.Add(s, uint8(0), uint8(1))
	}
	f.Fuzz(func(t *testing.T, header string, a, b uint8) {
		_, _ = withAccepts(header, []int{int(a), int(b)})
		pr, err := x402.DecodePaymentRequired(header)
		if err != nil {
			return
		}
		all := make([]int, len(pr.Accepts))
		for i := range all {
			all[i] = i
		}
		again, err := withAccepts(header, all)
		if err != nil {
			t.Fatalf("withAccepts of a valid challenge: %v", err)
		}
		pr2, err := x402.DecodePaymentRequired(again)
		if err != nil {
			t.Fatalf("the filtered challenge does not decode: %v", err)
		}
		if diff := cmp.Diff(pr.Accepts, pr2.Accepts, cmp.Comparer(func(x, y json.RawMessage) bool { return sameJSON(x, y) || (len(x) == 0 && len(y) == 0) })); diff != "" {
			t.Fatalf("accepts changed (-before +after):\n%s", diff)
		}
	})
}
