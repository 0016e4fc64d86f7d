package main

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/accounts/abi/bind"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/google/go-cmp/cmp"

	"github.com/llm4agents/llm4agents/contracts"
	"github.com/llm4agents/llm4agents/internal/testchain"
)

// rpcRecorder is a JSON-RPC endpoint that answers eth_chainId with 1337 and
// every other method with "method not found", like a node without the anvil_*
// namespace. It records the methods called.
type rpcRecorder struct {
	URL string

	mu      sync.Mutex
	methods []string
}

func (r *rpcRecorder) called() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.methods...)
}

func newRPCRecorder(t *testing.T) *rpcRecorder {
	t.Helper()
	rec := new(rpcRecorder)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
		}
		if err := json.Unmarshal(body, &req); err != nil {
			http.Error(w, "not a single JSON-RPC request", http.StatusBadRequest)
			return
		}
		rec.mu.Lock()
		rec.methods = append(rec.methods, req.Method)
		rec.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if req.Method == "eth_chainId" {
			_, _ = io.WriteString(w, `{"jsonrpc":"2.0","id":`+string(req.ID)+`,"result":"0x539"}`)
			return
		}
		_, _ = io.WriteString(w, `{"jsonrpc":"2.0","id":`+string(req.ID)+`,"error":{"code":-32601,"message":"the method `+req.Method+` does not exist/is not available"}}`)
	}))
	t.Cleanup(srv.Close)
	rec.URL = srv.URL
	return rec
}

// TestDevnetFlagErrors: bad flags and --mint values are refused with a clear
// error before anything reaches the node.
func TestDevnetFlagErrors(t *testing.T) {
	rec := newRPCRecorder(t)
	url := rec.URL
	a1 := testchain.DevAddress(1).Hex()
	a2 := testchain.DevAddress(2).Hex()
	const max = "115792089237316195423570985008687907853269984665640564039457584007913129639935"
	tests := []struct {
		name    string
		args    []string
		getenv  map[string]string
		wantErr string
	}{
		{name: "no --rpc", args: nil, wantErr: "--rpc is required"},
		{name: "extra argument", args: []string{"--rpc", url, "now"}, wantErr: "unexpected argument"},
		{name: "unknown flag", args: []string{"--rpc", url, "--bogus"}, wantErr: "flag provided but not defined: -bogus"},
		{name: "key on the command line", args: []string{"--rpc", url, "--key", "ac09"}, wantErr: "flag provided but not defined: -key"},
		{name: "zero timeout", args: []string{"--rpc", url, "--timeout", "0s"}, wantErr: "--timeout must be positive"},
		{name: "mint without =", args: []string{"--rpc", url, "--mint", a1}, wantErr: "want 0xADDRESS=AMOUNT"},
		{name: "mint to a non-address", args: []string{"--rpc", url, "--mint", "alice=5"}, wantErr: `"alice" is not a 0x-prefixed 20-byte hex address`},
		{name: "mint to a short address", args: []string{"--rpc", url, "--mint", "0x1234=5"}, wantErr: "is not a 0x-prefixed 20-byte hex address"},
		{name: "mint to a bad checksum", args: []string{"--rpc", url, "--mint", strings.Replace(a1, "dc", "Dc", 1) + "=5"}, wantErr: "is not a 0x-prefixed 20-byte hex address"},
		{name: "negative amount", args: []string{"--rpc", url, "--mint", a1 + "=-5"}, wantErr: "whole number of atomic units"},
		{name: "float amount", args: []string{"--rpc", url, "--mint", a1 + "=1.5"}, wantErr: "whole number of atomic units"},
		{name: "exponent", args: []string{"--rpc", url, "--mint", a1 + "=1e6"}, wantErr: "whole number of atomic units"},
		{name: "empty amount", args: []string{"--rpc", url, "--mint", a1 + "="}, wantErr: "whole number of atomic units"},
		{name: "leading zero", args: []string{"--rpc", url, "--mint", a1 + "=05"}, wantErr: "whole number of atomic units"},
		{name: "zero amount", args: []string{"--rpc", url, "--mint", a1 + "=0"}, wantErr: "the amount must be positive"},
		{name: "above uint256", args: []string{"--rpc", url, "--mint", a1 + "=" + max[:len(max)-1] + "6"}, wantErr: "whole number of atomic units"},
		{name: "sum above uint256", args: []string{"--rpc", url, "--mint", a1 + "=" + max, "--mint", a2 + "=1"}, wantErr: "add up to more than the token's uint256 supply"},
		{name: "duplicate address", args: []string{"--rpc", url, "--mint", a1 + "=5", "--mint", strings.ToLower(a1) + "=6"}, wantErr: "is minted to twice"},
		{name: "key env unset", args: []string{"--rpc", url, "--key-env", "DEPLOYER_KEY"}, wantErr: "environment variable DEPLOYER_KEY is not set"},
		{name: "key env not a key", args: []string{"--rpc", url, "--key-env", "DEPLOYER_KEY"}, getenv: map[string]string{"DEPLOYER_KEY": "0xnotakey"}, wantErr: "the deployer key is not a 32-byte hex private key"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			stdout, _, err := runBounded(t, 10*time.Second, append([]string{"devnet"}, tc.args...), envMap(tc.getenv))
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("err = %v, want one containing %q", err, tc.wantErr)
			}
			if stdout != "" {
				t.Errorf("stdout = %q, want nothing", stdout)
			}
			if called := rec.called(); len(called) != 0 {
				t.Errorf("the node was called: %q, want nothing", called)
			}
		})
	}
}

