package e2e

import (
	"context"
	"encoding/json"
	"math/big"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/accounts/abi"
	"github.com/ethereum/go-ethereum/accounts/abi/bind"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"

	"github.com/llm4agents/llm4agents/contracts"
	"github.com/llm4agents/llm4agents/internal/crashpoint"
	"github.com/llm4agents/llm4agents/internal/proctest"
	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/internal/testchain"
	"github.com/llm4agents/llm4agents/internal/upstream/upstreamtest"
	"github.com/llm4agents/llm4agents/x402"
	"github.com/llm4agents/llm4agents/x402/evm/exact"
	"github.com/llm4agents/llm4agents/x402/evm/upto"
)

// uptoCrashCases are the crash points past which an upto payment's charge
// is already chosen: the settlement is broadcast, mined, or recorded. The
// restarted replica must settle that permit once, for that charge, and the
// buyer's retry get the staged answer.
var uptoCrashCases = []crashpoint.Point{crashpoint.AfterBroadcast, crashpoint.AfterRecord}

// TestUptoCrashPoints is TestCrashPoints for upto, with the built binary
// serving network.schemes [exact, upto] from its YAML: a replica killed past
// the broadcast of an upto settlement, restarted on the same store, answers
// the buyer's retry of the same permit with the staged answer; the chain
// moved the charge the answer names, once, below the maximum; the
// facilitator's record is settled with that transaction and that charge.
func TestUptoCrashPoints(t *testing.T) {
	skipShort(t)
	bin := proctest.BuildBinary(t)
	concurrently(t, len(storeVariants), func(i int) string { return storeVariants[i].name }, func(t *testing.T, i int) {
		v := storeVariants[i]
		c := startChain(t)
		c.approvePermit2(t, payerIdx)
		concurrently(t, len(uptoCrashCases), func(i int) string { return string(uptoCrashCases[i]) }, func(t *testing.T, i int) {
			crashUpto(t, bin, c, v, i, uptoCrashCases[i])
		})
	})
}

