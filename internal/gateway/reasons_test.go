package gateway_test

import (
	"encoding/json"
	"math/big"
	"net/http"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"

	"github.com/llm4agents/llm4agents/internal/testchain"
	"github.com/llm4agents/llm4agents/x402"
	"github.com/llm4agents/llm4agents/x402/evm/exact"
)

// signedAs answers the 402 of body as dev account i with the authorization
// edited by edit and signed again, so that its window, value or recipient
// can be anything.
func (e *env) signedAs(t *testing.T, body string, i int, edit func(a *exact.Authorization)) string {
	t.Helper()
	p := e.signedPayload(t, body, i)
	pl, err := exact.ParsePayload(p.Payload)
	if err != nil {
		t.Fatal(err)
	}
	edit(&pl.Authorization)
	d := exact.Domain{Name: "USD Coin", Version: "2", ChainID: e.chain.ChainID, VerifyingContract: e.chain.Token}
	if pl.Signature, err = exact.NewKeySigner(e.chain.Keys[i]).SignDigest(t.Context(), exact.Digest(d, &pl.Authorization)); err != nil {
		t.Fatal(err)
	}
	if p.Payload, err = json.Marshal(pl.JSON()); err != nil {
		t.Fatal(err)
	}
	return encodeHeader(t, p)
}

// TestRefusalReasons: every refusal of a payment names
// its own reason in the 402's PAYMENT-REQUIRED error (the official string
// where the official facilitator has one, docs/REASONS.md), and none
// reaches the upstream or moves money.
func TestRefusalReasons(t *testing.T) {
	e := newEnv(t)
	now := time.Now().Unix()
	at := func(v int64) *big.Int { return big.NewInt(v) }
	broke := testchain.SimulatedPayers + 1 // a dev account holding no tokens
	tests := []struct {
		name   string
		payer  int
		edit   func(a *exact.Authorization)
		reason x402.Reason
	}{
		{"validAfter in the future", buyerIdx, func(a *exact.Authorization) { a.ValidAfter = at(now + 120) }, x402.ReasonEVMValidAfter},
		{"validBefore beyond the 402's timeout", buyerIdx, func(a *exact.Authorization) { a.ValidBefore = at(now + 3600) }, x402.ReasonEVMValidBeforeTooFar},
		{"validBefore too soon to finish", buyerIdx, func(a *exact.Authorization) { a.ValidBefore = at(now + 3) }, x402.ReasonEVMValidBefore},
		{"validBefore passed", buyerIdx, func(a *exact.Authorization) { a.ValidBefore = at(now - 10) }, x402.ReasonEVMValidBefore},
		{"value below the price", buyerIdx, func(a *exact.Authorization) { a.Value = at(9999) }, x402.ReasonEVMValueMismatch},
		{"another recipient", buyerIdx, func(a *exact.Authorization) { a.To = common.HexToAddress("0x00000000000000000000000000000000000000aa") }, x402.ReasonEVMRecipientMismatch},
		{"no funds", broke, func(*exact.Authorization) {}, x402.ReasonEVMInsufficientBalance},
	}
	payTo0 := e.chain.BalanceOf(t, e.chain.Addr(payToIdx))
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := e.signedAs(t, chatBody, tc.payer, tc.edit)
			resp := e.post(t, http.DefaultClient, chatBody, http.Header{x402.HeaderPaymentSignature: {h}})
			body := readAll(t, resp)
			pr, err := x402.DecodePaymentRequired(resp.Header.Get(x402.HeaderPaymentRequired))
			if resp.StatusCode != http.StatusPaymentRequired || err != nil {
				t.Fatalf("%d %s (%v); want a 402 with PAYMENT-REQUIRED", resp.StatusCode, body, err)
			}
			if pr.Error != string(tc.reason) {
				t.Errorf("reason %q, want %q", pr.Error, tc.reason)
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
