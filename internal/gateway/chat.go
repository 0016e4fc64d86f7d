package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"strings"

	"github.com/llm4agents/llm4agents/internal/chat"
	"github.com/llm4agents/llm4agents/internal/crashpoint"
	"github.com/llm4agents/llm4agents/internal/paywall"
	"github.com/llm4agents/llm4agents/internal/pricing"
	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/internal/upstream"
	"github.com/llm4agents/llm4agents/x402"
)

// costInfo is reported on every paid answer: the x_llm4agents field of the body
// (or of the final stream chunk), which OpenAI clients ignore, and headers.
type costInfo struct {
	Charged        string `json:"charged"`         // atomic units actually paid
	ChargedDisplay string `json:"charged_display"` // "0.03 USDC"
	// Maximum is what an upto payment authorized, of which Charged was
	// settled; absent for exact, which pays its quote.
	Maximum     string `json:"maximum,omitempty"`
	Asset       string `json:"asset"`
	Network     string `json:"network"`
	Transaction string `json:"transaction"`
	// OperationID names the paid answer for recovery (recovery.go).
	OperationID string      `json:"operation_id,omitempty"`
	UsageCost   string      `json:"usage_cost"` // what the usage would cost at list price, unrounded
	Usage       *chat.Usage `json:"usage,omitempty"`
	// Receipt is the payment's signed receipt envelope (D18, D30), when
	// the gateway issues receipts; a non-streaming answer also carries it
	// in X-Llm4agents-Receipt.
	Receipt json.RawMessage `json:"receipt,omitempty"`
}

func (s *Server) cost(q *quote, sr *x402.SettleResponse, u *chat.Usage) costInfo {
	ci := costInfo{
		Charged: q.Amount.String(), ChargedDisplay: s.display(q.Amount), Asset: q.Offer.Asset,
		Network: q.Offer.Network, Transaction: sr.Transaction, Usage: u, OperationID: q.Op,
	}
	if sr.Network != "" {
		ci.Network = sr.Network
	}
	// A settlement that names its amount (upto) paid that, at most the quote.
	if a, ok := new(big.Int).SetString(sr.Amount, 10); ok && a.Sign() >= 0 && a.Cmp(q.Amount) <= 0 {
		ci.Charged, ci.ChargedDisplay, ci.Maximum = a.String(), s.display(a), q.Amount.String()
	}
	if u != nil {
		ci.UsageCost = pricing.Cost(*u, q.model.Price).String()
	}
	return ci
}

func setCostHeaders(h http.Header, ci costInfo) {
	h.Set("X-Llm4agents-Charged", ci.Charged)
	h.Set("X-Llm4agents-Charged-Display", ci.ChargedDisplay)
}

// annotate adds "x_llm4agents": info to a JSON object without re-encoding the
// rest of it, so the upstream's bytes reach the client unchanged.
func annotate(body []byte, info any) []byte {
	b := bytes.TrimRight(body, " \t\r\n")
	if len(b) < 2 || b[len(b)-1] != '}' {
		return body
	}
	extra, err := x402.Marshal(info)
	if err != nil {
		return body
	}
	inner := bytes.TrimSpace(b[:len(b)-1])
	sep := ","
	if len(inner) == 1 { // "{"
		sep = ""
	}
	out := make([]byte, 0, len(b)+len(extra)+20)
	out = append(out, inner...)
	out = append(out, sep...)
	out = append(out, `"x_llm4agents":`...)
	out = append(out, extra...)
	out = append(out, '}')
	return out
}

// readBody reads a paid route's request body, up to MaxBodyBytes.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			return nil, &apiError{Status: http.StatusRequestEntityTooLarge, Type: "invalid_request_error", Code: "request_too_large",
				Message: fmt.Sprintf("the request body is larger than %d bytes", s.cfg.MaxBodyBytes)}
		}
		return nil, &apiError{Status: http.StatusBadRequest, Type: "invalid_request_error", Code: "invalid_request", Message: "the request body could not be read"}
	}
	return body, nil
}

// keyAndPayment refuses a request that carries both an API key and a
// payment (D12): the two together would charge twice.
func keyAndPayment(r *http.Request) error {
	if hasOwnKey(r) && r.Header.Get(x402.HeaderPaymentSignature) != "" {
		return &apiError{Status: http.StatusBadRequest, Type: "invalid_request_error", Code: "key_and_payment",
			Message: "send either an llm4agents API key or a PAYMENT-SIGNATURE, not both; nothing was charged"}
	}
	return nil
}

// chat serves POST /v1/chat/completions.
func (s *Server) chat(w http.ResponseWriter, r *http.Request) error {
	body, err := s.readBody(w, r)
	if err != nil {
		return err
	}
	return s.serveChat(w, r, body)
}

// serveChat serves the chat completion body: priced, paid (x402 or an API
// key) and forwarded, whichever route it came in on.
func (s *Server) serveChat(w http.ResponseWriter, r *http.Request, body []byte) error {
	req, err := chat.ParseRequest(body)
	if err != nil {
		return &apiError{Status: http.StatusBadRequest, Type: "invalid_request_error", Code: "invalid_request", Message: err.Error()}
	}
	if err := keyAndPayment(r); err != nil {
		return err
	}
	if hasOwnKey(r) {
		return s.creditChat(w, r, req, body)
	}
	q, err := s.price(r, req)
	if err != nil {
		return err
	}
	return s.paid(w, r, chatWire, q, req.Model, body, func(a *paywall.Fresh) error {
		up, err := req.Upstream(q.model.UpstreamModel, q.model.MaxOutputTokens)
		if err != nil {
			a.Release(r.Context())
			return fmt.Errorf("rewrite request: %w", err)
		}
		if req.Stream {
			return s.stream(w, r, chatWire, q, a, q.model.Provider.Stream, up)
		}
		return s.complete(w, r, chatWire, q, a, s.upstreamOf(q), up)
	})
}

