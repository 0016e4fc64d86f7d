package gateway

import (
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// trustedProxies: a private range and one IPv6 proxy.
var trustedProxies = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("2001:db8:ffff::1/128")}

func TestClientAddr(t *testing.T) {
	huge := strings.Repeat("10.0.0.7, ", 100_000) + "10.0.0.8"
	many := make([]string, 1000)
	for i := range many {
		many[i] = "198.51.100.3"
	}
	many[0] = "198.51.100.9" // the first line is the left-most
	for _, tc := range []struct {
		name    string
		remote  string
		trusted []netip.Prefix
		hdr     http.Header
		want    string // "" is the zero Addr
	}{
		{name: "peer", remote: "203.0.113.5:4000", want: "203.0.113.5"},
		{name: "peer v6", remote: "[2001:db8::5]:4000", want: "2001:db8::5"},
		{name: "peer v6 with zone", remote: "[fe80::1%eth0]:4000", want: "fe80::1"},
		{name: "peer mapped v4", remote: "[::ffff:203.0.113.5]:4000", want: "203.0.113.5"},
		{name: "peer not an IP", remote: "@", want: ""},
		{name: "peer empty", remote: "", want: ""},
		{name: "peer without port", remote: "203.0.113.5", want: "203.0.113.5"},
		{name: "nothing trusted: XFF ignored", remote: "10.0.0.1:1",
			hdr: http.Header{"X-Forwarded-For": {"198.51.100.1"}}, want: "10.0.0.1"},
		{name: "spoofed XFF from an untrusted peer", remote: "203.0.113.5:1", trusted: trustedProxies,
			hdr: http.Header{"X-Forwarded-For": {"198.51.100.1"}, "X-Real-Ip": {"198.51.100.2"}}, want: "203.0.113.5"},
		{name: "trusted proxy", remote: "10.0.0.1:1", trusted: trustedProxies,
			hdr: http.Header{"X-Forwarded-For": {"198.51.100.1"}}, want: "198.51.100.1"},
		{name: "client-written entries left of the proxy's are not believed", remote: "10.0.0.1:1", trusted: trustedProxies,
			hdr: http.Header{"X-Forwarded-For": {"1.1.1.1, 2.2.2.2, 198.51.100.1"}}, want: "198.51.100.1"},
		{name: "chain of trusted proxies", remote: "10.0.0.1:1", trusted: trustedProxies,
			hdr: http.Header{"X-Forwarded-For": {"1.1.1.1, 198.51.100.1, 10.0.0.3,10.0.0.2"}}, want: "198.51.100.1"},
		{name: "trusted v6 proxy in the chain", remote: "10.0.0.1:1", trusted: trustedProxies,
			hdr: http.Header{"X-Forwarded-For": {"198.51.100.1, [2001:db8:ffff::1]:443"}}, want: "198.51.100.1"},
		{name: "every entry trusted: the left-most", remote: "10.0.0.1:1", trusted: trustedProxies,
			hdr: http.Header{"X-Forwarded-For": {"10.0.0.3, 10.0.0.2"}}, want: "10.0.0.3"},
		{name: "garbage stops the walk at the last trusted hop", remote: "10.0.0.1:1", trusted: trustedProxies,
			hdr: http.Header{"X-Forwarded-For": {"198.51.100.1, unknown, 10.0.0.2"}}, want: "10.0.0.2"},
		{name: "garbage right after the peer", remote: "10.0.0.1:1", trusted: trustedProxies,
			hdr: http.Header{"X-Forwarded-For": {"198.51.100.1, 1.2.3.4.5"}}, want: "10.0.0.1"},
		{name: "empty entries skipped", remote: "10.0.0.1:1", trusted: trustedProxies,
			hdr: http.Header{"X-Forwarded-For": {" , ,198.51.100.1 , ,"}}, want: "198.51.100.1"},
		{name: "only empty entries: the peer", remote: "10.0.0.1:1", trusted: trustedProxies,
			hdr: http.Header{"X-Forwarded-For": {"", " , "}, "X-Real-Ip": {"198.51.100.2"}}, want: "10.0.0.1"},
		{name: "entry with a port", remote: "10.0.0.1:1", trusted: trustedProxies,
			hdr: http.Header{"X-Forwarded-For": {"198.51.100.1:5555"}}, want: "198.51.100.1"},
		{name: "entry v6 with a zone", remote: "10.0.0.1:1", trusted: trustedProxies,
			hdr: http.Header{"X-Forwarded-For": {"fe80::9%25eth0, fe80::1%eth0"}}, want: "fe80::1"},
		{name: "entry mapped v4 of a trusted proxy", remote: "10.0.0.1:1", trusted: trustedProxies,
			hdr: http.Header{"X-Forwarded-For": {"198.51.100.1, ::ffff:10.0.0.2"}}, want: "198.51.100.1"},
		{name: "mapped peer of a trusted proxy", remote: "[::ffff:10.0.0.1]:1", trusted: trustedProxies,
			hdr: http.Header{"X-Forwarded-For": {"198.51.100.1"}}, want: "198.51.100.1"},
		{name: "many header lines: the last line is the right-most", remote: "10.0.0.1:1", trusted: trustedProxies,
			hdr: http.Header{"X-Forwarded-For": {"1.1.1.1", "198.51.100.1, 10.0.0.5", "10.0.0.2"}}, want: "198.51.100.1"},
		{name: "a thousand lines of one client", remote: "10.0.0.1:1", trusted: trustedProxies,
			hdr: http.Header{"X-Forwarded-For": many}, want: "198.51.100.3"},
		{name: "huge header of trusted hops", remote: "10.0.0.1:1", trusted: trustedProxies,
			hdr: http.Header{"X-Forwarded-For": {huge}}, want: "10.0.0.7"},
		{name: "X-Real-IP from a trusted proxy", remote: "10.0.0.1:1", trusted: trustedProxies,
			hdr: http.Header{"X-Real-Ip": {" 198.51.100.2 "}}, want: "198.51.100.2"},
		{name: "X-Real-IP twice is not believed", remote: "10.0.0.1:1", trusted: trustedProxies,
			hdr: http.Header{"X-Real-Ip": {"198.51.100.2", "198.51.100.3"}}, want: "10.0.0.1"},
		{name: "X-Real-IP garbage", remote: "10.0.0.1:1", trusted: trustedProxies,
			hdr: http.Header{"X-Real-Ip": {"localhost"}}, want: "10.0.0.1"},
		{name: "XFF wins over X-Real-IP", remote: "10.0.0.1:1", trusted: trustedProxies,
			hdr: http.Header{"X-Forwarded-For": {"198.51.100.1"}, "X-Real-Ip": {"198.51.100.2"}}, want: "198.51.100.1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := clientAddr(tc.remote, tc.hdr, tc.trusted)
			var want netip.Addr
			if tc.want != "" {
				want = netip.MustParseAddr(tc.want)
			}
			if got != want {
				t.Errorf("clientAddr = %v, want %v", got, want)
			}
		})
	}
}

