package store

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Signed receipts of credit-paid calls (MISSION C2, DECISIONS D18). The
// gateway signs a receipt when it captures a call's cost and keeps it here, so
// that `GET /v1/receipts/{requestId}` serves it later from any replica. The
// store keeps the signed envelope as the gateway produced it: it is evidence,
// never re-encoded.

// MaxReceiptBytes bounds one stored receipt envelope.
const MaxReceiptBytes = 8 << 10

// MaxReceiptsPage bounds the limit of one ReceiptsOf call.
const MaxReceiptsPage = 1000

// StoredReceipt is one signed receipt.
type StoredReceipt struct {
	// RequestID is the call's request id (a valid id, see ValidID): the
	// receipt's name and its requestId.
	RequestID string
	// Owner is the account the call was charged to (a valid owner); KeyID the
	// API key it was drawn through, empty for none.
	Owner string
	KeyID string
	// Seq is the ledger entry of the capture (the receipt's ledgerSeq); pages
	// of ReceiptsOf are ordered by it, newest first.
	Seq int64
	// Envelope is the signed receipt as served: JSON {"receipt":..., "signature":...},
	// at most MaxReceiptBytes.
	Envelope  []byte
	CreatedAt time.Time // set by the store
}

// Validate checks a receipt before it is stored, for every backend.
// CreatedAt is not read.
func (r StoredReceipt) Validate() error {
	switch {
	case !ValidID(r.RequestID):
		return errors.New("invalid request id")
	case !ValidOwner(r.Owner):
		return errors.New("invalid owner")
	case r.KeyID != "" && !ValidID(r.KeyID):
		return errors.New("invalid key id")
	case r.Seq <= 0:
		return fmt.Errorf("ledger seq %d is not positive", r.Seq)
	case len(r.Envelope) == 0:
		return errors.New("empty receipt envelope")
	case len(r.Envelope) > MaxReceiptBytes:
		return fmt.Errorf("receipt envelope of %d bytes, over %d", len(r.Envelope), MaxReceiptBytes)
	}
	return nil
}

// Receipts keeps signed receipts.
type Receipts interface {
	// PutReceipt stores r once: a second PutReceipt with the same request id
	// and the same envelope succeeds and changes nothing; with another
	// envelope, owner or seq it is ErrConflict.
	PutReceipt(ctx context.Context, r StoredReceipt) error
	// Receipt returns the receipt of requestID; ErrNotFound if absent.
	Receipt(ctx context.Context, requestID string) (StoredReceipt, error)
	// ReceiptsOf lists up to limit (1..MaxReceiptsPage) receipts of owner
	// with Seq < before (before <= 0: from the newest), newest first.
	ReceiptsOf(ctx context.Context, owner string, before int64, limit int) ([]StoredReceipt, error)
}
