package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/llm4agents/llm4agents/internal/store"
)

// Settlement records (store.Settlements), in the settlements table of
// migration 0001, fences from settlement_fence_seq.
//
// Every write is one statement that decides and writes atomically under
// READ COMMITTED: a statement that meets a row another transaction is
// changing waits for it and re-evaluates its conditions on the row as that
// transaction left it, so no write is ever based on a stale read and none
// needs a serialization retry. Only when a write changes nothing does a
// second statement read the record, to tell the caller why (absent, stale
// fence, resolved); that answer describes the record at the time of the read.

const columns = `settlement_key, network, asset, payer, pay_to, amount, state, tx_hash, reason, owner,
    fence, lease_until_ms, success_reported, created_at_ms, updated_at_ms, raw_tx, reorg, reorgs, lost_to`

const selectByKey = `SELECT ` + columns + ` FROM settlements WHERE settlement_key = $1`

// claimSettlement creates the record, or takes over one still claimed whose
// lease has ended ($1 now, see nowExpr), in one statement. The new row's
// times and fence arrive in the takeover as excluded.*; the fence condition
// keeps fences increasing for a key even if this statement drew its fence
// before the record it finds was claimed. It returns no row when the record
// exists and is not the caller's to take.
const claimSettlement = withNow + `INSERT INTO settlements AS s (
    settlement_key, network, asset, payer, pay_to, amount, state, owner,
    fence, lease_until_ms, created_at_ms, updated_at_ms)
SELECT $2, $3, $4, $5, $6, $7, 'claimed', $8,
    nextval('settlement_fence_seq'), n.ms + $9::bigint, n.ms, n.ms
FROM n
ON CONFLICT (settlement_key) DO UPDATE
SET owner = excluded.owner, fence = excluded.fence,
    lease_until_ms = excluded.lease_until_ms, updated_at_ms = excluded.updated_at_ms,
    pay_to = excluded.pay_to, amount = excluded.amount
WHERE s.state = 'claimed' AND s.lease_until_ms <= excluded.updated_at_ms AND s.fence < excluded.fence
RETURNING ` + columns

// ClaimSettlement implements store.Settlements in one statement: the unique
// key makes every other caller's statement wait for the winner's and then
// find its claim.
func (db *DB) ClaimSettlement(ctx context.Context, s store.Settlement, lease time.Duration) (_ store.Settlement, _ bool, err error) {
	defer store.Wrap(&err, "postgres", "claim settlement %q", s.Key)
	if err := store.CheckClaim(s.Key, lease); err != nil {
		return store.Settlement{}, false, err
	}
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return store.Settlement{}, false, err
	}
	defer cancel()

	now := db.nowArg()
	for range claimAttempts {
		rec, err := scanSettlement(db.claimRow(ctx, "settlements", s.Key, claimSettlement,
			now, s.Key, s.Network, s.Asset, s.Payer, s.PayTo, s.Amount, s.Owner, store.CeilMillis(lease)))
		if err == nil {
			if rec.CreatedAt.Before(rec.UpdatedAt) { // an old record with a new lease: taken over
				db.log.InfoContext(ctx, "took over expired settlement claim", "key", s.Key, "owner", s.Owner, "fence", rec.Fence)
			}
			return rec, true, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return store.Settlement{}, false, db.mapErr(ctx, err)
		}
		// Someone else's: read it. If it vanished meanwhile (released), claim again.
		rec, err = scanSettlement(db.pool.QueryRow(ctx, selectByKey, s.Key))
		if err == nil {
			return rec, false, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return store.Settlement{}, false, db.mapErr(ctx, err)
		}
	}
	return store.Settlement{}, false, fmt.Errorf("the record changed under %d claims in a row", claimAttempts)
}

// UpdateSettlement implements store.Settlements.
func (db *DB) UpdateSettlement(ctx context.Context, key string, fence int64, state store.SettlementState, txHash, reason string) (err error) {
	defer store.Wrap(&err, "postgres", "update settlement %q to %s", key, state)
	if err := store.CheckSettlementUpdate(state, txHash, reason); err != nil {
		return err
	}
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return err
	}
	defer cancel()

	now := db.nowArg()
	for range claimAttempts {
		tag, err := db.pool.Exec(ctx, withNow+`UPDATE settlements
SET state = $4, tx_hash = $5, reason = $6, updated_at_ms = n.ms
FROM n
WHERE settlement_key = $2 AND fence = $3 AND state IN ('claimed', 'broadcast')`,
			now, key, fence, state, txHash, reason)
		if err != nil {
			return db.mapErr(ctx, err)
		}
		if tag.RowsAffected() == 1 {
			return nil
		}
		cur, err := db.settlementWhy(ctx, key, fence)
		if err != nil {
			return err
		}
		if cur.State == store.StateSettled || cur.State == store.StateFailed {
			if cur.State == state && cur.TxHash == txHash && cur.Reason == reason {
				return nil
			}
			return fmt.Errorf("record is already %s: %w", cur.State, store.ErrFenced)
		}
		// Still claimed or broadcast under this fence, so the write should
		// have applied; no write moves a record back, so this cannot
		// happen, but trying again is safer than guessing.
	}
	return fmt.Errorf("the record changed under %d updates in a row", claimAttempts)
}

