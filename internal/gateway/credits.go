package gateway

import (
	"context"
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

// Credits is what prepaid credits need (D12, D16-D18), and receipts.
//
// A Credits with a nil Ledger sells no credits: it signs and keeps the
// receipts of x402 payments (Signer, Receipts) and serves the sign-in
// (Auth, Account) their payers read them with; the top-up, balance and
// key routes are not served, and a call with an API key is refused.
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

// A credit-paid call, in the order creditChat runs it (the steps before the
// upstream are credits.Calls.Admit):
//
//	Authorization: Bearer sk-l4a-...  -> the key (401 unknown, revoked, expired)
//	the key's scope and rate          -> 403, 429
//	the quote of the x402 path        -> prompt tokens and the output bound (D13)
//	the hold of the maximum cost      -> 402 with the numbers on a shortfall (D12), 503 if the store fails
//	the upstream                      -> an error releases the hold: nothing charged
//	the charge of the usage           -> a cut stream: what was delivered, counted (D16)
//	a signed receipt (D18)            -> stored, and delivered in a header or the final usage chunk
//
// Nothing before the hold calls the upstream, and every refusal before it
// holds nothing.

// creditStoreTimeout bounds each store call of the credit routes.
const creditStoreTimeout = 5 * time.Second

// topUpRoute is where a buyer short of credit is sent.
const topUpRoute = "POST /v1/credits/topup"

// HeaderRequestID names a credit-paid call: the receipt's requestId, and the
// id at GET /v1/receipts/{id}.
const HeaderRequestID = "X-Llm4agents-Request-Id"

// creditCall is one credit-paid call from its admission to its receipt: the
// call credits.Calls admitted, and the gateway's quote of it.
type creditCall struct {
	*credits.Call
	q *quote
	// encoding counts delivered output tokens as the quote counted the
	// prompt's.
	encoding string
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
		return err
	}
	w.Header().Set(HeaderRequestID, call.ID)
	up, err := req.Upstream(call.q.model.UpstreamModel, call.q.model.MaxOutputTokens)
	if err != nil {
		call.Release(r.Context())
		return fmt.Errorf("rewrite request: %w", err)
	}
	if req.Stream {
		return s.creditStream(w, r, call, up)
	}
	return s.creditComplete(w, r, chatWire, call, s.upstreamOf(call.q), up)
}

// admitCredit runs everything before the upstream for a chat call paid
// from credits. Every error it returns left nothing held.
func (s *Server) admitCredit(r *http.Request, req *chat.Request) (*creditCall, error) {
	return s.admitKeyCall(r, req.Model, func() (*quote, error) { return s.price(r, req) }, "lower max_tokens")
}

// admitKeyCall admits a call of model paid from credits through an API key,
// whatever its route (credits.Calls.Admit), priced by price; remedy names
// what the buyer can do about a call too large to hold. Every error it
// returns left nothing held.
func (s *Server) admitKeyCall(r *http.Request, model string, price func() (*quote, error), remedy string) (*creditCall, error) {
	var q *quote
	c, err := s.calls.Admit(r.Context(), credits.Request{Secret: bearer(r), Model: model, Remedy: remedy,
		Quote: func() (credits.Quote, error) {
			var err error
			if q, err = price(); err != nil {
				s.metrics.credit(quoteOutcome(err))
				return credits.Quote{}, err
			}
			return credits.Quote{PromptTokens: q.promptTokens, OutputBound: q.outputBound, Price: q.model.Price}, nil
		}})
	if err != nil {
		return nil, err
	}
	call := &creditCall{Call: c, q: q, encoding: q.model.Encoding}
	if call.encoding == "" {
		call.encoding = pricing.EncodingFor(model)
	}
	return call, nil
}

// quoteOutcome names a quote's refusal of a credit-paid call for the metrics.
func quoteOutcome(err error) string {
	if ae, ok := errors.AsType[*apiError](err); ok && ae.Status < http.StatusInternalServerError {
		return "invalid_request"
	}
	return "error" // a 500: a bug, never a refusal of the buyer's
}

// bearer returns the request's bearer token, "" without one.
func bearer(r *http.Request) string {
	v, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return ""
	}
	return strings.TrimSpace(v)
}

// creditRefusalAnswer is how each refusal of a credit-paid call is
// answered: status and OpenAI error type. Its code is the reason.
var creditRefusalAnswer = map[credits.CallReason]struct {
	status int
	typ    string
}{
	credits.InvalidKey:         {http.StatusUnauthorized, "invalid_request_error"},
	credits.ModelNotAllowed:    {http.StatusForbidden, "invalid_request_error"},
	credits.RateLimited:        {http.StatusTooManyRequests, "rate_limit_error"},
	credits.RateLimitTooSmall:  {http.StatusBadRequest, "invalid_request_error"},
	credits.MaxCostTooLarge:    {http.StatusBadRequest, "invalid_request_error"},
	credits.InsufficientCredit: {http.StatusPaymentRequired, "insufficient_credit"},
	credits.StoreUnavailable:   {http.StatusServiceUnavailable, "server_error"},
}

