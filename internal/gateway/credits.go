package gateway

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/ethereum/go-ethereum/common"

	"github.com/llm4agents/llm4agents/internal/chat"
	"github.com/llm4agents/llm4agents/internal/credits"
	"github.com/llm4agents/llm4agents/internal/ledger"
	"github.com/llm4agents/llm4agents/internal/pricing"
	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/internal/upstream"
	"github.com/llm4agents/llm4agents/x402/receipt"
)

// Credits is what prepaid credits need (D12, D16-D18).
type Credits struct {
	Ledger *ledger.Ledger
	// Leases, when set, serves credit calls from this replica's leases
	// (credits.durability: leased, docs/DESIGN.md D28): admission and charge
	// in memory, draws and receipts group-committed off the call's path.
	// Nil: every hold and capture is a store write before the answer.
	Leases *ledger.Leases
	Keys   *credits.Keys
	// Auth checks sign-in sessions (the balance and receipts routes accept a
	// session token as well as a key).
	Auth *credits.Auth
	// Account serves the account routes: /v1/auth/*, /v1/keys.
	Account http.Handler
	// Signer signs receipts; its address and domain are published at
	// /.well-known/llm4agents.json.
	Signer   *credits.Signer
	Receipts store.Receipts
	// TopUpMin and TopUpMax bound a top-up, in atomic units.
	TopUpMin, TopUpMax *big.Int
	// Chain reads the receipt of a top-up's settlement: it is credited once
	// final (D17), under the index of its Transfer log
	// (ledger.SettlementRef). Confirmations is the N of D17; 0 means 1.
	Chain         ChainReader
	Confirmations uint64
}

// A credit-paid call, in the order creditChat runs it:
//
//	Authorization: Bearer sk-l4a-...  -> the key (401 unknown, revoked, expired)
//	the key's scope and rate          -> 403, 429
//	the quote of the x402 path        -> prompt tokens and the output bound (D13)
//	ledger.Reserve of the maximum     -> 402 with the numbers on a shortfall (D12), 503 if the store fails
//	the upstream                      -> an error releases the hold: nothing charged
//	ledger.Charge of the usage        -> a cut stream: what was delivered, counted (D16)
//	a signed receipt (D18)            -> stored, and delivered in a header or the final usage chunk
//
// Nothing before the hold calls the upstream, and every refusal before it
// holds nothing.

// creditStoreTimeout bounds each store call of the credit path.
const creditStoreTimeout = 5 * time.Second

// topUpRoute is where a buyer short of credit is sent.
const topUpRoute = "POST /v1/credits/topup"

// HeaderRequestID names a credit-paid call: the receipt's requestId, and the
// id at GET /v1/receipts/{id}.
const HeaderRequestID = "X-Llm4agents-Request-Id"

// creditCall is one credit-paid call from its hold to its receipt.
type creditCall struct {
	q     *quote
	key   store.APIKey
	payer common.Address
	// id is the request id: "0x" and 64 hex digits of crypto/rand, the
	// hold's id and the receipt's bytes32 requestId.
	id string
	// encoding counts delivered output tokens as the quote counted the
	// prompt's.
	encoding string
	// ticket is the call's admission against a lease; nil when the call
	// holds its own maximum in the store.
	ticket *ledger.Ticket
	// lower names what the buyer can do about a cost or a size too large:
	// "lower max_tokens" for a chat call.
	lower string
}

// creditInfo annotates a credit-paid answer: the x_llm4agents field of the
// body, or of a stream's final usage chunk (which also carries the receipt).
type creditInfo struct {
	Charged        string      `json:"charged,omitempty"` // atomic units
	ChargedDisplay string      `json:"charged_display,omitempty"`
	Balance        string      `json:"balance,omitempty"` // atomic units, after this call
	BalanceDisplay string      `json:"balance_display,omitempty"`
	RequestID      string      `json:"request_id"`
	Usage          *chat.Usage `json:"usage,omitempty"` // what was charged for
	// Receipt is the signed envelope (D18); a non-streaming answer also
	// carries it in receipt.Header.
	Receipt json.RawMessage `json:"receipt,omitempty"`
}

// creditOutcome is a captured call: what to tell the buyer.
type creditOutcome struct {
	info   creditInfo
	header string // receipt.Header's value, "" without a receipt
}

