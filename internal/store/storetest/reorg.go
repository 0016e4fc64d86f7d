package storetest

import (
	"errors"
	"fmt"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/llm4agents/llm4agents/internal/store"
)

// The reorg cases of RunSettlements: RecentSettlements and MarkReorg.

// markReorg marks the record key, settled with txHash1, as to.
func (e *env) markReorg(key string, to store.ReorgStatus, lostTo string) bool {
	e.t.Helper()
	changed, err := e.a.MarkReorg(e.ctx, key, txHash1, to, lostTo)
	if err != nil {
		e.t.Fatalf("MarkReorg(%q, %q, %q): %v", key, to, lostTo, err)
	}
	return changed
}

func (e *env) recentOf(h store.Settlements, n string, since time.Time, limit int) []store.Settlement {
	e.t.Helper()
	got, err := h.RecentSettlements(e.ctx, n, since, limit)
	if err != nil {
		e.t.Fatalf("RecentSettlements(%q, %v, %d): %v", n, since, limit, err)
	}
	return got
}

func testRecentOrder(e *env) {
	// Keys sort against their age, so the order must come from UpdatedAt.
	e.inState("z-old", store.StateSettled)
	since := e.clock.Advance(time.Second)
	e.inState("y-settled", store.StateSettled)
	e.inState("x-same-ms", store.StateSettled) // ties come in descending key order
	e.clock.Advance(time.Second)
	e.inState("w-claimed", store.StateClaimed)
	e.inState("v-broadcast", store.StateBroadcast)
	e.inState("u-failed", store.StateFailed)
	t3 := e.clock.Advance(time.Second)
	e.inState("t-settled", store.StateSettled)
	e.inState("s-dropped", store.StateSettled)
	e.inState("r-lost", store.StateSettled)
	e.markReorg("r-lost", store.ReorgDropped, "")
	e.markReorg("r-lost", store.ReorgLost, txHash2)
	// Later writes to a settled record bring it forward: the success mark,
	// and a reorg mark other than lost.
	t4 := e.clock.Advance(time.Second)
	if set, err := e.a.MarkSuccessReported(e.ctx, "z-old"); err != nil || !set {
		e.t.Fatalf("MarkSuccessReported() = %v, %v", set, err)
	}
	e.markReorg("s-dropped", store.ReorgDropped, "")

	// With one network in the store, its list and the list of every
	// network are the same.
	want := []store.Settlement{e.get("z-old"), e.get("s-dropped"), e.get("t-settled"), e.get("y-settled"), e.get("x-same-ms")}
	for _, n := range []string{network, store.AllNetworks} {
		for _, limit := range []int{1, 2, 4, 5, 100, store.MaxRecentPage} {
			for name, h := range map[string]store.Settlements{"a": e.a, "b": e.b} {
				if diff := cmp.Diff(want[:min(limit, len(want))], e.recentOf(h, n, since, limit)); diff != "" {
					e.t.Errorf("handle %s: RecentSettlements(%q, since, %d) (-want +got):\n%s", name, n, limit, diff)
				}
			}
		}
	}
	// since counts to the millisecond, inclusive.
	if diff := cmp.Diff(want[:3], e.recentOf(e.b, network, t3, 100)); diff != "" {
		e.t.Errorf("RecentSettlements(t3) (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want[:2], e.recentOf(e.b, network, t4, 100)); diff != "" {
		e.t.Errorf("RecentSettlements(t4) (-want +got):\n%s", diff)
	}
	if got := e.recentOf(e.b, network, t4.Add(time.Millisecond), 100); len(got) != 0 {
		e.t.Errorf("RecentSettlements(after the last write) = %+v, want none", got)
	}
	// A record mined again is listed on.
	now := e.clock.Advance(time.Second)
	e.markReorg("s-dropped", store.ReorgNone, "")
	got := e.recentOf(e.b, network, now, 100)
	if len(got) != 1 || got[0].Key != "s-dropped" || got[0].Reorg != store.ReorgNone || !got[0].UpdatedAt.Equal(now) {
		e.t.Errorf("RecentSettlements(now) after the record was mined again = %+v, want s-dropped only, updated now", got)
	}
}

// testRecentPerNetwork: each chain's reconciler looks for reorgs in its
// own network's settlements, and the limit counts those only, so that
// another chain settling more than a page in the window does not hide
// this one's from the reorg check.
func testRecentPerNetwork(e *env) {
	since := e.clock.Now()
	var mine, theirs, every []store.Settlement
	for i := range 3 {
		m := e.claimOn(network, fmt.Sprintf("mine-%d", i), store.StateSettled)
		e.clock.Advance(time.Millisecond)
		o := e.claimOn(otherNetwork, fmt.Sprintf("theirs-%d", i), store.StateSettled)
		e.clock.Advance(time.Millisecond)
		// Newest first.
		mine, theirs, every = append([]store.Settlement{m}, mine...), append([]store.Settlement{o}, theirs...), append([]store.Settlement{o, m}, every...)
	}
	e.claimOn(network, "mine-unresolved", store.StateBroadcast)
	for _, tc := range []struct {
		network string
		want    []store.Settlement
	}{
		{network, mine},
		{otherNetwork, theirs},
		{store.AllNetworks, every},
		{"eip155:1", nil},
	} {
		for _, limit := range []int{1, 2, 100} {
			for name, h := range map[string]store.Settlements{"a": e.a, "b": e.b} {
				got := e.recentOf(h, tc.network, since, limit)
				if diff := cmp.Diff(tc.want[:min(limit, len(tc.want))], got, cmpopts.EquateEmpty()); diff != "" {
					e.t.Errorf("handle %s: RecentSettlements(%q, since, %d) (-want +got):\n%s", name, tc.network, limit, diff)
				}
			}
		}
	}

	// 150 settlements of the other network, all newer than ours: a page
	// of 100 still holds all of ours.
	e.clock.Advance(time.Millisecond)
	for i := range 150 {
		e.claimOn(otherNetwork, fmt.Sprintf("busy-%03d", i), store.StateSettled)
	}
	if diff := cmp.Diff(mine, e.recentOf(e.b, network, since, 100)); diff != "" {
		e.t.Errorf("RecentSettlements(%q, since, 100) behind 150 newer settlements of %q (-want +got):\n%s", network, otherNetwork, diff)
	}
	if got := e.recentOf(e.b, otherNetwork, since, 100); len(got) != 100 || got[0].Key != "busy-149" {
		e.t.Errorf("RecentSettlements(%q, since, 100) = %d records; want 100, from busy-149", otherNetwork, len(got))
	}
	// A record lost to a reorg leaves its network's list.
	e.clock.Advance(time.Millisecond)
	e.markReorg(mine[0].Key, store.ReorgDropped, "")
	e.markReorg(mine[0].Key, store.ReorgLost, "")
	if diff := cmp.Diff(mine[1:], e.recentOf(e.b, network, since, 100)); diff != "" {
		e.t.Errorf("RecentSettlements(%q) after a record was lost (-want +got):\n%s", network, diff)
	}
}

func testRecentInvalid(e *env) {
	e.inState("k", store.StateSettled)
	for _, limit := range []int{0, -1, store.MaxRecentPage + 1} {
		got, err := e.a.RecentSettlements(e.ctx, network, start.Add(-time.Hour), limit)
		if err == nil || errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrFenced) {
			e.t.Errorf("RecentSettlements(limit %d) = %+v, %v; want a plain error", limit, got, err)
		}
	}
}

