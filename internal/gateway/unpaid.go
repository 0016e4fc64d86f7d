package gateway

import (
	"container/list"
	"fmt"
	"math"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/llm4agents/llm4agents/x402"
)

// Unpaid requests. A request on a paid route with neither a
// PAYMENT-SIGNATURE nor an llm4agents API key is answered with a quote, and
// the quote of a chat completion tokenizes the whole prompt: up to
// MaxBodyBytes of text, for anyone, for free. So unpaid requests are limited
// per client address with a token bucket, before the body is read: each takes
// a token, and one that finds none is answered 429 unpaid_rate_limited.
//
// A payment or a key is not proof of anything until it is checked, and a
// chat request is tokenized before its payment is verified (the payment must
// match the quote, D7): a made-up PAYMENT-SIGNATURE would otherwise buy the
// same free tokenization, plus a verification. So a request that carries one
// takes no token, but its answer settles up afterwards: a payment or key that
// is refused (400, 401, 402, 403) takes a token, even into debt (down to
// -Burst), and one that is accepted (2xx) gives one back, up to Burst. A
// request with credentials is refused only while its address is in debt.
// An x402 buyer who pays for what it asks about thus spends nothing net (the
// quote takes one, the paid call gives it back), and its payments are served
// even right after a burst of quotes has emptied the bucket; an address that
// presents refused payments or keys runs out like one that never pays.
//
// The client address is the TCP peer, unless the peer is a trusted proxy
// (UnpaidLimits.TrustedProxies): then it is the right-most address of
// X-Forwarded-For that is not a trusted proxy, or X-Real-IP when there is no
// X-Forwarded-For. Addresses further left were written by the client and are
// never believed. IPv6 clients are limited per /64, the block one host is
// usually given, so that walking through the addresses of one's own /64 does
// not multiply the rate. The buckets are per replica: N replicas behind a
// balancer allow up to N times the rate.

// UnpaidLimits bounds unpaid requests per client address. The zero value
// limits nothing.
type UnpaidLimits struct {
	// PerMinute is how many unpaid requests an address may make per minute,
	// sustained; 0 turns the limit off.
	PerMinute int
	// Burst is how many it may make at once after being idle. Default
	// DefaultUnpaidBurst.
	Burst int
	// TrustedProxies are the peers whose X-Forwarded-For and X-Real-IP are
	// believed. Empty: only the TCP peer counts.
	TrustedProxies []netip.Prefix
	// MaxClients bounds the addresses tracked at once; past it the least
	// recently seen is forgotten. Default DefaultUnpaidMaxClients.
	MaxClients int
}

// Defaults of UnpaidLimits.
const (
	DefaultUnpaidBurst = 10
	// DefaultUnpaidMaxClients keeps the limiter's memory to about 10 MB.
	DefaultUnpaidMaxClients = 65536
)

// limitUnpaid wraps a paid route's handler: an unpaid request over its
// address's rate, or one with a payment or key from an address in debt, is
// answered 429 unpaid_rate_limited with Retry-After, before h reads its body.
func (s *Server) limitUnpaid(h func(http.ResponseWriter, *http.Request) error) func(http.ResponseWriter, *http.Request) error {
	l := s.unpaid
	if l == nil {
		return h
	}
	return func(w http.ResponseWriter, r *http.Request) error {
		key := clientKey(clientAddr(r.RemoteAddr, r.Header, l.trusted))
		if r.Header.Get(x402.HeaderPaymentSignature) == "" && !hasOwnKey(r) {
			if ok, wait := l.take(key, s.now()); !ok {
				return l.refusal(wait, "without payment")
			}
			return h(w, r)
		}
		if ok, wait := l.solvent(key, s.now()); !ok {
			return l.refusal(wait, "with refused payments or keys")
		}
		sw := &statusWriter{ResponseWriter: w}
		err := h(sw, r)
		status := sw.status()
		if !sw.wrote && err != nil {
			status = s.answerOf(err).Status
		}
		switch {
		case status >= 200 && status < 300:
			l.add(key, 1, s.now())
		case status >= 400 && status <= 403:
			l.add(key, -1, s.now())
		}
		return err
	}
}

