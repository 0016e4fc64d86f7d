package upstream_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/llm4agents/llm4agents/internal/chat"
	"github.com/llm4agents/llm4agents/internal/upstream"
	"github.com/llm4agents/llm4agents/internal/upstream/upstreamtest"
)

const testKey = "sk-upstream-test-0123456789"

// logBuffer collects log output; safe for concurrent use.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// newOpenAI returns a provider for srv with the test key, logging into the
// returned buffer.
func newOpenAI(tb testing.TB, srv *upstreamtest.Server, cfg upstream.OpenAIConfig) (*upstream.OpenAI, *logBuffer) {
	tb.Helper()
	cfg.BaseURL = srv.URL()
	if cfg.APIKey == "" {
		cfg.APIKey = testKey
	}
	logs := &logBuffer{}
	o, err := upstream.NewOpenAI(cfg, slog.New(slog.NewTextHandler(logs, nil)))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(o.CloseIdleConnections)
	return o, logs
}

func streamBody(tb testing.TB, msg string) []byte {
	return reqBody(tb, msg, map[string]any{"stream": true, "stream_options": map[string]any{"include_usage": true}})
}

func TestOpenAIComplete(t *testing.T) {
	srv := upstreamtest.NewServer(t, upstreamtest.Config{APIKey: testKey})
	o, logs := newOpenAI(t, srv, upstream.OpenAIConfig{})
	body := reqBody(t, "hello upstream", map[string]any{"max_tokens": 30})
	c, err := o.Complete(t.Context(), body)
	if err != nil {
		t.Fatal(err)
	}
	want, err := upstream.NewDemo(upstream.DemoConfig{}).Complete(t.Context(), body)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want.Usage, c.Usage); diff != "" || !c.UsageReported {
		t.Errorf("usage (-want +got):\n%s", diff)
	}
	var got, wantBody openAICompletion
	decodeStrict(t, c.Body, &got)
	decodeStrict(t, want.Body, &wantBody)
	if got.Choices[0].Message.Content != wantBody.Choices[0].Message.Content || got.ID != wantBody.ID {
		t.Errorf("body %s, want the demo's %s", c.Body, want.Body)
	}
	if c.Header.Get("X-Request-Id") == "" || len(c.Header) != 1 {
		t.Errorf("Header = %v, want X-Request-Id only", c.Header)
	}
	if strings.Contains(logs.String(), "WARN") {
		t.Errorf("unexpected warning: %s", logs)
	}

	// Without usage: accepted, zero, and a warning.
	srv.SetFault(upstreamtest.Fault{NoUsage: true})
	c, err = o.Complete(t.Context(), body)
	if err != nil {
		t.Fatal(err)
	}
	if c.UsageReported || c.Usage.TotalTokens != 0 || !strings.Contains(logs.String(), "no usage") {
		t.Errorf("without usage: reported %v, usage %+v, log %q", c.UsageReported, c.Usage, logs)
	}
}

// readStream reads s to its end and returns the events and the final error.
func readStream(s upstream.Stream) ([]string, error) {
	var evs []string
	for {
		ev, err := s.Next()
		if err != nil {
			return evs, err
		}
		evs = append(evs, string(ev))
	}
}

