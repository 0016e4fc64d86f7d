package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/llm4agents/llm4agents/internal/store"
)

// Payment claims (store.Payments), in the payments table of migrations 0002
// and 0003, fences from payment_fence_seq. Writes follow settlements.go: one
// statement decides and writes; a second one, only when nothing changed,
// reads why.
//
// An expired row (see store.Payments) stays until PurgeExpiredPayments
// deletes it or a claim replaces it.

const paymentColumns = `payment_key, network, payer, amount, state, tx_hash, owner,
    fence, lease_until_ms, expires_at_ms, created_at_ms, updated_at_ms,
    staged_status, staged_content_type, staged_body, staged_fingerprint`

// expiredRow is true in an ON CONFLICT DO UPDATE when the existing row p has
// expired at the time of the proposed row.
const expiredRow = `p.expires_at_ms <= excluded.created_at_ms`

// claimPayment creates the claim; takes over a held one whose lease has
// ended, keeping the authorization's details; or replaces an expired one of
// any state, keeping nothing. It inserts only if the expiry ($8) is after
// the statement's time, and always returns one row: that time, then the
// claim if the caller now holds it, else NULLs.
const claimPayment = withNow + `, c AS (
    INSERT INTO payments AS p (
        payment_key, network, payer, amount, state, tx_hash, owner,
        fence, lease_until_ms, expires_at_ms, created_at_ms, updated_at_ms)
    SELECT $2, $3, $4, $5, 'held', '', $6,
        nextval('payment_fence_seq'), n.ms + $7::bigint, $8::bigint, n.ms, n.ms
    FROM n
    WHERE $8::bigint > n.ms
    ON CONFLICT (payment_key) DO UPDATE
    SET owner = excluded.owner, fence = excluded.fence, state = 'held',
        lease_until_ms = excluded.lease_until_ms, updated_at_ms = excluded.updated_at_ms,
        network = CASE WHEN ` + expiredRow + ` THEN excluded.network ELSE p.network END,
        payer = CASE WHEN ` + expiredRow + ` THEN excluded.payer ELSE p.payer END,
        amount = CASE WHEN ` + expiredRow + ` THEN excluded.amount ELSE p.amount END,
        tx_hash = CASE WHEN ` + expiredRow + ` THEN '' ELSE p.tx_hash END,
        expires_at_ms = CASE WHEN ` + expiredRow + ` THEN excluded.expires_at_ms ELSE p.expires_at_ms END,
        created_at_ms = CASE WHEN ` + expiredRow + ` THEN excluded.created_at_ms ELSE p.created_at_ms END,
        staged_status = CASE WHEN ` + expiredRow + ` THEN NULL ELSE p.staged_status END,
        staged_content_type = CASE WHEN ` + expiredRow + ` THEN NULL ELSE p.staged_content_type END,
        staged_body = CASE WHEN ` + expiredRow + ` THEN NULL ELSE p.staged_body END,
        staged_fingerprint = CASE WHEN ` + expiredRow + ` THEN NULL ELSE p.staged_fingerprint END
    WHERE (` + expiredRow + ` OR (p.state = 'held' AND p.lease_until_ms <= excluded.created_at_ms))
        AND p.fence < excluded.fence
    RETURNING ` + paymentColumns + `)
SELECT n.ms, c.* FROM n LEFT JOIN c ON true`