// TestDevnetNodeWithoutSetCode: a node that does not know anvil_setCode is
// refused with an error that says so, and no transaction is sent.
func TestDevnetNodeWithoutSetCode(t *testing.T) {
	rec := newRPCRecorder(t)
	stdout, _, err := runBounded(t, 10*time.Second, []string{"devnet", "--rpc", rec.URL, "--mint", testchain.DevAddress(1).Hex() + "=5"}, envMap(nil))
	if err == nil || !strings.Contains(err.Error(), "anvil_setCode (the node must be a dev node such as anvil)") {
		t.Errorf("err = %v, want one about anvil_setCode", err)
	}
	if stdout != "" {
		t.Errorf("stdout = %q, want nothing", stdout)
	}
	if diff := cmp.Diff([]string{"eth_chainId", "anvil_setCode"}, rec.called()); diff != "" {
		t.Errorf("methods called (-want +got):\n%s", diff)
	}
}

// TestDevnetNodeDown: an unreachable node is an error that does not repeat
// the URL, which may carry a provider's key.
func TestDevnetNodeDown(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL + "/v2/secret-api-key"
	srv.Close()
	stdout, stderr, err := runBounded(t, 10*time.Second, []string{"devnet", "--rpc", url}, envMap(nil))
	if err == nil || !strings.Contains(err.Error(), "chain id") {
		t.Fatalf("err = %v, want one about the chain id", err)
	}
	for _, out := range []string{err.Error(), stdout, stderr} {
		if strings.Contains(out, "secret-api-key") {
			t.Errorf("the URL was repeated: %q", out)
		}
	}
}

// TestDevnetAnvil runs devnet against a bare anvil: the contracts land at
// their canonical addresses, the token at dev account 0's first contract
// address (examples/anvil.yaml's asset), the receipt log's anchor at its
// second, and each mint arrives.
func TestDevnetAnvil(t *testing.T) {
	a := testchain.StartAnvil(t, testchain.WithBareChain())
	buyer, other := testchain.DevAddress(1).Hex(), testchain.DevAddress(2).Hex()
	stdout, stderr, err := runBounded(t, 60*time.Second, []string{"devnet", "--rpc", a.URL, "--mint", buyer + "=10000000", "--mint", other + "=1"}, envMap(nil))
	if err != nil {
		t.Fatalf("devnet: %v\nstderr: %s", err, stderr)
	}
	if strings.Count(stdout, "\n") != 1 {
		t.Errorf("stdout = %q, want one line", stdout)
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(stdout), &got); err != nil {
		t.Fatalf("stdout %q: %v", stdout, err)
	}
	want := map[string]any{
		"network":          "eip155:1337",
		"chainId":          1337.0,
		"token":            exampleAsset(t),
		"tokenName":        "USD Coin",
		"tokenVersion":     "2",
		"decimals":         6.0,
		"permit2":          "0x000000000022D473030F116dDEE9F6B43aC78BA3",
		"uptoProxy":        "0x4020A4f3b7b90ccA423B9fabCc0CE57C6C240002",
		"receiptLogAnchor": "0xe7f1725E7734CE288F8367e1Bb143E90bb3F0512",
		"deployer":         "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266",
		"balances":         map[string]any{buyer: "10000000", other: "1"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("devnet output (-want +got):\n%s", diff)
	}
	code := contracts.CanonicalCode()
	code[common.HexToAddress("0xe7f1725E7734CE288F8367e1Bb143E90bb3F0512")] = common.FromHex(contracts.ReceiptLogAnchorRuntimeBin)
	for addr, code := range code {
		onChain, err := a.Client.CodeAt(t.Context(), addr, nil)
		if err != nil || !bytes.Equal(onChain, code) {
			t.Errorf("code at %s: %d bytes, %v; want ours", addr, len(onChain), err)
		}
	}

	// Again with a deployer from the environment: its key is never printed.
	key := testchain.DevKey(5)
	keyHex := hex.EncodeToString(crypto.FromECDSA(key))
	stdout, stderr, err = runBounded(t, 60*time.Second, []string{"devnet", "--rpc", a.URL, "--key-env", "DEPLOYER_KEY", "--mint", buyer + "=7"},
		envMap(map[string]string{"DEPLOYER_KEY": "0x" + keyHex}))
	if err != nil {
		t.Fatalf("devnet --key-env: %v\nstderr: %s", err, stderr)
	}
	var res devnetResult
	if err := json.Unmarshal([]byte(stdout), &res); err != nil {
		t.Fatal(err)
	}
	deployer := crypto.PubkeyToAddress(key.PublicKey)
	if res.Deployer != deployer.Hex() || res.Token != crypto.CreateAddress(deployer, 0).Hex() || res.ReceiptLogAnchor != crypto.CreateAddress(deployer, 1).Hex() {
		t.Errorf("deployer %s, token %s, anchor %s; want %s and its first two contracts", res.Deployer, res.Token, res.ReceiptLogAnchor, deployer.Hex())
	}
	bal, err := contracts.NewEIP3009Token(crypto.CreateAddress(deployer, 0), a.Client)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := bal.BalanceOf(&bind.CallOpts{Context: t.Context()}, testchain.DevAddress(1)); err != nil || b.Cmp(big.NewInt(7)) != 0 {
		t.Errorf("balance on the second token = %v, %v; want 7", b, err)
	}
	for _, out := range []string{stdout, stderr} {
		if strings.Contains(strings.ToLower(out), keyHex) {
			t.Error("the deployer's key was printed")
		}
	}
}

// exampleAsset returns the asset of examples/anvil.yaml, which devnet's token
// must match on a fresh anvil.
func exampleAsset(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "examples", "anvil.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s+asset: (0x[0-9a-fA-F]{40})`).FindSubmatch(b)
	if m == nil {
		t.Fatal("no asset in examples/anvil.yaml")
	}
	return string(m[1])
}
