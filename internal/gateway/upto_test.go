package gateway_test

import (
	"context"
	"encoding/json"
	"math/big"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/crypto"
	"github.com/llm4agents/llm4agents/internal/facilitator"
	"github.com/llm4agents/llm4agents/internal/gateway"
	"github.com/llm4agents/llm4agents/internal/pricing"
	"github.com/llm4agents/llm4agents/internal/testchain"
	"github.com/llm4agents/llm4agents/x402"
	"github.com/llm4agents/llm4agents/x402/evm/exact"
	"github.com/llm4agents/llm4agents/x402/evm/upto"
)

// uptoBody asks for up to 256 tokens: quoted 60000 (price), while the
// answer costs a few thousand.
const uptoBody = `{"model":"demo","messages":[{"role":"user","content":"Say hello"}],"max_tokens":256}`

// withUpto offers upto beside exact, settled by the test facilitator's
// signer, for at least minCharge.
func withUpto(minCharge int64, exactOnlyStreams bool) func(*gateway.Config) {
	return func(cfg *gateway.Config) {
		cfg.Upto = &gateway.Upto{
			Extra:     json.RawMessage(`{"facilitatorAddress":"` + devAddr(signerIdx) + `"}`),
			MinCharge: big.NewInt(minCharge), ExactOnlyStreams: exactOnlyStreams,
		}
	}
}

func devAddr(i int) string { return crypto.PubkeyToAddress(testchain.DevKey(i).PublicKey).Hex() }

