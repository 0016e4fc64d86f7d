package gateway_test

import (
	"context"
	"encoding/json"
	"math/big"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/llm4agents/llm4agents/contracts"
	"github.com/llm4agents/llm4agents/internal/chain"
	"github.com/llm4agents/llm4agents/internal/facilitator"
	"github.com/llm4agents/llm4agents/internal/gateway"
	"github.com/llm4agents/llm4agents/internal/pricing"
	"github.com/llm4agents/llm4agents/internal/testchain"
	"github.com/llm4agents/llm4agents/internal/upstream"
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
			againBody := readAll(t, again)
			if again.StatusCode != http.StatusOK || again.Header.Get("X-Llm4agents-Replay") != "promoted" {
				t.Errorf("the same upto payment again: %d, replay %q; want the recorded answer replayed", again.StatusCode, again.Header.Get("X-Llm4agents-Replay"))
			}
			// The replay names the charge, not the maximum.
			var replayed struct {
				X xCost `json:"x_llm4agents"`
			}
			rsr, err := x402.DecodeSettleResponse(again.Header.Get(x402.HeaderPaymentResponse))
			if json.Unmarshal(againBody, &replayed) != nil || err != nil || replayed.X.Charged != want.String() || rsr.Amount != want.String() {
				t.Errorf("replay says charged %q, PAYMENT-RESPONSE %+v (%v); want %s", replayed.X.Charged, rsr, err, want)
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

// signedUptoAs answers the 402 of body with an upto permit of dev account
// i, edited by edit and signed again (by signer when it is not -1, else by
// i), so that any field can be anything.
func (e *env) signedUptoAs(t *testing.T, body string, i, signer int, edit func(a *upto.Authorization)) http.Header {
	t.Helper()
	pr := e.quote402(t, body)
	idx := slices.IndexFunc(pr.Accepts, func(r x402.PaymentRequirements) bool { return r.Scheme == upto.Scheme })
	if idx < 0 {
		t.Fatalf("no upto offer in %+v", pr.Accepts)
	}
	p, err := upto.NewPaymentPayload(t.Context(), exact.NewKeySigner(e.chain.Keys[i]), pr, idx, upto.SignOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pl, err := upto.ParsePayload(p.Payload)
	if err != nil {
		t.Fatal(err)
	}
	edit(&pl.Authorization)
	if signer < 0 {
		signer = i
	}
	if pl.Signature, err = exact.NewKeySigner(e.chain.Keys[signer]).SignDigest(t.Context(), upto.Digest(e.chain.ChainID, &pl.Authorization)); err != nil {
		t.Fatal(err)
	}
	if p.Payload, err = json.Marshal(pl.JSON()); err != nil {
		t.Fatal(err)
	}
	return http.Header{x402.HeaderPaymentSignature: {encodeHeader(t, p)}}
}

// TestUptoRefusalReasons: every upto permit the gateway can tell bad before
// the upstream is refused with a 402 naming the official reason (ours where
// the official facilitator has none, docs/REASONS.md), never reaches the
// upstream and moves no money.
func TestUptoRefusalReasons(t *testing.T) {
	e := newEnvConfig(t, 10*time.Second, nil, withUpto(0, false))
	e.chain.ApprovePermit2(t, buyerIdx)
	now := time.Now().Unix()
	at := func(v int64) *big.Int { return big.NewInt(v) }
	other := common.HexToAddress("0x00000000000000000000000000000000000000aa")
	tests := []struct {
		name   string
		payer  int
		signer int // -1: the payer
		edit   func(a *upto.Authorization)
		reason x402.Reason
	}{
		{"a witness paying another address", buyerIdx, -1, func(a *upto.Authorization) { a.Witness.To = other }, x402.ReasonPermit2RecipientMismatch},
		{"a witness naming another facilitator", buyerIdx, -1, func(a *upto.Authorization) { a.Witness.Facilitator = other }, x402.ReasonUptoFacilitatorMismatch},
		{"a spender that is not the proxy", buyerIdx, -1, func(a *upto.Authorization) { a.Spender = other }, x402.ReasonPermit2Spender},
		{"a deadline beyond the 402's timeout", buyerIdx, -1, func(a *upto.Authorization) { a.Deadline = at(now + 3600) }, x402.ReasonUptoDeadlineTooFar},
		{"a deadline passed", buyerIdx, -1, func(a *upto.Authorization) { a.Deadline = at(now - 10) }, x402.ReasonPermit2DeadlineExpired},
		{"a deadline too soon to finish", buyerIdx, -1, func(a *upto.Authorization) { a.Deadline = at(now + 3) }, x402.ReasonPermit2DeadlineExpired},
		{"validAfter in the future", buyerIdx, -1, func(a *upto.Authorization) { a.Witness.ValidAfter = at(now + 120) }, x402.ReasonPermit2NotYetValid},
		{"a maximum above the quote", buyerIdx, -1, func(a *upto.Authorization) { a.Permitted.Amount = at(60001) }, x402.ReasonPermit2AmountMismatch},
		{"a token not offered", buyerIdx, -1, func(a *upto.Authorization) { a.Permitted.Token = other }, x402.ReasonPermit2TokenMismatch},
		{"signed by someone else", buyerIdx, buyerIdx + 1, func(*upto.Authorization) {}, x402.ReasonPermit2Signature},
		{"no Permit2 allowance", buyerIdx + 1, -1, func(*upto.Authorization) {}, x402.ReasonPermit2AllowanceRequired},
	}
	payTo0 := e.chain.BalanceOf(t, e.chain.Addr(payToIdx))

	// accepted naming another facilitator than the 402's: paid for another
	// offer (D7).
	t.Run("accepted naming another facilitator", func(t *testing.T) {
		pr := e.quote402(t, uptoBody)
		p, err := x402.DecodePaymentPayload(e.signUpto(t, buyerIdx, pr).Get(x402.HeaderPaymentSignature))
		if err != nil {
			t.Fatal(err)
		}
		accepted := pr.Accepts[1]
		accepted.Extra = json.RawMessage(`{"facilitatorAddress":"` + other.Hex() + `"}`)
		if p.Accepted, err = json.Marshal(accepted); err != nil {
			t.Fatal(err)
		}
		hdr := http.Header{x402.HeaderPaymentSignature: {encodeHeader(t, p)}}
		resp := e.post(t, http.DefaultClient, uptoBody, hdr)
		body := readAll(t, resp)
		// PAYMENT-REQUIRED keeps the official words; the code names the
		// reason (docs/REASONS.md).
		_, err = x402.DecodePaymentRequired(resp.Header.Get(x402.HeaderPaymentRequired))
		if resp.StatusCode != http.StatusPaymentRequired || err != nil || errorCode(t, body) != string(x402.ReasonUptoAcceptedMismatch) {
			t.Fatalf("%d %s (%v); want a 402 %s", resp.StatusCode, body, err, x402.ReasonUptoAcceptedMismatch)
		}
	})
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			hdr := e.signedUptoAs(t, uptoBody, tc.payer, tc.signer, tc.edit)
			resp := e.post(t, http.DefaultClient, uptoBody, hdr)
			body := readAll(t, resp)
			pr, err := x402.DecodePaymentRequired(resp.Header.Get(x402.HeaderPaymentRequired))
			if resp.StatusCode != http.StatusPaymentRequired || err != nil {
				t.Fatalf("%d %s (%v); want a 402 with PAYMENT-REQUIRED", resp.StatusCode, body, err)
			}
			if pr.Error != string(tc.reason) {
				t.Errorf("reason %q, want %q", pr.Error, tc.reason)
			}
			if code := errorCode(t, body); code != string(tc.reason) {
				t.Errorf("error code %q, want %q", code, tc.reason)
			}
		})
	}
	if n := e.up.Calls(); n != 0 {
		t.Errorf("%d upstream calls for refused payments", n)
	}
	if got := e.chain.BalanceOf(t, e.chain.Addr(payToIdx)); got.Cmp(payTo0) != 0 {
		t.Errorf("payTo balance moved from %s to %s", payTo0, got)
	}
}