// settlementWhy reads the record for key after a write under fence changed
// nothing: ErrNotFound if absent, ErrFenced if fence is not its fence, else
// the record, for the caller to judge its state.
func (db *DB) settlementWhy(ctx context.Context, key string, fence int64) (store.Settlement, error) {
	cur, err := scanSettlement(db.pool.QueryRow(ctx, selectByKey, key))
	if err != nil {
		return store.Settlement{}, db.mapErr(ctx, err)
	}
	if cur.Fence != fence {
		return store.Settlement{}, fmt.Errorf("fence %d is stale, the record's is %d: %w", fence, cur.Fence, store.ErrFenced)
	}
	return cur, nil
}

// ReleaseSettlement implements store.Settlements.
func (db *DB) ReleaseSettlement(ctx context.Context, key string, fence int64) (err error) {
	defer store.Wrap(&err, "postgres", "release settlement %q", key)
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return err
	}
	defer cancel()

	for range claimAttempts {
		tag, err := db.pool.Exec(ctx, `DELETE FROM settlements WHERE settlement_key = $1 AND fence = $2 AND state = 'claimed'`, key, fence)
		if err != nil {
			return db.mapErr(ctx, err)
		}
		if tag.RowsAffected() == 1 {
			return nil
		}
		cur, err := db.settlementWhy(ctx, key, fence)
		if err != nil {
			return err
		}
		if cur.State != store.StateClaimed {
			return fmt.Errorf("record is %s, past claimed: %w", cur.State, store.ErrFenced)
		}
	}
	return fmt.Errorf("the record changed under %d releases in a row", claimAttempts)
}

// RecordBroadcast implements store.Settlements with one conditional UPDATE.
func (db *DB) RecordBroadcast(ctx context.Context, key string, fence int64, txHash, rawTx string) (err error) {
	defer store.Wrap(&err, "postgres", "record broadcast of settlement %q", key)
	if err := store.CheckBroadcast(txHash, rawTx); err != nil {
		return err
	}
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return err
	}
	defer cancel()

	for range claimAttempts {
		tag, err := db.pool.Exec(ctx, withNow+`UPDATE settlements
SET state = 'broadcast', tx_hash = $4, raw_tx = $5, updated_at_ms = n.ms
FROM n
WHERE settlement_key = $2 AND fence = $3 AND state IN ('claimed', 'broadcast')`,
			db.nowArg(), key, fence, txHash, rawTx)
		if err != nil {
			return db.mapErr(ctx, err)
		}
		if tag.RowsAffected() == 1 {
			return nil
		}
		cur, err := db.settlementWhy(ctx, key, fence)
		if err != nil {
			return err
		}
		if cur.State == store.StateSettled || cur.State == store.StateFailed {
			return fmt.Errorf("record is already %s: %w", cur.State, store.ErrFenced)
		}
		// Claimed or broadcast under this fence: the write should have
		// applied; try again rather than guess.
	}
	return fmt.Errorf("the record changed under %d updates in a row", claimAttempts)
}

// AbandonBroadcast implements store.Settlements in one conditional DELETE.
func (db *DB) AbandonBroadcast(ctx context.Context, key string, fence int64, txHash string) (err error) {
	defer store.Wrap(&err, "postgres", "abandon broadcast of settlement %q", key)
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return err
	}
	defer cancel()

	for range claimAttempts {
		tag, err := db.pool.Exec(ctx, `DELETE FROM settlements
WHERE settlement_key = $1 AND fence = $2 AND state = 'broadcast' AND tx_hash = $3`, key, fence, txHash)
		if err != nil {
			return db.mapErr(ctx, err)
		}
		if tag.RowsAffected() == 1 {
			return nil
		}
		cur, err := db.settlementWhy(ctx, key, fence)
		if err != nil {
			return err
		}
		if cur.State != store.StateBroadcast {
			return fmt.Errorf("record is %s, not broadcast: %w", cur.State, store.ErrFenced)
		}
		if cur.TxHash != txHash {
			return fmt.Errorf("record names transaction %s, not %s: %w", cur.TxHash, txHash, store.ErrFenced)
		}
	}
	return fmt.Errorf("the record changed under %d deletes in a row", claimAttempts)
}

