package facilitator_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/accounts/abi/bind"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/llm4agents/llm4agents/internal/chain"
	"github.com/llm4agents/llm4agents/internal/facilitator"
	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/internal/testchain"
	"github.com/llm4agents/llm4agents/x402"
	"github.com/llm4agents/llm4agents/x402/evm/exact"
)

// reorgEnv is a simulated chain that seals blocks only when told, so a test
// can fork it below a settlement, and a facilitator with its metrics on a
// registry of their own.
type reorgEnv struct {
	sim   *testchain.Simulated
	store store.Settlements
	fac   *facilitator.Facilitator
	reg   *prometheus.Registry
	logs  *syncBuffer
}

func newReorgEnv(t *testing.T, st store.Settlements) *reorgEnv {
	t.Helper()
	e := &reorgEnv{sim: testchain.NewSimulated(t), store: st}
	e.fac, e.reg, e.logs = e.facilitator(t, time.Now, e.sim.Client)
	return e
}

// facilitator starts a facilitator on e's store whose clock is now and
// which reads e's chain through backend.
func (e *reorgEnv) facilitator(t *testing.T, now func() time.Time, backend facilitator.Backend) (*facilitator.Facilitator, *prometheus.Registry, *syncBuffer) {
	t.Helper()
	logs := new(syncBuffer)
	log := slog.New(slog.NewTextHandler(io.MultiWriter(logs, t.Output()), &slog.HandlerOptions{Level: slog.LevelDebug}))
	sender, err := chain.NewSender(e.sim.Client, e.sim.Keys[signerIdx], e.sim.ChainID,
		chain.SenderConfig{MaxFeePerGas: big.NewInt(1e12), PollInterval: 10 * time.Millisecond}, log)
	if err != nil {
		t.Fatal(err)
	}
	fac, err := facilitator.New(facilitator.Config{
		Network: network, SettleTimeout: 200 * time.Millisecond, Now: now,
		Assets: []facilitator.Asset{{Address: e.sim.Token, Name: "USD Coin", Version: "2"}},
	}, backend, sender, e.store, log)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	if err := fac.RegisterMetrics(reg); err != nil {
		t.Fatal(err)
	}
	return fac, reg, logs
}

func (e *reorgEnv) requirements() x402.PaymentRequirements {
	return (&env{chain: e.sim}).requirements("10000")
}

// settle pays 10000 from dev account i and has it settled in a block of its
// own; it returns the success answer and the hash of the block before it.
func (e *reorgEnv) settle(t *testing.T, i int) (*x402.PaymentPayload, *x402.SettleResponse, common.Hash) {
	t.Helper()
	req := e.requirements()
	p := (&env{chain: e.sim}).pay(t, i, req)
	parent := e.head(t)
	pending, err := e.fac.Settle(t.Context(), p, req)
	if err != nil || pending.ErrorReason != x402.ReasonSettlementPending {
		t.Fatalf("settle before the block = %+v, %v; want settlement_pending", pending, err)
	}
	e.sim.Commit()
	won, err := e.fac.Settle(t.Context(), p, req)
	if err != nil || !won.Success || won.Transaction != pending.Transaction {
		t.Fatalf("settle after the block = %+v, %v; want success with %s", won, err, pending.Transaction)
	}
	return p, won, parent
}