func TestOpenAIStream(t *testing.T) {
	srv := upstreamtest.NewServer(t, upstreamtest.Config{APIKey: testKey})
	o, logs := newOpenAI(t, srv, upstream.OpenAIConfig{})
	body := streamBody(t, "stream me")
	s, err := o.Stream(t.Context(), body)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	evs, err := readStream(s)
	if !errors.Is(err, io.EOF) {
		t.Fatalf("stream ended with %v", err)
	}
	want := streamAll(t, upstream.NewDemo(upstream.DemoConfig{}), body)
	if len(evs) != len(want) {
		t.Fatalf("%d events, want the demo's %d", len(evs), len(want))
	}
	var last openAIChunk
	decodeStrict(t, []byte(evs[len(evs)-1]), &last)
	u, ok := s.Usage()
	if !ok || last.Usage == nil || last.Usage.CompletionTokens == 0 {
		t.Fatalf("Usage() = %+v, %v; last chunk %s", u, ok, evs[len(evs)-1])
	}
	if diff := cmp.Diff(*last.Usage, u); diff != "" {
		t.Errorf("Usage() is not the last chunk's usage (-chunk +Usage):\n%s", diff)
	}
	if _, err := s.Next(); !errors.Is(err, io.EOF) {
		t.Errorf("Next after [DONE] = %v, want io.EOF", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("Close = %v", err)
	}
	if strings.Contains(logs.String(), "WARN") {
		t.Errorf("unexpected warning: %s", logs)
	}

	// Without usage: the stream ends cleanly, Usage reports none, a warning.
	srv.SetFault(upstreamtest.Fault{NoUsage: true})
	s, err = o.Stream(t.Context(), body)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	if evs, err := readStream(s); !errors.Is(err, io.EOF) || len(evs) != len(want)-1 {
		t.Errorf("without usage: %d events, end %v", len(evs), err)
	}
	if _, ok := s.Usage(); ok || !strings.Contains(logs.String(), "without usage") {
		t.Errorf("without usage: Usage() ok = %v, log %q", ok, logs)
	}
}

// wantErr describes an expected *upstream.Error.
type wantErr struct {
	status int
	code   string
	typ    string // checked when set
	msg    string // checked when set: Message equals it
	hidden string // must not be in Message (upstream detail), but is in Error()
	eof    bool   // wraps io.ErrUnexpectedEOF
	retry  time.Duration
}

func checkErr(t *testing.T, err error, w wantErr) {
	t.Helper()
	e, ok := errors.AsType[*upstream.Error](err)
	if !ok {
		t.Fatalf("error %v (%T), want *upstream.Error", err, err)
	}
	if e.Status != w.status || e.Code != w.code {
		t.Errorf("error = %d %s (%v), want %d %s", e.Status, e.Code, err, w.status, w.code)
	}
	if w.typ != "" && e.Type != w.typ {
		t.Errorf("type = %q, want %q", e.Type, w.typ)
	}
	if w.msg != "" && e.Message != w.msg {
		t.Errorf("message = %q, want %q", e.Message, w.msg)
	}
	if w.hidden != "" && (strings.Contains(e.Message, w.hidden) || !strings.Contains(err.Error(), w.hidden)) {
		t.Errorf("message %q should hide, and Error() %q keep, %q", e.Message, err.Error(), w.hidden)
	}
	if got := errors.Is(err, io.ErrUnexpectedEOF); got != w.eof {
		t.Errorf("errors.Is(err, io.ErrUnexpectedEOF) = %v, want %v (%v)", got, w.eof, err)
	}
	if e.RetryAfter != w.retry {
		t.Errorf("RetryAfter = %v, want %v", e.RetryAfter, w.retry)
	}
	if strings.Contains(err.Error(), testKey) || strings.Contains(e.Message, testKey) {
		t.Errorf("the upstream key leaks in %q", err)
	}
}

func TestOpenAIFaults(t *testing.T) {
	const (
		short = 300 * time.Millisecond
		long  = 10 * time.Second
	)
	upstream502 := wantErr{status: 502, code: upstream.CodeError, typ: upstream.TypeUpstream, msg: "the upstream provider failed to answer"}
	bad := wantErr{status: 502, code: upstream.CodeBadResponse}
	timedOut := wantErr{status: 504, code: upstream.CodeTimeout}
	tests := []struct {
		name   string
		fault  upstreamtest.Fault
		models []string
		cfg    upstream.OpenAIConfig
		// For Complete: want. For Stream: Stream() fails with want when
		// events < 0, else Next fails with want after that many events.
		complete *wantErr
		stream   *wantErr
		events   int
	}{
		{name: "500", fault: upstreamtest.Fault{Status: 500},
			complete: with(upstream502, "shard 7"), stream: with(upstream502, "shard 7"), events: -1},
		{name: "503 plain text", fault: upstreamtest.Fault{Status: 503, Body: "upstream connect error"},
			complete: with(upstream502, "upstream connect error"), stream: with(upstream502, "upstream connect error"), events: -1},
		{name: "401", fault: upstreamtest.Fault{Status: 401}, complete: &upstream502, stream: &upstream502, events: -1},
		{name: "401 from the key check", cfg: upstream.OpenAIConfig{APIKey: "sk-wrong-key"},
			complete: &upstream502, stream: &upstream502, events: -1},
		{name: "403", fault: upstreamtest.Fault{Status: 403, Body: `{"error":{"message":"Project does not have access","type":"invalid_request_error","code":"unsupported_country_region_territory"}}`},
			complete: &upstream502, stream: &upstream502, events: -1},
		{name: "402 from upstream is never the client's 402", fault: upstreamtest.Fault{Status: 402, Body: `{"error":{"message":"out of credit","type":"billing"}}`},
			complete: &upstream502, stream: &upstream502, events: -1},
		{name: "429", fault: upstreamtest.Fault{Status: 429, RetryAfter: "7"},
			complete: &wantErr{status: 429, code: "rate_limit_exceeded", typ: "requests", hidden: "org-upstreamtest", retry: 7 * time.Second},
			stream:   &wantErr{status: 429, code: "rate_limit_exceeded", typ: "requests", hidden: "org-upstreamtest", retry: 7 * time.Second}, events: -1},
		{name: "429 insufficient_quota", fault: upstreamtest.Fault{Status: 429, Body: `{"error":{"message":"You exceeded your current quota","type":"insufficient_quota","code":"insufficient_quota"}}`},
			complete: &upstream502, stream: &upstream502, events: -1},
		{name: "400 passes through", fault: upstreamtest.Fault{Status: 400},
			complete: &wantErr{status: 400, code: "invalid_value", typ: "invalid_request_error", msg: "Invalid value for 'temperature': must be between 0 and 2."},
			stream:   &wantErr{status: 400, code: "invalid_value", typ: "invalid_request_error"}, events: -1},
		{name: "422 passes through", fault: upstreamtest.Fault{Status: 422, Body: `{"object":"error","message":"bad schema","type":"BadRequestError","param":null,"code":422}`},
			complete: &wantErr{status: 422, code: "422", typ: "BadRequestError", msg: "bad schema"},
			stream:   &wantErr{status: 422, code: "422", typ: "BadRequestError", msg: "bad schema"}, events: -1},
		{name: "404 unknown model passes through", models: []string{"gpt-4o"},
			complete: &wantErr{status: 404, code: "model_not_found", typ: "invalid_request_error"},
			stream:   &wantErr{status: 404, code: "model_not_found"}, events: -1},
		{name: "404 without OpenAI body is a wrong base URL", fault: upstreamtest.Fault{Status: 404, Body: "404 page not found"},
			complete: &upstream502, stream: &upstream502, events: -1},
		{name: "slow headers within the timeout", fault: upstreamtest.Fault{HeaderDelay: 100 * time.Millisecond},
			cfg: upstream.OpenAIConfig{Timeout: long}},
		{name: "slow headers past the timeout", fault: upstreamtest.Fault{HeaderDelay: long},
			cfg: upstream.OpenAIConfig{Timeout: short}, complete: &timedOut, stream: &timedOut, events: -1},
		{name: "hang", fault: upstreamtest.Fault{Hang: true},
			cfg: upstream.OpenAIConfig{Timeout: short}, complete: &timedOut, stream: &timedOut, events: -1},
		{name: "garbage before the first chunk", fault: upstreamtest.Fault{Garbage: true}, stream: &bad, events: 0},
		{name: "connection drop before the first chunk", fault: upstreamtest.Fault{Drop: true},
			complete: &wantErr{status: 502, code: upstream.CodeBadResponse, eof: true},
			stream:   &wantErr{status: 502, code: upstream.CodeBadResponse, eof: true}, events: 0},
		{name: "connection drop mid-stream", fault: upstreamtest.Fault{DropAfter: 3},
			stream: &wantErr{status: 502, code: upstream.CodeBadResponse, eof: true}, events: 3},
		{name: "stall mid-stream", fault: upstreamtest.Fault{StallAfter: 2},
			cfg: upstream.OpenAIConfig{Timeout: long, IdleTimeout: short}, stream: &timedOut, events: 2},
		{name: "no [DONE]", fault: upstreamtest.Fault{NoDone: true},
			stream: &wantErr{status: 502, code: upstream.CodeBadResponse, eof: true}, events: -2},
	}
	for _, tc := range tests {
		srv := upstreamtest.NewServer(t, upstreamtest.Config{APIKey: testKey, Models: tc.models})
		srv.SetFault(tc.fault)
		o, logs := newOpenAI(t, srv, tc.cfg)
		t.Run(tc.name+"/complete", func(t *testing.T) {
			if tc.fault.Garbage || tc.fault.DropAfter > 0 || tc.fault.StallAfter > 0 || tc.fault.NoDone {
				t.Skip("a stream-only fault")
			}
			c, err := o.Complete(t.Context(), reqBody(t, "hi", nil))
			if tc.complete == nil {
				if err != nil || !c.UsageReported {
					t.Fatalf("Complete = %v", err)
				}
				return
			}
			checkErr(t, err, *tc.complete)
		})
		t.Run(tc.name+"/stream", func(t *testing.T) {
			s, err := o.Stream(t.Context(), streamBody(t, "hi"))
			if tc.stream != nil && tc.events == -1 {
				checkErr(t, err, *tc.stream)
				return
			}
			if err != nil {
				t.Fatalf("Stream = %v", err)
			}
			defer func() { _ = s.Close() }()
			evs, err := readStream(s)
			if tc.stream == nil {
				if !errors.Is(err, io.EOF) {
					t.Fatalf("stream ended with %v", err)
				}
				return
			}
			if tc.events >= 0 && len(evs) != tc.events {
				t.Errorf("%d events before the error, want %d", len(evs), tc.events)
			}
			checkErr(t, err, *tc.stream)
			if _, again := s.Next(); !errors.Is(again, err) {
				t.Errorf("Next after the error = %v, want it again", again)
			}
		})
		if strings.Contains(logs.String(), testKey) {
			t.Errorf("%s: the key is in the log: %s", tc.name, logs)
		}
	}
}

// with returns w expecting hidden detail.
func with(w wantErr, hidden string) *wantErr {
	w.hidden = hidden
	return &w
}

func TestOpenAIUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	o, err := upstream.NewOpenAI(upstream.OpenAIConfig{BaseURL: "http://" + addr + "/v1", APIKey: testKey}, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = o.Complete(t.Context(), reqBody(t, "hi", nil))
	checkErr(t, err, wantErr{status: 502, code: upstream.CodeUnavailable})
	_, err = o.Stream(t.Context(), streamBody(t, "hi"))
	checkErr(t, err, wantErr{status: 502, code: upstream.CodeUnavailable})
}

func TestOpenAICallerContext(t *testing.T) {
	srv := upstreamtest.NewServer(t, upstreamtest.Config{})
	srv.SetFault(upstreamtest.Fault{Hang: true})
	o, _ := newOpenAI(t, srv, upstream.OpenAIConfig{Timeout: time.Minute})

	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	_, err := o.Complete(ctx, reqBody(t, "hi", nil))
	checkErr(t, err, wantErr{status: 504, code: upstream.CodeTimeout})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("error %v does not wrap the caller's deadline", err)
	}

	ctx, cancel = context.WithCancel(t.Context())
	time.AfterFunc(100*time.Millisecond, cancel)
	_, err = o.Stream(ctx, streamBody(t, "hi"))
	checkErr(t, err, wantErr{status: upstream.StatusClientClosed, code: upstream.CodeCanceled})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("error %v does not wrap context.Canceled", err)
	}
}

