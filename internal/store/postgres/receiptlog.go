package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/llm4agents/llm4agents/internal/store"
)

// The receipt log (store.ReceiptLog), in the tables of migration 0012;
// queue order from log_entry_seq (see extras in schema.go), so that
// receipts queued in concurrent transactions never wait for one counter row.
//
// The lease is the one row of log_state, taken, renewed and released by one
// conditional UPDATE each, like a settlement claim (settlements.go): of
// concurrent takers exactly one finds the lease free. A batch of entries
// queued (AppendLog, PutReceipt with a leaf) and a batch integrated are
// transactions, because a refusal found halfway (a leaf that conflicts, an
// entry no longer pending, a hash index already stored) must undo what the
// batch wrote before it; each statement handles a whole batch, its rows
// passed as arrays, so a batch costs a few round trips whatever its size.
//
// IntegrateLog's first statement is the conditional UPDATE of log_state
// (WHERE size = from AND fence = fence): it decides, and it locks the row
// until the commit, so a concurrent integration of the same size waits for
// it, then finds the size moved and writes nothing.

const logStateColumns = `size, checkpoint, holder, fence, lease_until_ms`

// appendLog queues entries ($2 request ids, $3 leaves) at time $1
// (nowExpr), in their order, skipping ids already queued; conflictingLeaf
// then finds one whose queued leaf is not the one given.
const (
	appendLog = withNow + `INSERT INTO log_entries (request_id, leaf, seq, queued_at_ms)
SELECT u.id, u.leaf, nextval('log_entry_seq'), n.ms
FROM n, unnest($2::text[], $3::bytea[]) WITH ORDINALITY AS u(id, leaf, ord)
ORDER BY u.ord
ON CONFLICT (request_id) DO NOTHING`
	conflictingLeaf = `SELECT u.id
FROM unnest($1::text[], $2::bytea[]) AS u(id, leaf)
JOIN log_entries e ON e.request_id = u.id
WHERE e.leaf <> u.leaf
LIMIT 1`
)

// AppendLog implements store.ReceiptLog.
func (db *DB) AppendLog(ctx context.Context, entries []store.LogEntry) (err error) {
	defer store.Wrap(&err, "postgres", "append %d log entries", len(entries))
	if err := store.CheckAppendLog(entries); err != nil {
		return err
	}
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	if len(entries) == 0 {
		return nil
	}

	ids, leaves := make([]string, len(entries)), make([][]byte, len(entries))
	for i, e := range entries {
		ids[i], leaves[i] = e.RequestID, e.Leaf
	}
	now := db.nowArg()
	return db.inTx(ctx, func(tx pgx.Tx) error { return queueLeaves(ctx, tx, now, ids, leaves) })
}

// queueLeaves queues ids with leaves, inside a transaction that the caller
// rolls back when it returns ErrConflict: an id queued with another leaf,
// before or earlier in the same batch. Under READ COMMITTED the check, a
// statement of its own, sees the entries that concurrent transactions
// committed while the insert waited for them.
func queueLeaves(ctx context.Context, tx pgx.Tx, now *int64, ids []string, leaves [][]byte) error {
	tag, err := tx.Exec(ctx, appendLog, now, ids, leaves)
	if err != nil || tag.RowsAffected() == int64(len(ids)) {
		return err
	}
	var id string
	switch err := tx.QueryRow(ctx, conflictingLeaf, ids, leaves).Scan(&id); {
	case errors.Is(err, pgx.ErrNoRows):
		return nil
	case err != nil:
		return err
	}
	return fmt.Errorf("request id %q has another leaf queued: %w", id, store.ErrConflict)
}

// takeLogLease takes the lease for $2 until $1 (nowExpr) + $3 when it is
// free (ended: now >= lease_until_ms), or renews it when $2 holds it. A
// takeover draws the next fence; a renewal keeps it. No row when another
// holds it.
const takeLogLease = withNow + `UPDATE log_state AS s
SET holder = $2, lease_until_ms = n.ms + $3::bigint,
    fence = CASE WHEN s.holder = $2 AND s.lease_until_ms > n.ms THEN s.fence ELSE s.fence + 1 END
FROM n
WHERE s.id = 1 AND (s.lease_until_ms <= n.ms OR s.holder = $2)
RETURNING ` + logStateColumns

// TakeLogLease implements store.ReceiptLog. A holder whose lease ended
// takes it again as anyone would, with a new fence: between the end and
// now another integrator could have held it.
func (db *DB) TakeLogLease(ctx context.Context, holder string, ttl time.Duration) (_ store.LogState, _ bool, err error) {
	defer store.Wrap(&err, "postgres", "take log lease for %q", holder)
	if err := store.CheckLogLease(holder, ttl); err != nil {
		return store.LogState{}, false, err
	}
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return store.LogState{}, false, err
	}
	defer cancel()

	st, err := scanLogState(db.pool.QueryRow(ctx, takeLogLease, db.nowArg(), holder, store.CeilMillis(ttl)))
	if err == nil {
		return st, true, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return store.LogState{}, false, db.mapErr(ctx, err)
	}
	st, err = db.logState(ctx)
	return st, false, err
}

