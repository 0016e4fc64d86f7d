package main

import (
	"bytes"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/ethereum/go-ethereum/ethclient"

	"github.com/llm4agents/llm4agents/contracts"
	"github.com/llm4agents/llm4agents/internal/testchain"
)

// TestLogDeployAnchor: log deploy-anchor deploys this release's
// ReceiptLogAnchor on a node (anvil here, any network in production) only
// with --yes, and prints the address for log.anchor.contract; bad input is
// refused before anything is sent, and the key never shows.
func TestLogDeployAnchor(t *testing.T) {
	tt := deployToken(t)
	keyHex := fmt.Sprintf("%x", crypto.FromECDSA(testchain.DevKey(serveBuyer)))
	wallet := envMap(map[string]string{walletKeyEnv: keyHex})
	ec, err := ethclient.DialContext(t.Context(), tt.node.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer ec.Close()
	from := testchain.DevAddress(serveBuyer)
	nonce, err := ec.NonceAt(t.Context(), from, nil)
	if err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name   string
		args   []string
		getenv func(string) string
		want   string
	}{
		{"without --yes", []string{"--rpc", tt.node.URL}, wallet, "pass --yes"},
		{"no --rpc", []string{"--yes"}, wallet, "--rpc is required"},
		{"no key", []string{"--rpc", tt.node.URL, "--yes"}, envMap(nil), "no wallet key"},
		{"a bad key", []string{"--rpc", tt.node.URL, "--yes"}, envMap(map[string]string{walletKeyEnv: "0xnothex"}), "not a 32-byte hex private key"},
		{"a positional argument", []string{"--rpc", tt.node.URL, "--yes", "0xabc"}, wallet, "takes no arguments"},
		{"a zero timeout", []string{"--rpc", tt.node.URL, "--yes", "--timeout", "0s"}, wallet, "--timeout must be positive"},
		{"a node that is down", []string{"--rpc", "http://127.0.0.1:1", "--yes", "--timeout", "3s"}, wallet, "log deploy-anchor"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stdout, stderr, err := runBounded(t, 20*time.Second, append([]string{"log", "deploy-anchor"}, tc.args...), tc.getenv)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want it to say %q", err, tc.want)
			}
			if strings.Contains(stdout+stderr+err.Error(), keyHex) {
				t.Error("the output shows the key")
			}
		})
	}
	if n, err := ec.NonceAt(t.Context(), from, nil); err != nil || n != nonce {
		t.Fatalf("nonce %d after the refusals, was %d (%v): something was sent", n, nonce, err)
	}

	stdout, stderr, err := runBounded(t, time.Minute, []string{"log", "deploy-anchor", "--rpc", tt.node.URL, "--yes"}, wallet)
	if err != nil {
		t.Fatalf("deploy: %v\n%s%s", err, stdout, stderr)
	}
	m := regexp.MustCompile(`deployed ReceiptLogAnchor at (0x[0-9a-fA-F]{40}) on eip155:[0-9]+ in transaction 0x[0-9a-f]{64}, block [0-9]+\n`).FindStringSubmatch(stdout)
	if m == nil {
		t.Fatalf("stdout:\n%s", stdout)
	}
	code, err := ec.CodeAt(t.Context(), common.HexToAddress(m[1]), nil)
	if err != nil || !bytes.Equal(code, common.FromHex(contracts.ReceiptLogAnchorRuntimeBin)) {
		t.Errorf("the code at %s is not ReceiptLogAnchor's (%v)", m[1], err)
	}
	if strings.Contains(stdout+stderr, keyHex) {
		t.Error("the output shows the key")
	}
}