// TestOpenAICancelMidStream: a cancelled context or a Close ends a Next that is
// waiting on a stalled upstream at once, and the upstream sees the connection
// close.
func TestOpenAICancelMidStream(t *testing.T) {
	for _, how := range []string{"cancel", "close"} {
		t.Run(how, func(t *testing.T) {
			srv := upstreamtest.NewServer(t, upstreamtest.Config{})
			srv.SetFault(upstreamtest.Fault{StallAfter: 2})
			o, _ := newOpenAI(t, srv, upstream.OpenAIConfig{Timeout: time.Minute})
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			s, err := o.Stream(ctx, streamBody(t, "hi"))
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = s.Close() }()
			for range 2 {
				if _, err := s.Next(); err != nil {
					t.Fatal(err)
				}
			}
			done := make(chan error, 1)
			go func() {
				_, err := s.Next()
				done <- err
			}()
			time.Sleep(50 * time.Millisecond) // let Next block on the stalled body
			start := time.Now()
			if how == "cancel" {
				cancel()
			} else {
				_ = s.Close()
			}
			select {
			case err := <-done:
				if d := time.Since(start); d > time.Second {
					t.Errorf("Next returned %v after the %s", d, how)
				}
				checkErr(t, err, wantErr{status: upstream.StatusClientClosed, code: upstream.CodeCanceled})
			case <-time.After(5 * time.Second):
				t.Fatalf("Next still blocked 5s after the %s", how)
			}
			select {
			case <-srv.ClientGone():
			case <-time.After(5 * time.Second):
				t.Fatal("the upstream did not see the connection close")
			}
		})
	}
}