// ReleaseLogLease implements store.ReceiptLog. A lease that already ended
// is left ended; releasing twice succeeds.
func (db *DB) ReleaseLogLease(ctx context.Context, holder string, fence int64) (err error) {
	defer store.Wrap(&err, "postgres", "release log lease of %q", holder)
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return err
	}
	defer cancel()

	// fence > 0: the state of a log whose lease was never taken (holder
	// '', fence 0) is nobody's to release.
	tag, err := db.pool.Exec(ctx, withNow+`UPDATE log_state SET lease_until_ms = LEAST(lease_until_ms, n.ms)
FROM n
WHERE id = 1 AND holder = $2 AND fence = $3 AND fence > 0`, db.nowArg(), holder, fence)
	if err != nil {
		return db.mapErr(ctx, err)
	}
	if tag.RowsAffected() != 1 {
		return fmt.Errorf("%q does not hold the lease under fence %d: %w", holder, fence, store.ErrFenced)
	}
	return nil
}

// PendingLog implements store.ReceiptLog. The WHERE clause is the one of
// log_entries_pending, so the page is read from that index in order.
func (db *DB) PendingLog(ctx context.Context, limit int) (_ []store.LogEntry, err error) {
	defer store.Wrap(&err, "postgres", "pending log entries")
	if err := store.CheckPendingLog(limit); err != nil {
		return nil, err
	}
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return nil, err
	}
	defer cancel()

	rows, err := db.pool.Query(ctx, `SELECT request_id, leaf FROM log_entries WHERE idx IS NULL ORDER BY seq LIMIT $1`, limit)
	if err != nil {
		return nil, db.mapErr(ctx, err)
	}
	out, err := collect(rows, func(row pgx.Row) (store.LogEntry, error) {
		e := store.LogEntry{Index: -1}
		return e, row.Scan(&e.RequestID, &e.Leaf)
	})
	if err != nil {
		return nil, db.mapErr(ctx, err)
	}
	if out == nil {
		out = []store.LogEntry{}
	}
	return out, nil
}

// integrateState moves the log from size $2 to $3 with checkpoint $4,
// under fence $1, locking its row until the commit; no row when the fence
// is stale or the size moved.
const integrateState = `UPDATE log_state SET size = $3, checkpoint = $4
WHERE id = 1 AND fence = $1 AND size = $2
RETURNING size`

// IntegrateLog implements store.ReceiptLog, in one transaction: the state
// first (integrateState), then the entries' indexes, then the hashes.
func (db *DB) IntegrateLog(ctx context.Context, fence, from int64, requestIDs []string, hashes []store.LogHash, checkpoint []byte) (err error) {
	defer store.Wrap(&err, "postgres", "integrate %d log entries at %d", len(requestIDs), from)
	if err := store.CheckIntegrateLog(from, requestIDs, hashes, checkpoint); err != nil {
		return err
	}
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return err
	}
	defer cancel()

	indexes, values := make([]int64, len(hashes)), make([][]byte, len(hashes))
	for i := range hashes {
		indexes[i], values[i] = hashes[i].Index, hashes[i].Hash[:]
	}
	to := from + int64(len(requestIDs))
	return db.inTx(ctx, func(tx pgx.Tx) error {
		var size int64
		err := tx.QueryRow(ctx, integrateState, fence, from, to, checkpoint).Scan(&size)
		if errors.Is(err, pgx.ErrNoRows) {
			return db.whyFenced(ctx, tx, fence)
		}
		if err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `UPDATE log_entries AS e SET idx = $1::bigint + u.ord - 1
FROM unnest($2::text[]) WITH ORDINALITY AS u(id, ord)
WHERE e.request_id = u.id AND e.idx IS NULL`, from, requestIDs)
		if err != nil {
			return err
		}
		if n := tag.RowsAffected(); n != int64(len(requestIDs)) {
			return fmt.Errorf("%d of the %d request ids are not pending entries: %w", int64(len(requestIDs))-n, len(requestIDs), store.ErrFenced)
		}
		if len(hashes) == 0 {
			return nil
		}
		tag, err = tx.Exec(ctx, `INSERT INTO log_hashes (storage_index, hash)
SELECT * FROM unnest($1::bigint[], $2::bytea[])
ON CONFLICT DO NOTHING`, indexes, values)
		if err != nil {
			return err
		}
		if n := tag.RowsAffected(); n != int64(len(hashes)) {
			return fmt.Errorf("%d of the %d hash indexes are already stored or repeated", int64(len(hashes))-n, len(hashes))
		}
		return nil
	})
}

