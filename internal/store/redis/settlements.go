package redis

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/llm4agents/llm4agents/internal/store"
)

// Settlement records (store.Settlements). Each record is a hash at
// keys.settlement(key) with the fields settlementFields; fences come
// from the counter at keys.settlementFence(), and the records in StateClaimed
// or StateBroadcast are listed in the sorted sets keys.unresolvedOf(their
// network) and keys.unresolvedAll(), scored by creation time, which the
// scripts keep in step with the records, as they keep the settled ones in
// the recent sets (reorg.go). Settlement records have no TTL: the success
// mark must outlive any retry (D5).

// ClaimSettlement implements store.Settlements in one script.
func (db *DB) ClaimSettlement(ctx context.Context, s store.Settlement, lease time.Duration) (_ store.Settlement, _ bool, err error) {
	defer store.Wrap(&err, "redis", "claim settlement %q", s.Key)
	if err := store.CheckClaim(s.Key, lease); err != nil {
		return store.Settlement{}, false, err
	}
	lms := store.CeilMillis(lease)
	status, rest, err := db.claim(ctx, s.Key, claimSettlementScript,
		[]string{db.keys.settlement(s.Key), db.keys.settlementFence(), db.keys.unresolvedAll(), db.keys.unresolvedOf(s.Network)},
		db.nowArg(), strconv.FormatInt(lms, 10), s.Key, s.Network, s.Asset, s.Payer, s.PayTo, s.Amount, s.Owner)
	if err != nil {
		return store.Settlement{}, false, err
	}
	// The script does not read the record back: a new record is s as
	// given, a takeover is the record as it was with the script's writes
	// (s's PayTo and Amount included).
	var rec store.Settlement
	switch {
	case status == "won" && len(rest) == 2:
		fence, now, err := fenceAndTime(rest[0], rest[1])
		if err != nil {
			return store.Settlement{}, false, err
		}
		rec = store.Settlement{Key: s.Key, Network: s.Network, Asset: s.Asset, Payer: s.Payer, PayTo: s.PayTo, Amount: s.Amount,
			State: store.StateClaimed, Owner: s.Owner, Fence: fence, LeaseUntil: msTime(now + lms), CreatedAt: msTime(now), UpdatedAt: msTime(now)}
	case status == "took_over" && len(rest) == 3:
		if rec, err = decodeSettlement(s.Key, rest[0]); err != nil {
			return store.Settlement{}, false, err
		}
		fence, now, err := fenceAndTime(rest[1], rest[2])
		if err != nil {
			return store.Settlement{}, false, err
		}
		prevOwner := rec.Owner
		rec.Owner, rec.Fence, rec.LeaseUntil, rec.UpdatedAt = s.Owner, fence, msTime(now+lms), msTime(now)
		rec.PayTo, rec.Amount = s.PayTo, s.Amount
		db.log.InfoContext(ctx, "took over expired settlement claim",
			"key", s.Key, "previous_owner", prevOwner, "owner", s.Owner, "fence", fence)
	case status == "held" && len(rest) == 1:
		if rec, err = decodeSettlement(s.Key, rest[0]); err != nil {
			return store.Settlement{}, false, err
		}
	default:
		return store.Settlement{}, false, fmt.Errorf("unexpected script reply %q of %d elements", status, len(rest))
	}
	return rec, status != "held", nil
}

// UpdateSettlement implements store.Settlements.
func (db *DB) UpdateSettlement(ctx context.Context, key string, fence int64, state store.SettlementState, txHash, reason string) (err error) {
	defer store.Wrap(&err, "redis", "update settlement %q to %s", key, state)
	if err := store.CheckSettlementUpdate(state, txHash, reason); err != nil {
		return err
	}
	status, rest, err := db.run(ctx, updateSettlementScript,
		[]string{db.keys.settlement(key), db.keys.unresolvedAll(), db.keys.recentAll()},
		db.nowArg(), strconv.FormatInt(fence, 10), string(state), txHash, reason, key, recentRetentionMs,
		db.keys.unresolvedNetPrefix(), db.keys.recentNetPrefix())
	if err != nil {
		return err
	}
	return outcome(status, rest)
}

