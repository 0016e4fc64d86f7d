package gateway_test

import (
	"context"
	"io"
	"math/big"
	"net/http"
	"net/netip"
	"strconv"
	"testing"
	"time"

	"github.com/llm4agents/llm4agents/internal/gateway"
	"github.com/llm4agents/llm4agents/x402"
)

// newLimitedEnv is newEnv with unpaid requests limited to a burst of burst
// and one a minute after it, so that nothing refills during a test.
func newLimitedEnv(t *testing.T, burst int, trusted ...netip.Prefix) *env {
	t.Helper()
	return newEnvConfig(t, 10*time.Second, nil, func(c *gateway.Config) {
		c.Unpaid = gateway.UnpaidLimits{PerMinute: 1, Burst: burst, TrustedProxies: trusted}
	})
}

// wantLimited posts chatBody with hdr and checks that the answer is the 429
// of the unpaid limit.
func (e *env) wantLimited(t *testing.T, hdr http.Header) {
	t.Helper()
	resp := e.post(t, http.DefaultClient, chatBody, hdr)
	checkLimited(t, resp.StatusCode, resp.Header, readAll(t, resp))
}

// checkLimited checks that an answer is the 429 of the unpaid limit.
func checkLimited(t *testing.T, status int, h http.Header, body []byte) {
	t.Helper()
	if status != http.StatusTooManyRequests {
		t.Fatalf("status %d, want 429: %s", status, body)
	}
	if code := errorCode(t, body); code != "unpaid_rate_limited" {
		t.Errorf("code = %s", code)
	}
	if s, err := strconv.Atoi(h.Get("Retry-After")); err != nil || s < 1 || s > 120 {
		t.Errorf("Retry-After = %q, want 1 to 120 seconds (a debt of one token at one a minute, and the token)", h.Get("Retry-After"))
	}
}

// wantStatus posts chatBody with hdr and checks the answer's status.
func (e *env) wantStatus(t *testing.T, hdr http.Header, status int) {
	t.Helper()
	resp := e.post(t, http.DefaultClient, chatBody, hdr)
	if body := readAll(t, resp); resp.StatusCode != status {
		t.Fatalf("status %d, want %d: %s", resp.StatusCode, status, body)
	}
}

// TestUnpaidLimit: past the burst an unpaid request is refused 429 before its
// body is read; a valid payment is served all the same, and gives a token
// back; made-up payments and keys put the address in debt, and then they are
// refused too. Nothing is charged but the one paid call.
func TestUnpaidLimit(t *testing.T) {
	e := newLimitedEnv(t, 2)
	before := e.chain.BalanceOf(t, e.chain.Addr(payToIdx))
	paid := e.signedHeader(t, chatBody, buyerIdx) // its quote takes the first token
	e.wantStatus(t, nil, http.StatusPaymentRequired)
	e.wantLimited(t, nil)

	// Refused before the body is read, so before it is tokenized: the body
	// never ends, and the answer comes all the same. (It declares its length:
	// net/http reads up to 256 KiB of a body the handler left before it
	// answers, unless the body is declared longer than that.)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	pr, pw := io.Pipe()
	defer func() { _ = pw.Close() }()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.srv.URL+"/v1/chat/completions", pr)
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = 1 << 20
	go func() { _, _ = pw.Write([]byte(`{"model":"demo","messages":[{"role":"user","content":"`)) }()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("a limited request whose body never ends got no answer: %v", err)
	}
	checkLimited(t, resp.StatusCode, resp.Header, readAll(t, resp))

	// A valid payment is served though the bucket is empty: its buyer paid
	// for its quote.
	e.wantStatus(t, http.Header{x402.HeaderPaymentSignature: {paid}}, http.StatusOK)
	// ... and gave its token back.
	e.wantStatus(t, nil, http.StatusPaymentRequired)

	// A made-up payment is let through while the address is not in debt, is
	// refused, and puts it in debt; then payments and keys are refused here.
	bogus := http.Header{x402.HeaderPaymentSignature: {"bm90IGEgcGF5bWVudA=="}}
	if resp := e.post(t, http.DefaultClient, chatBody, bogus); resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode < 400 {
		t.Fatalf("a made-up payment from an address out of debt: status %d, want its refusal", resp.StatusCode)
	} else {
		readAll(t, resp)
	}
	e.wantLimited(t, bogus)
	e.wantLimited(t, http.Header{"Authorization": {"Bearer sk-l4a-made-up"}})
	e.wantLimited(t, nil)

	if got := e.up.Calls(); got != 1 {
		t.Errorf("upstream calls = %d, want the paid one", got)
	}
	if got := new(big.Int).Sub(e.chain.BalanceOf(t, e.chain.Addr(payToIdx)), before); got.Int64() != 10000 {
		t.Errorf("payTo received %s, want the one paid call's 10000", got)
	}
}

// TestUnpaidLimitBuyerNetZero: an x402 buyer that quotes and pays each call
// spends nothing net, so it is never held back by the limit.
func TestUnpaidLimitBuyerNetZero(t *testing.T) {
	e := newLimitedEnv(t, 2)
	c, tr := e.payer(buyerIdx)
	for i := range 5 {
		resp := e.post(t, c, chatBody, nil)
		if body := readAll(t, resp); resp.StatusCode != http.StatusOK {
			t.Fatalf("paid call %d: status %d: %s", i, resp.StatusCode, body)
		}
	}
	if tr.Spent().Int64() != 5*10000 {
		t.Errorf("spent %s", tr.Spent())
	}
}

// TestUnpaidLimitKeyNotTaken: a request with a key takes no token while the
// address is out of debt.
func TestUnpaidLimitKeyNotTaken(t *testing.T) {
	e := newLimitedEnv(t, 2)
	key := http.Header{"Authorization": {"Bearer sk-l4a-made-up"}}
	// This gateway takes no keys: refused (401), and in debt after three.
	for range 3 {
		e.wantStatus(t, key, http.StatusUnauthorized)
	}
	e.wantLimited(t, key)
}

// TestUnpaidLimitTrustedProxy: behind a trusted proxy each forwarded client
// has its own bucket; X-Forwarded-For from anyone else is not believed.
func TestUnpaidLimitTrustedProxy(t *testing.T) {
	for _, tc := range []struct {
		name    string
		trusted []netip.Prefix
		// second is the answer to the second client after the first spent
		// its burst.
		second int
	}{
		{name: "trusted", trusted: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}, second: http.StatusPaymentRequired},
		{name: "not trusted", second: http.StatusTooManyRequests},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newLimitedEnv(t, 1, tc.trusted...)
			from := func(a string) http.Header { return http.Header{"X-Forwarded-For": {"192.0.2.77, " + a}} }
			e.wantStatus(t, from("198.51.100.1"), http.StatusPaymentRequired)
			e.wantStatus(t, from("198.51.100.2"), tc.second)
			e.wantLimited(t, from("198.51.100.1"))
		})
	}
}
