package sqlite

import (
	"context"
	"database/sql"
	"errors"

	"github.com/llm4agents/llm4agents/internal/store"
)

// CaptureWithReceipt implements store.ReceiptCapturer: Capture's op and
// PutReceipt's in one op of the writer, so one commit. The receipt's writes
// sit in a savepoint of their own, so a receipt the store refuses is rolled
// back alone and the capture stands.
func (db *DB) CaptureWithReceipt(ctx context.Context, holdID string, actual int64,
	receiptOf func(store.Hold, store.Entry) *store.StoredReceipt) (_ store.CaptureResult, err error) {
	defer store.Wrap(&err, "sqlite", "capture %q with its receipt", holdID)
	if err := store.ValidateActual(holdID, actual); err != nil {
		return store.CaptureResult{}, err
	}
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return store.CaptureResult{}, err
	}
	defer cancel()

	var res store.CaptureResult
	err = db.write(ctx, func(ctx context.Context, sqlTx *sql.Tx) error {
		res = store.CaptureResult{}
		tx := db.wtx(sqlTx)
		h, e, err := capture(ctx, db, tx, holdID, actual)
		if err != nil {
			return err
		}
		res.Hold, res.Entry = h, e
		r := receiptOf(h, e)
		if r == nil {
			return nil
		}
		kept, err := keepReceiptIn(ctx, tx, db.nowMs(), *r)
		switch {
		case err != nil:
			return err
		case kept != nil:
			res.ReceiptErr = kept
		default:
			res.Receipt = r
		}
		return nil
	})
	if err != nil {
		return store.CaptureResult{}, mapErr(ctx, err)
	}
	return res, nil
}

// keepReceiptIn is PutReceipt's op inside another op, in a savepoint: the
// first result is why r was refused (its writes rolled back), the second an
// error of the write as a whole.
func keepReceiptIn(ctx context.Context, tx wtx, now int64, r store.StoredReceipt) (refused, err error) {
	if err := r.Validate(); err != nil {
		return err, nil
	}
	if _, err := tx.ExecContext(ctx, "SAVEPOINT receipt"); err != nil {
		return nil, err
	}
	err = putReceipt(ctx, tx, now, r)
	if err == nil {
		_, err = tx.ExecContext(ctx, "RELEASE receipt")
		return nil, err
	}
	if !errors.Is(err, store.ErrConflict) {
		return nil, err
	}
	if _, rerr := tx.ExecContext(ctx, "ROLLBACK TO receipt"); rerr != nil {
		return nil, rerr
	}
	if _, rerr := tx.ExecContext(ctx, "RELEASE receipt"); rerr != nil {
		return nil, rerr
	}
	return err, nil
}
