// Package upstreamtest provides Server, a fake OpenAI-compatible upstream on
// httptest for tests and benchmarks of the gateway. It answers
// POST /v1/chat/completions, POST /v1/embeddings and POST /v1/responses as
// the OpenAI API documents them (bearer key check, OpenAI error JSON, SSE with
// "data: [DONE]", usage in the last chunk when stream_options.include_usage
// is set; an embeddings list with one vector per input, floats or base64; a
// Response object, or the Responses events from response.created to
// response.completed, each named by an "event:" line, with no "[DONE]"),
// with the upstream.Demo model's deterministic content and vectors and real
// usage accounting. It counts calls, records the last request, and injects
// faults: error statuses, slow or missing headers, broken or stalled streams,
// missing usage.
package upstreamtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llm4agents/llm4agents/internal/chat"
	"github.com/llm4agents/llm4agents/internal/embeddings"
	"github.com/llm4agents/llm4agents/internal/upstream"
)

// Config configures a Server. The zero value accepts any key and any model.
type Config struct {
	// APIKey, when set, is the bearer every request must carry; others get 401
	// invalid_api_key, as OpenAI answers.
	APIKey string
	// Models, when set, are the only models served; others get 404
	// model_not_found.
	Models []string
	// Demo configures the model behind the server.
	Demo upstream.DemoConfig
}

// Fault is what the Server does wrong. The zero value is a well-behaved
// upstream; fields combine where that makes sense (HeaderDelay with anything).
type Fault struct {
	// Status answers this status with an OpenAI error body (Body, or the one
	// OpenAI sends for that status) instead of a completion.
	Status int
	// Body replaces the error body of Status.
	Body string
	// RetryAfter is sent as Retry-After with Status.
	RetryAfter string
	// HeaderDelay waits this long before the response headers.
	HeaderDelay time.Duration
	// Hang never answers: the handler waits until the client goes away.
	Hang bool
	// Garbage answers a stream with 200 and an event that is not JSON, then
	// ends.
	Garbage bool
	// Drop answers a stream with 200 and headers, then drops the connection
	// before the first event (a non-stream: before the body).
	Drop bool
	// StallAfter, when positive, sends that many events of a stream, then
	// stalls until the client goes away.
	StallAfter int
	// DropAfter, when positive, sends that many events of a stream, then
	// drops the connection.
	DropAfter int
	// NoUsage leaves usage out: no usage chunk in a stream, no usage field in
	// a completion.
	NoUsage bool
	// NoDone ends a stream without "data: [DONE]" (a Responses stream:
	// without its final event).
	NoDone bool
}

// Request is a request as the server received it.
type Request struct {
	Header http.Header
	Body   []byte
}

// Server is a running fake upstream. Its methods are safe for concurrent use.
type Server struct {
	srv   *httptest.Server
	cfg   Config
	demo  *upstream.Demo
	calls atomic.Int64
	quit  chan struct{}
	gone  chan struct{}

	closeOnce sync.Once

	mu    sync.Mutex
	last  Request
	fault Fault
}

// NewServer starts a Server and closes it when tb's test ends.
func NewServer(tb testing.TB, cfg Config) *Server {
	tb.Helper()
	s := &Server{
		cfg:  cfg,
		demo: upstream.NewDemo(cfg.Demo),
		quit: make(chan struct{}),
		gone: make(chan struct{}, 64),
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", s.chat)
	mux.HandleFunc("POST /v1/embeddings", s.embeddings)
	mux.HandleFunc("POST /v1/responses", s.responses)
	s.srv = httptest.NewServer(mux)
	tb.Cleanup(s.Close)
	return s
}

// URL is the base URL to configure a provider with, ending in "/v1".
func (s *Server) URL() string { return s.srv.URL + "/v1" }

// Calls is the number of requests received (chat completions and
// embeddings), faulted or not.
func (s *Server) Calls() int64 { return s.calls.Load() }

// LastRequest returns the headers and body of the last request.
func (s *Server) LastRequest() Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Request{Header: s.last.Header.Clone(), Body: bytes.Clone(s.last.Body)}
}

// SetFault sets what the following requests get.
func (s *Server) SetFault(f Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fault = f
}

// ClientGone receives a value each time a request ends because the client went
// away while the server was still answering (it keeps up to 64 unread).
func (s *Server) ClientGone() <-chan struct{} { return s.gone }

// Close stops the server, ending hung and stalled handlers first. It is
// idempotent.
func (s *Server) Close() {
	s.closeOnce.Do(func() {
		close(s.quit)
		s.srv.CloseClientConnections()
		s.srv.Close()
	})
}

