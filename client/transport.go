package client

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
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
	"github.com/llm4agents/llm4agents/x402/evm/upto"
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

// DefaultReuseMargin is how long before its validBefore a recorded
// authorization stops being sent again: past it, the server may refuse it as
// too close to expiry, and a retry signs a fresh authorization with the same
// payment-identifier id.
const DefaultReuseMargin = 30 * time.Second

// ErrIdempotencyKeyReused is returned by RoundTrip when a request carries the
// Idempotency-Key of an open call (not yet answered with a 2xx) for a different
// request. Nothing was signed and nothing was sent.
var ErrIdempotencyKeyReused = errors.New("client: Idempotency-Key reused for a different request")

// Transport is an http.RoundTripper that pays x402 v2 402 answers within a
// Policy, sending each logical call's payment once however often the call is
// retried.
//
// A request is sent through Base. An answer other than 402 is returned as it
// is. On a 402 the Transport decodes PAYMENT-REQUIRED and opens the call's
// entry in its Journal before anything is signed, so that a retry of the call
// never signs a second payment. The entry is keyed by the request's
// Idempotency-Key header, or else by its x402.Fingerprint, together with the origin and the payer. Then:
//
//   - If the entry holds an authorization signed earlier for this call (the
//     caller, an SDK or a restarted process is retrying after a lost answer)
//     that is still more than ReuseMargin from its validBefore, the Transport
//     sends that same PAYMENT-SIGNATURE again, provided the 402 still offers
//     its option and the Policy still allows it. Nothing new is signed, and
//     no balance is read: that payment may have moved the funds already.
//   - Otherwise it chooses an option its Policy allows (see Policy and
//     RefusalError) and, for the call's first authorization, that the
//     payer's balance covers when Policy.Balances is set; reserves its
//     amount against the budget, signs an EIP-3009 authorization (exact) or
//     a Permit2 witness transfer of at most the amount (upto) with Signer,
//     records it in the Journal, and sends it.
//
// When the 402 declares the payment-identifier extension (x402 v2 spec,
// github.com/x402-foundation/x402 specs/extensions/payment_identifier.md),
// the payment carries the entry's id, and every authorization signed for the
// call carries the same one, so a server that keeps records per id (the
// llm4agents gateway does) recognises a retry with a fresh authorization. When the 402 does
// not declare it no id is sent, as the official clients do: the echo would be
// an extension the server never offered.
//
// The paid request is retried as RetryPolicy says (transport errors,
// settlement_pending, 409 with Retry-After) with the same payment. Whatever
// answers last is returned, a 402 included: one RoundTrip never signs twice.
// A 2xx, or a PAYMENT-RESPONSE reporting success, completes the call: its
// entry is removed, and an identical request afterwards is a new call with a
// new payment. Any other answer leaves the entry open for the next retry.
// Identical requests in flight at the same time are distinct calls; a request
// is the retry of an earlier one once that one has returned. Requests with one
// Idempotency-Key wait for each other instead.
//
// The budget counts each authorization once: held from before signing,
// spent when an answer says paid, released when it says not paid, and kept
// held when the outcome is unknown (a lost connection, settlement_pending).
// An upto authorization is held at its maximum; once paid, what stays spent
// is the amount its PAYMENT-RESPONSE reports (SettledAmount), at most the
// maximum.
//
// An upto payment spends Permit2's ERC-20 allowance: the wallet must have
// approved Permit2 (upto.Permit2Address) for the asset once beforehand, or
// the server refuses the payment (`llm4agents wallet approve-permit2`).
//
// Request headers are left alone, Authorization included: the gateway ignores a
// bearer that is not one of its keys, so the OpenAI SDKs'
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
	// Journal records each call's payment so that its retries reuse it
	// instead of paying again. Nil means a MemoryJournal of the Transport's own, which
	// covers retries within the process; a FileJournal also covers a crash.
	Journal Journal
	// Retry bounds the Transport's own retries of a paid request.
	Retry RetryPolicy
	// ReuseMargin: a recorded authorization is sent again while its
	// validBefore is more than this far away; 0 means DefaultReuseMargin.
	ReuseMargin time.Duration
	// MaxReplayBody caps the body buffered for a request without GetBody; 0 means
	// DefaultMaxReplayBody.
	MaxReplayBody int64
	// Now is the signing clock (validBefore = now + maxTimeoutSeconds, and the
	// reuse window); nil means time.Now.
	Now func() time.Time
	// Log receives one line per 402, per payment and per retry, never a payment
	// header, signature, payment-identifier id or other credential; nil
	// discards.
	Log *slog.Logger
	// SignInWithX, when set, answers a 402 that declares the sign-in-with-x
	// extension (x402 v2 spec, github.com/x402-foundation/x402
	// specs/extensions/sign-in-with-x.md) with a SIGN-IN-WITH-X proof signed by Signer
	// before paying: a server that knows the wallet already paid lets it in.
	// The proof is minted for this one request and its origin (the offer's
	// domain and uri must be the request's), sent once, never kept, logged
	// or carried by the paid request that follows if the server answers 402
	// again. Off by default: a sign-in tells the server the wallet's address
	// before anything is paid. A request that carries its own SIGN-IN-WITH-X
	// header gets none minted, and a 402 from an origin the Policy does not
	// allow gets no sign-in either.
	SignInWithX bool
	// OnCharge, when set, is called once for each payment a RoundTrip sent,
	// before that RoundTrip returns, with what was concluded and counted; ctx
	// is the request's. An upto settlement whose amount cannot be taken at its
	// word is reported here (Charge.Err), and logged. It must not call the
	// Transport.
	OnCharge func(ctx context.Context, c Charge)

	initOnce sync.Once
	log      *slog.Logger
	ownJ     *MemoryJournal
	ledger   ledger
	calls    keyedMutex
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

