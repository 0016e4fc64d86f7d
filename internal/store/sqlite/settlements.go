package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/llm4agents/llm4agents/internal/store"
)

// Settlement records (store.Settlements), in the settlements table of
// migration 0001, fences from the one row of settlement_fences. Every write
// is one op of the writer's batch (writer.go), so it reads and writes with no
// other writer in between.

const columns = `settlement_key, network, asset, payer, pay_to, amount, state, tx_hash, reason, owner,
    fence, lease_until_ms, success_reported, created_at_ms, updated_at_ms, raw_tx, reorg, reorgs, lost_to`

const selectByKey = `SELECT ` + columns + ` FROM settlements WHERE settlement_key = ?`

// ClaimSettlement implements store.Settlements, reading and writing as one
// op of a write batch (writer.go).
func (db *DB) ClaimSettlement(ctx context.Context, s store.Settlement, lease time.Duration) (_ store.Settlement, _ bool, err error) {
	defer store.Wrap(&err, "sqlite", "claim settlement %q", s.Key)
	if err := store.CheckClaim(s.Key, lease); err != nil {
		return store.Settlement{}, false, err
	}
	// Round the lease up, so it is never shorter than asked.
	leaseMs := store.CeilMillis(lease)
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return store.Settlement{}, false, err
	}
	defer cancel()

	var rec, prev store.Settlement
	var won, tookOver bool
	err = db.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		now := db.nowMs()
		cur, err := scan(tx.QueryRowContext(ctx, selectByKey, s.Key))
		switch {
		case errors.Is(err, sql.ErrNoRows):
			fence, err := nextFence(ctx, tx)
			if err != nil {
				return err
			}
			rec, err = scan(tx.QueryRowContext(ctx, `INSERT INTO settlements (
    settlement_key, network, asset, payer, pay_to, amount, state, owner,
    fence, lease_until_ms, created_at_ms, updated_at_ms)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
RETURNING `+columns,
				s.Key, s.Network, s.Asset, s.Payer, s.PayTo, s.Amount, store.StateClaimed, s.Owner,
				fence, now+leaseMs, now, now))
			won = err == nil
			return err
		case err != nil:
			return err
		case cur.State == store.StateClaimed && now >= cur.LeaseUntil.UnixMilli():
			fence, err := nextFence(ctx, tx)
			if err != nil {
				return err
			}
			rec, err = scan(tx.QueryRowContext(ctx, `UPDATE settlements
SET owner = ?, fence = ?, lease_until_ms = ?, updated_at_ms = ?, pay_to = ?, amount = ?
WHERE settlement_key = ?
RETURNING `+columns,
				s.Owner, fence, now+leaseMs, now, s.PayTo, s.Amount, s.Key))
			if err != nil {
				return err
			}
			won, tookOver, prev = true, true, cur
			return nil
		default:
			rec = cur
			return nil
		}
	})
	if err != nil {
		return store.Settlement{}, false, err
	}
	if tookOver { // logged once committed, with the caller's context
		db.log.InfoContext(ctx, "took over expired settlement claim",
			"key", s.Key, "previous_owner", prev.Owner, "owner", s.Owner, "fence", rec.Fence)
	}
	return rec, won, nil
}

// nextFence draws the next fencing token from the one counter, so a token is
// never handed out twice, not even for a key released and claimed again.
func nextFence(ctx context.Context, tx *sql.Tx) (int64, error) {
	var fence int64
	err := tx.QueryRowContext(ctx, `UPDATE settlement_fences SET last = last + 1 WHERE id = 1 RETURNING last`).Scan(&fence)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, errors.New("fence counter row missing")
	}
	return fence, err
}

