package postgres

import (
	"context"

	"github.com/llm4agents/llm4agents/internal/store"
)

// CaptureWithReceipt implements store.ReceiptCapturer. The receipt names
// the capture's entry, known only once the capture's statement has run, so
// the capture goes on its owner's line with a then (lineWrite.then): its
// batch runs in an explicit transaction, and the receipt's insert, with its
// log leaf, follows the batch's statements before the one commit.
//
// The receipt is put on its own, after the capture committed, when it could
// not go with it: the capture was a replay, or its batch failed and its
// writes ran again one by one. So is a receipt refused (its id or its leaf
// taken): its insert fails the batch, and PutReceipt then says why, the
// capture standing without it.
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
	var kept *store.StoredReceipt
	var invalid error
	follow := func(res resolution) *lineWrite {
		kept, invalid = nil, nil
		r := receiptOf(res.hold, res.entry)
		if r == nil {
			return nil
		}
		if invalid = r.Validate(); invalid != nil {
			return nil
		}
		kept = r
		return receiptWrite(now, *r)
	}
	res, err := db.resolve(ctx, now, holdID, store.EntryCapture, actual, endCalls, follow)
	if err != nil {
		return store.CaptureResult{}, err
	}
	h, e, err := db.captured(ctx, res, actual)
	if err != nil {
		return store.CaptureResult{}, err
	}
	out := store.CaptureResult{Hold: h, Entry: e}
	if res.verdict == verdictOK && res.followed {
		out.Receipt, out.ReceiptErr = kept, invalid
		return out, nil
	}
	r := receiptOf(h, e)
	if r == nil {
		return out, nil
	}
	if out.ReceiptErr = db.PutReceipt(ctx, *r); out.ReceiptErr == nil {
		out.Receipt = r
	}
	return out, nil
}

// receiptWrite is the statement that keeps r, new, at now: a follow-up of
// its capture's write.
func receiptWrite(now *int64, r store.StoredReceipt) *lineWrite {
	var id string
	var leaf []byte
	if len(r.Leaf) > 0 {
		leaf = r.Leaf
	}
	return &lineWrite{sql: keepReceipt, args: []any{now, r.RequestID, r.Owner, r.KeyID, r.Seq, r.Envelope, leaf}, dest: []any{&id}}
}

var _ store.ReceiptCapturer = (*DB)(nil)
