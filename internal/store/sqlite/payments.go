package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/llm4agents/llm4agents/internal/store"
)

// Payment claims (store.Payments), in the payments table of migration 0002.
//
// Every write reads and writes as one op of a write batch (writer.go), inside
// the batch's IMMEDIATE transaction, so a read-then-write decision (claim,
// takeover, release, update) sees no other writer in between, on any number of
// DB values.
//
// An expired row (see store.Payments) stays in the table until
// PurgeExpiredPayments deletes it or a claim replaces it.

const paymentColumns = `payment_key, network, payer, amount, state, tx_hash, owner,
    fence, lease_until_ms, expires_at_ms, created_at_ms, updated_at_ms,
    staged_status, staged_content_type, staged_body, staged_fingerprint`

// selectPayment reads the row for a key, expired or not; callers judge expiry
// with the clock of the op.
const selectPayment = `SELECT ` + paymentColumns + ` FROM payments WHERE payment_key = ?`

// ClaimPayment implements store.Payments, reading and writing as one op of a
// write batch (writer.go).
func (db *DB) ClaimPayment(ctx context.Context, c store.PaymentClaim, lease time.Duration) (_ store.PaymentClaim, _ bool, err error) {
	defer store.Wrap(&err, "sqlite", "claim payment %q", c.Key)
	if err := store.CheckPaymentClaim(c, lease); err != nil {
		return store.PaymentClaim{}, false, err
	}
	// Round both up, so neither is ever shorter than asked.
	leaseMs := store.CeilMillis(lease)
	expiresMs := store.CeilUnixMilli(c.ExpiresAt)
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return store.PaymentClaim{}, false, err
	}
	defer cancel()

	var rec, prev store.PaymentClaim
	var won bool
	var event string // what to log once committed: "took over", "replaced expired"
	err = db.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		now := db.nowMs()
		if expiresMs <= now {
			return fmt.Errorf("expiry %s is not after the store's time %s",
				c.ExpiresAt.UTC().Format(time.RFC3339Nano), time.UnixMilli(now).UTC().Format(time.RFC3339Nano))
		}
		cur, err := scanPayment(tx.QueryRowContext(ctx, selectPayment, c.Key))
		expired := err == nil && now >= cur.ExpiresAt.UnixMilli()
		switch {
		case errors.Is(err, sql.ErrNoRows), expired:
			if expired {
				if _, err := tx.ExecContext(ctx, `DELETE FROM payments WHERE payment_key = ?`, c.Key); err != nil {
					return err
				}
				event, prev = "replaced expired", cur
			}
			fence, err := nextPaymentFence(ctx, tx)
			if err != nil {
				return err
			}
			rec, err = scanPayment(tx.QueryRowContext(ctx, `INSERT INTO payments (
    payment_key, network, payer, amount, state, owner,
    fence, lease_until_ms, expires_at_ms, created_at_ms, updated_at_ms)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
RETURNING `+paymentColumns,
				c.Key, c.Network, c.Payer, c.Amount, store.PaymentHeld, c.Owner,
				fence, now+leaseMs, expiresMs, now, now))
			won = err == nil
			return err
		case err != nil:
			return err
		case cur.State == store.PaymentHeld && now >= cur.LeaseUntil.UnixMilli():
			fence, err := nextPaymentFence(ctx, tx)
			if err != nil {
				return err
			}
			rec, err = scanPayment(tx.QueryRowContext(ctx, `UPDATE payments
SET owner = ?, fence = ?, lease_until_ms = ?, updated_at_ms = ?
WHERE payment_key = ?
RETURNING `+paymentColumns,
				c.Owner, fence, now+leaseMs, now, c.Key))
			if err != nil {
				return err
			}
			won, event, prev = true, "took over", cur
			return nil
		default:
			rec = cur
			return nil
		}
	})
	if err != nil {
		return store.PaymentClaim{}, false, err
	}
	if event != "" { // logged once committed, with the caller's context
		db.log.InfoContext(ctx, event+" payment claim", "key", c.Key,
			"previous_owner", prev.Owner, "previous_state", prev.State, "owner", c.Owner, "fence", rec.Fence)
	}
	return rec, won, nil
}