// UpdateSettlement implements store.Settlements.
func (db *DB) UpdateSettlement(ctx context.Context, key string, fence int64, state store.SettlementState, txHash, reason string) (err error) {
	defer store.Wrap(&err, "sqlite", "update settlement %q to %s", key, state)
	if err := store.CheckSettlementUpdate(state, txHash, reason); err != nil {
		return err
	}
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return err
	}
	defer cancel()

	return db.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		cur, err := scan(tx.QueryRowContext(ctx, selectByKey, key))
		if err != nil {
			return err
		}
		if cur.Fence != fence {
			return fmt.Errorf("fence %d is stale, the record's is %d: %w", fence, cur.Fence, store.ErrFenced)
		}
		if cur.State == store.StateSettled || cur.State == store.StateFailed {
			if cur.State == state && cur.TxHash == txHash && cur.Reason == reason {
				return nil
			}
			return fmt.Errorf("record is already %s: %w", cur.State, store.ErrFenced)
		}
		_, err = tx.ExecContext(ctx, `UPDATE settlements SET state = ?, tx_hash = ?, reason = ?, updated_at_ms = ? WHERE settlement_key = ?`,
			state, txHash, reason, db.nowMs(), key)
		return err
	})
}

// ReleaseSettlement implements store.Settlements.
func (db *DB) ReleaseSettlement(ctx context.Context, key string, fence int64) (err error) {
	defer store.Wrap(&err, "sqlite", "release settlement %q", key)
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return err
	}
	defer cancel()

	return db.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		cur, err := scan(tx.QueryRowContext(ctx, selectByKey, key))
		if err != nil {
			return err
		}
		if cur.Fence != fence {
			return fmt.Errorf("fence %d is stale, the record's is %d: %w", fence, cur.Fence, store.ErrFenced)
		}
		if cur.State != store.StateClaimed {
			return fmt.Errorf("record is %s, past claimed: %w", cur.State, store.ErrFenced)
		}
		_, err = tx.ExecContext(ctx, `DELETE FROM settlements WHERE settlement_key = ?`, key)
		return err
	})
}

// RecordBroadcast implements store.Settlements.
func (db *DB) RecordBroadcast(ctx context.Context, key string, fence int64, txHash, rawTx string) (err error) {
	defer store.Wrap(&err, "sqlite", "record broadcast of settlement %q", key)
	if err := store.CheckBroadcast(txHash, rawTx); err != nil {
		return err
	}
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return err
	}
	defer cancel()

	return db.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		cur, err := scan(tx.QueryRowContext(ctx, selectByKey, key))
		if err != nil {
			return err
		}
		if cur.Fence != fence {
			return fmt.Errorf("fence %d is stale, the record's is %d: %w", fence, cur.Fence, store.ErrFenced)
		}
		if cur.State != store.StateClaimed && cur.State != store.StateBroadcast {
			return fmt.Errorf("record is already %s: %w", cur.State, store.ErrFenced)
		}
		_, err = tx.ExecContext(ctx, `UPDATE settlements SET state = 'broadcast', tx_hash = ?, raw_tx = ?, updated_at_ms = ? WHERE settlement_key = ?`,
			txHash, rawTx, db.nowMs(), key)
		return err
	})
}

// AbandonBroadcast implements store.Settlements.
func (db *DB) AbandonBroadcast(ctx context.Context, key string, fence int64, txHash string) (err error) {
	defer store.Wrap(&err, "sqlite", "abandon broadcast of settlement %q", key)
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return err
	}
	defer cancel()

	return db.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		cur, err := scan(tx.QueryRowContext(ctx, selectByKey, key))
		if err != nil {
			return err
		}
		switch {
		case cur.Fence != fence:
			return fmt.Errorf("fence %d is stale, the record's is %d: %w", fence, cur.Fence, store.ErrFenced)
		case cur.State != store.StateBroadcast:
			return fmt.Errorf("record is %s, not broadcast: %w", cur.State, store.ErrFenced)
		case cur.TxHash != txHash:
			return fmt.Errorf("record names transaction %s, not %s: %w", cur.TxHash, txHash, store.ErrFenced)
		}
		_, err = tx.ExecContext(ctx, `DELETE FROM settlements WHERE settlement_key = ?`, key)
		return err
	})
}

