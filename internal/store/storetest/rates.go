package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/llm4agents/llm4agents/internal/store"
)

// OpenRates opens two independent handles on one new, empty database, as
// OpenLedger does.
type OpenRates func(t *testing.T, now func() time.Time) (a, b store.Rates)

// RunRates runs the store.Rates conformance suite: slices of a window's
// allowance (want, half of what is left, never less than the need), the
// refusals and their retry time, a new window, the window of a clock that
// ran ahead, invalid arguments, and takes racing from two handles that
// never grant more than the limit.
func RunRates(t *testing.T, open OpenRates) {
	tests := []struct {
		name string
		run  func(t *testing.T, c *clock, a, b store.Rates)
	}{
		{"Slices", testRateSlices},
		{"Refusals", testRateRefusals},
		{"NewWindow", testRateNewWindow},
		{"ClockAhead", testRateClockAhead},
		{"InvalidArguments", testRateInvalid},
		{"Race", testRateRace},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := &clock{now: start}
			a, b := open(t, c.Now)
			tc.run(t, c, a, b)
		})
	}
}

func rateTake(need, want int64) store.RateTake {
	return store.RateTake{KeyID: "sk-rate", RequestLimit: 10, TokenLimit: 10_000,
		NeedRequests: need, WantRequests: want, NeedTokens: need * 1000, WantTokens: want * 1000}
}

func take(t *testing.T, r store.Rates, req store.RateTake) store.RateGrant {
	t.Helper()
	g, err := r.TakeRate(t.Context(), req)
	if err != nil {
		t.Fatalf("TakeRate(%+v): %v", req, err)
	}
	return g
}

func testRateSlices(t *testing.T, c *clock, a, b store.Rates) {
	// start is 05:06:07.008: its window is 05:06:00 to 05:07:00.
	window := time.Date(2026, 3, 4, 5, 6, 0, 0, time.UTC)
	g := take(t, a, rateTake(1, 4))
	if g.Requests != 4 || g.Tokens != 4000 || !g.Window.Equal(window) || !g.Ends.Equal(window.Add(time.Minute)) || !g.Now.Equal(start.Truncate(time.Millisecond)) {
		t.Errorf("first take = %+v; want 4 requests, 4000 tokens in the window of %v, now %v", g, window, start)
	}
	// 6 left: half is 3, less than the want of 5.
	if g := take(t, b, rateTake(1, 5)); g.Requests != 3 || g.Tokens != 3000 {
		t.Errorf("second take = %+v; want half of what is left, 3 and 3000", g)
	}
	// 3 left: half is 1, but the need of 2 is granted.
	if g := take(t, a, rateTake(2, 3)); g.Requests != 2 || g.Tokens != 2000 {
		t.Errorf("third take = %+v; want the need, 2 and 2000", g)
	}
	// An unlimited part grants 0 and counts nothing.
	req := rateTake(1, 1)
	req.TokenLimit = 0
	if g := take(t, b, req); g.Requests != 1 || g.Tokens != 0 {
		t.Errorf("take without a token limit = %+v; want 1 request, 0 tokens", g)
	}
	// Nothing left of the requests; 1,000 tokens are.
	req = rateTake(0, 0)
	req.RequestLimit, req.NeedTokens, req.WantTokens = 0, 1000, 5000
	if g := take(t, a, req); g.Tokens != 1000 || g.Requests != 0 {
		t.Errorf("take of the last tokens = %+v; want 1000 tokens", g)
	}
}

func testRateRefusals(t *testing.T, c *clock, a, b store.Rates) {
	take(t, a, rateTake(8, 8))
	_, err := b.TakeRate(t.Context(), rateTake(3, 3))
	var re *store.RateLimitedError
	if !errors.As(err, &re) || re.What != "requests" || re.Limit != 10 || re.Need != 3 || re.TooLarge ||
		re.RetryAfter != 52*time.Second+992*time.Millisecond {
		t.Fatalf("TakeRate(past the limit) = %v (%+v); want requests refused, retry in 52.992s", err, re)
	}
	// The refusal took nothing: the 2 left are still there.
	if g := take(t, b, rateTake(2, 2)); g.Requests != 2 {
		t.Errorf("take after a refusal = %+v, want 2", g)
	}
	// Tokens, with requests to spare in a fresh key.
	req := rateTake(1, 1)
	req.KeyID, req.NeedTokens, req.WantTokens = "sk-tokens", 10_001, 10_001
	_, err = a.TakeRate(t.Context(), req)
	if !errors.As(err, &re) || re.What != "tokens" || !re.TooLarge || re.Need != 10_001 {
		t.Errorf("TakeRate(a call above the token limit) = %v (%+v); want tokens, too large", err, re)
	}
}