// nextPaymentFence draws the next fencing token from the payments' counter.
func nextPaymentFence(ctx context.Context, tx *sql.Tx) (int64, error) {
	var fence int64
	err := tx.QueryRowContext(ctx, `UPDATE payment_fences SET last = last + 1 WHERE id = 1 RETURNING last`).Scan(&fence)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, errors.New("payment fence counter row missing")
	}
	return fence, err
}

// livePayment reads the record for key inside a write op and returns it if it
// exists, has not expired and carries fence: otherwise ErrNotFound (absent or
// expired) or ErrFenced (another fence).
func (db *DB) livePayment(ctx context.Context, tx *sql.Tx, key string, fence int64) (store.PaymentClaim, error) {
	cur, err := scanPayment(tx.QueryRowContext(ctx, selectPayment, key))
	if err != nil {
		return store.PaymentClaim{}, err
	}
	if db.nowMs() >= cur.ExpiresAt.UnixMilli() {
		return store.PaymentClaim{}, fmt.Errorf("record expired at %s: %w",
			cur.ExpiresAt.Format(time.RFC3339Nano), store.ErrNotFound)
	}
	if cur.Fence != fence {
		return store.PaymentClaim{}, fmt.Errorf("fence %d is stale, the record's is %d: %w", fence, cur.Fence, store.ErrFenced)
	}
	return cur, nil
}

// ReleasePayment implements store.Payments.
func (db *DB) ReleasePayment(ctx context.Context, key string, fence int64) (err error) {
	defer store.Wrap(&err, "sqlite", "release payment %q", key)
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return err
	}
	defer cancel()

	return db.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		cur, err := db.livePayment(ctx, tx, key, fence)
		if err != nil {
			return err
		}
		if cur.State == store.PaymentSettled {
			return fmt.Errorf("record is settled: %w", store.ErrFenced)
		}
		_, err = tx.ExecContext(ctx, `DELETE FROM payments WHERE payment_key = ?`, key)
		return err
	})
}

// UpdatePayment implements store.Payments.
func (db *DB) UpdatePayment(ctx context.Context, key string, fence int64, state store.PaymentState, txHash string) (err error) {
	defer store.Wrap(&err, "sqlite", "update payment %q to %s", key, state)
	if err := store.CheckPaymentUpdate(state); err != nil {
		return err
	}
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return err
	}
	defer cancel()

	return db.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		cur, err := db.livePayment(ctx, tx, key, fence)
		if err != nil {
			return err
		}
		if cur.State == store.PaymentSettled {
			if state == store.PaymentSettled && cur.TxHash == txHash {
				return nil
			}
			return fmt.Errorf("record is already settled with transaction %q: %w", cur.TxHash, store.ErrFenced)
		}
		_, err = tx.ExecContext(ctx, `UPDATE payments SET state = ?, tx_hash = ?, updated_at_ms = ? WHERE payment_key = ?`,
			state, txHash, db.nowMs(), key)
		return err
	})
}

// StagePayment implements store.Payments, in migration 0003's columns.
func (db *DB) StagePayment(ctx context.Context, key string, fence int64, r store.StagedResponse) (err error) {
	defer store.Wrap(&err, "sqlite", "stage payment %q", key)
	if err := store.CheckResponse(r.Status, r.Body); err != nil {
		return err
	}
	body := r.Body
	if body == nil {
		body = []byte{} // NULL means nothing staged
	}
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return err
	}
	defer cancel()

	return db.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		cur, err := db.livePayment(ctx, tx, key, fence)
		if err != nil {
			return err
		}
		if cur.State == store.PaymentSettled {
			return fmt.Errorf("record is settled: %w", store.ErrFenced)
		}
		_, err = tx.ExecContext(ctx, `UPDATE payments
SET staged_status = ?, staged_content_type = ?, staged_body = ?, staged_fingerprint = ?, updated_at_ms = ?
WHERE payment_key = ?`, r.Status, r.ContentType, body, r.Fingerprint, db.nowMs(), key)
		return err
	})
}

// Payment implements store.Payments: ErrNotFound if absent or expired.
func (db *DB) Payment(ctx context.Context, key string) (_ store.PaymentClaim, err error) {
	defer store.Wrap(&err, "sqlite", "payment %q", key)
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return store.PaymentClaim{}, err
	}
	defer cancel()

	c, err := scanPayment(db.ro.QueryRowContext(ctx, selectPayment+` AND expires_at_ms > ?`, key, db.nowMs()))
	if err != nil {
		return store.PaymentClaim{}, mapErr(ctx, err)
	}
	return c, nil
}

