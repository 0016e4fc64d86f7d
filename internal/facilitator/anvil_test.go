package facilitator_test

import (
	"context"
	"encoding/json"
	"math/big"
	"path/filepath"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/accounts/abi/bind"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/llm4agents/llm4agents/contracts"
	"github.com/llm4agents/llm4agents/internal/chain"
	"github.com/llm4agents/llm4agents/internal/facilitator"
	"github.com/llm4agents/llm4agents/internal/store/sqlite"
	"github.com/llm4agents/llm4agents/internal/testchain"
	"github.com/llm4agents/llm4agents/x402"
	"github.com/llm4agents/llm4agents/x402/evm/exact"
)

// anvilEnv is a real anvil node with our token deployed and a facilitator whose
// settle timeout is short, so "pending" is easy to reach with automine off.
type anvilEnv struct {
	node         *testchain.Anvil
	token        common.Address
	tok          *contracts.EIP3009Token
	path         string
	fac          *facilitator.Facilitator
	db           *sqlite.DB
	reg          *prometheus.Registry // fac's metrics
	replaceAfter time.Duration
}

func newAnvilEnv(t *testing.T, replaceAfter time.Duration) *anvilEnv {
	t.Helper()
	node := testchain.StartAnvil(t)
	ctx := t.Context()
	auth, err := bind.NewKeyedTransactorWithChainID(testchain.DevKey(0), node.ChainID)
	if err != nil {
		t.Fatal(err)
	}
	addr, tx, tok, err := contracts.DeployEIP3009Token(auth, node.Client, "USD Coin", "2", 6)
	if err != nil {
		t.Fatal(err)
	}
	waitMined(t, node, tx)
	for i := 1; i <= 4; i++ {
		tx, err := tok.Mint(auth, testchain.DevAddress(i), big.NewInt(1_000_000_000))
		if err != nil {
			t.Fatal(err)
		}
		waitMined(t, node, tx)
	}
	if err := node.SetAutomine(ctx, false); err != nil {
		t.Fatal(err)
	}
	e := &anvilEnv{node: node, token: addr, tok: tok, path: filepath.Join(t.TempDir(), "fac.db"), replaceAfter: replaceAfter}
	e.restart(t)
	return e
}

func waitMined(t *testing.T, node *testchain.Anvil, tx *types.Transaction) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	r, err := bind.WaitMined(ctx, node.Client, tx)
	if err != nil || r.Status != types.ReceiptStatusSuccessful {
		t.Fatalf("mine %s: %v %+v", tx.Hash().Hex(), err, r)
	}
}

// restart builds a new facilitator process on the same store file and node.
func (e *anvilEnv) restart(t *testing.T) {
	t.Helper()
	db, err := sqlite.Open(t.Context(), e.path, discard())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := db.Close(); err != nil {
			t.Error(err)
		}
	})
	sender, err := chain.NewSender(e.node.Client, testchain.DevKey(signerIdx), e.node.ChainID, chain.SenderConfig{
		MaxFeePerGas: big.NewInt(1e12), PollInterval: 20 * time.Millisecond, ReplaceAfter: e.replaceAfter,
	}, discard())
	if err != nil {
		t.Fatal(err)
	}
	// With automine off a settle waits its whole timeout for a receipt
	// that does not come, and answers settlement_pending. The timeout must
	// still cover estimating and sending the transaction on a loaded CI
	// machine: 300 ms did not (estimate gas timed out under the full suite).
	fac, err := facilitator.New(facilitator.Config{
		Network: network, SettleTimeout: 1500 * time.Millisecond,
		Assets: []facilitator.Asset{{Address: e.token, Name: "USD Coin", Version: "2"}},
	}, e.node.Client, sender, db, discard())
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	if err := fac.RegisterMetrics(reg); err != nil {
		t.Fatal(err)
	}
	e.fac, e.db, e.reg = fac, db, reg
}

func (e *anvilEnv) requirements() x402.PaymentRequirements {
	return x402.PaymentRequirements{
		Scheme: "exact", Network: network, Amount: "10000", Asset: e.token.Hex(),
		PayTo: testchain.DevAddress(payToIdx).Hex(), MaxTimeoutSeconds: 300,
		Extra: json.RawMessage(`{"name":"USD Coin","version":"2"}`),
	}
}

