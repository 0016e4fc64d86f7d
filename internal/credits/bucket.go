package credits

import (
	"sync"
	"time"
)

// A token bucket per name, in this process's memory: the bound on sign-in
// nonces a replica issues. It guards the replica, not money.

// maxBuckets bounds the rate limiter's memory; past it, full (idle) buckets
// are dropped, which forgets nothing a full bucket would not allow anyway.
const maxBuckets = 100_000

// limiter is a set of token buckets by name; the zero value is ready.
type limiter struct {
	mu      sync.Mutex
	buckets map[string]*bucket
}

type bucket struct {
	tokens float64
	last   time.Time
}

// take takes one token, at now, from id's bucket, which holds up to
// perMinute tokens and refills at perMinute per minute.
func (l *limiter) take(id string, perMinute int, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	capacity := float64(perMinute)
	b := l.buckets[id]
	if b == nil {
		if l.buckets == nil {
			l.buckets = map[string]*bucket{}
		}
		if len(l.buckets) >= maxBuckets {
			l.dropFull(now)
		}
		b = &bucket{tokens: capacity, last: now}
		l.buckets[id] = b
	}
	if d := now.Sub(b.last); d > 0 {
		b.tokens = min(capacity, b.tokens+d.Minutes()*capacity)
		b.last = now
	}
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// dropFull forgets buckets idle for a minute or more, which are full again
// whatever their rate. l.mu is held.
func (l *limiter) dropFull(now time.Time) {
	for id, b := range l.buckets {
		if now.Sub(b.last) >= time.Minute {
			delete(l.buckets, id)
		}
	}
}