func TestClientKey(t *testing.T) {
	for _, tc := range []struct{ addr, want string }{
		{"203.0.113.5", "203.0.113.5/32"},
		{"2001:db8:1:2:3:4:5:6", "2001:db8:1:2::/64"},
		{"2001:db8:1:2:ffff::1", "2001:db8:1:2::/64"},
	} {
		if got := clientKey(netip.MustParseAddr(tc.addr)); got != netip.MustParsePrefix(tc.want) {
			t.Errorf("clientKey(%s) = %v, want %s", tc.addr, got, tc.want)
		}
	}
	if got := clientKey(netip.Addr{}); got != (netip.Prefix{}) {
		t.Errorf("clientKey(zero) = %v", got)
	}
}

func TestNewUnpaidLimiterTrusted(t *testing.T) {
	l := newUnpaidLimiter(UnpaidLimits{PerMinute: 60, TrustedProxies: []netip.Prefix{
		netip.MustParsePrefix("::ffff:10.0.0.0/104"), netip.MustParsePrefix("192.168.1.77/24"),
	}})
	for _, a := range []string{"10.9.9.9", "192.168.1.1"} {
		if !contains(l.trusted, netip.MustParseAddr(a)) {
			t.Errorf("%s not trusted in %v", a, l.trusted)
		}
	}
	if newUnpaidLimiter(UnpaidLimits{}) != nil || newUnpaidLimiter(UnpaidLimits{PerMinute: -1}) != nil {
		t.Error("a zero or negative rate limits")
	}
}

