package credits

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/internal/store/sqlite"
)

// replicas opens n Keys on one SQLite file, as n processes would share it,
// all on clk.
func replicas(t *testing.T, clk *testClock, n int) []*Keys {
	t.Helper()
	path := filepath.Join(t.TempDir(), "rates.db")
	var out []*Keys
	for range n {
		db, err := sqlite.Open(t.Context(), path, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = db.Close() })
		db.Now = clk.Now
		k := NewKeys(db, nil)
		k.Now = clk.Now
		out = append(out, k)
	}
	return out
}

// TestTakeRateAcrossReplicas runs 200 concurrent calls of one key through
// three replicas: together they admit the key's rate per minute exactly,
// not three times it, and the next minute admits again.
func TestTakeRateAcrossReplicas(t *testing.T) {
	clk := &testClock{now: t0}
	rs := replicas(t, clk, 3)
	key := store.APIKey{ID: "sk-rpm", RatePerMinute: 30}
	run := func() (admitted, refused int64) {
		var a, r atomic.Int64
		var wg sync.WaitGroup
		for i := range 200 {
			wg.Go(func() {
				err := rs[i%3].TakeRate(t.Context(), key, 1000)
				var rl *store.RateLimitedError
				switch {
				case err == nil:
					a.Add(1)
				case errors.As(err, &rl) && errors.Is(err, ErrRateLimited) && rl.What == "requests" && rl.RetryAfter > 0:
					r.Add(1)
				default:
					t.Errorf("TakeRate(): %v", err)
				}
			})
		}
		wg.Wait()
		return a.Load(), r.Load()
	}
	if a, r := run(); a != 30 || r != 170 {
		t.Errorf("first minute: %d admitted, %d refused; want 30, 170", a, r)
	}
	clk.Advance(time.Minute)
	if a, _ := run(); a != 30 {
		t.Errorf("next minute: %d admitted, want 30", a)
	}
}

func TestTakeRateTokens(t *testing.T) {
	clk := &testClock{now: t0}
	rs := replicas(t, clk, 2)
	key := store.APIKey{ID: "sk-tpm", TokensPerMinute: 10_000}
	// A call counts its prompt plus its output bound.
	for i, n := range []int64{4000, 3000, 2000} {
		if err := rs[i%2].TakeRate(t.Context(), key, n); err != nil {
			t.Fatalf("call %d of %d tokens: %v", i, n, err)
		}
	}
	// 1,000 are left in the minute, on the store or in a slice.
	err := rs[1].TakeRate(t.Context(), key, 1500)
	var rl *store.RateLimitedError
	if !errors.As(err, &rl) || rl.What != "tokens" || rl.TooLarge {
		t.Errorf("TakeRate(1500 of the 1000 left) = %v, want a tokens refusal", err)
	}
	err = rs[0].TakeRate(t.Context(), key, 10_001)
	if !errors.As(err, &rl) || !rl.TooLarge || rl.Need != 10_001 {
		t.Errorf("TakeRate(more than the limit) = %v, want too large", err)
	}
	// A key without limits is never counted; one with both must fit both.
	for range 50 {
		if err := rs[0].TakeRate(t.Context(), store.APIKey{ID: "sk-free"}, 1<<30); err != nil {
			t.Fatalf("unlimited key: %v", err)
		}
	}
	both := store.APIKey{ID: "sk-both", RatePerMinute: 100, TokensPerMinute: 1000}
	if err := rs[0].TakeRate(t.Context(), both, 1000); err != nil {
		t.Fatal(err)
	}
	if err := rs[1].TakeRate(t.Context(), both, 1); !errors.As(err, &rl) || rl.What != "tokens" {
		t.Errorf("TakeRate(requests left, tokens spent) = %v, want a tokens refusal", err)
	}
}

// TestTakeRateLimitChange: a slice taken under one limit is not used under
// another; a lowered limit binds at once on the replica's next call.
func TestTakeRateLimitChange(t *testing.T) {
	clk := &testClock{now: t0}
	rs := replicas(t, clk, 1)
	key := store.APIKey{ID: "sk-change", RatePerMinute: 1000}
	for range 20 {
		if err := rs[0].TakeRate(t.Context(), key, 1); err != nil {
			t.Fatal(err)
		}
	}
	key.RatePerMinute = 5 // the window has granted more than 5 already
	if err := rs[0].TakeRate(t.Context(), key, 1); !errors.Is(err, ErrRateLimited) {
		t.Errorf("TakeRate() after the limit fell below what was taken = %v, want ErrRateLimited", err)
	}
}

// TestTakeRateFewWrites: a busy key takes slices of about a second of its
// calls, so most calls make no store write.
func TestTakeRateFewWrites(t *testing.T) {
	clk := &testClock{now: t0}
	st := &countingRates{}
	path := filepath.Join(t.TempDir(), "rates.db")
	db, err := sqlite.Open(t.Context(), path, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	db.Now = clk.Now
	st.Rates = db
	r := newRates(st, clk.Now)
	key := store.APIKey{ID: "sk-busy", RatePerMinute: 1_000_000}
	const calls = 5000
	for i := range calls {
		if i%500 == 0 {
			clk.Advance(100 * time.Millisecond) // 5,000 calls a second
		}
		if err := r.take(t.Context(), key, 1); err != nil {
			t.Fatal(err)
		}
	}
	if n := st.n.Load(); n > 50 {
		t.Errorf("%d calls took %d slices from the store, want at most 50", calls, n)
	}
}

type countingRates struct {
	store.Rates
	n atomic.Int64
}

func (c *countingRates) TakeRate(ctx context.Context, t store.RateTake) (store.RateGrant, error) {
	c.n.Add(1)
	return c.Rates.TakeRate(ctx, t)
}
