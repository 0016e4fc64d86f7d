package sqlite

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/llm4agents/llm4agents/internal/store"
)

// Credit leases (store.Leases), in the tables of migrations 0014 and 0018
// (the issued mark). A lease is a row of ledger_holds with lease = 1; its
// draws are rows of ledger_lease_draws, written by one write op per batch,
// each draw checked before anything of it is written, so a refused draw
// leaves nothing and the others stand.

const (
	selectDraw = `SELECT lease_id, position, charged, cost FROM ledger_lease_draws WHERE call_id = ?`
	// insertDraw inserts nothing over a row of the same call or position:
	// drawOne then reads which.
	insertDraw = `INSERT INTO ledger_lease_draws (call_id, lease_id, position, charged, cost, created_at_ms)
VALUES (?, ?, ?, ?, ?, ?)
ON CONFLICT DO NOTHING`
	deleteDraw = `DELETE FROM ledger_lease_draws WHERE call_id = ?`
	// drawn_cost saturates at store.MaxAmount (see store.Hold.DrawnCost).
	addDrawn = `UPDATE ledger_holds SET drawn = drawn + ?, drawn_cost = MIN(drawn_cost + ?, 1000000000000000)
WHERE hold_id = ? AND lease = 1 AND state = 'held' AND drawn <= amount - ?`
	// raiseIssued never lowers a mark: marks may be written out of order.
	raiseIssued = `UPDATE ledger_holds SET issued = MAX(issued, ?) WHERE hold_id = ? AND lease = 1 AND state = 'held'`
	// countIssuedDraws counts a lease's draws at positions up to its mark
	// (UNIQUE (lease_id, position) makes it an index range).
	countIssuedDraws = `SELECT count(*) FROM ledger_lease_draws WHERE lease_id = ? AND position <= ?`
)

// leaseStatements are the statements of a batch of draws, of marks and of
// the sweep's count, which the writer prepares (its other statements are
// the ledger's and the receipts').
func leaseStatements() []string {
	return []string{selectDraw, insertDraw, addDrawn, raiseIssued, countIssuedDraws}
}

