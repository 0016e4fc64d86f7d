package pricing

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/llm4agents/llm4agents/internal/chat"
)

func parse(tb testing.TB, body string) *chat.Request {
	tb.Helper()
	req, err := chat.ParseRequest([]byte(body))
	if err != nil {
		tb.Fatalf("ParseRequest(%s): %v", body, err)
	}
	return req
}

// The expected counts below were checked against an independent tokenizer
// (js-tiktoken 1.0.21) and, for the first strings, against the tokenizer
// module's own tests.
func TestTokens(t *testing.T) {
	c := NewCounter()
	for _, tc := range []struct {
		encoding, text string
		want           int64
	}{
		{O200kBase, "hello world", 2},
		{Cl100kBase, "hello world", 2},
		{O200kBase, "supercalifragilistic", 6},
		{Cl100kBase, "supercalifragilistic", 7},
		{O200kBase, "We know what we are, but know not what we may be.", 14},
		{Cl100kBase, "We know what we are, but know not what we may be.", 14},
		{O200kBase, "こんにちは世界", 2},
		{Cl100kBase, "こんにちは世界", 4},
		{O200kBase, "Hello, world!", 4},
		// A special token's text in a prompt is text, not the special token.
		{O200kBase, "<|endoftext|>", 7},
		{Cl100kBase, "<|endoftext|>", 7},
		{O200kBase, "", 0},
	} {
		got, err := c.Tokens(tc.encoding, tc.text)
		if err != nil || got != tc.want {
			t.Errorf("Tokens(%s, %q) = %d, %v; want %d", tc.encoding, tc.text, got, err, tc.want)
		}
	}
	for _, enc := range []string{P50kBase, P50kEdit, R50kBase} {
		if n, err := c.Tokens(enc, "hello world"); err != nil || n != 2 {
			t.Errorf("Tokens(%s, hello world) = %d, %v; want 2", enc, n, err)
		}
	}
}

// cookbook is the example conversation of OpenAI's "How to count tokens with
// tiktoken", for which the cookbook reports 129 prompt tokens on gpt-4/3.5
// (cl100k_base) and 124 on gpt-4o/4o-mini (o200k_base), matching the API.
const cookbook = `{"model":%q,"messages":[
{"role":"system","content":"You are a helpful, pattern-following assistant that translates corporate jargon into plain English."},
{"role":"system","name":"example_user","content":"New synergies will help drive top-line growth."},
{"role":"system","name":"example_assistant","content":"Things working well together will increase revenue."},
{"role":"system","name":"example_user","content":"Let's circle back when we have more bandwidth to touch base on opportunities for increased leverage."},
{"role":"system","name":"example_assistant","content":"Let's talk later when we're less busy about how to do better."},
{"role":"user","content":"This late pivot means we don't have time to boil the ocean for the client deliverable."}]}`

const weatherTools = `[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}]`

