package store

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Per-key rate limits shared by replicas (docs/DESIGN.md D28, "Rate
// limits"). A key may be limited to so many requests and so many tokens per
// minute. The store counts, per key, what every replica has taken in the
// current minute (fixed windows of RateWindow, aligned to the Unix epoch by
// the store's clock, so replicas' clocks do not matter), and grants each
// replica slices of what is left; a replica then admits calls from its
// slice in memory. The sum of the slices never passes the limit, so the
// limit holds across replicas as it holds on one.
//
// As with any fixed window, a key may make up to twice its limit within
// one minute that straddles two windows; the per-process token bucket this
// replaces allowed the same (a full bucket, then a minute of refill).

// RateWindow is the length of a rate limit's window.
const RateWindow = time.Minute

// MaxRateLimit bounds a limit per window, of requests or of tokens.
const MaxRateLimit = 1 << 40

// RateTake asks for a slice of one key's allowance in the current window.
type RateTake struct {
	KeyID string
	// RequestLimit and TokenLimit are the key's limits per window,
	// 0..MaxRateLimit; 0 is no limit, and that part is neither counted nor
	// granted.
	RequestLimit, TokenLimit int64
	// NeedRequests and NeedTokens are what the call at hand needs: granted
	// whole, or nothing is granted.
	NeedRequests, NeedTokens int64
	// WantRequests and WantTokens (at least the need) are what the replica
	// would like, to admit its next calls without asking again.
	WantRequests, WantTokens int64
}

// RateGrant is a slice of a key's allowance, good until the window ends.
type RateGrant struct {
	// Now is the store's clock when it granted; Window is when the window
	// began and Ends when it ends, by that clock. A replica judges a grant
	// by Ends - Now on its own clock, so skew between clocks does not
	// matter.
	Now, Window, Ends time.Time
	// Requests and Tokens granted (0 for a part with no limit).
	Requests, Tokens int64
}

// RateLimitedError is a TakeRate refused: the window has less left than
// the call needs.
type RateLimitedError struct {
	// What is "requests" or "tokens": the part that does not fit.
	What string
	// Limit is that part's limit per window, Need what the call needed.
	Limit, Need int64
	// RetryAfter is how long until the window ends, by the store's clock.
	// A call that needs more than the limit never fits: TooLarge.
	RetryAfter time.Duration
	TooLarge   bool
}

func (e *RateLimitedError) Error() string {
	if e.TooLarge {
		return fmt.Sprintf("store: the call needs %d %s, more than the limit of %d per minute", e.Need, e.What, e.Limit)
	}
	return fmt.Sprintf("store: %s per minute limit of %d reached; retry in %s", e.What, e.Limit, e.RetryAfter)
}

// Rates keeps what each key has taken of its rate limits in the current
// window, for every replica.
type Rates interface {
	// TakeRate grants a slice of t.KeyID's allowance in the current window
	// (TakeRateAt says how much), or grants nothing and returns a
	// *RateLimitedError when the call's need does not fit.
	TakeRate(ctx context.Context, t RateTake) (RateGrant, error)
}

// Validate checks a RateTake, for every backend.
func (t RateTake) Validate() error {
	switch {
	case !ValidID(t.KeyID):
		return errors.New("invalid key id")
	case t.RequestLimit < 0 || t.RequestLimit > MaxRateLimit || t.TokenLimit < 0 || t.TokenLimit > MaxRateLimit:
		return fmt.Errorf("a limit is outside 0..%d", int64(MaxRateLimit))
	case t.RequestLimit == 0 && t.TokenLimit == 0:
		return errors.New("no limit to take from")
	case t.NeedRequests < 0 || t.NeedTokens < 0 || t.WantRequests < t.NeedRequests || t.WantTokens < t.NeedTokens:
		return errors.New("needs and wants must be 0 <= need <= want")
	case t.WantRequests > MaxRateLimit || t.WantTokens > MaxRateLimit:
		return fmt.Errorf("a want is above %d", int64(MaxRateLimit))
	}
	return nil
}

// RateRow is what a backend keeps per rate-limited key: what every replica
// has taken of its limits in the window that began at WindowMs (unix ms).
type RateRow struct {
	WindowMs, Requests, Tokens int64
}

// TakeRateAt is TakeRate's arithmetic, for every backend: from the store's
// clock and the key's row as read under the write lock (the zero row when
// there is none), it returns the grant and the row to write back, or the
// refusal (then nothing is to be written).
//
// The window is the one that holds nowMs, or the row's when that is later
// (another process's clock ran ahead): a window is never started over. Each
// limited part's slice is its want, at most half of what the window has
// left but never less than the need, so one replica cannot take what the
// others will ask for next; an unlimited part grants 0.
func TakeRateAt(t RateTake, nowMs int64, row RateRow) (RateGrant, RateRow, error) {
	w := RateWindow.Milliseconds()
	window := nowMs - ((nowMs%w)+w)%w
	if row.WindowMs >= window {
		window = row.WindowMs
	} else {
		row = RateRow{}
	}
	start := time.UnixMilli(window).UTC()
	g := RateGrant{Now: time.UnixMilli(nowMs).UTC(), Window: start, Ends: start.Add(RateWindow)}
	part := func(what string, limit, used, need, want int64) (int64, error) {
		if limit == 0 {
			return 0, nil
		}
		left := max(limit-used, 0)
		switch {
		case need > limit:
			return 0, &RateLimitedError{What: what, Limit: limit, Need: need, TooLarge: true}
		case need > left:
			return 0, &RateLimitedError{What: what, Limit: limit, Need: need, RetryAfter: g.Ends.Sub(g.Now)}
		}
		return min(want, max(need, left/2)), nil
	}
	var err error
	if g.Requests, err = part("requests", t.RequestLimit, row.Requests, t.NeedRequests, t.WantRequests); err != nil {
		return RateGrant{}, RateRow{}, err
	}
	if g.Tokens, err = part("tokens", t.TokenLimit, row.Tokens, t.NeedTokens, t.WantTokens); err != nil {
		return RateGrant{}, RateRow{}, err
	}
	return g, RateRow{WindowMs: window, Requests: row.Requests + g.Requests, Tokens: row.Tokens + g.Tokens}, nil
}
