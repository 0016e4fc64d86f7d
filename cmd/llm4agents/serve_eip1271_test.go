package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/accounts"
	"github.com/ethereum/go-ethereum/accounts/abi/bind"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"

	"github.com/llm4agents/llm4agents/contracts"
	"github.com/llm4agents/llm4agents/internal/credits"
	"github.com/llm4agents/llm4agents/internal/testchain"
)

// TestServeSignInContractWallet: `serve`, with receipts alone and with
// credits, signs in an EIP-1271 wallet on its node when the wallet's owner
// signs, and refuses another key's signature.
func TestServeSignInContractWallet(t *testing.T) {
	tt := deployToken(t)
	const ownerKey, strangerKey = 6, 7
	opts, err := bind.NewKeyedTransactorWithChainID(testchain.DevKey(0), tt.node.ChainID)
	if err != nil {
		t.Fatal(err)
	}
	wallet, tx, _, err := contracts.DeployERC1271Wallet(opts, tt.node.Client, testchain.DevAddress(ownerKey))
	if err != nil {
		t.Fatal(err)
	}
	waitMined(t, tt.node, tx)
	rk, err := crypto.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	getenv := envMap(map[string]string{serveKeyEnv: signerKeyHex, serveReceiptKeyEnv: fmt.Sprintf("%x", crypto.FromECDSA(rk))})
	modes := []struct {
		name string
		cfg  serveConfig
	}{
		{"receipts", serveConfig{RPC: "rpc_url: " + tt.node.URL, Asset: tt.addr.Hex(), Receipts: "  enabled: true\n  key_env: " + serveReceiptKeyEnv}},
		{"credits", serveConfig{RPC: "rpc_url: " + tt.node.URL, Asset: tt.addr.Hex(), Credits: creditsOn}},
	}
	for _, mode := range modes {
		t.Run(mode.name, func(t *testing.T) {
			proc := startCmd(t, []string{"serve", "--config", mode.cfg.write(t)}, getenv, "gateway listening on ")
			hc := &http.Client{Timeout: 30 * time.Second}
			for _, tc := range []struct {
				name   string
				key    int
				status int
			}{
				{"another key", strangerKey, http.StatusUnauthorized},
				{"owner", ownerKey, http.StatusOK},
			} {
				status, body := signInContract(t, hc, proc.url, wallet, tc.key)
				if status != tc.status {
					t.Fatalf("sign-in of the wallet by %s: %d %s, want %d", tc.name, status, body, tc.status)
				}
				var got struct{ Account string }
				if err := json.Unmarshal(body, &got); tc.status == http.StatusOK && (err != nil || got.Account != strings.ToLower(wallet.Hex())) {
					t.Errorf("sign-in of the wallet by %s: account %q, %v", tc.name, got.Account, err)
				}
			}
		})
	}
}

// signInContract asks base for a nonce and signs wallet in with the
// personal_sign of dev key i, returning verify's status and body.
func signInContract(t *testing.T, hc *http.Client, base string, wallet common.Address, i int) (int, []byte) {
	t.Helper()
	resp := postJSON(t, hc, base+credits.PathNonce, "")
	body := readBody(t, resp)
	var n struct {
		Nonce, Domain, URI string
		ChainID            uint64
	}
	if err := json.Unmarshal(body, &n); resp.StatusCode != http.StatusOK || err != nil {
		t.Fatalf("nonce: %d %s", resp.StatusCode, body)
	}
	text := (&credits.Message{Domain: n.Domain, Address: wallet, URI: n.URI, Version: "1", ChainID: n.ChainID,
		Nonce: n.Nonce, IssuedAt: time.Now().UTC().Truncate(time.Second)}).String()
	sig, err := crypto.Sign(accounts.TextHash([]byte(text)), testchain.DevKey(i))
	if err != nil {
		t.Fatal(err)
	}
	sig[64] += 27
	req, err := json.Marshal(map[string]string{"message": text, "signature": fmt.Sprintf("0x%x", sig)})
	if err != nil {
		t.Fatal(err)
	}
	resp = postJSON(t, hc, base+credits.PathVerify, string(req))
	return resp.StatusCode, readBody(t, resp)
}
