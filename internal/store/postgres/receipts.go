package postgres

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/llm4agents/llm4agents/internal/store"
)

// Signed receipts (store.Receipts, store.RecentReceipts), in the table of
// migration 0008. A put is an INSERT ... ON CONFLICT DO NOTHING and, when
// the id exists, a read in a statement of its own: under READ COMMITTED a
// second statement sees the row a concurrent put committed while the
// insert waited for it, which a read inside the insert's statement (its
// snapshot taken before) would not.
// A put with a leaf first tries keepReceipt, one statement that keeps a new
// receipt and queues its new leaf; when either exists it fails whole, and
// the put is done again in a transaction that also queues the leaf
// (receiptlog.go) and rolls the receipt back when the leaf conflicts.

const receiptColumns = `request_id, owner, key_id, seq, envelope, created_at_ms`

// keepReceipt keeps a new receipt ($2..$6 at $1, nowExpr) and queues its
// leaf ($7) when there is one, in one statement that returns the request
// id: the common put in one round trip, where the transaction takes four,
// which halved the puts a second with a leaf; and a per-call capture's
// receipt in its batch (CaptureWithReceipt). Neither insert has ON
// CONFLICT: an id already kept or queued is a unique violation that rolls
// the whole statement back, and the transaction it is in.
const keepReceipt = withNow + `, r AS (
    INSERT INTO receipts (` + receiptColumns + `)
    SELECT $2, $3, $4, ` + drawnSeq + `, $6, n.ms FROM n
    RETURNING request_id),
l AS (
    INSERT INTO log_entries (request_id, leaf, seq, queued_at_ms)
    SELECT r.request_id, $7, nextval('log_entry_seq'), n.ms FROM n, r
    WHERE $7::bytea IS NOT NULL)
SELECT request_id FROM r`

// drawnSeq is a put's seq: $5, or a new one from the ledger's sequence
// when $5 is 0 (a receipt with no ledger entry, store.StoredReceipt.Seq).
const drawnSeq = `COALESCE(NULLIF($5::bigint, 0), nextval('ledger_entry_seq'))`

// uniqueViolation is the SQLSTATE of a duplicate key.
const uniqueViolation = "23505"

// PutReceipt implements store.Receipts.
func (db *DB) PutReceipt(ctx context.Context, r store.StoredReceipt) (err error) {
	defer store.Wrap(&err, "postgres", "put receipt %q", r.RequestID)
	if err := r.Validate(); err != nil {
		return err
	}
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return err
	}
	defer cancel()

	now := db.nowArg()
	if len(r.Leaf) == 0 {
		return db.mapOpErr(ctx, insertReceipt(ctx, db.pool, now, r))
	}
	_, err = db.pool.Exec(ctx, keepReceipt, now, r.RequestID, r.Owner, r.KeyID, r.Seq, r.Envelope, r.Leaf)
	if pe, ok := errors.AsType[*pgconn.PgError](err); !ok || pe.Code != uniqueViolation {
		return db.mapErr(ctx, err)
	}
	// Queued whether the receipt was new or a replay: a replay of a put
	// whose leaf is queued changes nothing, and one whose receipt was kept
	// without a leaf queues it now, as AppendLog would.
	return db.inTx(ctx, func(tx pgx.Tx) error {
		if err := insertReceipt(ctx, tx, now, r); err != nil {
			return err
		}
		return queueLeaves(ctx, tx, now, []string{r.RequestID}, [][]byte{r.Leaf})
	})
}

