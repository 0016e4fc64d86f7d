package ledger

import (
	"context"
	"errors"

	"github.com/llm4agents/llm4agents/internal/chat"
	"github.com/llm4agents/llm4agents/internal/pricing"
	"github.com/llm4agents/llm4agents/internal/store"
)

var errNoReceiptCapture = errors.New("the store keeps receipts in writes of their own")

// KeepsReceipts reports whether ChargeKeeping can keep a charge's receipt
// in the write of its capture: whether the store is a
// store.ReceiptCapturer.
func (l *Ledger) KeepsReceipts() bool {
	_, ok := l.st.(store.ReceiptCapturer)
	return ok
}

// ChargeKeeping is Charge, and keeps the receipt receiptOf returns for the
// charge (nil: none) in the same store write, so a per-call charge costs
// one durable write after the answer. receiptOf runs inside that write: it
// must be quick and do no I/O, and what it computes counts only when
// ChargeKeeping returns no error. kept reports whether a receipt was kept;
// one the store refused is logged and the charge stands without it. Only
// when KeepsReceipts: otherwise it charges nothing and returns an error.
func (l *Ledger) ChargeKeeping(ctx context.Context, holdID string, u chat.Usage, p pricing.Price,
	receiptOf func(Charge) *store.StoredReceipt) (_ Charge, kept bool, err error) {
	defer wrap(&err, "charge %s", holdID)
	rc, ok := l.st.(store.ReceiptCapturer)
	if !ok {
		return Charge{}, false, errNoReceiptCapture
	}
	actual := l.actual(ctx, holdID, u, p)
	res, err := rc.CaptureWithReceipt(ctx, holdID, actual, func(h store.Hold, e store.Entry) *store.StoredReceipt {
		return receiptOf(charge(h, e))
	})
	if err != nil {
		return Charge{}, false, err
	}
	l.warnLoss(ctx, res.Hold)
	if res.ReceiptErr != nil {
		l.log.ErrorContext(ctx, "receipt not kept; the charge stands", "hold", holdID, "err", res.ReceiptErr)
	}
	return charge(res.Hold, res.Entry), res.Receipt != nil, nil
}
