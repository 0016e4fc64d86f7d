package sqlite

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/llm4agents/llm4agents/internal/store"
)

// The receipt log (store.ReceiptLog), in the tables of migration 0012.
// Every write is one op of a write batch (writer.go): its checks and its
// writes run under the database's write lock, in a savepoint of their own,
// so a refused call (a conflicting leaf, a stale fence, an entry no longer
// pending, a hash index already stored) leaves nothing behind, and of two
// DB values integrating the same size, in one process or two, the second
// finds the size moved. Leases are judged by the store's clock (DB.Now).
//
// The batch writes run each of their statements once per row, prepared:
// SQLite runs a prepared statement in microseconds, so a batch costs
// milliseconds, with statements whose text does not depend on the batch's
// size. Queuing runs the writer's prepared statements (receiptStatements:
// a receipt's leaf is queued on every credit-paid call); an integration,
// one call for thousands of rows, prepares its own on the batch's
// transaction.

const (
	logStateColumns = `size, checkpoint, holder, fence, lease_until_ms`
	selectLogState  = `SELECT ` + logStateColumns + ` FROM log_state WHERE id = 1`
	nextLogSeq      = `UPDATE log_seq SET last = last + ? WHERE id = 1 RETURNING last`
	insertLogEntry  = `INSERT INTO log_entries (request_id, leaf, seq, queued_at_ms) VALUES (?, ?, ?, ?)
ON CONFLICT DO NOTHING`
	selectLogEntry = `SELECT request_id, leaf, idx FROM log_entries WHERE request_id = ?`
	// selectPending repeats the WHERE clause of log_entries_pending, so
	// the page is read from that index in order.
	selectPending = `SELECT request_id, leaf FROM log_entries WHERE idx IS NULL ORDER BY seq LIMIT ?`
	selectLeaves  = `SELECT idx, leaf FROM log_entries WHERE idx >= ? AND idx < ? ORDER BY idx`
	// selectHashes takes the indexes as one JSON array, so that one
	// statement serves any number of them.
	selectHashes = `SELECT storage_index, hash FROM log_hashes WHERE storage_index IN (SELECT value FROM json_each(?))`
)

// AppendLog implements store.ReceiptLog.
func (db *DB) AppendLog(ctx context.Context, entries []store.LogEntry) (err error) {
	defer store.Wrap(&err, "sqlite", "append %d log entries", len(entries))
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

	return mapErr(ctx, db.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		return queueLeaves(ctx, db.wtx(tx), db.nowMs(), entries)
	}))
}

// queueLeaves queues entries as pending, in their order, inside the op of a
// write batch; an entry already queued with the same leaf is left as it is.
// It stops at the first entry queued with another leaf, with ErrConflict,
// and the op's savepoint then undoes the entries queued before it.
func queueLeaves(ctx context.Context, tx wtx, now int64, entries []store.LogEntry) error {
	var last int64
	if err := tx.QueryRowContext(ctx, nextLogSeq, len(entries)).Scan(&last); err != nil {
		return fmt.Errorf("log queue counter: %w", err)
	}
	first := last - int64(len(entries)) + 1
	for i, e := range entries {
		// ON CONFLICT DO NOTHING: an id already queued is judged below,
		// not a driver error that would spoil the batch's transaction.
		res, err := tx.ExecContext(ctx, insertLogEntry, e.RequestID, e.Leaf, first+int64(i), now)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return err
		}
		if n == 1 {
			continue
		}
		cur, err := scanLogEntry(tx.QueryRowContext(ctx, selectLogEntry, e.RequestID))
		if err != nil {
			return err
		}
		if !bytes.Equal(cur.Leaf, e.Leaf) {
			return fmt.Errorf("request id %q has another leaf queued: %w", e.RequestID, store.ErrConflict)
		}
	}
	return nil
}

// TakeLogLease implements store.ReceiptLog. A holder whose lease ended
// takes it again as anyone would, with a new fence: between the end and
// now another integrator could have held it.
func (db *DB) TakeLogLease(ctx context.Context, holder string, ttl time.Duration) (_ store.LogState, _ bool, err error) {
	defer store.Wrap(&err, "sqlite", "take log lease for %q", holder)
	if err := store.CheckLogLease(holder, ttl); err != nil {
		return store.LogState{}, false, err
	}
	ttlMs := store.CeilMillis(ttl)
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return store.LogState{}, false, err
	}
	defer cancel()

	var st store.LogState
	var held bool
	err = db.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		now := db.nowMs()
		cur, until, err := scanLogState(tx.QueryRowContext(ctx, selectLogState))
		if err != nil {
			return err
		}
		fence := cur.Fence
		switch {
		case now < until && cur.Holder == holder: // a renewal keeps the fence
		case now >= until:
			fence++
		default:
			st = cur
			return nil
		}
		st, _, err = scanLogState(tx.QueryRowContext(ctx, `UPDATE log_state SET holder = ?, fence = ?, lease_until_ms = ?
WHERE id = 1
RETURNING `+logStateColumns, holder, fence, now+ttlMs))
		held = err == nil
		return err
	})
	if err != nil {
		return store.LogState{}, false, mapErr(ctx, err)
	}
	return st, held, nil
}

