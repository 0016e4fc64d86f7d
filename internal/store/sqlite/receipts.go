package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"time"

	"github.com/llm4agents/llm4agents/internal/store"
)

// Signed receipts (store.Receipts, store.RecentReceipts), in the table of
// the receipts migration.
// A put is one op of a write batch (writer.go): the insert and, when the id
// exists, the comparison with the stored receipt run under the database's
// write lock, so two processes putting one id end with one row. A receipt's
// leaf is queued in the receipt log (receiptlog.go) by the same op, so the
// op's savepoint undoes the receipt when the leaf conflicts.

const receiptColumns = `request_id, owner, key_id, seq, envelope, created_at_ms`

// The statements of a put, which the writer prepares (receiptStatements);
// reads on the read pool use selectReceipt too.
const (
	// ON CONFLICT DO NOTHING: an existing id is judged by insertReceipt,
	// not a driver error that would spoil the batch's transaction.
	insertReceiptRow = `INSERT INTO receipts (` + receiptColumns + `)
VALUES (?, ?, ?, ?, ?, ?)
ON CONFLICT DO NOTHING`
	selectReceipt = `SELECT ` + receiptColumns + ` FROM receipts WHERE request_id = ?`
)

// receiptStatements returns the statements a put runs, a receipt's leaf
// queued included, for the writer to prepare: every credit-paid call
// makes one.
func receiptStatements() []string {
	return []string{insertReceiptRow, selectReceipt, nextLogSeq, insertLogEntry, selectLogEntry, nextSeq, reserveSeqsStmt}
}

// PutReceipt implements store.Receipts.
func (db *DB) PutReceipt(ctx context.Context, r store.StoredReceipt) (err error) {
	defer store.Wrap(&err, "sqlite", "put receipt %q", r.RequestID)
	if err := r.Validate(); err != nil {
		return err
	}
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return err
	}
	defer cancel()

	err = db.write(ctx, func(ctx context.Context, sqlTx *sql.Tx) error {
		return putReceipt(ctx, db.wtx(sqlTx), db.nowMs(), r)
	})
	return mapErr(ctx, err)
}

// putReceipt is PutReceipt's op, inside a write batch.
func putReceipt(ctx context.Context, tx wtx, now int64, r store.StoredReceipt) error {
	if err := insertReceipt(ctx, tx, now, r); err != nil || len(r.Leaf) == 0 {
		return err
	}
	// Queued whether the receipt was new or a replay: a replay of a put
	// whose leaf is queued changes nothing, and one whose receipt was kept
	// without a leaf queues it now, as AppendLog would.
	return queueLeaves(ctx, tx, now, []store.LogEntry{{RequestID: r.RequestID, Leaf: r.Leaf}})
}

// insertReceipt stores r unless its request id is taken, inside the op of
// a write batch: nil if r is new or the receipt stored under its id,
// ErrConflict if another receipt is.
func insertReceipt(ctx context.Context, tx wtx, now int64, r store.StoredReceipt) error {
	return insertReceiptFrom(ctx, tx, now, r, nil)
}

// insertReceiptFrom is insertReceipt taking the seq of a receipt put with
// Seq 0 from seqs, when not nil, instead of drawing it alone.
func insertReceiptFrom(ctx context.Context, tx wtx, now int64, r store.StoredReceipt, seqs *seqBlock) error {
	seq := r.Seq
	if seq == 0 {
		// Drawn even when the id turns out taken: the ledger's seqs may have
		// gaps, and a replay is rare.
		var err error
		if seq, err = seqs.take(ctx, tx); err != nil {
			return err
		}
	}
	res, err := tx.ExecContext(ctx, insertReceiptRow, r.RequestID, r.Owner, r.KeyID, seq, r.Envelope, now)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil || n == 1 {
		return err
	}
	cur, err := scanReceipt(tx.QueryRowContext(ctx, selectReceipt, r.RequestID))
	if err != nil {
		return err
	}
	return sameReceipt(cur, r)
}

// Receipt implements store.Receipts.
func (db *DB) Receipt(ctx context.Context, requestID string) (_ store.StoredReceipt, err error) {
	defer store.Wrap(&err, "sqlite", "receipt %q", requestID)
	if !store.ValidID(requestID) {
		return store.StoredReceipt{}, store.ErrNotFound // never stored
	}
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return store.StoredReceipt{}, err
	}
	defer cancel()

	r, err := scanReceipt(db.ro.QueryRowContext(ctx, selectReceipt, requestID))
	if err != nil {
		return store.StoredReceipt{}, mapErr(ctx, err)
	}
	return r, nil
}

