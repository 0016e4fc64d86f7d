package facilitator

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/big"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/x402/evm/exact"
)

// The reorg check (D17). A settlement is recorded settled once its
// receipt shows the transfer, and its buyer is answered from that record,
// once (D5). A reorg can take the transaction off the chain afterwards, so
// the reconciler reads the receipt of every settlement younger than
// Config.ReorgWindow again. What it finds goes into the record's reorg mark
// (store.Settlements.MarkReorg) and the metric, never into its state, hash
// or success mark: the buyer's answer stands, and the gap between it and
// the chain is the operator's to see.
//
// A transaction gone from the chain is sent again, the very bytes the
// record holds (they can be mined at most once, and nothing new is signed),
// as long as it can still be mined: the authorization unused, its
// validBefore after the head block's time, and the signer's nonce not used
// by another transaction. Mined again and paying, the mark is cleared; used
// by another transaction, or unable ever to be mined, the record is lost.

// Reorg outcomes, the values of the outcome label of reorgsTotal.
const (
	reorgDropped = "dropped" // a reorg took a settlement's transaction off the chain
	reorgRemined = "remined" // the same transaction is on the chain again, paying
	reorgLost    = "lost"    // it never will be: the payment is the operator's loss
)

// metrics are the facilitator's Prometheus metrics. They exist whether or
// not anyone registers them (RegisterMetrics), so the code counts
// unconditionally.
type metrics struct {
	reorgs *prometheus.CounterVec
	// reconciled counts the reconciler's rounds by outcome.
	reconciled *prometheus.CounterVec
}

func newMetrics() metrics {
	m := metrics{reorgs: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "llm4agents_facilitator_reorgs_total",
		Help: "What the reconciler found of settled payments after a reorg, by outcome: dropped (the transaction left the chain; " +
			"its bytes are sent again while they can be mined), remined (the same transaction paid again), lost (it never will: " +
			"the authorization was used by another transaction, or expired, or the transaction reverted; the buyer was answered " +
			"and keeps the answer, and the amount is the operator's loss). Each change is counted once across replicas.",
	}, []string{"outcome"}),
		reconciled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llm4agents_facilitator_reconciled_total",
			Help: "The reconciler's work on settlements left unresolved (a crash, a lost answer, a transaction not yet mined), by outcome: " +
				"resolved (records it settled or failed from the chain, counted per record), failed_rounds (rounds with an error: see the log).",
		}, []string{"outcome"}),
	}
	for _, o := range []string{reorgDropped, reorgRemined, reorgLost} {
		m.reorgs.WithLabelValues(o) // present at 0 before the first reorg
	}
	m.reconciled.WithLabelValues("resolved")
	m.reconciled.WithLabelValues("failed_rounds")
	return m
}

// ShareMetrics makes f count into other's counters instead of its own, for
// a process that settles on several chains and exports one set of them.
// Call it before f's reconciler starts.
func (f *Facilitator) ShareMetrics(other *Facilitator) { f.metrics = other.metrics }

// RegisterMetrics registers the facilitator's metrics with reg.
func (f *Facilitator) RegisterMetrics(reg prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{f.metrics.reorgs, f.metrics.reconciled} {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("facilitator metrics: %w", err)
		}
	}
	return nil
}

// checkReorgs re-reads the settlements younger than the reorg window and
// marks what a reorg did to them. It returns how many records it changed.
func (f *Facilitator) checkReorgs(ctx context.Context) (int, error) {
	recs, err := f.store.RecentSettlements(ctx, f.cfg.Network, f.cfg.Now().Add(-f.cfg.ReorgWindow), store.MaxRecentPage)
	if err != nil {
		return 0, fmt.Errorf("reorg check: %w", err)
	}
	if len(recs) == store.MaxRecentPage {
		f.log.Warn("more settlements in the reorg window than one pass reads; the oldest are not checked",
			"window", f.cfg.ReorgWindow, "checked", len(recs))
	}
	changed := 0
	var errs []error
	for _, rec := range recs {
		if err := f.ownNetwork(rec); err != nil {
			errs = append(errs, err)
			continue
		}
		if rec.TxHash == "" {
			continue
		}
		n, err := f.checkReorg(ctx, rec)
		changed += n
		if err != nil {
			errs = append(errs, fmt.Errorf("reorg check of settlement %s: %w", rec.Key, err))
		}
	}
	return changed, errors.Join(errs...)
}

