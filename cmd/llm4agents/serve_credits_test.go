package main

import (
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
	"github.com/llm4agents/llm4agents/internal/store/postgres"
	"github.com/llm4agents/llm4agents/internal/store/sqlite"
	"github.com/llm4agents/llm4agents/internal/testchain"
	"github.com/llm4agents/llm4agents/x402/evm/exact"
	"github.com/llm4agents/llm4agents/x402/receipt"
)

const serveReceiptKeyEnv = "LLM4AGENTS_TEST_RECEIPT_KEY"

// creditsOn is the credits: section of a serve config under test.
const creditsOn = "  enabled: true\n  receipt_key_env: " + serveReceiptKeyEnv + "\n  topup_min: 100000\n  topup_max: 2000000"

// TestServeCredits: `serve` with credits on sells top-ups through x402 on a
// real node, credits each once, publishes the receipt signer, and guards the
// balance.
func TestServeCredits(t *testing.T) {
	tt := deployToken(t)
	rk, err := crypto.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	receiptHex := fmt.Sprintf("%x", crypto.FromECDSA(rk))
	cfg := serveConfig{RPC: "rpc_url: " + tt.node.URL, Asset: tt.addr.Hex(), Credits: creditsOn}
	getenv := envMap(map[string]string{serveKeyEnv: signerKeyHex, serveReceiptKeyEnv: receiptHex})
	proc := startCmd(t, []string{"serve", "--config", cfg.write(t)}, getenv, "gateway listening on ")
	base := proc.url
	buyer := &http.Client{Timeout: 30 * time.Second, Transport: &client.Transport{
		Signer: exact.NewKeySigner(testchain.DevKey(serveBuyer)),
		Policy: client.Policy{
			MaxPerRequest: big.NewInt(2_000_000), Budget: big.NewInt(10_000_000),
			Assets: []client.Asset{{Network: testNetwork, Address: tt.addr.Hex()}},
		},
	}}
	payTo := testchain.DevAddress(testPayTo)
	before := tt.balance(t, payTo)

	var balance int64
	for _, amount := range []int64{500_000, 1_250_000} {
		resp := postJSON(t, buyer, base+"/v1/credits/topup", fmt.Sprintf(`{"amount":"%d"}`, amount))
		body := readBody(t, resp)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("top-up %d: %d %s", amount, resp.StatusCode, body)
		}
		var got struct{ Account, Credited, Balance, Transaction string }
		if err := json.Unmarshal(body, &got); err != nil {
			t.Fatal(err)
		}
		balance += amount
		if got.Account != strings.ToLower(testchain.DevAddress(serveBuyer).Hex()) || got.Credited != fmt.Sprint(amount) || got.Balance != fmt.Sprint(balance) {
			t.Errorf("top-up %d answered %s", amount, body)
		}
	}
	if rcv := new(big.Int).Sub(tt.balance(t, payTo), before); rcv.Int64() != balance {
		t.Errorf("payTo received %s for top-ups of %d", rcv, balance)
	}

	// Out of bounds: refused before any payment.
	resp := postJSON(t, buyer, base+"/v1/credits/topup", `{"amount":"2000001"}`)
	if body := readBody(t, resp); resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "2000000") {
		t.Errorf("top-up above the maximum: %d %s", resp.StatusCode, body)
	}
	// The receipt signer is the configured key's address.
	_, doc := getURL(t, base+"/.well-known/llm4agents.json")
	var wk receipt.WellKnown
	if err := json.Unmarshal(doc, &wk); err != nil || wk.Receipts.Signer != crypto.PubkeyToAddress(rk.PublicKey) {
		t.Errorf("well-known signer %v, %v; want %s", wk.Receipts.Signer, err, crypto.PubkeyToAddress(rk.PublicKey))
	}
	// The balance wants a key or a session.
	if status, body := getURL(t, base+"/v1/credits/balance"); status != http.StatusUnauthorized {
		t.Errorf("balance without credentials: %d %s", status, body)
	}
	assertNoSecret(t, "stderr", proc.stderr.String(), receiptHex, signerKeyHex)
}

// getURL GETs url and returns the status and the body.
func getURL(tb testing.TB, url string) (int, []byte) {
	tb.Helper()
	req, err := http.NewRequestWithContext(tb.Context(), http.MethodGet, url, nil)
	if err != nil {
		tb.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	return resp.StatusCode, readBody(tb, resp)
}

// TestServeCreditsErrors: credits refuse to start on a store without the
// ledger or without a usable receipt key, saying so and never repeating the
// key.
func TestServeCreditsErrors(t *testing.T) {
	tt := deployToken(t)
	cfg := func(c serveConfig) []string {
		c.RPC, c.Asset, c.Credits = "rpc_url: "+tt.node.URL, tt.addr.Hex(), creditsOn
		return []string{"--config", c.write(t)}
	}
	receiptIs := func(v string) func(string) string {
		return envMap(map[string]string{serveKeyEnv: signerKeyHex, serveReceiptKeyEnv: v})
	}
	const garbage = "not-a-key-but-5ecret-material-0123456789"
	tests := []serveErrorCase{
		{name: "receipt key unset", args: cfg(serveConfig{}), getenv: receiptIs(""),
			wantErr: []string{"credits: receipt key", serveReceiptKeyEnv + " is not set"}},
		{name: "receipt key garbage", args: cfg(serveConfig{}), getenv: receiptIs(garbage),
			wantErr: []string{"the receipt key is not a 32-byte hex private key"}},
		{name: "receipt key truncated", args: cfg(serveConfig{}), getenv: receiptIs(signerKeyHex[:62]),
			wantErr: []string{"the receipt key is not a 32-byte hex private key"}},
		{name: "redis store in the file", args: cfg(serveConfig{DSN: "redis://127.0.0.1:6379/0"}), getenv: receiptIs(signerKeyHex),
			wantErr: []string{"credits.enabled", "Redis does not"}},
	}
	if url := os.Getenv("LLM4AGENTS_TEST_REDIS_URL"); url != "" {
		// Only the running store can tell, when the DSN comes from the
		// environment.
		c := serveConfig{Credits: creditsOn, RPC: "rpc_url: " + tt.node.URL, Asset: tt.addr.Hex()}
		doc := strings.Replace(c.yaml(t), "  dsn: sqlite://", "  dsn_env: LLM4AGENTS_TEST_DSN\n  # sqlite://", 1)
		tests = append(tests, serveErrorCase{name: "redis store from the environment", args: []string{"--config", writeConfig(t, doc)},
			getenv:  envMap(map[string]string{serveKeyEnv: signerKeyHex, serveReceiptKeyEnv: signerKeyHex, "LLM4AGENTS_TEST_DSN": url}),
			wantErr: []string{"credits: the redis store does not hold the credits ledger"}})
	}
	runServeErrors(t, tests, garbage)
}

// The SQL stores hold everything credits need; Redis holds none of it.
var (
	_ creditStore = (*sqlite.DB)(nil)
	_ creditStore = (*postgres.DB)(nil)
)
