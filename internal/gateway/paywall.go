package gateway

import (
	"fmt"
	"math/big"
	"net/http"

	"github.com/llm4agents/llm4agents/internal/chat"
	"github.com/llm4agents/llm4agents/internal/paywall"
	"github.com/llm4agents/llm4agents/internal/pricing"
	"github.com/llm4agents/llm4agents/x402"
)

func bigU(v uint64) *big.Int { return new(big.Int).SetUint64(v) }

// quote is the price of one request: the paywall's quote (amount, offer,
// operation id) and what it was computed from.
type quote struct {
	paywall.Quote
	model        *Model
	promptTokens int64
	outputBound  int64
	// inputs is the number of inputs of an embeddings request: its answer
	// must hold as many vectors. 0 for chat.
	inputs int
	// payKey is the claim key (D4) of the x402 payment the answer is paid
	// with, once admitted, and payUpto says it is an upto permit: the
	// receipt's identity and rail.
	payKey  string
	payUpto bool
}

// price computes the quote of a parsed request (DESIGN.md D13).
func (s *Server) price(r *http.Request, req *chat.Request) (*quote, error) {
	m, ok := s.models[req.Model]
	if !ok {
		return nil, modelNotFound(req.Model)
	}
	if m.Embeddings {
		return nil, wrongRoute(m, "/v1/embeddings")
	}
	if c := req.OutputCap(); c > m.MaxOutputTokens {
		return nil, &apiError{Status: http.StatusBadRequest, Type: "invalid_request_error", Code: "max_tokens_too_large",
			Message: fmt.Sprintf("max_tokens %d is above this model's cap of %d", c, m.MaxOutputTokens)}
	}
	prompt, err := s.promptTokens(m, req)
	if err != nil {
		return nil, &apiError{Status: http.StatusBadRequest, Type: "invalid_request_error", Code: "invalid_request", Message: "the messages could not be tokenized", Err: err}
	}
	q := &quote{model: m, promptTokens: prompt, outputBound: pricing.OutputBound(req, m.MaxOutputTokens)}
	withUpto := !req.Stream || s.upto == nil || !s.upto.ExactOnlyStreams
	s.pay.Offer(&q.Quote, pricing.Quote(q.promptTokens, q.outputBound, m.Price, s.cfg.Decimals), withUpto)
	q.PaymentIDRequired = m.PaymentIDRequired
	q.What = paywall.WhatRequest
	mime := "application/json"
	if req.Stream {
		mime = "text/event-stream"
	}
	q.Resource = &x402.ResourceInfo{
		URL: s.cfg.PublicURL + r.URL.Path,
		Description: fmt.Sprintf("chat completion with %s: %d prompt tokens, up to %d output tokens", m.ID,
			q.promptTokens, q.outputBound),
		MimeType: mime,
	}
	return q, nil
}

// charge is what an upto payment of q settles for, from the usage the
// upstream reported (D27). Without a usage report the cost is unknown, and
// the maximum is charged: the buyer authorized it, and nothing lower is
// known to cover the call.
func (s *Server) charge(q *quote, u chat.Usage, reported bool) *big.Int {
	if !reported {
		s.log.Warn("upstream reported no usage; the upto payment is settled for its maximum", "model", q.model.ID)
		return new(big.Int).Set(q.Amount)
	}
	var minCharge *big.Int
	if s.upto != nil {
		minCharge = s.upto.MinCharge
	}
	return pricing.Charge(pricing.Cost(u, q.model.Price), minCharge, q.Amount)
}

func (s *Server) promptTokens(m *Model, req *chat.Request) (int64, error) {
	if m.Encoding != "" {
		return s.counter.PromptTokensWith(req, m.Encoding)
	}
	return s.counter.PromptTokens(req)
}

func (s *Server) display(amount *big.Int) string {
	return pricing.FormatAmount(amount, s.cfg.Decimals) + " " + s.cfg.AssetSymbol
}

// paidHeaders are set on every paid answer.
func paidHeaders(h http.Header, sr *x402.SettleResponse) error {
	hv, err := x402.EncodeHeader(sr)
	if err != nil {
		return err
	}
	h.Set(x402.HeaderPaymentResponse, hv)
	h.Set("Cache-Control", "private")
	h.Set("X-Should-Retry", "false")
	return nil
}

