package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/llm4agents/llm4agents/x402"
	"github.com/llm4agents/llm4agents/x402/evm/exact"
)

// DefaultMaxReplayBody is the largest request body a Transport buffers to replay
// it with the payment when the request has no GetBody. Requests made with
// http.NewRequest over a bytes.Reader, bytes.Buffer or strings.Reader (the
// OpenAI SDKs among them) have GetBody and are never buffered.
const DefaultMaxReplayBody = 4 << 20

// journalTimeout bounds recording an outcome, which outlives the request.
const journalTimeout = 10 * time.Second

// maxDrain bounds how much of a 402's body is read before it is closed, so the
// connection can be reused without reading a hostile body to its end.
const maxDrain = 64 << 10

// Errors of RoundTrip on a 402. In each case nothing was signed and nothing was
// sent. An http.Client wraps them in a *url.Error; find them with errors.Is.
var (
	// ErrNoPaymentRequired: a 402 without a PAYMENT-REQUIRED header. A v2 server
	// must send one; the v1 body fallback is not supported.
	ErrNoPaymentRequired = errors.New("client: 402 without a PAYMENT-REQUIRED header")
	// ErrBadPaymentRequired: a PAYMENT-REQUIRED header that does not decode.
	ErrBadPaymentRequired = errors.New("client: 402 with an undecodable PAYMENT-REQUIRED header")
	// ErrPaymentAlreadyAttempted: the request already carried PAYMENT-SIGNATURE or
	// X-PAYMENT, so the caller pays by hand (or a payment was sent) and the
	// Transport does not pay again.
	ErrPaymentAlreadyAttempted = errors.New("client: payment already attempted")
	// ErrBodyNotReplayable: the request body has no GetBody and is larger than
	// MaxReplayBody, so it cannot be sent again with the payment.
	ErrBodyNotReplayable = errors.New("client: request body cannot be replayed")
	// ErrNoSigner: the Transport has no Signer.
	ErrNoSigner = errors.New("client: Transport has no Signer")
)

// Transport is an http.RoundTripper that pays x402 v2 402 answers within a
// Policy and retries the request once with the payment.
//
// A request is sent through Base. An answer other than 402 is returned as it
// is. On a 402 the Transport decodes PAYMENT-REQUIRED, chooses an option its
// Policy allows (see Policy and Refusal), reserves its amount against the
// budget, signs an EIP-3009 authorization with Signer, and sends the request
// again with PAYMENT-SIGNATURE. Whatever answers that retry is returned, a
// second 402 included: the Transport never pays twice for one RoundTrip. The
// reservation becomes spent when the answer is a 2xx or reports a successful
// settlement, is released when the answer says the payment did not go through,
// and stays held when the outcome is unknown (a connection error, or
// settlement_pending).
//
// Request headers are left alone, Authorization included: the gateway ignores a
// bearer that is not one of its keys (DECISIONS D12), so the OpenAI SDKs'
// placeholder key is harmless.
//
// The zero value passes every response through and fails on a 402 (no Signer,
// empty Policy). A Transport must not be copied after first use; it is safe for
// concurrent use.
type Transport struct {
	// Base sends the requests; nil means http.DefaultTransport.
	Base http.RoundTripper
	// Signer signs the authorizations; its address is the payer.
	Signer exact.Signer
	// Policy bounds what is paid. It must not change once the Transport is in use.
	Policy Policy
	// Journal records payments for retry safety (DECISIONS D26); nil records
	// nothing.
	Journal Journal
	// MaxReplayBody caps the body buffered for a request without GetBody; 0 means
	// DefaultMaxReplayBody.
	MaxReplayBody int64
	// Now is the signing clock (validBefore = now + maxTimeoutSeconds); nil means
	// time.Now.
	Now func() time.Time
	// Log receives one line per 402 and per payment, never a payment header or
	// signature; nil discards.
	Log *slog.Logger

	logOnce sync.Once
	log     *slog.Logger
	ledger  ledger
}

// Spent returns the sum of the payments whose outcome is paid.
func (t *Transport) Spent() *big.Int {
	spent, _ := t.ledger.totals()
	return spent
}

// Remaining returns what is left of the budget: Policy.Budget minus what was
// spent and what is held for payments in flight or of unknown outcome. It is zero
// when the Policy has no budget.
func (t *Transport) Remaining() *big.Int {
	if t.Policy.Budget == nil {
		return new(big.Int)
	}
	t.ledger.mu.Lock()
	defer t.ledger.mu.Unlock()
	return t.ledger.remainingLocked(t.Policy.Budget)
}

func (t *Transport) base() http.RoundTripper {
	if t.Base != nil {
		return t.Base
	}
	return http.DefaultTransport
}

func (t *Transport) journal() Journal {
	if t.Journal != nil {
		return t.Journal
	}
	return nopJournal{}
}

