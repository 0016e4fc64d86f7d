package main

import (
	"encoding/json"
	"fmt"
	"math/big"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/accounts/abi/bind"
	"github.com/ethereum/go-ethereum/common"

	"github.com/llm4agents/llm4agents/client"
	"github.com/llm4agents/llm4agents/contracts"
	"github.com/llm4agents/llm4agents/internal/testchain"
	"github.com/llm4agents/llm4agents/x402"
	"github.com/llm4agents/llm4agents/x402/evm/exact"
	"github.com/llm4agents/llm4agents/x402/evm/upto"
)

// secondChainID is the chain id of the second anvil node: another network
// than testNetwork's.
const secondChainID = 31337

// chainToken is an EIP-3009 token on one node, with the serve buyer funded.
type chainToken struct {
	network string
	node    *testchain.Anvil
	addr    common.Address
	tok     *contracts.EIP3009Token
}

func fundedToken(tb testing.TB, node *testchain.Anvil, name, version string) chainToken {
	tb.Helper()
	addr, tok := deployDomain(tb, node, name, version)
	auth, err := bind.NewKeyedTransactorWithChainID(testchain.DevKey(0), node.ChainID)
	if err != nil {
		tb.Fatal(err)
	}
	tx, err := tok.Mint(auth, testchain.DevAddress(serveBuyer), big.NewInt(1_000_000_000))
	if err != nil {
		tb.Fatal(err)
	}
	waitMined(tb, node, tx)
	return chainToken{network: fmt.Sprintf("eip155:%d", node.ChainID), node: node, addr: addr, tok: tok}
}

// approvePermit2 lets Permit2 move the buyer's tokens, for upto.
func (c chainToken) approvePermit2(tb testing.TB) {
	tb.Helper()
	auth, err := bind.NewKeyedTransactorWithChainID(testchain.DevKey(serveBuyer), c.node.ChainID)
	if err != nil {
		tb.Fatal(err)
	}
	tx, err := c.tok.Approve(auth, contracts.Permit2Address, big.NewInt(1_000_000_000))
	if err != nil {
		tb.Fatal(err)
	}
	waitMined(tb, c.node, tx)
}