func (e *anvilEnv) pay(t *testing.T, i int) *x402.PaymentPayload {
	t.Helper()
	pr := &x402.PaymentRequired{X402Version: 2, Resource: &x402.ResourceInfo{URL: "http://127.0.0.1/paid"}, Accepts: []x402.PaymentRequirements{e.requirements()}}
	p, err := exact.NewPaymentPayload(t.Context(), exact.NewKeySigner(testchain.DevKey(i)), pr, 0, exact.SignOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func (e *anvilEnv) balance(t *testing.T, a common.Address) *big.Int {
	t.Helper()
	b, err := e.tok.BalanceOf(&bind.CallOpts{Context: t.Context()}, a)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func (e *anvilEnv) mine(t *testing.T) {
	t.Helper()
	if err := e.node.Mine(t.Context(), 1); err != nil {
		t.Fatal(err)
	}
}

func (e *anvilEnv) settle(t *testing.T, p *x402.PaymentPayload) *x402.SettleResponse {
	t.Helper()
	r, err := e.fac.Settle(t.Context(), p, e.requirements())
	if err != nil {
		t.Fatalf("settle: %v", err)
	}
	return r
}

// pendingCount is how many of the signer's transactions wait in the pool.
func (e *anvilEnv) pendingCount(t *testing.T) uint64 {
	t.Helper()
	addr := testchain.DevAddress(signerIdx)
	pending, err := e.node.Client.PendingNonceAt(t.Context(), addr)
	if err != nil {
		t.Fatal(err)
	}
	mined, err := e.node.Client.NonceAt(t.Context(), addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	return pending - mined
}

func wantReason(t *testing.T, r *x402.SettleResponse, reason x402.Reason) {
	t.Helper()
	if r.Success || r.ErrorReason != reason {
		t.Fatalf("settle = %+v, want %s", r, reason)
	}
	if r.Network != network {
		t.Errorf("network = %q", r.Network)
	}
}

// TestAnvilPendingThenSettled: no block within the settle timeout gives
// settlement_pending with the hash; asking again neither re-broadcasts nor
// succeeds; once mined, exactly one later call gets success:true (D3, D5).
func TestAnvilPendingThenSettled(t *testing.T) {
	e := newAnvilEnv(t, time.Hour)
	p := e.pay(t, 1)
	before := e.balance(t, testchain.DevAddress(payToIdx))

	first := e.settle(t, p)
	wantReason(t, first, x402.ReasonSettlementPending)
	if first.Transaction == "" {
		t.Fatal("pending answer without a transaction hash")
	}
	second := e.settle(t, p)
	wantReason(t, second, x402.ReasonSettlementPending)
	if second.Transaction != first.Transaction {
		t.Errorf("second pending tx %s, first %s", second.Transaction, first.Transaction)
	}
	if n := e.pendingCount(t); n != 1 {
		t.Errorf("%d transactions in the pool, want 1: the authorization was broadcast again", n)
	}

	e.mine(t)
	won := e.settle(t, p)
	if !won.Success || won.Transaction != first.Transaction {
		t.Fatalf("settle after mining = %+v, want success with %s", won, first.Transaction)
	}
	wantReason(t, e.settle(t, p), x402.ReasonEVMNonceAlreadyUsed)
	if got := new(big.Int).Sub(e.balance(t, testchain.DevAddress(payToIdx)), before); got.Int64() != 10000 {
		t.Errorf("payTo received %s, want 10000", got)
	}
}

// TestAnvilPendingAcrossRestart: the process that broadcast is gone; a new one
// on the same store resolves the settlement from the chain, once.
func TestAnvilPendingAcrossRestart(t *testing.T) {
	e := newAnvilEnv(t, time.Hour)
	p := e.pay(t, 2)
	first := e.settle(t, p)
	wantReason(t, first, x402.ReasonSettlementPending)

	e.restart(t)
	wantReason(t, e.settle(t, p), x402.ReasonSettlementPending)
	e.mine(t)
	won := e.settle(t, p)
	if !won.Success || won.Transaction != first.Transaction {
		t.Fatalf("settle after restart and mining = %+v", won)
	}
	wantReason(t, e.settle(t, p), x402.ReasonEVMNonceAlreadyUsed)
}

// TestAnvilDroppedIsRebroadcast: the node drops our transaction; the next
// settle call re-broadcasts the same transaction (same nonce, same
// authorization) and it then settles, once.
func TestAnvilDroppedIsRebroadcast(t *testing.T) {
	e := newAnvilEnv(t, 50*time.Millisecond)
	p := e.pay(t, 3)
	first := e.settle(t, p)
	wantReason(t, first, x402.ReasonSettlementPending)
	if err := e.node.DropTransaction(t.Context(), common.HexToHash(first.Transaction)); err != nil {
		t.Fatal(err)
	}
	if n := e.pendingCount(t); n != 0 {
		t.Fatalf("%d pending after drop", n)
	}
	time.Sleep(100 * time.Millisecond) // past ReplaceAfter
	again := e.settle(t, p)
	wantReason(t, again, x402.ReasonSettlementPending)
	if n := e.pendingCount(t); n != 1 {
		t.Fatalf("%d pending after the re-broadcast, want 1", n)
	}
	e.mine(t)
	won := e.settle(t, p)
	if !won.Success {
		t.Fatalf("settle after mining = %+v", won)
	}
	wantReason(t, e.settle(t, p), x402.ReasonEVMNonceAlreadyUsed)
}

// TestAnvilStuckIsReplaced: the base fee jumps above our fee cap's first
// guess; the next settle replaces the transaction with higher fees; exactly one
// version mines and exactly one caller is told success.
func TestAnvilStuckIsReplaced(t *testing.T) {
	e := newAnvilEnv(t, 50*time.Millisecond)
	p := e.pay(t, 4)
	before := e.balance(t, testchain.DevAddress(payToIdx))
	first := e.settle(t, p)
	wantReason(t, first, x402.ReasonSettlementPending)
	tx1, _, err := e.node.Client.TransactionByHash(t.Context(), common.HexToHash(first.Transaction))
	if err != nil {
		t.Fatal(err)
	}
	// Price the pending transaction out of the next block.
	if err := e.node.SetNextBaseFee(t.Context(), new(big.Int).Add(tx1.GasFeeCap(), big.NewInt(1))); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	var last *x402.SettleResponse
	for range 10 {
		last = e.settle(t, p)
		if last.Transaction != first.Transaction {
			break
		}
		time.Sleep(60 * time.Millisecond)
	}
	wantReason(t, last, x402.ReasonSettlementPending)
	if last.Transaction == first.Transaction {
		t.Fatal("stuck transaction was never replaced")
	}
	tx2, _, err := e.node.Client.TransactionByHash(t.Context(), common.HexToHash(last.Transaction))
	if err != nil {
		t.Fatal(err)
	}
	if tx2.Nonce() != tx1.Nonce() || tx2.GasFeeCap().Cmp(tx1.GasFeeCap()) <= 0 {
		t.Errorf("replacement nonce %d fee cap %s; original nonce %d fee cap %s", tx2.Nonce(), tx2.GasFeeCap(), tx1.Nonce(), tx1.GasFeeCap())
	}
	for range 3 {
		e.mine(t)
	}
	won := e.settle(t, p)
	if !won.Success || won.Transaction != last.Transaction {
		t.Fatalf("settle after mining = %+v, want success with %s", won, last.Transaction)
	}
	wantReason(t, e.settle(t, p), x402.ReasonEVMNonceAlreadyUsed)
	if got := new(big.Int).Sub(e.balance(t, testchain.DevAddress(payToIdx)), before); got.Int64() != 10000 {
		t.Errorf("payTo received %s, want 10000", got)
	}
}

// TestAnvilThirdPartyFirst: someone else submits the payer's authorization in
// the same block as ours, ahead of it. Ours reverts; we report the
// authorization as used, with their transaction, and never success.
func TestAnvilThirdPartyFirst(t *testing.T) {
	e := newAnvilEnv(t, time.Hour)
	p := e.pay(t, 1)
	auth, err := bind.NewKeyedTransactorWithChainID(testchain.DevKey(7), e.node.ChainID)
	if err != nil {
		t.Fatal(err)
	}
	auth.GasTipCap = big.NewInt(500e9) // ahead of ours in the block
	auth.GasFeeCap = big.NewInt(900e9)
	auth.GasLimit = 200_000
	theirs := submitDirectly(t, e.tok, auth, p)
	// Verify passes (nothing is mined yet). Our broadcast either joins theirs
	// in the pool or is refused at gas estimation against the pending state.
	if ours := e.settle(t, p); ours.ErrorReason != x402.ReasonSettlementPending {
		wantReason(t, ours, x402.ReasonEVMNonceAlreadyUsed)
	}
	e.mine(t)
	got := e.settle(t, p)
	wantReason(t, got, x402.ReasonEVMNonceAlreadyUsed)
	if got.Transaction != theirs.Hash().Hex() {
		t.Errorf("reported tx %s, want the third party's %s", got.Transaction, theirs.Hash().Hex())
	}
	wantReason(t, e.settle(t, p), x402.ReasonEVMNonceAlreadyUsed)
}

// TestAnvilNodeDown: with the node gone, settle reaches no verdict, broadcasts
// nothing, and answers within bounded time.
func TestAnvilNodeDown(t *testing.T) {
	e := newAnvilEnv(t, time.Hour)
	p := e.pay(t, 2)
	if err := e.node.Close(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	start := time.Now()
	r, err := e.fac.Settle(ctx, p, e.requirements())
	if err == nil {
		t.Fatalf("settle with the node down = %+v, want an error", r)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("settle took %s with the node down", d)
	}
	v, err := e.fac.Verify(ctx, p, e.requirements())
	if err == nil {
		t.Errorf("verify with the node down = %+v, want an error", v)
	}
}
