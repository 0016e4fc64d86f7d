package upstream_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/llm4agents/llm4agents/internal/chat"
	"github.com/llm4agents/llm4agents/internal/upstream"
)

var fixedNow = func() time.Time { return time.Unix(1741570283, 0) }

// reqBody encodes a chat request with one user message and the given extra
// fields.
func reqBody(tb testing.TB, msg string, extra map[string]any) []byte {
	tb.Helper()
	m := map[string]any{"model": "demo-1", "messages": []map[string]any{
		{"role": "system", "content": "You are terse."},
		{"role": "user", "content": msg},
	}}
	maps.Copy(m, extra)
	b, err := json.Marshal(m)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// openAICompletion is the full shape of a chat.completion, decoded strictly.
type openAICompletion struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	Model   string `json:"model"`
	Choices []struct {
		Index   int `json:"index"`
		Message struct {
			Role         string   `json:"role"`
			Content      string   `json:"content"`
			RefusalError *string  `json:"refusal"`
			Annotations  []string `json:"annotations"`
		} `json:"message"`
		Logprobs     any    `json:"logprobs"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage             chat.Usage `json:"usage"`
	ServiceTier       string     `json:"service_tier"`
	SystemFingerprint string     `json:"system_fingerprint"`
}

// openAIChunk is the full shape of a chat.completion.chunk.
type openAIChunk struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	Model   string `json:"model"`
	Choices []struct {
		Index int `json:"index"`
		Delta struct {
			Role    string  `json:"role"`
			Content *string `json:"content"`
		} `json:"delta"`
		Logprobs     any     `json:"logprobs"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage             *chat.Usage `json:"usage"`
	ServiceTier       string      `json:"service_tier"`
	SystemFingerprint string      `json:"system_fingerprint"`
}

func decodeStrict(tb testing.TB, b []byte, v any) {
	tb.Helper()
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		tb.Fatalf("decode %s: %v", b, err)
	}
}