// ClaimPayment implements store.Payments in one statement (claimPayment), as
// ClaimSettlement does.
func (db *DB) ClaimPayment(ctx context.Context, c store.PaymentClaim, lease time.Duration) (_ store.PaymentClaim, _ bool, err error) {
	defer store.Wrap(&err, "postgres", "claim payment %q", c.Key)
	if err := store.CheckPaymentClaim(c, lease); err != nil {
		return store.PaymentClaim{}, false, err
	}
	expiresMs := store.CeilUnixMilli(c.ExpiresAt)
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return store.PaymentClaim{}, false, err
	}
	defer cancel()

	now := db.nowArg()
	for range claimAttempts {
		var storeNow int64
		rec, found, err := scanPayment(db.claimRow(ctx, "payments", c.Key, claimPayment,
			now, c.Key, c.Network, c.Payer, c.Amount, c.Owner, store.CeilMillis(lease), expiresMs), &storeNow)
		switch {
		case err != nil:
			return store.PaymentClaim{}, false, db.mapErr(ctx, err)
		case found:
			if rec.CreatedAt.Before(rec.UpdatedAt) { // an old record with a new lease: taken over
				db.log.InfoContext(ctx, "took over expired payment claim", "key", c.Key, "owner", c.Owner, "fence", rec.Fence)
			}
			return rec, true, nil
		case expiresMs <= storeNow:
			return store.PaymentClaim{}, false, fmt.Errorf("expiry %s is not after the store's time %s",
				c.ExpiresAt.UTC().Format(time.RFC3339Nano), time.UnixMilli(storeNow).UTC().Format(time.RFC3339Nano))
		}
		// Someone else's: read it. If it vanished meanwhile (released or
		// purged), claim again.
		rec, found, err = scanPayment(db.pool.QueryRow(ctx, `SELECT `+paymentColumns+` FROM payments WHERE payment_key = $1`, c.Key))
		if err != nil {
			return store.PaymentClaim{}, false, db.mapErr(ctx, err)
		}
		if found {
			return rec, false, nil
		}
	}
	return store.PaymentClaim{}, false, fmt.Errorf("the record changed under %d claims in a row", claimAttempts)
}

// paymentWhy reads the record for key after a write under fence changed
// nothing, by the time now: ErrNotFound if absent or expired, ErrFenced if
// fence is not its fence, else its state and transaction hash for the
// caller to judge.
func (db *DB) paymentWhy(ctx context.Context, now *int64, key string, fence int64) (store.PaymentState, string, error) {
	var curFence int64
	var state, txHash string
	var expired bool
	err := db.pool.QueryRow(ctx, withNow+`SELECT fence, state, tx_hash, expires_at_ms <= n.ms
FROM payments, n WHERE payment_key = $2`, now, key).Scan(&curFence, &state, &txHash, &expired)
	switch {
	case err != nil:
		return "", "", db.mapErr(ctx, err)
	case expired:
		return "", "", fmt.Errorf("record expired: %w", store.ErrNotFound)
	case curFence != fence:
		return "", "", fmt.Errorf("fence %d is stale, the record's is %d: %w", fence, curFence, store.ErrFenced)
	}
	return store.PaymentState(state), txHash, nil
}

// liveUnderFence is the condition of a write to a live, unresolved claim
// under fence $3, by the time n.ms.
const liveUnderFence = `payment_key = $2 AND fence = $3 AND state IN ('held', 'pending') AND expires_at_ms > n.ms`

// ReleasePayment implements store.Payments.
func (db *DB) ReleasePayment(ctx context.Context, key string, fence int64) (err error) {
	defer store.Wrap(&err, "postgres", "release payment %q", key)
	return db.writePayment(ctx, key, fence, func(ctx context.Context, now *int64) (int64, error) {
		tag, err := db.pool.Exec(ctx, withNow+`DELETE FROM payments USING n WHERE `+liveUnderFence, now, key, fence)
		return tag.RowsAffected(), err
	}, func(store.PaymentState, string) error {
		return fmt.Errorf("record is settled: %w", store.ErrFenced)
	})
}

// UpdatePayment implements store.Payments.
func (db *DB) UpdatePayment(ctx context.Context, key string, fence int64, state store.PaymentState, txHash string) (err error) {
	defer store.Wrap(&err, "postgres", "update payment %q to %s", key, state)
	if err := store.CheckPaymentUpdate(state); err != nil {
		return err
	}
	return db.writePayment(ctx, key, fence, func(ctx context.Context, now *int64) (int64, error) {
		tag, err := db.pool.Exec(ctx, withNow+`UPDATE payments SET state = $4, tx_hash = $5, updated_at_ms = n.ms
FROM n WHERE `+liveUnderFence, now, key, fence, state, txHash)
		return tag.RowsAffected(), err
	}, func(_ store.PaymentState, curHash string) error {
		if state == store.PaymentSettled && curHash == txHash {
			return nil
		}
		return fmt.Errorf("record is already settled with transaction %q: %w", curHash, store.ErrFenced)
	})
}