// presented is the payment r carries, as the paywall reads it.
func presented(r *http.Request) paywall.Presented {
	return paywall.Presented{Signature: r.Header.Get(x402.HeaderPaymentSignature), LegacyV1: r.Header.Get(x402.HeaderLegacyPayment) != ""}
}

// refusalAnswer is how each paywall refusal is answered: status, OpenAI error
// type, and the seconds of Retry-After (0: none). Every refusal but a
// store's or the facilitator's outage also says X-Should-Retry: false: the
// OpenAI SDKs would otherwise retry a 409 on their own, without the payment
// the buyer must decide about.
var refusalAnswer = map[paywall.Reason]struct {
	status     int
	typ        string
	retryAfter int
}{
	paywall.InvalidPayment:         {http.StatusBadRequest, "invalid_request_error", 0},
	paywall.InvalidPaymentID:       {http.StatusBadRequest, "invalid_request_error", 0},
	paywall.OperationInFlight:      {http.StatusConflict, "invalid_request_error", 2},
	paywall.SettlementPending:      {http.StatusConflict, "invalid_request_error", 5},
	paywall.AlreadyUsed:            {http.StatusConflict, "invalid_request_error", 0},
	paywall.IdempotencyConflict:    {http.StatusConflict, "invalid_request_error", 0},
	paywall.RequestMismatch:        {http.StatusConflict, "invalid_request_error", 0},
	paywall.ReplayBudgetSpent:      {http.StatusConflict, "invalid_request_error", 0},
	paywall.StoreUnavailable:       {http.StatusServiceUnavailable, "server_error", 0},
	paywall.RecoveryUnavailable:    {http.StatusServiceUnavailable, "server_error", 2},
	paywall.FacilitatorUnavailable: {http.StatusBadGateway, "server_error", 0},
	paywall.Internal:               {http.StatusInternalServerError, "server_error", 0},
}

// refused is the HTTP answer of a paywall refusal. A 402 offer carries
// PAYMENT-REQUIRED (D10: authoritative; the body is an OpenAI error for the
// SDKs) and names the price; a failed settlement carries PAYMENT-RESPONSE and
// no offer, as the official server answers. Either way the code is the
// refusal's own reason.
func (s *Server) refused(rf *paywall.RefusalError) *apiError {
	h := http.Header{}
	switch {
	case rf.Required != nil:
		hv, err := x402.EncodeHeader(rf.Required)
		if err != nil {
			return &apiError{Status: http.StatusInternalServerError, Type: "server_error", Code: "internal_error", Message: "internal error", Err: err}
		}
		h.Set(x402.HeaderPaymentRequired, hv)
		h.Set("Cache-Control", "no-store")
		h.Set("X-Should-Retry", "false")
		msg := fmt.Sprintf("payment required: %s for this %s", s.display(rf.Amount), rf.What)
		if rf.Reason != paywall.PaymentRequired {
			msg += " (" + rf.Message + ")"
		}
		return &apiError{Status: http.StatusPaymentRequired, Type: "payment_required", Code: string(rf.Reason), Message: msg, Header: h, Err: rf.Err}
	case rf.Settlement != nil:
		hv, err := x402.EncodeHeader(rf.Settlement)
		if err != nil {
			return &apiError{Status: http.StatusInternalServerError, Type: "server_error", Code: "internal_error", Message: "internal error", Err: err}
		}
		h.Set(x402.HeaderPaymentResponse, hv)
		h.Set("Cache-Control", "no-store")
		h.Set("X-Should-Retry", "false")
		return &apiError{Status: http.StatusPaymentRequired, Type: "payment_required", Code: string(rf.Reason), Message: rf.Message, Header: h, Err: rf.Err}
	}
	a, ok := refusalAnswer[rf.Reason]
	if !ok {
		a.status, a.typ = http.StatusInternalServerError, "server_error"
	}
	if a.status < http.StatusInternalServerError || a.retryAfter > 0 {
		h.Set("X-Should-Retry", "false")
	}
	if a.retryAfter > 0 {
		h.Set("Retry-After", fmt.Sprint(a.retryAfter))
	}
	if len(h) == 0 {
		h = nil
	}
	return &apiError{Status: a.status, Type: a.typ, Code: string(rf.Reason), Message: rf.Message, Header: h, Err: rf.Err}
}