func (c chainToken) balance(tb testing.TB, a common.Address) *big.Int {
	tb.Helper()
	b, err := c.tok.BalanceOf(&bind.CallOpts{Context: tb.Context()}, a)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// networkEntry is one entry of a config's networks: list.
func (c chainToken) networkEntry(name, version, rpc string) string {
	s := fmt.Sprintf("  - id: %s\n    asset: %s\n    asset_name: %s\n    asset_version: %q\n    decimals: 6\n    pay_to: %s\n",
		c.network, c.addr.Hex(), name, version, testchain.DevAddress(testPayTo).Hex())
	if rpc != "" {
		s += "    rpc_url: " + rpc + "\n"
	}
	return s
}

// TestServeSeveralNetworks runs serve with USDC on one chain (the primary),
// a second token on the same chain and USDC on a second chain, each settled
// by the in-process facilitator of its chain: every 402 offers all three, a
// buyer that can pay only one of them pays it, on its own chain, once.
func TestServeSeveralNetworks(t *testing.T) {
	usdc := fundedToken(t, testchain.StartAnvil(t), "USD Coin", "2")
	usdt := fundedToken(t, usdc.node, "Tether USD", "1")
	other := fundedToken(t, testchain.StartAnvil(t, testchain.WithChainID(secondChainID)), "USD Coin", "2")

	// The second chain offers upto too, which the buyer prefers there.
	other.approvePermit2(t)
	cfg := serveConfig{RPC: "rpc_url: " + usdc.node.URL, Asset: usdc.addr.Hex()}.yaml(t) +
		"networks:\n" + usdt.networkEntry("Tether USD", "1", "") + other.networkEntry("USD Coin", "2", other.node.URL) +
		"    schemes: [exact, upto]\n"
	proc := startCmd(t, []string{"serve", "--config", writeConfig(t, cfg)}, serveEnv(), "gateway listening on ")
	base := proc.url
	body := `{"model":"demo","messages":[{"role":"user","content":"Which chain?"}],"max_tokens":32}`

	resp := postJSON(t, http.DefaultClient, base+"/v1/chat/completions", body)
	readBody(t, resp)
	pr, err := x402.DecodePaymentRequired(resp.Header.Get(x402.HeaderPaymentRequired))
	if resp.StatusCode != http.StatusPaymentRequired || err != nil {
		t.Fatalf("unpaid call: %d, PAYMENT-REQUIRED: %v", resp.StatusCode, err)
	}
	want := []chainToken{usdc, usdt, other}
	offers := []struct {
		scheme string
		token  chainToken
	}{{exact.Scheme, usdc}, {exact.Scheme, usdt}, {exact.Scheme, other}, {upto.Scheme, other}}
	if len(pr.Accepts) != len(offers) {
		t.Fatalf("402 offers %d options, want %d: %+v", len(pr.Accepts), len(offers), pr.Accepts)
	}
	for i, w := range offers {
		a := pr.Accepts[i]
		if a.Scheme != w.scheme || a.Network != w.token.network || a.Asset != w.token.addr.Hex() || a.Amount != pr.Accepts[0].Amount {
			t.Errorf("offer %d = %s %s %s %s, want %s on %s of %s for the same amount", i, a.Scheme, a.Network, a.Asset, a.Amount,
				w.scheme, w.token.network, w.token.addr.Hex())
		}
	}
	amount := mustAmount(pr.Accepts[0].Amount)
	payTo := testchain.DevAddress(testPayTo)

	t.Run("models list every way to pay", func(t *testing.T) {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, base+"/v1/models/demo", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var m struct {
			Pricing struct {
				PayableWith []struct{ Network, Asset string } `json:"payable_with"`
			} `json:"pricing"`
		}
		if err := json.Unmarshal(readBody(t, resp), &m); err != nil {
			t.Fatal(err)
		}
		if len(m.Pricing.PayableWith) != len(want) {
			t.Fatalf("payable_with %+v, want %d entries", m.Pricing.PayableWith, len(want))
		}
		for i, w := range want {
			if got := m.Pricing.PayableWith[i]; got.Network != w.network || got.Asset != w.addr.Hex() {
				t.Errorf("payable_with[%d] = %+v, want %s %s", i, got, w.network, w.addr.Hex())
			}
		}
	})

	// A payment whose accepted names no offer of the gateway (another
	// chain, an asset that is no address) is refused with the 402 of every
	// offer, and nothing moves.
	for name, edit := range map[string]func(string) string{
		"unknown network": func(a string) string { return strings.Replace(a, other.network, "eip155:999", 1) },
		"asset not an address": func(a string) string {
			return strings.Replace(a, other.addr.Hex(), "0xnot-an-address", 1)
		},
	} {
		t.Run(name, func(t *testing.T) {
			p, err := exact.NewPaymentPayload(t.Context(), exact.NewKeySigner(testchain.DevKey(serveBuyer)), pr, 2, exact.SignOptions{})
			if err != nil {
				t.Fatal(err)
			}
			p.Accepted = json.RawMessage(edit(string(p.Accepted)))
			h, err := x402.EncodeHeader(p)
			if err != nil {
				t.Fatal(err)
			}
			req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, base+"/v1/chat/completions", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set(x402.HeaderPaymentSignature, h)
			before := other.balance(t, payTo)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b := readBody(t, resp)
			again, err := x402.DecodePaymentRequired(resp.Header.Get(x402.HeaderPaymentRequired))
			if resp.StatusCode != http.StatusPaymentRequired || err != nil || len(again.Accepts) != len(offers) {
				t.Errorf("status %d, PAYMENT-REQUIRED %v (%v), want a 402 of all %d offers: %s", resp.StatusCode, again, err, len(offers), b)
			}
			if got := other.balance(t, payTo); got.Cmp(before) != 0 {
				t.Errorf("payTo's balance moved from %s to %s", before, got)
			}
		})
	}

	t.Run("metrics name each chain's signer", func(t *testing.T) {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, base+"/metrics", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b := string(readBody(t, resp))
		signer := testchain.DevAddress(testSigner).Hex()
		for _, net := range []string{usdc.network, other.network} {
			if want := `llm4agents_signer_balance_gwei{network="` + net + `",signer="` + signer + `"}`; !strings.Contains(b, want) {
				t.Errorf("/metrics has no %s", want)
			}
		}
		if !strings.Contains(b, `llm4agents_facilitator_reconciled_total{outcome="resolved"}`) {
			t.Error("/metrics has no reconciler counter")
		}
	})

	for _, pay := range []chainToken{other, usdt} {
		t.Run("pay "+pay.network+" "+pay.addr.Hex()[:8], func(t *testing.T) {
			before := make([]*big.Int, len(want))
			for i, w := range want {
				before[i] = w.balance(t, payTo)
			}
			rec := &headerRecorder{}
			buyer := &http.Client{Timeout: 30 * time.Second, Transport: &client.Transport{
				Base:   rec,
				Signer: exact.NewKeySigner(testchain.DevKey(serveBuyer)),
				Policy: client.Policy{
					MaxPerRequest: big.NewInt(100_000), Budget: big.NewInt(1_000_000),
					Assets: []client.Asset{{Network: pay.network, Address: pay.addr.Hex()}},
				},
			}}
			resp := postJSON(t, buyer, base+"/v1/chat/completions", body)
			b := readBody(t, resp)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("paid call: %d: %s", resp.StatusCode, b)
			}
			sr, err := client.SettleResponse(resp)
			if err != nil || !sr.Success || sr.Network != pay.network {
				t.Fatalf("PAYMENT-RESPONSE %+v (%v), want success on %s", sr, err, pay.network)
			}
			r, err := pay.node.Client.TransactionReceipt(t.Context(), common.HexToHash(sr.Transaction))
			if err != nil || r.Status != 1 {
				t.Errorf("transaction %s on %s: %v", sr.Transaction, pay.network, err)
			}
			charged := amount
			if pay == other {
				// upto: the tokens used, raised to the minimum charge (one
				// cent, the primary's upto.min_charge, though the primary
				// offers no upto), at most the quote (also one cent here).
				charged = mustAmount(sr.Amount)
				if charged.Cmp(amount) != 0 {
					t.Errorf("upto settled %s, want the one-cent minimum charge %s", sr.Amount, amount)
				}
			}
			for i, w := range want {
				got := new(big.Int).Sub(w.balance(t, payTo), before[i])
				wantGot := new(big.Int)
				if w == pay {
					wantGot = charged
				}
				if got.Cmp(wantGot) != 0 {
					t.Errorf("payTo received %s of %s on %s, want %s", got, w.addr.Hex(), w.network, wantGot)
				}
			}

			// The same payment again is never a second charge.
			rec.mu.Lock()
			sigs := slices.Clone(rec.sigs)
			rec.mu.Unlock()
			if len(sigs) == 0 {
				t.Fatal("no PAYMENT-SIGNATURE sent")
			}
			req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, base+"/v1/chat/completions", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set(x402.HeaderPaymentSignature, sigs[len(sigs)-1])
			again, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			readBody(t, again)
			if got := new(big.Int).Sub(pay.balance(t, payTo), before[indexOf(want, pay)]); got.Cmp(charged) != 0 {
				t.Errorf("after the same payment again (status %d), payTo received %s in all, want %s", again.StatusCode, got, charged)
			}
		})
	}
}

