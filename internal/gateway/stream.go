package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"math/big"
	"net/http"
	"time"

	"github.com/llm4agents/llm4agents/internal/chat"
	"github.com/llm4agents/llm4agents/internal/crashpoint"
	"github.com/llm4agents/llm4agents/internal/paywall"
	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/internal/upstream"
	"github.com/llm4agents/llm4agents/x402"
)

// writeTimeout bounds each write to a streaming client; it is renewed on every
// event, so a slow reader is cut off but a long stream is not.
const writeTimeout = 30 * time.Second

// stream runs a streaming paid request (D2), a chat completion or a
// passed-through Responses call: open starts the upstream, wi reads and
// writes its events. The upstream is read until its first event with
// content; only then is the payment settled, and only after settlement does
// the first byte go to the client. A client gone before the settlement is
// broadcast cancels the upstream and is charged nothing; from the broadcast
// on, the upstream is read to its end whether or not the client stays.
func (s *Server) stream(w http.ResponseWriter, r *http.Request, wi wire, q *quote, pd *paywall.Fresh, open streamOpener, body []byte) error {
	// The upstream's context outlives the client's once we settle; until then
	// the client leaving cancels it.
	upCtx, upCancel := context.WithTimeout(context.WithoutCancel(r.Context()), s.cfg.UpstreamTimeout+s.cfg.SettleTimeout+s.cfg.MaxStreamDuration)
	defer upCancel()
	disarm := context.AfterFunc(r.Context(), upCancel)
	// The upstream must produce its first content within the upstream timeout.
	firstTimer := time.AfterFunc(s.cfg.UpstreamTimeout, upCancel)

	start := s.now()
	st, err := open(upCtx, body)
	if err != nil {
		firstTimer.Stop()
		disarm()
		pd.Release(r.Context())
		return s.upstreamError(err, r.Context())
	}
	defer func() { _ = st.Close() }()
	held, err := wi.first(st)
	firstTimer.Stop()
	if err != nil {
		disarm()
		pd.Release(r.Context())
		return s.upstreamError(err, r.Context())
	}
	s.metrics.upstreamLatency(q.model.ID, s.now().Sub(start))
	if r.Context().Err() != nil {
		// Gone before we broadcast anything: nothing is charged.
		disarm()
		pd.Release(r.Context())
		return &apiError{Status: 499, Type: "invalid_request_error", Code: "client_closed", Message: "the client went away; nothing was charged"}
	}
	// From here the settlement may be broadcast: the client leaving must no
	// longer stop the upstream.
	disarm()
	crashpoint.Hit(crashpoint.AfterUpstream)
	if pd.Upto() {
		return s.deliverThenSettle(w, r, wi, q, pd, st, held)
	}
	sr, out := pd.Settle(r.Context())
	switch out {
	case paywall.Paid:
	case paywall.Pending, paywall.Unknown:
		// D2, D3: the upstream is read to its end (bounded by upCtx) and
		// staged before the client hears settlement_pending.
		s.stageStream(r.Context(), wi, pd, st, held)
		return paywall.Unsettled(sr, out)
	default:
		pd.Abandon(r.Context()) // not paid: never replayable
		return paywall.Unsettled(sr, out)
	}
	// The amount is known before the first byte.
	if _, err := s.render(r.Context(), w.Header(), wi, q, sr, &store.RecordedResponse{Status: http.StatusOK, ContentType: "text/event-stream"}); err != nil {
		return err
	}
	w.WriteHeader(http.StatusOK)

	// The whole event sequence is recorded, unannotated, whether or not the
	// client stays (D2), and promoted once it ended: a replay renders it as
	// written here.
	var text sseText
	sw := &sseWriter{w: w, rc: http.NewResponseController(w)}
	send := func(e streamEvent) {
		text.add(wi.frame(e.typ, e.data))
		data := e.data
		if e.final {
			data = s.withCharge(r.Context(), wi, e, q, sr)
		}
		sw.write(wi.frame(e.typ, data))
	}
	for _, e := range held {
		send(e)
	}
	sw.flush()
	for {
		e, err := wi.next(st)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			// Paid and partly delivered: say so in-band, as OpenAI streams errors.
			s.log.Error("upstream stream broke after settlement", "key", pd.Key(), "err", err)
			send(wi.broken("the upstream stream broke after the payment settled"))
			break
		}
		send(e)
		sw.flush()
	}
	endStream(wi, sw, &text)
	s.keepText(r.Context(), pd, &text, sr, true)
	return nil
}

