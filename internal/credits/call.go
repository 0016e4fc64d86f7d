package credits

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"time"

	"github.com/ethereum/go-ethereum/common"

	"github.com/llm4agents/llm4agents/internal/chat"
	"github.com/llm4agents/llm4agents/internal/ledger"
	"github.com/llm4agents/llm4agents/internal/pricing"
	"github.com/llm4agents/llm4agents/internal/store"
)

// storeTimeout bounds each store call of a credit-paid call. The writes that
// must finish even when the client has left (a hold, a capture, a release, a
// receipt) run detached from the request's cancellation, within it.
const storeTimeout = 5 * time.Second

// CallMetrics counts what Calls does. Credit counts one outcome of a call
// (the label values are documented with the gateway's metric);
// LedgerLatency times one store operation of the ledger.
type CallMetrics interface {
	Credit(outcome string)
	LedgerLatency(op string, d time.Duration)
}

// CallsConfig is what Calls needs. Keys, Ledger, Display and Metrics are
// required.
type CallsConfig struct {
	Keys   *Keys
	Ledger *ledger.Ledger
	// Leases, when set, admits and charges calls against this replica's
	// leases of each key (docs/DESIGN.md D28); nil holds and captures each
	// call in the store before its answer.
	Leases *ledger.Leases
	// Receipts keeps the receipt of a call charged in the store; nil keeps
	// none. A leased call's receipt is written with its draw instead, and a
	// per-call one with its capture when the ledger's store can
	// (Ledger.KeepsReceipts): Receipts must then be that same store.
	Receipts store.Receipts
	// Display formats an amount of atomic units for a buyer's message.
	Display func(*big.Int) string
	// TopUp is how a buyer short of credit gets more, as a message names
	// it: "POST /v1/credits/topup".
	TopUp   string
	Metrics CallMetrics
	Log     *slog.Logger
}

// Calls runs the payment steps of calls paid from credits through an API key,
// whatever their route, with no HTTP in it: Admit before the upstream (the
// key, its scope, the quote, its rate limits, the hold of the call's maximum
// cost), then the admitted Call's Charge or Release.
type Calls struct {
	cfg CallsConfig
	now func() time.Time
}

// NewCalls returns Calls.
func NewCalls(cfg CallsConfig) *Calls {
	return &Calls{cfg: cfg, now: time.Now}
}

// Request is a call to admit.
type Request struct {
	// Secret is the API key the call presents (the bearer token).
	Secret string
	// Model is the model called, as the key's scope names it.
	Model string
	// Remedy is what the buyer can do about a call too large for a hold or
	// for the key's rate: "lower max_tokens" for a chat call.
	Remedy string
	// Quote prices the call once its key may call Model. Its error is
	// returned by Admit as it is, and not counted in the metrics.
	Quote func() (Quote, error)
}

// Quote is what a call may cost: PromptTokens in, up to OutputBound out, at
// Price.
type Quote struct {
	PromptTokens int64
	OutputBound  int64
	Price        pricing.Price
}

// Call is an admitted credit-paid call: its maximum cost is held, on a lease
// or in the store. Exactly one of Charge and Release ends it.
type Call struct {
	calls *Calls
	// ID is the request id: "0x" and 64 hex digits of crypto/rand, the
	// hold's id and the receipt's bytes32 requestId.
	ID    string
	Key   store.APIKey
	Payer common.Address
	Quote Quote
	// ticket is the call's admission against a lease; nil when the call
	// holds its own maximum in the store.
	ticket *ledger.Ticket
}

// Authenticate returns the API key of secret, or a refusal: InvalidKey for a
// key unknown, revoked or expired, StoreUnavailable when it cannot be looked
// up. Neither carries the secret.
func (c *Calls) Authenticate(ctx context.Context, secret string) (store.APIKey, error) {
	ctx, cancel := context.WithTimeout(ctx, storeTimeout)
	defer cancel()
	key, err := c.cfg.Keys.Authenticate(ctx, secret)
	refuse := func(msg string) (store.APIKey, error) {
		return store.APIKey{}, &RefusalError{Reason: InvalidKey, Message: msg + "; nothing was charged", Err: err}
	}
	switch {
	case errors.Is(err, ErrUnknownKey):
		return refuse("the API key is not known here")
	case errors.Is(err, ErrRevokedKey):
		return refuse("the API key was revoked by its owner")
	case errors.Is(err, ErrExpiredKey):
		return refuse("the API key has expired")
	case err != nil:
		return store.APIKey{}, storeDown(err)
	}
	return key, nil
}