// TestOpenAIHeaders: the upstream sees its own Authorization and the content
// headers, nothing else, and the body byte for byte.
func TestOpenAIHeaders(t *testing.T) {
	tests := []struct {
		name, key string
		stream    bool
		want      []string
	}{
		{"complete", testKey, false, []string{"Accept", "Accept-Encoding", "Authorization", "Content-Length", "Content-Type", "User-Agent"}},
		{"stream", testKey, true, []string{"Accept", "Accept-Encoding", "Authorization", "Content-Length", "Content-Type", "User-Agent"}},
		{"no key", "", false, []string{"Accept", "Accept-Encoding", "Content-Length", "Content-Type", "User-Agent"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := upstreamtest.NewServer(t, upstreamtest.Config{APIKey: tc.key})
			o, err := upstream.NewOpenAI(upstream.OpenAIConfig{BaseURL: srv.URL(), APIKey: tc.key}, nil)
			if err != nil {
				t.Fatal(err)
			}
			body := reqBody(t, "hi", map[string]any{"stream": tc.stream, "temperature": 0.5})
			if tc.stream {
				s, err := o.Stream(t.Context(), body)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := readStream(s); !errors.Is(err, io.EOF) {
					t.Fatal(err)
				}
				_ = s.Close()
			} else if _, err := o.Complete(t.Context(), body); err != nil {
				t.Fatal(err)
			}
			got := srv.LastRequest()
			if diff := cmp.Diff(tc.want, slices.Sorted(func(yield func(string) bool) {
				for k := range got.Header {
					if !yield(k) {
						return
					}
				}
			})); diff != "" {
				t.Errorf("header names (-want +got):\n%s\n%v", diff, got.Header)
			}
			if tc.key != "" && got.Header.Get("Authorization") != "Bearer "+tc.key {
				t.Errorf("Authorization = %q", got.Header.Get("Authorization"))
			}
			if !bytes.Equal(got.Body, body) {
				t.Errorf("body sent %s, want %s", got.Body, body)
			}
			wantAccept := map[bool]string{true: "text/event-stream", false: "application/json"}[tc.stream]
			if got.Header.Get("Accept") != wantAccept || got.Header.Get("Content-Type") != "application/json" {
				t.Errorf("Accept %q, Content-Type %q", got.Header.Get("Accept"), got.Header.Get("Content-Type"))
			}
		})
	}
}