// creditChat serves a chat completion paid from credits through an API key.
func (s *Server) creditChat(w http.ResponseWriter, r *http.Request, req *chat.Request, _ []byte) error {
	if c := s.cfg.Credits; c == nil || c.Ledger == nil || c.Keys == nil {
		return &apiError{Status: http.StatusUnauthorized, Type: "invalid_request_error", Code: "invalid_api_key",
			Message: "this gateway takes no API keys: pay per call with x402 (send no sk-l4a- key); nothing was charged"}
	}
	call, err := s.admitCredit(r, req)
	if err != nil {
		s.metrics.credit(admitOutcome(err))
		return err
	}
	w.Header().Set(HeaderRequestID, call.id)
	up, err := req.Upstream(call.q.model.UpstreamModel, call.q.model.MaxOutputTokens)
	if err != nil {
		s.releaseCredit(r.Context(), call)
		return fmt.Errorf("rewrite request: %w", err)
	}
	if req.Stream {
		return s.creditStream(w, r, call, up)
	}
	return s.creditComplete(w, r, call, up)
}

// admitCredit runs everything before the upstream for a chat call paid
// from credits. Every error it returns left nothing held.
func (s *Server) admitCredit(r *http.Request, req *chat.Request) (*creditCall, error) {
	return s.admitKeyCall(r, req.Model, func() (*quote, error) { return s.price(r, req) }, "lower max_tokens")
}

// admitKeyCall runs everything before the upstream for a call of model paid
// from credits through an API key, whatever its route: the key, its scope,
// the quote (from price), its rate limits, and the hold of its maximum
// cost; lower names what the buyer can do about a cost too large to hold.
// Every error it returns left nothing held.
func (s *Server) admitKeyCall(r *http.Request, model string, price func() (*quote, error), lower string) (*creditCall, error) {
	key, err := s.authenticateKey(r.Context(), bearer(r))
	if err != nil {
		return nil, err
	}
	if err := s.cfg.Credits.Keys.Authorize(key, model); err != nil {
		return nil, keyRefusal(key, model, err)
	}
	q, err := price()
	if err != nil {
		return nil, err
	}
	if err := s.cfg.Credits.Keys.TakeRate(r.Context(), key, q.promptTokens+q.outputBound); err != nil {
		return nil, rateRefusal(key, err, lower)
	}
	if !common.IsHexAddress(key.Owner) {
		return nil, fmt.Errorf("key %s: owner is not an address", key.ID)
	}
	call := &creditCall{q: q, key: key, payer: common.HexToAddress(key.Owner), encoding: q.model.Encoding, lower: lower}
	if call.encoding == "" {
		call.encoding = pricing.EncodingFor(model)
	}
	if call.id, err = newRequestID(); err != nil {
		return nil, err
	}
	maxCost := ledger.MaxCost(q.promptTokens, q.outputBound, q.model.Price)
	if !maxCost.IsInt64() || maxCost.Int64() > store.MaxAmount {
		return nil, &apiError{Status: http.StatusBadRequest, Type: "invalid_request_error", Code: "max_cost_too_large",
			Message: fmt.Sprintf("this request may cost up to %s, more than one call may hold; %s; nothing was charged", s.display(maxCost), lower)}
	}
	if err := s.holdCredit(r.Context(), call, key); err != nil {
		return nil, err
	}
	return call, nil
}

// holdCredit reserves the maximum cost of call: against this replica's
// lease of the key when leases are on, else as a hold of its own in the
// store. A shortfall is the 402 with the numbers.
func (s *Server) holdCredit(ctx context.Context, call *creditCall, key store.APIKey) error {
	c := ledger.Call{
		RequestID: call.id, Payer: call.payer, Key: keyLimits(key),
		PromptTokens: call.q.promptTokens, OutputBound: call.q.outputBound, Price: call.q.model.Price,
	}
	start := s.now()
	var err error
	if ls := s.cfg.Credits.Leases; ls != nil {
		call.ticket, err = ls.Reserve(ctx, c)
		s.metrics.ledgerLatency("lease", s.now().Sub(start))
	} else {
		// The hold must not depend on the client staying: a hold committed
		// as the client leaves would otherwise wait for the sweep.
		hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), creditStoreTimeout)
		defer cancel()
		_, err = s.cfg.Credits.Ledger.Reserve(hctx, c)
		s.metrics.ledgerLatency("hold", s.now().Sub(start))
	}
	if ie, ok := errors.AsType[*store.InsufficientError](err); ok {
		return s.shortfall(ie, call.lower)
	}
	if err != nil {
		// The store may have committed the hold before failing to answer:
		// release whatever is there (an unknown hold is fine), fail closed.
		s.releaseHold(ctx, call)
		return creditStoreUnavailable(err)
	}
	return nil
}

