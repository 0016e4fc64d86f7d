package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/llm4agents/llm4agents/internal/store"
)

// Recovery records (store.Recoveries), in the recoveries table of migration
// 0005. As in settlements.go, every write is one statement that decides and
// writes under READ COMMITTED; only when it changes nothing does a second
// statement read the record to say why. Time decisions use the server's
// clock, or DB.Now, through nowExpr.
//
// Fences come from the migration's one-row counter, recovery_fences,
// incremented by the statement that begins a record. The row lock it takes
// is held until that statement commits, so fences are handed out in commit
// order: a record replacing another always has the higher fence. Every
// BeginRecovery, winning or not, queues on that row for the length of one
// statement; beginning a recovery is once per paid request, so the queue is
// short. (A SEQUENCE, as the other tables use, would need a PostgreSQL
// extra for migration 0005 in schema.go.)

const recoveryColumns = `recovery_key, payer, fingerprint, operation_id, payment_key, proof_hash, proof_until_ms,
    amount, state, response_status, response_content_type, response_body, network, tx_hash, owner,
    fence, lease_until_ms, expires_at_ms, replays_left, created_at_ms, updated_at_ms`

// absentRow is true in an ON CONFLICT DO UPDATE when the existing record r
// counts as absent at the time of the proposed row: expired, in flight past
// its lease, or promoted with no replay left.
const absentRow = `(r.expires_at_ms <= excluded.created_at_ms
        OR (r.state = 'in_flight' AND r.lease_until_ms <= excluded.created_at_ms)
        OR (r.state = 'promoted' AND r.replays_left <= 0))`

// beginRecovery creates the record for $2 in flight, or replaces one that
// counts as absent, keeping nothing of it. It inserts only if the expiry
// ($13) is after the statement's time, and always returns one row: that
// time, then the record if the caller now holds it, else NULLs.
const beginRecovery = withNow + `, f AS (
    UPDATE recovery_fences SET last = last + 1 WHERE id = 1 RETURNING last),
c AS (
    INSERT INTO recoveries AS r (
        recovery_key, payer, fingerprint, operation_id, payment_key, proof_hash, proof_until_ms, amount, state,
        owner, fence, lease_until_ms, expires_at_ms, created_at_ms, updated_at_ms)
    SELECT $2, $3, $4, $5, $6, $7, $8, $9, 'in_flight',
        $10, f.last, n.ms + $11::bigint, $12::bigint, n.ms, n.ms
    FROM n, f
    WHERE $12::bigint > n.ms
    ON CONFLICT (recovery_key) DO UPDATE
    SET payer = excluded.payer, fingerprint = excluded.fingerprint, operation_id = excluded.operation_id,
        payment_key = excluded.payment_key, proof_hash = excluded.proof_hash,
        proof_until_ms = excluded.proof_until_ms, amount = excluded.amount, state = 'in_flight',
        response_status = NULL, response_content_type = NULL, response_body = NULL,
        network = '', tx_hash = '', replays_left = 0,
        owner = excluded.owner, fence = excluded.fence, lease_until_ms = excluded.lease_until_ms,
        expires_at_ms = excluded.expires_at_ms, created_at_ms = excluded.created_at_ms,
        updated_at_ms = excluded.updated_at_ms
    WHERE ` + absentRow + ` AND r.fence < excluded.fence
    RETURNING ` + recoveryColumns + `)
SELECT n.ms, c.* FROM n LEFT JOIN c ON true`

// BeginRecovery implements store.Recoveries. Of any number of concurrent
// callers, on any number of DB values, exactly one creates or replaces the
// record: the others' statements wait for the winner's on the unique key
// and then find its record live.
func (db *DB) BeginRecovery(ctx context.Context, r store.Recovery, lease time.Duration) (_ store.Recovery, _ bool, err error) {
	defer store.Wrap(&err, "postgres", "begin recovery %q", r.Key)
	if err := store.CheckBeginRecovery(r, lease); err != nil {
		return store.Recovery{}, false, err
	}
	expiresMs := store.CeilUnixMilli(r.ExpiresAt)
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return store.Recovery{}, false, err
	}
	defer cancel()

	now := db.nowArg()
	for range claimAttempts {
		var storeNow int64
		rec, found, err := scanRecovery(db.pool.QueryRow(ctx, beginRecovery, now,
			r.Key, r.Payer, r.Fingerprint, r.OperationID, r.PaymentKey, r.ProofHash, r.ProofUntil.UnixMilli(), r.Amount,
			r.Owner, store.CeilMillis(lease), expiresMs), &storeNow)
		switch {
		case err != nil:
			return store.Recovery{}, false, db.mapErr(ctx, err)
		case found:
			return rec, true, nil
		case expiresMs <= storeNow:
			return store.Recovery{}, false, fmt.Errorf("expiry %s is not after the store's time %s",
				r.ExpiresAt.UTC().Format(time.RFC3339Nano), time.UnixMilli(storeNow).UTC().Format(time.RFC3339Nano))
		}
		// Someone else's: read it. If it counts as absent by now (abandoned,
		// lease or expiry over since), begin again.
		cur, found, err := db.readRecovery(ctx, now, readRecoveryByKey, r.Key)
		if err != nil {
			return store.Recovery{}, false, err
		}
		if found && !cur.absent {
			return cur.Recovery, false, nil
		}
	}
	return store.Recovery{}, false, fmt.Errorf("the record changed under %d begins in a row", claimAttempts)
}

