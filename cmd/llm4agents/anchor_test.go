package main

import (
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/accounts/abi/bind"
	"github.com/ethereum/go-ethereum/crypto"
	"golang.org/x/mod/sumdb/note"

	"github.com/llm4agents/llm4agents/contracts"
	"github.com/llm4agents/llm4agents/internal/testchain"
)

// serveLogKeyEnv holds the checkpoint key of a serve config under test.
const serveLogKeyEnv = "LLM4AGENTS_TEST_LOG_KEY"

// TestLogAuditAnchors runs `serve` on anvil with the receipt log anchored
// every second, pays one call from credit, and audits the log with `log
// audit`: with --rpc the anchor is found on chain, from the facilitator's
// signer; without, it is checked against the tiles and the output says the
// chain was not consulted.
func TestLogAuditAnchors(t *testing.T) {
	tt := deployToken(t)
	auth, err := bind.NewKeyedTransactorWithChainID(testchain.DevKey(0), tt.node.ChainID)
	if err != nil {
		t.Fatal(err)
	}
	anchor, tx, _, err := contracts.DeployReceiptLogAnchor(auth, tt.node.Client)
	if err != nil {
		t.Fatal(err)
	}
	waitMined(t, tt.node, tx)
	rk, err := crypto.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	logKey, _, err := note.GenerateKey(rand.Reader, "gw.test/receipts")
	if err != nil {
		t.Fatal(err)
	}
	cfg := serveConfig{RPC: "rpc_url: " + tt.node.URL, Asset: tt.addr.Hex(), Credits: creditsOn}
	// Another replica's signer: its anchors are the gateway's too.
	otherReplica := testchain.DevAddress(7).Hex()
	yaml := cfg.yaml(t) + "log:\n  enabled: true\n  key_env: " + serveLogKeyEnv + "\n  max_merge_delay: 500ms\n" +
		"  anchor:\n    enabled: true\n    contract: " + anchor.Hex() + "\n    every: 1s\n" +
		"    senders: [" + otherReplica + "]\n"
	getenv := envMap(map[string]string{serveKeyEnv: signerKeyHex, serveReceiptKeyEnv: fmt.Sprintf("%x", crypto.FromECDSA(rk)), serveLogKeyEnv: logKey})
	proc := startCmd(t, []string{"serve", "--config", writeConfig(t, yaml)}, getenv, "gateway listening on ")
	wallet := envMap(map[string]string{walletKeyEnv: fmt.Sprintf("%x", crypto.FromECDSA(testchain.DevKey(serveBuyer)))})
	if stdout, stderr, err := runBuyer(t, []string{"credits", "topup", "--gateway", proc.url, "--asset", testNetwork + "/" + tt.addr.Hex(), "--amount", "0.5"}, wallet, ""); err != nil {
		t.Fatalf("topup: %v\n%s%s", err, stdout, stderr)
	}
	stdout, stderr, err := runBuyer(t, []string{"keys", "create", "--gateway", proc.url, "--name", "audit"}, wallet, "")
	if err != nil {
		t.Fatalf("keys create: %v\n%s", err, stderr)
	}
	key := strings.TrimSpace(stdout)
	if _, stderr, err := runBuyer(t, []string{"pay", "-H", "Authorization: Bearer " + key, "-d", demoChatBody, proc.url + "/v1/chat/completions"}, wallet, ""); err != nil {
		t.Fatalf("pay from credit: %v\n%s", err, stderr)
	}

	signer := testchain.DevAddress(testSigner).Hex()
	// Two receipts: the top-up's and the credit call's; the first anchor may
	// hold one or both.
	onChain := regexp.MustCompile(`(?m)^  size [12]  root 0x[0-9a-f]{64}  transaction 0x[0-9a-f]{64}  root is the log's; on chain in block [1-9][0-9]*$`)
	deadline := time.Now().Add(30 * time.Second)
	for {
		stdout, stderr, err = runBuyer(t, []string{"log", "audit", "--url", proc.url, "--rpc", tt.node.URL}, envMap(nil), "")
		if err != nil {
			t.Fatalf("log audit --rpc: %v\n%s%s", err, stdout, stderr)
		}
		if onChain.MatchString(stdout) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no anchor of size 1 or 2 on chain after 30s:\n%s", stdout)
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`log gw\.test/receipts: [12] receipts, every leaf checked against the signed tree\n`),
		regexp.MustCompile(`anchors, newest first:\n`),
		regexp.MustCompile(`anchors on chain from the published sender, blocks 0 to [1-9][0-9]*: [1-9][0-9]*, 0 not the log's own root\n`),
	} {
		if !want.MatchString(stdout) {
			t.Errorf("log audit --rpc lacks %s:\n%s", want, stdout)
		}
	}
	if strings.Contains(stdout, "not consulted") {
		t.Errorf("log audit --rpc says the chain was not consulted:\n%s", stdout)
	}

	stdout, stderr, err = runBuyer(t, []string{"log", "audit", "--url", proc.url}, envMap(nil), "")
	if err != nil || !strings.Contains(stdout, "root is the log's\n") ||
		!strings.Contains(stdout, "the chain was not consulted: the anchors were checked against the log's tiles only (give --rpc URL)\n") {
		t.Errorf("log audit without --rpc: %v\n%s%s", err, stdout, stderr)
	}

	stdout, stderr, err = runBuyer(t, []string{"log", "audit", "--url", proc.url, "--rpc", tt.node.URL, "--json"}, envMap(nil), "")
	if err != nil {
		t.Fatalf("log audit --json: %v\n%s", err, stderr)
	}
	var got struct {
		Anchored       bool `json:"anchored"`
		ChainConsulted bool `json:"chainConsulted"`
		Anchors        []struct {
			Size    int64  `json:"size"`
			OnChain bool   `json:"onChain"`
			Error   string `json:"error"`
		} `json:"anchors"`
		ChainAnchors struct {
			To      uint64 `json:"toBlock"`
			Anchors int    `json:"anchors"`
			Failed  []any  `json:"failed"`
		} `json:"chainAnchors"`
	}
	if err := json.Unmarshal([]byte(stdout), &got); err != nil {
		t.Fatalf("log audit --json: %v\n%s", err, stdout)
	}
	if !got.Anchored || !got.ChainConsulted || len(got.Anchors) == 0 || !got.Anchors[len(got.Anchors)-1].OnChain || got.Anchors[0].Error != "" ||
		got.ChainAnchors.Anchors == 0 || got.ChainAnchors.To == 0 || len(got.ChainAnchors.Failed) != 0 {
		t.Errorf("log audit --json = %+v", got)
	}

	if _, _, err := runBuyer(t, []string{"log", "audit", "--url", proc.url, "--rpc", "http://127.0.0.1:1"}, envMap(nil), ""); err == nil {
		t.Error("log audit with a node that is down succeeded")
	}
	// The well-known document names the facilitator's signer as the sender,
	// and every replica's (log.anchor.senders).
	doc := getWellKnown(t, proc.url)
	if !strings.Contains(doc, `"anchorSender":"`+signer+`"`) || !strings.Contains(doc, `"anchorContract":"`+anchor.Hex()+`"`) ||
		!strings.Contains(doc, `"anchorSenders":["`+signer+`","`+otherReplica+`"]`) {
		t.Errorf("well-known = %s, want the signer %s, the other replica's %s and the contract %s", doc, signer, otherReplica, anchor.Hex())
	}
	assertNoSecret(t, "serve's stderr", proc.stderr.String(), signerKeyHex, logKey, key)
}

