package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/accounts/abi/bind"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/google/go-cmp/cmp"

	"github.com/llm4agents/llm4agents/contracts"
	"github.com/llm4agents/llm4agents/internal/facilitator"
	"github.com/llm4agents/llm4agents/internal/testchain"
	"github.com/llm4agents/llm4agents/x402"
	"github.com/llm4agents/llm4agents/x402/evm/exact"
)

// Roles of the dev accounts in these tests, as in the demo.
const (
	testSigner = 8 // the facilitator's key
	testPayTo  = 9
	testAmount = 10_000 // 0.01 of a 6-decimal token
)

const testNetwork = "eip155:1337"

// signerKeyHex is the facilitator key as an operator would write it, without 0x.
// Tests look for it in everything run prints or returns.
var signerKeyHex = hex.EncodeToString(crypto.FromECDSA(testchain.DevKey(testSigner)))

// keyEnv is an environment that holds only the facilitator key.
func keyEnv() func(string) string {
	return envMap(map[string]string{facilitatorKeyEnv: signerKeyHex})
}

// assertNoSecret fails if s contains any of the secrets, in any letter case and
// with or without a 0x prefix.
func assertNoSecret(tb testing.TB, where, s string, secrets ...string) {
	tb.Helper()
	low := strings.ToLower(s)
	for _, secret := range secrets {
		secret = strings.ToLower(strings.TrimPrefix(secret, "0x"))
		if secret != "" && strings.Contains(low, secret) {
			tb.Errorf("%s contains secret material %.10s…", where, secret)
		}
	}
}

// testToken is our EIP-3009 token deployed on a fresh anvil node, with the
// buyers DevKey(1) to DevKey(3) funded.
type testToken struct {
	node *testchain.Anvil
	addr common.Address
	tok  *contracts.EIP3009Token
}

func deployToken(tb testing.TB) *testToken {
	tb.Helper()
	node := testchain.StartAnvil(tb)
	auth, err := bind.NewKeyedTransactorWithChainID(testchain.DevKey(0), node.ChainID)
	if err != nil {
		tb.Fatal(err)
	}
	addr, tok := deployDomain(tb, node, "USD Coin", "2")
	for i := 1; i <= 3; i++ {
		tx, err := tok.Mint(auth, testchain.DevAddress(i), big.NewInt(1_000_000_000))
		if err != nil {
			tb.Fatal(err)
		}
		waitMined(tb, node, tx)
	}
	return &testToken{node: node, addr: addr, tok: tok}
}

// deployDomain deploys our EIP-3009 token with the EIP-712 domain name and
// version on node, from DevKey(0).
func deployDomain(tb testing.TB, node *testchain.Anvil, name, version string) (common.Address, *contracts.EIP3009Token) {
	tb.Helper()
	auth, err := bind.NewKeyedTransactorWithChainID(testchain.DevKey(0), node.ChainID)
	if err != nil {
		tb.Fatal(err)
	}
	addr, tx, tok, err := contracts.DeployEIP3009Token(auth, node.Client, name, version, 6)
	if err != nil {
		tb.Fatal(err)
	}
	waitMined(tb, node, tx)
	return addr, tok
}

func waitMined(tb testing.TB, node *testchain.Anvil, tx *types.Transaction) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(tb.Context(), 10*time.Second)
	defer cancel()
	r, err := bind.WaitMined(ctx, node.Client, tx)
	if err != nil || r.Status != types.ReceiptStatusSuccessful {
		tb.Fatalf("mine %s: %v %+v", tx.Hash().Hex(), err, r)
	}
}