// StagePayment implements store.Payments (migration 0003's columns). The
// staged response goes with its record (release, expiry).
func (db *DB) StagePayment(ctx context.Context, key string, fence int64, r store.StagedResponse) (err error) {
	defer store.Wrap(&err, "postgres", "stage payment %q", key)
	if err := store.CheckResponse(r.Status, r.Body); err != nil {
		return err
	}
	body := r.Body
	if body == nil {
		body = []byte{} // NULL means nothing staged
	}
	return db.writePayment(ctx, key, fence, func(ctx context.Context, now *int64) (int64, error) {
		tag, err := db.pool.Exec(ctx, withNow+`UPDATE payments
SET staged_status = $4, staged_content_type = $5, staged_body = $6, staged_fingerprint = $7, updated_at_ms = n.ms
FROM n WHERE `+liveUnderFence, now, key, fence, r.Status, r.ContentType, body, r.Fingerprint)
		return tag.RowsAffected(), err
	}, func(store.PaymentState, string) error {
		return fmt.Errorf("record is settled: %w", store.ErrFenced)
	})
}

// writePayment runs write, one statement under liveUnderFence returning the
// rows it changed, and when it changed none, finds out why: absent or
// expired (ErrNotFound), stale fence (ErrFenced), or settled, which settled
// judges (the only state that makes write change nothing under a good
// fence).
func (db *DB) writePayment(ctx context.Context, key string, fence int64,
	write func(ctx context.Context, now *int64) (int64, error),
	settled func(state store.PaymentState, txHash string) error,
) error {
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return err
	}
	defer cancel()

	now := db.nowArg()
	for range claimAttempts {
		n, err := write(ctx, now)
		if err != nil {
			return db.mapErr(ctx, err)
		}
		if n == 1 {
			return nil
		}
		state, txHash, err := db.paymentWhy(ctx, now, key, fence)
		if err != nil {
			return err
		}
		if state == store.PaymentSettled {
			return settled(state, txHash)
		}
		// Live, unresolved and under this fence, so the write should have
		// applied; nothing moves a claim back, so this cannot happen, but
		// trying again is safer than guessing.
	}
	return fmt.Errorf("the record changed under %d writes in a row", claimAttempts)
}

// Payment implements store.Payments: ErrNotFound if absent or expired.
func (db *DB) Payment(ctx context.Context, key string) (_ store.PaymentClaim, err error) {
	defer store.Wrap(&err, "postgres", "payment %q", key)
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return store.PaymentClaim{}, err
	}
	defer cancel()

	c, found, err := scanPayment(db.pool.QueryRow(ctx, withNow+`SELECT `+paymentColumns+`
FROM payments, n WHERE payment_key = $2 AND expires_at_ms > n.ms`, db.nowArg(), key))
	switch {
	case errors.Is(err, pgx.ErrNoRows), err == nil && !found:
		return store.PaymentClaim{}, store.ErrNotFound
	case err != nil:
		return store.PaymentClaim{}, db.mapErr(ctx, err)
	}
	return c, nil
}

