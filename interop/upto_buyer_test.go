package interop_test

import (
	"context"
	"encoding/json"
	"math/big"
	"net/http"
	"strconv"
	"strings"
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

// TestCLIPaysOfficialUpto runs the llm4agents command against the same
// official server, for a wallet that has never approved Permit2: pay
// --dry-run --rpc says the approval is missing, a payment without it is
// refused by our facilitator and charges nothing, wallet approve-permit2
// sends the approval, and pay then pays the upto offer for the charge alone.
func TestCLIPaysOfficialUpto(t *testing.T) {
	requireTools(t)
	c := newChain(t)
	fac := startOurFacilitator(t, c, withUpto)
	payTo := testchain.DevAddress(payToIdx)
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
	// A wallet of its own: funded, never approved.
	walletIdx := strangerIdx
	tx, err := c.tokenContract.Mint(transactor(t, t.Context(), c.anvil, deployerIdx), testchain.DevAddress(walletIdx), big.NewInt(1_000_000))
	if err != nil {
		t.Fatal(err)
	}
	waitMined(t, t.Context(), c.anvil, tx)

	bin := buildCLI(t)
	keyEnv := []string{"LLM4AGENTS_WALLET_KEY=" + keyHex(testchain.DevKey(walletIdx))}
	asset := "--asset=" + network + "/" + c.token.Hex()
	secret := strings.TrimPrefix(keyHex(testchain.DevKey(walletIdx)), "0x")
	cli := func(t *testing.T, args ...string) (string, string, error) {
		t.Helper()
		stdout, stderr, err := runCLI(t, bin, keyEnv, args...)
		if strings.Contains(stdout+stderr, secret) {
			t.Error("the CLI printed the wallet key")
		}
		return stdout, stderr, err
	}

	stdout, stderr, err := cli(t, "pay", "--dry-run", asset, "--rpc", c.anvil.URL, meteredURL)
	if err != nil {
		t.Fatalf("pay --dry-run: %v\n%s", err, stderr)
	}
	for _, want := range []string{
		"[0] exact on " + network, "verdict  refused (not_chosen): payable, but option [1] is preferred",
		"[1] upto on " + network, "maximum  " + meteredMax + " atomic units = 0.05", "settles  through Permit2, by facilitator " + fac.Address.Hex() + " only", "verdict  PAY: would be paid",
		"permit2: the upto option needs a Permit2 approval first",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("dry run lacks %q:\n%s", want, stdout)
		}
	}

	// The official server answers 412 when our facilitator's verify says
	// permit2_allowance_required.
	before := c.balance(t, payTo)
	calls := fac.rec.count()
	_, stderr, err = cli(t, "pay", asset, meteredURL)
	if err == nil || !strings.Contains(stderr, "412 Precondition Failed; upto payment of at most "+meteredMax) ||
		!strings.Contains(stderr, "the wallet has not approved Permit2 to move this token (permit2_allowance_required); nothing was charged; run llm4agents wallet approve-permit2") {
		t.Errorf("pay without the approval: %v\n%s", err, stderr)
	}
	if n := len(fac.rec.since(calls, "/settle")); n != 0 {
		t.Errorf("%d /settle calls without the approval, want none", n)
	}
	c.checkBalanceRose(t, payTo, before, "0")

	stdout, stderr, err = cli(t, "wallet", "approve-permit2", "--rpc", c.anvil.URL, "--asset", c.token.Hex(), "--amount", "0.50", "--yes")
	if err != nil || !strings.Contains(stdout, "approved in transaction 0x") {
		t.Fatalf("wallet approve-permit2: %v\nstdout:\n%s\nstderr:\n%s", err, stdout, stderr)
	}
	if stdout, _, err = cli(t, "pay", "--dry-run", asset, "--rpc", c.anvil.URL, meteredURL); err != nil || !strings.Contains(stdout, "which covers the maximum") {
		t.Errorf("dry run after the approval: %v\n%s", err, stdout)
	}

	before = c.balance(t, payTo)
	stdout, stderr, err = cli(t, "pay", asset, meteredURL)
	if err != nil || stdout != `{"ok":true,"scheme":"upto"}` {
		t.Fatalf("pay: %v, stdout %q\nstderr:\n%s", err, stdout, stderr)
	}
	want := "200 OK; upto payment of at most " + meteredMax + " atomic units = 0.05 to " + payTo.Hex() + " on " + network +
		": charged " + meteredCharge + " atomic units = 0.012345, settled in transaction 0x"
	if !strings.Contains(stderr, want) || !strings.Contains(stderr, "; spent 0.012345 of 1.00") {
		t.Errorf("stderr lacks %q and the spend:\n%s", want, stderr)
	}
	c.checkBalanceRose(t, payTo, before, meteredCharge)
}
