package gateway

import (
	"bytes"
	"context"
	"net/http"
	"time"

	"github.com/llm4agents/llm4agents/x402/receipt"

	"github.com/llm4agents/llm4agents/internal/chat"
	"github.com/llm4agents/llm4agents/internal/paywall"
	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/x402"
)

// Recovery of paid answers whose response was lost (DESIGN.md D14, D15): the
// paywall keeps the records (internal/paywall, recovery.go); the gateway
// sends each paid answer's operation id in the X-Llm4agents-Operation header
// and in x_llm4agents.operation_id, and renders a replay exactly as the live
// answer was rendered, so that its bytes are the same, marked
// X-Llm4agents-Replay.

const (
	// operationHeader carries a paid answer's operation id.
	operationHeader = "X-Llm4agents-Operation"
	// DefaultRecoveryTTL is how long a promoted answer may be replayed.
	DefaultRecoveryTTL = time.Hour
	// DefaultRecoveryReplays is how many replays a promoted answer allows.
	DefaultRecoveryReplays = 10
)

// serveAnswer writes a paid answer the paywall recovered without the
// upstream: rendered from the recorded or staged answer and its settlement
// as the live answer was, marked X-Llm4agents-Replay with how it was kept.
func (s *Server) serveAnswer(ctx context.Context, w http.ResponseWriter, wi wire, q *quote, a *paywall.Answer) error {
	q.Op, q.payKey, q.payUpto = a.Op, a.PaymentKey, a.Upto
	sr := a.Settlement
	if a.Upto && sr.Amount == "" {
		// The facilitator's answer at hand does not name the charge (a
		// replay, or a settlement reported to another call): the charge is
		// recomputed from the recorded usage, by the rule at the current
		// price (D27).
		if u := recordedUsage(wi, a.Response); u != nil {
			c := *sr
			c.Amount = s.charge(q, *u, true).String()
			sr = &c
		}
	}
	body, err := s.render(ctx, w.Header(), wi, q, sr, a.Response)
	if err != nil {
		return err
	}
	w.Header().Set(replayHeader, a.Replay)
	w.WriteHeader(a.Response.Status)
	_, _ = w.Write(body) // #nosec G705 -- a recorded JSON or SSE body, sent with its own content type, not HTML
	return nil
}

// render sets the headers of a paid answer and returns its body: the upstream's
// JSON annotated with the cost, or its SSE text with the usage event annotated,
// exactly as the live answer was written; wi says where its usage stands and
// where the annotation goes.
func (s *Server) render(ctx context.Context, h http.Header, wi wire, q *quote, sr *x402.SettleResponse, r *store.RecordedResponse) ([]byte, error) {
	if err := paidHeaders(h, sr); err != nil {
		return nil, err
	}
	if q.Op != "" {
		h.Set(operationHeader, q.Op)
	}
	h.Set("Content-Type", r.ContentType)
	if r.ContentType == "text/event-stream" {
		setCostHeaders(h, s.cost(q, sr, nil))
		h.Set("X-Accel-Buffering", "no")
		return s.annotateSSE(ctx, wi, r.Body, q, sr), nil
	}
	u := wi.usage(r.Body) // nil, no usage: the annotation says so
	ci := s.cost(q, sr, u)
	setCostHeaders(h, ci)
	if r.Status != http.StatusOK {
		return r.Body, nil
	}
	if ci.Receipt = s.x402Receipt(ctx, q, u, ci); ci.Receipt != nil {
		h.Set(receipt.Header, receiptHeader(ci.Receipt))
	}
	return annotate(r.Body, ci), nil
}

// recordedUsage is the usage a recorded answer reports: a completion's usage
// field, or a stream's usage chunk (a Response's, or its final event's, on
// responsesWire); nil when it reports none.
func recordedUsage(wi wire, r *store.RecordedResponse) *chat.Usage {
	if r.ContentType != "text/event-stream" {
		return wi.usage(r.Body)
	}
	var u *chat.Usage
	for ev := range bytes.SplitSeq(r.Body, []byte("\n\n")) {
		if e, ok := wi.recorded(ev); ok && e.usage != nil {
			u = e.usage
		}
	}
	return u
}