func (e *reorgEnv) head(t *testing.T) common.Hash {
	t.Helper()
	h, err := e.sim.Client.HeaderByNumber(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return h.Hash()
}

// reorg makes a side chain from parent canonical, with the transactions of
// side (sent from the dev accounts, not the facilitator) in its first block.
func (e *reorgEnv) reorg(t *testing.T, parent common.Hash, side func()) {
	t.Helper()
	old := e.head(t)
	if err := e.sim.Backend.Fork(parent); err != nil {
		t.Fatal(err)
	}
	if side != nil {
		side()
	}
	e.sim.Commit()
	h, err := e.sim.Client.HeaderByNumber(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if h.ParentHash != parent {
		t.Fatalf("after the fork the head %s has parent %s, want %s (the old head was %s)", h.Hash(), h.ParentHash, parent, old)
	}
}

// parentOf returns the hash of the block before the one that holds tx.
func (e *reorgEnv) parentOf(t *testing.T, tx string) common.Hash {
	t.Helper()
	r, err := e.sim.Client.TransactionReceipt(t.Context(), common.HexToHash(tx))
	if err != nil {
		t.Fatal(err)
	}
	h, err := e.sim.Client.HeaderByHash(t.Context(), r.BlockHash)
	if err != nil {
		t.Fatal(err)
	}
	return h.ParentHash
}

// spendAll returns a side chain's transactions for reorg: dev account i
// sends away every token it held at block parent, ahead of any payment it
// signed, which then reverts.
func (e *reorgEnv) spendAll(t *testing.T, i int, parent common.Hash) func() {
	t.Helper()
	h, err := e.sim.Client.HeaderByHash(t.Context(), parent)
	if err != nil {
		t.Fatal(err)
	}
	bal, err := e.sim.TokenContract.BalanceOf(&bind.CallOpts{Context: t.Context(), BlockNumber: h.Number}, e.sim.Addr(i))
	if err != nil {
		t.Fatal(err)
	}
	return func() {
		opts := e.sim.Transactor(t, i)
		opts.GasLimit = 200_000 // more than the head's balance: no estimate
		opts.GasTipCap, opts.GasFeeCap = big.NewInt(500e9), big.NewInt(900e9)
		if _, err := e.sim.TokenContract.Transfer(opts, e.sim.Addr(6), bal); err != nil {
			t.Fatal(err)
		}
	}
}

func reconcile(t *testing.T, fac *facilitator.Facilitator) {
	t.Helper()
	if _, err := fac.Reconcile(t.Context()); err != nil {
		t.Fatalf("reconcile: %v", err)
	}
}

// settlementOf returns the record of p, a payment in token.
func settlementOf(t *testing.T, st store.Settlements, token common.Address, p *x402.PaymentPayload) store.Settlement {
	t.Helper()
	rec, err := st.Settlement(t.Context(), tokenKeyOf(t, token, p))
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

func (e *reorgEnv) record(t *testing.T, p *x402.PaymentPayload) store.Settlement {
	t.Helper()
	return settlementOf(t, e.store, e.sim.Token, p)
}

func (e *anvilEnv) record(t *testing.T, p *x402.PaymentPayload) store.Settlement {
	t.Helper()
	return settlementOf(t, e.db, e.token, p)
}

// reorgCounts reads llm4agents_facilitator_reorgs_total by outcome.
func reorgCounts(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	return counters(t, reg, "llm4agents_facilitator_reorgs_total")
}

// counters reads the counter name by outcome.
func counters(t *testing.T, reg *prometheus.Registry, name string) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "outcome" {
					got[l.GetValue()] = m.GetCounter().GetValue()
				}
			}
		}
	}
	return got
}

func wantCounts(t *testing.T, reg *prometheus.Registry, dropped, remined, lost float64) {
	t.Helper()
	want := map[string]float64{"dropped": dropped, "remined": remined, "lost": lost}
	if diff := cmp.Diff(want, reorgCounts(t, reg)); diff != "" {
		t.Errorf("reorgs_total (-want +got):\n%s", diff)
	}
}

// wantReorg checks the reorg mark of rec against was, the record before the
// reorg, of which nothing else may change: not the state, the transaction
// or the success mark (the buyer's answer, D5).
func wantReorg(t *testing.T, rec, was store.Settlement, status store.ReorgStatus, reorgs int64, lostTo string) {
	t.Helper()
	was.Reorg, was.Reorgs, was.LostTo = status, reorgs, lostTo
	if diff := cmp.Diff(was, rec, cmpopts.IgnoreFields(store.Settlement{}, "UpdatedAt")); diff != "" {
		t.Errorf("record (-want +got):\n%s", diff)
	}
}

// sameAnswer checks that settling p again answers as it did once its
// success was reported: already settled, by its own transaction.
func (e *reorgEnv) sameAnswer(t *testing.T, p *x402.PaymentPayload, tx string) {
	t.Helper()
	got, err := e.fac.Settle(t.Context(), p, e.requirements())
	if err != nil {
		t.Fatalf("settle again: %v", err)
	}
	wantSameAnswer(t, got, tx)
}