// MarkSuccessReported implements store.Settlements. The mark is one
// conditional UPDATE: concurrent callers queue on the row, and each one
// after the first re-evaluates the condition on the marked row and changes
// nothing, so exactly one gets true. The same statement tells an absent
// record (ErrNotFound) from one not settled or already marked (false).
func (db *DB) MarkSuccessReported(ctx context.Context, key string) (_ bool, err error) {
	defer store.Wrap(&err, "postgres", "mark success reported %q", key)
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return false, err
	}
	defer cancel()

	var set, exists bool
	err = db.pool.QueryRow(ctx, withNow+`, u AS (
    UPDATE settlements SET success_reported = 1, updated_at_ms = n.ms
    FROM n
    WHERE settlement_key = $2 AND state = 'settled' AND success_reported = 0
    RETURNING 1)
SELECT EXISTS (SELECT 1 FROM u), EXISTS (SELECT 1 FROM settlements WHERE settlement_key = $2)`,
		db.nowArg(), key).Scan(&set, &exists)
	switch {
	case err != nil:
		return false, db.mapErr(ctx, err)
	case !set && !exists:
		return false, store.ErrNotFound
	}
	return set, nil
}

// Settlement implements store.Settlements.
func (db *DB) Settlement(ctx context.Context, key string) (_ store.Settlement, err error) {
	defer store.Wrap(&err, "postgres", "settlement %q", key)
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return store.Settlement{}, err
	}
	defer cancel()

	s, err := scanSettlement(db.pool.QueryRow(ctx, selectByKey, key))
	if err != nil {
		return store.Settlement{}, db.mapErr(ctx, err)
	}
	return s, nil
}

// UnresolvedSettlements implements store.Settlements.
func (db *DB) UnresolvedSettlements(ctx context.Context, network string, limit int) (_ []store.Settlement, err error) {
	defer store.Wrap(&err, "postgres", "unresolved settlements of network %q", network)
	if err := store.CheckLimit(limit); err != nil {
		return nil, err
	}
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return nil, err
	}
	defer cancel()

	query, args := selectUnresolved(false), []any{limit}
	if network != store.AllNetworks {
		query, args = selectUnresolved(true), []any{limit, network}
	}
	rows, err := db.pool.Query(ctx, query, args...)
	if err != nil {
		return nil, db.mapErr(ctx, err)
	}
	out, err := collect(rows, scanSettlement)
	if err != nil {
		return nil, db.mapErr(ctx, err)
	}
	return out, nil
}

// selectUnresolved is the query of UnresolvedSettlements, of one network
// when oneNetwork; its arguments are limit and, for one network, the
// network. Each form has a partial index that serves it in order:
// settlements_unresolved (migration 0001) for every network,
// settlements_unresolved_network (migration 0017) for one, so that a
// network's listing never reads past the records of another. Keys compare
// byte by byte (COLLATE "C"), as in SQLite.
func selectUnresolved(oneNetwork bool) string {
	where := `state IN ('claimed', 'broadcast')`
	if oneNetwork {
		where += ` AND network = $2`
	}
	return `SELECT ` + columns + ` FROM settlements
WHERE ` + where + `
ORDER BY created_at_ms, settlement_key COLLATE "C"
LIMIT $1`
}

// scanSettlement reads one row of columns.
func scanSettlement(row pgx.Row) (store.Settlement, error) {
	var s store.Settlement
	var state, reorg string
	var reported int16
	var leaseUntil, created, updated int64
	err := row.Scan(&s.Key, &s.Network, &s.Asset, &s.Payer, &s.PayTo, &s.Amount, &state, &s.TxHash, &s.Reason, &s.Owner,
		&s.Fence, &leaseUntil, &reported, &created, &updated, &s.RawTx, &reorg, &s.Reorgs, &s.LostTo)
	if err != nil {
		return store.Settlement{}, err
	}
	s.State = store.SettlementState(state)
	s.Reorg = store.ReorgStatus(reorg)
	s.SuccessReported = reported != 0
	s.LeaseUntil = time.UnixMilli(leaseUntil).UTC()
	s.CreatedAt = time.UnixMilli(created).UTC()
	s.UpdatedAt = time.UnixMilli(updated).UTC()
	return s, nil
}
