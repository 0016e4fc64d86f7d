package store

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"time"
)

// The receipt log's anchors: transactions that wrote a checkpoint of the log
// (its size and root hash) to an anchor contract on chain. The replica
// holding the log lease records each one before it is sent, so that a
// replica that dies in between leaves a record naming a transaction that may
// be on chain; once it sees the transaction mined it records the block. The
// store gives no meaning to a size, a root or an address: it keeps them, and
// lists the newest first, for the gateway to publish.

// MaxLogAnchors bounds one LogAnchors listing.
const MaxLogAnchors = 1000

// LogAnchor is one anchor transaction.
type LogAnchor struct {
	// TxHash names the transaction: 0x and 64 lowercase hex digits. An anchor
	// is recorded once per transaction; a replacement of a transaction (the
	// same call with higher fees) is a transaction, and an anchor, of its own.
	TxHash string
	// Size and Root are the checkpoint the transaction wrote: Size > 0.
	Size int64
	Root [32]byte
	// Network (CAIP-2), Contract and Sender (0x and 40 hex digits) say where
	// and from whom.
	Network  string
	Contract string
	Sender   string
	// SentAt is when the anchor was recorded, by the store's clock, to the
	// millisecond; RecordAnchor sets it.
	SentAt time.Time
	// Block is the block that mined the transaction, as last confirmed
	// (ConfirmAnchor); 0 until then.
	Block int64
}

// LogAnchors keeps the receipt log's anchors.
type LogAnchors interface {
	// RecordAnchor records a with SentAt now; a.SentAt and a.Block are not
	// read. A transaction already recorded with the same size, root,
	// network, contract and sender is left as it was (its SentAt and Block
	// kept); with other values it is ErrConflict. An anchor that fails
	// CheckLogAnchor is an error that is no sentinel.
	RecordAnchor(ctx context.Context, a LogAnchor) error
	// ConfirmAnchor records that block (> 0) mined the transaction txHash,
	// whatever block was recorded before: a reorg may move a transaction to
	// another block. ErrNotFound if no anchor has txHash.
	ConfirmAnchor(ctx context.Context, txHash string, block int64) error
	// LogAnchors returns up to limit (1..MaxLogAnchors) anchors, newest first:
	// by SentAt, then Size, then TxHash, each descending.
	LogAnchors(ctx context.Context, limit int) ([]LogAnchor, error)
}

var (
	txHashRE  = regexp.MustCompile(`^0x[0-9a-f]{64}$`)
	addressRE = regexp.MustCompile(`^0x[0-9a-fA-F]{40}$`)
)

// maxNetworkBytes bounds a LogAnchor's Network: a CAIP-2 id is at most 41
// bytes.
const maxNetworkBytes = 64

// CheckLogAnchor checks an anchor before it is recorded, for every backend.
// SentAt and Block are not read.
func CheckLogAnchor(a LogAnchor) error {
	switch {
	case !txHashRE.MatchString(a.TxHash):
		return fmt.Errorf("transaction hash %q is not 0x and 64 lowercase hex digits", a.TxHash)
	case a.Size <= 0:
		return fmt.Errorf("size %d is not positive", a.Size)
	case a.Network == "" || len(a.Network) > maxNetworkBytes:
		return fmt.Errorf("network of %d bytes, want 1..%d", len(a.Network), maxNetworkBytes)
	case !addressRE.MatchString(a.Contract):
		return fmt.Errorf("contract %q is not 0x and 40 hex digits", a.Contract)
	case !addressRE.MatchString(a.Sender):
		return fmt.Errorf("sender %q is not 0x and 40 hex digits", a.Sender)
	}
	return nil
}

// CheckConfirmAnchor checks the arguments of LogAnchors.ConfirmAnchor.
func CheckConfirmAnchor(txHash string, block int64) error {
	switch {
	case !txHashRE.MatchString(txHash):
		return fmt.Errorf("transaction hash %q is not 0x and 64 lowercase hex digits", txHash)
	case block <= 0:
		return fmt.Errorf("block %d is not positive", block)
	}
	return nil
}

// CheckLogAnchorsLimit checks the limit of LogAnchors.LogAnchors.
func CheckLogAnchorsLimit(limit int) error {
	if limit <= 0 || limit > MaxLogAnchors {
		return fmt.Errorf("limit %d is outside 1..%d", limit, MaxLogAnchors)
	}
	return nil
}

// SameAnchor checks, for RecordAnchor, that a recorded anchor (cur) is the
// one being recorded again (a): the same checkpoint, network, contract and
// sender, addresses compared case-insensitively as the chain does; else
// ErrConflict.
func SameAnchor(cur, a LogAnchor) error {
	if cur.Size != a.Size || cur.Root != a.Root || cur.Network != a.Network ||
		!strings.EqualFold(cur.Contract, a.Contract) || !strings.EqualFold(cur.Sender, a.Sender) {
		return fmt.Errorf("transaction %s is recorded as another anchor: %w", a.TxHash, ErrConflict)
	}
	return nil
}
