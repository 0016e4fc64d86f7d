package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/llm4agents/llm4agents/internal/store"
)

// Recovery records (store.Recoveries), in the recoveries table of migration
// 0005. Every write is one op of a write batch (writer.go), so a
// read-then-write decision sees no other writer in between, on any number of
// DB values. Time decisions use db.Now.

const recoveryColumns = `recovery_key, payer, fingerprint, operation_id, payment_key, proof_hash, proof_until_ms,
    amount, state, response_status, response_content_type, response_body, network, tx_hash, owner,
    fence, lease_until_ms, expires_at_ms, replays_left, created_at_ms, updated_at_ms`

const selectRecovery = `SELECT ` + recoveryColumns + ` FROM recoveries WHERE recovery_key = ?`

// absentRecovery reports whether a record counts as absent at now for
// BeginRecovery: expired, in flight past its lease, or promoted and spent.
func absentRecovery(r store.Recovery, now int64) bool {
	switch {
	case now >= r.ExpiresAt.UnixMilli():
		return true
	case r.State == store.RecoveryInFlight && now >= r.LeaseUntil.UnixMilli():
		return true
	default:
		return r.State == store.RecoveryPromoted && r.ReplaysLeft <= 0
	}
}

// BeginRecovery implements store.Recoveries.
func (db *DB) BeginRecovery(ctx context.Context, r store.Recovery, lease time.Duration) (_ store.Recovery, _ bool, err error) {
	defer store.Wrap(&err, "sqlite", "begin recovery %q", r.Key)
	if err := store.CheckBeginRecovery(r, lease); err != nil {
		return store.Recovery{}, false, err
	}
	leaseMs, expiresMs := store.CeilMillis(lease), store.CeilUnixMilli(r.ExpiresAt)
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return store.Recovery{}, false, err
	}
	defer cancel()

	var rec store.Recovery
	var won bool
	err = db.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		now := db.nowMs()
		if expiresMs <= now {
			return fmt.Errorf("expiry %s is not after the store's time", r.ExpiresAt.UTC().Format(time.RFC3339Nano))
		}
		cur, err := scanRecovery(tx.QueryRowContext(ctx, selectRecovery, r.Key))
		switch {
		case err == nil && !absentRecovery(cur, now):
			rec = cur
			return nil
		case err == nil:
			if _, err := tx.ExecContext(ctx, `DELETE FROM recoveries WHERE recovery_key = ?`, r.Key); err != nil {
				return err
			}
		case !errors.Is(err, sql.ErrNoRows):
			return err
		}
		var fence int64
		if err := tx.QueryRowContext(ctx, `UPDATE recovery_fences SET last = last + 1 WHERE id = 1 RETURNING last`).Scan(&fence); err != nil {
			return fmt.Errorf("recovery fence: %w", err)
		}
		rec, err = scanRecovery(tx.QueryRowContext(ctx, `INSERT INTO recoveries (
    recovery_key, payer, fingerprint, operation_id, payment_key, proof_hash, proof_until_ms, amount, state,
    owner, fence, lease_until_ms, expires_at_ms, created_at_ms, updated_at_ms)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
RETURNING `+recoveryColumns,
			r.Key, r.Payer, r.Fingerprint, r.OperationID, r.PaymentKey, r.ProofHash, r.ProofUntil.UnixMilli(), r.Amount,
			store.RecoveryInFlight, r.Owner, fence, now+leaseMs, expiresMs, now, now))
		won = err == nil
		return err
	})
	if err != nil {
		return store.Recovery{}, false, mapErr(ctx, err)
	}
	return rec, won, nil
}

