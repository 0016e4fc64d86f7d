package facilitator

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/core/types"

	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/x402"
)

// recorder writes each transaction signed for one settlement into its record
// before the transaction is sent (chain.BeforeBroadcast): the first one, one
// under another nonce, every fee-bump replacement. A crash right after a send
// thus leaves a record in StateBroadcast naming the transaction and holding
// its bytes, never a claim that looks as if nothing was sent (which the
// reconciler would release while the transaction waits in the pool to pay).
type recorder struct {
	f     *Facilitator
	pm    payment
	key   string
	fence int64

	mu       sync.Mutex
	recorded common.Hash // the latest transaction written, or zero
	nonce    uint64      // recorded's nonce
}

func (f *Facilitator) recorder(pm payment, rec store.Settlement) *recorder {
	return &recorder{f: f, pm: pm, key: rec.Key, fence: rec.Fence}
}

func (r *recorder) before(ctx context.Context, tx *types.Transaction) error {
	r.mu.Lock()
	prev, prevNonce := r.recorded, r.nonce
	r.mu.Unlock()
	if prev != (common.Hash{}) && tx.Nonce() != prevNonce {
		if err := r.f.checkUnpaid(ctx, r.pm, prev); err != nil {
			return err
		}
	}
	raw, err := tx.MarshalBinary()
	if err != nil {
		return fmt.Errorf("encode transaction: %w", err)
	}
	// The write outlives a caller that gives up: the send depends on it.
	wctx, cancel := writeCtx(ctx)
	defer cancel()
	if err := r.f.store.RecordBroadcast(wctx, r.key, r.fence, tx.Hash().Hex(), hexutil.Encode(raw)); err != nil {
		return fmt.Errorf("record transaction %s: %w", tx.Hash().Hex(), err)
	}
	r.mu.Lock()
	r.recorded, r.nonce = tx.Hash(), tx.Nonce()
	r.mu.Unlock()
	return nil
}

// errMayHavePaid refuses to send a transaction for a settlement under a new
// nonce while the one recorded before it may have paid.
var errMayHavePaid = errors.New("an earlier transaction of this settlement may have been mined; nothing new is sent")

// checkUnpaid is asked before a settlement's call is signed again under
// another nonce, which the Sender does when the node refused the first
// transaction's nonce as used. The node says so too when the nonce was used by
// that very transaction: another replica, finding it recorded but unknown to
// the node (this process had not sent it yet), sent the same bytes and they
// were mined. A second transaction would then only revert and burn gas, and
// once the record is settled it cannot be recorded at all. So a new nonce is
// only used while the earlier transaction has no receipt and the
// authorization is unused; anything else, a node that cannot tell included,
// is errMayHavePaid, and the chain resolves the record.
func (f *Facilitator) checkUnpaid(ctx context.Context, pm payment, prev common.Hash) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), chainReadTimeout)
	defer cancel()
	_, err := f.backend.TransactionReceipt(ctx, prev)
	switch {
	case err == nil:
		return fmt.Errorf("%w: %s was mined", errMayHavePaid, prev.Hex())
	case !errors.Is(err, ethereum.NotFound):
		return fmt.Errorf("%w: receipt of %s: %w", errMayHavePaid, prev.Hex(), err)
	}
	used, err := pm.used(ctx, f.backend)
	switch {
	case err != nil:
		return fmt.Errorf("%w: %w", errMayHavePaid, err)
	case used:
		return fmt.Errorf("%w: the authorization is used", errMayHavePaid)
	}
	return nil
}

// chainReadTimeout bounds one read from the node made on the way to a send.
const chainReadTimeout = 10 * time.Second

// last returns the latest transaction recorded, or zero if none was.
func (r *recorder) last() common.Hash {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.recorded
}

// giveBack frees the authorization of a claim after the Sender sent nothing:
// a record that never got a transaction is released; one whose recorded
// transactions the node all refused is abandoned, if it still names the last
// of them.
func (f *Facilitator) giveBack(ctx context.Context, rec store.Settlement, recorded common.Hash) {
	if recorded == (common.Hash{}) {
		f.release(ctx, rec)
		return
	}
	ctx, cancel := writeCtx(ctx)
	defer cancel()
	if err := f.store.AbandonBroadcast(ctx, rec.Key, rec.Fence, recorded.Hex()); err != nil {
		f.log.Warn("abandon refused transaction", "key", rec.Key, "tx", recorded.Hex(), "err", err)
	}
}

// recordedTx decodes the raw transaction of rec and its signer. It reports
// false when the record has none, or bytes that are not the transaction it
// names (then the record's hash alone is trusted).
func (f *Facilitator) recordedTx(rec store.Settlement) (*types.Transaction, common.Address, bool) {
	if rec.RawTx == "" {
		return nil, common.Address{}, false
	}
	raw, err := hexutil.Decode(rec.RawTx)
	if err != nil {
		f.log.Warn("settlement record holds a malformed raw transaction", "key", rec.Key, "err", err)
		return nil, common.Address{}, false
	}
	tx := new(types.Transaction)
	if err := tx.UnmarshalBinary(raw); err != nil || !strings.EqualFold(tx.Hash().Hex(), rec.TxHash) {
		f.log.Warn("settlement record's raw transaction is not the one it names", "key", rec.Key, "tx", rec.TxHash, "err", err)
		return nil, common.Address{}, false
	}
	from, err := types.Sender(types.LatestSignerForChainID(f.chainID), tx)
	if err != nil {
		f.log.Warn("settlement record's raw transaction has no valid signer", "key", rec.Key, "tx", rec.TxHash, "err", err)
		return nil, common.Address{}, false
	}
	return tx, from, true
}

