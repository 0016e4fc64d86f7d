package interop_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/llm4agents/llm4agents/client"
	"github.com/llm4agents/llm4agents/internal/testchain"
	"github.com/llm4agents/llm4agents/x402"
	"github.com/llm4agents/llm4agents/x402/evm/exact"
)

// foreignScheme is a scheme no buyer knows.
const foreignScheme = "x-foreign"

// cliTimeout bounds building the llm4agents binary and one run of it.
const cliTimeout = 5 * time.Minute

// TestBuyerPaysExpress pays the official @x402/express server (2.27.0), backed
// by our facilitator, with our buyer: the client package and the llm4agents pay
// command. Routes that offer only nvm:erc4337 or only an unknown scheme are
// refused with their labels, and nothing reaches the facilitator for them; a
// route that offers both next to exact is paid in exact.
func TestBuyerPaysExpress(t *testing.T) {
	requireTools(t)
	c := newChain(t)
	fac := startOurFacilitator(t, c)
	payTo := testchain.DevAddress(payToIdx)
	srv := startNodeService(t, "express-foreign.mjs",
		"PORT=0",
		"FACILITATOR_URL="+withKinds(t, fac.URL, "nvm:erc4337", foreignScheme),
		"TOKEN="+c.token.Hex(),
		"PAY_TO="+payTo.Hex(),
		"AMOUNT="+amount,
		"MAX_TIMEOUT_SECONDS="+strconv.Itoa(maxTimeoutSeconds),
		"FOREIGN_SCHEME="+foreignScheme,
	)
	policy := client.Policy{
		MaxPerRequest: big.NewInt(100_000),
		Budget:        big.NewInt(1_000_000),
		Assets:        []client.Asset{{Network: network, Address: c.token.Hex()}},
	}
	tr := &client.Transport{Signer: exact.NewKeySigner(testchain.DevKey(payerIdx)), Policy: policy}
	hc := &http.Client{Transport: tr}

	for _, path := range []string{"/paid", "/mixed"} {
		t.Run("go client pays "+path, func(t *testing.T) {
			before := c.balance(t, payTo)
			calls := fac.rec.count()
			resp, body := buyerGet(t, hc, srv.URL+path)
			if resp.StatusCode != http.StatusOK || string(body) != `{"ok":true,"path":"`+path+`"}` {
				t.Fatalf("GET %s: %d %s", path, resp.StatusCode, body)
			}
			sr, err := x402.DecodeSettleResponse(resp.Header.Get(x402.HeaderPaymentResponse))
			if err != nil {
				t.Fatalf("PAYMENT-RESPONSE: %v", err)
			}
			c.checkSettled(t, fac, calls, before, sr)
			verifies := fac.rec.since(calls, "/verify")
			if len(verifies) != 1 {
				t.Fatalf("%d /verify calls, want 1", len(verifies))
			}
			var req x402.FacilitatorRequest
			if err := json.Unmarshal(verifies[0].Request, &req); err != nil {
				t.Fatal(err)
			}
			if accepted, err := req.PaymentPayload.AcceptedRequirements(); err != nil || accepted.Scheme != exact.Scheme {
				t.Errorf("the payment echoes %+v (%v), want the exact option", accepted, err)
			}
		})
	}

	for _, tc := range []struct {
		path    string
		refusal client.RefusalError
		label   string
	}{
		{"/nvm", client.RefusedNevermined, client.LabelNevermined},
		{"/foreign", client.RefusedForeignScheme, `foreign scheme "` + foreignScheme + `", never paid`},
	} {
		t.Run("go client refuses "+tc.path, func(t *testing.T) {
			before := c.balance(t, payTo)
			calls := fac.rec.count()
			spent := tr.Spent()
			ctx, cancel := context.WithTimeout(t.Context(), scriptTimeout)
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+tc.path, nil)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := hc.Do(req)
			if err == nil {
				_ = resp.Body.Close()
				t.Fatalf("GET %s: %d, want a refusal", tc.path, resp.StatusCode)
			}
			np, ok := errors.AsType[*client.NoPayableOptionError](err)
			if !ok {
				t.Fatalf("err = %v, want a *client.NoPayableOptionError", err)
			}
			if len(np.Options) != 1 {
				t.Fatalf("options = %+v, want the one offered", np.Options)
			}
			o := np.Options[0]
			if o.RefusalError != tc.refusal || o.Label != tc.label || o.Requirements.Network != network || o.Requirements.Amount != amount {
				t.Errorf("option = %+v, want refusal %q labelled %q", o, tc.refusal, tc.label)
			}
			if !strings.Contains(err.Error(), tc.label) {
				t.Errorf("err = %q, want it to carry the label %q", err, tc.label)
			}
			if n := fac.rec.count() - calls; n != 0 {
				t.Errorf("the facilitator got %d calls, want none", n)
			}
			if got := tr.Spent(); got.Cmp(spent) != 0 {
				t.Errorf("spent went %s -> %s", spent, got)
			}
			c.checkBalanceRose(t, payTo, before, "0")
		})
	}

	t.Run("llm4agents pay", func(t *testing.T) {
		bin := buildCLI(t)
		keyEnv := "LLM4AGENTS_WALLET_KEY=" + keyHex(testchain.DevKey(payerIdx))
		asset := "--asset=" + network + "/" + c.token.Hex()

		before := c.balance(t, payTo)
		calls := fac.rec.count()
		stdout, stderr, err := runCLI(t, bin, []string{keyEnv}, "pay", asset, srv.URL+"/mixed")
		if err != nil || stdout != `{"ok":true,"path":"/mixed"}` {
			t.Fatalf("pay: %v, stdout %q\nstderr:\n%s", err, stdout, stderr)
		}
		if !strings.Contains(stderr, "200 OK; payment of 10000 atomic units = 0.01 to "+payTo.Hex()+" on "+network+": settled in transaction 0x") {
			t.Errorf("stderr lacks the settlement:\n%s", stderr)
		}
		if n := len(fac.rec.since(calls, "/settle")); n != 1 {
			t.Errorf("%d /settle calls, want 1", n)
		}
		c.checkBalanceRose(t, payTo, before, amount)

		for _, tc := range []struct{ path, want string }{
			{"/nvm", "verdict  refused (nevermined): " + client.LabelNevermined},
			{"/foreign", `verdict  refused (foreign_scheme): foreign scheme "` + foreignScheme + `", never paid`},
		} {
			calls := fac.rec.count()
			stdout, stderr, err := runCLI(t, bin, []string{keyEnv}, "pay", asset, srv.URL+tc.path)
			if err == nil || !strings.Contains(stderr, tc.want) || !strings.Contains(stderr, "nothing was signed or paid") {
				t.Errorf("pay %s: %v, stdout %q\nstderr:\n%s\nwant %q", tc.path, err, stdout, stderr, tc.want)
			}
			// The dry run needs no key and says the same.
			stdout, stderr, err = runCLI(t, bin, nil, "pay", "--dry-run", asset, srv.URL+tc.path)
			if err != nil || !strings.Contains(stdout, tc.want) {
				t.Errorf("pay --dry-run %s: %v, stdout:\n%s\nstderr:\n%s\nwant %q", tc.path, err, stdout, stderr, tc.want)
			}
			if n := fac.rec.count() - calls; n != 0 {
				t.Errorf("the facilitator got %d calls for %s, want none", n, tc.path)
			}
		}
		stdout, _, err = runCLI(t, bin, nil, "pay", "--dry-run", asset, srv.URL+"/mixed")
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{
			"[0] nvm:erc4337 on " + network, "verdict  refused (nevermined): " + client.LabelNevermined,
			"[1] " + foreignScheme + " on " + network, "verdict  refused (foreign_scheme)",
			"[2] exact on " + network, "verdict  PAY: would be paid",
		} {
			if !strings.Contains(stdout, want) {
				t.Errorf("dry run of /mixed lacks %q:\n%s", want, stdout)
			}
		}
		secret := strings.TrimPrefix(keyHex(testchain.DevKey(payerIdx)), "0x")
		if strings.Contains(stdout+stderr, secret) {
			t.Error("the CLI printed the wallet key")
		}
	})
}