// liveRecovery reads the record for key inside a write op: ErrNotFound if
// absent or expired, ErrFenced under another fence.
func (db *DB) liveRecovery(ctx context.Context, tx *sql.Tx, key string, fence int64) (store.Recovery, error) {
	cur, err := scanRecovery(tx.QueryRowContext(ctx, selectRecovery, key))
	if errors.Is(err, sql.ErrNoRows) {
		return store.Recovery{}, store.ErrNotFound
	}
	if err != nil {
		return store.Recovery{}, err
	}
	if db.nowMs() >= cur.ExpiresAt.UnixMilli() {
		return store.Recovery{}, fmt.Errorf("record expired: %w", store.ErrNotFound)
	}
	if cur.Fence != fence {
		return store.Recovery{}, fmt.Errorf("fence %d is stale, the record's is %d: %w", fence, cur.Fence, store.ErrFenced)
	}
	return cur, nil
}

// StageRecovery implements store.Recoveries.
func (db *DB) StageRecovery(ctx context.Context, key string, fence int64, resp store.RecordedResponse) (err error) {
	defer store.Wrap(&err, "sqlite", "stage recovery %q", key)
	if err := store.CheckResponse(resp.Status, resp.Body); err != nil {
		return err
	}
	body := resp.Body
	if body == nil {
		body = []byte{}
	}
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	err = db.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		cur, err := db.liveRecovery(ctx, tx, key, fence)
		if err != nil {
			return err
		}
		if cur.State == store.RecoveryPromoted {
			return fmt.Errorf("record is promoted: %w", store.ErrFenced)
		}
		_, err = tx.ExecContext(ctx, `UPDATE recoveries
SET state = ?, response_status = ?, response_content_type = ?, response_body = ?, updated_at_ms = ?
WHERE recovery_key = ?`, store.RecoveryStaged, resp.Status, resp.ContentType, body, db.nowMs(), key)
		return err
	})
	return mapErr(ctx, err)
}

// PromoteRecovery implements store.Recoveries.
func (db *DB) PromoteRecovery(ctx context.Context, operationID, fingerprint string, ref store.SettlementRef, ttl time.Duration, replays int) (_ store.Recovery, err error) {
	defer store.Wrap(&err, "sqlite", "promote recovery")
	if err := store.CheckPromote(operationID, ref, ttl, replays); err != nil {
		return store.Recovery{}, err
	}
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return store.Recovery{}, err
	}
	defer cancel()
	var rec store.Recovery
	err = db.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		now := db.nowMs()
		cur, err := scanRecovery(tx.QueryRowContext(ctx, `SELECT `+recoveryColumns+` FROM recoveries WHERE operation_id = ?`, operationID))
		if errors.Is(err, sql.ErrNoRows) || (err == nil && now >= cur.ExpiresAt.UnixMilli()) {
			return store.ErrNotFound
		}
		if err != nil {
			return err
		}
		switch {
		case cur.Fingerprint != fingerprint:
			return fmt.Errorf("the fingerprint is not the record's: %w", store.ErrFenced)
		case cur.State == store.RecoveryInFlight:
			return fmt.Errorf("nothing is staged: %w", store.ErrFenced)
		case cur.State == store.RecoveryPromoted && cur.Settlement == ref:
			rec = cur
			return nil
		case cur.State == store.RecoveryPromoted:
			return fmt.Errorf("promoted with another settlement: %w", store.ErrFenced)
		}
		rec, err = scanRecovery(tx.QueryRowContext(ctx, `UPDATE recoveries
SET state = ?, network = ?, tx_hash = ?, replays_left = ?, expires_at_ms = ?, updated_at_ms = ?
WHERE recovery_key = ?
RETURNING `+recoveryColumns,
			store.RecoveryPromoted, ref.Network, ref.TxHash, replays, now+store.CeilMillis(ttl), now, cur.Key))
		return err
	})
	if err != nil {
		return store.Recovery{}, mapErr(ctx, err)
	}
	return rec, nil
}

// AbandonRecovery implements store.Recoveries.
func (db *DB) AbandonRecovery(ctx context.Context, key string, fence int64) (err error) {
	defer store.Wrap(&err, "sqlite", "abandon recovery %q", key)
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	err = db.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		cur, err := db.liveRecovery(ctx, tx, key, fence)
		if err != nil {
			return err
		}
		if cur.State == store.RecoveryPromoted {
			return fmt.Errorf("record is promoted: %w", store.ErrFenced)
		}
		_, err = tx.ExecContext(ctx, `DELETE FROM recoveries WHERE recovery_key = ?`, key)
		return err
	})
	return mapErr(ctx, err)
}