// Admit runs every step of a credit-paid call before its upstream: the key,
// its scope, the quote, its rate limits, and the hold of the call's maximum
// cost. It returns the admitted call, a *RefusalError, or the quote's error.
// Every error it returns left nothing held; nothing before the hold calls
// the upstream.
func (c *Calls) Admit(ctx context.Context, req Request) (*Call, error) {
	call, err := c.admit(ctx, req)
	if qe, ok := errors.AsType[*quoteError](err); ok {
		return nil, qe.err // counted by the quote's caller
	}
	if err != nil {
		c.cfg.Metrics.Credit(admitOutcome(err))
	}
	return call, err
}

// quoteError is the quote's refusal of a call, returned as it is.
type quoteError struct{ err error }

func (e *quoteError) Error() string { return e.err.Error() }

func (c *Calls) admit(ctx context.Context, req Request) (*Call, error) {
	key, err := c.Authenticate(ctx, req.Secret)
	if err != nil {
		return nil, err
	}
	if err := c.cfg.Keys.Authorize(key, req.Model); err != nil {
		return nil, &RefusalError{Reason: ModelNotAllowed, Err: err,
			Message: fmt.Sprintf("this API key may not call the model %q; nothing was charged", truncate(req.Model, 100))}
	}
	q, err := req.Quote()
	if err != nil {
		return nil, &quoteError{err}
	}
	if err := c.cfg.Keys.TakeRate(ctx, key, q.PromptTokens+q.OutputBound); err != nil {
		return nil, rateRefusal(key, err, req.Remedy)
	}
	if !common.IsHexAddress(key.Owner) {
		return nil, fmt.Errorf("key %s: owner is not an address", key.ID)
	}
	call := &Call{calls: c, Key: key, Payer: common.HexToAddress(key.Owner), Quote: q}
	if call.ID, err = newRequestID(); err != nil {
		return nil, err
	}
	maxCost := ledger.MaxCost(q.PromptTokens, q.OutputBound, q.Price)
	if !maxCost.IsInt64() || maxCost.Int64() > store.MaxAmount {
		return nil, &RefusalError{Reason: MaxCostTooLarge,
			Message: fmt.Sprintf("this request may cost up to %s, more than one call may hold; %s; nothing was charged", c.cfg.Display(maxCost), req.Remedy)}
	}
	if err := c.hold(ctx, call, req.Remedy); err != nil {
		return nil, err
	}
	return call, nil
}

// hold reserves the maximum cost of call: against this replica's lease of
// the key when leases are on, else as a hold of its own in the store.
func (c *Calls) hold(ctx context.Context, call *Call, remedy string) error {
	lc := ledger.Call{
		RequestID: call.ID, Payer: call.Payer, Key: ledger.KeyOf(call.Key),
		PromptTokens: call.Quote.PromptTokens, OutputBound: call.Quote.OutputBound, Price: call.Quote.Price,
	}
	start := c.now()
	var err error
	if ls := c.cfg.Leases; ls != nil {
		call.ticket, err = ls.Reserve(ctx, lc)
		c.cfg.Metrics.LedgerLatency("lease", c.now().Sub(start))
	} else {
		// The hold must not depend on the client staying: a hold committed
		// as the client leaves would otherwise wait for the sweep.
		hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeTimeout)
		defer cancel()
		_, err = c.cfg.Ledger.Reserve(hctx, lc)
		c.cfg.Metrics.LedgerLatency("hold", c.now().Sub(start))
	}
	if ie, ok := errors.AsType[*store.InsufficientError](err); ok {
		return c.shortfall(ie, remedy)
	}
	if err != nil {
		// The store may have committed the hold before failing to answer:
		// release whatever is there (an unknown hold is fine), fail closed.
		call.release(ctx)
		return storeDown(err)
	}
	return nil
}

