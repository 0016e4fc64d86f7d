package redis

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/llm4agents/llm4agents/internal/store"
)

// The reconciler's reorg work list (store.Settlements.RecentSettlements) is
// the sorted set keys.recentOf(its network), and the operator's is
// keys.recentAll(): the settled records not lost to a reorg, scored by
// their updated_at_ms. The scripts that settle a record, mark its success
// or mark a reorg keep both in step (settlementLua's add_recent), and
// forget what is older than store.RecentRetention, which is also each
// set's TTL, renewed on every add: the records themselves never expire.

// recentRetentionMs is store.RecentRetention for the scripts.
var recentRetentionMs = strconv.FormatInt(store.RecentRetention.Milliseconds(), 10)

// RecentSettlements implements store.Settlements from the set of network's
// recent settlements (of every network's for store.AllNetworks). Records
// updated in the same millisecond come in descending key order (byte
// order). Each call first drains the set of every network that versions
// before per-network sets kept, as UnresolvedSettlements does.
func (db *DB) RecentSettlements(ctx context.Context, network string, since time.Time, limit int) (_ []store.Settlement, err error) {
	defer store.Wrap(&err, "redis", "recent settlements of network %q", network)
	if err := store.CheckRecentQuery(limit); err != nil {
		return nil, err
	}
	set := db.keys.recentAll()
	if network != store.AllNetworks {
		set = db.keys.recentOf(network)
	}
	status, rest, err := db.run(ctx, recentScript, []string{db.keys.recentLegacy(), db.keys.recentAll(), set},
		strconv.FormatInt(since.UnixMilli(), 10), strconv.Itoa(limit), db.keys.settlementPrefix(),
		db.keys.recentNetPrefix(), network, strconv.Itoa(maxListLimit), recentRetentionMs)
	if err != nil {
		return nil, err
	}
	if status != "ok" {
		return nil, fmt.Errorf("unexpected script status %q", status)
	}
	return decodeListing(rest)
}

// MarkReorg implements store.Settlements in one script, which decides as
// store.ReorgStep does.
func (db *DB) MarkReorg(ctx context.Context, key, txHash string, to store.ReorgStatus, lostTo string) (_ bool, err error) {
	defer store.Wrap(&err, "redis", "mark reorg of settlement %q as %q", key, to)
	if err := store.CheckReorg(to, lostTo); err != nil {
		return false, err
	}
	status, rest, err := db.run(ctx, markReorgScript, []string{db.keys.settlement(key), db.keys.recentAll()},
		db.nowArg(), txHash, string(to), lostTo, key, recentRetentionMs, db.keys.recentNetPrefix())
	if err != nil {
		return false, err
	}
	if status != "ok" {
		return false, outcome(status, rest)
	}
	if len(rest) != 1 {
		return false, fmt.Errorf("unexpected reply of %d elements", len(rest))
	}
	return rest[0] == "1", nil
}