func TestDemoComplete(t *testing.T) {
	tok := upstream.ApproxTokenizer{}
	d := upstream.NewDemo(upstream.DemoConfig{Now: fixedNow})
	body := reqBody(t, "What is x402?", nil)
	c, err := d.Complete(t.Context(), body)
	if err != nil {
		t.Fatal(err)
	}
	var got openAICompletion
	decodeStrict(t, c.Body, &got)
	if got.Object != "chat.completion" || got.Model != "demo-1" || got.Created != fixedNow().Unix() ||
		!strings.HasPrefix(got.ID, "chatcmpl-") || len(got.Choices) != 1 {
		t.Fatalf("completion = %s", c.Body)
	}
	ch := got.Choices[0]
	want := `This is the llm4agents demo model, not a real LLM. You said: "What is x402?". The demo model answers`
	if ch.Index != 0 || ch.Message.Role != "assistant" || !strings.HasPrefix(ch.Message.Content, want) || ch.FinishReason != "stop" {
		t.Errorf("choice = %+v, want content starting %q and finish stop", ch, want)
	}
	for _, key := range []string{`"refusal":null`, `"annotations":[]`, `"logprobs":null`, `"usage":{"prompt_tokens":`} {
		if !strings.Contains(string(c.Body), key) {
			t.Errorf("body lacks %s: %s", key, c.Body)
		}
	}
	n := int64(tok.Count(ch.Message.Content))
	if n > 128 || n < 120 {
		t.Errorf("uncapped reply is %d tokens, want about the default 128", n)
	}
	// Per message 3 + role + text ("system" is 2 tokens, "user" 1), and 3 to prime the reply.
	wantPrompt := int64(3 + 2 + tok.Count("You are terse.") + 3 + 1 + tok.Count("What is x402?") + 3)
	wantUsage := chat.Usage{PromptTokens: wantPrompt, CompletionTokens: n, TotalTokens: wantPrompt + n}
	if diff := cmp.Diff(wantUsage, got.Usage, cmpUsage); diff != "" {
		t.Errorf("usage in the body (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(wantUsage, c.Usage, cmpUsage); diff != "" || !c.UsageReported {
		t.Errorf("Completion.Usage (-want +got):\n%s", diff)
	}
}

// cmpUsage compares token counts, not the details objects.
var cmpUsage = cmp.Transformer("counts", func(u chat.Usage) [3]int64 {
	return [3]int64{u.PromptTokens, u.CompletionTokens, u.TotalTokens}
})

func TestDemoDeterministic(t *testing.T) {
	d := upstream.NewDemo(upstream.DemoConfig{Now: fixedNow})
	body := reqBody(t, "same question", map[string]any{"n": 2, "max_tokens": 40, "stream_options": map[string]any{"include_usage": true}})
	a, err := d.Complete(t.Context(), body)
	if err != nil {
		t.Fatal(err)
	}
	b, err := upstream.NewDemo(upstream.DemoConfig{Now: fixedNow}).Complete(t.Context(), body)
	if err != nil {
		t.Fatal(err)
	}
	if string(a.Body) != string(b.Body) {
		t.Errorf("two answers to one body differ:\n%s\n%s", a.Body, b.Body)
	}
	sa, sb := streamAll(t, d, body), streamAll(t, d, body)
	if diff := cmp.Diff(sa, sb); diff != "" {
		t.Errorf("two streams of one body differ:\n%s", diff)
	}
	other, err := d.Complete(t.Context(), reqBody(t, "another question", nil))
	if err != nil {
		t.Fatal(err)
	}
	var ca, co openAICompletion
	decodeStrict(t, a.Body, &ca)
	decodeStrict(t, other.Body, &co)
	if ca.ID == co.ID {
		t.Errorf("two bodies got the same id %s", ca.ID)
	}
}

// streamAll returns every chunk of a demo stream, checking it ends with io.EOF.
func streamAll(tb testing.TB, p upstream.Provider, body []byte) []string {
	tb.Helper()
	s, err := p.Stream(tb.Context(), body)
	if err != nil {
		tb.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	var out []string
	for {
		ev, err := s.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			tb.Fatalf("Next: %v", err)
		}
		out = append(out, string(ev))
	}
}

func TestDemoCapsAndChoices(t *testing.T) {
	tok := upstream.ApproxTokenizer{}
	long := strings.Repeat("word ", 100) + "ünïcödé 日本語"
	tests := []struct {
		name       string
		msg        string
		extra      map[string]any
		wantN      int
		wantCap    int64 // 0: uncapped
		wantFinish string
	}{
		{"max_tokens 1", "hi", map[string]any{"max_tokens": 1}, 1, 1, "length"},
		{"max_tokens 7", "hi", map[string]any{"max_tokens": 7}, 1, 7, "length"},
		{"max_tokens 50", "hi", map[string]any{"max_tokens": 50}, 1, 50, "length"},
		{"max_tokens above the reply", "hi", map[string]any{"max_tokens": 4096}, 1, 0, "stop"},
		{"max_completion_tokens wins", "hi", map[string]any{"max_tokens": 100, "max_completion_tokens": 9}, 1, 9, "length"},
		{"n 3", "hi", map[string]any{"n": 3, "max_tokens": 20}, 3, 20, "length"},
		{"n 2 uncapped", "hi", map[string]any{"n": 2}, 2, 0, "stop"},
		{"long message capped", long, map[string]any{"max_tokens": 30}, 1, 30, "length"},
		{"long message uncapped", long, nil, 1, 0, "stop"},
	}
	d := upstream.NewDemo(upstream.DemoConfig{Now: fixedNow, WordsPerChunk: 2})
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			body := reqBody(t, tc.msg, tc.extra)
			c, err := d.Complete(t.Context(), body)
			if err != nil {
				t.Fatal(err)
			}
			var got openAICompletion
			decodeStrict(t, c.Body, &got)
			if len(got.Choices) != tc.wantN {
				t.Fatalf("%d choices, want %d", len(got.Choices), tc.wantN)
			}
			content := got.Choices[0].Message.Content
			per := int64(tok.Count(content))
			for i, ch := range got.Choices {
				if ch.Index != i || ch.Message.Content != content || ch.FinishReason != tc.wantFinish {
					t.Errorf("choice %d = index %d, finish %q, content equal %v; want finish %q",
						i, ch.Index, ch.FinishReason, ch.Message.Content == content, tc.wantFinish)
				}
			}
			if tc.wantCap > 0 && per != tc.wantCap {
				t.Errorf("a capped choice is %d tokens, want exactly the cap %d: %q", per, tc.wantCap, content)
			}
			if got.Usage.CompletionTokens != per*int64(tc.wantN) || got.Usage.TotalTokens != got.Usage.PromptTokens+got.Usage.CompletionTokens {
				t.Errorf("usage %+v, want completion %d x %d", got.Usage, per, tc.wantN)
			}
			if tc.msg == long && tc.wantCap == 0 && !strings.Contains(content, `word word..."`) {
				t.Errorf("a long message is echoed cut at 200 runes with ...: %q", content)
			}

			// The stream carries the same content, choice by choice, and the same usage.
			withUsage := reqBody(t, tc.msg, merge(tc.extra, map[string]any{"stream": true, "stream_options": map[string]any{"include_usage": true}}))
			evs := streamAll(t, d, withUsage)
			texts := make([]string, tc.wantN)
			var usage *chat.Usage
			for i, ev := range evs {
				var ck openAIChunk
				decodeStrict(t, []byte(ev), &ck)
				if ck.Object != "chat.completion.chunk" || ck.Model != "demo-1" {
					t.Fatalf("chunk %d = %s", i, ev)
				}
				if i < len(evs)-1 && !strings.Contains(ev, `"usage":null`) {
					t.Errorf("chunk %d lacks \"usage\":null: %s", i, ev)
				}
				for _, ch := range ck.Choices {
					if ch.Delta.Content != nil {
						texts[ch.Index] += *ch.Delta.Content
					}
				}
				if ck.Usage != nil {
					usage = ck.Usage
				}
			}
			for i, txt := range texts {
				if txt != content {
					t.Errorf("streamed choice %d = %q, want %q", i, txt, content)
				}
			}
			if usage == nil || usage.CompletionTokens != got.Usage.CompletionTokens || usage.PromptTokens != got.Usage.PromptTokens {
				t.Errorf("stream usage %+v, want %+v", usage, got.Usage)
			}
		})
	}
}