func (t *Transport) logger() *slog.Logger {
	t.logOnce.Do(func() {
		l := t.Log
		if l == nil {
			l = slog.New(slog.DiscardHandler)
		}
		t.log = l.With("component", "x402-client")
	})
	return t.log
}

// secretHeaders are never carried to an origin other than the one they were
// made for (MISSION W5).
var secretHeaders = []string{x402.HeaderPaymentSignature, x402.HeaderLegacyPayment, x402.HeaderSignInWithX}

// RoundTrip sends req, and pays and resends it once if the answer is a 402.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	attempted := req.Header.Get(x402.HeaderPaymentSignature) != "" || req.Header.Get(x402.HeaderLegacyPayment) != ""

	out := req
	if redirectedAcrossOrigins(req) && hasAny(req.Header, secretHeaders) {
		// An http.Client copies the first request's headers onto every redirect;
		// a payment or sign-in header made for one origin must not reach another.
		out = req.Clone(ctx)
		for _, h := range secretHeaders {
			out.Header.Del(h)
		}
		t.logger().InfoContext(ctx, "dropped payment headers on a cross-origin redirect", "url", redactURL(req.URL))
	}
	out, replay, err := t.replayable(req, out)
	if err != nil {
		return nil, err
	}

	resp, err := t.base().RoundTrip(out)
	if err != nil {
		return nil, err
	}
	resp.Request = req
	if resp.StatusCode != http.StatusPaymentRequired {
		return resp, nil
	}
	// From here on the 402 is consumed; whatever happens, its body is closed.
	header := resp.Header.Get(x402.HeaderPaymentRequired)
	drainClose(resp.Body)
	log := t.logger().With("url", redactURL(req.URL))
	switch {
	case attempted:
		return nil, ErrPaymentAlreadyAttempted
	case header == "":
		return nil, ErrNoPaymentRequired
	}
	pr, err := x402.DecodePaymentRequired(header)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadPaymentRequired, err)
	}
	log.DebugContext(ctx, "payment required", "options", len(pr.Accepts))
	if replay == nil {
		return nil, fmt.Errorf("%w: no GetBody and larger than %d bytes", ErrBodyNotReplayable, t.maxReplayBody())
	}
	if t.Signer == nil {
		return nil, ErrNoSigner
	}
	rules, err := t.Policy.rules()
	if err != nil {
		return nil, err
	}
	i, amount, opts := t.ledger.reserve(rules, pr)
	if i < 0 {
		e := &NoPayableOptionError{Resource: redactURL(req.URL), Options: opts}
		log.InfoContext(ctx, "no payable option", "error", e.Error())
		return nil, e
	}
	return t.pay(req, out, replay, pr, i, amount, log)
}

// pay signs accepts[i] of pr, whose amount the ledger holds, and sends the
// request again with the payment. It settles the hold by the outcome.
func (t *Transport) pay(req, out *http.Request, replay func() (io.ReadCloser, error), pr *x402.PaymentRequired, i int, amount *big.Int, log *slog.Logger) (*http.Response, error) {
	ctx := req.Context()
	choice := pr.Accepts[i]
	log = log.With("scheme", choice.Scheme, "network", choice.Network, "asset", choice.Asset, "amount", choice.Amount, "pay_to", choice.PayTo)
	entry := &JournalEntry{
		Method:         req.Method,
		Resource:       redactURL(req.URL),
		IdempotencyKey: req.Header.Get("Idempotency-Key"),
		Requirements:   choice,
	}
	j := t.journal()
	// abort releases the hold of a payment that was never sent.
	abort := func(err error) (*http.Response, error) {
		t.ledger.finish(amount, OutcomeNotPaid)
		log.InfoContext(ctx, "payment not sent", "error", err.Error())
		return nil, err
	}
	if err := j.Begin(ctx, entry); err != nil {
		return abort(fmt.Errorf("client: journal: %w", err))
	}
	payload, err := exact.NewPaymentPayload(ctx, t.Signer, pr, i, exact.SignOptions{Now: t.Now})
	if err != nil {
		return abort(fmt.Errorf("client: sign payment: %w", err))
	}
	value, err := x402.EncodeHeader(payload)
	if err != nil {
		return abort(fmt.Errorf("client: encode payment: %w", err))
	}
	entry.Header = Secret(value)
	retry := out.Clone(ctx)
	if retry.Body, err = replay(); err != nil {
		return abort(fmt.Errorf("client: replay request body: %w", err))
	}
	retry.Header.Set(x402.HeaderPaymentSignature, value)
	if err := j.Signed(ctx, entry); err != nil {
		if retry.Body != nil {
			_ = retry.Body.Close()
		}
		return abort(fmt.Errorf("client: journal: %w", err))
	}
	if err := ctx.Err(); err != nil {
		if retry.Body != nil {
			_ = retry.Body.Close()
		}
		return abort(err)
	}

	log.InfoContext(ctx, "paying")
	resp, err := t.base().RoundTrip(retry)
	if err != nil {
		t.finish(ctx, j, entry, amount, OutcomeUnknown, log)
		return nil, fmt.Errorf("client: send paid request: %w", err)
	}
	resp.Request = req // not retry: it carries the payment header
	o, sr, srErr := outcomeOf(resp)
	attrs := []any{"status", resp.StatusCode}
	switch {
	case srErr != nil && !errors.Is(srErr, ErrNoSettleResponse):
		attrs = append(attrs, "settle_response_error", srErr.Error())
	case sr != nil:
		attrs = append(attrs, "success", sr.Success, "transaction", sr.Transaction, "error_reason", string(sr.ErrorReason))
	}
	t.finish(ctx, j, entry, amount, o, log, attrs...)
	return resp, nil
}