func testRateNewWindow(t *testing.T, c *clock, a, b store.Rates) {
	take(t, a, rateTake(10, 10))
	c.Advance(52 * time.Second) // 05:06:59.008
	if _, err := b.TakeRate(t.Context(), rateTake(1, 1)); !errors.As(err, new(*store.RateLimitedError)) {
		t.Fatalf("TakeRate(the same window) = %v, want a refusal", err)
	}
	c.Advance(time.Second) // 05:07:00.008: a new window, counted from zero
	g := take(t, b, rateTake(1, 10))
	if g.Requests != 5 || !g.Window.Equal(time.Date(2026, 3, 4, 5, 7, 0, 0, time.UTC)) {
		t.Errorf("take in the next window = %+v; want 5 (half of 10) in the window of 05:07", g)
	}
}

func testRateClockAhead(t *testing.T, c *clock, a, b store.Rates) {
	c.Advance(time.Minute) // the window of 05:07
	take(t, a, rateTake(10, 10))
	c.Advance(-time.Minute) // a process whose clock is behind
	_, err := b.TakeRate(t.Context(), rateTake(1, 1))
	var re *store.RateLimitedError
	if !errors.As(err, &re) || re.RetryAfter != time.Minute+52*time.Second+992*time.Millisecond {
		t.Errorf("TakeRate(clock behind the window) = %v (%+v); want a refusal until the later window ends", err, re)
	}
}

func testRateInvalid(t *testing.T, c *clock, a, b store.Rates) {
	mod := func(f func(*store.RateTake)) store.RateTake {
		r := rateTake(1, 2)
		f(&r)
		return r
	}
	for name, req := range map[string]store.RateTake{
		"empty key":        mod(func(r *store.RateTake) { r.KeyID = "" }),
		"key with a space": mod(func(r *store.RateTake) { r.KeyID = "sk 1" }),
		"no limit":         mod(func(r *store.RateTake) { r.RequestLimit, r.TokenLimit = 0, 0 }),
		"negative limit":   mod(func(r *store.RateTake) { r.RequestLimit = -1 }),
		"huge limit":       mod(func(r *store.RateTake) { r.TokenLimit = store.MaxRateLimit + 1 }),
		"negative need":    mod(func(r *store.RateTake) { r.NeedRequests = -1 }),
		"want below need":  mod(func(r *store.RateTake) { r.WantTokens = r.NeedTokens - 1 }),
		"huge want":        mod(func(r *store.RateTake) { r.WantRequests = store.MaxRateLimit + 1 }),
	} {
		_, err := a.TakeRate(t.Context(), req)
		if errors.As(err, new(*store.RateLimitedError)) {
			t.Errorf("TakeRate(%s) = %v, want an argument error", name, err)
		}
		noSentinel(t, fmt.Sprintf("TakeRate(%s)", name), err)
	}
	// Nothing was counted.
	if g := take(t, b, rateTake(1, 10)); g.Requests != 5 {
		t.Errorf("take after invalid ones = %+v, want 5 (half of 10)", g)
	}
}

func testRateRace(t *testing.T, c *clock, a, b store.Rates) {
	const limit = 100
	var mu sync.Mutex
	var granted, refused int64
	var wg sync.WaitGroup
	for i := range 40 {
		r := a
		if i%2 == 1 {
			r = b
		}
		wg.Go(func() {
			for range 5 {
				g, err := r.TakeRate(t.Context(), store.RateTake{KeyID: "sk-race", RequestLimit: limit, NeedRequests: 1, WantRequests: 3})
				mu.Lock()
				switch {
				case err == nil:
					granted += g.Requests
				case errors.As(err, new(*store.RateLimitedError)):
					refused++
				default:
					t.Errorf("TakeRate(): %v", err)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if granted != limit || refused == 0 {
		t.Errorf("200 racing takes granted %d requests (%d refused); want exactly the limit, %d", granted, refused, limit)
	}
}