func (t *Transport) init() {
	t.initOnce.Do(func() {
		l := t.Log
		if l == nil {
			l = slog.New(slog.DiscardHandler)
		}
		t.log = l.With("component", "x402-client")
		t.ownJ = NewMemoryJournal()
		t.ownJ.Now = t.Now
	})
}

func (t *Transport) journal() Journal {
	if t.Journal != nil {
		return t.Journal
	}
	t.init()
	return t.ownJ
}

func (t *Transport) logger() *slog.Logger {
	t.init()
	return t.log
}

func (t *Transport) now() time.Time {
	if t.Now != nil {
		return t.Now()
	}
	return time.Now()
}

func (t *Transport) reuseMargin() time.Duration {
	if t.ReuseMargin > 0 {
		return t.ReuseMargin
	}
	return DefaultReuseMargin
}

// secretHeaders are never carried to an origin other than the one they were
// made for: they are secrets.
var secretHeaders = []string{x402.HeaderPaymentSignature, x402.HeaderLegacyPayment, x402.HeaderSignInWithX}

// RoundTrip sends req, and pays and resends it if the answer is a 402.
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
	if opts := rules.refuseOrigin(req.URL, pr); opts != nil {
		err := &NoPayableOptionError{Resource: redactURL(req.URL), Options: opts}
		log.InfoContext(ctx, "no payable option", "error", err.Error())
		return nil, err
	}
	if t.SignInWithX && signInOffered(pr) && req.Header.Get(x402.HeaderSignInWithX) == "" {
		resp, err := t.signIn(req, out, replay, pr, log)
		if resp != nil || err != nil {
			return resp, err
		}
	}
	return t.pay(req, out, replay, pr, rules, log)
}