// creditRefused is the HTTP answer of a refused credit-paid call. A rate
// limit says when to retry (when the key's minute ends); a shortfall carries
// the numbers and the way to more credit (D12), and no PAYMENT-REQUIRED: a
// key holder is never switched to per-call payment silently.
func (s *Server) creditRefused(rf *credits.RefusalError) *apiError {
	a, ok := creditRefusalAnswer[rf.Reason]
	if !ok {
		a.status, a.typ = http.StatusInternalServerError, "server_error"
	}
	ae := &apiError{Status: a.status, Type: a.typ, Code: string(rf.Reason), Message: rf.Message, Err: rf.Err}
	switch ie := rf.Shortfall; {
	case rf.Reason == credits.RateLimited:
		ae.Header = http.Header{}
		ae.Header.Set("Retry-After", strconv.FormatInt(max(1, int64((rf.RetryAfter+time.Second-1)/time.Second)), 10))
	case ie != nil:
		maxCost, avail := big.NewInt(ie.Requested), big.NewInt(ie.Available)
		ae.Header = http.Header{}
		ae.Header.Set("Cache-Control", "no-store")
		ae.Header.Set("X-Should-Retry", "false")
		ae.Detail = creditShortfall{
			ErrorDetail: chat.ErrorDetail{Message: rf.Message, Type: a.typ, Code: string(rf.Reason)},
			Limit:       ie.Limit, MaxCost: maxCost.String(), MaxCostDisplay: s.display(maxCost),
			Available: avail.String(), AvailableDisplay: s.display(avail),
			Asset: s.cfg.Asset, Network: s.cfg.Network, Decimals: s.cfg.Decimals,
			TopUp: topUpRoute, TopUpURL: s.cfg.PublicURL + "/v1/credits/topup",
		}
	}
	return ae
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

// creditComplete runs a non-streaming credit-paid call: the upstream, the
// capture of its usage, the answer with its receipt. body goes upstream
// through respond; wi says how to count an answer whose usage is unknown.
func (s *Server) creditComplete(w http.ResponseWriter, r *http.Request, wi wire, call *creditCall, respond upstreamCall, body []byte) error {
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.UpstreamTimeout)
	defer cancel()
	start := s.now()
	comp, err := respond(ctx, body)
	s.metrics.upstreamLatency(call.q.model.ID, s.now().Sub(start))
	if err != nil {
		call.Release(r.Context())
		return s.upstreamError(err, r.Context())
	}
	if r.Context().Err() != nil {
		// Gone before a byte of the answer: nothing delivered, nothing
		// charged (D16).
		call.Release(r.Context())
		return &apiError{Status: upstream.StatusClientClosed, Type: "invalid_request_error", Code: "client_closed", Message: "the client went away; nothing was charged"}
	}
	u := comp.Usage
	if !comp.UsageReported {
		// Unknown usage is not zero usage: count what the answer holds.
		u = chat.Usage{PromptTokens: call.q.promptTokens, CompletionTokens: s.countOutput(call, wi.text(comp.Body))}
		u.TotalTokens = u.PromptTokens + u.CompletionTokens
		s.log.Warn("upstream reported no usage; charging the counted answer", "request_id", call.ID, "model", call.q.model.ID)
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

// captureCredit charges call for u (capped at its hold, D16) with its signed
// receipt (D18), and returns what to annotate the answer with: without a
// charge, only the request id.
func (s *Server) captureCredit(ctx context.Context, call *creditCall, u chat.Usage) creditOutcome {
	u.PromptTokens, u.CompletionTokens = max(u.PromptTokens, 0), max(u.CompletionTokens, 0)
	// The charge's outcome is built in a copy: the closure may run inside a
	// store write that still fails, and then the answer says no charge.
	none := creditOutcome{info: creditInfo{RequestID: call.ID}}
	out, logCharge := none, func() {}
	charged := call.Charge(ctx, u, func(ch ledger.Charge) *store.StoredReceipt {
		out = none
		out.info.Charged, out.info.ChargedDisplay = ch.Charged.String(), s.display(ch.Charged)
		out.info.Balance, out.info.BalanceDisplay = ch.BalanceAfter.String(), s.display(ch.BalanceAfter)
		out.info.Usage = &u
		logCharge = func() {
			s.log.Debug("credit call charged", "request_id", call.ID, "key_id", call.Key.ID, "model", call.q.model.ID,
				"charged", ch.Charged.String(), "loss", ch.Loss.String(), "seq", ch.Seq, "ref", ch.Ref)
		}
		env, r, err := s.creditReceipt(call, u, ch)
		if err != nil {
			s.log.Error("credit call charged without a receipt", "request_id", call.ID, "err", err)
			return nil
		}
		out.info.Receipt, out.header = env, receiptHeader(env)
		rec, err := s.receiptRecord(r, store.StoredReceipt{RequestID: call.ID, Owner: call.Key.Owner, KeyID: call.Key.ID, Seq: ch.Seq, Envelope: env})
		if err != nil {
			s.log.Error("receipt leaf", "request_id", call.ID, "err", err)
			return nil
		}
		return &rec
	})
	if !charged {
		return none
	}
	logCharge()
	return out
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
	keyID, err := credits.KeyIDBytes32(call.Key.ID)
	if err != nil {
		return nil, nil, fmt.Errorf("key %s: %w", call.Key.ID, err)
	}
	issued := ch.At
	if issued.IsZero() {
		issued = s.now()
	}
	return s.signed(receipt.Receipt{
		RequestID: common.HexToHash(call.ID), Account: call.Payer, KeyID: keyID, Model: call.q.model.ID,
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

// countOutput counts output tokens of text with the call's encoding.
func (s *Server) countOutput(call *creditCall, text string) int64 {
	if text == "" {
		return 0
	}
	n, err := s.counter.Tokens(call.encoding, text)
	if err != nil {
		// The encoding counted the prompt a moment ago; if it fails now,
		// an estimate beats charging nothing or everything.
		s.log.Warn("count output tokens", "request_id", call.ID, "err", err)
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
