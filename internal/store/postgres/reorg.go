package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/llm4agents/llm4agents/internal/store"
)

// RecentSettlements implements store.Settlements. Records updated in the
// same millisecond come in descending key order, byte by byte (COLLATE
// "C", as SQLite compares).
func (db *DB) RecentSettlements(ctx context.Context, network string, since time.Time, limit int) (_ []store.Settlement, err error) {
	defer store.Wrap(&err, "postgres", "recent settlements of network %q", network)
	if err := store.CheckRecentQuery(limit); err != nil {
		return nil, err
	}
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return nil, err
	}
	defer cancel()

	query, args := selectRecent(false), []any{since.UnixMilli(), limit}
	if network != store.AllNetworks {
		query, args = selectRecent(true), []any{since.UnixMilli(), limit, network}
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

// selectRecent is the query of RecentSettlements, of one network when
// oneNetwork; its arguments are since (unix ms), limit and, for one
// network, the network. Each form has a partial index that serves it in
// order: settlements_recent (migration 0011) for every network,
// settlements_recent_network (migration 0017) for one.
func selectRecent(oneNetwork bool) string {
	where := `state = 'settled' AND reorg <> 'lost' AND updated_at_ms >= $1`
	if oneNetwork {
		where += ` AND network = $3`
	}
	return `SELECT ` + columns + ` FROM settlements
WHERE ` + where + `
ORDER BY updated_at_ms DESC, settlement_key COLLATE "C" DESC
LIMIT $2`
}

// markReorg moves a settled record naming $3 to reorg status $4 with
// lost_to $5, when the move follows from its status (store.ReorgStep),
// in one statement: of concurrent callers the first changes the row, and
// the others, re-evaluating the condition on the row it left, change
// nothing.
const markReorg = withNow + `UPDATE settlements
SET reorg = $4::text, lost_to = $5::text, updated_at_ms = n.ms,
    reorgs = reorgs + CASE WHEN $4::text = 'dropped' THEN 1 ELSE 0 END
FROM n
WHERE settlement_key = $2 AND state = 'settled' AND tx_hash = $3
  AND (($4::text = 'dropped' AND reorg = '') OR ($4::text IN ('', 'lost') AND reorg = 'dropped'))`

// MarkReorg implements store.Settlements. When the conditional UPDATE
// changes nothing, the record is read to tell why: absent, fenced, or
// already in the status asked for.
func (db *DB) MarkReorg(ctx context.Context, key, txHash string, to store.ReorgStatus, lostTo string) (_ bool, err error) {
	defer store.Wrap(&err, "postgres", "mark reorg of settlement %q as %q", key, to)
	if err := store.CheckReorg(to, lostTo); err != nil {
		return false, err
	}
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return false, err
	}
	defer cancel()

	now := db.nowArg()
	for range claimAttempts {
		tag, err := db.pool.Exec(ctx, markReorg, now, key, txHash, string(to), lostTo)
		if err != nil {
			return false, db.mapErr(ctx, err)
		}
		if tag.RowsAffected() == 1 {
			return true, nil
		}
		cur, err := scanSettlement(db.pool.QueryRow(ctx, selectByKey, key))
		if err != nil {
			return false, db.mapErr(ctx, err)
		}
		switch {
		case cur.State != store.StateSettled:
			return false, fmt.Errorf("record is %s, not settled: %w", cur.State, store.ErrFenced)
		case cur.TxHash != txHash:
			return false, fmt.Errorf("record names transaction %s, not %s: %w", cur.TxHash, txHash, store.ErrFenced)
		}
		step, err := store.ReorgStep(cur.Reorg, to)
		if err != nil || !step {
			return false, err
		}
		// The move follows from the status just read, so the write should
		// have applied: another caller moved the record in between. Try
		// again rather than guess.
	}
	return false, fmt.Errorf("the record changed under %d marks in a row", claimAttempts)
}