func TestPromptTokens(t *testing.T) {
	c := NewCounter()
	for _, tc := range []struct {
		name     string
		body     string
		encoding string
		want     int64
	}{
		{"cookbook, gpt-4o-mini", fmt.Sprintf(cookbook, "gpt-4o-mini"), "", 124},
		{"cookbook, gpt-4", fmt.Sprintf(cookbook, "gpt-4-0613"), "", 129},
		{"cookbook, gpt-3.5-turbo", fmt.Sprintf(cookbook, "gpt-3.5-turbo"), "", 129},
		{"cookbook, unknown model is o200k", fmt.Sprintf(cookbook, "llama-3-70b"), "", 124},
		{"cookbook, configured encoding wins", fmt.Sprintf(cookbook, "gpt-4o"), Cl100kBase, 129},
		// 3 (priming) + 3 (message) + 1 (role) + 2 (hello world)
		{"one message", `{"model":"gpt-4o","messages":[{"role":"user","content":"hello world"}]}`, "", 9},
		// + 1 (name) + 1 (name's tokens)
		{"named message", `{"model":"gpt-4o","messages":[{"role":"system","name":"fr","content":"hello world"}]}`, "", 11},
		{"empty and null content", `{"model":"gpt-4o","messages":[{"role":"user","content":""},{"role":"assistant","content":null}]}`, "", 3 + 4 + 4},
		// 3 + 3 + 1 + 4 (text part) + 2 media parts
		{
			"media parts", `{"model":"gpt-4o","messages":[{"role":"user","content":[` +
				`{"type":"text","text":"Describe this image."},` +
				`{"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA"}},` +
				`{"type":"input_audio","input_audio":{"data":"AAAA","format":"wav"}}]}]}`,
			"", 3 + 3 + 1 + 4 + 2*MediaPartTokens,
		},
		{"image only is never free", `{"model":"gpt-4o","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"https://x/y.png"}}]}]}`, "", 3 + 3 + 1 + MediaPartTokens},
		{"refusal part", `{"model":"gpt-4o","messages":[{"role":"assistant","content":[{"type":"refusal","refusal":"Ignore this."}]}]}`, "", 3 + 3 + 1 + 3},
		{"content of another shape counts as JSON", `{"model":"gpt-4o","messages":[{"role":"user","content":42}]}`, "", 3 + 3 + 1 + 1},
		// 3 + user (3+1+7) + assistant with tool_calls (3+1+30) + tool (3+1+4 id+4)
		// + tools JSON (29) + response_format JSON (6)
		{
			"tool conversation", `{"model":"gpt-4o","messages":[` +
				`{"role":"user","content":"What is the weather in Paris?"},` +
				`{"role":"assistant","content":null,"tool_calls":[{"id":"call_abc123","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]},` +
				`{"role":"tool","tool_call_id":"call_abc123","content":"It is sunny."}],` +
				`"tools":` + weatherTools + `,"response_format":{"type":"json_object"}}`,
			"", 3 + 11 + 34 + 12 + 29 + 6,
		},
		{"legacy functions count like tools", `{"model":"gpt-4o","messages":[{"role":"user","content":"hello world"}],"functions":` + weatherTools + `}`, "", 9 + 29},
		{"null tools count nothing", `{"model":"gpt-4o","messages":[{"role":"user","content":"hello world"}],"tools":null,"functions":null}`, "", 9},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := c.PromptTokensWith(parse(t, tc.body), tc.encoding)
			if err != nil || got != tc.want {
				t.Errorf("PromptTokensWith = %d, %v; want %d", got, err, tc.want)
			}
			if tc.encoding == "" {
				if got2, err := c.PromptTokens(parse(t, tc.body)); err != nil || got2 != got {
					t.Errorf("PromptTokens = %d, %v; PromptTokensWith(\"\") = %d", got2, err, got)
				}
			}
		})
	}
}

func TestZeroCounter(t *testing.T) {
	var c Counter
	n, err := c.PromptTokens(parse(t, `{"model":"gpt-4o","messages":[{"role":"user","content":"hello world"}]}`))
	if err != nil || n != 9 {
		t.Fatalf("zero Counter: %d, %v; want 9", n, err)
	}
}

func TestUnknownEncoding(t *testing.T) {
	c := NewCounter()
	if _, err := c.PromptTokensWith(parse(t, fmt.Sprintf(cookbook, "gpt-4o")), "o100k"); !errors.Is(err, ErrUnknownEncoding) {
		t.Errorf("PromptTokensWith(o100k): %v, want ErrUnknownEncoding", err)
	}
	if _, err := c.Tokens("gpt2", "x"); !errors.Is(err, ErrUnknownEncoding) {
		t.Errorf("Tokens(gpt2): %v, want ErrUnknownEncoding", err)
	}
	if KnownEncoding("o100k") || KnownEncoding("") || !KnownEncoding(O200kBase) || !KnownEncoding(Cl100kBase) {
		t.Error("KnownEncoding disagrees with the encodings a Counter has")
	}
}

func TestEncodingFor(t *testing.T) {
	for model, want := range map[string]string{
		"gpt-4o":                      O200kBase,
		"gpt-4o-mini":                 O200kBase,
		"gpt-4o-2024-08-06":           O200kBase,
		"chatgpt-4o-latest":           O200kBase,
		"gpt-4.1":                     O200kBase,
		"gpt-4.1-nano":                O200kBase,
		"gpt-4.5-preview":             O200kBase,
		"gpt-5":                       O200kBase,
		"o1":                          O200kBase,
		"o3-mini":                     O200kBase,
		"o4-mini":                     O200kBase,
		"GPT-4O":                      O200kBase,
		"openai/gpt-4o":               O200kBase,
		"ft:gpt-4o-mini:acme::abc":    O200kBase,
		"gpt-4":                       Cl100kBase,
		"gpt-4-0613":                  Cl100kBase,
		"gpt-4-turbo":                 Cl100kBase,
		"gpt-4-32k":                   Cl100kBase,
		"GPT-4-Turbo":                 Cl100kBase,
		"openai/gpt-4-turbo":          Cl100kBase,
		"ft:gpt-4-0613:acme::abc":     Cl100kBase,
		"gpt-3.5-turbo":               Cl100kBase,
		"gpt-3.5-turbo-0125":          Cl100kBase,
		"gpt-35-turbo":                Cl100kBase, // Azure's spelling
		"text-embedding-3-small":      Cl100kBase,
		"meta-llama/Llama-3.1-8B":     O200kBase,
		"claude-sonnet-4":             O200kBase,
		"demo":                        O200kBase,
		"":                            O200kBase,
		"gpt-40":                      O200kBase,
		"mistralai/gpt-4-lookalike/x": O200kBase, // only the last path element names the model
	} {
		if got := EncodingFor(model); got != want {
			t.Errorf("EncodingFor(%q) = %s, want %s", model, got, want)
		}
		if !KnownEncoding(EncodingFor(model)) {
			t.Errorf("EncodingFor(%q) is not a known encoding", model)
		}
	}
}

