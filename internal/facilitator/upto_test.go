package facilitator_test

import (
	"context"
	"encoding/json"
	"math/big"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"

	"github.com/llm4agents/llm4agents/contracts"
	"github.com/llm4agents/llm4agents/internal/facilitator"
	"github.com/llm4agents/llm4agents/internal/testchain"
	"github.com/llm4agents/llm4agents/x402"
	"github.com/llm4agents/llm4agents/x402/evm/exact"
	"github.com/llm4agents/llm4agents/x402/evm/upto"
)

// newUptoEnv is newEnv with a facilitator that serves upto beside exact.
func newUptoEnv(t *testing.T) *env {
	t.Helper()
	sim := testchain.NewSimulated(t)
	sim.StartAutoCommit(t, 20*time.Millisecond)
	e := &env{chain: sim, path: filepath.Join(t.TempDir(), "fac.db"), schemes: []string{exact.Scheme, upto.Scheme}}
	e.reopen(t)
	return e
}

// uptoRequirements asks for at most max, to be settled through this
// facilitator's signer.
func (e *env) uptoRequirements(max string) x402.PaymentRequirements {
	return x402.PaymentRequirements{
		Scheme: upto.Scheme, Network: network, Amount: max, Asset: e.chain.Token.Hex(),
		PayTo: e.chain.Addr(payToIdx).Hex(), MaxTimeoutSeconds: 300,
		Extra: json.RawMessage(`{"facilitatorAddress":"` + e.sender.Address().Hex() + `"}`),
	}
}

