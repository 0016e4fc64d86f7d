package main

import (
	"fmt"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"

	"github.com/llm4agents/llm4agents/internal/credits"
	"github.com/llm4agents/llm4agents/internal/testchain"
	"github.com/llm4agents/llm4agents/x402/receipt"
)

// TestChatCredits holds a two-turn conversation paid from prepaid credits
// with an API key against `serve`, streamed and not: no wallet signs, each
// turn's receipt is verified against the gateway's published signer, and
// the charges the CLI adds up are what left the balance.
func TestChatCredits(t *testing.T) {
	tt := deployToken(t)
	rk, err := crypto.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	cfg := serveConfig{RPC: "rpc_url: " + tt.node.URL, Asset: tt.addr.Hex(), Credits: creditsOn}
	proc := startCmd(t, []string{"serve", "--config", cfg.write(t)},
		envMap(map[string]string{serveKeyEnv: signerKeyHex, serveReceiptKeyEnv: fmt.Sprintf("%x", crypto.FromECDSA(rk))}), "gateway listening on ")
	gw := "--gateway=" + proc.url
	wallet := envMap(map[string]string{walletKeyEnv: fmt.Sprintf("%x", crypto.FromECDSA(testchain.DevKey(serveBuyer)))})
	if _, stderr, err := runBuyer(t, []string{"credits", "topup", gw, "--asset", testNetwork + "/" + tt.addr.Hex(), "--amount", "0.5"}, wallet, ""); err != nil {
		t.Fatalf("topup: %v\n%s", err, stderr)
	}
	stdout, stderr, err := runBuyer(t, []string{"keys", "create", gw, "--name", "chat"}, wallet, "")
	if err != nil {
		t.Fatalf("keys create: %v\n%s", err, stderr)
	}
	key := strings.TrimSpace(stdout)
	withKey := envMap(map[string]string{apiKeyEnv: key})
	signer := crypto.PubkeyToAddress(rk.PublicKey).Hex()
	turn := regexp.MustCompile(`(?m)^\[turn (\d): charged [^,]+, balance [^;]+; receipt verified \(signer ` + signer + `\); [1-9][0-9]* prompt \+ [1-9][0-9]* completion tokens\]$`)
	total := regexp.MustCompile(`(?m)^chat: 2 turn\(s\); charged ([1-9][0-9]*) atomic units from credits$`)

	balance := func() *big.Int {
		t.Helper()
		out, stderr, err := runBuyer(t, []string{"credits", "balance", gw}, withKey, "")
		if err != nil {
			t.Fatalf("balance: %v\n%s", err, stderr)
		}
		m := regexp.MustCompile(`balance [^(]*\(([0-9]+) atomic units\)`).FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("credits balance without a balance:\n%s", out)
		}
		b, _ := new(big.Int).SetString(m[1], 10)
		return b
	}
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"no stream", nil},
		{"stream", []string{"--stream"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := balance()
			args := append([]string{"chat", "--url", proc.url, "--model", "demo", "--max-tokens", "32"}, tc.args...)
			stdout, stderr, err := runBuyer(t, args, withKey, "What does x402 do?\nAnd then?\n")
			if err != nil {
				t.Fatalf("chat: %v\nstderr:\n%s", err, stderr)
			}
			if n := strings.Count(stdout, "This is the llm4agents demo model"); n != 2 {
				t.Errorf("stdout holds %d demo answers, want 2:\n%s", n, stdout)
			}
			if got := turn.FindAllString(stderr, -1); len(got) != 2 {
				t.Errorf("stderr lacks two verified turn lines %s:\n%s", turn, stderr)
			}
			m := total.FindStringSubmatch(stderr)
			if m == nil {
				t.Fatalf("stderr lacks the total:\n%s", stderr)
			}
			spent := new(big.Int).Sub(before, balance())
			if spent.String() != m[1] {
				t.Errorf("the balance fell by %s; the CLI added up %s", spent, m[1])
			}
			assertNoSecret(t, "stderr", stderr, key)
			assertNoSecret(t, "stdout", stdout, key)
		})
	}
}