func (l *unpaidLimiter) refusal(wait time.Duration, what string) *apiError {
	return &apiError{Status: http.StatusTooManyRequests, Type: "rate_limit_error", Code: "unpaid_rate_limited",
		Message: fmt.Sprintf("too many requests %s from this address (%d per minute); retry later, "+
			"or pay with PAYMENT-SIGNATURE or an API key: accepted payments are not limited", what, l.perMinute),
		Header: http.Header{"Retry-After": {strconv.Itoa(retryAfter(wait))}}}
}

// retryAfter is d in whole seconds, rounded up, at least 1.
func retryAfter(d time.Duration) int {
	return max(1, int(math.Ceil(d.Seconds())))
}

// unpaidLimiter is a token bucket per client key, the least recently used
// first to go: at most max buckets, and buckets idle long enough to be full
// again are dropped as they are passed, since a full bucket allows nothing
// a new one would not. A bucket holds -burst to burst tokens: below zero is
// the debt of refused credentials.
type unpaidLimiter struct {
	perMinute int
	rate      float64 // tokens per second
	burst     float64
	max       int
	trusted   []netip.Prefix

	mu      sync.Mutex
	buckets map[netip.Prefix]*list.Element // of *unpaidBucket
	lru     list.List                      // most recently used first
}

type unpaidBucket struct {
	key    netip.Prefix
	tokens float64
	last   time.Time
}

// newUnpaidLimiter returns the limiter of l, nil when l limits nothing.
func newUnpaidLimiter(l UnpaidLimits) *unpaidLimiter {
	if l.PerMinute <= 0 {
		return nil
	}
	if l.Burst <= 0 {
		l.Burst = DefaultUnpaidBurst
	}
	if l.MaxClients <= 0 {
		l.MaxClients = DefaultUnpaidMaxClients
	}
	trusted := make([]netip.Prefix, 0, len(l.TrustedProxies))
	for _, p := range l.TrustedProxies {
		// Addresses are compared unmapped (parseHostAddr): so are prefixes.
		if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
			p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
		}
		trusted = append(trusted, p.Masked())
	}
	return &unpaidLimiter{
		perMinute: l.PerMinute, rate: float64(l.PerMinute) / 60, burst: float64(l.Burst), max: l.MaxClients,
		trusted: trusted, buckets: make(map[netip.Prefix]*list.Element),
	}
}

// take takes a token from key's bucket at now. Without one it reports how
// long until there is one.
func (l *unpaidLimiter) take(key netip.Prefix, now time.Time) (bool, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.bucket(key, now)
	if b.tokens < 1 {
		return false, l.until(1 - b.tokens)
	}
	b.tokens--
	return true, 0
}

// solvent reports whether key's bucket is out of debt at now, taking
// nothing; if not, how long until it is.
func (l *unpaidLimiter) solvent(key netip.Prefix, now time.Time) (bool, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if b := l.bucket(key, now); b.tokens < 0 {
		return false, l.until(-b.tokens)
	}
	return true, 0
}

// add adds n tokens (n < 0 takes them) to key's bucket at now, within
// -burst and burst.
func (l *unpaidLimiter) add(key netip.Prefix, n float64, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.bucket(key, now)
	b.tokens = min(l.burst, max(-l.burst, b.tokens+n))
}

// until is how long the bucket takes to gain n tokens.
func (l *unpaidLimiter) until(n float64) time.Duration {
	return time.Duration(n / l.rate * float64(time.Second))
}