func (tt *testToken) balance(tb testing.TB, a common.Address) *big.Int {
	tb.Helper()
	b, err := tt.tok.BalanceOf(&bind.CallOpts{Context: tb.Context()}, a)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

func (tt *testToken) requirements() x402.PaymentRequirements {
	return x402.PaymentRequirements{
		Scheme: exact.Scheme, Network: testNetwork, Amount: "10000", Asset: tt.addr.Hex(),
		PayTo: testchain.DevAddress(testPayTo).Hex(), MaxTimeoutSeconds: 300,
		Extra: json.RawMessage(`{"name":"USD Coin","version":"2"}`),
	}
}

// pay signs a payment of the requirements by buyer DevKey(i).
func (tt *testToken) pay(tb testing.TB, i int) *x402.PaymentPayload {
	tb.Helper()
	pr := &x402.PaymentRequired{X402Version: x402.Version, Resource: &x402.ResourceInfo{URL: "http://127.0.0.1/paid"}, Accepts: []x402.PaymentRequirements{tt.requirements()}}
	p, err := exact.NewPaymentPayload(tb.Context(), exact.NewKeySigner(testchain.DevKey(i)), pr, 0, exact.SignOptions{})
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

// paymentSecrets returns what of a payment must never reach a log: its
// signature and its PAYMENT-SIGNATURE header.
func paymentSecrets(tb testing.TB, p *x402.PaymentPayload) []string {
	tb.Helper()
	var w exact.PayloadJSON
	if err := json.Unmarshal(p.Payload, &w); err != nil {
		tb.Fatal(err)
	}
	header, err := x402.EncodeHeader(p)
	if err != nil {
		tb.Fatal(err)
	}
	if len(w.Signature) < 10 {
		tb.Fatalf("payload signature %q", w.Signature)
	}
	return []string{w.Signature, header}
}

// cmdProc is a long-running command (facilitator, serve) started through run.
type cmdProc struct {
	name           string // the command, for messages
	url            string
	stdout, stderr *syncBuffer
	cancel         context.CancelFunc
	done           chan error // run's result

	stopOnce sync.Once
	stopErr  error
}

// startFacilitator runs the facilitator command with args in a goroutine and
// waits until it prints the address it serves on. The cleanup stops it.
func startFacilitator(tb testing.TB, args []string, getenv func(string) string) *cmdProc {
	tb.Helper()
	return startCmd(tb, append([]string{"facilitator"}, args...), getenv, "facilitator listening on ")
}

// startCmd runs run(args) in a goroutine and waits until the first line of its
// stdout is prefix followed by the http:// URL of a loopback listener. The
// cleanup stops it and fails the test unless run then returns nil.
func startCmd(tb testing.TB, args []string, getenv func(string) string, prefix string) *cmdProc {
	tb.Helper()
	ctx, cancel := context.WithCancel(tb.Context())
	p := &cmdProc{name: args[0], stdout: new(syncBuffer), stderr: new(syncBuffer), cancel: cancel, done: make(chan error, 1)}
	go func() { p.done <- run(ctx, args, getenv, p.stdout, p.stderr) }()
	tb.Cleanup(func() {
		if err := p.stop(); err != nil {
			tb.Errorf("stop %s: %v", p.name, err)
		}
	})

	deadline := time.After(30 * time.Second)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if out := p.stdout.String(); strings.Contains(out, "\n") {
			line, _, _ := strings.Cut(out, "\n")
			u, ok := strings.CutPrefix(line, prefix)
			if !ok {
				tb.Fatalf("first stdout line %q, want %q…", line, prefix)
			}
			host, ok := strings.CutPrefix(u, "http://")
			if !ok {
				tb.Fatalf("listening line %q has no http:// URL", line)
			}
			if ip, _, err := net.SplitHostPort(host); err != nil || !net.ParseIP(ip).IsLoopback() {
				tb.Fatalf("%s serves on %q, want a loopback address", p.name, host)
			}
			p.url = u
			return p
		}
		select {
		case err := <-p.done:
			p.stopOnce.Do(func() { p.stopErr = err })
			tb.Fatalf("%s exited before listening: %v\nstderr:\n%s", p.name, err, p.stderr)
		case <-deadline:
			tb.Fatalf("%s not listening after 30s\nstderr:\n%s", p.name, p.stderr)
		case <-tick.C:
		}
	}
}

// stop cancels the command's context and returns what run returned. The
// shutdown must finish in bounded time. Later calls return the same result.
func (p *cmdProc) stop() error {
	p.stopOnce.Do(func() {
		p.cancel()
		select {
		case p.stopErr = <-p.done:
		case <-time.After(20 * time.Second):
			p.stopErr = errors.New("run did not return within 20s of its context ending")
		}
	})
	return p.stopErr
}

func (p *cmdProc) do(tb testing.TB, method, path string, body []byte) (int, http.Header, []byte) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(tb.Context(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, p.url+path, bytes.NewReader(body))
	if err != nil {
		tb.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatalf("%s %s: %v", method, path, err)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	_ = resp.Body.Close() // read-only: nothing to lose
	if err != nil {
		tb.Fatalf("%s %s: read body: %v", method, path, err)
	}
	return resp.StatusCode, resp.Header, b
}

// facilitatorArgs are the flags of a facilitator on the test node that serves
// only tokenSpec, on a free loopback port with a fresh store.
func facilitatorArgs(tb testing.TB, node *testchain.Anvil, tokenSpec string, extra ...string) []string {
	tb.Helper()
	return append([]string{
		"--rpc", node.URL, "--network", testNetwork, "--asset", tokenSpec,
		"--listen", "127.0.0.1:0", "--store", filepath.Join(tb.TempDir(), "facilitator.db"),
		"--settle-timeout", "5s",
	}, extra...)
}

// TestFacilitatorEndToEnd runs `llm4agents facilitator` against anvil and pays
// through it over HTTP as a resource server would.
func TestFacilitatorEndToEnd(t *testing.T) {
	tt := deployToken(t)
	proc := startFacilitator(t, facilitatorArgs(t, tt.node, tt.addr.Hex()), keyEnv())
	remote := facilitator.NewClient(proc.url, nil)
	ctx := t.Context()
	var secrets []string

	t.Run("supported", func(t *testing.T) {
		s, err := remote.Supported(ctx)
		if err != nil {
			t.Fatal(err)
		}
		want := []x402.SupportedKind{{X402Version: x402.Version, Scheme: exact.Scheme, Network: testNetwork}}
		if diff := cmp.Diff(want, s.Kinds); diff != "" {
			t.Errorf("kinds (-want +got):\n%s", diff)
		}
		if signers := s.Signers["eip155:*"]; !slices.Contains(signers, testchain.DevAddress(testSigner).Hex()) {
			t.Errorf("signers = %v, want the key's address %s", s.Signers, testchain.DevAddress(testSigner).Hex())
		}
	})

	t.Run("metrics", func(t *testing.T) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, proc.url+"/metrics", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		// anvil funds the dev accounts with 10,000 ETH = 1e13 gwei.
		if !strings.Contains(string(b), `llm4agents_signer_balance_gwei{network="`+testNetwork+`",signer="`+testchain.DevAddress(testSigner).Hex()+`"} 1e+13`) {
			t.Errorf("GET /metrics lacks the signer balance:\n%.600s", b)
		}
		if !strings.Contains(string(b), `llm4agents_facilitator_reorgs_total{outcome="lost"} 0`) {
			t.Errorf("GET /metrics lacks the reorg counter:\n%.600s", b)
		}
	})

	t.Run("asset domain read from the token", func(t *testing.T) {
		logs := proc.stderr.String()
		if want := `msg="serving asset" asset=` + tt.addr.Hex() + ` name="USD Coin" version=2`; !strings.Contains(logs, want) {
			t.Errorf("stderr lacks %q:\n%s", want, logs)
		}
	})

	t.Run("verify then settle once", func(t *testing.T) {
		req := tt.requirements()
		p := tt.pay(t, 1)
		secrets = append(secrets, paymentSecrets(t, p)...)
		buyer, payTo := testchain.DevAddress(1), testchain.DevAddress(testPayTo)

		v, err := remote.Verify(ctx, p, req)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(&x402.VerifyResponse{IsValid: true, Payer: buyer.Hex()}, v); diff != "" {
			t.Fatalf("verify (-want +got):\n%s", diff)
		}

		payToBefore, buyerBefore := tt.balance(t, payTo), tt.balance(t, buyer)
		s, err := remote.Settle(ctx, p, req)
		if err != nil {
			t.Fatal(err)
		}
		if !s.Success || s.Network != testNetwork || !strings.HasPrefix(s.Transaction, "0x") {
			t.Fatalf("settle = %+v, want success on %s with a transaction", s, testNetwork)
		}
		if got := new(big.Int).Sub(tt.balance(t, payTo), payToBefore); got.Int64() != testAmount {
			t.Errorf("payTo received %s, want %d", got, testAmount)
		}
		if got := new(big.Int).Sub(buyerBefore, tt.balance(t, buyer)); got.Int64() != testAmount {
			t.Errorf("buyer paid %s, want %d", got, testAmount)
		}

		// The same authorization again: refused, nothing charged twice.
		payToBefore = tt.balance(t, payTo)
		again, err := remote.Settle(ctx, p, req)
		if err != nil {
			t.Fatal(err)
		}
		if again.Success || again.ErrorReason != x402.ReasonEVMNonceAlreadyUsed {
			t.Errorf("replayed settle = %+v, want %s", again, x402.ReasonEVMNonceAlreadyUsed)
		}
		v, err = remote.Verify(ctx, p, req)
		if err != nil {
			t.Fatal(err)
		}
		if v.IsValid {
			t.Errorf("replayed verify = %+v, want invalid", v)
		}
		if got := tt.balance(t, payTo); got.Cmp(payToBefore) != 0 {
			t.Errorf("payTo balance moved from %s to %s on replay", payToBefore, got)
		}
	})

	t.Run("malformed bodies", func(t *testing.T) {
		p := tt.pay(t, 2)
		secrets = append(secrets, paymentSecrets(t, p)...)
		valid, err := x402.Marshal(x402.FacilitatorRequest{X402Version: x402.Version, PaymentPayload: *p, PaymentRequirements: tt.requirements()})
		if err != nil {
			t.Fatal(err)
		}
		with := func(field string, value any) []byte {
			var m map[string]any
			if err := json.Unmarshal(valid, &m); err != nil {
				t.Fatal(err)
			}
			if value == nil {
				delete(m, field)
			} else {
				m[field] = value
			}
			b, err := json.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
		oversize := with("padding", strings.Repeat("a", 64<<10))
		tests := []struct {
			name string
			body []byte
		}{
			{"empty", nil},
			{"not JSON", []byte("hello")},
			{"truncated JSON", valid[:len(valid)/2]},
			{"JSON null", []byte("null")},
			{"JSON array", []byte("[" + string(valid) + "]")},
			{"JSON string", []byte(`"x402"`)},
			{"missing paymentPayload", with("paymentPayload", nil)},
			{"missing paymentRequirements", with("paymentRequirements", nil)},
			{"paymentPayload not an object", with("paymentPayload", "0xdeadbeef")},
			{"x402Version 1", with("x402Version", 1)},
			{"x402Version as string", with("x402Version", "2")},
			{"oversize", oversize},
		}
		for _, path := range []string{"/verify", "/settle"} {
			for _, tc := range tests {
				t.Run(path+"/"+tc.name, func(t *testing.T) {
					status, h, body := proc.do(t, http.MethodPost, path, tc.body)
					if status != http.StatusBadRequest {
						t.Errorf("status %d, want 400; body %s", status, body)
					}
					if ct := h.Get("Content-Type"); ct != "application/json" {
						t.Errorf("Content-Type %q, want application/json", ct)
					}
					var e struct {
						Error *string `json:"error"`
					}
					if err := json.Unmarshal(body, &e); err != nil || e.Error == nil || *e.Error == "" {
						t.Errorf("body %s, want {\"error\": \"...\"}", body)
					}
				})
			}
		}
		// The payment those bodies carried was never settled.
		if again := tt.balance(t, testchain.DevAddress(2)); again.Cmp(big.NewInt(1_000_000_000)) != 0 {
			t.Errorf("buyer 2 balance %s after malformed requests, want untouched", again)
		}
	})

	t.Run("wrong method", func(t *testing.T) {
		for _, c := range []struct{ method, path string }{
			{http.MethodGet, "/verify"},
			{http.MethodGet, "/settle"},
			{http.MethodPut, "/verify"},
			{http.MethodPost, "/supported"},
		} {
			status, h, _ := proc.do(t, c.method, c.path, nil)
			if status != http.StatusMethodNotAllowed {
				t.Errorf("%s %s: status %d, want 405", c.method, c.path, status)
			}
			if h.Get("Allow") == "" {
				t.Errorf("%s %s: 405 without an Allow header", c.method, c.path)
			}
		}
		if status, _, _ := proc.do(t, http.MethodGet, "/nope", nil); status != http.StatusNotFound {
			t.Errorf("GET /nope: status %d, want 404", status)
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
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		if _, err := remote.Supported(ctx); err == nil {
			t.Error("facilitator still answers after run returned")
		}
	})

	// Nothing run printed may carry the key or a payment's signature.
	assertNoSecret(t, "stderr", proc.stderr.String(), append(secrets, signerKeyHex)...)
	assertNoSecret(t, "stdout", proc.stdout.String(), append(secrets, signerKeyHex)...)
}

// TestFacilitatorShutdownWaitsForSettle cancels the facilitator while a settle
// waits for its block: the request still gets its answer, and run then
// returns nil.
func TestFacilitatorShutdownWaitsForSettle(t *testing.T) {
	tt := deployToken(t)
	proc := startFacilitator(t, facilitatorArgs(t, tt.node, tt.addr.Hex()), keyEnv())
	if err := tt.node.SetAutomine(t.Context(), false); err != nil {
		t.Fatal(err)
	}
	remote := facilitator.NewClient(proc.url, nil)
	p := tt.pay(t, 3)

	type result struct {
		r   *x402.SettleResponse
		err error
	}
	settled := make(chan result, 1)
	go func() {
		r, err := remote.Settle(t.Context(), p, tt.requirements())
		settled <- result{r, err}
	}()

	// Wait until the settlement transaction is in the pool.
	signer := testchain.DevAddress(testSigner)
	for deadline := time.Now().Add(4 * time.Second); ; {
		pending, err := tt.node.Client.PendingNonceAt(t.Context(), signer)
		if err != nil {
			t.Fatal(err)
		}
		if pending > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no settlement transaction reached the pool")
		}
		time.Sleep(20 * time.Millisecond)
	}

	stopped := make(chan error, 1)
	go func() { stopped <- proc.stop() }()
	select {
	case err := <-stopped:
		t.Fatalf("run returned %v with a settle in flight", err)
	case <-time.After(200 * time.Millisecond):
	}
	if err := tt.node.Mine(t.Context(), 1); err != nil {
		t.Fatal(err)
	}
	res := <-settled
	if res.err != nil || !res.r.Success {
		t.Fatalf("in-flight settle = %+v, %v; want success", res.r, res.err)
	}
	select {
	case err := <-stopped:
		if err != nil {
			t.Fatalf("run returned %v, want nil", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("run did not return after the in-flight settle finished")
	}
	assertNoSecret(t, "stderr", proc.stderr.String(), append(paymentSecrets(t, p), signerKeyHex)...)
}

// TestFacilitatorAssetOverride: 0xTOKEN:NAME:VERSION is served as given once
// the token's DOMAIN_SEPARATOR() confirms it; the key comes from a file
// written the way people write them (0x prefix, surrounding whitespace).
func TestFacilitatorAssetOverride(t *testing.T) {
	tt := deployToken(t)
	some, _ := deployDomain(t, tt.node, "Some Token", "7")
	keyFile := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(keyFile, []byte("  0x"+signerKeyHex+"\r\n\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	args := facilitatorArgs(t, tt.node, some.Hex()+":Some Token:7", "--key-file", keyFile)
	proc := startFacilitator(t, args, envMap(nil))

	if want := `msg="serving asset" asset=` + some.Hex() + ` name="Some Token" version=7`; !strings.Contains(proc.stderr.String(), want) {
		t.Errorf("stderr lacks %q:\n%s", want, proc.stderr)
	}
	s, err := facilitator.NewClient(proc.url, nil).Supported(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if signers := s.Signers["eip155:*"]; !slices.Contains(signers, testchain.DevAddress(testSigner).Hex()) {
		t.Errorf("signers = %v, want the key file's address", s.Signers)
	}
	if err := proc.stop(); err != nil {
		t.Errorf("run returned %v after cancel, want nil", err)
	}
	assertNoSecret(t, "stderr", proc.stderr.String(), signerKeyHex)
}

// TestFacilitatorAssets: the start-up checks read a token's EIP-712 domain
// unless the flag gives one, and refuse an override the token contradicts or
// an address that is no token, naming the flag.
func TestFacilitatorAssets(t *testing.T) {
	tt := deployToken(t)
	eoa := testchain.DevAddress(5)
	tests := []struct {
		name    string
		spec    string
		want    facilitator.Asset
		wantErr string
	}{
		{name: "read from token", spec: tt.addr.Hex(), want: facilitator.Asset{Address: tt.addr, Name: "USD Coin", Version: "2"}},
		{name: "lower-case address", spec: strings.ToLower(tt.addr.Hex()), want: facilitator.Asset{Address: tt.addr, Name: "USD Coin", Version: "2"}},
		{name: "override", spec: tt.addr.Hex() + ":USD Coin:2", want: facilitator.Asset{Address: tt.addr, Name: "USD Coin", Version: "2"}},
		{name: "override of another version", spec: tt.addr.Hex() + ":USD Coin:9",
			wantErr: "--asset " + tt.addr.Hex() + `:VERSION is "9" but the token's EIP-712 domain says "2"`},
		{name: "not a contract", spec: eoa.Hex(), wantErr: "--asset " + eoa.Hex() + " has no contract code on eip155:1337 (chain at " + tt.node.URL + ")"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, err := parseFacilitatorFlags([]string{"--rpc", tt.node.URL, "--network", testNetwork, "--asset", tc.spec},
				env{getenv: envMap(nil), stdout: io.Discard, stderr: io.Discard})
			if err != nil {
				t.Fatal(err)
			}
			checked, err := checkChain(t.Context(), tt.node.Client, facilitatorSetup(f, testchain.DevKey(testSigner)), f.rpc, slog.New(slog.DiscardHandler))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff([]facilitator.Asset{tc.want}, facilitatorAssets(checked)); diff != "" {
				t.Errorf("assets (-want +got):\n%s", diff)
			}
		})
	}
}

// closedPortURL is an http URL on loopback where nothing listens.
func closedPortURL(tb testing.TB) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		tb.Fatal(err)
	}
	return "http://" + addr
}

// flipCase changes the case of the first letter of a checksummed address's
// hex, which breaks its EIP-55 checksum.
func flipCase(tb testing.TB, addr string) string {
	tb.Helper()
	b := []byte(addr)
	for i := 2; i < len(b); i++ {
		switch {
		case b[i] >= 'a' && b[i] <= 'f':
			b[i] -= 'a' - 'A'
			return string(b)
		case b[i] >= 'A' && b[i] <= 'F':
			b[i] += 'a' - 'A'
			return string(b)
		}
	}
	tb.Fatalf("address %s has no letter", addr)
	return ""
}

// brokeKey is a key whose account holds nothing on any test chain.
func brokeKey(tb testing.TB) *ecdsa.PrivateKey {
	tb.Helper()
	key, err := crypto.ToECDSA(common.LeftPadBytes([]byte{0xb0, 0x0c, 0xe}, 32))
	if err != nil {
		tb.Fatal(err)
	}
	return key
}

func writeFile(tb testing.TB, content string) string {
	tb.Helper()
	path := filepath.Join(tb.TempDir(), "key")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		tb.Fatal(err)
	}
	return path
}

// TestFacilitatorFlagErrors: hostile flags and keys fail fast, before any chain
// I/O, with a message that names the problem and never repeats the key.
func TestFacilitatorFlagErrors(t *testing.T) {
	rpc := closedPortURL(t)
	asset := testchain.DevAddress(5).Hex() // any checksummed address
	store := filepath.Join(t.TempDir(), "facilitator.db")
	base := func(drop string, extra ...string) []string {
		args := []string{"facilitator"}
		for _, kv := range [][2]string{{"--rpc", rpc}, {"--network", testNetwork}, {"--asset", asset}, {"--listen", "127.0.0.1:0"}, {"--store", store}} {
			if kv[0] != drop {
				args = append(args, kv[0], kv[1])
			}
		}
		return append(args, extra...)
	}
	noKey := envMap(nil)
	envKey := func(v string) func(string) string { return envMap(map[string]string{facilitatorKeyEnv: v}) }

	tests := []struct {
		name    string
		args    []string
		getenv  func(string) string
		wantErr []string // every one must be in the error
	}{
		{name: "missing --rpc", args: base("--rpc"), wantErr: []string{"--rpc is required"}},
		{name: "empty --rpc", args: base("", "--rpc", ""), wantErr: []string{"--rpc is required"}},
		{name: "missing --network", args: base("--network"), wantErr: []string{"--network is required"}},
		{name: "missing --asset", args: base("--asset"), wantErr: []string{"--asset is required"}},
		{name: "network not numeric", args: base("", "--network", "eip155:abc"), wantErr: []string{"--network", `"eip155:abc" is not eip155:<chain id>`}},
		{name: "network solana", args: base("", "--network", "solana:x"), wantErr: []string{"--network", `"solana:x" is not eip155:<chain id>`}},
		{name: "network chain 0", args: base("", "--network", "eip155:0"), wantErr: []string{"--network", `"eip155:0" is not eip155:<chain id>`}},
		{name: "network negative", args: base("", "--network", "eip155:-1"), wantErr: []string{"--network", "is not eip155:<chain id>"}},
		{name: "network leading zero", args: base("", "--network", "eip155:01337"), wantErr: []string{"--network", "is not eip155:<chain id>"}},
		{name: "network empty id", args: base("", "--network", "eip155:"), wantErr: []string{"--network", "is not eip155:<chain id>"}},
		{name: "network huge id", args: base("", "--network", "eip155:"+strings.Repeat("9", 40)), wantErr: []string{"--network", "is not eip155:<chain id>"}},
		{name: "asset not an address", args: base("", "--asset", "usdc"), wantErr: []string{`--asset "usdc"`, "not a 0x-prefixed 20-byte hex address"}},
		{name: "asset short", args: base("", "--asset", asset[:41]), wantErr: []string{"--asset", "not a 0x-prefixed 20-byte hex address"}},
		{name: "asset bad checksum", args: base("", "--asset", flipCase(t, asset)), wantErr: []string{"--asset", "bad EIP-55 checksum"}},
		{name: "asset 0xT:onlyname", args: base("", "--asset", "0xT:onlyname"), wantErr: []string{`--asset "0xT:onlyname"`, "not a 0x-prefixed 20-byte hex address"}},
		{name: "asset name without version", args: base("", "--asset", asset+":onlyname"), wantErr: []string{"--asset", "give both NAME and VERSION"}},
		{name: "asset empty name and version", args: base("", "--asset", asset+"::"), wantErr: []string{"--asset", "empty name or version"}},
		{name: "asset empty version", args: base("", "--asset", asset+":USD Coin:"), wantErr: []string{"--asset", "empty name or version"}},
		{name: "second asset bad", args: base("", "--asset", "0xnope"), wantErr: []string{`--asset "0xnope"`}},
		{name: "max fee zero", args: base("", "--max-fee-per-gas", "0"), wantErr: []string{`--max-fee-per-gas "0" is not a positive integer of wei`}},
		{name: "max fee negative", args: base("", "--max-fee-per-gas", "-1"), wantErr: []string{`--max-fee-per-gas "-1" is not a positive integer of wei`}},
		{name: "max fee fraction", args: base("", "--max-fee-per-gas", "1.5"), wantErr: []string{`--max-fee-per-gas "1.5" is not a positive integer of wei`}},
		{name: "max fee word", args: base("", "--max-fee-per-gas", "abc"), wantErr: []string{`--max-fee-per-gas "abc" is not a positive integer of wei`}},
		{name: "max fee empty", args: base("", "--max-fee-per-gas", ""), wantErr: []string{`--max-fee-per-gas "" is not a positive integer of wei`}},
		{name: "max fee over uint256", args: base("", "--max-fee-per-gas", "1"+strings.Repeat("0", 78)), wantErr: []string{"--max-fee-per-gas", "is not a positive integer of wei"}},
		{name: "settle timeout zero", args: base("", "--settle-timeout", "0"), wantErr: []string{"--settle-timeout must be positive"}},
		{name: "settle timeout negative", args: base("", "--settle-timeout", "-1s"), wantErr: []string{"--settle-timeout must be positive"}},
		{name: "settle timeout not a duration", args: base("", "--settle-timeout", "soon"), wantErr: []string{"invalid value", "-settle-timeout"}},
		{name: "reconcile every zero", args: base("", "--reconcile-every", "0s"), wantErr: []string{"--reconcile-every must be positive"}},
		{name: "schemes unknown", args: base("", "--schemes", "exact,batch-settlement"), wantErr: []string{`--schemes: "batch-settlement" is not a scheme served here (exact, upto)`}},
		{name: "schemes twice", args: base("", "--schemes", "upto,exact,upto"), wantErr: []string{"--schemes lists upto twice"}},
		{name: "schemes empty", args: base("", "--schemes", ""), wantErr: []string{`--schemes: "" is not a scheme`}},
		{name: "schemes trailing comma", args: base("", "--schemes", "exact,"), wantErr: []string{`--schemes: "" is not a scheme`}},
		{name: "schemes long value truncated", args: base("", "--schemes", strings.Repeat("x", 500)), wantErr: []string{`..." is not a scheme`}},
		{name: "reorg window zero", args: base("", "--reorg-window", "0s"), wantErr: []string{"--reorg-window 0s is not between 0 and 24h0m0s"}},
		{name: "reorg window past retention", args: base("", "--reorg-window", "25h"), wantErr: []string{"--reorg-window 25h0m0s is not between 0 and 24h0m0s"}},
		{name: "poll interval zero", args: base("", "--poll-interval", "0s"), wantErr: []string{"--poll-interval 0s is not between 10ms and 10s"}},
		{name: "poll interval tiny", args: base("", "--poll-interval", "1ms"), wantErr: []string{"--poll-interval 1ms is not between 10ms and 10s"}},
		{name: "poll interval huge", args: base("", "--poll-interval", "1m"), wantErr: []string{"--poll-interval 1m0s is not between 10ms and 10s"}},
		{name: "extra positional argument", args: base("", "extra"), wantErr: []string{`unexpected argument`}},
		{name: "no key at all", args: base(""), getenv: noKey, wantErr: []string{"no signer key", "--key-file", facilitatorKeyEnv}},
		{name: "env key garbage", args: base(""), getenv: envKey("not a key"), wantErr: []string{"signer key is not a 32-byte hex private key"}},
		{name: "env key truncated", args: base(""), getenv: envKey(signerKeyHex[:63]), wantErr: []string{"signer key is not a 32-byte hex private key"}},
		{name: "env key with junk after", args: base(""), getenv: envKey(signerKeyHex + "zz"), wantErr: []string{"signer key is not a 32-byte hex private key"}},
		{name: "env key too long", args: base(""), getenv: envKey(signerKeyHex + "00"), wantErr: []string{"signer key is not a 32-byte hex private key"}},
		{name: "env key zero", args: base(""), getenv: envKey(strings.Repeat("0", 64)), wantErr: []string{"signer key is not a 32-byte hex private key"}},
		{name: "key file garbage", args: base("", "--key-file", writeFile(t, "correct horse battery staple\n")), getenv: noKey, wantErr: []string{"signer key is not a 32-byte hex private key"}},
		{name: "key file empty", args: base("", "--key-file", writeFile(t, "")), getenv: noKey, wantErr: []string{"signer key is not a 32-byte hex private key"}},
		{name: "key file two keys", args: base("", "--key-file", writeFile(t, signerKeyHex+"\n"+signerKeyHex+"\n")), getenv: noKey, wantErr: []string{"signer key is not a 32-byte hex private key"}},
		{name: "key file JSON keystore", args: base("", "--key-file", writeFile(t, `{"privateKey":"0x`+signerKeyHex+`"}`)), getenv: noKey, wantErr: []string{"signer key is not a 32-byte hex private key"}},
		{name: "key file wins over env", args: base("", "--key-file", writeFile(t, "garbage")), getenv: keyEnv(), wantErr: []string{"signer key is not a 32-byte hex private key"}},
		{name: "key file missing", args: base("", "--key-file", filepath.Join(t.TempDir(), "absent")), getenv: noKey, wantErr: []string{"read key file", "no such file"}},
		{name: "key file is a directory", args: base("", "--key-file", t.TempDir()), getenv: noKey, wantErr: []string{"read key file", "is a directory"}},
		{name: "key file huge", args: base("", "--key-file", writeFile(t, signerKeyHex+strings.Repeat(" ", 1<<20))), getenv: noKey, wantErr: []string{"key file", "larger than"}},
		{name: "unreachable rpc", args: base(""), wantErr: []string{"read chain id", "connection refused"}},
		{name: "rpc unknown scheme", args: base("", "--rpc", "ftp://127.0.0.1:1"), wantErr: []string{"dial node"}},
	}
	if _, err := os.Stat("/dev/zero"); err == nil {
		tests = append(tests, struct {
			name    string
			args    []string
			getenv  func(string) string
			wantErr []string
		}{name: "key file endless", args: base("", "--key-file", "/dev/zero"), getenv: noKey, wantErr: []string{"key file", "larger than"}})
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			getenv := tc.getenv
			if getenv == nil {
				getenv = keyEnv()
			}
			stdout, stderr, err := runBounded(t, 15*time.Second, tc.args, getenv)
			if err == nil {
				t.Fatalf("run succeeded, want an error containing %q", tc.wantErr)
			}
			for _, want := range tc.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("err = %q, want it to contain %q", err, want)
				}
			}
			if strings.Contains(stdout, "listening") {
				t.Errorf("stdout = %q, want no listener", stdout)
			}
			secrets := []string{signerKeyHex, signerKeyHex[:63]}
			assertNoSecret(t, "error", err.Error(), secrets...)
			assertNoSecret(t, "stderr", stderr, secrets...)
		})
	}
}

