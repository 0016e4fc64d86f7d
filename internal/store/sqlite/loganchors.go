package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/llm4agents/llm4agents/internal/store"
)

// The receipt log's anchors (store.LogAnchors), in the table of migration
// 0013. Each write is one op of a write batch (writer.go), so a record and
// its check for an existing one see no other writer in between; reads go to
// the read pool.

const (
	logAnchorColumns = `tx_hash, size, root, network, contract, sender, sent_at_ms, block_number`
	insertLogAnchor  = `INSERT INTO log_anchors (tx_hash, size, root, network, contract, sender, sent_at_ms)
VALUES (?, ?, ?, ?, ?, ?, ?)
ON CONFLICT DO NOTHING`
	selectLogAnchor = `SELECT ` + logAnchorColumns + ` FROM log_anchors WHERE tx_hash = ?`
	// selectLogAnchors reads log_anchors_recent backwards.
	selectLogAnchors = `SELECT ` + logAnchorColumns + ` FROM log_anchors
ORDER BY sent_at_ms DESC, size DESC, tx_hash DESC
LIMIT ?`
)

// RecordAnchor implements store.LogAnchors.
func (db *DB) RecordAnchor(ctx context.Context, a store.LogAnchor) (err error) {
	defer store.Wrap(&err, "sqlite", "record anchor %s", a.TxHash)
	if err := store.CheckLogAnchor(a); err != nil {
		return err
	}
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return err
	}
	defer cancel()

	return mapErr(ctx, db.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		// ON CONFLICT DO NOTHING: a transaction already recorded is judged
		// below, not a driver error that would spoil the batch's transaction.
		res, err := tx.ExecContext(ctx, insertLogAnchor, a.TxHash, a.Size, a.Root[:], a.Network, a.Contract, a.Sender, db.nowMs())
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 1 {
			return err
		}
		cur, err := scanLogAnchor(tx.QueryRowContext(ctx, selectLogAnchor, a.TxHash))
		if err != nil {
			return err
		}
		return store.SameAnchor(cur, a)
	}))
}

// ConfirmAnchor implements store.LogAnchors.
func (db *DB) ConfirmAnchor(ctx context.Context, txHash string, block int64) (err error) {
	defer store.Wrap(&err, "sqlite", "confirm anchor %s in block %d", txHash, block)
	if err := store.CheckConfirmAnchor(txHash, block); err != nil {
		return err
	}
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return err
	}
	defer cancel()

	return mapErr(ctx, db.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE log_anchors SET block_number = ? WHERE tx_hash = ?`, block, txHash)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n != 1 {
			if err == nil {
				err = fmt.Errorf("no anchor has transaction %s: %w", txHash, store.ErrNotFound)
			}
			return err
		}
		return nil
	}))
}

// LogAnchors implements store.LogAnchors.
func (db *DB) LogAnchors(ctx context.Context, limit int) (_ []store.LogAnchor, err error) {
	defer store.Wrap(&err, "sqlite", "log anchors")
	if err := store.CheckLogAnchorsLimit(limit); err != nil {
		return nil, err
	}
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return nil, err
	}
	defer cancel()

	rows, err := db.ro.QueryContext(ctx, selectLogAnchors, limit)
	if err != nil {
		return nil, mapErr(ctx, err)
	}
	defer func() { _ = rows.Close() }() // rows.Err reports what iterating hit
	out := []store.LogAnchor{}
	for rows.Next() {
		a, err := scanLogAnchor(rows)
		if err != nil {
			return nil, mapErr(ctx, err)
		}
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		return nil, mapErr(ctx, err)
	}
	return out, nil
}

// scanLogAnchor reads one row of logAnchorColumns.
func scanLogAnchor(row interface{ Scan(...any) error }) (store.LogAnchor, error) {
	var a store.LogAnchor
	var root []byte
	var sentAt int64
	var block sql.NullInt64
	if err := row.Scan(&a.TxHash, &a.Size, &root, &a.Network, &a.Contract, &a.Sender, &sentAt, &block); err != nil {
		return store.LogAnchor{}, err
	}
	if len(root) != len(a.Root) {
		return store.LogAnchor{}, fmt.Errorf("anchor %s has a root of %d bytes", a.TxHash, len(root))
	}
	a.Root = [32]byte(root)
	a.SentAt = time.UnixMilli(sentAt).UTC()
	a.Block = block.Int64 // 0 when NULL
	return a, nil
}

var _ store.LogAnchors = (*DB)(nil)