// MarkSuccessReported implements store.Settlements with one conditional
// UPDATE.
func (db *DB) MarkSuccessReported(ctx context.Context, key string) (_ bool, err error) {
	defer store.Wrap(&err, "sqlite", "mark success reported %q", key)
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return false, err
	}
	defer cancel()

	var set bool
	err = db.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE settlements SET success_reported = 1, updated_at_ms = ?
WHERE settlement_key = ? AND state = 'settled' AND success_reported = 0`, db.nowMs(), key)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return err
		}
		if set = n == 1; set {
			return nil
		}
		// Not settled, already reported, or absent: only the last is an error.
		var one int
		return tx.QueryRowContext(ctx, `SELECT 1 FROM settlements WHERE settlement_key = ?`, key).Scan(&one)
	})
	if err != nil {
		return false, err
	}
	return set, nil
}

// Settlement implements store.Settlements.
func (db *DB) Settlement(ctx context.Context, key string) (_ store.Settlement, err error) {
	defer store.Wrap(&err, "sqlite", "settlement %q", key)
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return store.Settlement{}, err
	}
	defer cancel()

	s, err := scan(db.ro.QueryRowContext(ctx, selectByKey, key))
	if err != nil {
		return store.Settlement{}, mapErr(ctx, err)
	}
	return s, nil
}

// UnresolvedSettlements implements store.Settlements.
func (db *DB) UnresolvedSettlements(ctx context.Context, network string, limit int) (_ []store.Settlement, err error) {
	defer store.Wrap(&err, "sqlite", "unresolved settlements of network %q", network)
	if err := store.CheckLimit(limit); err != nil {
		return nil, err
	}
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return nil, err
	}
	defer cancel()

	if network == store.AllNetworks {
		return db.settlements(ctx, selectUnresolved(false), limit)
	}
	return db.settlements(ctx, selectUnresolved(true), limit, network)
}

// selectUnresolved is the query of UnresolvedSettlements, of one network
// when oneNetwork; its arguments are limit and, for one network, the
// network. Each form has a partial index that serves it in order:
// settlements_unresolved (migration 0001) for every network,
// settlements_unresolved_network (migration 0017) for one, so that a
// network's listing never reads past the records of another.
func selectUnresolved(oneNetwork bool) string {
	where := `state IN ('claimed', 'broadcast')`
	if oneNetwork {
		where += ` AND network = ?2`
	}
	return `SELECT ` + columns + ` FROM settlements
WHERE ` + where + `
ORDER BY created_at_ms, settlement_key
LIMIT ?1`
}

// settlements runs query, which selects columns, and scans every row.
func (db *DB) settlements(ctx context.Context, query string, args ...any) ([]store.Settlement, error) {
	rows, err := db.ro.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, mapErr(ctx, err)
	}
	defer func() { _ = rows.Close() }() // rows.Err reports what iterating hit
	var out []store.Settlement
	for rows.Next() {
		s, err := scan(rows)
		if err != nil {
			return nil, mapErr(ctx, err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		return nil, mapErr(ctx, err)
	}
	return out, nil
}

// scan reads one row of columns.
func scan(row interface{ Scan(...any) error }) (store.Settlement, error) {
	var s store.Settlement
	var state, reorg string
	var leaseUntil, created, updated int64
	err := row.Scan(&s.Key, &s.Network, &s.Asset, &s.Payer, &s.PayTo, &s.Amount, &state, &s.TxHash, &s.Reason, &s.Owner,
		&s.Fence, &leaseUntil, &s.SuccessReported, &created, &updated, &s.RawTx, &reorg, &s.Reorgs, &s.LostTo)
	if err != nil {
		return store.Settlement{}, err
	}
	s.State = store.SettlementState(state)
	s.Reorg = store.ReorgStatus(reorg)
	s.LeaseUntil = time.UnixMilli(leaseUntil).UTC()
	s.CreatedAt = time.UnixMilli(created).UTC()
	s.UpdatedAt = time.UnixMilli(updated).UTC()
	return s, nil
}

var _ store.Settlements = (*DB)(nil)