// TestUptoSpent: a permit whose nonce another payment used is refused
// without a new offer (D29) and without the upstream.
func TestUptoSpent(t *testing.T) {
	e := newEnvConfig(t, 10*time.Second, nil, withUpto(0, false))
	e.chain.ApprovePermit2(t, buyerIdx)
	payTo := e.chain.Addr(payToIdx)

	// Two permits with one nonce: the first pays, the second is spent.
	var nonce *big.Int
	first := e.signedUptoAs(t, uptoBody, buyerIdx, -1, func(a *upto.Authorization) { nonce = a.Nonce })
	if resp := e.post(t, http.DefaultClient, uptoBody, first); resp.StatusCode != http.StatusOK {
		t.Fatalf("first permit: %d %s", resp.StatusCode, readAll(t, resp))
	} else {
		_ = readAll(t, resp)
	}
	paid := e.chain.BalanceOf(t, payTo)
	calls := e.up.Calls()
	other := `{"model":"demo","messages":[{"role":"user","content":"Something else"}],"max_tokens":256}`
	second := e.signedUptoAs(t, other, buyerIdx, -1, func(a *upto.Authorization) { a.Nonce = nonce })
	resp := e.post(t, http.DefaultClient, other, second)
	body := readAll(t, resp)
	if resp.StatusCode == http.StatusOK || resp.Header.Get(x402.HeaderPaymentRequired) != "" {
		t.Errorf("a permit with a used nonce: %d, PAYMENT-REQUIRED %q; want a refusal that invites no payment: %s",
			resp.StatusCode, resp.Header.Get(x402.HeaderPaymentRequired), body)
	}
	if e.up.Calls() != calls {
		t.Errorf("the spent permit reached the upstream")
	}
	if got := e.chain.BalanceOf(t, payTo); got.Cmp(paid) != 0 {
		t.Errorf("payTo balance moved from %s to %s", paid, got)
	}
}