// readRecord is a record as read at ms, the statement's time.
type readRecord struct {
	store.Recovery
	expired bool // ExpiresAt has come
	absent  bool // it counts as absent for BeginRecovery
}

// readRecoveryBy* read one record, by key or by operation id ($2), with the
// statement's time; always one row, the record's columns NULL if absent.
const (
	readRecoveryByKey = withNow + `SELECT n.ms, r.* FROM n
LEFT JOIN (SELECT ` + recoveryColumns + ` FROM recoveries WHERE recovery_key = $2) r ON true`
	readRecoveryByOp = withNow + `SELECT n.ms, r.* FROM n
LEFT JOIN (SELECT ` + recoveryColumns + ` FROM recoveries WHERE operation_id = $2) r ON true`
)

// readRecovery reads a record with query (readRecoveryByKey or
// readRecoveryByOp) and judges it at the statement's time.
func (db *DB) readRecovery(ctx context.Context, now *int64, query, value string) (readRecord, bool, error) {
	var ms int64
	rec, found, err := scanRecovery(db.pool.QueryRow(ctx, query, now, value), &ms)
	if err != nil || !found {
		return readRecord{}, false, db.mapErr(ctx, err)
	}
	out := readRecord{Recovery: rec, expired: ms >= rec.ExpiresAt.UnixMilli()}
	out.absent = out.expired ||
		(rec.State == store.RecoveryInFlight && ms >= rec.LeaseUntil.UnixMilli()) ||
		(rec.State == store.RecoveryPromoted && rec.ReplaysLeft <= 0)
	return out, true, nil
}

// liveUnderRecoveryFence is the condition of a write to a live record, in
// flight or staged, under fence $3, by the time n.ms.
const liveUnderRecoveryFence = `recovery_key = $2 AND fence = $3 AND state IN ('in_flight', 'staged') AND expires_at_ms > n.ms`

// StageRecovery implements store.Recoveries.
func (db *DB) StageRecovery(ctx context.Context, key string, fence int64, resp store.RecordedResponse) (err error) {
	defer store.Wrap(&err, "postgres", "stage recovery %q", key)
	if err := store.CheckResponse(resp.Status, resp.Body); err != nil {
		return err
	}
	body := resp.Body
	if body == nil {
		body = []byte{} // NULL means nothing recorded
	}
	return db.writeRecovery(ctx, key, fence, func(ctx context.Context, now *int64) (int64, error) {
		tag, err := db.pool.Exec(ctx, withNow+`UPDATE recoveries
SET state = 'staged', response_status = $4, response_content_type = $5, response_body = $6, updated_at_ms = n.ms
FROM n WHERE `+liveUnderRecoveryFence, now, key, fence, resp.Status, resp.ContentType, body)
		return tag.RowsAffected(), err
	})
}

// AbandonRecovery implements store.Recoveries.
func (db *DB) AbandonRecovery(ctx context.Context, key string, fence int64) (err error) {
	defer store.Wrap(&err, "postgres", "abandon recovery %q", key)
	return db.writeRecovery(ctx, key, fence, func(ctx context.Context, now *int64) (int64, error) {
		tag, err := db.pool.Exec(ctx, withNow+`DELETE FROM recoveries USING n WHERE `+liveUnderRecoveryFence, now, key, fence)
		return tag.RowsAffected(), err
	})
}

