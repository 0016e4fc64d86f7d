package sqlite

import (
	"context"
	"database/sql"
	"errors"

	"github.com/llm4agents/llm4agents/internal/store"
)

// TakeRate implements store.Rates: one write op reads the key's row of
// key_rates and writes it back, under the database's write lock, so takes
// from every process on the file are serial.
func (db *DB) TakeRate(ctx context.Context, t store.RateTake) (_ store.RateGrant, err error) {
	defer store.Wrap(&err, "sqlite", "take rate of key %q", t.KeyID)
	if err := t.Validate(); err != nil {
		return store.RateGrant{}, err
	}
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return store.RateGrant{}, err
	}
	defer cancel()

	var g store.RateGrant
	err = db.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		var row store.RateRow
		err := tx.QueryRowContext(ctx, `SELECT window_ms, requests, tokens FROM key_rates WHERE key_id = ?`, t.KeyID).
			Scan(&row.WindowMs, &row.Requests, &row.Tokens)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		g, row, err = store.TakeRateAt(t, db.nowMs(), row)
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO key_rates (key_id, window_ms, requests, tokens) VALUES (?, ?, ?, ?)
ON CONFLICT (key_id) DO UPDATE SET window_ms = excluded.window_ms, requests = excluded.requests, tokens = excluded.tokens`,
			t.KeyID, row.WindowMs, row.Requests, row.Tokens)
		return err
	})
	if err != nil {
		return store.RateGrant{}, mapErr(ctx, err)
	}
	return g, nil
}

var _ store.Rates = (*DB)(nil)