// whyFenced reads the state after integrateState changed nothing and says
// why, wrapping ErrFenced.
func (db *DB) whyFenced(ctx context.Context, tx pgx.Tx, fence int64) error {
	var size, cur int64
	if err := tx.QueryRow(ctx, `SELECT size, fence FROM log_state WHERE id = 1`).Scan(&size, &cur); err != nil {
		return err
	}
	if cur != fence {
		return fmt.Errorf("fence %d is stale, the lease's is %d: %w", fence, cur, store.ErrFenced)
	}
	return fmt.Errorf("the log's size is %d: %w", size, store.ErrFenced)
}

// LogState implements store.ReceiptLog.
func (db *DB) LogState(ctx context.Context) (_ store.LogState, err error) {
	defer store.Wrap(&err, "postgres", "log state")
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return store.LogState{}, err
	}
	defer cancel()
	return db.logState(ctx)
}

func (db *DB) logState(ctx context.Context) (store.LogState, error) {
	st, err := scanLogState(db.pool.QueryRow(ctx, `SELECT `+logStateColumns+` FROM log_state WHERE id = 1`))
	if err != nil {
		return store.LogState{}, db.mapErr(ctx, err)
	}
	return st, nil
}

// LogHashes implements store.ReceiptLog.
func (db *DB) LogHashes(ctx context.Context, indexes []int64) (_ [][32]byte, err error) {
	defer store.Wrap(&err, "postgres", "%d log hashes", len(indexes))
	if err := store.CheckLogHashes(indexes); err != nil {
		return nil, err
	}
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return nil, err
	}
	defer cancel()

	rows, err := db.pool.Query(ctx, `SELECT storage_index, hash FROM log_hashes WHERE storage_index = ANY($1::bigint[])`, indexes)
	if err != nil {
		return nil, db.mapErr(ctx, err)
	}
	type stored struct {
		index int64
		hash  []byte
	}
	got, err := collect(rows, func(row pgx.Row) (stored, error) {
		var s stored
		return s, row.Scan(&s.index, &s.hash)
	})
	if err != nil {
		return nil, db.mapErr(ctx, err)
	}
	found := make(map[int64][32]byte, len(got))
	for _, s := range got {
		if len(s.hash) != 32 {
			return nil, fmt.Errorf("hash %d has %d bytes", s.index, len(s.hash))
		}
		found[s.index] = [32]byte(s.hash)
	}
	return store.OrderLogHashes(indexes, found)
}

// LogEntry implements store.ReceiptLog.
func (db *DB) LogEntry(ctx context.Context, requestID string) (_ store.LogEntry, err error) {
	defer store.Wrap(&err, "postgres", "log entry %q", requestID)
	if !store.ValidID(requestID) {
		return store.LogEntry{}, store.ErrNotFound // never queued
	}
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return store.LogEntry{}, err
	}
	defer cancel()

	var e store.LogEntry
	var idx *int64
	err = db.pool.QueryRow(ctx, `SELECT request_id, leaf, idx FROM log_entries WHERE request_id = $1`, requestID).
		Scan(&e.RequestID, &e.Leaf, &idx)
	if err != nil {
		return store.LogEntry{}, db.mapErr(ctx, err)
	}
	e.Index = -1
	if idx != nil {
		e.Index = *idx
	}
	return e, nil
}

// LogLeaves implements store.ReceiptLog.
func (db *DB) LogLeaves(ctx context.Context, from, to int64) (_ [][]byte, err error) {
	defer store.Wrap(&err, "postgres", "log leaves %d..%d", from, to)
	if err := store.CheckLogRange(from, to); err != nil {
		return nil, err
	}
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return nil, err
	}
	defer cancel()

	rows, err := db.pool.Query(ctx, `SELECT idx, leaf FROM log_entries WHERE idx >= $1 AND idx < $2 ORDER BY idx`, from, to)
	if err != nil {
		return nil, db.mapErr(ctx, err)
	}
	var n int64
	leaves, err := collect(rows, func(row pgx.Row) ([]byte, error) {
		var x int64
		var leaf []byte
		if err := row.Scan(&x, &leaf); err != nil {
			return nil, err
		}
		if x != from+n {
			return nil, fmt.Errorf("leaf %d is not integrated: %w", from+n, store.ErrNotFound)
		}
		n++
		return leaf, nil
	})
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, err
	case err != nil:
		return nil, db.mapErr(ctx, err)
	case n != to-from:
		return nil, fmt.Errorf("leaf %d is not integrated: %w", from+n, store.ErrNotFound)
	}
	return leaves, nil
}

// scanLogState reads one row of logStateColumns.
func scanLogState(row pgx.Row) (store.LogState, error) {
	var st store.LogState
	var until int64
	if err := row.Scan(&st.Size, &st.Checkpoint, &st.Holder, &st.Fence, &until); err != nil {
		return store.LogState{}, err
	}
	if until != 0 {
		st.LeaseUntil = time.UnixMilli(until).UTC()
	}
	return st, nil
}

var _ store.ReceiptLog = (*DB)(nil)