// admitOutcome names a refusal of admitCredit for the metrics.
func admitOutcome(err error) string {
	ae, ok := errors.AsType[*apiError](err)
	if !ok {
		return "error" // a 500: a bug, never a refusal of the buyer's
	}
	switch ae.Code {
	case "invalid_api_key":
		return "invalid_key"
	case "model_not_allowed":
		return "not_allowed"
	case "rate_limited":
		return "rate_limited"
	case "insufficient_credit":
		return "insufficient"
	case "store_unavailable":
		return "store_down"
	}
	return "invalid_request"
}

// bearer returns the request's bearer token, "" without one.
func bearer(r *http.Request) string {
	v, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return ""
	}
	return strings.TrimSpace(v)
}

// authenticateKey returns the API key of secret. Refusals never carry the
// secret, in the answer or in the log.
func (s *Server) authenticateKey(ctx context.Context, secret string) (store.APIKey, error) {
	ctx, cancel := context.WithTimeout(ctx, creditStoreTimeout)
	defer cancel()
	key, err := s.cfg.Credits.Keys.Authenticate(ctx, secret)
	refuse := func(msg string) (store.APIKey, error) {
		return store.APIKey{}, &apiError{Status: http.StatusUnauthorized, Type: "invalid_request_error", Code: "invalid_api_key",
			Message: msg + "; nothing was charged", Err: err}
	}
	switch {
	case errors.Is(err, credits.ErrUnknownKey):
		return refuse("the API key is not known here")
	case errors.Is(err, credits.ErrRevokedKey):
		return refuse("the API key was revoked by its owner")
	case errors.Is(err, credits.ErrExpiredKey):
		return refuse("the API key has expired")
	case err != nil:
		return store.APIKey{}, creditStoreUnavailable(err)
	}
	return key, nil
}

// keyRefusal maps a refusal of credits.Keys.Authorize.
func keyRefusal(key store.APIKey, model string, err error) error {
	if errors.Is(err, credits.ErrModelNotAllowed) {
		return &apiError{Status: http.StatusForbidden, Type: "invalid_request_error", Code: "model_not_allowed",
			Message: fmt.Sprintf("this API key may not call the model %q; nothing was charged", truncate(model, 100)), Err: err}
	}
	return fmt.Errorf("authorize key %s: %w", key.ID, err)
}

// rateRefusal maps a refusal of credits.Keys.TakeRate: past a limit is 429
// with Retry-After (when the minute ends); a call that needs more tokens
// than the key's limit never fits, a 400; and a store that cannot count
// fails closed. lower is what the buyer can do about a call too large.
func rateRefusal(key store.APIKey, err error, lower string) error {
	rl, ok := errors.AsType[*store.RateLimitedError](err)
	switch {
	case !ok:
		return creditStoreUnavailable(fmt.Errorf("rate limit of key %s: %w", key.ID, err))
	case rl.TooLarge:
		return &apiError{Status: http.StatusBadRequest, Type: "invalid_request_error", Code: "rate_limit_too_small",
			Message: fmt.Sprintf("this request may use %d tokens, more than this API key's %d per minute; %s; nothing was charged", rl.Need, rl.Limit, lower), Err: err}
	}
	h := http.Header{}
	h.Set("Retry-After", strconv.FormatInt(max(1, int64((rl.RetryAfter+time.Second-1)/time.Second)), 10))
	return &apiError{Status: http.StatusTooManyRequests, Type: "rate_limit_error", Code: "rate_limited",
		Message: fmt.Sprintf("this API key is limited to %d %s per minute; nothing was charged", rl.Limit, rl.What), Header: h, Err: err}
}

// keyLimits are key's caps as the ledger takes them: nil for no cap.
func keyLimits(key store.APIKey) *ledger.Key {
	k := &ledger.Key{ID: key.ID, Period: key.Period}
	if key.TotalCap != store.NoCap {
		k.TotalCap = big.NewInt(key.TotalCap)
	}
	if key.PeriodCap != store.NoCap {
		k.PeriodCap = big.NewInt(key.PeriodCap)
	}
	return k
}

func newRequestID() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("request id: %w", err)
	}
	return "0x" + hex.EncodeToString(b[:]), nil
}

func creditStoreUnavailable(err error) error {
	return &apiError{Status: http.StatusServiceUnavailable, Type: "server_error", Code: "store_unavailable",
		Message: "the credit store is unavailable; nothing was charged, retry later", Err: err}
}