// StagedPayments implements store.StagedLister. Keys compare byte by byte
// (COLLATE "C"), as in SQLite.
func (db *DB) StagedPayments(ctx context.Context, contentType string, afterCreated time.Time, afterKey string, limit int) (_ []store.PaymentClaim, err error) {
	defer store.Wrap(&err, "postgres", "staged payments of %q", contentType)
	if err := store.ValidateStagedQuery(contentType, limit); err != nil {
		return nil, err
	}
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return nil, err
	}
	defer cancel()

	// The first line of the WHERE clause is the partial index's own
	// (migration 0009), so that the planner may use it.
	rows, err := db.pool.Query(ctx, `SELECT `+paymentColumns+` FROM payments
WHERE state IN ('pending', 'settled') AND tx_hash <> ''
    AND staged_content_type = $1
    AND (created_at_ms > $2 OR (created_at_ms = $2 AND payment_key COLLATE "C" > $3))
ORDER BY created_at_ms, payment_key COLLATE "C"
LIMIT $4`, contentType, afterCreated.UnixMilli(), afterKey, limit)
	if err != nil {
		return nil, db.mapErr(ctx, err)
	}
	out, err := collect(rows, func(row pgx.Row) (store.PaymentClaim, error) {
		c, _, err := scanPayment(row) // a listed row has its key
		return c, err
	})
	if err != nil {
		return nil, db.mapErr(ctx, err)
	}
	if out == nil {
		out = []store.PaymentClaim{}
	}
	return out, nil
}

// PurgeExpiredPayments deletes expired claims (see store.Payments). It skips
// rows another transaction has locked (a claim replacing one), so it never
// makes a claim wait, and may return fewer than limit while more remain.
func (db *DB) PurgeExpiredPayments(ctx context.Context, limit int) (_ int, err error) {
	defer store.Wrap(&err, "postgres", "purge expired payments")
	if err := store.CheckLimit(limit); err != nil {
		return 0, err
	}
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return 0, err
	}
	defer cancel()

	tag, err := db.pool.Exec(ctx, withNow+`, doomed AS (
    SELECT payment_key FROM payments, n
    WHERE expires_at_ms <= n.ms
    ORDER BY expires_at_ms, payment_key COLLATE "C"
    LIMIT $2
    FOR UPDATE OF payments SKIP LOCKED)
DELETE FROM payments USING n
WHERE payment_key IN (SELECT payment_key FROM doomed) AND expires_at_ms <= n.ms`, db.nowArg(), limit)
	if err != nil {
		return 0, db.mapErr(ctx, err)
	}
	return int(tag.RowsAffected()), nil
}

// scanPayment reads one row of paymentColumns after the values of first.
// Every column may be NULL (the claim statement's outer join): found is
// false when the key is.
func scanPayment(row pgx.Row, first ...any) (_ store.PaymentClaim, found bool, _ error) {
	var key, network, payer, amount, state, txHash, owner *string
	var fence, leaseUntil, expires, created, updated *int64
	var stStatus *int32
	var stType, stFP *string
	var stBody []byte
	dest := make([]any, 0, len(first)+16)
	dest = append(dest, first...)
	dest = append(dest, &key, &network, &payer, &amount, &state, &txHash, &owner,
		&fence, &leaseUntil, &expires, &created, &updated, &stStatus, &stType, &stBody, &stFP)
	if err := row.Scan(dest...); err != nil {
		return store.PaymentClaim{}, false, err
	}
	if key == nil {
		return store.PaymentClaim{}, false, nil
	}
	// The schema makes every column but the staged ones NOT NULL.
	c := store.PaymentClaim{
		Key: *key, Network: *network, Payer: *payer, Amount: *amount, State: store.PaymentState(*state),
		TxHash: *txHash, Owner: *owner, Fence: *fence,
		LeaseUntil: time.UnixMilli(*leaseUntil).UTC(),
		ExpiresAt:  time.UnixMilli(*expires).UTC(),
		CreatedAt:  time.UnixMilli(*created).UTC(),
		UpdatedAt:  time.UnixMilli(*updated).UTC(),
	}
	if stStatus != nil {
		if stBody == nil {
			stBody = []byte{}
		}
		c.Staged = &store.StagedResponse{Status: int(*stStatus), Body: stBody}
		if stType != nil {
			c.Staged.ContentType = *stType
		}
		if stFP != nil {
			c.Staged.Fingerprint = *stFP
		}
	}
	return c, true, nil
}
