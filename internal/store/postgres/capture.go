package postgres

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/llm4agents/llm4agents/internal/store"
)

// CaptureWithReceipt implements store.ReceiptCapturer: Capture's statement
// and PutReceipt's in one transaction, so one commit after the answer
// instead of two.
//
// It runs beside the owner's ledger line, not on it: the receipt is signed
// between the two statements, from what the first decided, and a line's
// batch is a pipeline sent whole. The capture statement locks what the
// line's batches lock, in their order (the owner's balances first), so it
// waits for a batch in flight and never deadlocks with one. The receipt's
// writes sit in a savepoint, so a receipt the store refuses is rolled back
// alone and the capture stands.
func (db *DB) CaptureWithReceipt(ctx context.Context, holdID string, actual int64,
	receiptOf func(store.Hold, store.Entry) *store.StoredReceipt) (_ store.CaptureResult, err error) {
	defer store.Wrap(&err, "postgres", "capture %q with its receipt", holdID)
	if err := store.ValidateActual(holdID, actual); err != nil {
		return store.CaptureResult{}, err
	}
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return store.CaptureResult{}, err
	}
	defer cancel()

	now := db.nowArg()
	for range ledgerAttempts {
		var (
			out   store.CaptureResult
			res   resolution
			again bool
		)
		err := db.rawTx(ctx, func(tx pgx.Tx) error {
			out, again = store.CaptureResult{}, false
			var rs resolveScan
			err := tx.QueryRow(ctx, resolveStmt, now, holdID, store.EntryCapture, actual, endCalls).Scan(rs.dest()...)
			if err != nil {
				return err
			}
			if res, again, err = rs.resolution(); err != nil || again || res.verdict != verdictOK {
				return err
			}
			out.Hold, out.Entry = res.hold, res.entry
			r := receiptOf(res.hold, res.entry)
			if r == nil {
				return nil
			}
			refused, err := keepReceiptIn(ctx, tx, now, *r)
			switch {
			case err != nil:
				return err
			case refused != nil:
				out.ReceiptErr = refused
			default:
				out.Receipt = r
			}
			return nil
		})
		switch {
		case db.retry(ctx, err, "capture"):
			continue
		case err != nil:
			return store.CaptureResult{}, db.mapOpErr(ctx, err)
		case again:
			continue
		case res.verdict == verdictOK:
			db.forgetHold(holdID)
			return out, nil
		}
		// Nothing written: the hold is absent or a lease, or it was
		// resolved before, which for a repeat of this capture keeps the
		// receipt as PutReceipt would.
		h, e, err := db.captured(ctx, res, actual)
		if err != nil {
			return store.CaptureResult{}, err
		}
		db.forgetHold(holdID)
		out = store.CaptureResult{Hold: h, Entry: e}
		r := receiptOf(h, e)
		if r == nil {
			return out, nil
		}
		if err := r.Validate(); err != nil {
			out.ReceiptErr = err
			return out, nil
		}
		switch err := db.PutReceipt(ctx, *r); {
		case errors.Is(err, store.ErrConflict):
			out.ReceiptErr = err
		case err != nil:
			return store.CaptureResult{}, err
		default:
			out.Receipt = r
		}
		return out, nil
	}
	return store.CaptureResult{}, errors.New("no decision after several attempts")
}

// keepReceiptIn is PutReceipt's statements inside tx, in a savepoint: the
// first result is why r was refused (its writes rolled back), the second an
// error of the transaction as a whole.
func keepReceiptIn(ctx context.Context, tx pgx.Tx, now *int64, r store.StoredReceipt) (refused, err error) {
	if err := r.Validate(); err != nil {
		return err, nil
	}
	if _, err := tx.Exec(ctx, "SAVEPOINT receipt"); err != nil {
		return nil, err
	}
	err = insertReceipt(ctx, tx, now, r)
	if err == nil && len(r.Leaf) > 0 {
		err = queueLeaves(ctx, tx, now, []string{r.RequestID}, [][]byte{r.Leaf})
	}
	if err == nil {
		_, err = tx.Exec(ctx, "RELEASE SAVEPOINT receipt")
		return nil, err
	}
	if !errors.Is(err, store.ErrConflict) {
		return nil, err
	}
	if _, rerr := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT receipt"); rerr != nil {
		return nil, rerr
	}
	return err, nil
}

// rawTx runs f in a READ COMMITTED transaction and commits it, returning
// the server's error as it is (inTx maps it), so a caller can tell a
// deadlock or serialization failure, to run the transaction again.
func (db *DB) rawTx(ctx context.Context, f func(pgx.Tx) error) error {
	tx, err := db.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return err
	}
	defer func() {
		// A no-op after Commit. Bounded on its own: ctx may have ended.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), store.DefaultTimeout)
		defer cancel()
		_ = tx.Rollback(rctx)
	}()
	if err := f(tx); err != nil {
		return err
	}
	return tx.Commit(ctx)
}