// revokeFirst runs before ahead of every upto settle: what a buyer does who
// revokes its Permit2 allowance while the upstream answers.
type revokeFirst struct {
	*facilitator.Facilitator
	before func()
}

func (r *revokeFirst) Settle(ctx context.Context, p *x402.PaymentPayload, req x402.PaymentRequirements) (*x402.SettleResponse, error) {
	if req.Scheme == upto.Scheme && r.before != nil {
		r.before()
	}
	return r.Facilitator.Settle(ctx, p, req)
}

// TestUptoRevokedBeforeSettle: a permit admitted, whose allowance the buyer
// revokes before the settlement, is found out there: the answer is withheld,
// the refusal names the reason, and nothing moves.
func TestUptoRevokedBeforeSettle(t *testing.T) {
	rf := &revokeFirst{}
	e := newEnvConfig(t, 10*time.Second, func(f *facilitator.Facilitator) gateway.Facilitator { rf.Facilitator = f; return rf }, withUpto(0, false))
	e.chain.ApprovePermit2(t, buyerIdx)
	payTo := e.chain.Addr(payToIdx)
	before := e.chain.BalanceOf(t, payTo)
	rf.before = func() {
		tx, err := e.chain.TokenContract.Approve(e.chain.Transactor(t, buyerIdx), contracts.Permit2Address, big.NewInt(0))
		if err != nil {
			t.Error(err)
			return
		}
		e.chain.Mine(t, tx)
	}
	hdr := e.signedUptoAs(t, uptoBody, buyerIdx, -1, func(*upto.Authorization) {})
	resp := e.post(t, http.DefaultClient, uptoBody, hdr)
	body := readAll(t, resp)
	if resp.StatusCode == http.StatusOK {
		t.Fatalf("an answer whose permit could not settle was served: %s", body)
	}
	sr, err := x402.DecodeSettleResponse(resp.Header.Get(x402.HeaderPaymentResponse))
	if err != nil || sr.Success || sr.ErrorReason == "" {
		t.Errorf("PAYMENT-RESPONSE = %+v, %v; want the failed settlement's reason", sr, err)
	}
	if got := e.chain.BalanceOf(t, payTo); got.Cmp(before) != 0 {
		t.Errorf("payTo balance moved from %s to %s", before, got)
	}
}

