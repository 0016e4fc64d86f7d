package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/llm4agents/llm4agents/internal/chat"
	"github.com/llm4agents/llm4agents/internal/upstream"
)

// creditStream runs a streaming credit-paid call. The upstream is read until
// its first chunk with content, so that an upstream failing before it is an
// error status with nothing charged; then events go to the client as they
// come. The usage chunk is held back to the end: it carries what was charged
// and the receipt (D18). A client that leaves stops the upstream and is
// charged for the events it was sent, counted (D16); one gone before the
// first of them is charged nothing.
func (s *Server) creditStream(w http.ResponseWriter, r *http.Request, call *creditCall, body []byte) error {
	st, held, upCancel, err := startCreditStream(s, w, r, call, call.q.model.Provider.Stream, firstContent, body)
	if err != nil {
		return err
	}
	defer upCancel()
	defer func() { _ = st.Close() }()
	cs := &creditSSE{sw: &sseWriter{w: w, rc: http.NewResponseController(w)},
		count: func(text string) int64 { return s.countOutput(call, text) }}
	cs.send(held...)
	var broken error
	for !cs.sw.gone {
		ev, err := st.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			broken = err
			break
		}
		cs.send(ev)
	}
	if cs.sw.gone || r.Context().Err() != nil {
		upCancel()
		s.clientLeft(r.Context(), call, cs)
		return nil
	}

	u, ok := cs.usage()
	if !ok {
		// No usage from the upstream (it broke, or it does not report
		// any): charge what was delivered, counted.
		u = s.countedUsage(call, cs)
		s.log.Warn("stream without usage; charging what was delivered, counted", "request_id", call.ID, "model", call.q.model.ID)
	}
	out := s.captureCredit(r.Context(), call, u)
	final := cs.usageEv
	if final == nil {
		final = usageChunk(cs.last, u)
	}
	cs.deliver(annotate(final, out.info))
	if broken != nil && cs.usageEv == nil {
		s.log.Error("upstream stream broke mid-way; charged what was delivered", "request_id", call.ID, "err", broken)
		cs.sw.event(mustJSON(chat.ErrorBody{Error: chat.ErrorDetail{
			Message: "the upstream stream broke; you were charged for what was delivered", Type: "upstream_error", Code: "upstream_stream_broken"}}))
	}
	cs.sw.done()
	return nil
}

// startCreditStream starts a credit-paid stream, a chat completion's or a
// passed-through Responses call's: open's upstream is read up to and
// including its first event with content (first) within the upstream
// timeout, so that an upstream failing before it is an error status with
// nothing charged, as is a client gone by then; then the stream's headers
// are written. It returns the stream, the events read and the cancel of the
// upstream's context; an error released call's hold and closed the stream.
func startCreditStream[E any](s *Server, w http.ResponseWriter, r *http.Request, call *creditCall, open streamOpener, first func(upstream.Stream) ([]E, error), body []byte) (upstream.Stream, []E, context.CancelFunc, error) {
	// Unlike an x402 stream, nothing is settled on chain here, so the client
	// leaving may stop the upstream at any point.
	upCtx, upCancel := context.WithTimeout(r.Context(), s.cfg.UpstreamTimeout+s.cfg.MaxStreamDuration)
	firstTimer := time.AfterFunc(s.cfg.UpstreamTimeout, upCancel)
	defer firstTimer.Stop()

	start := s.now()
	st, err := open(upCtx, body)
	if err != nil {
		call.Release(r.Context())
		err = s.upstreamError(err, r.Context())
		upCancel()
		return nil, nil, nil, err
	}
	fail := func(err error) (upstream.Stream, []E, context.CancelFunc, error) {
		_ = st.Close()
		upCancel()
		return nil, nil, nil, err
	}
	held, err := first(st)
	if err != nil {
		call.Release(r.Context())
		if r.Context().Err() == nil && upCtx.Err() != nil {
			// The first-content timer fired, not the client.
			return fail(&apiError{Status: http.StatusGatewayTimeout, Type: upstream.TypeUpstream, Code: upstream.CodeTimeout,
				Message: "the upstream sent no content in time; nothing was charged", Err: err})
		}
		return fail(s.upstreamError(err, r.Context()))
	}
	firstTimer.Stop()
	s.metrics.upstreamLatency(call.q.model.ID, s.now().Sub(start))
	if r.Context().Err() != nil {
		call.Release(r.Context())
		return fail(&apiError{Status: upstream.StatusClientClosed, Type: "invalid_request_error", Code: "client_closed", Message: "the client went away; nothing was charged"})
	}

	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Should-Retry", "false")
	w.WriteHeader(http.StatusOK)
	return st, held, upCancel, nil
}

// firstContent reads st up to and including its first chunk with content (a
// role-only delta does not count, D2) and returns the events read.
func firstContent(st upstream.Stream) ([][]byte, error) {
	var held [][]byte
	for {
		ev, err := st.Next()
		if errors.Is(err, io.EOF) {
			return nil, errors.New("the upstream stream ended before any content")
		}
		if err != nil {
			return nil, err
		}
		held = append(held, ev)
		var c chat.Chunk
		if json.Unmarshal(ev, &c) != nil {
			return nil, errors.New("the upstream sent a chunk that is not JSON")
		}
		if c.HasContent() {
			return held, nil
		}
	}
}

