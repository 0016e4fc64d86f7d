package interop_test

import (
	"context"
	"encoding/json"
	"math/big"
	"net/http"
	"strconv"
	"sync"
	"testing"

	"github.com/ethereum/go-ethereum/accounts/abi"

	"github.com/llm4agents/llm4agents/client"
	"github.com/llm4agents/llm4agents/contracts"
	"github.com/llm4agents/llm4agents/internal/facilitator"
	"github.com/llm4agents/llm4agents/internal/testchain"
	"github.com/llm4agents/llm4agents/x402"
	"github.com/llm4agents/llm4agents/x402/evm/exact"
	"github.com/llm4agents/llm4agents/x402/evm/upto"
)

const (
	// meteredMax is the price of express-upto.mjs's GET /metered: exact's
	// amount and upto's maximum.
	meteredMax = "50000"
	// meteredCharge is what its handler charges an upto payment.
	meteredCharge = "12345"
)

// withUpto makes our facilitator serve upto beside exact.
func withUpto(cfg *facilitator.Config) { cfg.Schemes = []string{exact.Scheme, upto.Scheme} }

// TestGoBuyerPaysOfficialUpto: our client.Transport pays the official
// @x402/express server (2.27.0) that offers exact and upto (the official
// UptoEvmScheme server) for one route and charges less than the maximum with
// setSettlementOverrides, settled through our facilitator serving upto. The
// client prefers upto, the payee receives exactly the charge, and the client's
// ledger counts exactly it. With the policy refusing upto the same route is
// paid in exact, for the full price.
func TestGoBuyerPaysOfficialUpto(t *testing.T) {
	requireTools(t)
	c := newChain(t)
	fac := startOurFacilitator(t, c, withUpto)
	payer, payTo := testchain.DevAddress(payerIdx), testchain.DevAddress(payToIdx)
	srv := startNodeService(t, "express-upto.mjs",
		"PORT=0",
		"FACILITATOR_URL="+fac.URL,
		"TOKEN="+c.token.Hex(),
		"PAY_TO="+payTo.Hex(),
		"AMOUNT="+meteredMax,
		"CHARGE="+meteredCharge,
		"MAX_TIMEOUT_SECONDS="+strconv.Itoa(maxTimeoutSeconds),
	)
	meteredURL := srv.URL + "/metered"

	// The payer's one-time approval of Permit2, as `llm4agents wallet
	// approve-permit2` sends it.
	tx, err := c.tokenContract.Approve(transactor(t, t.Context(), c.anvil, payerIdx), contracts.Permit2Address, abi.MaxUint256)
	if err != nil {
		t.Fatal(err)
	}
	waitMined(t, t.Context(), c.anvil, tx)

	pr := fetchPaymentRequired(t, meteredURL)
	if len(pr.Accepts) != 2 || pr.Accepts[0].Scheme != exact.Scheme || pr.Accepts[1].Scheme != upto.Scheme {
		t.Fatalf("the 402 offers %+v, want exact then upto", pr.Accepts)
	}
	extra, err := upto.ParseExtra(pr.Accepts[1].Extra)
	if err != nil || extra.FacilitatorAddress != fac.Address {
		t.Fatalf("upto extra %s (%v), want our facilitator %s", pr.Accepts[1].Extra, err, fac.Address)
	}

	for _, tc := range []struct {
		name       string
		mode       client.UptoMode
		wantScheme string
		wantPaid   string
	}{
		{"prefers upto", client.UptoPrefer, upto.Scheme, meteredCharge},
		{"upto refused", client.UptoRefuse, exact.Scheme, meteredMax},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			var charges []client.Charge
			tr := &client.Transport{
				Signer: exact.NewKeySigner(testchain.DevKey(payerIdx)),
				Policy: client.Policy{
					MaxPerRequest: mustUint(t, meteredMax),
					Budget:        big.NewInt(1_000_000),
					Assets:        []client.Asset{{Network: network, Address: c.token.Hex()}},
					Upto:          tc.mode,
				},
				OnCharge: func(_ context.Context, ch client.Charge) {
					mu.Lock()
					defer mu.Unlock()
					charges = append(charges, ch)
				},
			}
			hc := &http.Client{Transport: tr}
			payToBefore, payerBefore := c.balance(t, payTo), c.balance(t, payer)
			calls := fac.rec.count()

			resp, body := buyerGet(t, hc, meteredURL)
			if resp.StatusCode != http.StatusOK || string(body) != `{"ok":true,"scheme":"`+tc.wantScheme+`"}` {
				t.Fatalf("GET /metered: %d %s", resp.StatusCode, body)
			}
			sr, err := x402.DecodeSettleResponse(resp.Header.Get(x402.HeaderPaymentResponse))
			if err != nil {
				t.Fatalf("PAYMENT-RESPONSE: %v", err)
			}
			if !sr.Success || sr.Transaction == "" {
				t.Fatalf("PAYMENT-RESPONSE %+v, want a settled success", sr)
			}
			if tc.wantScheme == upto.Scheme && sr.Amount != meteredCharge {
				t.Errorf("PAYMENT-RESPONSE amount %q, want %s", sr.Amount, meteredCharge)
			}

			// On chain: the payee got exactly the charge, from the payer.
			c.checkBalanceRose(t, payTo, payToBefore, tc.wantPaid)
			if paid := new(big.Int).Sub(payerBefore, c.balance(t, payer)); paid.String() != tc.wantPaid {
				t.Errorf("payer paid %s, want %s", paid, tc.wantPaid)
			}
			// Through our facilitator: one verify for the maximum, one settle
			// for the charge.
			verifies, settles := fac.rec.since(calls, "/verify"), fac.rec.since(calls, "/settle")
			if len(verifies) != 1 || len(settles) != 1 {
				t.Fatalf("%d /verify and %d /settle calls, want 1 and 1", len(verifies), len(settles))
			}
			var settleReq x402.FacilitatorRequest
			if err := json.Unmarshal(settles[0].Request, &settleReq); err != nil {
				t.Fatal(err)
			}
			if r := settleReq.PaymentRequirements; r.Scheme != tc.wantScheme || r.Amount != tc.wantPaid {
				t.Errorf("/settle asked for %s %s, want %s %s", r.Scheme, r.Amount, tc.wantScheme, tc.wantPaid)
			}

			// The client counted exactly what was paid, and freed the rest of
			// the maximum.
			if got := tr.Spent().String(); got != tc.wantPaid {
				t.Errorf("Spent() = %s, want %s", got, tc.wantPaid)
			}
			wantRemaining := new(big.Int).Sub(big.NewInt(1_000_000), mustUint(t, tc.wantPaid))
			if got := tr.Remaining(); got.Cmp(wantRemaining) != 0 {
				t.Errorf("Remaining() = %s, want %s", got, wantRemaining)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(charges) != 1 {
				t.Fatalf("OnCharge called %d times, want 1", len(charges))
			}
			ch := charges[0]
			if ch.Requirements.Scheme != tc.wantScheme || ch.Outcome != client.OutcomePaid || ch.Err != nil ||
				ch.Maximum.String() != meteredMax || ch.Amount.String() != tc.wantPaid {
				t.Errorf("charge = %s %v max %s amount %s err %v; want %s paid max %s amount %s",
					ch.Requirements.Scheme, ch.Outcome, ch.Maximum, ch.Amount, ch.Err, tc.wantScheme, meteredMax, tc.wantPaid)
			}
		})
	}
}
