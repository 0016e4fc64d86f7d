package postgres

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/llm4agents/llm4agents/internal/store"
)

// Signed receipts (store.Receipts), in the table of migration 0008. A put is
// an INSERT ... ON CONFLICT DO NOTHING and, when the id exists, a read in a
// statement of its own: under READ COMMITTED a second statement sees the
// row a concurrent put committed while the insert waited for it, which a
// read inside the insert's statement (its snapshot taken before) would not.

const receiptColumns = `request_id, owner, key_id, seq, envelope, created_at_ms`

// PutReceipt implements store.Receipts.
func (db *DB) PutReceipt(ctx context.Context, r store.StoredReceipt) (err error) {
	defer wrap(&err, "put receipt %q", r.RequestID)
	if err := r.Validate(); err != nil {
		return err
	}
	ctx, cancel, err := db.opCtx(ctx)
	if err != nil {
		return err
	}
	defer cancel()

	tag, err := db.pool.Exec(ctx, withNow+`INSERT INTO receipts (`+receiptColumns+`)
SELECT $2, $3, $4, $5, $6, n.ms FROM n
ON CONFLICT DO NOTHING`, db.nowArg(), r.RequestID, r.Owner, r.KeyID, r.Seq, r.Envelope)
	if err != nil {
		return db.mapErr(ctx, err)
	}
	if tag.RowsAffected() == 1 {
		return nil
	}
	cur, err := scanReceipt(db.pool.QueryRow(ctx, `SELECT `+receiptColumns+` FROM receipts WHERE request_id = $1`, r.RequestID))
	if err != nil {
		return db.mapErr(ctx, err)
	}
	if cur.Owner != r.Owner || cur.KeyID != r.KeyID || cur.Seq != r.Seq || !bytes.Equal(cur.Envelope, r.Envelope) {
		return fmt.Errorf("request id holds another receipt: %w", store.ErrConflict)
	}
	return nil
}

// Receipt implements store.Receipts.
func (db *DB) Receipt(ctx context.Context, requestID string) (_ store.StoredReceipt, err error) {
	defer wrap(&err, "receipt %q", requestID)
	if !store.ValidID(requestID) {
		return store.StoredReceipt{}, store.ErrNotFound // never stored
	}
	ctx, cancel, err := db.opCtx(ctx)
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
// request id byte by byte (COLLATE "C"), as SQLite orders them.
func (db *DB) ReceiptsOf(ctx context.Context, owner string, before int64, limit int) (_ []store.StoredReceipt, err error) {
	defer wrap(&err, "receipts of %q", owner)
	if !store.ValidOwner(owner) {
		return nil, errors.New("invalid owner")
	}
	if limit < 1 || limit > store.MaxReceiptsPage {
		return nil, fmt.Errorf("limit %d is outside 1..%d", limit, store.MaxReceiptsPage)
	}
	if before <= 0 {
		before = math.MaxInt64
	}
	ctx, cancel, err := db.opCtx(ctx)
	if err != nil {
		return nil, err
	}
	defer cancel()

	rows, err := db.pool.Query(ctx, `SELECT `+receiptColumns+` FROM receipts
WHERE owner = $1 AND seq < $2
ORDER BY seq DESC, request_id COLLATE "C" DESC
LIMIT $3`, owner, before, limit)
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

func scanReceipt(row pgx.Row) (store.StoredReceipt, error) {
	var r store.StoredReceipt
	var created int64
	if err := row.Scan(&r.RequestID, &r.Owner, &r.KeyID, &r.Seq, &r.Envelope, &created); err != nil {
		return store.StoredReceipt{}, err
	}
	r.CreatedAt = time.UnixMilli(created).UTC()
	return r, nil
}

var _ store.Receipts = (*DB)(nil)