// begin does what every route does first: count and record the request,
// then the faults that come before an answer (HeaderDelay, Hang), the key
// check and a faulted status. ok is false when the request is answered.
func (s *Server) begin(w http.ResponseWriter, r *http.Request) (body []byte, f Fault, ok bool) {
	s.calls.Add(1)
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 16<<20))
	s.mu.Lock()
	s.last = Request{Header: r.Header.Clone(), Body: body}
	f = s.fault
	s.mu.Unlock()
	if err != nil {
		writeError(w, http.StatusRequestEntityTooLarge, "Request too large.", "invalid_request_error", "", nil)
		return nil, f, false
	}
	ctx := r.Context()
	if f.HeaderDelay > 0 && !s.wait(ctx, time.After(f.HeaderDelay)) {
		return nil, f, false
	}
	if f.Hang {
		s.wait(ctx, nil)
		return nil, f, false
	}
	if s.cfg.APIKey != "" && r.Header.Get("Authorization") != "Bearer "+s.cfg.APIKey {
		writeError(w, http.StatusUnauthorized, "Incorrect API key provided: sk-****. You can find your API key at https://platform.openai.com/account/api-keys.",
			"invalid_request_error", "invalid_api_key", nil)
		return nil, f, false
	}
	if f.Status != 0 {
		s.writeFault(w, f)
		return nil, f, false
	}
	return body, f, true
}

// serves reports whether the server has model, and answers 404 as OpenAI
// does when it has not.
func (s *Server) serves(w http.ResponseWriter, model string) bool {
	if len(s.cfg.Models) > 0 && !slices.Contains(s.cfg.Models, model) {
		writeError(w, http.StatusNotFound, fmt.Sprintf("The model `%s` does not exist or you do not have access to it.", model),
			"invalid_request_error", "model_not_found", nil)
		return false
	}
	return true
}

func (s *Server) chat(w http.ResponseWriter, r *http.Request) {
	body, f, ok := s.begin(w, r)
	if !ok {
		return
	}
	req, err := chat.ParseRequest(body)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error(), "invalid_request_error", "", nil)
		return
	}
	if !s.serves(w, req.Model) {
		return
	}
	w.Header().Set("X-Request-Id", "req_"+requestID(body))
	w.Header().Set("Openai-Organization", "org-upstreamtest") // not to be passed on
	if req.Stream {
		s.stream(w, r, body, f)
		return
	}
	s.complete(w, r, body, f)
}

func (s *Server) complete(w http.ResponseWriter, r *http.Request, body []byte, f Fault) {
	c, err := s.demo.Complete(r.Context(), body)
	if err != nil {
		writeUpstreamError(w, err)
		return
	}
	s.writeJSON(w, c.Body, f)
}

// writeJSON answers 200 with out, less its usage under NoUsage, cut short
// under Drop.
func (s *Server) writeJSON(w http.ResponseWriter, out []byte, f Fault) {
	if f.NoUsage {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(out, &m); err == nil {
			delete(m, "usage")
			out, _ = json.Marshal(m)
		}
	}
	if f.Drop {
		w.Header().Set("Content-Length", fmt.Sprint(len(out)))
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(out[:len(out)/2])
		_ = http.NewResponseController(w).Flush()
		panic(http.ErrAbortHandler) // the connection drops mid-body
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(out)
}

// embeddings answers POST /v1/embeddings with the demo's vectors. Of the
// faults, NoUsage leaves usage out and Drop cuts the body; a Status with a
// Body answers that body (a 200 with the wrong shape, say).
func (s *Server) embeddings(w http.ResponseWriter, r *http.Request) {
	body, f, ok := s.begin(w, r)
	if !ok {
		return
	}
	req, err := embeddings.ParseRequest(body)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error(), "invalid_request_error", "", "input")
		return
	}
	if !s.serves(w, req.Model) {
		return
	}
	w.Header().Set("X-Request-Id", "req_"+requestID(body))
	c, err := s.demo.Embed(r.Context(), body)
	if err != nil {
		writeUpstreamError(w, err)
		return
	}
	s.writeJSON(w, c.Body, f)
}

func (s *Server) stream(w http.ResponseWriter, r *http.Request, body []byte, f Fault) {
	st, err := s.demo.Stream(r.Context(), body)
	if err != nil {
		writeUpstreamError(w, err)
		return
	}
	s.sendStream(w, r, st, f, chatSSE)
}

// sseShape is what tells one event stream from another in sendStream.
type sseShape struct {
	// garbage is a cut event, sent alone for Fault.Garbage.
	garbage string
	// event frames upstream event ev as sent under f: skip drops it, stop
	// ends the stream before it.
	event func(ev []byte, f Fault) (frame []byte, skip, stop bool)
	// done follows the last event unless Fault.NoDone; "" for none.
	done string
}

