package main

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/big"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/crypto"

	"github.com/llm4agents/llm4agents/client"
	"github.com/llm4agents/llm4agents/internal/testchain"
	"github.com/llm4agents/llm4agents/internal/testdb"
	"github.com/llm4agents/llm4agents/x402/evm/exact"
	"github.com/llm4agents/llm4agents/x402/receipt"
)

// TestServeReceiptsWithoutCredits: `serve` from a YAML config with
// receipts and the log on and credits off, on each store: an x402 call's
// answer carries a signed receipt from the configured key, the buyer reads
// and verifies it after a wallet sign-in (`receipts verify --all`), the log
// audits, and the credit routes are not served.
func TestServeReceiptsWithoutCredits(t *testing.T) {
	tt := deployToken(t)
	stores := []struct{ name, dsn string }{{"sqlite", ""}}
	if os.Getenv(testdb.PostgresEnv) != "" {
		_, dsn := testdb.PostgresSchema(t, "servereceipts")
		stores = append(stores, struct{ name, dsn string }{"postgres", dsn})
	}
	if os.Getenv(testdb.RedisEnv) != "" {
		stores = append(stores, struct{ name, dsn string }{"redis", testdb.RedisURL(t, "servereceipts")})
	}
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) { testServeReceipts(t, tt, st.dsn) })
	}
}

func testServeReceipts(t *testing.T, tt *testToken, dsn string) {
	rk, err := crypto.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	receiptHex := fmt.Sprintf("%x", crypto.FromECDSA(rk))
	logKey, wallet := logKeyAndWallet(t, t.TempDir(), "gw.test/x402-receipts")
	cfg := serveConfig{RPC: "rpc_url: " + tt.node.URL, Asset: tt.addr.Hex(), DSN: dsn,
		Receipts: "  enabled: true\n  key_env: " + serveReceiptKeyEnv,
		Log:      "  enabled: true\n  key_file: " + logKey + "\n  max_merge_delay: 500ms"}
	getenv := envMap(map[string]string{serveKeyEnv: signerKeyHex, serveReceiptKeyEnv: receiptHex})
	proc := startCmd(t, []string{"serve", "--config", cfg.write(t)}, getenv, "gateway listening on ")
	buyer := &http.Client{Timeout: 30 * time.Second, Transport: &client.Transport{
		Signer: exact.NewKeySigner(testchain.DevKey(serveBuyer)),
		Policy: client.Policy{
			MaxPerRequest: big.NewInt(2_000_000), Budget: big.NewInt(10_000_000),
			Assets: []client.Asset{{Network: testNetwork, Address: tt.addr.Hex()}},
		},
	}}
	resp := postJSON(t, buyer, proc.url+"/v1/chat/completions", `{"model":"demo","messages":[{"role":"user","content":"hi"}],"max_tokens":16}`)
	body := readBody(t, resp)
	header := resp.Header.Get("X-Llm4agents-Receipt")
	if resp.StatusCode != http.StatusOK || header == "" {
		t.Fatalf("paid call: %d, receipt %q: %s", resp.StatusCode, header, body)
	}
	env, err := base64.StdEncoding.DecodeString(header)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Receipt struct {
			Account string `json:"account"`
			Rail    string `json:"rail"`
			KeyID   string `json:"keyId"`
		} `json:"receipt"`
	}
	if err := json.Unmarshal(env, &got); err != nil {
		t.Fatalf("receipt %s: %v", env, err)
	}
	if !strings.EqualFold(got.Receipt.Account, testchain.DevAddress(serveBuyer).Hex()) || got.Receipt.Rail != "exact" ||
		strings.Trim(strings.TrimPrefix(got.Receipt.KeyID, "0x"), "0") != "" {
		t.Errorf("receipt of an x402 call: %s", env)
	}

	// The signer is the configured key; no credit route is served.
	_, doc := getURL(t, proc.url+"/.well-known/llm4agents.json")
	var wk receipt.WellKnown
	if err := json.Unmarshal(doc, &wk); err != nil || wk.Receipts.Signer != crypto.PubkeyToAddress(rk.PublicKey) || wk.Log == nil {
		t.Errorf("well-known %s, %v; want signer %s and a log", doc, err, crypto.PubkeyToAddress(rk.PublicKey))
	}
	for _, path := range []string{"/v1/credits/balance", "/v1/keys"} {
		if status, body := getURL(t, proc.url+path); status != http.StatusNotFound {
			t.Errorf("GET %s without credits: %d %s", path, status, body)
		}
	}
	if status, body := getURL(t, proc.url+"/v1/receipts"); status != http.StatusUnauthorized {
		t.Errorf("receipts without a session: %d %s", status, body)
	}

	out, errOut, err := runBounded(t, time.Minute, []string{"receipts", "verify", "--url", proc.url, "--key-file", wallet, "--all"}, envMap(nil))
	if err != nil || !strings.Contains(out, "included  0x") || !strings.Contains(out, "gw.test/x402-receipts: 1 receipts") {
		t.Fatalf("receipts verify: %v\n%s\n%s", err, out, errOut)
	}
	if out, errOut, err := runBounded(t, time.Minute, []string{"log", "audit", "--url", proc.url}, envMap(nil)); err != nil || !strings.Contains(out, "exact") {
		t.Errorf("log audit: %v\n%s\n%s", err, out, errOut)
	}
	// The dashboard, from the same YAML: the payer signs in with the
	// wallet and sees the call, checked; no key or credit section.
	page := dashboardPage(t, proc.url, testchain.DevKey(serveBuyer))
	if !strings.Contains(page, `data-request-id=`) || !strings.Contains(page, "signed · in log") || strings.Contains(page, `id="create-key"`) {
		t.Errorf("the dashboard of a gateway with receipts and no credits:\n%s", page)
	}
	assertNoSecret(t, "stderr", proc.stderr.String(), receiptHex, signerKeyHex)
}