func wantSameAnswer(t *testing.T, got *x402.SettleResponse, tx string) {
	t.Helper()
	if got.Success || got.ErrorReason != x402.ReasonEVMNonceAlreadyUsed || got.Transaction != tx {
		t.Errorf("settle again = %+v; want nonce_already_used with %s, as before the reorg", got, tx)
	}
}

// TestReorgWindow: a reorg that mines the same transaction again in the
// new chain changes nothing; a settlement older than the window is not
// looked at.
func TestReorgWindow(t *testing.T) {
	e := newReorgEnv(t, openStore(t))
	p, won, parent := e.settle(t, 1)
	settled := e.record(t, p)
	// After the reorg our transaction is mined again at once (the pool takes
	// back what the old chain held), its receipt in another block.
	old, err := e.sim.Client.TransactionReceipt(t.Context(), common.HexToHash(won.Transaction))
	if err != nil {
		t.Fatal(err)
	}
	e.reorg(t, parent, nil)
	again, err := e.sim.Client.TransactionReceipt(t.Context(), common.HexToHash(won.Transaction))
	if err != nil || again.BlockHash == old.BlockHash || again.Status != 1 {
		t.Fatalf("receipt after the reorg = %+v, %v; want one in the new block", again, err)
	}
	reconcile(t, e.fac)
	wantReorg(t, e.record(t, p), settled, store.ReorgNone, 0, "")
	wantCounts(t, e.reg, 0, 0, 0)

	// A clock past the window: nothing is read, even of a lost payment.
	late, lateReg, _ := e.facilitator(t, func() time.Time { return time.Now().Add(facilitator.DefaultReorgWindow + time.Minute) }, e.sim.Client)
	e.reorg(t, e.parentOf(t, won.Transaction), e.spendAll(t, 1, e.parentOf(t, won.Transaction)))
	if r, err := e.sim.Client.TransactionReceipt(t.Context(), common.HexToHash(won.Transaction)); err != nil || r.Status != 0 {
		t.Fatalf("our receipt after the payer spent all = %+v, %v; want it reverted", r, err)
	}
	reconcile(t, late)
	wantReorg(t, e.record(t, p), settled, store.ReorgNone, 0, "")
	wantCounts(t, lateReg, 0, 0, 0)
	// Inside it, the same reorg is found.
	reconcile(t, e.fac)
	wantReorg(t, e.record(t, p), settled, store.ReorgLost, 1, "")
	wantCounts(t, e.reg, 1, 0, 1)
}

// lateReceipts is a node that serves the transactions in its blocks but not
// yet their receipts, as one whose receipt index lags does.
type lateReceipts struct{ facilitator.Backend }

func (lateReceipts) TransactionReceipt(context.Context, common.Hash) (*types.Receipt, error) {
	return nil, ethereum.NotFound
}

// TestReorgLateReceipt: a receipt the node does not serve yet, of a
// transaction it has in a block, is no reorg.
func TestReorgLateReceipt(t *testing.T) {
	e := newReorgEnv(t, openStore(t))
	p, _, _ := e.settle(t, 4)
	settled := e.record(t, p)
	lagging, reg, _ := e.facilitator(t, time.Now, lateReceipts{e.sim.Client})
	reconcile(t, lagging)
	wantReorg(t, e.record(t, p), settled, store.ReorgNone, 0, "")
	wantCounts(t, reg, 0, 0, 0)
}