var (
	keyA = clientKey(netip.MustParseAddr("203.0.113.1"))
	keyB = clientKey(netip.MustParseAddr("203.0.113.2"))
	t0   = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
)

// TestUnpaidLimiterBurstRefill: burst at once, then one per 1/rate, with
// Retry-After the time to the next token; buckets are per key.
func TestUnpaidLimiterBurstRefill(t *testing.T) {
	l := newUnpaidLimiter(UnpaidLimits{PerMinute: 30, Burst: 3}) // one token per 2s
	for i := range 3 {
		if ok, _ := l.take(keyA, t0); !ok {
			t.Fatalf("take %d of the burst refused", i)
		}
	}
	ok, wait := l.take(keyA, t0)
	if ok || wait != 2*time.Second || retryAfter(wait) != 2 {
		t.Fatalf("past the burst: ok %v, wait %s", ok, wait)
	}
	if ok, _ := l.take(keyB, t0); !ok {
		t.Error("another address was refused")
	}
	ok, wait = l.take(keyA, t0.Add(1500*time.Millisecond))
	if ok || wait != 500*time.Millisecond || retryAfter(wait) != 1 {
		t.Fatalf("1.5s later: ok %v, wait %s", ok, wait)
	}
	if ok, _ := l.take(keyA, t0.Add(2*time.Second)); !ok {
		t.Error("refused after a token's refill")
	}
	if ok, _ := l.take(keyA, t0.Add(2*time.Second)); ok {
		t.Error("took the same refill twice")
	}
	// A clock stepping back neither refills nor moves last back.
	if ok, _ := l.take(keyA, t0); ok {
		t.Error("a step back refilled")
	}
	if ok, _ := l.take(keyA, t0.Add(3*time.Second)); ok {
		t.Error("3s: refilled the step back twice")
	}
	// Refill stops at the burst.
	for i := range 3 {
		if ok, _ := l.take(keyA, t0.Add(time.Hour)); !ok {
			t.Fatalf("an hour later, take %d refused", i)
		}
	}
	if ok, _ := l.take(keyA, t0.Add(time.Hour)); ok {
		t.Error("an hour later, refill past the burst")
	}
}

// TestUnpaidLimiterCredentials: refused credentials put a bucket in debt,
// down to -burst, and only then is a request with credentials refused;
// accepted ones give back, up to the burst.
func TestUnpaidLimiterCredentials(t *testing.T) {
	l := newUnpaidLimiter(UnpaidLimits{PerMinute: 60, Burst: 2})
	for range 2 {
		l.take(keyA, t0)
	}
	if ok, _ := l.solvent(keyA, t0); !ok {
		t.Fatal("an empty bucket is not in debt: a buyer who quoted its burst may pay")
	}
	for range 10 {
		l.add(keyA, -1, t0)
	}
	ok, wait := l.solvent(keyA, t0)
	if ok || wait != 2*time.Second {
		t.Fatalf("in debt: ok %v, wait %s (debt is bounded by the burst)", ok, wait)
	}
	if ok, _ := l.solvent(keyA, t0.Add(2*time.Second)); !ok {
		t.Error("debt not paid off by time")
	}
	for range 10 {
		l.add(keyB, 1, t0)
	}
	for i := range 3 {
		if ok, _ := l.take(keyB, t0); ok != (i < 2) {
			t.Errorf("take %d: %v; gifts went past the burst", i, ok)
		}
	}
}