// insertReceipt stores r at time now (nowArg) unless its request id is
// taken, through q (the pool, or a transaction): nil if r is new or the
// receipt stored under its id, ErrConflict if another receipt is.
func insertReceipt(ctx context.Context, q querier, now *int64, r store.StoredReceipt) error {
	tag, err := q.Exec(ctx, withNow+`INSERT INTO receipts (`+receiptColumns+`)
SELECT $2, $3, $4, `+drawnSeq+`, $6, n.ms FROM n
ON CONFLICT DO NOTHING`, now, r.RequestID, r.Owner, r.KeyID, r.Seq, r.Envelope)
	if err != nil || tag.RowsAffected() == 1 {
		return err
	}
	cur, err := scanReceipt(q.QueryRow(ctx, `SELECT `+receiptColumns+` FROM receipts WHERE request_id = $1`, r.RequestID))
	if err != nil {
		return err
	}
	if !store.SameReceipt(cur, r) {
		return fmt.Errorf("request id holds another receipt: %w", store.ErrConflict)
	}
	return nil
}

// querier runs statements: the pool, or a transaction.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Receipt implements store.Receipts.
func (db *DB) Receipt(ctx context.Context, requestID string) (_ store.StoredReceipt, err error) {
	defer store.Wrap(&err, "postgres", "receipt %q", requestID)
	if !store.ValidID(requestID) {
		return store.StoredReceipt{}, store.ErrNotFound // never stored
	}
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return store.StoredReceipt{}, err
	}
	defer cancel()

	r, err := scanReceipt(db.pool.QueryRow(ctx, `SELECT `+receiptColumns+` FROM receipts WHERE request_id = $1`, requestID))
	if err != nil {
		return store.StoredReceipt{}, db.mapErr(ctx, err)
	}
	return r, nil
}

// ReceiptsOf implements store.Receipts. Receipts of one seq are ordered by
// request id byte by byte (COLLATE "C"), as SQLite orders them. The key
// filter is a condition of its own, added only when asked for, rather than
// one query with "key_id = $4 OR $4 is empty", which a generic plan could
// not match to receipts_owner_key (migration 0010).
func (db *DB) ReceiptsOf(ctx context.Context, q store.ReceiptsQuery) (_ []store.StoredReceipt, err error) {
	defer store.Wrap(&err, "postgres", "receipts of %q", q.Owner)
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

	where, args := `owner = $1 AND seq < $2`, []any{q.Owner, before, q.Limit}
	if q.KeyID != "" {
		where, args = where+` AND key_id = $4`, append(args, q.KeyID)
	}
	rows, err := db.pool.Query(ctx, `SELECT `+receiptColumns+` FROM receipts
WHERE `+where+`
ORDER BY seq DESC, request_id COLLATE "C" DESC
LIMIT $3`, args...)
	if err != nil {
		return nil, db.mapErr(ctx, err)
	}
	out, err := collect(rows, func(row pgx.Row) (store.StoredReceipt, error) { return scanReceipt(row) })
	if err != nil {
		return nil, db.mapErr(ctx, err)
	}
	if out == nil {
		out = []store.StoredReceipt{}
	}
	return out, nil
}

// RecentReceipts implements store.RecentReceipts. Receipts of one
// millisecond are ordered by request id byte by byte (COLLATE "C"), as
// SQLite and Redis order them: receipts_created (migration 0016) gives the
// rows by time, and the planner sorts only those of each millisecond by id
// (an incremental sort; the index's request_id has the database's
// collation, which the shared migration cannot name).
func (db *DB) RecentReceipts(ctx context.Context, since time.Time, limit int) (_ []store.StoredReceipt, err error) {
	defer store.Wrap(&err, "postgres", "recent receipts")
	if err := store.CheckRecentReceipts(limit); err != nil {
		return nil, err
	}
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return nil, err
	}
	defer cancel()

	rows, err := db.pool.Query(ctx, `SELECT `+receiptColumns+` FROM receipts
WHERE created_at_ms >= $1
ORDER BY created_at_ms DESC, request_id COLLATE "C" DESC
LIMIT $2`, since.UnixMilli(), limit)
	if err != nil {
		return nil, db.mapErr(ctx, err)
	}
	out, err := collect(rows, scanReceipt)
	if err != nil {
		return nil, db.mapErr(ctx, err)
	}
	if out == nil {
		out = []store.StoredReceipt{}
	}
	return out, nil
}

func scanReceipt(row pgx.Row) (store.StoredReceipt, error) {
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