// streamOpener starts an upstream stream: a Provider's Stream, or a
// Responder's StreamResponses.
type streamOpener func(ctx context.Context, body []byte) (upstream.Stream, error)

// endStream writes and records what follows a stream's last event on wi
// ("[DONE]" for chat), and flushes.
func endStream(wi wire, sw *sseWriter, text *sseText) {
	if wi.done != nil {
		sw.write(wi.done)
		text.add(wi.done)
	}
	sw.flush()
}

// keepText keeps the SSE text of a stream that ended: recorded and promoted
// once paid, so that a replay renders it as written; staged with the pending
// claim otherwise (D3), and recorded for its recovery record to wait. A text
// over store.MaxStagedBody is abandoned: never replayable.
func (s *Server) keepText(ctx context.Context, pd *paywall.Fresh, text *sseText, sr *x402.SettleResponse, paid bool) {
	if text.over {
		s.log.Error("stream too large to keep", "key", pd.Key(), "limit", store.MaxStagedBody)
		pd.Abandon(ctx)
		return
	}
	body := text.buf.Bytes()
	if !paid {
		pd.Hold(ctx, store.StagedResponse{Status: http.StatusOK, ContentType: "text/event-stream", Body: body})
	}
	pd.Record(ctx, store.RecordedResponse{Status: http.StatusOK, ContentType: "text/event-stream", Body: body})
	if paid {
		pd.Promote(ctx, sr)
	}
}

// deliverThenSettle runs the rest of a stream paid with upto (D27's
// deliver_then_settle): its cost is known only from the usage its final
// event (a chat stream's usage chunk) reports, so the stream is delivered
// first and settled at its end. The final event is held back until then and
// goes out annotated with the settlement (charged, maximum, transaction), as
// exact's is. A settlement that fails after delivery is the seller's loss,
// counted; the claim is kept, so the payment never buys the answer twice.
// Pending, the text is staged for a retry with the same payment, as for
// exact.
func (s *Server) deliverThenSettle(w http.ResponseWriter, r *http.Request, wi wire, q *quote, pd *paywall.Fresh, st upstream.Stream, held []streamEvent) error {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "private")
	h.Set("X-Should-Retry", "false")
	h.Set("X-Accel-Buffering", "no")
	h.Set("X-Llm4agents-Maximum", q.Amount.String())
	if q.Op != "" {
		h.Set(operationHeader, q.Op)
	}
	w.WriteHeader(http.StatusOK)

	var text sseText
	sw := &sseWriter{w: w, rc: http.NewResponseController(w)}
	var final *streamEvent
	emit := func(e streamEvent) {
		text.add(wi.frame(e.typ, e.data))
		if e.final {
			final = &e // held back for the settlement's annotation
			return
		}
		sw.write(wi.frame(e.typ, e.data))
		sw.flush()
	}
	for _, e := range held {
		emit(e)
	}
	broken := false
	for final == nil || !wi.endsAtFinal {
		e, err := wi.next(st)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			s.log.Error("upstream stream broke during an upto stream", "key", pd.Key(), "err", err)
			emit(wi.broken("the upstream stream broke; the prompt is charged"))
			broken = true
			break
		}
		emit(e)
	}
	var usage *chat.Usage
	if final != nil {
		usage = final.usage
	}
	var charge *big.Int
	switch {
	case usage != nil:
		charge = s.charge(q, *usage, true)
	case broken:
		// No usage from a stream that broke: the prompt was spent, the
		// output is unknown and charged as none.
		charge = s.charge(q, chat.Usage{PromptTokens: q.promptTokens}, true)
	default:
		charge = s.charge(q, chat.Usage{}, false)
	}
	pd.Charge(charge)
	sr, out := pd.SettleDelivered(r.Context())
	ci := s.cost(q, sr, usage)
	ci.Charged, ci.ChargedDisplay, ci.Maximum = charge.String(), s.display(charge), q.Amount.String()
	switch out {
	case paywall.Failed:
		ci.Charged, ci.ChargedDisplay, ci.Transaction = "0", s.display(new(big.Int)), ""
	case paywall.Paid:
		ci.Receipt = s.x402Receipt(r.Context(), q, usage, ci)
	case paywall.Pending, paywall.Unknown:
		// The receipt waits for a replay that finds the settlement paid: a
		// receipt says what the buyer paid.
	}
	if final == nil {
		e := wi.unfinished()
		final = &e
	}
	sw.write(wi.frame(final.typ, wi.annotateEvent(final.data, ci)))
	endStream(wi, sw, &text)
	if out == paywall.Failed {
		pd.Abandon(r.Context()) // not paid: never replayable
		return nil
	}
	// Pending or unresolved, the buyer got the answer, and a retry with the
	// same payment gets it again once the settlement is seen paid.
	s.keepText(r.Context(), pd, &text, sr, out == paywall.Paid)
	return nil
}