// signIn sends the request once more with a SIGN-IN-WITH-X proof minted for
// it, and returns the answer unless it is another 402 (nil, nil: pay). An
// offer this package does not sign is skipped, and the request is paid.
func (t *Transport) signIn(req, out *http.Request, replay func() (io.ReadCloser, error), pr *x402.PaymentRequired, log *slog.Logger) (*http.Response, error) {
	ctx := req.Context()
	proof, err := mintSignIn(ctx, t.Signer, pr, req.URL)
	if errors.Is(err, ErrSignInRefused) {
		log.InfoContext(ctx, "sign-in-with-x offer not signed; paying instead", "error", err.Error())
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	body, err := replay()
	if err != nil {
		return nil, fmt.Errorf("client: replay request body: %w", err)
	}
	si := out.Clone(ctx)
	si.Body = body
	si.Header.Set(x402.HeaderSignInWithX, proof.Reveal())
	log.InfoContext(ctx, "signing in with the wallet (sign-in-with-x)", "address", t.Signer.Address().Hex())
	resp, err := t.base().RoundTrip(si)
	if err != nil {
		return nil, fmt.Errorf("client: send sign-in: %w", err)
	}
	resp.Request = req // not si: it carries the proof
	if resp.StatusCode != http.StatusPaymentRequired {
		log.InfoContext(ctx, "signed in; nothing paid", "status", resp.StatusCode)
		return resp, nil
	}
	drainClose(resp.Body)
	log.InfoContext(ctx, "sign-in not accepted; paying")
	return nil, nil
}

// call is one logical call being paid: its journal entry and the
// authorization this RoundTrip sends.
type call struct {
	j      Journal
	e      *JournalEntry
	holdID string // the ledger's name for the authorization sent
	fresh  bool   // this call put the hold in the ledger
	sent   bool   // the paid request went out at least once
	log    *slog.Logger
	// sr is the PAYMENT-RESPONSE of the last answer, nil when it had none or
	// it did not decode (srErr says why, ErrNoSettleResponse included).
	sr    *x402.SettleResponse
	srErr error
}

// pay opens the call's journal entry, reuses its recorded authorization or
// signs one, and sends the request with it, retrying as t.Retry says.
func (t *Transport) pay(req, out *http.Request, replay func() (io.ReadCloser, error), pr *x402.PaymentRequired, rules *rules, log *slog.Logger) (*http.Response, error) {
	ctx := req.Context()
	idem := req.Header.Get(HeaderIdempotencyKey)
	fp, err := requestFingerprint(req, replay, t.maxReplayBody())
	if err != nil {
		return nil, fmt.Errorf("client: read request body: %w", err)
	}
	key := journalKey(req.URL, t.Signer.Address(), idem, fp)
	if idem != "" {
		unlock, err := t.calls.lock(ctx, key)
		if err != nil {
			return nil, err
		}
		defer unlock()
	}
	method := req.Method
	if method == "" {
		method = http.MethodGet // as net/http sends it
	}
	c := &call{j: t.journal(), log: log, e: &JournalEntry{
		Key: key, ID: Secret(x402.NewPaymentID()), Method: method, Resource: redactURL(req.URL),
		IdempotencyKey: idem, Fingerprint: fp,
	}}
	if err := c.j.Begin(ctx, c.e); err != nil {
		log.WarnContext(ctx, "payment not sent: journal", "error", err.Error())
		if errors.Is(err, ErrJournalCorrupt) {
			return nil, err // says it all, and names the file
		}
		return nil, fmt.Errorf("client: journal: %w", err)
	}
	resp, err := t.payCall(req, out, replay, pr, rules, c, fp)
	t.finish(ctx, c, resp, err)
	return resp, err
}

// payCall is pay once the journal entry is held.
func (t *Transport) payCall(req, out *http.Request, replay func() (io.ReadCloser, error), pr *x402.PaymentRequired, rules *rules, c *call, fp string) (*http.Response, error) {
	ctx := req.Context()
	e, log := c.e, c.log
	if e.Fingerprint != fp {
		return nil, ErrIdempotencyKeyReused
	}
	if e.Header != "" && t.now().Add(t.reuseMargin()).Before(e.ValidBefore) {
		i := x402.FindMatch(pr.Accepts, e.Requirements)
		opts, ok, fresh := t.ledger.reserveRecorded(rules, pr, i, holdID(e.Header))
		if !ok {
			err := &NoPayableOptionError{Resource: redactURL(req.URL), Options: opts}
			log.InfoContext(ctx, "no payable option", "error", err.Error())
			return nil, err
		}
		c.holdID, c.fresh = holdID(e.Header), fresh
		log = log.With(paymentAttrs(pr.Accepts[i])...)
		log.InfoContext(ctx, "paying with the authorization recorded for this call", "sends", e.Sends)
	} else {
		if e.Header != "" {
			log.InfoContext(ctx, "recorded authorization is too close to its validBefore; signing a fresh one for the same call")
		}
		i, amount, opts := t.reserveFunded(ctx, c, rules, pr)
		if i < 0 {
			err := &NoPayableOptionError{Resource: redactURL(req.URL), Options: opts}
			log.InfoContext(ctx, "no payable option", "error", err.Error())
			return nil, err
		}
		log = log.With(paymentAttrs(pr.Accepts[i])...)
		if err := t.sign(ctx, c, pr, i); err != nil {
			t.ledger.release(amount)
			log.InfoContext(ctx, "payment not sent", "error", err.Error())
			return nil, err
		}
		c.holdID, c.fresh = holdID(e.Header), true
		t.ledger.bind(c.holdID, amount)
		log.InfoContext(ctx, "paying")
	}
	c.log = log
	return t.send(req, out, replay, c)
}

// sign signs accepts[i] of pr for the call, with the call's payment id when
// the 402 declares the extension, and records it in the journal before
// returning.
func (t *Transport) sign(ctx context.Context, c *call, pr *x402.PaymentRequired, i int) error {
	var payload *x402.PaymentPayload
	var err error
	if pr.Accepts[i].Scheme == upto.Scheme {
		payload, err = upto.NewPaymentPayload(ctx, t.Signer, pr, i, upto.SignOptions{Now: t.Now})
	} else {
		payload, err = exact.NewPaymentPayload(ctx, t.Signer, pr, i, exact.SignOptions{Now: t.Now})
	}
	if err != nil {
		return fmt.Errorf("client: sign payment: %w", err)
	}
	if declared, _ := x402.PaymentIDDeclared(pr.Extensions); declared {
		ext, err := x402.AppendPaymentID(pr.Extensions, c.e.ID.Reveal())
		if err != nil {
			return fmt.Errorf("client: payment id: %w", err)
		}
		if payload.Extensions, err = x402.Marshal(ext); err != nil {
			return fmt.Errorf("client: encode extensions: %w", err)
		}
	}
	validBefore, err := signedUntil(pr.Accepts[i].Scheme, payload.Payload)
	if err != nil {
		return fmt.Errorf("client: read back payment: %w", err)
	}
	value, err := x402.EncodeHeader(payload)
	if err != nil {
		return fmt.Errorf("client: encode payment: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	prev := *c.e
	c.e.Header, c.e.Requirements = Secret(value), pr.Accepts[i]
	c.e.ValidBefore = validBefore
	c.e.Outcome = OutcomeUnknown
	if err := c.j.Signed(ctx, c.e); err != nil {
		*c.e = prev // never sent, so the journal's record stands
		return fmt.Errorf("client: journal: %w", err)
	}
	return nil
}

// signedUntil reads back the time a signed payload stops being valid: an
// exact authorization's validBefore, an upto permit's deadline.
func signedUntil(scheme string, raw []byte) (time.Time, error) {
	if scheme == upto.Scheme {
		p, err := upto.ParsePayload(raw)
		if err != nil {
			return time.Time{}, err
		}
		return time.Unix(p.Authorization.Deadline.Int64(), 0), nil
	}
	auth, err := exact.ParsePayload(raw)
	if err != nil {
		return time.Time{}, err
	}
	return time.Unix(auth.Authorization.ValidBefore.Int64(), 0), nil
}

// send sends the paid request, and again as t.Retry allows, with the call's
// recorded payment, and returns the last answer.
func (t *Transport) send(req, out *http.Request, replay func() (io.ReadCloser, error), c *call) (*http.Response, error) {
	ctx := req.Context()
	start := time.Now()
	for attempt := 1; ; attempt++ {
		body, err := replay()
		if err != nil {
			return nil, fmt.Errorf("client: replay request body: %w", err)
		}
		retry := out.Clone(ctx)
		retry.Body = body
		retry.Header.Set(x402.HeaderPaymentSignature, c.e.Header.Reveal())
		c.sent = true
		c.e.Sends++
		resp, err := t.base().RoundTrip(retry)

		var reason string
		var wait time.Duration
		if err != nil {
			c.e.Outcome = OutcomeUnknown
			c.sr, c.srErr = nil, nil
			if ctx.Err() != nil {
				return nil, fmt.Errorf("client: send paid request: %w", err)
			}
			reason, wait = "transport error", t.Retry.backoff(attempt)
		} else {
			resp.Request = req // not retry: it carries the payment header
			o, sr, srErr := outcomeOf(resp)
			c.e.Outcome = o
			c.sr, c.srErr = sr, srErr
			attrs := []any{"status", resp.StatusCode, "outcome", o.String(), "attempt", attempt}
			switch {
			case srErr != nil && !errors.Is(srErr, ErrNoSettleResponse):
				attrs = append(attrs, "settle_response_error", srErr.Error())
			case sr != nil:
				attrs = append(attrs, "success", sr.Success, "transaction", sr.Transaction, "error_reason", string(sr.ErrorReason))
			}
			c.log.InfoContext(ctx, "payment outcome", attrs...)
			var ok bool
			var asked time.Duration
			if reason, asked, ok = retryReason(resp, sr, time.Now()); !ok {
				return resp, nil
			}
			wait = asked
			if wait == 0 {
				wait = t.Retry.backoff(attempt)
			}
		}
		wait = min(wait, t.Retry.maxWait())
		// Stop when the attempts or the time run out, or when the recorded
		// authorization would be too close to its validBefore to send again.
		stop := attempt >= t.Retry.maxAttempts() ||
			time.Since(start)+wait > t.Retry.maxElapsed() ||
			!t.now().Add(wait+t.reuseMargin()).Before(c.e.ValidBefore)
		if stop {
			if err != nil {
				c.log.InfoContext(ctx, "payment outcome", "outcome", OutcomeUnknown.String(), "attempt", attempt, "error", err.Error())
				return nil, fmt.Errorf("client: send paid request: %w", err)
			}
			return resp, nil
		}
		if resp != nil {
			drainClose(resp.Body)
		}
		c.log.InfoContext(ctx, "retrying the paid request with the same payment", "reason", reason, "attempt", attempt, "wait", wait)
		if err := sleep(ctx, wait); err != nil {
			return nil, fmt.Errorf("client: wait to retry: %w", err)
		}
	}
}

// finish settles the ledger's hold of the call's authorization by the outcome
// of its last send and records it in the journal, which releases the entry.
func (t *Transport) finish(ctx context.Context, c *call, resp *http.Response, err error) {
	o := c.e.Outcome
	if c.sent {
		if err != nil && resp == nil && o != OutcomeUnknown {
			o = OutcomeUnknown
		}
		ch := t.charge(ctx, c, o)
		if deferred := streamedUpto(c, resp, ch); deferred {
			// The charge is in the stream's last chunk: the maximum stays
			// held until the body ends (chargeReader).
			resp.Body = &chargeReader{ReadCloser: resp.Body, done: func(charged *big.Int, cerr error) {
				ch.Amount, ch.Err = charged, cerr
				t.ledger.finish(c.holdID, o, charged)
				if t.OnCharge != nil {
					t.OnCharge(ctx, ch)
				}
			}, maximum: ch.Maximum}
		} else {
			t.ledger.finish(c.holdID, o, ch.Amount)
			c.e.Charged = ch.Amount
			if t.OnCharge != nil {
				t.OnCharge(ctx, ch)
			}
		}
	} else if c.fresh {
		// Reserved by this call but never sent (the body could not be
		// replayed): the hold goes back; the journal keeps the authorization
		// for the next retry.
		t.ledger.finish(c.holdID, OutcomeNotPaid, nil)
	}
	// The journal learns the outcome even when the caller has gone away.
	jctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), journalTimeout)
	defer cancel()
	if ferr := c.j.Finish(jctx, c.e, o); ferr != nil {
		c.log.WarnContext(ctx, "journal: record outcome", "error", ferr.Error())
	}
}

// charge concludes what the call's payment cost by outcome o and its last
// answer's PAYMENT-RESPONSE.
func (t *Transport) charge(ctx context.Context, c *call, o Outcome) Charge {
	ch := Charge{Requirements: c.e.Requirements, Outcome: o, Settle: c.sr}
	if c.srErr != nil && !errors.Is(c.srErr, ErrNoSettleResponse) {
		ch.Err = c.srErr
	}
	maximum, err := exact.ParseUint256(c.e.Requirements.Amount)
	if err != nil {
		// A recorded option that passed the policy always has an amount.
		ch.Err = fmt.Errorf("client: amount of the option paid: %w", err)
		return ch
	}
	ch.Maximum = maximum
	if o != OutcomePaid {
		return ch
	}
	amount, err := SettledAmount(c.e.Requirements, c.sr)
	ch.Amount = amount
	if err != nil {
		ch.Err = err
		c.log.WarnContext(ctx, "settlement amount not taken", "maximum", maximum.String(), "counted", amount.String(), "error", err.Error())
	} else if c.e.Requirements.Scheme == upto.Scheme {
		c.log.InfoContext(ctx, "upto settled", "maximum", maximum.String(), "amount", amount.String())
	}
	return ch
}

func paymentAttrs(r x402.PaymentRequirements) []any {
	return []any{"scheme", r.Scheme, "network", r.Network, "asset", r.Asset, "amount", r.Amount, "pay_to", r.PayTo}
}

// holdID names an authorization in the ledger without keeping its value.
func holdID(header Secret) string {
	sum := sha256.Sum256([]byte(header.Reveal()))
	return hex.EncodeToString(sum[:])
}

// keyedMutex serializes the calls that share an Idempotency-Key.
type keyedMutex struct {
	mu   sync.Mutex
	busy map[string]chan struct{}
}

// lock waits until no other call holds key, or ctx is done.
func (k *keyedMutex) lock(ctx context.Context, key string) (func(), error) {
	for {
		k.mu.Lock()
		if k.busy == nil {
			k.busy = map[string]chan struct{}{}
		}
		ch, held := k.busy[key]
		if !held {
			mine := make(chan struct{})
			k.busy[key] = mine
			k.mu.Unlock()
			return func() {
				k.mu.Lock()
				delete(k.busy, key)
				k.mu.Unlock()
				close(mine)
			}, nil
		}
		k.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
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