// getWellKnown fetches the gateway's well-known document.
func getWellKnown(t *testing.T, base string) string {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, base+"/.well-known/llm4agents.json", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return string(readBody(t, resp))
}

// TestServeAnchorErrors: serve refuses to anchor at an address without a
// contract, and with a remote facilitator, which has no signer to anchor
// with; neither repeats the log key.
func TestServeAnchorErrors(t *testing.T) {
	tt := deployToken(t)
	logKey, _, err := note.GenerateKey(rand.Reader, "gw.test/receipts")
	if err != nil {
		t.Fatal(err)
	}
	rk, err := crypto.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	getenv := envMap(map[string]string{serveKeyEnv: signerKeyHex, serveLogKeyEnv: logKey, serveReceiptKeyEnv: fmt.Sprintf("%x", crypto.FromECDSA(rk))})
	cfg := serveConfig{RPC: "rpc_url: " + tt.node.URL, Asset: tt.addr.Hex(), Credits: creditsOn}
	anchored := func(yaml, contract string) []string {
		return []string{"--config", writeConfig(t, yaml+"log:\n  enabled: true\n  key_env: "+serveLogKeyEnv+
			"\n  anchor:\n    enabled: true\n    contract: "+contract+"\n")}
	}
	eoa := testchain.DevAddress(5).Hex()
	runServeErrors(t, []serveErrorCase{
		{name: "anchor contract without code", args: anchored(cfg.yaml(t), eoa), getenv: getenv,
			wantErr: []string{"log.anchor.contract: " + eoa + " holds no contract on eip155:1337"}},
		{name: "anchoring with a remote facilitator", args: anchored(remoteFacilitator(t, cfg), tt.addr.Hex()), getenv: getenv,
			wantErr: []string{"log.anchor.enabled", "in-process facilitator's signer"}},
	}, logKey)
}
