package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/llm4agents/llm4agents/internal/store"
)

// The receipt log's anchors (store.LogAnchors), in the table of migration
// 0013. Each call is one statement, or two for a record of a transaction
// already recorded: the insert skips it (ON CONFLICT DO NOTHING waits for a
// concurrent insert of the same transaction to commit), and a second
// statement, which then sees the committed row, compares it.

const logAnchorColumns = `tx_hash, size, root, network, contract, sender, sent_at_ms, block_number`

// insertLogAnchor records an anchor ($2..$7) at time $1 (nowExpr); no row
// when the transaction is recorded already.
const insertLogAnchor = withNow + `INSERT INTO log_anchors (tx_hash, size, root, network, contract, sender, sent_at_ms)
SELECT $2::text, $3::bigint, $4::bytea, $5::text, $6::text, $7::text, n.ms FROM n
ON CONFLICT (tx_hash) DO NOTHING
RETURNING tx_hash`

// RecordAnchor implements store.LogAnchors.
func (db *DB) RecordAnchor(ctx context.Context, a store.LogAnchor) (err error) {
	defer store.Wrap(&err, "postgres", "record anchor %s", a.TxHash)
	if err := store.CheckLogAnchor(a); err != nil {
		return err
	}
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return err
	}
	defer cancel()

	var hash string
	err = db.pool.QueryRow(ctx, insertLogAnchor, db.nowArg(), a.TxHash, a.Size, a.Root[:], a.Network, a.Contract, a.Sender).Scan(&hash)
	if !errors.Is(err, pgx.ErrNoRows) {
		return db.mapErr(ctx, err)
	}
	cur, err := scanLogAnchor(db.pool.QueryRow(ctx, `SELECT `+logAnchorColumns+` FROM log_anchors WHERE tx_hash = $1`, a.TxHash))
	if err != nil {
		return db.mapErr(ctx, err)
	}
	return store.SameAnchor(cur, a)
}

// ConfirmAnchor implements store.LogAnchors.
func (db *DB) ConfirmAnchor(ctx context.Context, txHash string, block int64) (err error) {
	defer store.Wrap(&err, "postgres", "confirm anchor %s in block %d", txHash, block)
	if err := store.CheckConfirmAnchor(txHash, block); err != nil {
		return err
	}
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return err
	}
	defer cancel()

	tag, err := db.pool.Exec(ctx, `UPDATE log_anchors SET block_number = $2 WHERE tx_hash = $1`, txHash, block)
	if err != nil {
		return db.mapErr(ctx, err)
	}
	if tag.RowsAffected() != 1 {
		return fmt.Errorf("no anchor has transaction %s: %w", txHash, store.ErrNotFound)
	}
	return nil
}

// LogAnchors implements store.LogAnchors, reading log_anchors_recent
// backwards.
func (db *DB) LogAnchors(ctx context.Context, limit int) (_ []store.LogAnchor, err error) {
	defer store.Wrap(&err, "postgres", "log anchors")
	if err := store.CheckLogAnchorsLimit(limit); err != nil {
		return nil, err
	}
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return nil, err
	}
	defer cancel()

	rows, err := db.pool.Query(ctx, `SELECT `+logAnchorColumns+` FROM log_anchors
ORDER BY sent_at_ms DESC, size DESC, tx_hash DESC
LIMIT $1`, limit)
	if err != nil {
		return nil, db.mapErr(ctx, err)
	}
	out, err := collect(rows, func(row pgx.Row) (store.LogAnchor, error) { return scanLogAnchor(row) })
	if err != nil {
		return nil, db.mapErr(ctx, err)
	}
	if out == nil {
		out = []store.LogAnchor{}
	}
	return out, nil
}

// scanLogAnchor reads one row of logAnchorColumns.
func scanLogAnchor(row pgx.Row) (store.LogAnchor, error) {
	var a store.LogAnchor
	var root []byte
	var sentAt int64
	var block *int64
	if err := row.Scan(&a.TxHash, &a.Size, &root, &a.Network, &a.Contract, &a.Sender, &sentAt, &block); err != nil {
		return store.LogAnchor{}, err
	}
	if len(root) != len(a.Root) {
		return store.LogAnchor{}, fmt.Errorf("anchor %s has a root of %d bytes", a.TxHash, len(root))
	}
	a.Root = [32]byte(root)
	a.SentAt = time.UnixMilli(sentAt).UTC()
	if block != nil {
		a.Block = *block
	}
	return a, nil
}

var _ store.LogAnchors = (*DB)(nil)