// writeRecovery runs write, one statement under liveUnderRecoveryFence
// returning the rows it changed, and when it changed none, finds out why:
// absent or expired (ErrNotFound), another fence or promoted (ErrFenced).
func (db *DB) writeRecovery(ctx context.Context, key string, fence int64,
	write func(ctx context.Context, now *int64) (int64, error),
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
		cur, found, err := db.readRecovery(ctx, now, readRecoveryByKey, key)
		switch {
		case err != nil:
			return err
		case !found:
			return store.ErrNotFound
		case cur.expired:
			return fmt.Errorf("record expired: %w", store.ErrNotFound)
		case cur.Fence != fence:
			return fmt.Errorf("fence %d is stale, the record's is %d: %w", fence, cur.Fence, store.ErrFenced)
		case cur.State == store.RecoveryPromoted:
			return fmt.Errorf("record is promoted: %w", store.ErrFenced)
		}
		// Live, unpromoted and under this fence, so the write should have
		// applied; a fence is never reissued, so this cannot happen, but
		// trying again is safer than guessing.
	}
	return fmt.Errorf("the record changed under %d writes in a row", claimAttempts)
}

// promoteRecovery promotes the live staged record of operation id $2 if its
// fingerprint is $3.
const promoteRecovery = withNow + `UPDATE recoveries
SET state = 'promoted', network = $4, tx_hash = $5, replays_left = $6, expires_at_ms = n.ms + $7::bigint,
    updated_at_ms = n.ms
FROM n
WHERE operation_id = $2 AND fingerprint = $3 AND state = 'staged' AND expires_at_ms > n.ms
RETURNING ` + recoveryColumns

// PromoteRecovery implements store.Recoveries. A promotion racing an
// abandonment of the same record waits for it on the row: whichever
// commits first wins, and the other finds the record promoted (ErrFenced)
// or gone (ErrNotFound).
func (db *DB) PromoteRecovery(ctx context.Context, operationID, fingerprint string, ref store.SettlementRef, ttl time.Duration, replays int) (_ store.Recovery, err error) {
	defer store.Wrap(&err, "postgres", "promote recovery")
	if err := store.CheckPromote(operationID, ref, ttl, replays); err != nil {
		return store.Recovery{}, err
	}
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return store.Recovery{}, err
	}
	defer cancel()

	now := db.nowArg()
	for range claimAttempts {
		rec, found, err := scanRecovery(db.pool.QueryRow(ctx, promoteRecovery,
			now, operationID, fingerprint, ref.Network, ref.TxHash, replays, store.CeilMillis(ttl)))
		switch {
		case errors.Is(err, pgx.ErrNoRows):
		case err != nil:
			return store.Recovery{}, db.mapErr(ctx, err)
		case found:
			return rec, nil
		}
		cur, found, err := db.readRecovery(ctx, now, readRecoveryByOp, operationID)
		switch {
		case err != nil:
			return store.Recovery{}, err
		case !found || cur.expired:
			return store.Recovery{}, store.ErrNotFound
		case cur.Fingerprint != fingerprint:
			return store.Recovery{}, fmt.Errorf("the fingerprint is not the record's: %w", store.ErrFenced)
		case cur.State == store.RecoveryInFlight:
			return store.Recovery{}, fmt.Errorf("nothing is staged: %w", store.ErrFenced)
		case cur.State == store.RecoveryPromoted && cur.Settlement == ref:
			return cur.Recovery, nil
		case cur.State == store.RecoveryPromoted:
			return store.Recovery{}, fmt.Errorf("promoted with another settlement: %w", store.ErrFenced)
		}
		// Staged after all: it was restaged or begun again between the two
		// statements. Try again.
	}
	return store.Recovery{}, fmt.Errorf("the record changed under %d promotions in a row", claimAttempts)
}

// Recovery implements store.Recoveries: ErrNotFound if absent or expired.
func (db *DB) Recovery(ctx context.Context, key string) (_ store.Recovery, err error) {
	defer store.Wrap(&err, "postgres", "recovery %q", key)
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return store.Recovery{}, err
	}
	defer cancel()

	cur, found, err := db.readRecovery(ctx, db.nowArg(), readRecoveryByKey, key)
	switch {
	case err != nil:
		return store.Recovery{}, err
	case !found || cur.expired:
		return store.Recovery{}, store.ErrNotFound
	}
	return cur.Recovery, nil
}

// takeReplay takes one replay from the live promoted record $2 of operation
// id $3. Concurrent callers queue on the row and each re-checks
// replays_left > 0 on the row as the one before left it, so the budget is
// never overdrawn.
const takeReplay = withNow + `UPDATE recoveries
SET replays_left = replays_left - 1, updated_at_ms = n.ms
FROM n
WHERE recovery_key = $2 AND operation_id = $3 AND state = 'promoted' AND expires_at_ms > n.ms AND replays_left > 0
RETURNING ` + recoveryColumns