// TestUnpaidLimiterMemory: at most MaxClients buckets, the least recently
// used forgotten first, and buckets idle long enough to be full dropped.
func TestUnpaidLimiterMemory(t *testing.T) {
	l := newUnpaidLimiter(UnpaidLimits{PerMinute: 60, Burst: 2, MaxClients: 3}) // full again after 2s
	keys := make([]netip.Prefix, 5)
	for i := range keys {
		keys[i] = clientKey(netip.AddrFrom4([4]byte{198, 51, 100, byte(i)}))
	}
	for _, k := range keys[:3] {
		l.take(k, t0)
		l.take(k, t0)
	}
	l.take(keys[0], t0) // keys[0] is the most recently used
	l.take(keys[3], t0) // forgets keys[1]
	if n := l.tracked(); n != 3 {
		t.Fatalf("tracked %d, want 3", n)
	}
	if ok, _ := l.take(keys[1], t0); !ok {
		t.Error("a forgotten address starts full")
	}
	if ok, _ := l.take(keys[0], t0); ok {
		t.Error("the most recently used was forgotten")
	}
	// 2s idle: full again, dropped as they are passed (two per call).
	l.take(keys[4], t0.Add(2*time.Second))
	l.take(keys[4], t0.Add(2*time.Second))
	if n := l.tracked(); n != 1 {
		t.Errorf("tracked %d after every other went idle, want 1", n)
	}
	// A bucket in debt is kept until its debt is paid off and it refilled:
	// from -2, 4s.
	l.add(keys[0], -5, t0.Add(2*time.Second))
	l.take(keys[4], t0.Add(5*time.Second))
	l.take(keys[4], t0.Add(5*time.Second))
	if n := l.tracked(); n != 2 {
		t.Errorf("tracked %d 3s after a debt of 2, want 2", n)
	}
	l.take(keys[4], t0.Add(6*time.Second))
	if n := l.tracked(); n != 1 {
		t.Errorf("tracked %d 4s after a debt of 2, want 1", n)
	}
}

// FuzzClientAddr: clientAddr never panics, and answers the peer or an
// address written in the headers.
func FuzzClientAddr(f *testing.F) {
	f.Add("10.0.0.1:1", "198.51.100.1, 10.0.0.2", "", "198.51.100.2")
	f.Add("[::ffff:10.0.0.1]:1", "fe80::1%eth0, ::ffff:10.0.0.9", "[2001:db8::1]:80", "")
	f.Add("203.0.113.5:1", "", "", "1.2.3.4")
	f.Add("@", ",,,", " , ", "garbage")
	f.Fuzz(func(t *testing.T, remote, xff1, xff2, xri string) {
		h := http.Header{}
		for _, v := range []string{xff1, xff2} {
			if v != "" {
				h.Add("X-Forwarded-For", v)
			}
		}
		if xri != "" {
			h.Set("X-Real-Ip", xri)
		}
		got := clientAddr(remote, h, trustedProxies)
		peer, _ := parseHostAddr(remote)
		if got == peer {
			return
		}
		if !got.IsValid() || got.Zone() != "" || got.Is4In6() {
			t.Fatalf("clientAddr = %v: not a plain address", got)
		}
		if !contains(trustedProxies, peer) {
			t.Fatalf("clientAddr = %v, from headers of an untrusted peer %q", got, remote)
		}
		for _, v := range []string{xff1, xff2, xri} {
			for e := range strings.SplitSeq(v, ",") {
				if a, ok := parseHostAddr(strings.TrimSpace(e)); ok && a == got {
					return
				}
			}
		}
		t.Fatalf("clientAddr = %v, in no header: %q %q %q", got, xff1, xff2, xri)
	})
}