// TestFacilitatorPollInterval: --poll-interval defaults by network and is
// taken as given otherwise.
func TestFacilitatorPollInterval(t *testing.T) {
	asset := testchain.DevAddress(5).Hex()
	for _, tc := range []struct {
		network string
		extra   []string
		want    time.Duration
	}{
		{network: "eip155:1337", want: 100 * time.Millisecond},
		{network: "eip155:31337", want: 100 * time.Millisecond},
		{network: "eip155:8453", want: 250 * time.Millisecond},
		{network: "eip155:8453", extra: []string{"--poll-interval", "2s"}, want: 2 * time.Second},
		{network: "eip155:1337", extra: []string{"--poll-interval", "10ms"}, want: 10 * time.Millisecond},
	} {
		args := append([]string{"--rpc", "http://127.0.0.1:1", "--network", tc.network, "--asset", asset}, tc.extra...)
		f, err := parseFacilitatorFlags(args, env{getenv: envMap(nil), stdout: io.Discard, stderr: io.Discard})
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		if f.pollInterval != tc.want {
			t.Errorf("%v: poll interval %s, want %s", args, f.pollInterval, tc.want)
		}
	}
}

// TestFacilitatorChainErrors: configurations that only the node can refuse.
func TestFacilitatorChainErrors(t *testing.T) {
	tt := deployToken(t)
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = busy.Close() })
	eoa := testchain.DevAddress(5).Hex()
	tests := []struct {
		name    string
		args    []string
		wantErr []string
	}{
		{name: "network of another chain", args: []string{"--network", "eip155:1"}, wantErr: []string{"--network eip155:1 does not match the node's chain id 1337"}},
		{name: "asset not a contract", args: []string{"--asset", eoa}, wantErr: []string{"--asset " + eoa + " has no contract code on eip155:1337"}},
		{name: "asset of another domain", args: []string{"--asset", tt.addr.Hex() + ":USD Coin:1"},
			wantErr: []string{"--asset " + tt.addr.Hex() + `:VERSION is "1" but the token's EIP-712 domain says "2"`}},
		{name: "signer without gas", args: []string{"--key-file", writeFile(t, hex.EncodeToString(crypto.FromECDSA(brokeKey(t))))},
			wantErr: []string{"--key-file is the key of signer " + crypto.PubkeyToAddress(brokeKey(t).PublicKey).Hex() + ", which has no balance on eip155:1337"}},
		{name: "listen address in use", args: []string{"--listen", busy.Addr().String()}, wantErr: []string{"listen", "address already in use"}},
		{name: "listen address bad", args: []string{"--listen", "127.0.0.1:notaport"}, wantErr: []string{"listen"}},
		{name: "store in a missing directory", args: []string{"--store", filepath.Join(t.TempDir(), "absent", "fac.db")}, wantErr: []string{"fac.db"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// A later flag overrides an earlier one, except --asset, which adds a token.
			args := append([]string{"facilitator"}, facilitatorArgs(t, tt.node, tt.addr.Hex(), tc.args...)...)
			stdout, stderr, err := runBounded(t, 20*time.Second, args, keyEnv())
			if err == nil {
				t.Fatalf("run succeeded, want an error containing %q", tc.wantErr)
			}
			for _, want := range tc.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("err = %q, want it to contain %q", err, want)
				}
			}
			if strings.Contains(stdout, "listening") {
				t.Errorf("stdout = %q, want no listener", stdout)
			}
			assertNoSecret(t, "error", err.Error(), signerKeyHex)
			assertNoSecret(t, "stderr", stderr, signerKeyHex)
		})
	}
}