// TestServeSeveralNetworks' buyer may retry a paid call with the same
// payment identifier and a fresh authorization on another network (its
// wallet chose otherwise the second time): the answer it paid for is
// replayed, and nothing is paid on the second network.
func TestServePaymentIDAcrossNetworks(t *testing.T) {
	usdc := fundedToken(t, testchain.StartAnvil(t), "USD Coin", "2")
	other := fundedToken(t, testchain.StartAnvil(t, testchain.WithChainID(secondChainID)), "USD Coin", "2")
	cfg := serveConfig{RPC: "rpc_url: " + usdc.node.URL, Asset: usdc.addr.Hex()}.yaml(t) +
		"networks:\n" + other.networkEntry("USD Coin", "2", other.node.URL)
	proc := startCmd(t, []string{"serve", "--config", writeConfig(t, cfg)}, serveEnv(), "gateway listening on ")
	url := proc.url + "/v1/chat/completions"
	body := `{"model":"demo","messages":[{"role":"user","content":"Pay once, on either chain."}],"max_tokens":32}`
	payTo := testchain.DevAddress(testPayTo)
	id := x402.NewPaymentID()

	pay := func(i int) *http.Response {
		t.Helper()
		resp := postJSON(t, http.DefaultClient, url, body)
		readBody(t, resp)
		pr, err := x402.DecodePaymentRequired(resp.Header.Get(x402.HeaderPaymentRequired))
		if err != nil {
			t.Fatal(err)
		}
		if declared, _ := x402.PaymentIDDeclared(pr.Extensions); !declared {
			t.Fatal("402 without the payment-identifier extension")
		}
		p, err := exact.NewPaymentPayload(t.Context(), exact.NewKeySigner(testchain.DevKey(serveBuyer)), pr, i, exact.SignOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p.Extensions = json.RawMessage(`{"` + x402.ExtensionPaymentID + `":{"info":{"required":false,"id":"` + id + `"}}}`)
		h, err := x402.EncodeHeader(p)
		if err != nil {
			t.Fatal(err)
		}
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(x402.HeaderPaymentSignature, h)
		resp, err = http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	before, beforeOther := usdc.balance(t, payTo), other.balance(t, payTo)
	first := pay(1) // the second chain's offer
	firstBody := readBody(t, first)
	if first.StatusCode != http.StatusOK {
		t.Fatalf("first payment: %d: %s", first.StatusCode, firstBody)
	}
	paid := new(big.Int).Sub(other.balance(t, payTo), beforeOther)
	if paid.Sign() <= 0 {
		t.Fatalf("the second chain's payTo received %s", paid)
	}
	again := pay(0) // the same id, a fresh authorization on the primary chain
	againBody := readBody(t, again)
	if again.StatusCode != http.StatusOK || again.Header.Get("X-Llm4agents-Replay") == "" || string(againBody) != string(firstBody) {
		t.Errorf("retry on the primary chain: %d, replay %q, same body %t: %s", again.StatusCode,
			again.Header.Get("X-Llm4agents-Replay"), string(againBody) == string(firstBody), againBody)
	}
	if got := new(big.Int).Sub(usdc.balance(t, payTo), before); got.Sign() != 0 {
		t.Errorf("the primary chain's payTo received %s for a call paid on the second chain", got)
	}
	if got := new(big.Int).Sub(other.balance(t, payTo), beforeOther); got.Cmp(paid) != 0 {
		t.Errorf("the second chain's payTo received %s in all, want %s", got, paid)
	}
}

func indexOf(list []chainToken, c chainToken) int {
	for i, x := range list {
		if x == c {
			return i
		}
	}
	return -1
}