// TestCache checks that a remembered count is the count, per encoding, and
// that a full cache starts over.
func TestCache(t *testing.T) {
	text := strings.Repeat("Cached texts must count exactly as uncached ones. こんにちは世界 ", 20)
	cached, uncached := NewCounter(), &Counter{noCache: true}
	for _, enc := range []string{O200kBase, Cl100kBase, O200kBase, Cl100kBase} {
		want, err := uncached.Tokens(enc, text)
		if err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if got, err := cached.Tokens(enc, text); err != nil || got != want {
				t.Fatalf("cached Tokens(%s) = %d, %v; want %d", enc, got, err, want)
			}
		}
	}
	if n := cached.entries.Load(); n != 2 {
		t.Fatalf("cache holds %d entries, want 2 (one per encoding)", n)
	}
	short := "hello world"
	if _, err := cached.Tokens(O200kBase, short); err != nil || cached.entries.Load() != 2 {
		t.Fatalf("a short text was cached: %v, %d entries", err, cached.entries.Load())
	}

	cached.entries.Store(cacheMaxEntries)
	other := strings.Repeat("x y ", 100)
	if _, err := cached.Tokens(O200kBase, other); err != nil {
		t.Fatal(err)
	}
	n := 0
	cached.cache.Range(func(any, any) bool { n++; return true })
	if n != 1 || cached.entries.Load() != 1 {
		t.Fatalf("after overflow the cache holds %d entries (counted %d), want only the new one", n, cached.entries.Load())
	}
}

// TestCounterConcurrent counts the same requests from many goroutines, on two
// encodings at once, and expects the sequential answers (run it with -race).
func TestCounterConcurrent(t *testing.T) {
	for _, c := range []*Counter{NewCounter(), {noCache: true}} {
		counterConcurrent(t, c)
	}
}

func counterConcurrent(t *testing.T, c *Counter) {
	reqs := []*chat.Request{
		parse(t, fmt.Sprintf(cookbook, "gpt-4o")),
		parse(t, fmt.Sprintf(cookbook, "gpt-4")),
		parse(t, `{"model":"gpt-4o","messages":[{"role":"user","content":"`+strings.Repeat("token counting under load ", 200)+`"}]}`),
	}
	want := make([]int64, len(reqs))
	for i, r := range reqs {
		var err error
		if want[i], err = c.PromptTokens(r); err != nil {
			t.Fatal(err)
		}
	}
	const workers, rounds = 16, 30
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for r := range rounds {
				i := (w + r) % len(reqs)
				got, err := c.PromptTokens(reqs[i])
				if err != nil || got != want[i] {
					errs <- fmt.Errorf("worker %d: request %d counted %d (error: %w); want %d", w, i, got, err, want[i])
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// oneKiB is a chat request whose one message is 1 KiB of English prose.
func oneKiB(tb testing.TB) *chat.Request {
	tb.Helper()
	const sentence = "The quick brown fox jumps over the lazy dog while the gateway counts every token twice. "
	text := strings.Repeat(sentence, 1024/len(sentence)+1)[:1024]
	return parse(tb, `{"model":"gpt-4o-mini","messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"`+text+`"}]}`)
}

// BenchmarkPromptTokens measures the tokenizer itself: the cache is off, as
// for a text never seen before.
func BenchmarkPromptTokens(b *testing.B) {
	c := &Counter{noCache: true}
	req := oneKiB(b)
	if _, err := c.PromptTokens(req); err != nil { // build the encoder outside the timing
		b.Fatal(err)
	}
	b.SetBytes(1024)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.PromptTokens(req); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkPromptTokensParallel(b *testing.B) {
	c := &Counter{noCache: true}
	req := oneKiB(b)
	if _, err := c.PromptTokens(req); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(1024)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := c.PromptTokens(req); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkPromptTokensCached counts a request seen before (a paid retry of
// a quoted request).
func BenchmarkPromptTokensCached(b *testing.B) {
	c := NewCounter()
	req := oneKiB(b)
	if _, err := c.PromptTokens(req); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(1024)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.PromptTokens(req); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkQuote(b *testing.B) {
	p := Price{Input: 150_000, Output: 600_000}
	b.ReportAllocs()
	for b.Loop() {
		_ = Quote(1234, 4096, p, 6)
	}
}