// quote402 posts body unpaid and returns the 402's PaymentRequired.
func (e *env) quote402(t *testing.T, body string) *x402.PaymentRequired {
	t.Helper()
	resp := e.post(t, http.DefaultClient, body, nil)
	b := readAll(t, resp)
	if resp.StatusCode != http.StatusPaymentRequired {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	pr, err := x402.DecodePaymentRequired(resp.Header.Get(x402.HeaderPaymentRequired))
	if err != nil {
		t.Fatal(err)
	}
	return pr
}

// signUpto signs the 402's upto offer as dev account i and returns the
// PAYMENT-SIGNATURE header.
func (e *env) signUpto(t *testing.T, i int, pr *x402.PaymentRequired) http.Header {
	t.Helper()
	idx := -1
	for j, a := range pr.Accepts {
		if a.Scheme == upto.Scheme {
			idx = j
		}
	}
	if idx < 0 {
		t.Fatalf("no upto offer in %+v", pr.Accepts)
	}
	p, err := upto.NewPaymentPayload(context.Background(), exact.NewKeySigner(e.chain.Keys[i]), pr, idx, upto.SignOptions{})
	if err != nil {
		t.Fatal(err)
	}
	h, err := x402.EncodeHeader(p)
	if err != nil {
		t.Fatal(err)
	}
	return http.Header{x402.HeaderPaymentSignature: {h}}
}

// xCost is the x_llm4agents annotation of a paid answer.
type xCost struct {
	Charged     string `json:"charged"`
	Maximum     string `json:"maximum"`
	Transaction string `json:"transaction"`
}

func TestUptoOfferedBesideExact(t *testing.T) {
	e := newEnvConfig(t, 10*time.Second, nil, withUpto(10000, false))
	pr := e.quote402(t, uptoBody)
	if len(pr.Accepts) != 2 || pr.Accepts[0].Scheme != exact.Scheme || pr.Accepts[1].Scheme != upto.Scheme {
		t.Fatalf("accepts = %+v, want exact then upto", pr.Accepts)
	}
	if pr.Accepts[0].Amount != pr.Accepts[1].Amount || pr.Accepts[1].Amount != "60000" {
		t.Errorf("upto maximum %s, exact %s; want both the quote 60000", pr.Accepts[1].Amount, pr.Accepts[0].Amount)
	}
	extra, err := upto.ParseExtra(pr.Accepts[1].Extra)
	if err != nil || extra.FacilitatorAddress.Hex() != devAddr(signerIdx) {
		t.Errorf("upto extra = %s (%v)", pr.Accepts[1].Extra, err)
	}

	// exact_only: a stream is offered exact alone.
	e = newEnvConfig(t, 10*time.Second, nil, withUpto(10000, true))
	pr = e.quote402(t, strings.Replace(uptoBody, `"max_tokens"`, `"stream":true,"max_tokens"`, 1))
	if len(pr.Accepts) != 1 || pr.Accepts[0].Scheme != exact.Scheme {
		t.Fatalf("stream accepts under exact_only = %+v, want exact alone", pr.Accepts)
	}
}

// TestUptoPaysTheUsage: a call paid with upto settles what its usage cost
// (raised to the minimum charge), not the quote; the payTo receives exactly
// that, the answer says maximum and charge, and the same payment never pays
// or buys twice.
func TestUptoPaysTheUsage(t *testing.T) {
	for _, tc := range []struct {
		name      string
		minCharge int64
	}{
		{"the cost", 0},
		{"raised to the minimum", 30000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnvConfig(t, 10*time.Second, nil, withUpto(tc.minCharge, false))
			e.chain.ApprovePermit2(t, buyerIdx)
			payTo := e.chain.Addr(payToIdx)
			before := e.chain.BalanceOf(t, payTo)
			hdr := e.signUpto(t, buyerIdx, e.quote402(t, uptoBody))

			resp := e.post(t, http.DefaultClient, uptoBody, hdr)
			body := readAll(t, resp)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			var comp struct {
				Usage struct {
					PromptTokens     int64 `json:"prompt_tokens"`
					CompletionTokens int64 `json:"completion_tokens"`
				} `json:"usage"`
				X xCost `json:"x_llm4agents"`
			}
			if err := json.Unmarshal(body, &comp); err != nil {
				t.Fatal(err)
			}
			cost := new(big.Int).Add(big.NewInt(comp.Usage.PromptTokens*1), big.NewInt(comp.Usage.CompletionTokens*200))
			want := pricing.Charge(cost, big.NewInt(tc.minCharge), big.NewInt(60000))
			if want.Cmp(big.NewInt(60000)) >= 0 {
				t.Fatalf("the test's answer costs %s, not less than the quote", cost)
			}
			sr, err := x402.DecodeSettleResponse(resp.Header.Get(x402.HeaderPaymentResponse))
			if err != nil || !sr.Success || sr.Amount != want.String() {
				t.Fatalf("PAYMENT-RESPONSE = %+v, %v; want success for %s", sr, err, want)
			}
			if comp.X.Charged != want.String() || comp.X.Maximum != "60000" || comp.X.Transaction != sr.Transaction {
				t.Errorf("x_llm4agents = %+v, want charged %s of maximum 60000", comp.X, want)
			}
			if got := new(big.Int).Sub(e.chain.BalanceOf(t, payTo), before); got.Cmp(want) != 0 {
				t.Fatalf("payTo received %s, want exactly the charge %s", got, want)
			}

			// The same payment again: no second upstream call, no second
			// transfer.
			again := e.post(t, http.DefaultClient, uptoBody, hdr)
			_ = readAll(t, again)
			if again.StatusCode == http.StatusOK && again.Header.Get("X-Llm4agents-Replay") == "" {
				t.Errorf("the same upto payment bought a fresh answer (status %d)", again.StatusCode)
			}
			if e.up.Calls() != 1 {
				t.Errorf("upstream called %d times, want 1", e.up.Calls())
			}
			if got := new(big.Int).Sub(e.chain.BalanceOf(t, payTo), before); got.Cmp(want) != 0 {
				t.Fatalf("after a second presentation payTo received %s, want %s", got, want)
			}
		})
	}
}