// creditShortfall is the error object of a refused hold (D12): the numbers and
// the way to more credit. There is no PAYMENT-REQUIRED: a key holder is never
// switched to per-call payment silently.
type creditShortfall struct {
	chat.ErrorDetail
	// Limit is what refused the hold: balance, key_total or key_period.
	Limit store.Limit `json:"limit"`
	// MaxCost is the hold this request needs and Available the balance or
	// what remains of the key's cap, in atomic units of Asset.
	MaxCost          string `json:"max_cost"`
	MaxCostDisplay   string `json:"max_cost_display"`
	Available        string `json:"available"`
	AvailableDisplay string `json:"available_display"`
	Asset            string `json:"asset"`
	Network          string `json:"network"`
	Decimals         uint8  `json:"decimals"`
	TopUp            string `json:"topup"`     // "POST /v1/credits/topup"
	TopUpURL         string `json:"topup_url"` // its absolute URL
}

// shortfall is the 402 for a hold that ie refused; lower is what the
// buyer can do about it besides a top-up.
func (s *Server) shortfall(ie *store.InsufficientError, lower string) error {
	maxCost, avail := big.NewInt(ie.Requested), big.NewInt(ie.Available)
	var msg string
	switch ie.Limit {
	case store.LimitKeyTotal, store.LimitKeyPeriod:
		what := "total cap"
		if ie.Limit == store.LimitKeyPeriod {
			what = "cap for this period"
		}
		msg = fmt.Sprintf("this request may cost up to %s and this API key's %s allows %s more; a top-up (%s) does not raise a key's cap: "+
			"%s or ask the key's owner for another key; nothing was charged", s.display(maxCost), what, s.display(avail), topUpRoute, lower)
	default:
		msg = fmt.Sprintf("insufficient credit: this request may cost up to %s and the balance is %s; top up with %s "+
			"or %s; nothing was charged", s.display(maxCost), s.display(avail), topUpRoute, lower)
	}
	h := http.Header{}
	h.Set("Cache-Control", "no-store")
	h.Set("X-Should-Retry", "false")
	return &apiError{
		Status: http.StatusPaymentRequired, Type: "insufficient_credit", Code: "insufficient_credit", Message: msg, Header: h,
		Detail: creditShortfall{
			ErrorDetail: chat.ErrorDetail{Message: msg, Type: "insufficient_credit", Code: "insufficient_credit"},
			Limit:       ie.Limit, MaxCost: maxCost.String(), MaxCostDisplay: s.display(maxCost),
			Available: avail.String(), AvailableDisplay: s.display(avail),
			Asset: s.cfg.Asset, Network: s.cfg.Network, Decimals: s.cfg.Decimals,
			TopUp: topUpRoute, TopUpURL: s.cfg.PublicURL + "/v1/credits/topup",
		},
	}
}

// creditComplete runs a non-streaming credit-paid call: the upstream, the
// capture of its usage, the answer with its receipt.
func (s *Server) creditComplete(w http.ResponseWriter, r *http.Request, call *creditCall, body []byte) error {
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.UpstreamTimeout)
	defer cancel()
	start := s.now()
	comp, err := s.callUpstream(ctx, call.q, body)
	s.metrics.upstreamLatency(call.q.model.ID, s.now().Sub(start))
	if err != nil {
		s.releaseCredit(r.Context(), call)
		return s.upstreamError(err, r.Context())
	}
	if r.Context().Err() != nil {
		// Gone before a byte of the answer: nothing delivered, nothing
		// charged (D16).
		s.releaseCredit(r.Context(), call)
		return &apiError{Status: upstream.StatusClientClosed, Type: "invalid_request_error", Code: "client_closed", Message: "the client went away; nothing was charged"}
	}
	u := comp.Usage
	if !comp.UsageReported {
		// Unknown usage is not zero usage: count what the answer holds.
		u = chat.Usage{PromptTokens: call.q.promptTokens, CompletionTokens: s.countOutput(call, completionText(comp.Body))}
		u.TotalTokens = u.PromptTokens + u.CompletionTokens
		s.log.Warn("upstream reported no usage; charging the counted answer", "request_id", call.id, "model", call.q.model.ID)
	}
	out := s.captureCredit(r.Context(), call, u)
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Should-Retry", "false")
	if out.header != "" {
		h.Set(receipt.Header, out.header)
	}
	if out.info.Charged != "" {
		h.Set("X-Llm4agents-Charged", out.info.Charged)
		h.Set("X-Llm4agents-Charged-Display", out.info.ChargedDisplay)
	}
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(annotate(comp.Body, out.info)) // #nosec G705 -- a JSON body sent as application/json, not HTML
	return nil
}