// Recovery implements store.Recoveries.
func (db *DB) Recovery(ctx context.Context, key string) (_ store.Recovery, err error) {
	defer store.Wrap(&err, "sqlite", "recovery %q", key)
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return store.Recovery{}, err
	}
	defer cancel()
	r, err := scanRecovery(db.ro.QueryRowContext(ctx, selectRecovery+` AND expires_at_ms > ?`, key, db.nowMs()))
	if err != nil {
		return store.Recovery{}, mapErr(ctx, err)
	}
	return r, nil
}

// TakeReplay implements store.Recoveries.
func (db *DB) TakeReplay(ctx context.Context, key, operationID string) (_ store.Recovery, _ bool, err error) {
	defer store.Wrap(&err, "sqlite", "take replay %q", key)
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return store.Recovery{}, false, err
	}
	defer cancel()
	var rec store.Recovery
	var took bool
	err = db.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		now := db.nowMs()
		cur, err := scanRecovery(tx.QueryRowContext(ctx, selectRecovery, key))
		if errors.Is(err, sql.ErrNoRows) {
			return store.ErrNotFound
		}
		if err != nil {
			return err
		}
		if now >= cur.ExpiresAt.UnixMilli() || cur.State != store.RecoveryPromoted || cur.OperationID != operationID {
			return store.ErrNotFound
		}
		if cur.ReplaysLeft <= 0 {
			rec = cur
			return nil
		}
		rec, err = scanRecovery(tx.QueryRowContext(ctx, `UPDATE recoveries SET replays_left = replays_left - 1, updated_at_ms = ?
WHERE recovery_key = ? RETURNING `+recoveryColumns, now, key))
		took = err == nil
		return err
	})
	if err != nil {
		return store.Recovery{}, false, mapErr(ctx, err)
	}
	return rec, took, nil
}

// PurgeExpiredRecoveries deletes expired records (see store.Recoveries), as
// PurgeExpiredPayments does.
func (db *DB) PurgeExpiredRecoveries(ctx context.Context, limit int) (_ int, err error) {
	defer store.Wrap(&err, "sqlite", "purge expired recoveries")
	if err := store.CheckLimit(limit); err != nil {
		return 0, err
	}
	return db.purgeExpired(ctx, "recoveries", "recovery_key", limit)
}

func scanRecovery(row interface{ Scan(...any) error }) (store.Recovery, error) {
	var r store.Recovery
	var state string
	var proofUntil, leaseUntil, expires, created, updated int64
	var status sql.NullInt64
	var ctype sql.NullString
	var body []byte
	err := row.Scan(&r.Key, &r.Payer, &r.Fingerprint, &r.OperationID, &r.PaymentKey, &r.ProofHash, &proofUntil,
		&r.Amount, &state, &status, &ctype, &body, &r.Settlement.Network, &r.Settlement.TxHash, &r.Owner,
		&r.Fence, &leaseUntil, &expires, &r.ReplaysLeft, &created, &updated)
	if err != nil {
		return store.Recovery{}, err
	}
	if status.Valid {
		if body == nil {
			body = []byte{}
		}
		r.Response = &store.RecordedResponse{Status: int(status.Int64), ContentType: ctype.String, Body: body}
	}
	r.State = store.RecoveryState(state)
	r.ProofUntil = time.UnixMilli(proofUntil).UTC()
	r.LeaseUntil = time.UnixMilli(leaseUntil).UTC()
	r.ExpiresAt = time.UnixMilli(expires).UTC()
	r.CreatedAt = time.UnixMilli(created).UTC()
	r.UpdatedAt = time.UnixMilli(updated).UTC()
	return r, nil
}

var _ store.Recoveries = (*DB)(nil)