func testReorgTransitions(e *env) {
	s := e.inState("k", store.StateSettled)
	steps := []struct {
		to      store.ReorgStatus
		lostTo  string
		changed bool
	}{
		{store.ReorgDropped, "", true},
		{store.ReorgDropped, "", false}, // a second replica finding the same
		{store.ReorgNone, "", true},     // mined again
		{store.ReorgNone, "", false},
		{store.ReorgDropped, "", true}, // and dropped again: counted again
		{store.ReorgLost, txHash2, true},
		{store.ReorgLost, txHash2, false},
		{store.ReorgLost, "", false}, // final: another answer changes nothing
	}
	for i, st := range steps {
		now := e.clock.Advance(time.Second)
		if changed := e.markReorg("k", st.to, st.lostTo); changed != st.changed {
			e.t.Errorf("step %d: MarkReorg(%q, %q) = %v, want %v", i, st.to, st.lostTo, changed, st.changed)
		}
		if st.changed {
			s.Reorg, s.LostTo, s.UpdatedAt = st.to, st.lostTo, now
			if st.to == store.ReorgDropped {
				s.Reorgs++
			}
		}
		e.unchanged("k", s)
	}
	if s.Reorgs != 2 {
		e.t.Errorf("Reorgs = %d after two drops, want 2", s.Reorgs)
	}
	// Nothing moves a lost record.
	for _, to := range []store.ReorgStatus{store.ReorgNone, store.ReorgDropped} {
		e.clock.Advance(time.Second)
		if changed, err := e.a.MarkReorg(e.ctx, "k", txHash1, to, ""); changed || !errors.Is(err, store.ErrFenced) {
			e.t.Errorf("MarkReorg(lost -> %q) = %v, %v; want false, ErrFenced", to, changed, err)
		}
		e.unchanged("k", s)
	}
	// It is settled all the same: the buyer's answer stands (D5).
	if set, err := e.a.MarkSuccessReported(e.ctx, "k"); err != nil || !set {
		e.t.Errorf("MarkSuccessReported() of a lost record = %v, %v; want true, nil", set, err)
	}
}

