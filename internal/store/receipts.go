package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"
)

// Signed receipts of credit-paid calls (D18). The gateway signs a receipt
// when it captures a call's cost and keeps it here, so that
// `GET /v1/receipts/{requestId}` serves it later from any replica. The store
// keeps the signed envelope as the gateway produced it: it is evidence, never
// re-encoded.

// MaxReceiptBytes bounds one stored receipt envelope.
const MaxReceiptBytes = 8 << 10

// MaxReceiptsPage bounds the limit of one ReceiptsOf or RecentReceipts call.
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
	// of ReceiptsOf are ordered by it, newest first. A receipt with no
	// ledger entry (an x402 payment's) is put with Seq 0: the store draws a
	// new number from the ledger's sequence, so that an owner's receipts of
	// both kinds share one order, and Receipt returns it.
	Seq int64
	// Envelope is the signed receipt as served: JSON {"receipt":..., "signature":...},
	// at most MaxReceiptBytes.
	Envelope []byte
	// Leaf, when set, is the receipt's leaf in the receipt log: PutReceipt
	// queues it (as ReceiptLog.AppendLog would, under RequestID) in the same
	// atomic write that keeps the receipt, so that no kept receipt misses
	// the log and no leaf names a receipt that was not kept. Receipt and
	// ReceiptsOf do not return it.
	Leaf      []byte
	CreatedAt time.Time // set by the store
}

// SameReceipt reports whether stored, as a store keeps it, is the receipt r
// puts again: the same owner, key and envelope, and the same seq unless r
// asked the store to draw one (Seq 0).
func SameReceipt(stored, r StoredReceipt) bool {
	return stored.Owner == r.Owner && stored.KeyID == r.KeyID && (r.Seq == 0 || stored.Seq == r.Seq) &&
		bytes.Equal(stored.Envelope, r.Envelope)
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
	case r.Seq < 0:
		return fmt.Errorf("ledger seq %d is negative", r.Seq)
	case len(r.Envelope) == 0:
		return errors.New("empty receipt envelope")
	case len(r.Envelope) > MaxReceiptBytes:
		return fmt.Errorf("receipt envelope of %d bytes, over %d", len(r.Envelope), MaxReceiptBytes)
	case len(r.Leaf) > MaxLeafBytes:
		return fmt.Errorf("leaf of %d bytes, over %d", len(r.Leaf), MaxLeafBytes)
	}
	return nil
}

// Receipts keeps signed receipts.
type Receipts interface {
	// PutReceipt stores r once, and queues its Leaf in the receipt log when
	// set: a second PutReceipt with the same request id and the same
	// envelope succeeds and changes nothing; with another envelope, owner or
	// seq (any seq, when put with 0), or a leaf other than the one queued,
	// it is ErrConflict.
	PutReceipt(ctx context.Context, r StoredReceipt) error
	// Receipt returns the receipt of requestID; ErrNotFound if absent.
	Receipt(ctx context.Context, requestID string) (StoredReceipt, error)
	// ReceiptsOf lists the receipts q selects, newest first. A q that fails
	// Validate is an error (no sentinel), before the store is asked.
	ReceiptsOf(ctx context.Context, q ReceiptsQuery) ([]StoredReceipt, error)
}

// ReceiptsQuery selects a page of one owner's receipts. It is a struct, not
// positional arguments, because Owner and KeyID are both strings that a
// swapped call would silently mix up; a zero Limit is refused, so a page
// size is always chosen by the caller.
type ReceiptsQuery struct {
	// Owner is whose receipts (a valid owner); required.
	Owner string
	// KeyID, when set (a valid id), keeps only the receipts drawn through
	// that key. Empty means every key of Owner, and calls drawn without one.
	// A key of another owner selects nothing: the owner always filters too.
	KeyID string
	// Before keeps receipts with Seq < Before; <= 0 starts at the newest.
	Before int64
	// Limit is the page size, 1..MaxReceiptsPage.
	Limit int
}

// Validate checks q for every backend.
func (q ReceiptsQuery) Validate() error {
	switch {
	case !ValidOwner(q.Owner):
		return errors.New("invalid owner")
	case q.KeyID != "" && !ValidID(q.KeyID):
		return errors.New("invalid key id")
	case q.Limit < 1 || q.Limit > MaxReceiptsPage:
		return fmt.Errorf("limit %d is outside 1..%d", q.Limit, MaxReceiptsPage)
	}
	return nil
}

// RecentReceipts lists the receipts of every account: the operator's view
// (revenue by rail and tokens by model over a recent window), where
// Receipts only lists one owner's. It is optional, found by a type
// assertion on a Receipts, so that a backend can leave it out; the SQLite,
// PostgreSQL and Redis backends all have it.
type RecentReceipts interface {
	// RecentReceipts returns up to limit (1..MaxReceiptsPage) receipts,
	// of any owner, whose CreatedAt is at or after since (to the
	// millisecond), newest first: by CreatedAt, then by request id byte
	// by byte, both descending. A limit out of range is an error (no
	// sentinel), before the store is asked. Receipts created more than
	// RecentRetention ago may be left out, and so may those a backend
	// kept before it had this listing (see the backend's docs): a caller
	// asking for a longer window gets less, never an error.
	RecentReceipts(ctx context.Context, since time.Time, limit int) ([]StoredReceipt, error)
}

// CheckRecentReceipts checks the limit of RecentReceipts.RecentReceipts,
// for backends to refuse a bad one: 1 to MaxReceiptsPage.
func CheckRecentReceipts(limit int) error {
	if limit < 1 || limit > MaxReceiptsPage {
		return fmt.Errorf("limit %d is outside 1..%d", limit, MaxReceiptsPage)
	}
	return nil
}
