package upstream_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/llm4agents/llm4agents/internal/upstream"
	"github.com/llm4agents/llm4agents/internal/upstream/upstreamtest"
)

// attempts records a Fallback's attempts as "provider outcome".
type attempts struct {
	mu  sync.Mutex
	got []string
}

func (a *attempts) Attempt(provider, outcome string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.got = append(a.got, provider+" "+outcome)
}

func (a *attempts) take() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	got := a.got
	a.got = nil
	return got
}

// fallbackClock is a settable clock for the providers' health.
type fallbackClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fallbackClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fallbackClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// fallbackFixture is a model served by providers a, b (which names the
// model "b-model") and c, each a fake OpenAI-compatible server.
type fallbackFixture struct {
	srv      map[string]*upstreamtest.Server
	provider upstream.Provider
	attempts *attempts
	clk      *fallbackClock
}

func newFallbackFixture(t *testing.T) *fallbackFixture {
	t.Helper()
	f := &fallbackFixture{srv: map[string]*upstreamtest.Server{}, attempts: &attempts{}, clk: &fallbackClock{now: time.Unix(1_800_000_000, 0)}}
	var routes []upstream.Route
	for _, name := range []string{"a", "b", "c"} {
		s := upstreamtest.NewServer(t, upstreamtest.Config{APIKey: testKey})
		f.srv[name] = s
		p, err := upstream.NewOpenAI(upstream.OpenAIConfig{BaseURL: s.URL(), APIKey: testKey, Timeout: 2 * time.Second}, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		h := upstream.NewHealth(upstream.HealthConfig{FailuresToOpen: 2, OpenFor: time.Minute})
		h.SetNow(f.clk.Now)
		r := upstream.Route{Name: name, Provider: p, Health: h}
		if name == "b" {
			r.Model = "b-model"
		}
		routes = append(routes, r)
	}
	var err error
	if f.provider, err = upstream.NewFallback(routes, f.attempts, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	return f
}

// calls returns how many requests each server received.
func (f *fallbackFixture) calls() [3]int64 {
	return [3]int64{f.srv["a"].Calls(), f.srv["b"].Calls(), f.srv["c"].Calls()}
}

const fallbackBody = `{"model":"m","messages":[{"role":"user","content":"hello <there>"}],"max_tokens":16}`

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestFallbackComplete: a failure before the first byte moves to the next
// provider, with the model named as that provider names it; a refusal of
// the request itself does not; each attempt is counted by provider.
func TestFallbackComplete(t *testing.T) {
	tests := []struct {
		name     string
		fault    upstreamtest.Fault // of a; b and c answer
		down     bool               // a is not listening at all
		calls    [3]int64
		attempts []string
		status   int // 0: answered (by b)
	}{
		{name: "first answers", calls: [3]int64{1, 0, 0}, attempts: []string{"a ok"}},
		{name: "first down", down: true, calls: [3]int64{0, 1, 0}, attempts: []string{"a failed", "b ok"}},
		{name: "first 500", fault: upstreamtest.Fault{Status: 500}, calls: [3]int64{1, 1, 0}, attempts: []string{"a failed", "b ok"}},
		{name: "first 503", fault: upstreamtest.Fault{Status: 503}, calls: [3]int64{1, 1, 0}, attempts: []string{"a failed", "b ok"}},
		{name: "first times out", fault: upstreamtest.Fault{HeaderDelay: 3 * time.Second}, calls: [3]int64{1, 1, 0}, attempts: []string{"a failed", "b ok"}},
		{name: "first answers garbage", fault: upstreamtest.Fault{Drop: true}, calls: [3]int64{1, 1, 0}, attempts: []string{"a failed", "b ok"}},
		{name: "first refuses the operator's key", fault: upstreamtest.Fault{Status: 401}, calls: [3]int64{1, 1, 0}, attempts: []string{"a failed", "b ok"}},
		{name: "first rate limits", fault: upstreamtest.Fault{Status: 429, RetryAfter: "20"}, calls: [3]int64{1, 1, 0}, attempts: []string{"a rate_limited", "b ok"}},
		{name: "first lacks the model", fault: upstreamtest.Fault{Status: 404, Body: `{"error":{"message":"The model does not exist","type":"invalid_request_error","code":"model_not_found"}}`},
			calls: [3]int64{1, 1, 0}, attempts: []string{"a not_served", "b ok"}},
		{name: "the request is refused", fault: upstreamtest.Fault{Status: 400}, calls: [3]int64{1, 0, 0}, attempts: []string{"a refused"}, status: 400},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFallbackFixture(t)
			f.srv["a"].SetFault(tt.fault)
			if tt.down {
				f.srv["a"].Close()
			}
			c, err := f.provider.Complete(t.Context(), []byte(fallbackBody))
			if got := f.calls(); got != tt.calls {
				t.Errorf("calls %v, want %v", got, tt.calls)
			}
			if got := f.attempts.take(); !equal(got, tt.attempts) {
				t.Errorf("attempts %q, want %q", got, tt.attempts)
			}
			if tt.status != 0 {
				if ue, ok := errors.AsType[*upstream.Error](err); !ok || ue.Status != tt.status {
					t.Fatalf("Complete() = %v, want status %d", err, tt.status)
				}
				return
			}
			if err != nil {
				t.Fatalf("Complete(): %v", err)
			}
			if !c.UsageReported || c.Usage.CompletionTokens == 0 {
				t.Errorf("answer without usage: %+v", c.Usage)
			}
			// Each provider gets the model under its own name, and the rest
			// of the body as the gateway wrote it.
			want := "m"
			if tt.calls[1] == 1 {
				want = "b-model"
			}
			var got struct {
				Model    string            `json:"model"`
				Messages []json.RawMessage `json:"messages"`
			}
			last := f.srv["a"].LastRequest()
			if tt.calls[1] == 1 {
				last = f.srv["b"].LastRequest()
			}
			if err := json.Unmarshal(last.Body, &got); err != nil || got.Model != want || len(got.Messages) != 1 {
				t.Errorf("the provider got %s, want model %q and the message", last.Body, want)
			}
		})
	}
}