// ReleaseSettlement implements store.Settlements.
func (db *DB) ReleaseSettlement(ctx context.Context, key string, fence int64) (err error) {
	defer store.Wrap(&err, "redis", "release settlement %q", key)
	status, rest, err := db.run(ctx, releaseSettlementScript,
		[]string{db.keys.settlement(key), db.keys.unresolvedAll()},
		strconv.FormatInt(fence, 10), key, db.keys.unresolvedNetPrefix())
	if err != nil {
		return err
	}
	return outcome(status, rest)
}

// RecordBroadcast implements store.Settlements.
func (db *DB) RecordBroadcast(ctx context.Context, key string, fence int64, txHash, rawTx string) (err error) {
	defer store.Wrap(&err, "redis", "record broadcast of settlement %q", key)
	if err := store.CheckBroadcast(txHash, rawTx); err != nil {
		return err
	}
	status, rest, err := db.run(ctx, recordBroadcastScript, []string{db.keys.settlement(key)},
		db.nowArg(), strconv.FormatInt(fence, 10), txHash, rawTx)
	if err != nil {
		return err
	}
	return outcome(status, rest)
}

// AbandonBroadcast implements store.Settlements.
func (db *DB) AbandonBroadcast(ctx context.Context, key string, fence int64, txHash string) (err error) {
	defer store.Wrap(&err, "redis", "abandon broadcast of settlement %q", key)
	status, rest, err := db.run(ctx, abandonBroadcastScript,
		[]string{db.keys.settlement(key), db.keys.unresolvedAll()},
		strconv.FormatInt(fence, 10), txHash, key, db.keys.unresolvedNetPrefix())
	if err != nil {
		return err
	}
	return outcome(status, rest)
}