// withKinds serves the facilitator at base with kinds for schemes added to
// its /supported on our network, so that the official server will offer them.
// Every other request goes to base unchanged.
func withKinds(tb testing.TB, base string, schemes ...string) string {
	tb.Helper()
	target, err := url.Parse(base)
	if err != nil {
		tb.Fatal(err)
	}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) { r.SetURL(target) },
		ModifyResponse: func(resp *http.Response) error {
			if resp.Request.URL.Path != "/supported" {
				return nil
			}
			b, err := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if err != nil {
				return err
			}
			var s x402.SupportedResponse
			if err := json.Unmarshal(b, &s); err != nil {
				return err
			}
			for _, scheme := range schemes {
				s.Kinds = append(s.Kinds, x402.SupportedKind{X402Version: 2, Scheme: scheme, Network: network})
			}
			if b, err = x402.Marshal(s); err != nil {
				return err
			}
			resp.Body = io.NopCloser(bytes.NewReader(b))
			resp.ContentLength = int64(len(b))
			resp.Header.Set("Content-Length", strconv.Itoa(len(b)))
			return nil
		},
	}
	srv := httptest.NewServer(proxy)
	tb.Cleanup(srv.Close)
	return srv.URL
}

func buyerGet(tb testing.TB, hc *http.Client, u string) (gotResponse, []byte) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(tb.Context(), scriptTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		tb.Fatal(err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		tb.Fatalf("GET %s: %v", u, err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		tb.Fatal(err)
	}
	return gotResponse{StatusCode: resp.StatusCode, Header: resp.Header}, body
}

// buildCLI builds the llm4agents command into the test's temporary directory.
// Without the go command it skips, or fails with LLM4AGENTS_TEST_REQUIRE_TOOLS=1.
func buildCLI(tb testing.TB) string {
	tb.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		if os.Getenv(requireToolsEnv) == "1" {
			tb.Fatalf("go command: %v", err)
		}
		tb.Skipf("go command: %v", err)
	}
	bin := filepath.Join(tb.TempDir(), "llm4agents")
	ctx, cancel := context.WithTimeout(tb.Context(), cliTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, goBin, "build", "-o", bin, "../cmd/llm4agents")
	if out, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("go build ./cmd/llm4agents: %v\n%s", err, out)
	}
	return bin
}

// runCLI runs the built command with env added to a bare environment.
func runCLI(tb testing.TB, bin string, env []string, args ...string) (stdout, stderr string, err error) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(tb.Context(), scriptTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + tb.TempDir()}, env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	cmd.SysProcAttr = killWithParent()
	cmd.WaitDelay = stopTimeout
	err = cmd.Run()
	return out.String(), errOut.String(), err
}
