package main

import (
	"crypto/rand"
	"fmt"
	"math/big"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/crypto"
	"golang.org/x/mod/sumdb/note"

	"github.com/llm4agents/llm4agents/client"
	"github.com/llm4agents/llm4agents/internal/testchain"
	"github.com/llm4agents/llm4agents/x402/evm/exact"
)

// TestServeReceiptLog: `serve` from a YAML config with the log on, on a real
// node: a paid call's receipt is in the log by its logBy (`receipts verify`
// with the buyer's wallet), the log audits, and `log reconcile` on the same
// config finds the account's receipts, ledger and log in agreement.
func TestServeReceiptLog(t *testing.T) {
	tt := deployToken(t)
	rk, err := crypto.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	logKey, wallet := logKeyAndWallet(t, dir, "gw.test/receipts")
	cfg := serveConfig{RPC: "rpc_url: " + tt.node.URL, Asset: tt.addr.Hex(), Credits: creditsOn, DSN: "sqlite://" + filepath.Join(dir, "gw.db"),
		Log: "  enabled: true\n  key_file: " + logKey + "\n  max_merge_delay: 500ms"}
	path := cfg.write(t)
	getenv := envMap(map[string]string{serveKeyEnv: signerKeyHex, serveReceiptKeyEnv: fmt.Sprintf("%x", crypto.FromECDSA(rk))})
	proc := startCmd(t, []string{"serve", "--config", path}, getenv, "gateway listening on ")
	buyer := &http.Client{Timeout: 30 * time.Second, Transport: &client.Transport{
		Signer: exact.NewKeySigner(testchain.DevKey(serveBuyer)),
		Policy: client.Policy{
			MaxPerRequest: big.NewInt(2_000_000), Budget: big.NewInt(10_000_000),
			Assets: []client.Asset{{Network: testNetwork, Address: tt.addr.Hex()}},
		},
	}}
	resp := postJSON(t, buyer, proc.url+"/v1/chat/completions", `{"model":"demo","messages":[{"role":"user","content":"hi"}],"max_tokens":16}`)
	if body := readBody(t, resp); resp.StatusCode != http.StatusOK || resp.Header.Get("X-Llm4agents-Receipt") == "" {
		t.Fatalf("paid call: %d, receipt %q: %s", resp.StatusCode, resp.Header.Get("X-Llm4agents-Receipt"), body)
	}
	out, errOut, err := runBounded(t, time.Minute, []string{"receipts", "verify", "--url", proc.url, "--key-file", wallet, "--all"}, envMap(nil))
	if err != nil || !strings.Contains(out, "included  0x") || !strings.Contains(out, "gw.test/receipts: 1 receipts") {
		t.Fatalf("receipts verify: %v\n%s\n%s", err, out, errOut)
	}
	if out, errOut, err := runBounded(t, time.Minute, []string{"log", "audit", "--url", proc.url}, envMap(nil)); err != nil || !strings.Contains(out, "exact") {
		t.Errorf("log audit: %v\n%s\n%s", err, out, errOut)
	}
	buyerAddr := testchain.DevAddress(serveBuyer).Hex()
	out, errOut, err = runBounded(t, time.Minute, []string{"log", "reconcile", "--config", path, "--account", buyerAddr}, getenv)
	if err != nil || !strings.HasPrefix(out, "ok  "+buyerAddr) || !strings.Contains(out, "1 receipts, 1 in the log") {
		t.Errorf("log reconcile: %v\n%s\n%s", err, out, errOut)
	}
	for _, args := range [][]string{
		{"log", "reconcile", "--config", path},
		{"log", "reconcile", "--config", path, "--account", "0x12"},
		{"log", "reconcile", "--account", buyerAddr},
	} {
		if _, _, err := runBounded(t, time.Minute, args, getenv); err == nil {
			t.Errorf("%q: accepted", args)
		}
	}
}

// logKeyAndWallet writes, in dir, a new checkpoint key of a log named
// origin and the serve buyer's wallet key, as a gateway operator and a
// buyer keep them, and returns their paths.
func logKeyAndWallet(t *testing.T, dir, origin string) (logKey, wallet string) {
	t.Helper()
	skey, _, err := note.GenerateKey(rand.Reader, origin)
	if err != nil {
		t.Fatal(err)
	}
	logKey = filepath.Join(dir, "log.key")
	if err := os.WriteFile(logKey, []byte(skey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	wallet = filepath.Join(dir, "buyer.key")
	if err := os.WriteFile(wallet, []byte(fmt.Sprintf("0x%x\n", crypto.FromECDSA(testchain.DevKey(serveBuyer)))), 0o600); err != nil {
		t.Fatal(err)
	}
	return logKey, wallet
}