// MarkSuccessReported implements store.Settlements: the script sets the mark
// only on a settled record that lacks it, so only one call ever gets true.
func (db *DB) MarkSuccessReported(ctx context.Context, key string) (_ bool, err error) {
	defer store.Wrap(&err, "redis", "mark success reported %q", key)
	status, rest, err := db.run(ctx, markSuccessReportedScript, []string{db.keys.settlement(key), db.keys.recentAll()},
		db.nowArg(), key, recentRetentionMs, db.keys.recentNetPrefix())
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

// Settlement implements store.Settlements.
func (db *DB) Settlement(ctx context.Context, key string) (_ store.Settlement, err error) {
	defer store.Wrap(&err, "redis", "settlement %q", key)
	status, rest, err := db.run(ctx, settlementScript, []string{db.keys.settlement(key)})
	if err != nil {
		return store.Settlement{}, err
	}
	if status != "ok" {
		return store.Settlement{}, outcome(status, rest)
	}
	if len(rest) != 1 {
		return store.Settlement{}, fmt.Errorf("unexpected reply of %d elements", len(rest))
	}
	return decodeSettlement(key, rest[0])
}

// UnresolvedSettlements implements store.Settlements from the set of
// network's unresolved records (of every network's for store.AllNetworks).
// A limit over 10,000 returns at most 10,000 records: the listing runs in
// one script, and Redis serves no other client meanwhile.
//
// Each call first moves up to 10,000 names out of the set that versions
// before per-network sets kept of every network (settlementLua's drain),
// so that what such a version left unresolved, or claims while it still
// runs during an upgrade, is listed too: at once, unless that set holds
// more, then within as many calls as it holds ten thousands.
func (db *DB) UnresolvedSettlements(ctx context.Context, network string, limit int) (_ []store.Settlement, err error) {
	defer store.Wrap(&err, "redis", "unresolved settlements of network %q", network)
	if err := store.CheckLimit(limit); err != nil {
		return nil, err
	}
	limit = min(limit, maxListLimit)
	set := db.keys.unresolvedAll()
	if network != store.AllNetworks {
		set = db.keys.unresolvedOf(network)
	}
	status, rest, err := db.run(ctx, unresolvedScript, []string{db.keys.unresolvedLegacy(), db.keys.unresolvedAll(), set},
		strconv.Itoa(limit), db.keys.settlementPrefix(), db.keys.unresolvedNetPrefix(), network, strconv.Itoa(maxListLimit))
	if err != nil {
		return nil, err
	}
	if status != "ok" {
		return nil, fmt.Errorf("unexpected script status %q", status)
	}
	return decodeListing(rest)
}

// decodeListing reads the {key, rec} pairs of a listing script's reply.
func decodeListing(rest []any) ([]store.Settlement, error) {
	var out []store.Settlement
	for _, v := range rest {
		pair, ok := v.([]any)
		if !ok || len(pair) != 2 {
			return nil, fmt.Errorf("unexpected list entry %T", v)
		}
		key, ok := pair[0].(string)
		if !ok {
			return nil, fmt.Errorf("unexpected list key %T", pair[0])
		}
		s, err := decodeSettlement(key, pair[1])
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// decodeSettlement reads a settlement record, the HMGET of
// settlementFields, from a script reply.
func decodeSettlement(key string, v any) (store.Settlement, error) {
	r, err := newFields(v, settlementFields)
	if err != nil {
		return store.Settlement{}, fmt.Errorf("record %q: %w", key, err)
	}
	s := store.Settlement{
		Key:             key,
		Network:         r.str(0),
		Asset:           r.str(1),
		Payer:           r.str(2),
		PayTo:           r.str(3),
		Amount:          r.str(4),
		State:           store.SettlementState(r.str(5)),
		TxHash:          r.str(6),
		Reason:          r.str(7),
		Owner:           r.str(8),
		Fence:           r.int(9),
		LeaseUntil:      msTime(r.int(10)),
		SuccessReported: r.int(11) == 1,
		CreatedAt:       msTime(r.int(12)),
		UpdatedAt:       msTime(r.int(13)),
	}
	if r.has(14) {
		s.RawTx = r.str(14)
	}
	// The scripts fill the reorg mark in for records without one.
	s.Reorg, s.Reorgs, s.LostTo = store.ReorgStatus(r.str(15)), r.int(16), r.str(17)
	if r.err != nil {
		return store.Settlement{}, fmt.Errorf("record %q: %w", key, r.err)
	}
	return s, nil
}

// fields is a record from a script reply: the values of names, in order,
// nil where a field is absent. The first missing or malformed field read is
// kept in err.
type fields struct {
	names []string
	vals  []any
	err   error
}

func newFields(v any, names []string) (*fields, error) {
	vals, ok := v.([]any)
	if !ok || len(vals) != len(names) {
		return nil, fmt.Errorf("unexpected record reply %T of %d fields", v, len(vals))
	}
	return &fields{names: names, vals: vals}, nil
}

// has reports whether field i is there.
func (f *fields) has(i int) bool { return f.vals[i] != nil }

func (f *fields) str(i int) string {
	s, ok := f.vals[i].(string)
	if !ok && f.err == nil {
		f.err = fmt.Errorf("field %s is %T, not a string", f.names[i], f.vals[i])
	}
	return s
}

func (f *fields) int(i int) int64 {
	s := f.str(i)
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil && f.err == nil {
		f.err = fmt.Errorf("field %s: %q is not an integer", f.names[i], s)
	}
	return n
}

// fenceAndTime reads the fence and the time a script wrote.
func fenceAndTime(fence, now any) (int64, int64, error) {
	f, ok1 := fence.(string)
	t, ok2 := now.(string)
	if !ok1 || !ok2 {
		return 0, 0, fmt.Errorf("unexpected fence %T and time %T in the script reply", fence, now)
	}
	fn, err1 := strconv.ParseInt(f, 10, 64)
	tn, err2 := strconv.ParseInt(t, 10, 64)
	if err1 != nil || err2 != nil {
		return 0, 0, fmt.Errorf("unexpected fence %q and time %q in the script reply", f, t)
	}
	return fn, tn, nil
}

// msTime is unix milliseconds as a time in UTC.
func msTime(ms int64) time.Time { return time.UnixMilli(ms).UTC() }

var _ store.Settlements = (*DB)(nil)