// ReceiptsOf implements store.Receipts. The key filter is a condition of
// its own, added only when asked for, rather than one query with "key_id = ?
// OR ? is empty": an OR on a parameter hides the condition from the query
// planner, which could then use no index on key_id.
func (db *DB) ReceiptsOf(ctx context.Context, q store.ReceiptsQuery) (_ []store.StoredReceipt, err error) {
	defer store.Wrap(&err, "sqlite", "receipts of %q", q.Owner)
	if err := q.Validate(); err != nil {
		return nil, err
	}
	before := q.Before
	if before <= 0 {
		before = math.MaxInt64
	}
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return nil, err
	}
	defer cancel()

	args := []any{q.Owner, before, q.Limit}
	if q.KeyID != "" {
		args = append(args, q.KeyID)
	}
	return db.receipts(ctx, selectReceiptsOf(q.KeyID != ""), args...)
}

// selectReceiptsOf is the query of ReceiptsOf, with the key filter when
// keyed; its arguments are owner, before, limit and, when keyed, the key id.
// Each form has an index that serves it in order (receipts_owner, and
// receipts_owner_key of migration 0010).
func selectReceiptsOf(keyed bool) string {
	where := `owner = ?1 AND seq < ?2`
	if keyed {
		where += ` AND key_id = ?4`
	}
	return `SELECT ` + receiptColumns + ` FROM receipts
WHERE ` + where + `
ORDER BY seq DESC, request_id DESC
LIMIT ?3`
}

// RecentReceipts implements store.RecentReceipts.
func (db *DB) RecentReceipts(ctx context.Context, since time.Time, limit int) (_ []store.StoredReceipt, err error) {
	defer store.Wrap(&err, "sqlite", "recent receipts")
	if err := store.CheckRecentReceipts(limit); err != nil {
		return nil, err
	}
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return nil, err
	}
	defer cancel()

	return db.receipts(ctx, selectRecentReceipts, since.UnixMilli(), limit)
}

// receipts runs a listing query on the read pool and scans its receipts;
// none is an empty slice, not nil.
func (db *DB) receipts(ctx context.Context, query string, args ...any) ([]store.StoredReceipt, error) {
	rows, err := db.ro.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, mapErr(ctx, err)
	}
	defer func() { _ = rows.Close() }() // rows.Err reports what iterating hit
	out := []store.StoredReceipt{}
	for rows.Next() {
		r, err := scanReceipt(rows)
		if err != nil {
			return nil, mapErr(ctx, err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, mapErr(ctx, err)
	}
	return out, nil
}

// selectRecentReceipts is the query of RecentReceipts (arguments since in
// unix ms, limit), which receipts_created (migration 0016) serves in order.
const selectRecentReceipts = `SELECT ` + receiptColumns + ` FROM receipts
WHERE created_at_ms >= ?1
ORDER BY created_at_ms DESC, request_id DESC
LIMIT ?2`

// sameReceipt tells a repeated put (nil) from a conflicting one.
func sameReceipt(cur, r store.StoredReceipt) error {
	if !store.SameReceipt(cur, r) {
		return fmt.Errorf("request id holds another receipt: %w", store.ErrConflict)
	}
	return nil
}

func scanReceipt(row interface{ Scan(...any) error }) (store.StoredReceipt, error) {
	var r store.StoredReceipt
	var created int64
	if err := row.Scan(&r.RequestID, &r.Owner, &r.KeyID, &r.Seq, &r.Envelope, &created); err != nil {
		return store.StoredReceipt{}, err
	}
	r.CreatedAt = time.UnixMilli(created).UTC()
	return r, nil
}

var (
	_ store.Receipts       = (*DB)(nil)
	_ store.RecentReceipts = (*DB)(nil)
)

// reserveSeqsStmt draws a block of the ledger's sequence (reserveSeqs).
const reserveSeqsStmt = `UPDATE ledger_seq SET last = last + ? WHERE id = 1 RETURNING last`

// seqBlock hands out the numbers reserveSeqs drew, in order; once they are
// used up (or for a nil block) take draws one more alone.
type seqBlock struct{ next, last int64 }

// reserveSeqs draws n numbers of the ledger's sequence in one statement,
// for a batch's receipts, instead of one statement per receipt. The
// ledger's seqs may have gaps, so the numbers a batch does not use (a
// refused or replayed draw) are simply skipped; the writer is alone in its
// transaction, so the block is the batch's in order.
func reserveSeqs(ctx context.Context, tx wtx, n int) (*seqBlock, error) {
	if n <= 1 {
		return nil, nil // one statement either way
	}
	var last int64
	if err := tx.QueryRowContext(ctx, reserveSeqsStmt, n).Scan(&last); err != nil {
		return nil, err
	}
	return &seqBlock{next: last - int64(n) + 1, last: last}, nil
}

func (b *seqBlock) take(ctx context.Context, tx wtx) (int64, error) {
	if b != nil && b.next <= b.last {
		b.next++
		return b.next - 1, nil
	}
	var seq int64
	err := tx.QueryRowContext(ctx, nextSeq).Scan(&seq)
	return seq, err
}