// captureCredit charges call for u (capped at its hold by the ledger, D16),
// signs the receipt (D18) and stores it. It always returns what to annotate
// the answer with: without a capture, only the request id.
func (s *Server) captureCredit(ctx context.Context, call *creditCall, u chat.Usage) creditOutcome {
	out := creditOutcome{info: creditInfo{RequestID: call.id}}
	// The answer was produced and is being delivered: the capture must not
	// depend on the client staying.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), creditStoreTimeout)
	defer cancel()
	u.PromptTokens, u.CompletionTokens = max(u.PromptTokens, 0), max(u.CompletionTokens, 0)
	if call.ticket != nil {
		return s.chargeLease(call, u)
	}
	start := s.now()
	ch, err := s.cfg.Credits.Ledger.Charge(ctx, call.id, u, call.q.model.Price)
	s.metrics.ledgerLatency("capture", s.now().Sub(start))
	if err != nil {
		s.metrics.credit("unbilled")
		// The answer goes out unbilled: the hold stays open until the sweep
		// (ledger.SweepExpired) releases it to the buyer. That is the
		// operator's loss, never the buyer's: nothing is billed later.
		s.log.Error("credit capture failed; the hold stays until the sweep releases it",
			"request_id", call.id, "key_id", call.key.ID, "err", err)
		return out
	}
	s.chargedInfo(&out, call, u, ch)
	env, r, err := s.creditReceipt(call, u, ch)
	if err != nil {
		s.metrics.credit("charged_no_receipt")
		s.log.Error("credit call charged without a receipt", "request_id", call.id, "err", err)
		return out
	}
	out.info.Receipt, out.header = env, receiptHeader(env)
	outcome := "charged"
	rec := store.StoredReceipt{RequestID: call.id, Owner: call.key.Owner, KeyID: call.key.ID, Seq: ch.Seq, Envelope: env}
	if _, err := s.keepReceipt(ctx, r, rec); err != nil {
		// The buyer still gets the signed receipt with the answer; only
		// GET /v1/receipts/{id} (and the log) will not find it.
		outcome = "charged_no_receipt"
		s.log.Error("store receipt", "request_id", call.id, "err", err)
	}
	s.metrics.credit(outcome)
	return out
}

// chargeLease charges a leased call in memory and queues its draw with its
// receipt: the answer carries the signed receipt at once, and the draw is
// written within the flush interval (docs/DESIGN.md D28).
func (s *Server) chargeLease(call *creditCall, u chat.Usage) creditOutcome {
	out := creditOutcome{info: creditInfo{RequestID: call.id}}
	outcome := "charged"
	ch := s.cfg.Credits.Leases.Charge(call.ticket, u, call.q.model.Price, func(ch ledger.Charge) *store.StoredReceipt {
		s.chargedInfo(&out, call, u, ch)
		env, r, err := s.creditReceipt(call, u, ch)
		if err != nil {
			outcome = "charged_no_receipt"
			s.log.Error("credit call charged without a receipt", "request_id", call.id, "err", err)
			return nil
		}
		out.info.Receipt, out.header = env, receiptHeader(env)
		rec, err := s.receiptRecord(r, store.StoredReceipt{RequestID: call.id, Owner: call.key.Owner, KeyID: call.key.ID, Envelope: env})
		if err != nil {
			outcome = "charged_no_receipt"
			s.log.Error("receipt leaf", "request_id", call.id, "err", err)
			return nil
		}
		return &rec
	})
	if ch.Loss.Sign() > 0 {
		s.metrics.credit("loss")
	}
	s.metrics.credit(outcome)
	return out
}

// chargedInfo fills out's annotation with what ch charged.
func (s *Server) chargedInfo(out *creditOutcome, call *creditCall, u chat.Usage, ch ledger.Charge) {
	out.info.Charged, out.info.ChargedDisplay = ch.Charged.String(), s.display(ch.Charged)
	out.info.Balance, out.info.BalanceDisplay = ch.BalanceAfter.String(), s.display(ch.BalanceAfter)
	out.info.Usage = &u
	if ch.Loss.Sign() > 0 && call.ticket == nil {
		s.metrics.credit("loss")
	}
	s.log.Debug("credit call charged", "request_id", call.id, "key_id", call.key.ID, "model", call.q.model.ID,
		"charged", ch.Charged.String(), "loss", ch.Loss.String(), "seq", ch.Seq, "ref", ch.Ref)
}

