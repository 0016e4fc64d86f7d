package store

import "context"

// CaptureResult is what ReceiptCapturer.CaptureWithReceipt did.
type CaptureResult struct {
	Hold  Hold
	Entry Entry
	// Receipt is the receipt kept with the capture, nil when none was.
	Receipt *StoredReceipt
	// ReceiptErr is why the receipt the caller gave was not kept (as
	// PutReceipt would say it: ErrConflict when another receipt holds its
	// request id, or the receipt is invalid); the capture stands without
	// it. nil when it was kept or there was none.
	ReceiptErr error
}

// ReceiptCapturer is a Ledger that keeps a call's receipt in the write of
// its capture, so that a per-call charge costs one durable write after the
// answer instead of two. The receipt depends on the capture's entry, known
// only inside the write.
type ReceiptCapturer interface {
	// CaptureWithReceipt is Capture and, in the same atomic write, PutReceipt
	// of the receipt receiptOf returns for the capture's hold and entry (nil:
	// none). receiptOf runs inside the write, once per attempt: it must be
	// quick, do no I/O, and have no effect the caller relies on unless the
	// call returns no error. A receipt the store refuses leaves the capture
	// standing (CaptureResult.ReceiptErr).
	CaptureWithReceipt(ctx context.Context, holdID string, actual int64, receiptOf func(Hold, Entry) *StoredReceipt) (CaptureResult, error)
}