func testReorgKeepsMark(e *env) {
	s := e.inState("k", store.StateSettled)
	if set, err := e.a.MarkSuccessReported(e.ctx, "k"); err != nil || !set {
		e.t.Fatalf("MarkSuccessReported() = %v, %v", set, err)
	}
	s = e.get("k")
	now := e.clock.Advance(time.Second)
	e.markReorg("k", store.ReorgDropped, "")
	s.Reorg, s.Reorgs, s.UpdatedAt = store.ReorgDropped, 1, now
	e.unchanged("k", s)
	// Exactly one success, ever: a reorg gives no second one.
	e.clock.Advance(time.Second)
	for name, h := range map[string]store.Settlements{"a": e.a, "b": e.b} {
		if set, err := h.MarkSuccessReported(e.ctx, "k"); set || err != nil {
			e.t.Errorf("handle %s: MarkSuccessReported() after a reorg = %v, %v; want false, nil", name, set, err)
		}
	}
	// The record stays settled with its transaction: the same values again
	// change nothing, others are refused.
	e.update("k", s.Fence, store.StateSettled, txHash1, "")
	if err := e.a.UpdateSettlement(e.ctx, "k", s.Fence, store.StateSettled, txHash2, ""); !errors.Is(err, store.ErrFenced) {
		e.t.Errorf("UpdateSettlement(another transaction) = %v, want ErrFenced", err)
	}
	e.unchanged("k", s)
}

func testReorgRefused(e *env) {
	if changed, err := e.a.MarkReorg(e.ctx, "absent", txHash1, store.ReorgDropped, ""); changed || !errors.Is(err, store.ErrNotFound) {
		e.t.Errorf("MarkReorg(absent) = %v, %v; want false, ErrNotFound", changed, err)
	}
	e.gone("absent")
	// Only a settled record has a transaction on the chain to lose.
	for _, state := range []store.SettlementState{store.StateClaimed, store.StateBroadcast, store.StateFailed} {
		key := "k-" + string(state)
		before := e.inState(key, state)
		if changed, err := e.a.MarkReorg(e.ctx, key, before.TxHash, store.ReorgDropped, ""); changed || !errors.Is(err, store.ErrFenced) {
			e.t.Errorf("%s: MarkReorg() = %v, %v; want false, ErrFenced", state, changed, err)
		}
		e.unchanged(key, before)
	}
	s := e.inState("k", store.StateSettled)
	for _, tc := range []struct {
		name   string
		tx     string
		to     store.ReorgStatus
		lostTo string
		want   error // nil: any error that is not a sentinel
	}{
		{"another transaction", txHash2, store.ReorgDropped, "", store.ErrFenced},
		{"lost without being dropped", txHash1, store.ReorgLost, txHash2, store.ErrFenced},
		{"unknown status", txHash1, "gone", "", nil},
		{"lost to with dropped", txHash1, store.ReorgDropped, txHash2, nil},
		{"lost to with none", txHash1, store.ReorgNone, txHash2, nil},
	} {
		changed, err := e.a.MarkReorg(e.ctx, "k", tc.tx, tc.to, tc.lostTo)
		switch {
		case changed || err == nil:
			e.t.Errorf("%s: MarkReorg() = %v, %v; want an error", tc.name, changed, err)
		case tc.want != nil && !errors.Is(err, tc.want):
			e.t.Errorf("%s: MarkReorg() = %v, want %v", tc.name, err, tc.want)
		case tc.want == nil && (errors.Is(err, store.ErrFenced) || errors.Is(err, store.ErrNotFound)):
			e.t.Errorf("%s: MarkReorg() = %v, want a plain error", tc.name, err)
		}
	}
	e.unchanged("k", s)
}

func testRaceReorg(e *env) {
	for round := range 4 {
		key := fmt.Sprintf("k%d", round)
		e.inState(key, store.StateSettled)
		for _, to := range []store.ReorgStatus{store.ReorgDropped, store.ReorgLost} {
			out := e.race(func(h store.Settlements, _ int) (store.Settlement, bool, error) {
				changed, err := h.MarkReorg(e.ctx, key, txHash1, to, "")
				return store.Settlement{}, changed, err
			})
			e.winner(fmt.Sprintf("MarkReorg(%q)", to), out)
		}
		if s := e.get(key); s.Reorg != store.ReorgLost || s.Reorgs != 1 {
			e.t.Errorf("record %q after the races: reorg %q, %d reorgs; want lost, 1", key, s.Reorg, s.Reorgs)
		}
	}
}