// ReleaseLogLease implements store.ReceiptLog. A lease that already ended
// is left ended; releasing twice succeeds.
func (db *DB) ReleaseLogLease(ctx context.Context, holder string, fence int64) (err error) {
	defer store.Wrap(&err, "sqlite", "release log lease of %q", holder)
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return err
	}
	defer cancel()

	return mapErr(ctx, db.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		// fence > 0: the state of a log whose lease was never taken
		// (holder '', fence 0) is nobody's to release.
		res, err := tx.ExecContext(ctx, `UPDATE log_state SET lease_until_ms = min(lease_until_ms, ?)
WHERE id = 1 AND holder = ? AND fence = ? AND fence > 0`, db.nowMs(), holder, fence)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n != 1 {
			if err == nil {
				err = fmt.Errorf("%q does not hold the lease under fence %d: %w", holder, fence, store.ErrFenced)
			}
			return err
		}
		return nil
	}))
}

// PendingLog implements store.ReceiptLog.
func (db *DB) PendingLog(ctx context.Context, limit int) (_ []store.LogEntry, err error) {
	defer store.Wrap(&err, "sqlite", "pending log entries")
	if err := store.CheckPendingLog(limit); err != nil {
		return nil, err
	}
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return nil, err
	}
	defer cancel()

	rows, err := db.ro.QueryContext(ctx, selectPending, limit)
	if err != nil {
		return nil, mapErr(ctx, err)
	}
	defer func() { _ = rows.Close() }() // rows.Err reports what iterating hit
	out := []store.LogEntry{}
	for rows.Next() {
		e := store.LogEntry{Index: -1}
		if err := rows.Scan(&e.RequestID, &e.Leaf); err != nil {
			return nil, mapErr(ctx, err)
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, mapErr(ctx, err)
	}
	return out, nil
}

// IntegrateLog implements store.ReceiptLog.
func (db *DB) IntegrateLog(ctx context.Context, fence, from int64, requestIDs []string, hashes []store.LogHash, checkpoint []byte) (err error) {
	defer store.Wrap(&err, "sqlite", "integrate %d log entries at %d", len(requestIDs), from)
	if err := store.CheckIntegrateLog(from, requestIDs, hashes, checkpoint); err != nil {
		return err
	}
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return err
	}
	defer cancel()

	return mapErr(ctx, db.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		var size, cur int64
		if err := tx.QueryRowContext(ctx, `SELECT size, fence FROM log_state WHERE id = 1`).Scan(&size, &cur); err != nil {
			return err
		}
		switch {
		case fence != cur:
			return fmt.Errorf("fence %d is stale, the lease's is %d: %w", fence, cur, store.ErrFenced)
		case size != from:
			return fmt.Errorf("the log's size is %d: %w", size, store.ErrFenced)
		}
		if err := setIndexes(ctx, tx, from, requestIDs); err != nil {
			return err
		}
		if err := insertHashes(ctx, tx, hashes); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `UPDATE log_state SET size = ?, checkpoint = ? WHERE id = 1`,
			from+int64(len(requestIDs)), checkpoint)
		return err
	}))
}

// setIndexes gives the entry of requestIDs[i] the index from+i, inside the
// op of IntegrateLog: ErrFenced, for the savepoint to undo the rest, at the
// first entry that is not pending.
func setIndexes(ctx context.Context, tx *sql.Tx, from int64, requestIDs []string) error {
	update, err := tx.PrepareContext(ctx, `UPDATE log_entries SET idx = ? WHERE request_id = ? AND idx IS NULL`)
	if err != nil {
		return err
	}
	defer func() { _ = update.Close() }() // closing a statement only frees it
	for i, id := range requestIDs {
		res, err := update.ExecContext(ctx, from+int64(i), id)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n != 1 {
			if err == nil {
				err = fmt.Errorf("request id %q is not a pending entry: %w", id, store.ErrFenced)
			}
			return err
		}
	}
	return nil
}

// insertHashes stores hashes, inside the op of IntegrateLog: an error that
// is no sentinel, for the savepoint to undo the rest, at the first index
// already stored (or repeated in hashes).
func insertHashes(ctx context.Context, tx *sql.Tx, hashes []store.LogHash) error {
	insert, err := tx.PrepareContext(ctx, `INSERT INTO log_hashes (storage_index, hash) VALUES (?, ?) ON CONFLICT DO NOTHING`)
	if err != nil {
		return err
	}
	defer func() { _ = insert.Close() }() // closing a statement only frees it
	for _, h := range hashes {
		res, err := insert.ExecContext(ctx, h.Index, h.Hash[:])
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n != 1 {
			if err == nil {
				err = fmt.Errorf("hash index %d is already stored", h.Index)
			}
			return err
		}
	}
	return nil
}