// TestChatCreditsReceipts: a credit-paid turn whose receipt is missing,
// forged, for another request or for another amount fails the turn and the
// run, and the key never reaches the output.
func TestChatCreditsReceipts(t *testing.T) {
	gk, err := crypto.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	gateway, err := credits.NewSigner(gk, big.NewInt(1337))
	if err != nil {
		t.Fatal(err)
	}
	ok, err := crypto.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	forger, err := credits.NewSigner(ok, big.NewInt(1337))
	if err != nil {
		t.Fatal(err)
	}
	reqID := common.HexToHash("0x01")
	envelopeOf := func(s *credits.Signer, id common.Hash, amount int64) string {
		signed, err := s.Sign(receipt.Receipt{RequestID: id, Model: "demo", InputTokens: big.NewInt(3), OutputTokens: big.NewInt(5),
			Amount: big.NewInt(amount), BalanceAfter: big.NewInt(100), LedgerSeq: big.NewInt(7), IssuedAt: 1_800_000_000, Rail: receipt.RailCredits})
		if err != nil {
			t.Fatal(err)
		}
		env, err := signed.JSON()
		if err != nil {
			t.Fatal(err)
		}
		return string(env)
	}
	const key = "sk-l4a-" + "0123456789abcdef0123456789abcdef0123456789ab"
	// ids: "" is the request's own id, "-" none at all.
	id := func(v string) string {
		switch v {
		case "":
			return reqID.Hex()
		case "-":
			return ""
		}
		return v
	}
	for _, tc := range []struct {
		name, envelope, want string
		stream               bool
		headerID, noteID     string
	}{
		{"genuine", envelopeOf(gateway, reqID, 42), "", false, "", ""},
		{"genuine, streamed", envelopeOf(gateway, reqID, 42), "", true, "", ""},
		{"missing", "", "the answer carries no receipt", false, "", ""},
		{"missing, streamed", "", "the answer carries no receipt", true, "", ""},
		{"forged", envelopeOf(forger, reqID, 42), "receipt NOT verified", true, "", ""},
		{"another request", envelopeOf(gateway, common.HexToHash("0x02"), 42), "the receipt is for request", false, "", ""},
		{"another amount", envelopeOf(gateway, reqID, 41), "the receipt's amount differs", true, "", ""},
		{"garbage", `{"receipt":1}`, "receipt NOT verified", true, "", ""},
		{"the header names another request", envelopeOf(gateway, reqID, 42), "the receipt is for request", false, common.HexToHash("0x03").Hex(), ""},
		{"only the header names it", envelopeOf(gateway, reqID, 42), "", true, "", "-"},
		{"no request id anywhere", envelopeOf(gateway, reqID, 42), "the answer names no request id", false, "-", "-"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var auth string
			mux := http.NewServeMux()
			mux.Handle(receipt.WellKnownPath, credits.WellKnownHandler(gateway.WellKnown()))
			mux.HandleFunc("/v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
				auth = r.Header.Get("Authorization")
				if h := id(tc.headerID); h != "" {
					w.Header().Set("X-Llm4agents-Request-Id", h)
				}
				note := `"x_llm4agents":{"charged":"42","charged_display":"0.000042 USDC","balance":"100","balance_display":"0.0001 USDC","request_id":"` + id(tc.noteID) + `"`
				if tc.envelope != "" {
					note += `,"receipt":` + tc.envelope
				}
				note += "}"
				if !tc.stream {
					w.Header().Set("Content-Type", "application/json")
					_, _ = io.WriteString(w, `{"choices":[{"message":{"content":"hi"}}],"usage":{"prompt_tokens":3,"completion_tokens":5},`+note+`}`)
					return
				}
				w.Header().Set("Content-Type", "text/event-stream")
				_, _ = io.WriteString(w, "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n"+
					"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":5},"+note+"}\n\ndata: [DONE]\n\n")
			})
			srv := httptest.NewServer(mux)
			defer srv.Close()
			args := []string{"chat", "--url", srv.URL, "--model", "demo"}
			if tc.stream {
				args = append(args, "--stream")
			}
			stdout, stderr, err := runBuyer(t, args, envMap(map[string]string{apiKeyEnv: key}), "hello\n")
			if auth != "Bearer "+key {
				t.Errorf("Authorization = %q", auth)
			}
			if tc.want == "" {
				if err != nil || !strings.Contains(stderr, "receipt verified (signer "+gateway.Address().Hex()+")") ||
					!strings.Contains(stderr, "charged 42 atomic units from credits") {
					t.Errorf("err = %v\n%s", err, stderr)
				}
			} else if err == nil || err.Error() != "chat: 1 of 1 turn(s) failed" || !strings.Contains(stderr, tc.want) {
				t.Errorf("err = %v, want a failed turn saying %q:\n%s", err, tc.want, stderr)
			}
			assertNoSecret(t, "stderr", stderr, key)
			assertNoSecret(t, "stdout", stdout, key)
		})
	}
}

// TestChatCreditsFlags: an API key and a wallet key together are refused
// before anything is sent, as is a malformed key, never echoed.
func TestChatCreditsFlags(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"both keys", []string{"--key-file", "/nonexistent"}, map[string]string{apiKeyEnv: "sk-l4a-abc"}, "give either an API key"},
		{"not an sk-l4a- key", nil, map[string]string{apiKeyEnv: "sk-live-secretvalue"}, "not an sk-l4a- key"},
		{"key with a newline", nil, map[string]string{apiKeyEnv: "sk-l4a-abc\ndef"}, "not an sk-l4a- key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"chat", "--url", "http://127.0.0.1:9/v1"}, tc.args...)
			_, stderr, err := runBuyer(t, args, envMap(tc.env), "")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
			for _, v := range tc.env {
				assertNoSecret(t, "error", err.Error(), v)
				assertNoSecret(t, "stderr", stderr, v)
			}
		})
	}
}