// TakeReplay implements store.Recoveries.
func (db *DB) TakeReplay(ctx context.Context, key, operationID string) (_ store.Recovery, _ bool, err error) {
	defer store.Wrap(&err, "postgres", "take replay %q", key)
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return store.Recovery{}, false, err
	}
	defer cancel()

	now := db.nowArg()
	for range claimAttempts {
		rec, found, err := scanRecovery(db.pool.QueryRow(ctx, takeReplay, now, key, operationID))
		switch {
		case errors.Is(err, pgx.ErrNoRows):
		case err != nil:
			return store.Recovery{}, false, db.mapErr(ctx, err)
		case found:
			return rec, true, nil
		}
		cur, found, err := db.readRecovery(ctx, now, readRecoveryByKey, key)
		switch {
		case err != nil:
			return store.Recovery{}, false, err
		case !found || cur.expired || cur.State != store.RecoveryPromoted || cur.OperationID != operationID:
			return store.Recovery{}, false, store.ErrNotFound
		case cur.ReplaysLeft <= 0:
			return cur.Recovery, false, nil
		}
		// Replays left after all: the update cannot have missed them, since
		// nothing adds replays to a promoted record; try again.
	}
	return store.Recovery{}, false, fmt.Errorf("the record changed under %d replays in a row", claimAttempts)
}

// PurgeExpiredRecoveries deletes expired records (see store.Recoveries). It
// skips rows another transaction has locked (a begin replacing one), so it
// never makes a begin wait, and may return fewer than limit while more remain.
func (db *DB) PurgeExpiredRecoveries(ctx context.Context, limit int) (_ int, err error) {
	defer store.Wrap(&err, "postgres", "purge expired recoveries")
	if err := store.CheckLimit(limit); err != nil {
		return 0, err
	}
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return 0, err
	}
	defer cancel()

	tag, err := db.pool.Exec(ctx, withNow+`, doomed AS (
    SELECT recovery_key FROM recoveries, n
    WHERE expires_at_ms <= n.ms
    ORDER BY expires_at_ms, recovery_key COLLATE "C"
    LIMIT $2
    FOR UPDATE OF recoveries SKIP LOCKED)
DELETE FROM recoveries USING n
WHERE recovery_key IN (SELECT recovery_key FROM doomed) AND expires_at_ms <= n.ms`, db.nowArg(), limit)
	if err != nil {
		return 0, db.mapErr(ctx, err)
	}
	return int(tag.RowsAffected()), nil
}

// scanRecovery reads one row of recoveryColumns after the values of first.
// Every column may be NULL (the outer joins): found is false when the key
// is.
func scanRecovery(row pgx.Row, first ...any) (_ store.Recovery, found bool, _ error) {
	var key, payer, fp, op, payKey, proof, amount, state, network, txHash, owner *string
	var proofUntil, fence, leaseUntil, expires, created, updated *int64
	var status, replays *int32
	var ctype *string
	var body []byte
	dest := make([]any, 0, len(first)+21)
	dest = append(dest, first...)
	dest = append(dest, &key, &payer, &fp, &op, &payKey, &proof, &proofUntil, &amount, &state, &status, &ctype, &body,
		&network, &txHash, &owner, &fence, &leaseUntil, &expires, &replays, &created, &updated)
	if err := row.Scan(dest...); err != nil {
		return store.Recovery{}, false, err
	}
	if key == nil {
		return store.Recovery{}, false, nil
	}
	// The schema makes every column but the response's NOT NULL.
	r := store.Recovery{
		Key: *key, Payer: *payer, Fingerprint: *fp, OperationID: *op, PaymentKey: *payKey, ProofHash: *proof,
		ProofUntil: time.UnixMilli(*proofUntil).UTC(), Amount: *amount, State: store.RecoveryState(*state),
		Settlement: store.SettlementRef{Network: *network, TxHash: *txHash}, Owner: *owner, Fence: *fence,
		LeaseUntil:  time.UnixMilli(*leaseUntil).UTC(),
		ExpiresAt:   time.UnixMilli(*expires).UTC(),
		ReplaysLeft: int(*replays),
		CreatedAt:   time.UnixMilli(*created).UTC(),
		UpdatedAt:   time.UnixMilli(*updated).UTC(),
	}
	if status != nil {
		if body == nil {
			body = []byte{}
		}
		r.Response = &store.RecordedResponse{Status: int(*status), Body: body}
		if ctype != nil {
			r.Response.ContentType = *ctype
		}
	}
	return r, true, nil
}

var _ store.Recoveries = (*DB)(nil)