// LogState implements store.ReceiptLog.
func (db *DB) LogState(ctx context.Context) (_ store.LogState, err error) {
	defer store.Wrap(&err, "sqlite", "log state")
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return store.LogState{}, err
	}
	defer cancel()

	st, _, err := scanLogState(db.ro.QueryRowContext(ctx, selectLogState))
	if err != nil {
		return store.LogState{}, mapErr(ctx, err)
	}
	return st, nil
}

// LogHashes implements store.ReceiptLog.
func (db *DB) LogHashes(ctx context.Context, indexes []int64) (_ [][32]byte, err error) {
	defer store.Wrap(&err, "sqlite", "%d log hashes", len(indexes))
	if err := store.CheckLogHashes(indexes); err != nil {
		return nil, err
	}
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return nil, err
	}
	defer cancel()

	list := []byte{'['}
	for i, x := range indexes {
		if i > 0 {
			list = append(list, ',')
		}
		list = strconv.AppendInt(list, x, 10)
	}
	list = append(list, ']')
	rows, err := db.ro.QueryContext(ctx, selectHashes, string(list))
	if err != nil {
		return nil, mapErr(ctx, err)
	}
	defer func() { _ = rows.Close() }() // rows.Err reports what iterating hit
	found := make(map[int64][32]byte, len(indexes))
	for rows.Next() {
		var x int64
		var h []byte
		if err := rows.Scan(&x, &h); err != nil {
			return nil, mapErr(ctx, err)
		}
		if len(h) != 32 {
			return nil, fmt.Errorf("hash %d has %d bytes", x, len(h))
		}
		found[x] = [32]byte(h)
	}
	if err := rows.Err(); err != nil {
		return nil, mapErr(ctx, err)
	}
	return store.OrderLogHashes(indexes, found)
}

// LogEntry implements store.ReceiptLog.
func (db *DB) LogEntry(ctx context.Context, requestID string) (_ store.LogEntry, err error) {
	defer store.Wrap(&err, "sqlite", "log entry %q", requestID)
	if !store.ValidID(requestID) {
		return store.LogEntry{}, store.ErrNotFound // never queued
	}
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return store.LogEntry{}, err
	}
	defer cancel()

	e, err := scanLogEntry(db.ro.QueryRowContext(ctx, selectLogEntry, requestID))
	if err != nil {
		return store.LogEntry{}, mapErr(ctx, err)
	}
	return e, nil
}

// LogLeaves implements store.ReceiptLog.
func (db *DB) LogLeaves(ctx context.Context, from, to int64) (_ [][]byte, err error) {
	defer store.Wrap(&err, "sqlite", "log leaves %d..%d", from, to)
	if err := store.CheckLogRange(from, to); err != nil {
		return nil, err
	}
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return nil, err
	}
	defer cancel()

	rows, err := db.ro.QueryContext(ctx, selectLeaves, from, to)
	if err != nil {
		return nil, mapErr(ctx, err)
	}
	defer func() { _ = rows.Close() }() // rows.Err reports what iterating hit
	out := make([][]byte, 0, to-from)
	for rows.Next() {
		var x int64
		var leaf []byte
		if err := rows.Scan(&x, &leaf); err != nil {
			return nil, mapErr(ctx, err)
		}
		if x != from+int64(len(out)) {
			break // a gap: reported below
		}
		out = append(out, leaf)
	}
	if err := rows.Err(); err != nil {
		return nil, mapErr(ctx, err)
	}
	if len(out) != int(to-from) {
		return nil, fmt.Errorf("leaf %d is not integrated: %w", from+int64(len(out)), store.ErrNotFound)
	}
	return out, nil
}

// scanLogEntry reads request_id, leaf, idx; a NULL idx (pending) is -1.
func scanLogEntry(row interface{ Scan(...any) error }) (store.LogEntry, error) {
	var e store.LogEntry
	var idx sql.NullInt64
	if err := row.Scan(&e.RequestID, &e.Leaf, &idx); err != nil {
		return store.LogEntry{}, err
	}
	e.Index = -1
	if idx.Valid {
		e.Index = idx.Int64
	}
	return e, nil
}

// scanLogState reads one row of logStateColumns, and returns the lease's
// end in unix milliseconds besides, for the lease decisions.
func scanLogState(row interface{ Scan(...any) error }) (store.LogState, int64, error) {
	var st store.LogState
	var until int64
	if err := row.Scan(&st.Size, &st.Checkpoint, &st.Holder, &st.Fence, &until); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			err = errors.New("log state row missing")
		}
		return store.LogState{}, 0, err
	}
	if until != 0 {
		st.LeaseUntil = time.UnixMilli(until).UTC()
	}
	return st, until, nil
}

var _ store.ReceiptLog = (*DB)(nil)
