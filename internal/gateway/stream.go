package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/llm4agents/llm4agents/internal/chat"
	"github.com/llm4agents/llm4agents/internal/crashpoint"
	"github.com/llm4agents/llm4agents/internal/paywall"
	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/x402"
)

// writeTimeout bounds each write to a streaming client; it is renewed on every
// event, so a slow reader is cut off but a long stream is not.
const writeTimeout = 30 * time.Second

// stream runs a streaming paid request (D2). The upstream is read until
// its first chunk with content; only then is the payment settled, and only after
// settlement does the first byte go to the client. A client gone before the
// settlement is broadcast cancels the upstream and is charged nothing; from the
// broadcast on, the upstream is read to its end whether or not the client stays.
func (s *Server) stream(w http.ResponseWriter, r *http.Request, q *quote, pd *paywall.Fresh, body []byte) error {
	// The upstream's context outlives the client's once we settle; until then
	// the client leaving cancels it.
	upCtx, upCancel := context.WithTimeout(context.WithoutCancel(r.Context()), s.cfg.UpstreamTimeout+s.cfg.SettleTimeout+s.cfg.MaxStreamDuration)
	defer upCancel()
	disarm := context.AfterFunc(r.Context(), upCancel)
	// The upstream must produce its first content within the upstream timeout.
	firstTimer := time.AfterFunc(s.cfg.UpstreamTimeout, upCancel)

	start := s.now()
	st, err := q.model.Provider.Stream(upCtx, body)
	if err != nil {
		firstTimer.Stop()
		disarm()
		pd.Release(r.Context())
		return s.upstreamError(err, r.Context())
	}
	defer func() { _ = st.Close() }()

	var held [][]byte
	for {
		ev, err := st.Next()
		if err != nil {
			firstTimer.Stop()
			disarm()
			pd.Release(r.Context())
			if errors.Is(err, io.EOF) {
				err = errors.New("the upstream stream ended before any content")
			}
			return s.upstreamError(err, r.Context())
		}
		held = append(held, ev)
		var c chat.Chunk
		if json.Unmarshal(ev, &c) != nil {
			firstTimer.Stop()
			disarm()
			pd.Release(r.Context())
			return s.upstreamError(errors.New("the upstream sent a chunk that is not JSON"), r.Context())
		}
		if c.HasContent() {
			break
		}
	}
	firstTimer.Stop()
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
	sr, out := pd.Settle(r.Context())
	switch out {
	case paywall.Paid:
	case paywall.Pending, paywall.Unknown:
		// D2, D3: the upstream is read to its end (bounded by upCtx) and
		// staged before the client hears settlement_pending.
		s.stageStream(r.Context(), pd, st, held)
		return paywall.Unsettled(sr, out)
	default:
		pd.Abandon(r.Context()) // not paid: never replayable
		return paywall.Unsettled(sr, out)
	}
	// The amount is known before the first byte.
	if _, err := s.render(w.Header(), q, sr, &store.RecordedResponse{Status: http.StatusOK, ContentType: "text/event-stream"}); err != nil {
		return err
	}
	w.WriteHeader(http.StatusOK)

	// The whole event sequence is recorded, unannotated, whether or not the
	// client stays (D2), and promoted once it ended: a replay renders it as
	// written here.
	var text sseText
	sw := &sseWriter{w: w, rc: http.NewResponseController(w)}
	for _, ev := range held {
		text.add(ev)
		sw.event(s.withCost(ev, q, sr))
	}
	sw.flush()
	for {
		ev, err := st.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			// Paid and partly delivered: say so in-band, as OpenAI streams errors.
			s.log.Error("upstream stream broke after settlement", "key", pd.Key(), "err", err)
			ev = mustJSON(chat.ErrorBody{Error: chat.ErrorDetail{
				Message: "the upstream stream broke after the payment settled", Type: "upstream_error", Code: "upstream_stream_broken"}})
			text.add(ev)
			sw.event(ev)
			break
		}
		text.add(ev)
		sw.event(s.withCost(ev, q, sr))
		sw.flush()
	}
	sw.done()
	text.add([]byte("[DONE]"))
	if text.over {
		s.log.Error("stream too large to record", "key", pd.Key(), "limit", store.MaxStagedBody)
		pd.Abandon(r.Context())
		return nil
	}
	pd.Record(r.Context(), store.RecordedResponse{Status: http.StatusOK, ContentType: "text/event-stream", Body: text.buf.Bytes()})
	pd.Promote(r.Context(), sr)
	return nil
}

// stageStream reads the rest of a stream whose settlement is pending and
// stages its SSE text, unannotated: held (the events read before settling),
// the remaining events, an in-band error event if the upstream broke, and
// [DONE]. It runs on the request's goroutine, so the client waits for the
// upstream to finish before its 402; the upstream's context bounds it. A text
// over store.MaxStagedBody is read to its end but not staged.
func (s *Server) stageStream(ctx context.Context, pd *paywall.Fresh, st interface{ Next() ([]byte, error) }, held [][]byte) {
	var text sseText
	for _, ev := range held {
		text.add(ev)
	}
	for {
		ev, err := st.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			s.log.Error("upstream stream broke after a pending settlement", "key", pd.Key(), "err", err)
			text.add(mustJSON(chat.ErrorBody{Error: chat.ErrorDetail{
				Message: "the upstream stream broke after the payment was broadcast", Type: "upstream_error", Code: "upstream_stream_broken"}}))
			break
		}
		text.add(ev)
	}
	text.add([]byte("[DONE]"))
	if text.over {
		s.log.Error("stream too large to stage", "key", pd.Key(), "limit", store.MaxStagedBody)
		pd.Abandon(ctx)
		return
	}
	pd.Hold(ctx, store.StagedResponse{Status: http.StatusOK, ContentType: "text/event-stream", Body: text.buf.Bytes()})
	// The recovery record waits, staged, for the settlement to be seen mined.
	pd.Record(ctx, store.RecordedResponse{Status: http.StatusOK, ContentType: "text/event-stream", Body: text.buf.Bytes()})
}

// withCost annotates the chunk that carries usage (the last one) with what was
// charged; other chunks pass unchanged.
func (s *Server) withCost(ev []byte, q *quote, sr *x402.SettleResponse) []byte {
	// Only the last chunk carries usage: skip decoding the others.
	if !bytes.Contains(ev, []byte(`"usage":{`)) && !bytes.Contains(ev, []byte(`"usage": {`)) {
		return ev
	}
	var c struct {
		Usage *chat.Usage `json:"usage"`
	}
	if json.Unmarshal(ev, &c) != nil || c.Usage == nil {
		return ev
	}
	return annotate(ev, s.cost(q, sr, c.Usage))
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