// TestOpenAIConnectionReuse: a stream read to [DONE] and a completion both give
// their connection back to the pool.
func TestOpenAIConnectionReuse(t *testing.T) {
	srv := upstreamtest.NewServer(t, upstreamtest.Config{})
	o, _ := newOpenAI(t, srv, upstream.OpenAIConfig{})
	var mu sync.Mutex
	var reused []bool
	ctx := httptrace.WithClientTrace(t.Context(), &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) {
		mu.Lock()
		defer mu.Unlock()
		reused = append(reused, i.Reused)
	}})
	for range 2 {
		s, err := o.Stream(ctx, streamBody(t, "hi"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := readStream(s); !errors.Is(err, io.EOF) {
			t.Fatal(err)
		}
		_ = s.Close()
		if _, err := o.Complete(ctx, reqBody(t, "hi", nil)); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if diff := cmp.Diff([]bool{false, true, true, true}, reused); diff != "" {
		t.Errorf("connection reused (-want +got):\n%s", diff)
	}
}

func TestOpenAIBadBodies(t *testing.T) {
	tests := []struct {
		name, body string
		want       wantErr
	}{
		{"not JSON", "<html>oops</html>", wantErr{status: 502, code: upstream.CodeBadResponse}},
		{"truncated JSON", `{"id":"x","choices":[`, wantErr{status: 502, code: upstream.CodeBadResponse}},
		{"no choices", `{"id":"x","object":"chat.completion"}`, wantErr{status: 502, code: upstream.CodeBadResponse}},
		{"error with 200", `{"error":{"message":"internal","type":"server_error"}}`, wantErr{status: 502, code: upstream.CodeError}},
		{"negative usage", `{"choices":[],"usage":{"prompt_tokens":-5,"completion_tokens":1,"total_tokens":-4}}`, wantErr{status: 502, code: upstream.CodeBadResponse}},
		{"too large", `{"choices":[],"pad":"` + strings.Repeat("x", 2048) + `"}`, wantErr{status: 502, code: upstream.CodeBadResponse}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := newRawServer(t, "application/json", tc.body)
			o, err := upstream.NewOpenAI(upstream.OpenAIConfig{BaseURL: srv, MaxBodyBytes: 1024}, nil)
			if err != nil {
				t.Fatal(err)
			}
			_, err = o.Complete(t.Context(), reqBody(t, "hi", nil))
			checkErr(t, err, tc.want)
		})
	}
	t.Run("stream answered with JSON", func(t *testing.T) {
		for body, code := range map[string]string{
			`{"id":"x","object":"chat.completion","choices":[]}`: upstream.CodeBadResponse,
			`{"error":{"message":"nope","type":"server_error"}}`: upstream.CodeError,
		} {
			o, err := upstream.NewOpenAI(upstream.OpenAIConfig{BaseURL: newRawServer(t, "application/json", body)}, nil)
			if err != nil {
				t.Fatal(err)
			}
			_, err = o.Stream(t.Context(), streamBody(t, "hi"))
			checkErr(t, err, wantErr{status: 502, code: code})
		}
	})
	t.Run("redirect", func(t *testing.T) {
		srv := newHandlerServer(t, func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "http://elsewhere.invalid/", http.StatusTemporaryRedirect)
		})
		o, err := upstream.NewOpenAI(upstream.OpenAIConfig{BaseURL: srv, APIKey: testKey}, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, err = o.Complete(t.Context(), reqBody(t, "hi", nil))
		checkErr(t, err, wantErr{status: 502, code: upstream.CodeError})
	})
	t.Run("key echoed in an error is redacted", func(t *testing.T) {
		body, _ := json.Marshal(chat.ErrorBody{Error: chat.ErrorDetail{Message: "bad request for key " + testKey, Type: "invalid_request_error"}})
		srv := newHandlerServer(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write(body)
		})
		o, err := upstream.NewOpenAI(upstream.OpenAIConfig{BaseURL: srv, APIKey: testKey}, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, err = o.Complete(t.Context(), reqBody(t, "hi", nil))
		checkErr(t, err, wantErr{status: 400, code: "", msg: "bad request for key [redacted]"})
	})
}

