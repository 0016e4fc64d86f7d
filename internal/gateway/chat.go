package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/llm4agents/llm4agents/internal/chat"
	"github.com/llm4agents/llm4agents/internal/crashpoint"
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
	Asset          string `json:"asset"`
	Network        string `json:"network"`
	Transaction    string `json:"transaction"`
	// OperationID names the paid answer for recovery (recovery.go).
	OperationID string      `json:"operation_id,omitempty"`
	UsageCost   string      `json:"usage_cost"` // what the usage would cost at list price, unrounded
	Usage       *chat.Usage `json:"usage,omitempty"`
}

func (s *Server) cost(q *quote, sr *x402.SettleResponse, u *chat.Usage) costInfo {
	ci := costInfo{
		Charged: q.amount.String(), ChargedDisplay: s.display(q.amount), Asset: s.cfg.Asset,
		Network: s.cfg.Network, Transaction: sr.Transaction, Usage: u, OperationID: q.op,
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

// chat serves POST /v1/chat/completions.
func (s *Server) chat(w http.ResponseWriter, r *http.Request) error {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			return &apiError{Status: http.StatusRequestEntityTooLarge, Type: "invalid_request_error", Code: "request_too_large",
				Message: fmt.Sprintf("the request body is larger than %d bytes", s.cfg.MaxBodyBytes)}
		}
		return &apiError{Status: http.StatusBadRequest, Type: "invalid_request_error", Code: "invalid_request", Message: "the request body could not be read"}
	}
	req, err := chat.ParseRequest(body)
	if err != nil {
		return &apiError{Status: http.StatusBadRequest, Type: "invalid_request_error", Code: "invalid_request", Message: err.Error()}
	}
	if hasOwnKey(r) && r.Header.Get(x402.HeaderPaymentSignature) != "" {
		// D12: an API key and a payment together would charge twice.
		return &apiError{Status: http.StatusBadRequest, Type: "invalid_request_error", Code: "key_and_payment",
			Message: "send either an llm4agents API key or a PAYMENT-SIGNATURE, not both; nothing was charged"}
	}
	if hasOwnKey(r) {
		return s.creditChat(w, r, req, body)
	}
	q, err := s.price(r, req)
	if err != nil {
		return err
	}
	pd, err := s.admit(r.Context(), r, q, [3]string{r.Method, r.URL.Path, req.Model}, body)
	if err != nil {
		return err
	}
	if pd.replay != nil {
		return s.serveRecorded(w, q, pd.replay)
	}
	if pd.recover {
		if st := pd.claim.Staged; st.Fingerprint != "" && st.Fingerprint != pd.fp() {
			// The same payment, presented for another request (D14): a conflict,
			// never the other request's answer and never a new upstream call.
			return &apiError{Status: http.StatusConflict, Type: "invalid_request_error", Code: "payment_request_mismatch",
				Message: "this payment was made for a different request; its answer is kept for that request",
				Header:  http.Header{"X-Should-Retry": {"false"}}}
		}
		return s.resolveStaged(w, q, pd)
	}
	if pd.orphan {
		return s.resumeOrphan(w, q, pd)
	}
	up, err := req.Upstream(q.model.UpstreamModel, q.model.MaxOutputTokens)
	if err != nil {
		s.release(pd)
		return fmt.Errorf("rewrite request: %w", err)
	}
	if req.Stream {
		return s.stream(w, r, q, pd, up)
	}
	return s.complete(w, r, q, pd, up)
}

// hasOwnKey reports whether the request carries one of our API keys. Any other
// bearer (the OpenAI SDKs always send one) is ignored (D12).
func hasOwnKey(r *http.Request) bool {
	v, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return ok && strings.HasPrefix(strings.TrimSpace(v), "sk-l4a-")
}

// complete runs a non-streaming paid request (D1): upstream, settle, then the
// body; a failed settlement withholds it.
func (s *Server) complete(w http.ResponseWriter, r *http.Request, q *quote, pd *paid, body []byte) error {
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.UpstreamTimeout)
	defer cancel()
	start := s.now()
	comp, err := q.model.Provider.Complete(ctx, body)
	s.metrics.upstreamLatency(q.model.ID, s.now().Sub(start))
	if err != nil {
		s.release(pd)
		return s.upstreamError(err, r.Context())
	}
	crashpoint.Hit(crashpoint.AfterUpstream)
	// R2: the handler only stages; nothing here is replayable.
	answer := store.RecordedResponse{Status: http.StatusOK, ContentType: "application/json", Body: comp.Body}
	s.stageRecovery(pd, answer)
	sr, out := s.settle(pd, q)
	switch out {
	case settledPaid:
	case settledPending, settledUnknown:
		// D3: the answer waits with the claim for a retry with the same
		// payment; it is annotated when served. The recovery record stays
		// staged until the settlement is seen mined.
		s.stage(pd, store.StagedResponse{Status: http.StatusOK, ContentType: "application/json", Body: comp.Body})
		return s.unsettled(sr, out)
	default:
		s.abandonRecovery(pd) // not paid: never replayable
		return s.unsettled(sr, out)
	}
	s.promoteRecovery(pd, sr)
	// Rendered as a replay renders it, so a replay's bytes are these.
	b, err := s.render(w.Header(), q, sr, &answer)
	if err != nil {
		return err
	}
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b) // #nosec G705 -- a JSON body sent as application/json, not HTML
	return nil
}

func (s *Server) settleMessage(sr *x402.SettleResponse) string {
	switch sr.ErrorReason {
	case x402.ReasonSettlementPending:
		return fmt.Sprintf("the payment was broadcast (%s) but is not confirmed yet; retry the same request with the same payment to receive the answer", sr.Transaction)
	case x402.ReasonEVMNonceAlreadyUsed:
		return "this payment authorization was already spent; the answer is withheld"
	default:
		return fmt.Sprintf("the payment could not be settled (%s); the answer is withheld and nothing was charged", sr.ErrorReason)
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