// shortfall is the refusal of a hold that ie refused (docs/DESIGN.md D12):
// the numbers, and what to do about them. A top-up never raises a key's cap.
func (c *Calls) shortfall(ie *store.InsufficientError, remedy string) error {
	maxCost, avail := c.cfg.Display(big.NewInt(ie.Requested)), c.cfg.Display(big.NewInt(ie.Available))
	var msg string
	switch ie.Limit {
	case store.LimitKeyTotal, store.LimitKeyPeriod:
		what := "total cap"
		if ie.Limit == store.LimitKeyPeriod {
			what = "cap for this period"
		}
		msg = fmt.Sprintf("this request may cost up to %s and this API key's %s allows %s more; a top-up (%s) does not raise a key's cap: "+
			"%s or ask the key's owner for another key; nothing was charged", maxCost, what, avail, c.cfg.TopUp, remedy)
	default:
		msg = fmt.Sprintf("insufficient credit: this request may cost up to %s and the balance is %s; top up with %s "+
			"or %s; nothing was charged", maxCost, avail, c.cfg.TopUp, remedy)
	}
	return &RefusalError{Reason: InsufficientCredit, Message: msg, Shortfall: ie, Err: ie}
}

// rateRefusal maps a refusal of Keys.TakeRate: past a limit is RateLimited
// until the minute ends; a call that needs more tokens than the key's limit
// never fits; a store that cannot count fails closed.
func rateRefusal(key store.APIKey, err error, remedy string) error {
	rl, ok := errors.AsType[*store.RateLimitedError](err)
	switch {
	case !ok:
		return storeDown(fmt.Errorf("rate limit of key %s: %w", key.ID, err))
	case rl.TooLarge:
		return &RefusalError{Reason: RateLimitTooSmall, Err: err,
			Message: fmt.Sprintf("this request may use %d tokens, more than this API key's %d per minute; %s; nothing was charged", rl.Need, rl.Limit, remedy)}
	}
	return &RefusalError{Reason: RateLimited, RetryAfter: rl.RetryAfter, Err: err,
		Message: fmt.Sprintf("this API key is limited to %d %s per minute; nothing was charged", rl.Limit, rl.What)}
}

// admitOutcome names a refusal of Admit for the metrics.
func admitOutcome(err error) string {
	rf, ok := errors.AsType[*RefusalError](err)
	if !ok {
		return "error" // a 500: a bug, never a refusal of the buyer's
	}
	switch rf.Reason {
	case InvalidKey:
		return "invalid_key"
	case ModelNotAllowed:
		return "not_allowed"
	case RateLimited:
		return "rate_limited"
	case InsufficientCredit:
		return "insufficient"
	case StoreUnavailable:
		return "store_down"
	case RateLimitTooSmall, MaxCostTooLarge:
		return "invalid_request"
	}
	return "error"
}

// Charge ends call charged for u: its cost, capped at its hold (D16). Given
// the charge, receiptOf returns the receipt to keep (nil for none): a leased
// call's is queued with its draw, another's stored with its capture or
// once charged. It reports whether the call was charged (for a leased
// call: its draw queued). When the capture fails the answer goes out
// unbilled, and the hold stays until the sweep releases it to the buyer.
// That is the operator's loss, never the buyer's: nothing is billed later.
// receiptOf may run inside the capture's store write, which can still fail
// after it returned: what it computed counts only when Charge reports true.
func (call *Call) Charge(ctx context.Context, u chat.Usage, receiptOf func(ledger.Charge) *store.StoredReceipt) (charged bool) {
	c := call.calls
	u.PromptTokens, u.CompletionTokens = max(u.PromptTokens, 0), max(u.CompletionTokens, 0)
	outcome := "charged"
	kept := func(ch ledger.Charge) *store.StoredReceipt {
		rec := receiptOf(ch)
		if rec == nil {
			outcome = "charged_no_receipt"
		}
		return rec
	}
	if call.ticket != nil {
		ch := c.cfg.Leases.Charge(call.ticket, u, call.Quote.Price, kept)
		c.countCharge(ch, outcome)
		return true
	}
	// The answer was produced and is being delivered: the capture must not
	// depend on the client staying.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeTimeout)
	defer cancel()
	if c.cfg.Receipts != nil && c.cfg.Ledger.KeepsReceipts() {
		return call.chargeKeeping(ctx, u, kept, &outcome)
	}
	start := c.now()
	ch, err := c.cfg.Ledger.Charge(ctx, call.ID, u, call.Quote.Price)
	c.cfg.Metrics.LedgerLatency("capture", c.now().Sub(start))
	if err != nil {
		call.unbilled(err)
		return false
	}
	if rec := kept(ch); rec != nil && c.cfg.Receipts != nil {
		start := c.now()
		err := c.cfg.Receipts.PutReceipt(ctx, *rec)
		c.cfg.Metrics.LedgerLatency("receipt", c.now().Sub(start))
		if err != nil {
			// The buyer still gets the signed receipt with the answer; only
			// GET /v1/receipts/{id} (and the log) will not find it.
			outcome = "charged_no_receipt"
			c.cfg.Log.Error("store receipt", "request_id", call.ID, "err", err)
		}
	}
	c.countCharge(ch, outcome)
	return true
}

