package credits

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/llm4agents/llm4agents/internal/store"
)

// rates admits a key's calls against its requests and tokens per minute,
// shared by every replica (docs/DESIGN.md D28, "Rate limits"): a replica
// takes slices of a key's allowance in the current minute from the store
// (store.Rates) and admits calls from its slice in memory, so most calls
// cost no store write. A slice is about one second of the key's traffic on
// this replica, at least the call at hand, and at most half of what the
// minute has left (the store sees to that), so one replica cannot take what
// the others are about to ask for.
type rates struct {
	st  store.Rates
	now func() time.Time

	mu   sync.Mutex
	keys map[string]*keyRate
}

// keyRate is this replica's slice of one key's allowance.
type keyRate struct {
	// mu is held while a slice is taken from the store: one take per key
	// at a time on this replica; the key's other calls wait for it.
	mu sync.Mutex
	// limits the slice was taken under: a changed limit drops it.
	requestLimit, tokenLimit int64
	// window is the slice's window (the store's clock), until when it
	// ends by this replica's clock.
	window, until      time.Time
	requests, tokens   int64 // left in the slice
	spentReq, spentTok int64 // admitted in the current second
	rateReq, rateTok   int64 // admitted in the last full second
	secondAt           time.Time
}

// maxRateKeys bounds the slices kept; past it, slices whose window ended
// are dropped (they are worth nothing).
const maxRateKeys = 100_000

func newRates(st store.Rates, now func() time.Time) *rates {
	return &rates{st: st, now: now, keys: map[string]*keyRate{}}
}

// take admits one call of key that may use tokens (its prompt and output
// bound), or returns ErrRateLimited wrapping the store's
// *store.RateLimitedError. A key without limits passes.
func (r *rates) take(ctx context.Context, key store.APIKey, tokens int64) error {
	requestLimit, tokenLimit := int64(key.RatePerMinute), key.TokensPerMinute
	if requestLimit == 0 && tokenLimit == 0 {
		return nil
	}
	var needReq, needTok int64
	if requestLimit > 0 {
		needReq = 1
	}
	if tokenLimit > 0 {
		needTok = tokens
	}
	kr := r.slice(key.ID)
	kr.mu.Lock()
	defer kr.mu.Unlock()
	now := r.now()
	if !now.Before(kr.until) || kr.requestLimit != requestLimit || kr.tokenLimit != tokenLimit {
		kr.requests, kr.tokens = 0, 0
		kr.requestLimit, kr.tokenLimit = requestLimit, tokenLimit
	}
	if since := now.Sub(kr.secondAt); since >= time.Second {
		kr.rateReq, kr.rateTok, kr.spentReq, kr.spentTok, kr.secondAt = kr.spentReq, kr.spentTok, 0, 0, now
		if since >= 2*time.Second {
			kr.rateReq, kr.rateTok = 0, 0 // idle for a whole second
		}
	}
	if kr.requests < needReq || kr.tokens < needTok {
		t := store.RateTake{
			KeyID: key.ID, RequestLimit: requestLimit, TokenLimit: tokenLimit,
			NeedRequests: max(needReq-kr.requests, 0), NeedTokens: max(needTok-kr.tokens, 0),
		}
		if requestLimit > 0 {
			t.WantRequests = max(t.NeedRequests, kr.rateReq, kr.spentReq)
		}
		if tokenLimit > 0 {
			t.WantTokens = max(t.NeedTokens, kr.rateTok, kr.spentTok)
		}
		g, err := r.st.TakeRate(ctx, t)
		if rl, ok := errors.AsType[*store.RateLimitedError](err); ok {
			return fmt.Errorf("%w: key %s: %w", ErrRateLimited, key.ID, rl)
		}
		if err != nil {
			return fmt.Errorf("credits: rate limit of key %s: %w", key.ID, err)
		}
		if !g.Window.Equal(kr.window) {
			// A new window: what was left of the last one is gone.
			kr.requests, kr.tokens, kr.window = 0, 0, g.Window
		}
		kr.requests += g.Requests
		kr.tokens += g.Tokens
		// Judged on this replica's clock from the store's answer, so a
		// skewed clock does not stretch the window.
		kr.until = now.Add(g.Ends.Sub(g.Now))
	}
	kr.requests -= needReq
	kr.tokens -= needTok
	kr.spentReq += needReq
	kr.spentTok += needTok
	return nil
}

// slice returns key id's slice, adding an empty one.
func (r *rates) slice(id string) *keyRate {
	r.mu.Lock()
	defer r.mu.Unlock()
	kr := r.keys[id]
	if kr == nil {
		if len(r.keys) >= maxRateKeys {
			r.dropEnded(r.now())
		}
		kr = &keyRate{}
		r.keys[id] = kr
	}
	return kr
}

// dropEnded forgets the slices whose window has ended. r.mu is held; a
// slice in use (its mu held) is kept.
func (r *rates) dropEnded(now time.Time) {
	for id, kr := range r.keys {
		if !kr.mu.TryLock() {
			continue
		}
		if !now.Before(kr.until) {
			delete(r.keys, id)
		}
		kr.mu.Unlock()
	}
}