// finish settles the hold of a sent payment by its outcome and records it.
func (t *Transport) finish(ctx context.Context, j Journal, e *JournalEntry, amount *big.Int, o Outcome, log *slog.Logger, attrs ...any) {
	t.ledger.finish(amount, o)
	log.InfoContext(ctx, "payment outcome", append([]any{"outcome", o.String()}, attrs...)...)
	// The journal learns the outcome even when the caller has gone away.
	jctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), journalTimeout)
	defer cancel()
	if err := j.Finish(jctx, e, o); err != nil {
		log.WarnContext(ctx, "journal: record outcome", "error", err.Error())
	}
}

func (t *Transport) maxReplayBody() int64 {
	if t.MaxReplayBody > 0 {
		return t.MaxReplayBody
	}
	return DefaultMaxReplayBody
}

// replayable makes sure the body of out can be sent twice. It returns the
// request to send first and a function that yields a fresh body for the paid
// retry, or a nil function when the body is too large to buffer (the request is
// still sent once, and a 402 then fails with ErrBodyNotReplayable).
func (t *Transport) replayable(req, out *http.Request) (*http.Request, func() (io.ReadCloser, error), error) {
	if out.Body == nil || out.Body == http.NoBody {
		return out, func() (io.ReadCloser, error) { return out.Body, nil }, nil
	}
	if out.GetBody != nil {
		return out, out.GetBody, nil
	}
	limit := t.maxReplayBody()
	var buf []byte
	if out.ContentLength <= limit {
		var err error
		buf, err = io.ReadAll(io.LimitReader(out.Body, limit+1))
		if err != nil {
			_ = req.Body.Close()
			return nil, nil, fmt.Errorf("client: read request body: %w", err)
		}
	}
	if out == req {
		out = req.Clone(req.Context())
	}
	if int64(len(buf)) > limit || out.ContentLength > limit {
		// Send what was read followed by the rest; closing closes the original.
		out.Body = readCloser{io.MultiReader(bytes.NewReader(buf), req.Body), req.Body}
		return out, nil, nil
	}
	_ = req.Body.Close()
	getBody := func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(buf)), nil }
	if len(buf) == 0 {
		getBody = func() (io.ReadCloser, error) { return http.NoBody, nil }
	}
	out.Body, _ = getBody()
	out.GetBody = getBody
	out.ContentLength = int64(len(buf))
	return out, getBody, nil
}

type readCloser struct {
	io.Reader
	io.Closer
}

// drainClose reads a little of body, so the connection can be reused, and
// closes it.
func drainClose(body io.ReadCloser) {
	_, _ = io.CopyN(io.Discard, body, maxDrain)
	_ = body.Close()
}

func hasAny(h http.Header, names []string) bool {
	for _, n := range names {
		if h.Get(n) != "" {
			return true
		}
	}
	return false
}

// maxRedirectWalk bounds the walk back along a redirect chain; http.Client stops
// after 10 redirects.
const maxRedirectWalk = 64

// redirectedAcrossOrigins reports whether req is a redirect, made by an
// http.Client, to an origin other than that of the chain's first request, whose
// headers the client copies onto every hop. A chain it cannot follow back
// counts as cross-origin.
func redirectedAcrossOrigins(req *http.Request) bool {
	first := req
	for n := 0; first.Response != nil; n++ {
		prev := first.Response.Request
		if prev == nil || prev.URL == nil || n == maxRedirectWalk {
			return true
		}
		first = prev
	}
	return first != req && !sameOrigin(first.URL, req.URL)
}

// sameOrigin compares scheme, host and port, with default ports made explicit.
func sameOrigin(a, b *url.URL) bool {
	return strings.EqualFold(a.Scheme, b.Scheme) && strings.EqualFold(hostPort(a), hostPort(b))
}

func hostPort(u *url.URL) string {
	port := u.Port()
	if port == "" {
		switch strings.ToLower(u.Scheme) {
		case "http":
			port = "80"
		case "https":
			port = "443"
		}
	}
	return net.JoinHostPort(u.Hostname(), port)
}

// redactURL is u without user info, query or fragment: what logs and errors may
// show of a request.
func redactURL(u *url.URL) string {
	return u.Scheme + "://" + u.Host + u.Path
}

var _ http.RoundTripper = (*Transport)(nil)