func merge(a, b map[string]any) map[string]any {
	out := maps.Clone(a)
	if out == nil {
		out = map[string]any{}
	}
	maps.Copy(out, b)
	return out
}

func TestDemoStreamShape(t *testing.T) {
	d := upstream.NewDemo(upstream.DemoConfig{Now: fixedNow, ReplyTokens: 12, WordsPerChunk: 3})
	for _, includeUsage := range []bool{true, false} {
		t.Run(map[bool]string{true: "include_usage", false: "no usage"}[includeUsage], func(t *testing.T) {
			extra := map[string]any{"stream": true, "n": 2}
			if includeUsage {
				extra["stream_options"] = map[string]any{"include_usage": true}
			}
			s, err := d.Stream(t.Context(), reqBody(t, "hi", extra))
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = s.Close() }()
			var kinds []string
			for {
				ev, err := s.Next()
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				var ck chat.Chunk
				if err := json.Unmarshal(ev, &ck); err != nil {
					t.Fatal(err)
				}
				if _, ok := s.Usage(); ok != (ck.Usage != nil) {
					t.Errorf("Usage() reports %v after chunk %s", ok, ev)
				}
				switch {
				case ck.Usage != nil:
					kinds = append(kinds, "usage")
				case len(ck.Choices) == 1 && ck.Choices[0].Delta.Role == "assistant" && !ck.HasContent():
					kinds = append(kinds, "role")
				case len(ck.Choices) == 1 && ck.HasContent():
					kinds = append(kinds, "content")
				case len(ck.Choices) == 1 && ck.Choices[0].FinishReason != nil:
					kinds = append(kinds, "finish:"+*ck.Choices[0].FinishReason)
				default:
					t.Fatalf("unexpected chunk %s", ev)
				}
				if !includeUsage && strings.Contains(string(ev), `"usage"`) {
					t.Errorf("chunk without include_usage has a usage field: %s", ev)
				}
			}
			if _, err := s.Next(); !errors.Is(err, io.EOF) {
				t.Errorf("Next after the end = %v, want io.EOF", err)
			}
			u, ok := s.Usage()
			if ok != includeUsage || (ok && u.CompletionTokens == 0) {
				t.Errorf("Usage() = %+v, %v", u, ok)
			}
			// Two choices: role, role, content pairs, finish, finish, [usage].
			if len(kinds) < 6 || kinds[0] != "role" || kinds[1] != "role" || kinds[2] != "content" {
				t.Fatalf("chunk kinds %v", kinds)
			}
			tail := kinds[len(kinds)-2:]
			if includeUsage {
				tail = kinds[len(kinds)-3 : len(kinds)-1]
				if kinds[len(kinds)-1] != "usage" {
					t.Errorf("last chunk is %s, want usage", kinds[len(kinds)-1])
				}
			}
			if diff := cmp.Diff([]string{"finish:stop", "finish:stop"}, tail); diff != "" {
				t.Errorf("finish chunks (-want +got):\n%s (all: %v)", diff, kinds)
			}
		})
	}
}

