package upstream_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/llm4agents/llm4agents/internal/responses"
	"github.com/llm4agents/llm4agents/internal/upstream"
	"github.com/llm4agents/llm4agents/internal/upstream/upstreamtest"
)

const responsesBody = `{"model":"m","instructions":"Be brief.","input":"hello there","max_output_tokens":400}`

func newResponder(tb testing.TB, srv *upstreamtest.Server) upstream.Responder {
	tb.Helper()
	o, _ := newOpenAI(tb, srv, upstream.OpenAIConfig{Timeout: 2 * time.Second})
	r, err := upstream.WithResponses(o)
	if err != nil {
		tb.Fatal(err)
	}
	return r
}

// TestOpenAIRespond: the Responses API is called at {base}/responses with
// the body as given, and the Response object comes back as sent, its usage
// read from input_tokens and output_tokens.
func TestOpenAIRespond(t *testing.T) {
	srv := upstreamtest.NewServer(t, upstreamtest.Config{APIKey: testKey})
	r := newResponder(t, srv)
	c, err := r.Respond(t.Context(), []byte(responsesBody))
	if err != nil {
		t.Fatal(err)
	}
	if got := srv.LastRequest(); string(got.Body) != responsesBody {
		t.Errorf("upstream body %s, want %s", got.Body, responsesBody)
	}
	var resp struct {
		Object string `json:"object"`
		Status string `json:"status"`
		Model  string `json:"model"`
		Usage  struct {
			InputTokens  int64 `json:"input_tokens"`
			OutputTokens int64 `json:"output_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(c.Body, &resp); err != nil {
		t.Fatal(err)
	}
	if resp.Object != "response" || resp.Status != "completed" || resp.Model != "m" {
		t.Errorf("response %s", c.Body)
	}
	if !c.UsageReported || c.Usage.PromptTokens != resp.Usage.InputTokens || c.Usage.CompletionTokens != resp.Usage.OutputTokens ||
		c.Usage.PromptTokens == 0 || c.Usage.CompletionTokens == 0 {
		t.Errorf("usage %+v (reported %v), response says %+v", c.Usage, c.UsageReported, resp.Usage)
	}
	if c.Usage.CompletionTokens > 400 {
		t.Errorf("%d output tokens, above max_output_tokens", c.Usage.CompletionTokens)
	}
}

// TestOpenAIStreamResponses: the Responses events come one by one, from
// response.created to response.completed, then io.EOF without a "[DONE]";
// Usage is the final response's.
func TestOpenAIStreamResponses(t *testing.T) {
	srv := upstreamtest.NewServer(t, upstreamtest.Config{APIKey: testKey})
	r := newResponder(t, srv)
	body := strings.Replace(responsesBody, `"max_output_tokens"`, `"stream":true,"max_output_tokens"`, 1)
	st, err := r.StreamResponses(t.Context(), []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = st.Close() }()
	var types []string
	var text strings.Builder
	var final responses.Event
	for {
		data, err := st.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		ev, err := responses.ReadEvent(data)
		if err != nil {
			t.Fatal(err)
		}
		types = append(types, ev.Type)
		if ev.Type == "response.output_text.delta" {
			text.WriteString(ev.Delta)
		}
		if ev.Final() {
			final = ev
		}
	}
	if len(types) < 4 || types[0] != "response.created" || types[len(types)-1] != "response.completed" {
		t.Fatalf("events %v", types)
	}
	if text.Len() == 0 {
		t.Error("no text deltas")
	}
	u, ok := st.Usage()
	if !ok || final.Usage == nil || u.PromptTokens != final.Usage.PromptTokens || u.CompletionTokens != final.Usage.CompletionTokens || u.CompletionTokens == 0 {
		t.Errorf("usage %+v %v, final event's %+v", u, ok, final.Usage)
	}
}

// TestRespondFaults: an upstream that fails, or answers the wrong shape,
// is an *upstream.Error the gateway maps, never an answer.
func TestRespondFaults(t *testing.T) {
	bad := wantErr{status: 502, code: upstream.CodeBadResponse}
	failed := wantErr{status: 502, code: upstream.CodeError}
	stream := strings.Replace(responsesBody, `"max_output_tokens"`, `"stream":true,"max_output_tokens"`, 1)
	for _, tc := range []struct {
		name   string
		fault  upstreamtest.Fault
		stream bool
		want   wantErr
	}{
		{name: "a chat completion", fault: upstreamtest.Fault{Status: 200, Body: `{"id":"chatcmpl-1","object":"chat.completion","choices":[]}`}, want: bad},
		{name: "an error body", fault: upstreamtest.Fault{Status: 200, Body: `{"error":{"message":"overloaded","type":"server_error"}}`}, want: failed},
		{name: "a failed response", fault: upstreamtest.Fault{Status: 200, Body: `{"id":"resp_1","object":"response","status":"failed","output":[],"error":{"code":"server_error","message":"x"}}`}, want: failed},
		{name: "negative usage", fault: upstreamtest.Fault{Status: 200, Body: `{"id":"resp_1","object":"response","status":"completed","output":[],"usage":{"input_tokens":-1,"output_tokens":2}}`}, want: bad},
		{name: "5xx", fault: upstreamtest.Fault{Status: 500}, want: failed},
		{name: "stream of garbage", fault: upstreamtest.Fault{Garbage: true}, stream: true, want: bad},
		{name: "stream without final event", fault: upstreamtest.Fault{NoDone: true}, stream: true, want: wantErr{status: 502, code: upstream.CodeBadResponse, eof: true}},
		{name: "stream answered with JSON", fault: upstreamtest.Fault{Status: 200, Body: `{"object":"response","output":[]}`}, stream: true, want: bad},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := upstreamtest.NewServer(t, upstreamtest.Config{APIKey: testKey})
			srv.SetFault(tc.fault)
			r := newResponder(t, srv)
			if !tc.stream {
				c, err := r.Respond(t.Context(), []byte(responsesBody))
				if err == nil {
					t.Fatalf("answer %s", c.Body)
				}
				checkErr(t, err, tc.want)
				return
			}
			st, err := r.StreamResponses(t.Context(), []byte(stream))
			if err == nil {
				defer func() { _ = st.Close() }()
				for err == nil {
					_, err = st.Next()
				}
			}
			checkErr(t, err, tc.want)
		})
	}
}

// TestRespondNoUsage: a Response without usage is an answer with
// UsageReported false.
func TestRespondNoUsage(t *testing.T) {
	srv := upstreamtest.NewServer(t, upstreamtest.Config{APIKey: testKey})
	srv.SetFault(upstreamtest.Fault{NoUsage: true})
	c, err := newResponder(t, srv).Respond(t.Context(), []byte(responsesBody))
	if err != nil {
		t.Fatal(err)
	}
	if c.UsageReported || c.Usage.PromptTokens != 0 || c.Usage.CompletionTokens != 0 {
		t.Errorf("usage %+v reported %v", c.Usage, c.UsageReported)
	}
}

// TestWithResponses: only a provider configured with WithResponses, or a
// Fallback of such providers, speaks the Responses API.
func TestWithResponses(t *testing.T) {
	srv := upstreamtest.NewServer(t, upstreamtest.Config{APIKey: testKey})
	o, _ := newOpenAI(t, srv, upstream.OpenAIConfig{})
	if _, ok := any(o).(upstream.Responder); ok {
		t.Error("a bare OpenAI provider is a Responder: every upstream would be passed Responses calls")
	}
	demo := upstream.NewDemo(upstream.DemoConfig{})
	for _, p := range []upstream.Provider{o, demo} {
		if _, err := upstream.WithResponses(p); err != nil {
			t.Errorf("%T: %v", p, err)
		}
	}
	r, _ := upstream.WithResponses(o)
	h := func() *upstream.Health { return upstream.NewHealth(upstream.HealthConfig{}) }
	both, err := upstream.NewFallback([]upstream.Route{{Name: "a", Provider: r, Health: h()}, {Name: "b", Provider: r, Health: h()}}, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := both.(upstream.Responder); !ok {
		t.Error("a fallback of Responders is not one")
	}
	mixed, err := upstream.NewFallback([]upstream.Route{{Name: "a", Provider: r, Health: h()}, {Name: "b", Provider: o, Health: h()}}, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := mixed.(upstream.Responder); ok {
		t.Error("a fallback with a chat-only provider speaks the Responses API")
	}
}

// TestFallbackResponses: a Responses call fails over as a chat call does,
// with the model renamed for the next provider.
func TestFallbackResponses(t *testing.T) {
	a := upstreamtest.NewServer(t, upstreamtest.Config{APIKey: testKey})
	b := upstreamtest.NewServer(t, upstreamtest.Config{APIKey: testKey})
	a.SetFault(upstreamtest.Fault{Status: http.StatusServiceUnavailable})
	h := func() *upstream.Health { return upstream.NewHealth(upstream.HealthConfig{}) }
	f, err := upstream.NewFallback([]upstream.Route{
		{Name: "a", Provider: newResponder(t, a), Health: h()},
		{Name: "b", Provider: newResponder(t, b), Health: h(), Model: "b-model"},
	}, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	r := f.(upstream.Responder)
	c, err := r.Respond(t.Context(), []byte(responsesBody))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(c.Body), `"model":"b-model"`) || a.Calls() != 1 || b.Calls() != 1 {
		t.Errorf("calls %d %d, answer %s", a.Calls(), b.Calls(), c.Body)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	st, err := r.StreamResponses(ctx, []byte(strings.Replace(responsesBody, `"max_output_tokens"`, `"stream":true,"max_output_tokens"`, 1)))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = st.Close() }()
	n := 0
	for {
		_, err := st.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	if n < 4 || b.Calls() != 2 {
		t.Errorf("%d events, b called %d times", n, b.Calls())
	}
}