// Draw implements store.Leases.
func (db *DB) Draw(ctx context.Context, draws []store.LeaseDraw) (_ []error, err error) {
	defer store.Wrap(&err, "sqlite", "draw %d", len(draws))
	if err := store.ValidateDraws(draws); err != nil {
		return nil, err
	}
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return nil, err
	}
	defer cancel()

	var results []error
	err = db.write(ctx, func(ctx context.Context, sqlTx *sql.Tx) error {
		tx, now := db.wtx(sqlTx), db.nowMs()
		results = make([]error, len(draws))
		var seqs *seqBlock
		if !db.seqOneByOne {
			if seqs, err = reserveSeqs(ctx, tx, unsequenced(draws)); err != nil {
				return err
			}
		}
		leases := make(map[string]*drawnLease)
		var leaves []store.LogEntry
		for i, d := range draws {
			written, err := drawOne(ctx, tx, now, leases, seqs, d)
			if err != nil {
				if !errors.Is(err, store.ErrConflict) && !errors.Is(err, store.ErrNotFound) {
					return err
				}
				results[i] = err
				continue
			}
			if !written {
				continue // a replay: recorded before, receipt and all
			}
			l := leases[d.LeaseID]
			l.drawn += d.Charged
			l.charged += d.Charged
			l.cost += d.Cost
			if d.Receipt != nil && len(d.Receipt.Leaf) > 0 {
				leaves = append(leaves, store.LogEntry{RequestID: d.CallID, Leaf: d.Receipt.Leaf})
			}
		}
		// One update per lease and one log counter step per batch, not per
		// draw: the batch's draws of a lease were judged against its running
		// total above, so their sum fits as each did.
		for id, l := range leases {
			if l.charged == 0 && l.cost == 0 {
				continue
			}
			if err := execOne(ctx, tx, addDrawn, l.charged, min(l.cost, store.MaxAmount), id, l.charged); err != nil {
				return fmt.Errorf("lease %s: %w", id, err) // drawOne saw it fit: a bug
			}
		}
		if len(leaves) > 0 {
			if err := queueLeaves(ctx, tx, now, leaves); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, mapErr(ctx, err)
	}
	return results, nil
}

// unsequenced counts the draws whose receipt asks the store for its seq.
func unsequenced(draws []store.LeaseDraw) int {
	n := 0
	for _, d := range draws {
		if d.Receipt != nil && d.Receipt.Seq == 0 {
			n++
		}
	}
	return n
}

// drawnLease is a lease as a batch of draws sees it: read once, then
// charged in memory by each draw the batch writes, and updated in its row
// once at the end of the batch.
type drawnLease struct {
	hold          store.Hold
	drawn         int64 // hold.Drawn plus the batch's draws so far
	charged, cost int64 // the batch's draws so far
}

// drawOne writes d, with its receipt, inside its batch's transaction, which
// no other writer shares: true if written, false if d was written before
// with the same arguments (a replay), ErrConflict or ErrNotFound if refused.
// A refused draw leaves nothing written. leases holds the batch's leases read
// so far; drawOne adds d's.
//
// A draw is almost always new, on a lease that covers it, so it is inserted
// at once: only a lease that refuses it, or an insert that meets a row
// already there (the call's own, or another call's at the position), reads
// the call's row to tell a replay from a conflict. Reading it first for
// every draw cost two index reads per call on the single writer.
func drawOne(ctx context.Context, tx wtx, now int64, leases map[string]*drawnLease, seqs *seqBlock, d store.LeaseDraw) (bool, error) {
	l, err := batchLease(ctx, tx, leases, d.LeaseID)
	if err == nil {
		err = l.refuses(d)
	}
	if err != nil {
		return replayOr(ctx, tx, d, err)
	}
	res, err := tx.ExecContext(ctx, insertDraw, d.CallID, d.LeaseID, d.Position, d.Charged, d.Cost, now)
	if err != nil {
		return false, err
	}
	inserted, err := oneRow(res)
	if err != nil {
		return false, err
	}
	if !inserted {
		return replayOr(ctx, tx, d, fmt.Errorf("position %d of lease %s is taken: %w", d.Position, d.LeaseID, store.ErrConflict))
	}
	// d's row is in: whatever refuses d from here takes it out again.
	refusal, err := drawReceipt(ctx, tx, now, seqs, d)
	switch {
	case err != nil:
		return false, err
	case refusal == nil:
		return true, nil
	}
	if err := execOne(ctx, tx, deleteDraw, d.CallID); err != nil {
		return false, fmt.Errorf("undo the draw of call %s: %w", d.CallID, err)
	}
	return false, refusal
}

// refuses says why l, as the batch sees it, cannot pay d; nil if it can.
func (l *drawnLease) refuses(d store.LeaseDraw) error {
	switch h := l.hold; {
	case !h.Lease:
		return fmt.Errorf("hold %s is not a lease: %w", d.LeaseID, store.ErrConflict)
	case h.State != store.HoldHeld:
		return fmt.Errorf("lease %s is %s: %w", d.LeaseID, h.State, store.ErrConflict)
	case d.Charged > h.Amount-l.drawn:
		return fmt.Errorf("lease %s has %d left, the draw is %d: %w", d.LeaseID, h.Amount-l.drawn, d.Charged, store.ErrConflict)
	}
	return nil
}

// replayOr returns false if d's call drew before with the same arguments (a
// replay, answered as it was, whatever the lease's state now), a conflict if
// it drew with others, and else refusal: why d cannot be written.
func replayOr(ctx context.Context, tx wtx, d store.LeaseDraw, refusal error) (bool, error) {
	if !errors.Is(refusal, store.ErrConflict) && !errors.Is(refusal, store.ErrNotFound) {
		return false, refusal // not a verdict: the batch fails
	}
	var lease string
	var pos, charged, cost int64
	err := tx.QueryRowContext(ctx, selectDraw, d.CallID).Scan(&lease, &pos, &charged, &cost)
	switch {
	case err == nil && lease == d.LeaseID && pos == d.Position && charged == d.Charged && cost == d.Cost:
		return false, nil
	case err == nil:
		return false, fmt.Errorf("call %s drew before with other arguments: %w", d.CallID, store.ErrConflict)
	case !errors.Is(err, sql.ErrNoRows):
		return false, err
	}
	return false, refusal
}

// drawReceipt writes the receipt of a draw just written, if it has one: a
// non-nil refusal (a conflict) if the call's id already names another
// receipt or another log leaf, with nothing of the receipt written.
func drawReceipt(ctx context.Context, tx wtx, now int64, seqs *seqBlock, d store.LeaseDraw) (refusal, _ error) {
	if d.Receipt == nil {
		return nil, nil
	}
	if len(d.Receipt.Leaf) > 0 {
		// Judged here, before the leaf is queued: a conflict found by
		// queueLeaves would fail the whole batch.
		cur, err := scanLogEntry(tx.QueryRowContext(ctx, selectLogEntry, d.CallID))
		switch {
		case err == nil && !bytes.Equal(cur.Leaf, d.Receipt.Leaf):
			return fmt.Errorf("call %s has another leaf queued: %w", d.CallID, store.ErrConflict), nil
		case err != nil && !errors.Is(err, sql.ErrNoRows):
			return nil, err
		}
	}
	if err := insertReceiptFrom(ctx, tx, now, *d.Receipt, seqs); err != nil {
		if !errors.Is(err, store.ErrConflict) {
			return nil, err
		}
		return fmt.Errorf("receipt: %w", err), nil
	}
	return nil, nil
}

// batchLease returns the lease id as the batch sees it, reading it the
// first time the batch names it. A lease that does not exist is not kept:
// every draw naming it is refused by its own read.
func batchLease(ctx context.Context, tx wtx, leases map[string]*drawnLease, id string) (*drawnLease, error) {
	if l, ok := leases[id]; ok {
		return l, nil
	}
	h, err := scanHold(tx.QueryRowContext(ctx, selectHold, id))
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return nil, fmt.Errorf("lease %s: %w", id, store.ErrNotFound)
	case err != nil:
		return nil, err
	}
	l := &drawnLease{hold: h, drawn: h.Drawn}
	leases[id] = l
	return l, nil
}