// TestReorgLostToAnother: in the new chain a third party's transaction
// uses the payer's authorization ahead of ours, which is mined again and
// reverts; the record is marked lost to that transaction and counted once,
// and the buyer keeps the answer given.
func TestReorgLostToAnother(t *testing.T) {
	eachBackend(t, func(t *testing.T, open storeOpener) {
		e := newReorgEnv(t, open(t))
		p, won, parent := e.settle(t, 2)
		settled := e.record(t, p)

		third := e.sim.Transactor(t, 7)
		third.GasLimit = 500_000                                                // the pool's state has the authorization used: no estimate
		third.GasTipCap, third.GasFeeCap = big.NewInt(500e9), big.NewInt(900e9) // ahead of ours
		var theirs string
		e.reorg(t, parent, func() { theirs = submitDirectly(t, e.sim.TokenContract, third, p).Hash().Hex() })
		if r, err := e.sim.Client.TransactionReceipt(t.Context(), common.HexToHash(theirs)); err != nil || r.Status != 1 {
			t.Fatalf("third party's receipt = %+v, %v", r, err)
		}
		if r, err := e.sim.Client.TransactionReceipt(t.Context(), common.HexToHash(won.Transaction)); err != nil || r.Status != 0 {
			t.Fatalf("our receipt after the reorg = %+v, %v; want it reverted", r, err)
		}

		reconcile(t, e.fac)
		wantReorg(t, e.record(t, p), settled, store.ReorgLost, 1, theirs)
		wantCounts(t, e.reg, 1, 0, 1)
		e.sameAnswer(t, p, won.Transaction)
		// The operator is told, and not given the payer's signature or the
		// signed transaction.
		logs := e.logs.String()
		if !strings.Contains(logs, `level=ERROR msg="settlement lost to a reorg`) || !strings.Contains(logs, "lost_to="+theirs) {
			t.Errorf("no error logged for the lost settlement:\n%s", logs)
		}
		pl, err := exact.ParsePayload(p.Payload)
		if err != nil {
			t.Fatal(err)
		}
		for _, secret := range []string{hexutil.Encode(pl.Signature)[2:], settled.RawTx[2:]} {
			if strings.Contains(strings.ToLower(logs), strings.ToLower(secret)) {
				t.Errorf("the log holds %.20s...", secret)
			}
		}
		// Lost is final, and counted once.
		reconcile(t, e.fac)
		wantCounts(t, e.reg, 1, 0, 1)
	})
}

// anvilReorged settles a payment from dev account i in a block of its own,
// then reverts the chain to a snapshot taken before it, which takes the
// block away and leaves the node's pool without the transaction, as a
// reorg to a chain that never saw it would. It returns the payment, the
// buyer's answer and the record as it was settled.
func (e *anvilEnv) anvilReorged(t *testing.T, i int) (*x402.PaymentPayload, *x402.SettleResponse, store.Settlement) {
	t.Helper()
	var snap hexutil.Big
	if err := e.node.RPC.CallContext(t.Context(), &snap, "evm_snapshot"); err != nil {
		t.Fatal(err)
	}
	p := e.pay(t, i)
	wantReason(t, e.settle(t, p), x402.ReasonSettlementPending)
	e.mine(t)
	won := e.settle(t, p)
	if !won.Success {
		t.Fatalf("settle after mining = %+v", won)
	}
	settled := e.record(t, p)
	var reverted bool
	if err := e.node.RPC.CallContext(t.Context(), &reverted, "evm_revert", &snap); err != nil || !reverted {
		t.Fatalf("evm_revert = %v, %v", reverted, err)
	}
	if r, err := e.node.Client.TransactionReceipt(t.Context(), common.HexToHash(won.Transaction)); !errors.Is(err, ethereum.NotFound) {
		t.Fatalf("receipt after the revert = %+v, %v; want none", r, err)
	}
	if n := e.pendingCount(t); n != 0 {
		t.Fatalf("%d of the signer's transactions in the pool after the revert, want none", n)
	}
	return p, won, settled
}

// TestAnvilReorgResent: a reorg drops a settled payment's transaction; the
// reconciler marks it dropped, counts it and sends the same signed bytes
// again; once mined it is marked mined again, the payee is paid once, and
// the buyer's answer never changes.
func TestAnvilReorgResent(t *testing.T) {
	e := newAnvilEnv(t, time.Hour)
	payTo := testchain.DevAddress(payToIdx)
	before := e.balance(t, payTo)
	p, won, settled := e.anvilReorged(t, 1)

	reconcile(t, e.fac)
	wantReorg(t, e.record(t, p), settled, store.ReorgDropped, 1, "")
	wantCounts(t, e.reg, 1, 0, 0)
	if n := e.pendingCount(t); n != 1 {
		t.Fatalf("%d of the signer's transactions in the pool, want the one sent again", n)
	}
	if _, pending, err := e.node.Client.TransactionByHash(t.Context(), common.HexToHash(won.Transaction)); err != nil || !pending {
		t.Fatalf("transaction sent again: pending %v, %v; want the same hash in the pool", pending, err)
	}
	wantSameAnswer(t, e.settle(t, p), won.Transaction)
	reconcile(t, e.fac) // still dropped: counted once
	wantCounts(t, e.reg, 1, 0, 0)

	e.mine(t)
	reconcile(t, e.fac)
	wantReorg(t, e.record(t, p), settled, store.ReorgNone, 1, "")
	wantCounts(t, e.reg, 1, 1, 0)
	wantSameAnswer(t, e.settle(t, p), won.Transaction)
	if got := new(big.Int).Sub(e.balance(t, payTo), before); got.Int64() != 10000 {
		t.Errorf("payTo received %s, want 10000", got)
	}
}

