package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/llm4agents/llm4agents/internal/store"
)

// TakeRate implements store.Rates: one transaction locks the key's row of
// key_rates (creating it first), so concurrent takes from every replica
// are serial on it; the window is the server's clock (or DB.Now).
func (db *DB) TakeRate(ctx context.Context, t store.RateTake) (_ store.RateGrant, err error) {
	defer store.Wrap(&err, "postgres", "take rate of key %q", t.KeyID)
	if err := t.Validate(); err != nil {
		return store.RateGrant{}, err
	}
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return store.RateGrant{}, err
	}
	defer cancel()

	var g store.RateGrant
	var refused error // the take's own refusal, kept apart from the store's errors
	err = db.inTx(ctx, func(tx pgx.Tx) error {
		var nowMs int64
		err := tx.QueryRow(ctx, withNow+`, i AS (
    INSERT INTO key_rates (key_id, window_ms, requests, tokens) VALUES ($2, 0, 0, 0) ON CONFLICT DO NOTHING)
SELECT ms FROM n`, db.nowArg(), t.KeyID).Scan(&nowMs)
		if err != nil {
			return err
		}
		var row store.RateRow
		err = tx.QueryRow(ctx, `SELECT window_ms, requests, tokens FROM key_rates WHERE key_id = $1 FOR UPDATE`, t.KeyID).
			Scan(&row.WindowMs, &row.Requests, &row.Tokens)
		if err != nil {
			return err
		}
		g, row, refused = store.TakeRateAt(t, nowMs, row)
		if refused != nil {
			return nil //nolint:nilerr // nothing to write; the refusal is the answer, returned after the transaction
		}
		_, err = tx.Exec(ctx, `UPDATE key_rates SET window_ms = $2, requests = $3, tokens = $4 WHERE key_id = $1`,
			t.KeyID, row.WindowMs, row.Requests, row.Tokens)
		return err
	})
	switch {
	case err != nil:
		return store.RateGrant{}, err
	case refused != nil:
		return store.RateGrant{}, refused
	}
	return g, nil
}

var _ store.Rates = (*DB)(nil)