// checkReorg looks for the transaction of one settled record on the chain.
func (f *Facilitator) checkReorg(ctx context.Context, rec store.Settlement) (int, error) {
	pm, err := recordToPayment(rec)
	if err != nil {
		return 0, err
	}
	receipt, err := f.backend.TransactionReceipt(ctx, common.HexToHash(rec.TxHash))
	switch {
	case err == nil && receipt.Status == types.ReceiptStatusSuccessful && pm.paidBy(receipt.Logs):
		if rec.Reorg == store.ReorgDropped {
			return f.markReorg(ctx, rec, store.ReorgNone, "", "")
		}
		return 0, nil
	case err == nil:
		// Mined again after a reorg, and it reverted (or, which the same
		// bytes cannot do, paid nothing): it never pays now.
		lostTo, err := f.usedBy(ctx, pm, rec)
		if err != nil {
			return 0, err
		}
		return f.lose(ctx, rec, lostTo, "its transaction was mined again and did not pay")
	case !errors.Is(err, ethereum.NotFound):
		return 0, fmt.Errorf("read receipt of %s: %w", rec.TxHash, err)
	}
	// A node can serve a transaction in a block before its receipt (an
	// index that lags, a load balancer): that is no reorg.
	if _, isPending, err := f.backend.TransactionByHash(ctx, common.HexToHash(rec.TxHash)); err == nil && !isPending {
		return 0, nil
	}
	n, err := f.markReorg(ctx, rec, store.ReorgDropped, "", "")
	if err != nil {
		return n, err
	}
	rec.Reorg = store.ReorgDropped
	m, err := f.dropped(ctx, pm, rec)
	return n + m, err
}

// dropped decides the fate of a settled record whose transaction has no
// receipt: sent again while it can still be mined, lost once it cannot.
func (f *Facilitator) dropped(ctx context.Context, pm payment, rec store.Settlement) (int, error) {
	used, err := pm.used(ctx, f.backend)
	if err != nil {
		return 0, err
	}
	if used {
		ev, receipt, err := f.findUse(ctx, pm)
		if err != nil || ev == nil || ev.TxHash == common.HexToHash(rec.TxHash) {
			return 0, err // logs or our receipt lag behind the state: the next pass sees
		}
		if !ev.Canceled {
			ours, err := f.ours(ctx, ev.TxHash, rec)
			if err != nil {
				return 0, err
			}
			if ours && receipt != nil && receipt.Status == types.ReceiptStatusSuccessful && pm.paidBy(receipt.Logs) {
				// Another version of our transaction (one a fee bump replaced)
				// paid. The record names the one that left the chain and
				// keeps it, so it stays marked dropped; the payment arrived.
				f.log.Warn("settlement paid after a reorg by another version of its transaction", "key", rec.Key, "tx", rec.TxHash, "paid_by", ev.TxHash.Hex())
				return 0, nil
			}
		}
		return f.lose(ctx, rec, ev.TxHash.Hex(), "its authorization was used by another transaction")
	}
	tx, from, ok := f.recordedTx(rec)
	if !ok {
		f.log.Error("settlement dropped by a reorg has no recorded transaction to send again", "key", rec.Key, "tx", rec.TxHash)
		return 0, nil
	}
	validBefore, ok := pm.expiry(tx)
	if !ok {
		f.log.Error("settlement's recorded transaction does not transfer its authorization; not sent again", "key", rec.Key, "tx", rec.TxHash)
		return 0, nil
	}
	head, err := f.backend.HeaderByNumber(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("read head block: %w", err)
	}
	// The token takes the authorization only in a block whose time is before
	// validBefore, and no later block is older than the head.
	if new(big.Int).SetUint64(head.Time).Cmp(validBefore) >= 0 {
		return f.lose(ctx, rec, "", "its authorization expired before the transaction was mined again")
	}
	next, err := f.backend.NonceAt(ctx, from, nil)
	if err != nil {
		return 0, fmt.Errorf("nonce of %s: %w", from.Hex(), err)
	}
	if next > tx.Nonce() {
		// Another transaction of the signer took the nonce. Read after the
		// nonce: had ours been mined, the authorization would show used.
		used, err := pm.used(ctx, f.backend)
		if err != nil || used {
			return 0, err // the next pass finds who used it
		}
		return f.lose(ctx, rec, "", fmt.Sprintf("nonce %d of its transaction was used by another", tx.Nonce()))
	}
	f.resend(ctx, rec, tx)
	return 0, nil
}

