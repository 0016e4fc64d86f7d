package gateway

import (
	"bytes"
	"net/http"
	"strings"

	"github.com/llm4agents/llm4agents/internal/responses"
)

// responses serves POST /v1/responses. A model whose providers speak the
// Responses API gets the request passed through (responses_forward.go).
// For any other, the request becomes the chat completion that carries it
// (internal/responses), which is priced, paid and forwarded as one sent to
// /v1/chat/completions, every payment path included; its answer is turned
// back into a Response object, or into the Responses event stream, on its
// way out.
func (s *Server) responses(w http.ResponseWriter, r *http.Request) error {
	body, err := s.readBody(w, r)
	if err != nil {
		return err
	}
	if rp := s.responder(body); rp != nil {
		return s.forwardResponses(w, r, body, rp)
	}
	req, err := responses.ParseRequest(body)
	if err != nil {
		return refusedResponses(chatOnly(body, err))
	}
	rw := &responsesWriter{w: w, req: req}
	err = s.serveChat(rw, r, req.Chat())
	rw.finish(s)
	return err
}

// What a responsesWriter does with what is written to it, decided at the
// status: a 200 chat.completion is held and turned into a Response at the
// end; a 200 event stream is turned into Responses events as it goes;
// anything else (an error, a 402) passes through as written, since both APIs
// share the OpenAI error body.
const (
	rwUndecided = iota
	rwPassThrough
	rwHold
	rwStream
)

// responsesWriter turns the chat answer written to it into the Responses
// API's. Headers (payment, receipt, request id) pass through untouched.
type responsesWriter struct {
	w    http.ResponseWriter
	req  *responses.Request
	mode int
	// buf holds the chat.completion (rwHold), or the start of an event not
	// yet ended (rwStream).
	buf bytes.Buffer
	st  *responses.Stream
}

func (t *responsesWriter) Header() http.Header { return t.w.Header() }

func (t *responsesWriter) WriteHeader(code int) {
	if t.mode != rwUndecided {
		return
	}
	ct := t.w.Header().Get("Content-Type")
	switch {
	case code == http.StatusOK && strings.HasPrefix(ct, "application/json"):
		t.mode = rwHold
		return
	case code == http.StatusOK && strings.HasPrefix(ct, "text/event-stream"):
		t.mode, t.st = rwStream, t.req.NewStream()
	default:
		t.mode = rwPassThrough
	}
	t.w.WriteHeader(code)
}

func (t *responsesWriter) Write(b []byte) (int, error) {
	if t.mode == rwUndecided {
		t.WriteHeader(http.StatusOK)
	}
	switch t.mode {
	case rwPassThrough:
		return t.w.Write(b)
	case rwHold:
		return t.buf.Write(b)
	}
	t.buf.Write(b)
	for {
		i := bytes.Index(t.buf.Bytes(), []byte("\n\n"))
		if i < 0 {
			return len(b), nil
		}
		if err := t.event(t.buf.Next(i + 2)); err != nil {
			return len(b), err
		}
	}
}

// event translates one chat event: its data line, if it has one.
func (t *responsesWriter) event(ev []byte) error {
	for line := range bytes.Lines(ev) {
		data, ok := bytes.CutPrefix(bytes.TrimRight(line, "\r\n"), []byte("data: "))
		if !ok {
			continue
		}
		out, err := t.st.Event(data)
		if err != nil {
			return err
		}
		if len(out) > 0 {
			if _, err := t.w.Write(out); err != nil { // #nosec G705 -- server-sent events of JSON, not HTML
				return err
			}
		}
	}
	return nil
}

// FlushError flushes what has been written through; nothing while the
// answer is held whole.
func (t *responsesWriter) FlushError() error {
	if t.mode == rwHold {
		return nil
	}
	return http.NewResponseController(t.w).Flush()
}

// Unwrap lets http.ResponseController reach the connection (deadlines).
func (t *responsesWriter) Unwrap() http.ResponseWriter { return t.w }

// finish writes a held chat.completion as a Response. A paid answer that
// cannot be turned into one is delivered as the chat completion it is,
// never dropped.
func (t *responsesWriter) finish(s *Server) {
	if t.mode != rwHold {
		return
	}
	out, err := t.req.Completion(t.buf.Bytes())
	if err != nil {
		s.log.Error("a chat answer could not be turned into a Response; it is delivered as a chat completion", "err", err)
		out = t.buf.Bytes()
	}
	t.w.Header().Del("Content-Length")
	t.w.WriteHeader(http.StatusOK)
	_, _ = t.w.Write(out) // #nosec G705 -- a JSON body sent as application/json, not HTML
}
