package store

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// The receipt log (D30): an append-only Merkle tree of receipt leaves, one
// per gateway, shared by every replica through the store. A receipt's leaf
// is queued (pending) in the same write that keeps the receipt; one replica
// at a time, holding the log lease, integrates the pending leaves: it gives
// them the next indexes, stores the tree's new hashes and the checkpoint it
// signed for the new size, all in one atomic write. The store assigns no
// meaning to a leaf or a hash: it keeps bytes and enforces the order.

// MaxLeafBytes bounds one leaf; tlog-tiles entry bundles prefix each
// entry with a 16-bit length, so a leaf can never be longer than 65535 bytes.
const MaxLeafBytes = 2 << 10

// MaxCheckpointBytes bounds one signed checkpoint.
const MaxCheckpointBytes = 4 << 10

// MaxLogBatch bounds the entries of one PendingLog page or IntegrateLog
// batch, and the hashes or leaves of one LogHashes or LogLeaves read.
const MaxLogBatch = 4096

// MaxLogHashes bounds the hashes one IntegrateLog stores: leaf i stores
// its own hash and one per subtree it completes, so n leaves store at most
// 2n hashes plus one per level of the tree (63 at most).
const MaxLogHashes = 2*MaxLogBatch + 64

// LogEntry is one receipt's leaf.
type LogEntry struct {
	// RequestID names the receipt (a valid id): a leaf is queued once per
	// request id.
	RequestID string
	// Leaf is the leaf's bytes, 1..MaxLeafBytes, as the tree hashes them.
	Leaf []byte
	// Index is the leaf's position in the log once integrated, -1 while it
	// is pending.
	Index int64
}

// Validate checks an entry before it is queued, for every backend. Index
// is not read.
func (e LogEntry) Validate() error {
	switch {
	case !ValidID(e.RequestID):
		return errors.New("invalid request id")
	case len(e.Leaf) == 0:
		return errors.New("empty leaf")
	case len(e.Leaf) > MaxLeafBytes:
		return fmt.Errorf("leaf of %d bytes, over %d", len(e.Leaf), MaxLeafBytes)
	}
	return nil
}

// LogHash is one stored hash of the tree, at its storage index (the
// numbering of golang.org/x/mod/sumdb/tlog: StoredHashIndex).
type LogHash struct {
	Index int64
	Hash  [32]byte
}

// LogState is where the log stands: its size, the checkpoint signed for that
// size, and who holds the integration lease.
type LogState struct {
	// Size is the number of integrated leaves; 0 for a new log.
	Size int64
	// Checkpoint is the signed checkpoint of Size, as the integrator stored
	// it; empty while Size is 0 and nothing was ever integrated.
	Checkpoint []byte
	// Holder is the integrator holding (or last holding) the lease; Fence is
	// new on every takeover, never reused; LeaseUntil is when another
	// integrator may take it, judged by the store's clock.
	Holder     string
	Fence      int64
	LeaseUntil time.Time
}