// payUpto signs an upto permit of req as dev account i.
func (e *env) payUpto(t *testing.T, i int, req x402.PaymentRequirements) *x402.PaymentPayload {
	t.Helper()
	pr := &x402.PaymentRequired{X402Version: 2, Resource: &x402.ResourceInfo{URL: "http://127.0.0.1/paid"}, Accepts: []x402.PaymentRequirements{req}}
	p, err := upto.NewPaymentPayload(context.Background(), exact.NewKeySigner(e.chain.Keys[i]), pr, 0, upto.SignOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// charged is req with the actual charge as its amount, as a resource server
// settles an upto payment.
func charged(req x402.PaymentRequirements, amount string) x402.PaymentRequirements {
	req.Amount = amount
	return req
}

func TestUptoSupported(t *testing.T) {
	e := newUptoEnv(t)
	sr, err := e.fac.Supported(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(sr.Kinds) != 2 || sr.Kinds[0].Scheme != exact.Scheme || sr.Kinds[1].Scheme != upto.Scheme {
		t.Fatalf("kinds = %+v, want exact then upto", sr.Kinds)
	}
	extra, err := upto.ParseExtra(sr.Kinds[1].Extra)
	if err != nil || extra.FacilitatorAddress != e.sender.Address() {
		t.Fatalf("upto extra = %s (%v), want facilitatorAddress %s", sr.Kinds[1].Extra, err, e.sender.Address().Hex())
	}

	// Without upto in Config.Schemes, only exact is listed, and an upto
	// payment is refused as an unsupported scheme.
	plain := newEnv(t)
	sr, err = plain.fac.Supported(context.Background())
	if err != nil || len(sr.Kinds) != 1 || sr.Kinds[0].Scheme != exact.Scheme {
		t.Fatalf("default kinds = %+v, %v; want exact alone", sr.Kinds, err)
	}
	vr, err := plain.fac.Verify(context.Background(), &x402.PaymentPayload{}, e.uptoRequirements("100"))
	if err != nil || vr.IsValid || vr.InvalidReason != x402.ReasonUnsupportedScheme {
		t.Fatalf("upto on an exact-only facilitator = %+v, %v", vr, err)
	}
}

// TestUptoSettlesTheCharge: the buyer authorizes a maximum, the facilitator
// moves only the charge, once; a second settle of the same permit, or a
// charge above the maximum, moves nothing.
func TestUptoSettlesTheCharge(t *testing.T) {
	bothOn(t, newUptoEnv, func(t *testing.T, e *env, fac facilitator.API) {
		ctx := context.Background()
		e.chain.ApprovePermit2(t, 1)
		req := e.uptoRequirements("50000")
		p := e.payUpto(t, 1, req)
		payTo := e.chain.Addr(payToIdx)
		before := e.chain.BalanceOf(t, payTo)

		vr, err := fac.Verify(ctx, p, req)
		if err != nil || !vr.IsValid {
			t.Fatalf("verify = %+v, %v", vr, err)
		}
		over, err := fac.Settle(ctx, p, charged(req, "50001"))
		if err != nil || over.Success || over.ErrorReason != x402.ReasonUptoSettlementExceedsAmount {
			t.Fatalf("settle above the maximum = %+v, %v; want %s", over, err, x402.ReasonUptoSettlementExceedsAmount)
		}
		sr, err := fac.Settle(ctx, p, charged(req, "12345"))
		if err != nil || !sr.Success || sr.Amount != "12345" || sr.Transaction == "" {
			t.Fatalf("settle = %+v, %v; want success for 12345", sr, err)
		}
		if got := new(big.Int).Sub(e.chain.BalanceOf(t, payTo), before); got.Int64() != 12345 {
			t.Fatalf("payTo received %s, want exactly the charge 12345", got)
		}
		again, err := fac.Settle(ctx, p, charged(req, "12345"))
		if err != nil || again.Success {
			t.Fatalf("second settle = %+v, %v; want a refusal", again, err)
		}
		if got := new(big.Int).Sub(e.chain.BalanceOf(t, payTo), before); got.Int64() != 12345 {
			t.Fatalf("after a second settle payTo received %s in all, want 12345", got)
		}
		if vr, err := fac.Verify(ctx, p, req); err != nil || vr.IsValid {
			t.Fatalf("verify of a used permit = %+v, %v; want invalid", vr, err)
		}
		// The chain confirms the permit paid, whatever the charge: a
		// resource server resolving a lost answer knows only the maximum.
		tx, paid, err := e.fac.Confirm(ctx, p, req)
		if err != nil || !paid || tx != sr.Transaction {
			t.Fatalf("Confirm = %q, %v, %v; want paid by %s", tx, paid, err, sr.Transaction)
		}
		other := e.payUpto(t, 1, req)
		if tx, paid, err := e.fac.Confirm(ctx, other, req); err != nil || paid {
			t.Fatalf("Confirm of an unused permit = %q, %v, %v; want not paid", tx, paid, err)
		}
	})
}

// TestUptoZeroSendsNothing: a charge of zero succeeds with no transaction,
// and the permit stays unused on chain.
func TestUptoZeroSendsNothing(t *testing.T) {
	e := newUptoEnv(t)
	ctx := context.Background()
	e.chain.ApprovePermit2(t, 1)
	req := e.uptoRequirements("50000")
	p := e.payUpto(t, 1, req)
	payTo := e.chain.Addr(payToIdx)
	before := e.chain.BalanceOf(t, payTo)
	sr, err := e.fac.Settle(ctx, p, charged(req, "0"))
	if err != nil || !sr.Success || sr.Transaction != "" || sr.Amount != "0" {
		t.Fatalf("settle of zero = %+v, %v; want success with no transaction", sr, err)
	}
	if got := e.chain.BalanceOf(t, payTo); got.Cmp(before) != 0 {
		t.Fatalf("payTo balance moved from %s to %s", before, got)
	}
}

// TestUptoRefusals: the checks that need the chain give the official
// reasons, and nothing moves.
func TestUptoRefusals(t *testing.T) {
	e := newUptoEnv(t)
	ctx := context.Background()
	req := e.uptoRequirements("50000")
	payTo := e.chain.Addr(payToIdx)
	before := e.chain.BalanceOf(t, payTo)

	// Dev account 2 never approved Permit2.
	p := e.payUpto(t, 2, req)
	vr, err := e.fac.Verify(ctx, p, req)
	if err != nil || vr.IsValid || vr.InvalidReason != x402.ReasonPermit2AllowanceRequired {
		t.Fatalf("verify without an allowance = %+v, %v; want %s", vr, err, x402.ReasonPermit2AllowanceRequired)
	}
	sr, err := e.fac.Settle(ctx, p, charged(req, "100"))
	if err != nil || sr.Success {
		t.Fatalf("settle without an allowance = %+v, %v; want a refusal", sr, err)
	}

	// Requirements naming another facilitator.
	other := req
	other.Extra = json.RawMessage(`{"facilitatorAddress":"` + common.HexToAddress("0x1234").Hex() + `"}`)
	vr, err = e.fac.Verify(ctx, p, other)
	if err != nil || vr.IsValid || vr.InvalidReason != x402.ReasonUptoFacilitatorMismatch {
		t.Fatalf("verify for another facilitator = %+v, %v; want %s", vr, err, x402.ReasonUptoFacilitatorMismatch)
	}

	// Allowance revoked between verify and settle.
	e.chain.ApprovePermit2(t, 3)
	p3 := e.payUpto(t, 3, req)
	if vr, err := e.fac.Verify(ctx, p3, req); err != nil || !vr.IsValid {
		t.Fatalf("verify = %+v, %v", vr, err)
	}
	tx, err := e.chain.TokenContract.Approve(e.chain.Transactor(t, 3), contracts.Permit2Address, big.NewInt(0))
	if err != nil {
		t.Fatal(err)
	}
	e.chain.Mine(t, tx)
	sr, err = e.fac.Settle(ctx, p3, charged(req, "100"))
	if err != nil || sr.Success {
		t.Fatalf("settle after the allowance was revoked = %+v, %v; want a refusal", sr, err)
	}
	if got := e.chain.BalanceOf(t, payTo); got.Cmp(before) != 0 {
		t.Fatalf("payTo balance moved from %s to %s", before, got)
	}
}

// TestUptoNonceUsedBeforeSettle: a permit whose Permit2 nonce the payer
// invalidated between verify and settle is refused with the official reason,
// nothing is sent from the facilitator's account and no record is left held:
// the settle reads no nonce bitmap of its own, the gas estimation's revert
// is the verdict.
func TestUptoNonceUsedBeforeSettle(t *testing.T) {
	e := newUptoEnv(t)
	ctx := context.Background()
	e.chain.ApprovePermit2(t, 1)
	req := e.uptoRequirements("50000")
	p := e.payUpto(t, 1, req)
	if vr, err := e.fac.Verify(ctx, p, req); err != nil || !vr.IsValid {
		t.Fatalf("verify = %+v, %v", vr, err)
	}
	pl, err := upto.ParsePayload(p.Payload)
	if err != nil {
		t.Fatal(err)
	}
	nonce := pl.Authorization.Nonce
	wordPos := new(big.Int).Rsh(nonce, 8)
	mask := new(big.Int).Lsh(big.NewInt(1), uint(new(big.Int).And(nonce, big.NewInt(255)).Uint64()))
	tx, err := e.chain.Permit2.InvalidateUnorderedNonces(e.chain.Transactor(t, 1), wordPos, mask)
	if err != nil {
		t.Fatal(err)
	}
	e.chain.Mine(t, tx)
	payTo := e.chain.Addr(payToIdx)
	before := e.chain.BalanceOf(t, payTo)
	sent, err := e.chain.Client.NonceAt(ctx, e.sender.Address(), nil)
	if err != nil {
		t.Fatal(err)
	}

	for range 2 { // and again: the refusal holds, nothing was claimed
		sr, err := e.fac.Settle(ctx, p, charged(req, "100"))
		if err != nil || sr.Success || sr.ErrorReason != x402.ReasonPermit2InvalidNonce {
			t.Fatalf("settle of an invalidated permit = %+v, %v; want %s", sr, err, x402.ReasonPermit2InvalidNonce)
		}
	}
	if got, err := e.chain.Client.NonceAt(ctx, e.sender.Address(), nil); err != nil || got != sent {
		t.Errorf("facilitator nonce %d (%v), want %d: a transaction was sent", got, err, sent)
	}
	if got := e.chain.BalanceOf(t, payTo); got.Cmp(before) != 0 {
		t.Errorf("payTo balance moved from %s to %s", before, got)
	}
	key := upto.Key(network, pl.Authorization.From, nonce)
	if rec, err := e.store.Settlement(ctx, key); err == nil {
		t.Errorf("settlement record left behind: %+v", rec)
	}
}

// TestUptoConcurrentSettles: many settles of one permit at once, with
// different charges: exactly one succeeds, and the chain moves its charge
// alone.
func TestUptoConcurrentSettles(t *testing.T) {
	e := newUptoEnv(t)
	ctx := context.Background()
	e.chain.ApprovePermit2(t, 1)
	req := e.uptoRequirements("50000")
	p := e.payUpto(t, 1, req)
	payTo := e.chain.Addr(payToIdx)
	before := e.chain.BalanceOf(t, payTo)

	const n = 8
	results := make([]*x402.SettleResponse, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			sr, err := e.fac.Settle(ctx, p, charged(req, big.NewInt(int64(10000+i)).String()))
			if err != nil {
				t.Errorf("settle %d: %v", i, err)
				return
			}
			results[i] = sr
		})
	}
	wg.Wait()
	var wins []string
	for _, sr := range results {
		if sr != nil && sr.Success {
			wins = append(wins, sr.Amount)
		}
	}
	if len(wins) != 1 {
		t.Fatalf("%d successes (%v), want exactly one", len(wins), wins)
	}
	// A settle that answered pending may still mine: wait for the chain.
	deadline := time.Now().Add(10 * time.Second)
	want, _ := new(big.Int).SetString(wins[0], 10)
	for {
		got := new(big.Int).Sub(e.chain.BalanceOf(t, payTo), before)
		if got.Cmp(want) == 0 {
			break
		}
		if got.Cmp(want) > 0 || time.Now().After(deadline) {
			t.Fatalf("payTo received %s, want the one charge %s", got, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestUptoOnEveryStore: on each store, an upto permit settles its charge
// once, and a restarted facilitator on the same store (a new process, the
// same signer) answers a second settle from the record without sending
// anything.
func TestUptoOnEveryStore(t *testing.T) {
	eachBackend(t, func(t *testing.T, open storeOpener) {
		sim := testchain.NewSimulated(t)
		sim.StartAutoCommit(t, 20*time.Millisecond)
		ctx := context.Background()
		schemes := []string{exact.Scheme, upto.Scheme}
		first := newReplicaOn(t, sim, open(t), signerIdx, replicaOpts{settleTimeout: 5 * time.Second, schemes: schemes})
		e := &env{chain: sim, sender: first.sender}
		e.chain.ApprovePermit2(t, 1)
		req := e.uptoRequirements("50000")
		p := e.payUpto(t, 1, req)
		payTo := sim.Addr(payToIdx)
		before := sim.BalanceOf(t, payTo)

		sr, err := first.fac.Settle(ctx, p, charged(req, "20001"))
		if err != nil || !sr.Success || sr.Amount != "20001" {
			t.Fatalf("settle = %+v, %v", sr, err)
		}
		restarted := newReplicaOn(t, sim, open(t), signerIdx, replicaOpts{settleTimeout: 5 * time.Second, schemes: schemes})
		nonce := pendingNonce(t, sim, restarted.sender.Address())
		again, err := restarted.fac.Settle(ctx, p, charged(req, "20001"))
		if err != nil || again.Success || again.Transaction != sr.Transaction {
			t.Fatalf("second settle after a restart = %+v, %v; want a refusal naming %s", again, err, sr.Transaction)
		}
		if got := pendingNonce(t, sim, restarted.sender.Address()); got != nonce {
			t.Fatalf("the restarted facilitator sent a transaction (nonce %d -> %d)", nonce, got)
		}
		if got := new(big.Int).Sub(sim.BalanceOf(t, payTo), before); got.Int64() != 20001 {
			t.Fatalf("payTo received %s, want 20001 once", got)
		}
	})
}