// chargeKeeping is Charge's capture and receipt in one store write (the
// ledger's ChargeKeeping): one durable write after the answer, not two.
func (call *Call) chargeKeeping(ctx context.Context, u chat.Usage, receiptOf func(ledger.Charge) *store.StoredReceipt, outcome *string) bool {
	c := call.calls
	start := c.now()
	ch, kept, err := c.cfg.Ledger.ChargeKeeping(ctx, call.ID, u, call.Quote.Price, receiptOf)
	c.cfg.Metrics.LedgerLatency("capture", c.now().Sub(start))
	if err != nil {
		call.unbilled(err)
		return false
	}
	if !kept {
		*outcome = "charged_no_receipt"
	}
	c.countCharge(ch, *outcome)
	return true
}

// unbilled counts and logs a capture that failed: the call was answered
// and is free, the operator's loss.
func (call *Call) unbilled(err error) {
	call.calls.cfg.Metrics.Credit("unbilled")
	call.calls.cfg.Log.Error("credit capture failed; the hold stays until the sweep releases it",
		"request_id", call.ID, "key_id", call.Key.ID, "err", err)
}

func (c *Calls) countCharge(ch ledger.Charge, outcome string) {
	if ch.Loss != nil && ch.Loss.Sign() > 0 {
		c.cfg.Metrics.Credit("loss")
	}
	c.cfg.Metrics.Credit(outcome)
}

// Release ends call with nothing charged: nothing was delivered.
func (call *Call) Release(ctx context.Context) {
	call.calls.cfg.Metrics.Credit("released")
	call.release(ctx)
}

// release returns call's hold, if there is one.
func (call *Call) release(ctx context.Context) {
	c := call.calls
	if c.cfg.Leases != nil {
		if call.ticket != nil {
			c.cfg.Leases.Release(call.ticket)
		}
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeTimeout)
	defer cancel()
	start := c.now()
	_, err := c.cfg.Ledger.Release(ctx, call.ID)
	c.cfg.Metrics.LedgerLatency("release", c.now().Sub(start))
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		// The buyer's credit stays held, not lost, until the sweep
		// releases the hold.
		c.cfg.Log.Error("credit release failed; the hold stays until the sweep releases it", "request_id", call.ID, "err", err)
	}
}

// newRequestID returns a call's id: the time in milliseconds in its first
// 6 bytes, then 26 random ones (208 bits: unique and unguessable). The
// time first keeps the ids a replica issues in one flush close together in
// the stores' indexes keyed by request id (draws, receipts, log leaves), so
// a batch writes a few pages at their right edge instead of one page per
// row scattered over the whole index.
func newRequestID() (string, error) {
	return requestIDAt(time.Now())
}

func requestIDAt(t time.Time) (string, error) {
	var b [32]byte
	ms := uint64(t.UnixMilli())
	for i := 5; i >= 0; i-- {
		b[i] = byte(ms)
		ms >>= 8
	}
	if _, err := rand.Read(b[6:]); err != nil {
		return "", fmt.Errorf("request id: %w", err)
	}
	return "0x" + hex.EncodeToString(b[:]), nil
}

// truncate cuts s to n bytes for a message.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