// TestFallbackAllDown: every provider fails; each is tried once and the last
// error is returned.
func TestFallbackAllDown(t *testing.T) {
	f := newFallbackFixture(t)
	for _, s := range f.srv {
		s.SetFault(upstreamtest.Fault{Status: 502})
	}
	_, err := f.provider.Complete(t.Context(), []byte(fallbackBody))
	if ue, ok := errors.AsType[*upstream.Error](err); !ok || ue.Status != http.StatusBadGateway || ue.Code != upstream.CodeError {
		t.Fatalf("Complete() = %v, want 502 upstream_error", err)
	}
	if got := f.calls(); got != [3]int64{1, 1, 1} {
		t.Errorf("calls %v, want one each", got)
	}
}

// TestFallbackCircuit: a provider that fails FailuresToOpen times in a row is
// tried after the others until OpenFor has passed; then one call tries it
// first again.
func TestFallbackCircuit(t *testing.T) {
	f := newFallbackFixture(t)
	f.srv["a"].SetFault(upstreamtest.Fault{Status: 500})
	for range 2 {
		if _, err := f.provider.Complete(t.Context(), []byte(fallbackBody)); err != nil {
			t.Fatal(err)
		}
	}
	f.attempts.take()
	if _, err := f.provider.Complete(t.Context(), []byte(fallbackBody)); err != nil {
		t.Fatal(err)
	}
	if got := f.attempts.take(); !equal(got, []string{"b ok"}) {
		t.Fatalf("with a's circuit open: attempts %q, want b alone", got)
	}
	f.srv["a"].SetFault(upstreamtest.Fault{})
	f.clk.Advance(time.Minute)
	if _, err := f.provider.Complete(t.Context(), []byte(fallbackBody)); err != nil {
		t.Fatal(err)
	}
	if got := f.attempts.take(); !equal(got, []string{"a ok"}) {
		t.Fatalf("after OpenFor: attempts %q, want a first again", got)
	}
	// With every circuit open, the open ones are still tried, in order.
	for _, s := range f.srv {
		s.SetFault(upstreamtest.Fault{Status: 500})
	}
	for range 2 {
		_, _ = f.provider.Complete(t.Context(), []byte(fallbackBody))
	}
	f.srv["c"].SetFault(upstreamtest.Fault{})
	f.attempts.take()
	if _, err := f.provider.Complete(t.Context(), []byte(fallbackBody)); err != nil {
		t.Fatalf("every circuit open, c healthy again: %v", err)
	}
	if got := f.attempts.take(); !equal(got, []string{"a failed", "b failed", "c ok"}) {
		t.Errorf("every circuit open: attempts %q", got)
	}
}

// TestFallbackRetryAfter: a provider's 429 pauses it for its Retry-After
// across calls; when every provider is paused the answer is a 429 with the
// shortest pause, and no provider is called.
func TestFallbackRetryAfter(t *testing.T) {
	f := newFallbackFixture(t)
	f.srv["a"].SetFault(upstreamtest.Fault{Status: 429, RetryAfter: "30"})
	f.srv["b"].SetFault(upstreamtest.Fault{Status: 429, RetryAfter: "10"})
	if _, err := f.provider.Complete(t.Context(), []byte(fallbackBody)); err != nil {
		t.Fatal(err)
	}
	f.attempts.take()
	if _, err := f.provider.Complete(t.Context(), []byte(fallbackBody)); err != nil {
		t.Fatal(err)
	}
	if got := f.attempts.take(); !equal(got, []string{"a skipped", "b skipped", "c ok"}) {
		t.Fatalf("a and b paused: attempts %q", got)
	}
	f.srv["c"].SetFault(upstreamtest.Fault{Status: 429, RetryAfter: "20"})
	if _, err := f.provider.Complete(t.Context(), []byte(fallbackBody)); err == nil {
		t.Fatal("c rate limited too: answered")
	}
	before := f.calls()
	_, err := f.provider.Complete(t.Context(), []byte(fallbackBody))
	ue, ok := errors.AsType[*upstream.Error](err)
	if !ok || ue.Status != http.StatusTooManyRequests || ue.RetryAfter != 10*time.Second {
		t.Fatalf("every provider paused: %v, want 429 with Retry-After 10s", err)
	}
	if f.calls() != before {
		t.Error("a provider was called while paused")
	}
	f.clk.Advance(10 * time.Second)
	f.srv["b"].SetFault(upstreamtest.Fault{})
	if _, err := f.provider.Complete(t.Context(), []byte(fallbackBody)); err != nil {
		t.Fatalf("b's pause over: %v", err)
	}
}

