package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/llm4agents/llm4agents/internal/store"
)

// RecentSettlements implements store.Settlements. Records updated in the
// same millisecond come in descending key order.
func (db *DB) RecentSettlements(ctx context.Context, network string, since time.Time, limit int) (_ []store.Settlement, err error) {
	defer store.Wrap(&err, "sqlite", "recent settlements of network %q", network)
	if err := store.CheckRecentQuery(limit); err != nil {
		return nil, err
	}
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return nil, err
	}
	defer cancel()

	if network == store.AllNetworks {
		return db.settlements(ctx, selectRecent(false), since.UnixMilli(), limit)
	}
	return db.settlements(ctx, selectRecent(true), since.UnixMilli(), limit, network)
}

// selectRecent is the query of RecentSettlements, of one network when
// oneNetwork; its arguments are since (unix ms), limit and, for one
// network, the network. Each form has a partial index that serves it in
// order: settlements_recent (migration 0011) for every network,
// settlements_recent_network (migration 0017) for one.
func selectRecent(oneNetwork bool) string {
	where := `state = 'settled' AND reorg <> 'lost' AND updated_at_ms >= ?1`
	if oneNetwork {
		where += ` AND network = ?3`
	}
	return `SELECT ` + columns + ` FROM settlements
WHERE ` + where + `
ORDER BY updated_at_ms DESC, settlement_key DESC
LIMIT ?2`
}

// MarkReorg implements store.Settlements. It reads and writes as one op of
// a write batch, so of concurrent callers finding the same, one changes the
// record.
func (db *DB) MarkReorg(ctx context.Context, key, txHash string, to store.ReorgStatus, lostTo string) (_ bool, err error) {
	defer store.Wrap(&err, "sqlite", "mark reorg of settlement %q as %q", key, to)
	if err := store.CheckReorg(to, lostTo); err != nil {
		return false, err
	}
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return false, err
	}
	defer cancel()

	var changed bool
	err = db.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		cur, err := scan(tx.QueryRowContext(ctx, selectByKey, key))
		if err != nil {
			return err
		}
		switch {
		case cur.State != store.StateSettled:
			return fmt.Errorf("record is %s, not settled: %w", cur.State, store.ErrFenced)
		case cur.TxHash != txHash:
			return fmt.Errorf("record names transaction %s, not %s: %w", cur.TxHash, txHash, store.ErrFenced)
		}
		step, err := store.ReorgStep(cur.Reorg, to)
		if err != nil || !step {
			return err
		}
		reorgs := cur.Reorgs
		if to == store.ReorgDropped {
			reorgs++
		}
		_, err = tx.ExecContext(ctx, `UPDATE settlements SET reorg = ?, reorgs = ?, lost_to = ?, updated_at_ms = ? WHERE settlement_key = ?`,
			string(to), reorgs, lostTo, db.nowMs(), key)
		changed = err == nil
		return err
	})
	if err != nil {
		return false, err
	}
	return changed, nil
}