func TestDemoCountPrompt(t *testing.T) {
	d := upstream.NewDemo(upstream.DemoConfig{CountPrompt: func(r *chat.Request) int64 { return 42 }})
	c, err := d.Complete(t.Context(), reqBody(t, "hi", nil))
	if err != nil {
		t.Fatal(err)
	}
	if c.Usage.PromptTokens != 42 || c.Usage.TotalTokens != 42+c.Usage.CompletionTokens {
		t.Errorf("usage %+v, want the prompt counted by CountPrompt", c.Usage)
	}
}

func TestDemoErrors(t *testing.T) {
	d := upstream.NewDemo(upstream.DemoConfig{})
	for _, body := range []string{`not json`, `{"model":"m"}`, `{"model":"m","messages":[{"role":"user","content":"x"}],"n":0}`} {
		if _, err := d.Complete(t.Context(), []byte(body)); !isCode(err, 400, "invalid_request") {
			t.Errorf("Complete(%s) = %v, want a 400 *Error", body, err)
		}
		if _, err := d.Stream(t.Context(), []byte(body)); !isCode(err, 400, "invalid_request") {
			t.Errorf("Stream(%s) = %v, want a 400 *Error", body, err)
		}
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := d.Complete(ctx, reqBody(t, "hi", nil)); !isCode(err, upstream.StatusClientClosed, upstream.CodeCanceled) || !errors.Is(err, context.Canceled) {
		t.Errorf("Complete with a cancelled ctx = %v", err)
	}
}

func isCode(err error, status int, code string) bool {
	e, ok := errors.AsType[*upstream.Error](err)
	return ok && e.Status == status && e.Code == code
}

// TestDemoChunkDelay runs in a synctest bubble: the delay is virtual time.
func TestDemoChunkDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := upstream.NewDemo(upstream.DemoConfig{ChunkDelay: time.Second, ReplyTokens: 20, WordsPerChunk: 5})
		body := reqBody(t, "hi", map[string]any{"stream": true, "stream_options": map[string]any{"include_usage": true}})
		start := time.Now()
		evs := streamAll(t, d, body)
		if got, want := time.Since(start), time.Duration(len(evs))*time.Second; got != want {
			t.Errorf("%d chunks took %v, want %v", len(evs), got, want)
		}

		// Cancelling the request or closing the stream ends a wait at once.
		ctx, cancel := context.WithCancel(t.Context())
		s, err := d.Stream(ctx, body)
		if err != nil {
			t.Fatal(err)
		}
		start = time.Now()
		time.AfterFunc(300*time.Millisecond, cancel)
		if _, err := s.Next(); !errors.Is(err, context.Canceled) || time.Since(start) != 300*time.Millisecond {
			t.Errorf("Next after cancel = %v after %v", err, time.Since(start))
		}
		s, err = d.Stream(t.Context(), body)
		if err != nil {
			t.Fatal(err)
		}
		time.AfterFunc(200*time.Millisecond, func() { _ = s.Close() })
		if _, err := s.Next(); !isCode(err, upstream.StatusClientClosed, upstream.CodeCanceled) {
			t.Errorf("Next after Close = %v", err)
		}
		_ = s.Close() // idempotent
	})
}

func TestDemoModelEchoed(t *testing.T) {
	d := upstream.NewDemo(upstream.DemoConfig{})
	body := []byte(`{"model":"gpt-4o-mini-2024-07-18","messages":[{"role":"user","content":[{"type":"text","text":"part one"},{"type":"image_url","image_url":{"url":"x"}}]}]}`)
	c, err := d.Complete(t.Context(), body)
	if err != nil {
		t.Fatal(err)
	}
	var got openAICompletion
	decodeStrict(t, c.Body, &got)
	if got.Model != "gpt-4o-mini-2024-07-18" || !strings.Contains(got.Choices[0].Message.Content, `You said: "part one".`) {
		t.Errorf("model %q, content %q", got.Model, got.Choices[0].Message.Content)
	}
}