// paid runs the x402 payment of a priced request, whatever its route: the
// paywall's admission (D0), then an answer the paywall recovered is served
// as it was kept, and a fresh payment is handed to fresh, which calls the
// upstream and settles (complete, stream). wi is the wire of the kept
// answers.
func (s *Server) paid(w http.ResponseWriter, r *http.Request, wi wire, q *quote, model string, body []byte, fresh func(*paywall.Fresh) error) error {
	adm, err := s.pay.Admit(r.Context(), &q.Quote, presented(r),
		paywall.Request{Method: r.Method, Path: r.URL.Path, Model: model, Body: body})
	if err != nil {
		return err
	}
	switch a := adm.(type) {
	case *paywall.Replay:
		return s.serveAnswer(r.Context(), w, wi, q, a.Answer())
	case *paywall.Staged:
		ans, err := a.Resolve(r.Context())
		if err != nil {
			return err
		}
		return s.serveAnswer(r.Context(), w, wi, q, ans)
	case *paywall.Orphan:
		ans, err := a.Resume(r.Context())
		if err != nil {
			return err
		}
		return s.serveAnswer(r.Context(), w, wi, q, ans)
	case *paywall.Fresh:
		q.payKey, q.payUpto = a.Key(), a.Upto()
		return fresh(a)
	default:
		return fmt.Errorf("unknown admission %T", adm)
	}
}

// hasOwnKey reports whether the request carries one of our API keys. Any other
// bearer (the OpenAI SDKs always send one) is ignored (D12).
func hasOwnKey(r *http.Request) bool {
	v, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return ok && strings.HasPrefix(strings.TrimSpace(v), "sk-l4a-")
}

// complete runs a non-streaming paid request (D1), a chat completion or an
// embeddings call, or a passed-through Responses call: upstream (body sent
// through respond), settle, then the body rendered on wi; a failed
// settlement withholds it.
func (s *Server) complete(w http.ResponseWriter, r *http.Request, wi wire, q *quote, pd *paywall.Fresh, respond upstreamCall, body []byte) error {
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.UpstreamTimeout)
	defer cancel()
	start := s.now()
	comp, err := respond(ctx, body)
	s.metrics.upstreamLatency(q.model.ID, s.now().Sub(start))
	if err != nil {
		pd.Release(r.Context())
		return s.upstreamError(err, r.Context())
	}
	crashpoint.Hit(crashpoint.AfterUpstream)
	if pd.Upto() {
		pd.Charge(s.charge(q, comp.Usage, comp.UsageReported))
	}
	// The handler only stages (D14); nothing here is replayable yet.
	answer := store.RecordedResponse{Status: http.StatusOK, ContentType: "application/json", Body: comp.Body}
	pd.Record(r.Context(), answer)
	sr, out := pd.Settle(r.Context())
	switch out {
	case paywall.Paid:
	case paywall.Pending, paywall.Unknown:
		// D3: the answer waits with the claim for a retry with the same
		// payment; it is annotated when served. The recovery record stays
		// staged until the settlement is seen mined.
		pd.Hold(r.Context(), store.StagedResponse{Status: http.StatusOK, ContentType: "application/json", Body: comp.Body})
		return paywall.Unsettled(sr, out)
	default:
		pd.Abandon(r.Context()) // not paid: never replayable
		return paywall.Unsettled(sr, out)
	}
	pd.Promote(r.Context(), sr)
	// Rendered as a replay renders it, so a replay's bytes are these.
	b, err := s.render(r.Context(), w.Header(), wi, q, sr, &answer)
	if err != nil {
		return err
	}
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b) // #nosec G705 -- a JSON body sent as application/json, not HTML
	return nil
}

// upstreamCall sends a non-streaming call's body to its upstream: a
// Provider's Complete or Embed (upstreamOf), or a Responder's Respond.
type upstreamCall func(ctx context.Context, body []byte) (*upstream.Completion, error)

// upstreamOf is callUpstream for q's model.
func (s *Server) upstreamOf(q *quote) upstreamCall {
	return func(ctx context.Context, body []byte) (*upstream.Completion, error) {
		return s.callUpstream(ctx, q, body)
	}
}

// upstreamError maps an upstream failure to the client's answer. Nothing was
// settled.
func (s *Server) upstreamError(err error, clientCtx context.Context) error {
	if clientCtx.Err() != nil {
		return &apiError{Status: 499, Type: "invalid_request_error", Code: "client_closed", Message: "the client went away; nothing was charged", Err: err}
	}
	if ue, ok := errors.AsType[*upstream.Error](err); ok {
		typ := ue.Type
		if typ == "" {
			typ = "upstream_error"
		}
		code := ue.Code
		if code == "" {
			code = typ
		}
		return &apiError{Status: ue.Status, Type: typ, Code: code, Message: ue.Message + "; nothing was charged", Err: err}
	}
	return &apiError{Status: http.StatusBadGateway, Type: "upstream_error", Code: "upstream_error", Message: "the upstream failed; nothing was charged", Err: err}
}
