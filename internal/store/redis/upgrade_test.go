package redis_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/llm4agents/llm4agents/internal/store"
)

// Versions before per-network sets kept one unresolved set and one recent
// set for every network. oldClaim and oldSettle write what their scripts
// wrote, so that a test can show what a store upgraded with records in
// flight finds, and what it finds while such a version still runs beside
// it (a rolling upgrade).

// oldClaim writes a claimed record of network created at ms, as an older
// version did: the record, and its name in the one unresolved set.
func (tp *tamper) oldClaim(t *testing.T, key, network string, ms int64) {
	t.Helper()
	fields := with(with(with(settlementFields(), "network", network), "created_at_ms", ms), "updated_at_ms", ms)
	tp.do(t, append([]any{"HSET", tp.db.Key("settlement", key)}, fields...)...)
	tp.do(t, "ZADD", tp.db.Key("settlement-unresolved-legacy", ""), ms, key)
}

// oldSettle settles the record key at ms as an older version did: out of
// the one unresolved set, into the one recent set.
func (tp *tamper) oldSettle(t *testing.T, key string, ms int64) {
	t.Helper()
	tp.do(t, "HSET", tp.db.Key("settlement", key), "state", "settled", "tx_hash", "0x1", "updated_at_ms", ms)
	tp.do(t, "ZREM", tp.db.Key("settlement-unresolved-legacy", ""), key)
	tp.do(t, "ZADD", tp.db.Key("settlement-recent-legacy", ""), ms, key)
}

// unresolvedKeys lists the keys of network's unresolved records.
func (tp *tamper) unresolvedKeys(t *testing.T, network string) []string {
	t.Helper()
	list, err := tp.db.UnresolvedSettlements(t.Context(), network, 100)
	if err != nil {
		t.Fatalf("UnresolvedSettlements(%q): %v", network, err)
	}
	return keys(list)
}

// recentKeys lists the keys of network's recent settlements.
func (tp *tamper) recentKeys(t *testing.T, network string) []string {
	t.Helper()
	list, err := tp.db.RecentSettlements(t.Context(), network, time.Time{}, 100)
	if err != nil {
		t.Fatalf("RecentSettlements(%q): %v", network, err)
	}
	return keys(list)
}

func keys(list []store.Settlement) []string {
	out := []string{}
	for _, s := range list {
		out = append(out, s.Key)
	}
	return out
}

// members lists the names in the sorted set key, lowest score first.
func (tp *tamper) members(t *testing.T, key string) []string {
	t.Helper()
	names, err := tp.raw.ZRange(t.Context(), key, 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// TestUpgradeFromOneSet: records an older version left in its one set of
// every network are listed per network after an upgrade, and so are those
// it writes while it still runs beside the new one; what it resolved
// leaves the new lists.
func TestUpgradeFromOneSet(t *testing.T) {
	tp := newTamper(t)
	ctx := t.Context()
	now := tp.clock.Now().UnixMilli()
	const mine, theirs = "eip155:8453", "eip155:1"
	want := func(what string, want, got []string) {
		t.Helper()
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", what, diff)
		}
	}

	// Before the upgrade: the older version left records of two networks
	// unresolved, and one settled.
	tp.oldClaim(t, "mine-old", mine, now-3000)
	tp.oldClaim(t, "theirs-old", theirs, now-2000)
	tp.oldClaim(t, "mine-settled", mine, now-1500)
	tp.oldSettle(t, "mine-settled", now-1000)
	// After it, the new version claims one of ours.
	if _, ok, err := tp.db.ClaimSettlement(ctx, store.Settlement{Key: "mine-new", Network: mine, Amount: "1"}, time.Minute); err != nil || !ok {
		t.Fatalf("ClaimSettlement() = %v, %v", ok, err)
	}
	want("our unresolved records", []string{"mine-old", "mine-new"}, tp.unresolvedKeys(t, mine))
	want("the legacy unresolved set", []string{}, tp.members(t, tp.db.Key("settlement-unresolved-legacy", "")))
	want("their unresolved set", []string{"theirs-old"}, tp.members(t, tp.db.Key("settlement-unresolved-of", theirs)))
	want("every network's unresolved records", []string{"mine-old", "theirs-old", "mine-new"}, tp.unresolvedKeys(t, store.AllNetworks))
	want("our recent settlements", []string{"mine-settled"}, tp.recentKeys(t, mine))
	want("the legacy recent set", []string{}, tp.members(t, tp.db.Key("settlement-recent-legacy", "")))
	for _, k := range []string{tp.db.Key("settlement-recent", ""), tp.db.Key("settlement-recent-of", mine)} {
		if ttl, err := tp.raw.PTTL(ctx, k).Result(); err != nil || ttl <= 0 || ttl > store.RecentRetention {
			t.Errorf("PTTL %s = %v, %v; want up to %v, as the scripts give", k, ttl, err, store.RecentRetention)
		}
	}

	// The older version still runs: it claims a record, and settles the
	// one the new version claimed.
	tp.oldClaim(t, "mine-during", mine, now+1)
	tp.oldSettle(t, "mine-new", now+2)
	want("our unresolved records while the older version runs", []string{"mine-old", "mine-during"}, tp.unresolvedKeys(t, mine))
	want("our unresolved set, cleared of what the older version settled", []string{"mine-old", "mine-during"},
		tp.members(t, tp.db.Key("settlement-unresolved-of", mine)))
	want("our recent settlements while the older version runs", []string{"mine-new", "mine-settled"}, tp.recentKeys(t, mine))

	// The new version settles a record the older one claimed: it leaves
	// every list of unresolved records.
	if err := tp.db.UpdateSettlement(ctx, "mine-old", 7, store.StateSettled, "0x2", ""); err != nil {
		t.Fatal(err)
	}
	want("our unresolved records at the end", []string{"mine-during"}, tp.unresolvedKeys(t, mine))
	want("every network's unresolved records at the end", []string{"theirs-old", "mine-during"}, tp.unresolvedKeys(t, store.AllNetworks))
	want("their unresolved records at the end", []string{"theirs-old"}, tp.unresolvedKeys(t, theirs))
}