// usageOf returns the usage a chunk reports, nil when it reports none (every
// chunk but the last).
func usageOf(ev []byte) *chat.Usage {
	if !bytes.Contains(ev, []byte(`"usage":{`)) && !bytes.Contains(ev, []byte(`"usage": {`)) {
		return nil
	}
	var c struct {
		Usage *chat.Usage `json:"usage"`
	}
	if json.Unmarshal(ev, &c) != nil {
		return nil
	}
	return c.Usage
}

// stageStream reads the rest of a stream whose settlement is pending and
// stages its SSE text, unannotated: held (the events read before settling),
// the remaining events, an in-band error event if the upstream broke, and
// what ends the stream on wi ([DONE] for chat). It runs on the request's
// goroutine, so the client waits for the upstream to finish before its 402;
// the upstream's context bounds it. A text over store.MaxStagedBody is read
// to its end but not staged.
func (s *Server) stageStream(ctx context.Context, wi wire, pd *paywall.Fresh, st upstream.Stream, held []streamEvent) {
	var text sseText
	for _, e := range held {
		text.add(wi.frame(e.typ, e.data))
	}
	for {
		e, err := wi.next(st)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			s.log.Error("upstream stream broke after a pending settlement", "key", pd.Key(), "err", err)
			b := wi.broken("the upstream stream broke after the payment was broadcast")
			text.add(wi.frame(b.typ, b.data))
			break
		}
		text.add(wi.frame(e.typ, e.data))
	}
	if wi.done != nil {
		text.add(wi.done)
	}
	// The recovery record waits, staged, for the settlement to be seen mined.
	s.keepText(ctx, pd, &text, nil, false)
}

// withCharge annotates a stream's final event with what was charged.
func (s *Server) withCharge(ctx context.Context, wi wire, e streamEvent, q *quote, sr *x402.SettleResponse) []byte {
	ci := s.cost(q, sr, e.usage)
	ci.Receipt = s.x402Receipt(ctx, q, e.usage, ci)
	return wi.annotateEvent(e.data, ci)
}

// sseWriter writes server-sent events, renewing the write deadline on every
// write; once the client is gone it stops writing but lets the caller keep
// reading the upstream.
type sseWriter struct {
	w    io.Writer
	rc   *http.ResponseController
	gone bool
}

func (sw *sseWriter) write(b []byte) {
	if sw.gone {
		return
	}
	_ = sw.rc.SetWriteDeadline(time.Now().Add(writeTimeout))
	if _, err := sw.w.Write(b); err != nil {
		sw.gone = true
	}
}

func (sw *sseWriter) event(data []byte) {
	sw.write(append(append([]byte("data: "), data...), '\n', '\n'))
}

func (sw *sseWriter) flush() {
	if !sw.gone && sw.rc.Flush() != nil {
		sw.gone = true
	}
}

func (sw *sseWriter) done() {
	sw.write([]byte("data: [DONE]\n\n"))
	sw.flush()
}

func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}