// clientLeft ends a stream whose client went away mid-way: it is charged for
// what it was sent, counted, or nothing if that was no content at all. The
// upstream's own usage counts only if the client had every content event
// before it left (the usage chunk comes last).
func (s *Server) clientLeft(ctx context.Context, call *creditCall, cs *creditSSE) {
	if !cs.content {
		call.Release(ctx)
		s.log.Info("client left before any content was delivered; nothing charged", "request_id", call.ID)
		return
	}
	u, ok := cs.usage()
	if !ok {
		u = s.countedUsage(call, cs)
	}
	out := s.captureCredit(ctx, call, u)
	s.log.Info("client left mid-stream; charged what was delivered", "request_id", call.ID,
		"output_tokens", u.CompletionTokens, "charged", out.info.Charged)
}

// countedUsage is the usage of what cs delivered: the quoted prompt and the
// delivered output, counted as the quote counts.
func (s *Server) countedUsage(call *creditCall, cs *creditSSE) chat.Usage {
	out := cs.tokens + s.countOutput(call, cs.text.String())
	return chat.Usage{PromptTokens: call.q.promptTokens, CompletionTokens: out, TotalTokens: call.q.promptTokens + out}
}

// maxPendingText bounds the delivered text kept for counting; past it the
// text is counted and dropped (a split word may count one token more).
const maxPendingText = 1 << 20

// creditSSE writes a credit-paid stream and remembers what it delivered.
type creditSSE struct {
	sw *sseWriter
	// text is the delivered output not yet counted; tokens what was counted
	// of it so far (flushCount). content says whether any content event was
	// delivered.
	text    strings.Builder
	tokens  int64
	content bool
	count   func(string) int64
	// usageEv is the upstream's usage chunk, held back until the end; last
	// the last event read, whose id and model a made-up usage chunk reuses.
	usageEv []byte
	last    []byte
}

// send writes events, holding back a usage chunk, and records what was
// delivered: an event counts once it was written and flushed.
func (cs *creditSSE) send(evs ...[]byte) {
	var sent [][]byte
	for _, ev := range evs {
		cs.last = ev
		if hasUsage(ev) {
			cs.usageEv = ev
			continue
		}
		cs.sw.event(ev)
		sent = append(sent, ev)
	}
	cs.sw.flush()
	if cs.sw.gone {
		return
	}
	for _, ev := range sent {
		cs.record(ev)
	}
}

// deliver writes the final event.
func (cs *creditSSE) deliver(ev []byte) {
	cs.sw.event(ev)
	cs.sw.flush()
}

// record adds a delivered event's output to the text to count.
func (cs *creditSSE) record(ev []byte) {
	var c struct {
		Choices []struct {
			Delta struct {
				Content      *string    `json:"content"`
				RefusalError *string    `json:"refusal"`
				ToolCalls    []toolCall `json:"tool_calls"`
			} `json:"delta"`
		} `json:"choices"`
	}
	if json.Unmarshal(ev, &c) != nil {
		return
	}
	n := cs.text.Len()
	for _, ch := range c.Choices {
		d := ch.Delta
		if d.Content != nil {
			cs.text.WriteString(*d.Content)
		}
		if d.RefusalError != nil {
			cs.text.WriteString(*d.RefusalError)
		}
		for _, tc := range d.ToolCalls {
			cs.text.WriteString(tc.Function.Name)
			cs.text.WriteString(tc.Function.Arguments)
		}
	}
	if cs.text.Len() > n {
		cs.content = true
	}
	if cs.text.Len() > maxPendingText && cs.count != nil {
		cs.tokens += cs.count(cs.text.String())
		cs.text.Reset()
	}
}

// usage returns the upstream's usage, if its usage chunk came.
func (cs *creditSSE) usage() (chat.Usage, bool) {
	if cs.usageEv == nil {
		return chat.Usage{}, false
	}
	var c struct {
		Usage *chat.Usage `json:"usage"`
	}
	if json.Unmarshal(cs.usageEv, &c) != nil || c.Usage == nil {
		return chat.Usage{}, false
	}
	return *c.Usage, true
}

// hasUsage reports whether ev carries a usage object (OpenAI sends
// "usage":null on the other chunks).
func hasUsage(ev []byte) bool {
	if !bytes.Contains(ev, []byte(`"usage"`)) {
		return false
	}
	var c struct {
		Usage *chat.Usage `json:"usage"`
	}
	return json.Unmarshal(ev, &c) == nil && c.Usage != nil
}

// usageChunk makes the final usage chunk of a stream whose upstream sent none,
// so the receipt has a place (D18): an OpenAI usage chunk with no choices,
// with the id, creation time and model of last.
func usageChunk(last []byte, u chat.Usage) []byte {
	var meta struct {
		ID      string `json:"id"`
		Created int64  `json:"created"`
		Model   string `json:"model"`
	}
	_ = json.Unmarshal(last, &meta)
	return mustJSON(struct {
		ID      string     `json:"id"`
		Object  string     `json:"object"`
		Created int64      `json:"created"`
		Model   string     `json:"model"`
		Choices []struct{} `json:"choices"`
		Usage   chat.Usage `json:"usage"`
	}{meta.ID, "chat.completion.chunk", meta.Created, meta.Model, []struct{}{}, u})
}