// Issue implements store.Leases, in one write op.
func (db *DB) Issue(ctx context.Context, marks []store.LeaseMark) (_ []error, err error) {
	defer store.Wrap(&err, "sqlite", "issue %d marks", len(marks))
	if err := store.ValidateMarks(marks); err != nil {
		return nil, err
	}
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return nil, err
	}
	defer cancel()

	var results []error
	err = db.write(ctx, func(ctx context.Context, sqlTx *sql.Tx) error {
		tx := db.wtx(sqlTx)
		results = make([]error, len(marks))
		for i, m := range marks {
			res, err := tx.ExecContext(ctx, raiseIssued, m.Mark, m.LeaseID)
			if err != nil {
				return err
			}
			raised, err := oneRow(res)
			if err != nil {
				return err
			}
			if raised {
				continue
			}
			// Not raised: say why, from the row as it stands.
			h, err := scanHold(tx.QueryRowContext(ctx, selectHold, m.LeaseID))
			switch {
			case errors.Is(err, sql.ErrNoRows):
				results[i] = fmt.Errorf("lease %s: %w", m.LeaseID, store.ErrNotFound)
			case err != nil:
				return err
			case !h.Lease:
				results[i] = fmt.Errorf("hold %s is not a lease: %w", m.LeaseID, store.ErrConflict)
			default:
				results[i] = fmt.Errorf("lease %s is %s: %w", m.LeaseID, h.State, store.ErrConflict)
			}
		}
		return nil
	})
	if err != nil {
		return nil, mapErr(ctx, err)
	}
	return results, nil
}

// CloseLease implements store.Leases.
func (db *DB) CloseLease(ctx context.Context, leaseID string) (_ store.Hold, _ store.Entry, err error) {
	defer store.Wrap(&err, "sqlite", "close lease %q", leaseID)
	if !store.ValidID(leaseID) {
		return store.Hold{}, store.Entry{}, errors.New("invalid lease id")
	}
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return store.Hold{}, store.Entry{}, err
	}
	defer cancel()

	var h store.Hold
	var e store.Entry
	err = db.write(ctx, func(ctx context.Context, sqlTx *sql.Tx) error {
		tx := db.wtx(sqlTx)
		cur, err := scanHold(tx.QueryRowContext(ctx, selectHold, leaseID))
		switch {
		case err != nil:
			return err
		case !cur.Lease:
			return fmt.Errorf("hold is not a lease: %w", store.ErrConflict)
		case cur.State != store.HoldHeld:
			h = cur
			e, err = loadEntry(ctx, tx, cur.ResolvedSeq)
			return err
		case cur.DrawnCost > 0:
			h, e, err = db.resolve(ctx, tx, cur, store.EntryCapture, cur.DrawnCost, cur.Drawn)
		default:
			h, e, err = db.resolve(ctx, tx, cur, store.EntryRelease, 0, 0)
		}
		return err
	})
	if err != nil {
		return store.Hold{}, store.Entry{}, mapErr(ctx, err)
	}
	return h, e, nil
}

// OpenLeases implements store.Leases, in one read transaction: WAL gives
// it one snapshot.
func (db *DB) OpenLeases(ctx context.Context, owner, asset string) (_ store.LeaseBook, err error) {
	defer store.Wrap(&err, "sqlite", "open leases of %q", owner)
	if err := store.ValidateOpenLeases(owner, asset); err != nil {
		return store.LeaseBook{}, err
	}
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return store.LeaseBook{}, err
	}
	defer cancel()
	tx, err := db.ro.BeginTx(ctx, nil)
	if err != nil {
		return store.LeaseBook{}, mapErr(ctx, err)
	}
	defer func() { _ = tx.Rollback() }() // read only: nothing to keep
	book, err := readLeaseBook(ctx, tx, owner, asset)
	return book, mapErr(ctx, err)
}

func readLeaseBook(ctx context.Context, tx *sql.Tx, owner, asset string) (store.LeaseBook, error) {
	var book store.LeaseBook
	var err error
	if book.Available, err = balance(ctx, tx, store.UserAccount(owner), asset); err != nil {
		return book, err
	}
	if book.Held, err = balance(ctx, tx, store.HeldAccount(owner), asset); err != nil {
		return book, err
	}
	rows, err := tx.QueryContext(ctx, `SELECT `+holdColumns+` FROM ledger_holds
WHERE owner = ? AND asset = ? AND lease = 1 AND state = 'held'
ORDER BY created_at_ms, hold_id LIMIT ?`, owner, asset, store.MaxOpenLeases)
	if err != nil {
		return book, err
	}
	defer func() { _ = rows.Close() }() // rows.Err reports what iterating hit
	for rows.Next() {
		h, err := scanHold(rows)
		if err != nil {
			return book, err
		}
		book.Leases = append(book.Leases, h)
	}
	return book, rows.Err()
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

var _ store.Leases = (*DB)(nil)