// TestUptoStreamDeliversThenSettles: a stream paid with upto is delivered,
// then settled for its usage; the last chunk says maximum, charge and
// transaction.
func TestUptoStreamDeliversThenSettles(t *testing.T) {
	e := newEnvConfig(t, 10*time.Second, nil, withUpto(0, false))
	e.chain.ApprovePermit2(t, buyerIdx)
	payTo := e.chain.Addr(payToIdx)
	before := e.chain.BalanceOf(t, payTo)
	body := strings.Replace(uptoBody, `"max_tokens"`, `"stream":true,"max_tokens"`, 1)
	hdr := e.signUpto(t, buyerIdx, e.quote402(t, body))
	resp := e.post(t, http.DefaultClient, body, hdr)
	text := string(readAll(t, resp))
	if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Llm4agents-Maximum") != "60000" {
		t.Fatalf("status %d, maximum %q: %s", resp.StatusCode, resp.Header.Get("X-Llm4agents-Maximum"), text)
	}
	if !strings.HasSuffix(strings.TrimSpace(text), "data: [DONE]") {
		t.Fatalf("stream does not end with [DONE]: %s", text)
	}
	var x xCost
	for line := range strings.SplitSeq(text, "\n") {
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok || !strings.Contains(data, "x_llm4agents") {
			continue
		}
		var c struct {
			X xCost `json:"x_llm4agents"`
		}
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			t.Fatal(err)
		}
		x = c.X
	}
	if x.Maximum != "60000" || x.Charged == "" || x.Charged == "0" || x.Transaction == "" {
		t.Fatalf("last chunk's x_llm4agents = %+v", x)
	}
	charged, _ := new(big.Int).SetString(x.Charged, 10)
	if charged.Cmp(big.NewInt(60000)) >= 0 {
		t.Errorf("charged %s, not less than the maximum", charged)
	}
	if got := new(big.Int).Sub(e.chain.BalanceOf(t, payTo), before); got.Cmp(charged) != 0 {
		t.Fatalf("payTo received %s, the stream says %s", got, charged)
	}
}

// failingUpto refuses every upto settle, as a facilitator does when the
// buyer revoked its Permit2 allowance mid-stream.
type failingUpto struct{ *facilitator.Facilitator }

func (f failingUpto) Settle(ctx context.Context, p *x402.PaymentPayload, req x402.PaymentRequirements) (*x402.SettleResponse, error) {
	if req.Scheme == upto.Scheme {
		return &x402.SettleResponse{Success: false, ErrorReason: x402.ReasonPermit2AllowanceRequired, Network: req.Network}, nil
	}
	return f.Facilitator.Settle(ctx, p, req)
}

// TestUptoStreamUnpaidIsCountedAndNotSoldAgain: a stream delivered whose
// settlement then fails is the seller's loss, counted; the same payment
// does not buy it again.
func TestUptoStreamUnpaidIsCountedAndNotSoldAgain(t *testing.T) {
	e := newEnvConfig(t, 10*time.Second, func(f *facilitator.Facilitator) gateway.Facilitator { return failingUpto{f} }, withUpto(0, false))
	e.chain.ApprovePermit2(t, buyerIdx)
	body := strings.Replace(uptoBody, `"max_tokens"`, `"stream":true,"max_tokens"`, 1)
	hdr := e.signUpto(t, buyerIdx, e.quote402(t, body))
	resp := e.post(t, http.DefaultClient, body, hdr)
	text := string(readAll(t, resp))
	if resp.StatusCode != http.StatusOK || !strings.Contains(text, `"charged":"0"`) {
		t.Fatalf("status %d: %s", resp.StatusCode, text)
	}
	if n := e.gw.Metrics().PaymentCount("delivered_unpaid"); n != 1 {
		t.Errorf("delivered_unpaid = %v, want 1", n)
	}
	again := e.post(t, http.DefaultClient, body, hdr)
	b := readAll(t, again)
	if again.StatusCode == http.StatusOK {
		t.Fatalf("the unpaid stream's payment bought it again: %s", b)
	}
	if e.up.Calls() != 1 {
		t.Errorf("upstream called %d times, want 1", e.up.Calls())
	}
}