// TestUptoStreamOurClientCountsTheCharge: our client pays an upto stream
// and, once the stream ended, counts the charge its last chunk names, not
// the maximum it held meanwhile.
func TestUptoStreamOurClientCountsTheCharge(t *testing.T) {
	e := newEnvConfig(t, 10*time.Second, nil, withUpto(0, false))
	e.chain.ApprovePermit2(t, buyerIdx)
	c, tr := e.payer(buyerIdx)
	payTo := e.chain.Addr(payToIdx)
	before := e.chain.BalanceOf(t, payTo)
	body := strings.Replace(uptoBody, `"max_tokens"`, `"stream":true,"max_tokens"`, 1)
	resp := e.post(t, c, body, nil)
	text := readAll(t, resp)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, text)
	}
	received := new(big.Int).Sub(e.chain.BalanceOf(t, payTo), before)
	if received.Sign() <= 0 || received.Cmp(big.NewInt(60000)) >= 0 {
		t.Fatalf("payTo received %s, want a charge below the maximum 60000", received)
	}
	if tr.Spent().Cmp(received) != 0 {
		t.Errorf("the client counts %s, the chain moved %s", tr.Spent(), received)
	}
}

// TestUptoAnotherReplicaInvitesNoSecondPayment: replicas with in-process
// facilitators of their own offer upto for different settling addresses. A
// permit another replica settled, presented here, matches none of this
// replica's offers, but it is spent: the answer is a refusal, never a 402
// offer that would have the buyer pay the call again (D29).
func TestUptoAnotherReplicaInvitesNoSecondPayment(t *testing.T) {
	a := newEnvConfig(t, 10*time.Second, nil, withUpto(0, false))
	a.chain.ApprovePermit2(t, buyerIdx)

	// Replica B: the same chain, store and upstream, its own signer.
	const otherSigner = signerIdx - 1
	sender, err := chain.NewSender(a.chain.Client, a.chain.Keys[otherSigner], a.chain.ChainID,
		chain.SenderConfig{MaxFeePerGas: big.NewInt(1e12), PollInterval: 10 * time.Millisecond}, discard())
	if err != nil {
		t.Fatal(err)
	}
	fac, err := facilitator.New(facilitator.Config{
		Network: network, Assets: []facilitator.Asset{{Address: a.chain.Token, Name: "USD Coin", Version: "2"}},
		Schemes: []string{exact.Scheme, upto.Scheme},
	}, a.chain.Client, sender, a.db, discard())
	if err != nil {
		t.Fatal(err)
	}
	prov, err := upstream.NewOpenAI(upstream.OpenAIConfig{BaseURL: a.up.URL(), APIKey: "sk-upstream-secret", Timeout: 5 * time.Second}, discard())
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(nil)
	gw, err := gateway.New(gateway.Config{
		PublicURL: a.srv.URL, Network: network, Asset: a.chain.Token.Hex(), AssetName: "USD Coin", AssetVersion: "2", Decimals: 6,
		PayTo: a.chain.Addr(payToIdx).Hex(), UpstreamTimeout: 5 * time.Second, SettleTimeout: 10 * time.Second, Owner: "replica-b",
		Models: []gateway.Model{{ID: "demo", UpstreamModel: "demo-upstream", Provider: prov, Price: price, MaxOutputTokens: 256}},
		Upto:   &gateway.Upto{Extra: json.RawMessage(`{"facilitatorAddress":"` + devAddr(otherSigner) + `"}`), MinCharge: new(big.Int)},
	}, fac, a.db, discard())
	if err != nil {
		t.Fatal(err)
	}
	srv.Config.Handler = gw
	srv.Start()
	t.Cleanup(srv.Close)
	b := &env{db: a.db, chain: a.chain, up: a.up, gw: gw, srv: srv}

	hdr := a.signUpto(t, buyerIdx, a.quote402(t, uptoBody))
	if resp := a.post(t, http.DefaultClient, uptoBody, hdr); resp.StatusCode != http.StatusOK {
		t.Fatalf("replica A: %d %s", resp.StatusCode, readAll(t, resp))
	} else {
		_ = readAll(t, resp)
	}
	calls := a.up.Calls()
	resp := b.post(t, http.DefaultClient, uptoBody, hdr)
	body := readAll(t, resp)
	if resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusPaymentRequired || resp.Header.Get(x402.HeaderPaymentRequired) != "" {
		t.Errorf("replica B answered %d (PAYMENT-REQUIRED %q): %s; want a refusal that invites no second payment",
			resp.StatusCode, resp.Header.Get(x402.HeaderPaymentRequired), body)
	}
	if a.up.Calls() != calls {
		t.Error("replica B called the upstream for a spent permit")
	}
}