// ours reports whether the transaction hash, which used the authorization of
// rec, was sent by one of our own signers (D5).
//
// Replicas each sign with a key of their own (D20), and none knows the
// others' addresses. The settlement record settles it without a registry of
// signers: every transaction any replica sends for an authorization is first
// written into the authorization's record by the claim holder (recorder), so
// the record's transaction is ours, and so is any transaction from the signer
// of the record's raw transaction (an earlier version of it, replaced by a fee
// bump, say). A record that names no transaction sent nothing, so only our
// own signer's transactions count then (a record from before raw transactions
// were kept). A node that cannot answer gives no verdict: a transient error
// must never turn our own settlement into someone else's.
func (f *Facilitator) ours(ctx context.Context, hash common.Hash, rec store.Settlement) (bool, error) {
	if rec.TxHash != "" && strings.EqualFold(hash.Hex(), rec.TxHash) {
		return true, nil
	}
	tx, _, err := f.backend.TransactionByHash(ctx, hash)
	if err != nil {
		return false, fmt.Errorf("read transaction %s: %w", hash.Hex(), err)
	}
	// A transaction without a valid signature is nobody's: a verdict, not a
	// failure.
	from, serr := types.Sender(types.LatestSignerForChainID(f.chainID), tx)
	_, recordedFrom, recorded := f.recordedTx(rec)
	return serr == nil && (from == f.sender.Address() || recorded && from == recordedFrom), nil
}

// unmined answers for a record in StateBroadcast whose authorization is still
// unused on chain. Usually its transaction is on its way (the Sender keeps its
// own alive; another replica's is sent again here, the same bytes, if the node
// dropped it): pending, and nothing new is ever signed for it. But when the
// account's nonce moved past the transaction's while the authorization stayed
// unused, no version of it can ever be mined (every version shares the nonce),
// and the record is abandoned so the authorization can be tried again.
func (f *Facilitator) unmined(ctx context.Context, pm payment, rec store.Settlement) (*x402.SettleResponse, error) {
	tx, from, ok := f.recordedTx(rec)
	if !ok {
		return pending(pm, common.HexToHash(rec.TxHash)), nil
	}
	next, err := f.backend.NonceAt(ctx, from, nil)
	if err != nil {
		return nil, fmt.Errorf("resolve settlement: nonce of %s: %w", from.Hex(), err)
	}
	if next <= tx.Nonce() {
		if from != f.sender.Address() {
			f.resend(ctx, rec, tx)
		}
		return pending(pm, tx.Hash()), nil
	}
	// Read after the nonce: had a version of ours used the authorization, it
	// would show now.
	used, err := pm.used(ctx, f.backend)
	if err != nil {
		return nil, fmt.Errorf("resolve settlement: %w", err)
	}
	if used {
		return pending(pm, tx.Hash()), nil // the chain resolves it on the next look
	}
	f.forget(rec.Key)
	wctx, cancel := writeCtx(ctx)
	defer cancel()
	if err := f.store.AbandonBroadcast(wctx, rec.Key, rec.Fence, rec.TxHash); err != nil && !errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("abandon settlement %s: %w", rec.Key, err)
	}
	f.log.Warn("settlement transaction can never be mined; authorization released", "key", rec.Key, "tx", rec.TxHash, "nonce", tx.Nonce())
	return nil, fmt.Errorf("settlement %s: transaction %s (nonce %d): %w", rec.Key, rec.TxHash, tx.Nonce(), errAbandoned)
}

// errAbandoned means a settlement's transaction can never be mined and its
// record was abandoned: nothing was paid, and the authorization may be
// presented again.
var errAbandoned = errors.New("transaction can never be mined (its nonce was used by another); authorization released, nothing paid")

// resend sends the recorded bytes of another replica's transaction again if
// the node does not know them (dropped from its pool, or never received
// before that replica died). The same signed bytes can be mined at most once.
func (f *Facilitator) resend(ctx context.Context, rec store.Settlement, tx *types.Transaction) {
	if _, _, err := f.backend.TransactionByHash(ctx, tx.Hash()); !errors.Is(err, ethereum.NotFound) {
		return
	}
	if err := f.backend.SendTransaction(ctx, tx); err != nil {
		f.log.Debug("re-send recorded transaction", "key", rec.Key, "tx", tx.Hash().Hex(), "err", err)
		return
	}
	f.log.Warn("recorded transaction unknown to the node, sent again", "key", rec.Key, "tx", tx.Hash().Hex())
}
