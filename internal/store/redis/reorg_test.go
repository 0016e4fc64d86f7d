package redis_test

import (
	"testing"
	"time"

	"github.com/llm4agents/llm4agents/internal/store"
)

// settle claims key and settles it with transaction 0x1.
func (tp *tamper) settle(t *testing.T, key string) {
	t.Helper()
	ctx := t.Context()
	s, ok, err := tp.db.ClaimSettlement(ctx, store.Settlement{Key: key, Amount: "1"}, time.Minute)
	if err != nil || !ok {
		t.Fatalf("ClaimSettlement(%q) = %v, %v", key, ok, err)
	}
	if err := tp.db.UpdateSettlement(ctx, key, s.Fence, store.StateSettled, "0x1", ""); err != nil {
		t.Fatalf("UpdateSettlement(%q): %v", key, err)
	}
}

// TestRecentSetForgets checks that the recent sets, unlike the records,
// forget what is older than store.RecentRetention and carry that TTL.
func TestRecentSetForgets(t *testing.T) {
	tp := newTamper(t)
	ctx := t.Context()
	first := tp.clock.Now()
	tp.settle(t, "old")
	tp.clock.Advance(store.RecentRetention + time.Millisecond)
	tp.settle(t, "new")

	// Both sets the record is in: every network's, and its network's.
	for _, set := range []string{tp.db.Key("settlement-recent", ""), tp.db.Key("settlement-recent-of", "")} {
		names, err := tp.raw.ZRange(ctx, set, 0, -1).Result()
		if err != nil {
			t.Fatal(err)
		}
		if len(names) != 1 || names[0] != "new" {
			t.Errorf("%s = %q, want only the record settled within the retention", set, names)
		}
		ttl, err := tp.raw.PTTL(ctx, set).Result()
		if err != nil {
			t.Fatal(err)
		}
		if ttl <= 0 || ttl > store.RecentRetention {
			t.Errorf("%s TTL = %v, want up to %v", set, ttl, store.RecentRetention)
		}
	}
	list, err := tp.db.RecentSettlements(ctx, store.AllNetworks, first, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].Key != "new" {
		t.Errorf("RecentSettlements() = %+v, want only new", list)
	}
	// The record itself stays: the success mark outlives every retry (D5).
	if s, err := tp.db.Settlement(ctx, "old"); err != nil || s.State != store.StateSettled {
		t.Errorf("Settlement(old) = %+v, %v; want it settled", s, err)
	}
}

// TestRecentSkipsMissing checks that a name left in the recent set without
// its record (deleted by hand) is skipped and does not use up the limit.
func TestRecentSkipsMissing(t *testing.T) {
	tp := newTamper(t)
	ctx := t.Context()
	since := tp.clock.Now()
	for _, k := range []string{"a", "b", "c"} {
		tp.settle(t, k)
		tp.clock.Advance(time.Millisecond)
	}
	tp.do(t, "DEL", tp.db.Key("settlement", "c"))
	list, err := tp.db.RecentSettlements(ctx, store.AllNetworks, since, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].Key != "b" || list[1].Key != "a" {
		t.Errorf("RecentSettlements(2) = %+v, want b and a", list)
	}
}