// bucket returns key's bucket refilled up to now, made full when new, and
// marks it the most recently used. l.mu is held.
func (l *unpaidLimiter) bucket(key netip.Prefix, now time.Time) *unpaidBucket {
	l.dropIdle(now, 2)
	e, ok := l.buckets[key]
	if !ok {
		if len(l.buckets) >= l.max {
			l.remove(l.lru.Back())
		}
		b := &unpaidBucket{key: key, tokens: l.burst, last: now}
		l.buckets[key] = l.lru.PushFront(b)
		return b
	}
	l.lru.MoveToFront(e)
	b := e.Value.(*unpaidBucket)
	// A clock that steps back neither refills nor moves last back, which
	// would refill the same time twice.
	if d := now.Sub(b.last); d > 0 {
		b.tokens = min(l.burst, b.tokens+d.Seconds()*l.rate)
		b.last = now
	}
	return b
}

// dropIdle drops up to n of the least recently used buckets that have been
// idle long enough to be full again. l.mu is held.
func (l *unpaidLimiter) dropIdle(now time.Time, n int) {
	for range n {
		e := l.lru.Back()
		if e == nil {
			return
		}
		b := e.Value.(*unpaidBucket)
		if now.Sub(b.last) < l.until(l.burst-b.tokens) {
			return
		}
		l.remove(e)
	}
}

func (l *unpaidLimiter) remove(e *list.Element) {
	delete(l.buckets, l.lru.Remove(e).(*unpaidBucket).key)
}

// tracked returns how many buckets l holds.
func (l *unpaidLimiter) tracked() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.buckets)
}

// clientKey is the bucket of addr: the address itself for IPv4, its /64 for
// IPv6. An invalid addr (a peer that is not an IP, such as a Unix socket's)
// is the zero Prefix, one bucket for all of them.
func clientKey(addr netip.Addr) netip.Prefix {
	switch {
	case addr.Is4():
		return netip.PrefixFrom(addr, 32)
	case addr.Is6():
		p, _ := addr.Prefix(64) // a 64-bit prefix of an IPv6 address is always valid
		return p
	}
	return netip.Prefix{}
}

// clientAddr returns the client's address: the peer remoteAddr (host:port),
// or, when the peer is in trusted, the address the proxies say they saw (see
// the comment at the top of this file). A forwarded entry that does not
// parse stops the walk: the last trusted hop is the client then, since
// whatever is left of it is not a trusted proxy's word. The zero Addr means
// the peer is not an IP address.
func clientAddr(remoteAddr string, h http.Header, trusted []netip.Prefix) netip.Addr {
	peer, ok := parseHostAddr(remoteAddr)
	if !ok || !contains(trusted, peer) {
		return peer
	}
	hop := peer
	if xff := h.Values("X-Forwarded-For"); len(xff) > 0 {
		// The header lines together are one list, right-most last.
		for _, rest := range slices.Backward(xff) {
			for rest != "" {
				var entry string
				if j := strings.LastIndexByte(rest, ','); j >= 0 {
					rest, entry = rest[:j], rest[j+1:]
				} else {
					rest, entry = "", rest
				}
				entry = strings.TrimSpace(entry)
				if entry == "" {
					continue
				}
				a, ok := parseHostAddr(entry)
				if !ok {
					return hop
				}
				if !contains(trusted, a) {
					return a
				}
				hop = a
			}
		}
		return hop
	}
	if xr := h.Values("X-Real-IP"); len(xr) == 1 {
		if a, ok := parseHostAddr(strings.TrimSpace(xr[0])); ok {
			return a
		}
	}
	return peer
}

// parseHostAddr parses an IP address, alone or as host:port ([v6]:port),
// without its zone and with an IPv4-mapped IPv6 address made IPv4.
func parseHostAddr(s string) (netip.Addr, bool) {
	a, err := netip.ParseAddr(s)
	if err != nil {
		ap, err := netip.ParseAddrPort(s)
		if err != nil {
			return netip.Addr{}, false
		}
		a = ap.Addr()
	}
	return a.WithZone("").Unmap(), true
}

func contains(prefixes []netip.Prefix, a netip.Addr) bool {
	for _, p := range prefixes {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