// TestAnvilReorgLost: after the reorg the payment cannot be mined again,
// in three ways; each is marked lost, counted, and nothing is sent again.
func TestAnvilReorgLost(t *testing.T) {
	for _, tc := range []struct {
		name  string
		after func(t *testing.T, e *anvilEnv, p *x402.PaymentPayload, won *x402.SettleResponse) (lostTo string)
		payer int
	}{{
		name: "authorization used by another", payer: 2,
		after: func(t *testing.T, e *anvilEnv, p *x402.PaymentPayload, _ *x402.SettleResponse) string {
			auth, err := bind.NewKeyedTransactorWithChainID(testchain.DevKey(7), e.node.ChainID)
			if err != nil {
				t.Fatal(err)
			}
			return submitDirectly(t, e.tok, auth, p).Hash().Hex()
		},
	}, {
		name: "authorization expired", payer: 3,
		after: func(t *testing.T, e *anvilEnv, _ *x402.PaymentPayload, _ *x402.SettleResponse) string {
			// Past validBefore (now + maxTimeoutSeconds at signing).
			if err := e.node.RPC.CallContext(t.Context(), nil, "evm_increaseTime", hexutil.Uint64(e.requirements().MaxTimeoutSeconds+60)); err != nil {
				t.Fatal(err)
			}
			return ""
		},
	}, {
		name: "nonce taken", payer: 4,
		after: func(t *testing.T, e *anvilEnv, p *x402.PaymentPayload, won *x402.SettleResponse) string {
			// A 0-value transfer of the signer to itself at our nonce.
			ours, _, err := e.node.Client.TransactionByHash(t.Context(), common.HexToHash(won.Transaction))
			if !errors.Is(err, ethereum.NotFound) {
				t.Fatalf("our transaction after the revert: %+v, %v; want none", ours, err)
			}
			raw := e.record(t, p).RawTx
			tx := new(types.Transaction)
			if err := tx.UnmarshalBinary(common.FromHex(raw)); err != nil {
				t.Fatal(err)
			}
			signer := testchain.DevAddress(signerIdx)
			other, err := types.SignNewTx(testchain.DevKey(signerIdx), types.LatestSignerForChainID(e.node.ChainID), &types.DynamicFeeTx{
				ChainID: e.node.ChainID, Nonce: tx.Nonce(), GasTipCap: tx.GasTipCap(), GasFeeCap: tx.GasFeeCap(), Gas: 21_000, To: &signer,
			})
			if err != nil {
				t.Fatal(err)
			}
			if err := e.node.Client.SendTransaction(t.Context(), other); err != nil {
				t.Fatal(err)
			}
			return ""
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			e := newAnvilEnv(t, time.Hour)
			p, won, settled := e.anvilReorged(t, tc.payer)
			lostTo := tc.after(t, e, p, won)
			e.mine(t)

			reconcile(t, e.fac)
			wantReorg(t, e.record(t, p), settled, store.ReorgLost, 1, lostTo)
			wantCounts(t, e.reg, 1, 0, 1)
			if n := e.pendingCount(t); n != 0 {
				t.Errorf("%d of the signer's transactions in the pool, want none: a lost payment is not sent again", n)
			}
			wantSameAnswer(t, e.settle(t, p), won.Transaction)
			reconcile(t, e.fac)
			wantCounts(t, e.reg, 1, 0, 1)
		})
	}
}