func crashUpto(t *testing.T, bin string, c *chainEnv, v storeVariant, signer int, point crashpoint.Point) {
	up := upstreamtest.NewServer(t, upstreamtest.Config{})
	dsn := v.fresh(t)
	cfg := uptoReplicaConfig(c, dsn, up.URL())
	hc := newHTTPClient(t)
	payTo := testchain.DevAddress(payToIdx)

	crashing := proctest.Start(t, bin, proctest.Options{
		Name: "upto replica armed at " + string(point), ConfigYAML: cfg,
		Env: []string{signerEnv(signer), crashpoint.EnvVar + "=" + string(point)},
	})
	pay, maxAmount := signUpto(t, hc, crashing.URL)
	if a := post(t.Context(), hc, crashing.URL, chatBody, pay.header); a.err == nil {
		t.Errorf("the crashing replica answered %s before dying", a.outcome())
	}
	crashed := time.Now()
	select {
	case <-crashing.Exited:
	case <-time.After(callTimeout):
		t.Fatalf("the replica armed at %s still runs %s after the request", point, callTimeout)
	}
	if code := crashing.Wait(); code != crashpoint.ExitCode {
		t.Fatalf("the replica armed at %s exited with %d, want %d", point, code, crashpoint.ExitCode)
	}

	restarted := proctest.Start(t, bin, proctest.Options{Name: "restarted upto replica", ConfigYAML: cfg, Env: []string{signerEnv(signer), crashpoint.EnvVar + "="}})
	final, _ := retryUntilFinal(t, hc, restarted.URL, chatBody, pay.header, crashed.Add(claimLease+callTimeout))
	if final.status != http.StatusOK || final.replay == "" || !hasCompletion(final.body) {
		t.Fatalf("the buyer's final answer is %s (%.300s), want the staged answer replayed", final.outcome(), final.body)
	}
	var comp struct {
		X struct {
			Charged     string `json:"charged"`
			Maximum     string `json:"maximum"`
			Transaction string `json:"transaction"`
		} `json:"x_llm4agents"`
	}
	if err := json.Unmarshal(final.body, &comp); err != nil {
		t.Fatal(err)
	}
	charged, ok := new(big.Int).SetString(comp.X.Charged, 10)
	if !ok || charged.Sign() <= 0 || charged.Cmp(maxAmount) >= 0 || comp.X.Maximum != maxAmount.String() {
		t.Fatalf("x_llm4agents %+v, want a charge below the maximum %s", comp.X, maxAmount)
	}
	// The other cases pay the same payTo at the same time: this permit's
	// own transfer is read from the chain (a Permit2 nonce pays once).
	ctx, cancel := context.WithTimeout(t.Context(), chainTimeout)
	defer cancel()
	use, err := upto.FindUse(ctx, c.anvil.Client, c.token, pay.from, payTo, pay.nonce.Big(), 0)
	if err != nil || use == nil || use.TxHash.Hex() != comp.X.Transaction || use.Amount.Cmp(charged) != 0 {
		t.Errorf("on chain the permit paid %+v (%v); the answer says %s in %s", use, err, charged, comp.X.Transaction)
	}
	if n := up.Calls(); n != 1 {
		t.Errorf("the upstream was called %d times, want once", n)
	}
	if final.settled == nil || !final.settled.Success || final.settled.Transaction != comp.X.Transaction {
		t.Errorf("PAYMENT-RESPONSE %+v does not name the settlement %s", final.settled, comp.X.Transaction)
	}

	// The record agrees, once the reconciler had its chance.
	rec := openRecords(t, v, dsn)
	deadline := crashed.Add(settlementLease + 10*reconcileInterval + 15*time.Second)
	for {
		s, err := readSettlement(t.Context(), rec, pay.key)
		if err == nil && s.State == store.StateSettled {
			if !strings.EqualFold(s.TxHash, comp.X.Transaction) || s.Amount != charged.String() {
				t.Errorf("settlement record %s for %s, want %s for %s", s.TxHash, s.Amount, comp.X.Transaction, charged)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("settlement record %+v (%v) not settled by the deadline", s, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// uptoReplicaConfig is replicaConfig offering upto beside exact, with no
// minimum charge, so that a charge below the one-cent quote shows.
func uptoReplicaConfig(c *chainEnv, dsn, upstreamURL string) string {
	cfg := replicaConfig(c, dsn, upstreamURL)
	payTo := "  pay_to: " + testchain.DevAddress(payToIdx).Hex() + "\n"
	return strings.Replace(cfg, payTo, payTo+"  schemes: [exact, upto]\n  upto: { min_charge: \"0\" }\n", 1)
}

// approvePermit2 sends dev account i's one-time approval of Permit2.
func (c *chainEnv) approvePermit2(t *testing.T, i int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), chainTimeout)
	defer cancel()
	auth, err := bind.NewKeyedTransactorWithChainID(testchain.DevKey(i), c.anvil.ChainID)
	if err != nil {
		t.Fatal(err)
	}
	auth.Context = ctx
	tx, err := c.tok.Approve(auth, contracts.Permit2Address, abi.MaxUint256)
	if err != nil {
		t.Fatal(err)
	}
	waitMined(ctx, t, c.anvil, tx)
}

// signUpto asks gatewayURL for the price of chatBody and signs its upto
// offer as the buyer; it returns the payment and the maximum.
func signUpto(t *testing.T, hc *http.Client, gatewayURL string) (payment, *big.Int) {
	t.Helper()
	a := post(t.Context(), hc, gatewayURL, chatBody, "")
	if a.err != nil || a.status != http.StatusPaymentRequired || a.required == nil {
		t.Fatalf("unpaid request: status %d, err %v, body %.300s; want a 402", a.status, a.err, a.body)
	}
	i := -1
	for j, r := range a.required.Accepts {
		if r.Scheme == upto.Scheme {
			i = j
		}
	}
	if i < 0 {
		t.Fatalf("the 402 offers no upto: %+v", a.required.Accepts)
	}
	maxAmount, err := exact.ParseUint256(a.required.Accepts[i].Amount)
	if err != nil {
		t.Fatal(err)
	}
	p, err := upto.NewPaymentPayload(t.Context(), exact.NewKeySigner(testchain.DevKey(payerIdx)), a.required, i, upto.SignOptions{})
	if err != nil {
		t.Fatalf("sign: %v", err)
	}
	h, err := x402.EncodeHeader(p)
	if err != nil {
		t.Fatal(err)
	}
	pl, err := upto.ParsePayload(p.Payload)
	if err != nil {
		t.Fatal(err)
	}
	from := crypto.PubkeyToAddress(testchain.DevKey(payerIdx).PublicKey)
	return payment{header: h, from: from, nonce: common.BigToHash(pl.Authorization.Nonce), key: upto.Key(network, from, pl.Authorization.Nonce)}, maxAmount
}
