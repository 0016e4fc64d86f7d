package store

import (
	"context"
	"errors"
	"fmt"
)

// Credit leases (docs/DESIGN.md D28). A lease is a hold (HoldRequest.Lease)
// that a replica takes for a slice of what an owner may spend through one
// key, and that many calls then draw on in the replica's memory. The hold is
// what keeps every cap across replicas: it is placed, checked and counted
// exactly like a call's hold, so captured + outstanding leases never pass a
// balance or a cap. What the store adds for leases is the record of the
// draws, written in batches off the calls' path, and the lease's end:
//
//	Hold(HoldRequest{Lease: true, ...})    the lease: the slice moves user -> held
//	Issue([]LeaseMark)                     the positions the replica may hand to calls, ahead of need
//	Draw([]LeaseDraw)                      batches of calls' charges, with their receipts
//	CloseLease(id)                         what was drawn is captured, the rest goes back to user
//
// A lease whose replica died is ended by ReleaseExpiredHolds at its TTL as
// CloseLease would end it: the draws it recorded are captured, the rest
// returns to the owner. Draws the replica had not written yet are lost:
// those calls were free, the operator's loss, never billed later. How many
// they were is bounded by the lease's issued mark: a replica answers a call
// at position p only once a mark of at least p is recorded, so the
// positions up to the mark without a recorded draw hold every call it
// answered and never wrote (with calls it released unbilled, or had not
// answered, and the headroom it had not handed out yet). The sweep returns
// that bound for each lease it ends (Swept.Lost); a lease closed by its
// replica has none, as its replica handed out no position it did not
// write.
//
// A lease is never captured or released as a call's hold is: Capture and
// Release of a lease, and Draw on a hold that is not a lease, are
// ErrConflict.

// MaxLeasePosition bounds a draw's position in its lease: a leased call's
// receipt carries the seq of the lease's hold entry and its position in one
// number, known when the call answers, before its draw is written.
const MaxLeasePosition = 1<<32 - 1

// MaxDrawBatch bounds the draws of one Draw call.
const MaxDrawBatch = 1024

// LeaseDraw is one call's charge against a lease.
type LeaseDraw struct {
	// LeaseID is the lease's hold id.
	LeaseID string
	// CallID is the call's request id (a valid id): a call draws once.
	CallID string
	// Position is the call's place in the lease, 1..MaxLeasePosition,
	// unique within it.
	Position int64
	// Charged is what the call bills to the owner: its cost, capped at the
	// maximum it was admitted for. Cost is its full cost (Cost >= Charged);
	// Cost - Charged is the operator's loss (D16), recorded when the lease
	// is captured. Both 0..MaxAmount.
	Charged, Cost int64
	// Receipt, when set, is kept in the same write as the draw (with its
	// Leaf queued in the receipt log, as PutReceipt would): a draw is never
	// recorded without its receipt, nor a receipt without its draw. Its
	// RequestID must be CallID.
	Receipt *StoredReceipt
}

// Validate checks a draw, for every backend.
func (d LeaseDraw) Validate() error {
	switch {
	case !ValidID(d.LeaseID):
		return errors.New("invalid lease id")
	case !ValidID(d.CallID):
		return errors.New("invalid call id")
	case d.Position < 1 || d.Position > MaxLeasePosition:
		return fmt.Errorf("position %d is outside 1..%d", d.Position, int64(MaxLeasePosition))
	case d.Charged < 0 || d.Cost > MaxAmount || d.Cost < d.Charged:
		return fmt.Errorf("charged %d and cost %d are not 0 <= charged <= cost <= %d", d.Charged, d.Cost, MaxAmount)
	case d.Receipt == nil:
		return nil
	case d.Receipt.RequestID != d.CallID:
		return errors.New("the receipt names another call")
	}
	return d.Receipt.Validate()
}

// ValidateDraws checks the arguments of Leases.Draw.
func ValidateDraws(draws []LeaseDraw) error {
	if len(draws) == 0 || len(draws) > MaxDrawBatch {
		return fmt.Errorf("%d draws, not 1..%d", len(draws), MaxDrawBatch)
	}
	for i, d := range draws {
		if err := d.Validate(); err != nil {
			return fmt.Errorf("draw %d: %w", i, err)
		}
	}
	return nil
}

// LeaseMark asks to raise a lease's issued mark to Mark.
type LeaseMark struct {
	LeaseID string
	// Mark is the highest position the lease's replica may hand to a
	// call, 1..MaxLeasePosition.
	Mark int64
}