// TestFallbackStream: a stream that cannot start moves to the next provider;
// once one has started it is the answer, even if it breaks.
func TestFallbackStream(t *testing.T) {
	body := []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":true}}`)
	f := newFallbackFixture(t)
	f.srv["a"].SetFault(upstreamtest.Fault{Status: 503})
	st, err := f.provider.Stream(t.Context(), body)
	if err != nil {
		t.Fatal(err)
	}
	n := drain(t, st)
	if n == 0 || f.calls() != [3]int64{1, 1, 0} {
		t.Fatalf("%d events, calls %v: want b's stream after a's 503", n, f.calls())
	}
	// A stream that answered 200 and dropped before its first event has
	// not started: the next provider answers.
	f = newFallbackFixture(t)
	f.srv["a"].SetFault(upstreamtest.Fault{Drop: true})
	st, err = f.provider.Stream(t.Context(), body)
	if err != nil {
		t.Fatal(err)
	}
	if n := drain(t, st); n == 0 || f.calls() != [3]int64{1, 1, 0} {
		t.Fatalf("%d events, calls %v: want b's stream after a's drop before the first event", n, f.calls())
	}
	if got := f.attempts.take(); !equal(got, []string{"a failed", "b ok"}) {
		t.Errorf("attempts %q", got)
	}
	f = newFallbackFixture(t)
	f.srv["a"].SetFault(upstreamtest.Fault{DropAfter: 1})
	st, err = f.provider.Stream(t.Context(), body)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = st.Close() }()
	if _, err := st.Next(); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Next(); err == nil || errors.Is(err, io.EOF) {
		t.Fatalf("Next() after the drop = %v, want the break", err)
	}
	if f.calls() != [3]int64{1, 0, 0} {
		t.Errorf("calls %v: a started stream was replaced", f.calls())
	}
}

func drain(t *testing.T, st upstream.Stream) int {
	t.Helper()
	defer func() { _ = st.Close() }()
	for n := 0; ; n++ {
		_, err := st.Next()
		if errors.Is(err, io.EOF) {
			return n
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestFallbackCallerLeft: once the caller's context is done, no other
// provider is tried.
func TestFallbackCallerLeft(t *testing.T) {
	f := newFallbackFixture(t)
	f.srv["a"].SetFault(upstreamtest.Fault{Hang: true})
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	if _, err := f.provider.Complete(ctx, []byte(fallbackBody)); err == nil {
		t.Fatal("answered after the caller left")
	}
	if f.calls() != [3]int64{1, 0, 0} {
		t.Errorf("calls %v: another provider was tried after the caller left", f.calls())
	}
}

// TestFallbackEmbedder: a fallback serves embeddings only when every provider
// does, and falls over for them too.
func TestFallbackEmbedder(t *testing.T) {
	f := newFallbackFixture(t)
	e, ok := f.provider.(upstream.Embedder)
	if !ok {
		t.Fatal("every route embeds, but the fallback is no Embedder")
	}
	f.srv["a"].SetFault(upstreamtest.Fault{Status: 500})
	if _, err := e.Embed(t.Context(), []byte(`{"model":"m","input":["a","b"]}`)); err != nil {
		t.Fatal(err)
	}
	if f.calls() != [3]int64{1, 1, 0} {
		t.Errorf("calls %v", f.calls())
	}
	chatOnly := upstream.Route{Name: "chat", Provider: chatOnlyProvider{}, Health: upstream.NewHealth(upstream.HealthConfig{})}
	p, err := upstream.NewFallback([]upstream.Route{chatOnly}, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := p.(upstream.Embedder); ok {
		t.Error("a route without embeddings, but the fallback is an Embedder")
	}
}

type chatOnlyProvider struct{ upstream.Provider }

func TestNewFallbackRefuses(t *testing.T) {
	h := upstream.NewHealth(upstream.HealthConfig{})
	for name, routes := range map[string][]upstream.Route{
		"no route":    nil,
		"no provider": {{Name: "a", Health: h}},
		"no health":   {{Name: "a", Provider: chatOnlyProvider{}}},
	} {
		if _, err := upstream.NewFallback(routes, nil, slog.New(slog.DiscardHandler)); err == nil {
			t.Errorf("%s: NewFallback() accepted it", name)
		}
	}
}