// usedBy returns the transaction other than rec's that used the
// authorization of pm, or "" when none did.
func (f *Facilitator) usedBy(ctx context.Context, pm payment, rec store.Settlement) (string, error) {
	ev, _, err := f.findUse(ctx, pm)
	if err != nil || ev == nil || ev.TxHash == common.HexToHash(rec.TxHash) {
		return "", err
	}
	return ev.TxHash.Hex(), nil
}

// lose marks a settled record lost to a reorg, dropped first if it was not
// yet (the store moves a record to lost only from dropped).
func (f *Facilitator) lose(ctx context.Context, rec store.Settlement, lostTo, why string) (int, error) {
	n := 0
	if rec.Reorg == store.ReorgNone {
		var err error
		if n, err = f.markReorg(ctx, rec, store.ReorgDropped, "", ""); err != nil {
			return n, err
		}
	}
	m, err := f.markReorg(ctx, rec, store.ReorgLost, lostTo, why)
	return n + m, err
}

// markReorg writes one reorg mark and, when this call changed the record
// (of replicas finding the same, one does), counts and logs it. A record
// another replica moved on meanwhile is left to the next pass.
func (f *Facilitator) markReorg(ctx context.Context, rec store.Settlement, to store.ReorgStatus, lostTo, why string) (int, error) {
	wctx, cancel := writeCtx(ctx)
	changed, err := f.store.MarkReorg(wctx, rec.Key, rec.TxHash, to, lostTo)
	cancel()
	switch {
	case errors.Is(err, store.ErrFenced):
		f.log.Debug("reorg mark refused; the record moved on", "key", rec.Key, "to", string(to), "err", err)
		return 0, nil
	case err != nil:
		return 0, fmt.Errorf("mark reorg %q: %w", to, err)
	case !changed:
		return 0, nil
	}
	switch to {
	case store.ReorgDropped:
		f.metrics.reorgs.WithLabelValues(reorgDropped).Inc()
		f.log.Warn("a reorg took a settlement's transaction off the chain", "key", rec.Key, "tx", rec.TxHash, "amount", rec.Amount, "pay_to", rec.PayTo)
	case store.ReorgNone:
		f.metrics.reorgs.WithLabelValues(reorgRemined).Inc()
		f.log.Info("settlement's transaction is on the chain again after a reorg", "key", rec.Key, "tx", rec.TxHash)
	case store.ReorgLost:
		f.metrics.reorgs.WithLabelValues(reorgLost).Inc()
		f.log.Error("settlement lost to a reorg: the payment will not arrive, and its buyer keeps the answer given",
			"key", rec.Key, "tx", rec.TxHash, "lost_to", lostTo, "why", why, "amount", rec.Amount, "pay_to", rec.PayTo)
	}
	return 1, nil
}

// Selectors of the two transferWithAuthorization overloads (exact.TransferCalldata).
var (
	selectorTransferVRS   = crypto.Keccak256([]byte("transferWithAuthorization(address,address,uint256,uint256,uint256,bytes32,uint8,bytes32,bytes32)"))[:4]
	selectorTransferBytes = crypto.Keccak256([]byte("transferWithAuthorization(address,address,uint256,uint256,uint256,bytes32,bytes)"))[:4]
)

// validBeforeOf reads validBefore from a recorded transaction's calldata,
// which the settlement record does not keep on its own. Both overloads
// start with the same static words: from, to, value, validAfter,
// validBefore, nonce. It reports false unless tx calls the token of pm with
// the authorization of pm (from, to and nonce).
func validBeforeOf(tx *types.Transaction, vd *exact.Verified) (*big.Int, bool) {
	data := tx.Data()
	const word = 32
	if tx.To() == nil || *tx.To() != vd.Asset || len(data) < 4+6*word {
		return nil, false
	}
	if sel := data[:4]; !bytes.Equal(sel, selectorTransferVRS) && !bytes.Equal(sel, selectorTransferBytes) {
		return nil, false
	}
	arg := func(i int) []byte { return data[4+i*word : 4+(i+1)*word] }
	a := &vd.Payload.Authorization
	if common.BytesToAddress(arg(0)) != a.From || common.BytesToAddress(arg(1)) != a.To || common.BytesToHash(arg(5)) != a.Nonce {
		return nil, false
	}
	return new(big.Int).SetBytes(arg(4)), true
}