func newRawServer(tb testing.TB, contentType, body string) string {
	return newHandlerServer(tb, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", contentType)
		_, _ = io.WriteString(w, body)
	})
}

func newHandlerServer(tb testing.TB, h http.HandlerFunc) string {
	tb.Helper()
	srv := httptest.NewServer(h)
	tb.Cleanup(srv.Close)
	return srv.URL + "/v1"
}

func TestNewOpenAIConfig(t *testing.T) {
	for _, cfg := range []upstream.OpenAIConfig{
		{BaseURL: ""},
		{BaseURL: "api.openai.com/v1"},
		{BaseURL: "ftp://api.openai.com/v1"},
		{BaseURL: "https://api.openai.com/v1?x=1"},
		{BaseURL: "https://api.openai.com/v1", APIKey: "sk-secret\r\nX-Evil: 1"},
		{BaseURL: "https://api.openai.com/v1", APIKey: "sk secret"},
		{BaseURL: "https://api.openai.com/v1", Timeout: -time.Second},
	} {
		_, err := upstream.NewOpenAI(cfg, nil)
		if err == nil {
			t.Errorf("NewOpenAI(%v) accepted", cfg)
			continue
		}
		if strings.Contains(err.Error(), "secret") {
			t.Errorf("NewOpenAI error %q shows the key", err)
		}
	}
	cfg := upstream.OpenAIConfig{BaseURL: "https://api.openai.com/v1/", APIKey: "sk-secret"}
	for _, s := range []string{cfg.String(), slogText(cfg)} {
		if strings.Contains(s, "sk-secret") {
			t.Errorf("config printed as %q shows the key", s)
		}
	}
	if _, err := upstream.NewOpenAI(cfg, nil); err != nil {
		t.Errorf("NewOpenAI(%v) = %v", cfg, err)
	}
}

func slogText(v any) string {
	var b bytes.Buffer
	slog.New(slog.NewTextHandler(&b, nil)).Info("config", "cfg", v)
	return b.String()
}