// chatSSE is the chat completions stream: data lines, the usage chunk
// dropped for Fault.NoUsage, and [DONE].
var chatSSE = sseShape{
	garbage: "data: {\"id\":\"chatcmpl-broken\",\"choices\":[{\"delta\":{\"content\":\"hel\n\n",
	event: func(ev []byte, f Fault) ([]byte, bool, bool) {
		if f.NoUsage && bytes.Contains(ev, []byte(`"usage":{`)) {
			return nil, true, false
		}
		return fmt.Appendf(nil, "data: %s\n\n", ev), false, false
	},
	done: "data: [DONE]\n\n",
}

// sendStream writes st to the client as shape frames it, with f's faults:
// a dropped connection, garbage, a stall or a drop after some events.
func (s *Server) sendStream(w http.ResponseWriter, r *http.Request, st upstream.Stream, f Fault, shape sseShape) {
	ctx := r.Context()
	defer func() { _ = st.Close() }()
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	_ = rc.Flush()
	switch {
	case f.Drop:
		panic(http.ErrAbortHandler)
	case f.Garbage:
		_, _ = io.WriteString(w, shape.garbage)
		_ = rc.Flush()
		return
	}
	sent := 0
	for {
		if (f.StallAfter > 0 && sent == f.StallAfter) || (f.DropAfter > 0 && sent == f.DropAfter) {
			_ = rc.Flush()
			if f.DropAfter > 0 {
				panic(http.ErrAbortHandler)
			}
			s.wait(ctx, nil)
			return
		}
		ev, err := st.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			s.clientGone(ctx)
			return
		}
		frame, skip, stop := shape.event(ev, f)
		if stop {
			break
		}
		if skip {
			continue
		}
		if _, err := w.Write(frame); err != nil {
			s.clientGone(ctx)
			return
		}
		if err := rc.Flush(); err != nil {
			s.clientGone(ctx)
			return
		}
		sent++
	}
	if shape.done != "" && !f.NoDone {
		_, _ = io.WriteString(w, shape.done)
	}
	_ = rc.Flush()
}

// wait blocks until c receives (true), the client goes away or the server
// closes (false). A nil c waits for the latter two.
func (s *Server) wait(ctx context.Context, c <-chan time.Time) bool {
	select {
	case <-c:
		return true
	case <-ctx.Done():
		s.clientGone(ctx)
	case <-s.quit:
	}
	return false
}

func (s *Server) clientGone(ctx context.Context) {
	if ctx.Err() == nil {
		return
	}
	select {
	case s.gone <- struct{}{}:
	default:
	}
}

// writeFault answers f.Status with f.Body or what OpenAI sends for it.
func (s *Server) writeFault(w http.ResponseWriter, f Fault) {
	if f.RetryAfter != "" {
		w.Header().Set("Retry-After", f.RetryAfter)
	}
	if f.Body != "" {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(f.Status)
		_, _ = io.WriteString(w, f.Body)
		return
	}
	switch f.Status {
	case http.StatusUnauthorized:
		writeError(w, f.Status, "Incorrect API key provided: sk-****. You can find your API key at https://platform.openai.com/account/api-keys.",
			"invalid_request_error", "invalid_api_key", nil)
	case http.StatusTooManyRequests:
		writeError(w, f.Status, "Rate limit reached for demo in organization org-upstreamtest on requests per min (RPM): Limit 3, Used 3, Requested 1.",
			"requests", "rate_limit_exceeded", nil)
	case http.StatusBadRequest:
		writeError(w, f.Status, "Invalid value for 'temperature': must be between 0 and 2.", "invalid_request_error", "invalid_value", "temperature")
	default:
		if f.Status >= 500 {
			writeError(w, f.Status, "The server had an error while processing your request. Sorry about that! (internal detail: shard 7)", "server_error", "", nil)
			return
		}
		writeError(w, f.Status, http.StatusText(f.Status), "invalid_request_error", "", nil)
	}
}

// writeError writes OpenAI's error JSON; an empty code is null.
func writeError(w http.ResponseWriter, status int, msg, typ, code string, param any) {
	var c any
	if code != "" {
		c = code
	}
	b, _ := json.Marshal(chat.ErrorBody{Error: chat.ErrorDetail{Message: msg, Type: typ, Param: param, Code: c}})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

func writeUpstreamError(w http.ResponseWriter, err error) {
	if e, ok := errors.AsType[*upstream.Error](err); ok {
		writeError(w, e.Status, e.Message, e.Type, e.Code, nil)
		return
	}
	writeError(w, http.StatusInternalServerError, "internal error", "server_error", "", nil)
}

func requestID(body []byte) string {
	h := fnv.New64a()
	_, _ = h.Write(body)
	return fmt.Sprintf("%016x", h.Sum64())
}