// selectStaged is the query of StagedPayments. The first line of its WHERE
// clause is migration 0009's partial index's own, so that the planner may
// use the index (a test checks that it does).
const selectStaged = `SELECT ` + paymentColumns + ` FROM payments
WHERE state IN ('pending', 'settled') AND tx_hash <> ''
    AND staged_content_type = ?
    AND (created_at_ms > ? OR (created_at_ms = ? AND payment_key > ?))
ORDER BY staged_content_type, created_at_ms, payment_key
LIMIT ?`

// StagedPayments implements store.StagedLister. Migration 0009 indexes
// exactly this query.
func (db *DB) StagedPayments(ctx context.Context, contentType string, afterCreated time.Time, afterKey string, limit int) (_ []store.PaymentClaim, err error) {
	defer store.Wrap(&err, "sqlite", "staged payments of %q", contentType)
	if err := store.ValidateStagedQuery(contentType, limit); err != nil {
		return nil, err
	}
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return nil, err
	}
	defer cancel()

	after := afterCreated.UnixMilli()
	rows, err := db.ro.QueryContext(ctx, selectStaged, contentType, after, after, afterKey, limit)
	if err != nil {
		return nil, mapErr(ctx, err)
	}
	defer func() { _ = rows.Close() }() // rows.Err reports what iterating hit
	out := []store.PaymentClaim{}
	for rows.Next() {
		c, err := scanPayment(rows)
		if err != nil {
			return nil, mapErr(ctx, err)
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, mapErr(ctx, err)
	}
	return out, nil
}

// PurgeExpiredPayments deletes expired claims (see store.Payments). limit
// bounds the work of one write op, which shares its batch's transaction and
// deadline with other writes: keep it in the hundreds or low thousands.
func (db *DB) PurgeExpiredPayments(ctx context.Context, limit int) (_ int, err error) {
	defer store.Wrap(&err, "sqlite", "purge expired payments")
	if err := store.CheckLimit(limit); err != nil {
		return 0, err
	}
	return db.purgeExpired(ctx, "payments", "payment_key", limit)
}

// purgeExpired deletes up to limit rows of table whose expires_at_ms has
// passed, oldest first, in one write op, and returns how many.
func (db *DB) purgeExpired(ctx context.Context, table, key string, limit int) (int, error) {
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return 0, err
	}
	defer cancel()
	var n int64
	err = db.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		// DELETE ... LIMIT is a compile-time option of SQLite; a subquery is
		// not. table and key are constants of this package, never input.
		q := `DELETE FROM ` + table + ` WHERE ` + key + ` IN (SELECT ` + key + ` FROM ` + table + //nolint:gosec // G202: table and key are this package's constants, never input.
			` WHERE expires_at_ms <= ? ORDER BY expires_at_ms, ` + key + ` LIMIT ?)`
		res, err := tx.ExecContext(ctx, q, db.nowMs(), limit)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return 0, mapErr(ctx, err)
	}
	return int(n), nil
}

// scanPayment reads one row of paymentColumns.
func scanPayment(row interface{ Scan(...any) error }) (store.PaymentClaim, error) {
	var c store.PaymentClaim
	var state string
	var leaseUntil, expires, created, updated int64
	var stStatus sql.NullInt64
	var stType sql.NullString
	var stBody []byte
	var stFP sql.NullString
	err := row.Scan(&c.Key, &c.Network, &c.Payer, &c.Amount, &state, &c.TxHash, &c.Owner,
		&c.Fence, &leaseUntil, &expires, &created, &updated, &stStatus, &stType, &stBody, &stFP)
	if err != nil {
		return store.PaymentClaim{}, err
	}
	if stStatus.Valid {
		if stBody == nil {
			stBody = []byte{}
		}
		c.Staged = &store.StagedResponse{Status: int(stStatus.Int64), ContentType: stType.String, Body: stBody, Fingerprint: stFP.String}
	}
	c.State = store.PaymentState(state)
	c.LeaseUntil = time.UnixMilli(leaseUntil).UTC()
	c.ExpiresAt = time.UnixMilli(expires).UTC()
	c.CreatedAt = time.UnixMilli(created).UTC()
	c.UpdatedAt = time.UnixMilli(updated).UTC()
	return c, nil
}

var _ store.StagedLister = (*DB)(nil)