// creditReceipt signs the receipt of a charged call and encodes it.
func (s *Server) creditReceipt(call *creditCall, u chat.Usage, ch ledger.Charge) ([]byte, *receipt.Receipt, error) {
	r, sig, err := s.signReceipt(call, u, ch)
	if err != nil {
		return nil, nil, err
	}
	env, err := receipt.EncodeEnvelope(r, sig)
	if err != nil {
		return nil, nil, err
	}
	return env, r, nil
}

// signReceipt signs the receipt of a captured call (D18).
func (s *Server) signReceipt(call *creditCall, u chat.Usage, ch ledger.Charge) (*receipt.Receipt, []byte, error) {
	if s.cfg.Credits.Signer == nil {
		return nil, nil, errors.New("no receipt signer configured")
	}
	keyID, err := credits.KeyIDBytes32(call.key.ID)
	if err != nil {
		return nil, nil, fmt.Errorf("key %s: %w", call.key.ID, err)
	}
	issued := ch.At
	if issued.IsZero() {
		issued = s.now()
	}
	return s.signed(receipt.Receipt{
		RequestID: common.HexToHash(call.id), Account: call.payer, KeyID: keyID, Model: call.q.model.ID,
		InputTokens: big.NewInt(u.PromptTokens), OutputTokens: big.NewInt(u.CompletionTokens),
		Amount: ch.Charged, BalanceAfter: ch.BalanceAfter, LedgerSeq: ledgerRef(ch),
		IssuedAt: uint64(max(issued.Unix(), 0)), // #nosec G115 -- clamped at zero
		Rail:     receipt.RailCredits,
	}, issued)
}

// ledgerRef is a charge's reference in the ledger, the receipt's
// ledgerSeq: the capture's entry, or a leased call's lease and position.
func ledgerRef(ch ledger.Charge) *big.Int {
	if ch.Ref != nil {
		return ch.Ref
	}
	return big.NewInt(ch.Seq)
}

// releaseCredit ends call with nothing charged: nothing was delivered.
func (s *Server) releaseCredit(ctx context.Context, call *creditCall) {
	s.metrics.credit("released")
	s.releaseHold(ctx, call)
}

// releaseHold releases call's hold, if there is one.
func (s *Server) releaseHold(ctx context.Context, call *creditCall) {
	if s.cfg.Credits.Leases != nil {
		if call.ticket != nil {
			s.cfg.Credits.Leases.Release(call.ticket)
		}
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), creditStoreTimeout)
	defer cancel()
	start := s.now()
	_, err := s.cfg.Credits.Ledger.Release(ctx, call.id)
	s.metrics.ledgerLatency("release", s.now().Sub(start))
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		// The buyer's credit stays held, not lost, until the sweep
		// releases the hold.
		s.log.Error("credit release failed; the hold stays until the sweep releases it", "request_id", call.id, "err", err)
	}
}

// countOutput counts output tokens of text with the call's encoding.
func (s *Server) countOutput(call *creditCall, text string) int64 {
	if text == "" {
		return 0
	}
	n, err := s.counter.Tokens(call.encoding, text)
	if err != nil {
		// The encoding counted the prompt a moment ago; if it fails now,
		// an estimate beats charging nothing or everything.
		s.log.Warn("count output tokens", "request_id", call.id, "err", err)
		return int64(upstream.ApproxTokenizer{}.Count(text))
	}
	return n
}

// completionText is the output of a chat.completion body the buyer pays for:
// every choice's content, refusal and tool calls' names and arguments.
func completionText(body []byte) string {
	var c struct {
		Choices []struct {
			Message struct {
				Content      json.RawMessage `json:"content"`
				RefusalError *string         `json:"refusal"`
				ToolCalls    []toolCall      `json:"tool_calls"`
			} `json:"message"`
		} `json:"choices"`
	}
	if json.Unmarshal(body, &c) != nil {
		return ""
	}
	var b strings.Builder
	for _, ch := range c.Choices {
		m := ch.Message
		b.WriteString(chat.Message{Content: m.Content}.Text())
		if m.RefusalError != nil {
			b.WriteString(*m.RefusalError)
		}
		for _, tc := range m.ToolCalls {
			b.WriteString(tc.Function.Name)
			b.WriteString(tc.Function.Arguments)
		}
	}
	return b.String()
}

// toolCall is the part of a tool call (or a streamed delta of one) that
// counts as output.
type toolCall struct {
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}