// ValidateMarks checks the arguments of Leases.Issue.
func ValidateMarks(marks []LeaseMark) error {
	if len(marks) == 0 || len(marks) > MaxDrawBatch {
		return fmt.Errorf("%d marks, not 1..%d", len(marks), MaxDrawBatch)
	}
	for i, m := range marks {
		switch {
		case !ValidID(m.LeaseID):
			return fmt.Errorf("mark %d: invalid lease id", i)
		case m.Mark < 1 || m.Mark > MaxLeasePosition:
			return fmt.Errorf("mark %d: %d is outside 1..%d", i, m.Mark, int64(MaxLeasePosition))
		}
	}
	return nil
}

// Swept is what one ReleaseExpiredHolds call ended.
type Swept struct {
	// Released counts the holds and leases it ended.
	Released int
	// Lost are the leases it ended with positions issued and no draw
	// recorded at them: each is ended once, by one sweep, so each bound is
	// reported once across every process sharing the store.
	Lost []LostCalls
}

// LostCalls bounds the calls an ended lease's replica answered and never
// wrote: the positions up to its issued mark without a recorded draw. It is
// an upper bound: a position issued may also have gone to a call released
// unbilled, to one in flight when the replica died, or to none yet.
type LostCalls struct {
	LeaseID, KeyID string
	Calls          int64
}

// Leases records what calls draw on credit leases.
type Leases interface {
	// Draw records draws in one atomic write and returns one error per draw,
	// in order: nil when the draw is recorded (or was, with the same
	// lease, position, charged and cost: a replay); ErrNotFound when its
	// lease does not exist; ErrConflict when the lease is not a lease, is no
	// longer open (closed, or expired and ended by the sweep), or would have
	// drawn more than its amount, when the call drew with other arguments
	// or another call holds the position, or when its receipt conflicts
	// with one kept (PutReceipt's rules). A refused draw writes nothing and
	// does not stop the others. The second result is an error of the write
	// as a whole: then nothing was recorded, and the batch may be retried.
	Draw(ctx context.Context, draws []LeaseDraw) ([]error, error)
	// CloseLease ends an open lease: what its recorded draws charged moves
	// from held to revenue (their cost above it is the operator's loss, as
	// Capture records it), and the rest back to user; a lease with no draw
	// is released. Closing it again returns the same result, even if the
	// sweep ended it. ErrNotFound for no such hold, ErrConflict for a hold
	// that is not a lease.
	CloseLease(ctx context.Context, leaseID string) (Hold, Entry, error)
	// Issue raises the issued marks of open leases, in one atomic write, and
	// returns one error per mark, in order: nil when the lease's mark is
	// now at least Mark (a mark is never lowered: a lower or equal one is
	// a no-op, so a repeat is too); ErrNotFound when the lease does not
	// exist; ErrConflict when the hold is not a lease or the lease is no
	// longer open (closed, or ended by the sweep). A refused mark writes
	// nothing and does not stop the others. The second result is an error
	// of the write as a whole: then nothing was recorded.
	Issue(ctx context.Context, marks []LeaseMark) ([]error, error)
	// OpenLeases returns owner's balances and open leases in asset, read
	// in one snapshot: what a balance shows as the owner's own (each
	// lease's amount less its draws) rather than held, and a key's usage
	// as spent (its draws).
	OpenLeases(ctx context.Context, owner, asset string) (LeaseBook, error)
}

// LeaseBook is an owner's balances and open leases in one asset, read in
// one snapshot of the store: a lease placed or closed meanwhile is counted
// in both the balances and the leases, or in neither, so a balance derived
// from them never shows a lease's slice twice or not at all.
type LeaseBook struct {
	// Available and Held are the owner's user and held balances.
	Available, Held int64
	// Leases are the open leases (state HoldHeld), at most MaxOpenLeases,
	// soonest created first.
	Leases []Hold
}

// ValidateOpenLeases checks the arguments of Leases.OpenLeases.
func ValidateOpenLeases(owner, asset string) error {
	if !ValidOwner(owner) {
		return errors.New("invalid owner")
	}
	if !ValidAsset(asset) {
		return errors.New("invalid asset")
	}
	return nil
}

// MaxOpenLeases bounds what OpenLeases returns: an owner has about one
// lease per key per replica.
const MaxOpenLeases = 1000
