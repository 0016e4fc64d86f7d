package gateway

import (
	"errors"
	"io"
	"net/http"
	"strings"

	"github.com/llm4agents/llm4agents/internal/chat"
	"github.com/llm4agents/llm4agents/internal/responses"
	"github.com/llm4agents/llm4agents/internal/upstream"
)

// A passed-through Responses stream is paid by the rules of a chat stream
// (D2, D27, D16): only the events are read differently. An upstream event
// is kept as its data and its type (respEvent); it goes to the buyer, and
// into the recorded text, as "event: <type>\ndata: <data>\n\n", the final
// event annotated with the charge inside its response object. There is no
// "[DONE]": a Responses stream ends with its final event.

// respEvent is one event of an upstream Responses stream.
type respEvent struct {
	data []byte
	ev   responses.Event
}

// nextEvent reads the next event of st.
func nextEvent(st upstream.Stream) (respEvent, error) {
	data, err := st.Next()
	if err != nil {
		return respEvent{}, err
	}
	ev, err := responses.ReadEvent(data)
	if err != nil {
		return respEvent{}, err
	}
	return respEvent{data: data, ev: ev}, nil
}

// streamEvent is e as the paid stream (stream, deliverThenSettle) sees it.
func (e respEvent) streamEvent() streamEvent {
	return streamEvent{data: e.data, typ: e.ev.Type, final: e.ev.Final(), usage: e.ev.Usage}
}

// firstForwardContent reads st up to and including its first event with
// content (D2: response.created and the like do not count) and returns the
// events read. A stream whose final event comes before any content failed
// to answer: nothing is charged for it.
func firstForwardContent(st upstream.Stream) ([]respEvent, error) {
	var held []respEvent
	for {
		e, err := nextEvent(st)
		if errors.Is(err, io.EOF) || (err == nil && e.ev.Final() && !e.ev.HasContent()) {
			return nil, errors.New("the upstream stream ended before any content")
		}
		if err != nil {
			return nil, err
		}
		held = append(held, e)
		if e.ev.HasContent() {
			return held, nil
		}
	}
}

// brokenEvent is the in-band error event of a stream that broke after the
// payment: the Responses API's "error" event.
func brokenEvent(msg string) respEvent {
	data := mustJSON(struct {
		Type    string `json:"type"`
		Code    string `json:"code"`
		Message string `json:"message"`
		Param   any    `json:"param"`
	}{"error", "upstream_stream_broken", msg, nil})
	return respEvent{data: data, ev: responses.Event{Type: "error"}}
}

// creditForwardStream is creditStream for a passed-through call (D16): the
// upstream is read until its first event with content, then events go to
// the client as they come, the final event held back to carry the charge
// and the receipt. A client that leaves stops the upstream and is charged
// for the output it was sent, counted; one gone before any content is
// charged nothing.
func (s *Server) creditForwardStream(w http.ResponseWriter, r *http.Request, call *creditCall, rp upstream.Responder, body []byte) error {
	st, held, upCancel, err := startCreditStream(s, w, r, call, rp.StreamResponses, firstForwardContent, body)
	if err != nil {
		return err
	}
	defer upCancel()
	defer func() { _ = st.Close() }()
	cs := &creditForwardSSE{sw: &sseWriter{w: w, rc: http.NewResponseController(w)},
		count: func(text string) int64 { return s.countOutput(call, text) }}
	cs.send(held...)
	var broken error
	for !cs.sw.gone && cs.final == nil {
		e, err := nextEvent(st)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			broken = err
			break
		}
		cs.send(e)
	}
	counted := func() chat.Usage {
		out := cs.tokens + s.countOutput(call, cs.text.String())
		return chat.Usage{PromptTokens: call.q.promptTokens, CompletionTokens: out, TotalTokens: call.q.promptTokens + out}
	}
	if cs.sw.gone || r.Context().Err() != nil {
		upCancel()
		if !cs.content {
			call.Release(r.Context())
			s.log.Info("client left before any content was delivered; nothing charged", "request_id", call.ID)
			return nil
		}
		out := s.captureCredit(r.Context(), call, counted())
		s.log.Info("client left mid-stream; charged what was delivered", "request_id", call.ID, "charged", out.info.Charged)
		return nil
	}
	var u chat.Usage
	if cs.final != nil && cs.final.ev.Usage != nil {
		u = *cs.final.ev.Usage
	} else {
		u = counted()
		s.log.Warn("stream without usage; charging what was delivered, counted", "request_id", call.ID, "model", call.q.model.ID)
	}
	out := s.captureCredit(r.Context(), call, u)
	if cs.final != nil {
		cs.sw.write(frame(cs.final.ev.Type, annotateResponse(cs.final.data, out.info)))
	} else {
		if broken != nil {
			s.log.Error("upstream stream broke mid-way; charged what was delivered", "request_id", call.ID, "err", broken)
		}
		b := brokenEvent("the upstream stream broke; you were charged for what was delivered")
		cs.sw.write(frame(b.ev.Type, annotate(b.data, out.info)))
	}
	cs.sw.flush()
	return nil
}

// creditForwardSSE writes a credit-paid Responses stream and remembers what
// it delivered.
type creditForwardSSE struct {
	sw *sseWriter
	// text is the delivered output not yet counted, to count when the
	// upstream reports no usage, and tokens what was counted of it so far;
	// content says whether any content event was delivered.
	text    strings.Builder
	tokens  int64
	count   func(string) int64
	content bool
	// final is the upstream's final event, held back until the end.
	final *respEvent
}

// send writes events, holding back the final one, and records what was
// delivered once written and flushed.
func (cs *creditForwardSSE) send(evs ...respEvent) {
	var sent []respEvent
	for _, e := range evs {
		if e.ev.Final() {
			cs.final = &e
			continue
		}
		cs.sw.write(frame(e.ev.Type, e.data))
		sent = append(sent, e)
	}
	cs.sw.flush()
	if cs.sw.gone {
		return
	}
	for _, e := range sent {
		if e.ev.HasContent() {
			cs.content = true
		}
		cs.text.WriteString(e.ev.Delta)
		if cs.text.Len() > maxPendingText {
			cs.tokens += cs.count(cs.text.String())
			cs.text.Reset()
		}
	}
}
