package client

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/llm4agents/llm4agents/x402"
)

// RetryPolicy bounds the Transport's own retries of a paid request. A retry sends the same PAYMENT-SIGNATURE, and so the same
// payment-identifier, with the body replayed from its buffered copy; it is
// never a second payment. The Transport retries:
//
//   - a transport error (the connection failed before an answer arrived);
//   - a 402 whose PAYMENT-RESPONSE says settlement_pending;
//   - a 409 with a Retry-After header (the payment is in use or pending).
//
// It stops when the attempts or the time run out, when the recorded
// authorization would come within Transport.ReuseMargin of its validBefore, or
// when the request's context is done, and returns the last answer or error.
// The zero value means the defaults.
type RetryPolicy struct {
	// MaxAttempts bounds the sends of one paid request, the first included;
	// 0 means DefaultMaxAttempts and 1 disables retries.
	MaxAttempts int
	// MaxElapsed bounds the time from the first send of the paid request to
	// the start of the last; 0 means DefaultMaxElapsed.
	MaxElapsed time.Duration
	// MaxWait caps one wait, Retry-After included; 0 means DefaultMaxWait.
	MaxWait time.Duration
	// Backoff is the first wait when the server names none (a transport error,
	// settlement_pending without Retry-After); it doubles on each retry, up to
	// MaxWait. 0 means DefaultBackoff.
	Backoff time.Duration
}

// Defaults of RetryPolicy.
const (
	DefaultMaxAttempts = 4
	DefaultMaxElapsed  = 2 * time.Minute
	DefaultMaxWait     = 10 * time.Second
	DefaultBackoff     = 500 * time.Millisecond
)

func (p RetryPolicy) maxAttempts() int {
	if p.MaxAttempts > 0 {
		return p.MaxAttempts
	}
	return DefaultMaxAttempts
}

func (p RetryPolicy) maxElapsed() time.Duration {
	if p.MaxElapsed > 0 {
		return p.MaxElapsed
	}
	return DefaultMaxElapsed
}

func (p RetryPolicy) maxWait() time.Duration {
	if p.MaxWait > 0 {
		return p.MaxWait
	}
	return DefaultMaxWait
}

// backoff is the wait before retry number n (1 for the first).
func (p RetryPolicy) backoff(n int) time.Duration {
	d := p.Backoff
	if d <= 0 {
		d = DefaultBackoff
	}
	for i := 1; i < n && d < p.maxWait(); i++ {
		d *= 2
	}
	return min(d, p.maxWait())
}

// retryReason says whether an answer to a paid request is worth sending the
// same payment again, why, and the wait the server asked for (0 for none).
func retryReason(resp *http.Response, sr *x402.SettleResponse, now time.Time) (reason string, wait time.Duration, ok bool) {
	ra, hasRA := retryAfter(resp.Header.Get("Retry-After"), now)
	switch {
	case resp.StatusCode == http.StatusPaymentRequired && sr != nil && sr.ErrorReason == x402.ReasonSettlementPending:
		return "settlement_pending", ra, true
	case resp.StatusCode == http.StatusConflict && hasRA:
		return "conflict", ra, true
	default:
		return "", 0, false
	}
}

// maxRetryAfter bounds what is read of Retry-After before the cap applies, so
// a huge value cannot overflow.
const maxRetryAfter = 24 * time.Hour

// retryAfter parses a Retry-After value: delay-seconds or an HTTP-date
// (RFC 9110 §10.2.3). A missing or malformed value is not ok.
func retryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if n, err := strconv.ParseUint(v, 10, 32); err == nil {
		return min(time.Duration(n)*time.Second, maxRetryAfter), true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	return min(max(t.Sub(now), 0), maxRetryAfter), true
}

// sleep waits d or until ctx is done.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