// ReceiptLog keeps the receipt log.
type ReceiptLog interface {
	// AppendLog queues entries as pending, in one atomic write: either
	// every entry is queued or none. An entry whose request id is already
	// queued (pending or integrated) with the same leaf is left as it is;
	// with another leaf the whole call is ErrConflict. Entries that fail
	// Validate, or more than MaxLogBatch of them, are an error that is no
	// sentinel.
	AppendLog(ctx context.Context, entries []LogEntry) error
	// TakeLogLease takes the integration lease for holder (non-empty) for
	// ttl (> 0, rounded up to the millisecond), or renews it when holder
	// already holds it. A lease held by another holder is taken only once
	// it expired. A takeover gets a new fence; a renewal keeps it. It
	// returns the state as it now stands and whether holder holds the
	// lease.
	TakeLogLease(ctx context.Context, holder string, ttl time.Duration) (LogState, bool, error)
	// ReleaseLogLease ends holder's lease under fence at once, so that
	// another integrator may take it without waiting. ErrFenced if holder
	// does not hold it under fence.
	ReleaseLogLease(ctx context.Context, holder string, fence int64) error
	// PendingLog returns up to limit (1..MaxLogBatch) pending entries, the
	// oldest queued first.
	PendingLog(ctx context.Context, limit int) ([]LogEntry, error)
	// IntegrateLog grows the log from size from to from+len(requestIDs), in
	// one atomic write: the entry of requestIDs[i] gets index from+i, the
	// hashes are stored, and checkpoint becomes the log's. It is ErrFenced,
	// changing nothing, when fence is not the lease's fence, when the log's
	// size is not from (another integrator moved it), or when a request id
	// is not a pending entry. Arguments out of range (no request id, more
	// than MaxLogBatch, more than MaxLogHashes hashes, a hash index already
	// stored, an empty or oversized checkpoint) are an error that is no
	// sentinel.
	IntegrateLog(ctx context.Context, fence, from int64, requestIDs []string, hashes []LogHash, checkpoint []byte) error
	// LogState returns the log's state.
	LogState(ctx context.Context) (LogState, error)
	// LogHashes returns the stored hashes at indexes (at most
	// MaxLogHashes), in their order; ErrNotFound if one is not stored.
	LogHashes(ctx context.Context, indexes []int64) ([][32]byte, error)
	// LogEntry returns the entry of requestID, pending or integrated;
	// ErrNotFound if none was queued.
	LogEntry(ctx context.Context, requestID string) (LogEntry, error)
	// LogLeaves returns the leaves of the integrated entries with indexes
	// from..to-1 (0 <= from < to, at most MaxLogBatch), in index order;
	// ErrNotFound if one of them is not integrated.
	LogLeaves(ctx context.Context, from, to int64) ([][]byte, error)
}

// CheckLogLease checks the arguments of ReceiptLog.TakeLogLease.
func CheckLogLease(holder string, ttl time.Duration) error {
	switch {
	case holder == "":
		return errors.New("empty lease holder")
	case ttl <= 0:
		return fmt.Errorf("lease of %v is not positive", ttl)
	}
	return nil
}

// CheckAppendLog checks the arguments of ReceiptLog.AppendLog.
func CheckAppendLog(entries []LogEntry) error {
	if len(entries) > MaxLogBatch {
		return fmt.Errorf("%d entries, over %d", len(entries), MaxLogBatch)
	}
	for _, e := range entries {
		if err := e.Validate(); err != nil {
			return err
		}
	}
	return nil
}

// CheckIntegrateLog checks the arguments of ReceiptLog.IntegrateLog.
func CheckIntegrateLog(from int64, requestIDs []string, hashes []LogHash, checkpoint []byte) error {
	switch {
	case from < 0:
		return fmt.Errorf("size %d is negative", from)
	case len(requestIDs) == 0:
		return errors.New("no entry to integrate")
	case len(requestIDs) > MaxLogBatch:
		return fmt.Errorf("%d entries, over %d", len(requestIDs), MaxLogBatch)
	case len(hashes) > MaxLogHashes:
		return fmt.Errorf("%d hashes, over %d", len(hashes), MaxLogHashes)
	case len(checkpoint) == 0:
		return errors.New("empty checkpoint")
	case len(checkpoint) > MaxCheckpointBytes:
		return fmt.Errorf("checkpoint of %d bytes, over %d", len(checkpoint), MaxCheckpointBytes)
	}
	seen := make(map[string]bool, len(requestIDs))
	for _, id := range requestIDs {
		if !ValidID(id) || seen[id] {
			return fmt.Errorf("request id %q is invalid or repeated", id)
		}
		seen[id] = true
	}
	for _, h := range hashes {
		if h.Index < 0 {
			return fmt.Errorf("hash index %d is negative", h.Index)
		}
	}
	return nil
}

// CheckLogRange checks the arguments of ReceiptLog.LogLeaves.
func CheckLogRange(from, to int64) error {
	if from < 0 || to <= from || to-from > MaxLogBatch {
		return fmt.Errorf("range %d..%d is empty, negative or over %d", from, to, MaxLogBatch)
	}
	return nil
}
