package upstream

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/llm4agents/llm4agents/internal/chat"
)

const (
	defaultReplyTokens   = 128
	defaultWordsPerChunk = 3
	// echoRunes is how much of the last user message the demo repeats.
	echoRunes = 200

	demoIntro       = "This is the llm4agents demo model, not a real LLM. You said: "
	demoFingerprint = "fp_llm4agents_demo"
)

// demoFiller is repeated after the echo until the reply is ReplyTokens long.
var demoFiller = []string{
	" The demo model answers every request the same way, so tests and demos can rely on it.",
	" It counts tokens, honours max_tokens and streams its reply a few words at a time.",
	" Point the gateway at a real upstream provider to get real answers.",
}

// DemoConfig tunes a Demo. The zero value selects the defaults in the comments.
type DemoConfig struct {
	// ReplyTokens is the length of a reply nobody capped, in tokens: the intro
	// and the echo of the last user message, then filler up to this many tokens
	// (the reply ends at a word, so it can be a few tokens shorter). An echo
	// longer than this is still given whole. Default 128.
	ReplyTokens int
	// WordsPerChunk is how many words each streamed content chunk carries.
	// Default 3.
	WordsPerChunk int
	// ChunkDelay is waited before each streamed chunk, to show streaming in the
	// demo and to test slow upstreams. Default none.
	ChunkDelay time.Duration
	// Tokenizer counts prompt and completion tokens. Default ApproxTokenizer.
	Tokenizer Tokenizer
	// CountPrompt counts a request's prompt tokens. Default: OpenAI's cookbook
	// formula over Tokenizer (3 tokens of framing per message, 3 to prime the
	// reply, text parts and tools counted as text). Set it to the gateway's own
	// counter to make prompt_tokens equal what the gateway quoted.
	CountPrompt func(*chat.Request) int64
	// Now gives the "created" time of answers. Default time.Now.
	Now func() time.Time
}

// Demo is an in-process Provider with no network: a deterministic model that
// says plainly it is a demo, echoes the start of the last user message, then
// pads with filler. Equal request bodies get equal answers (ids included) but
// for "created", which is Now.
//
// It honours max_completion_tokens, else max_tokens: no choice is longer than
// the cap, and a reply cut by it ends with finish_reason "length". n gives n
// identical choices, and usage counts them all, as OpenAI does: completion_tokens
// is n times the tokens of one choice's content. A stream sends a role chunk
// per choice, content chunks of a few words, a finish chunk per choice and,
// when stream_options.include_usage is set, a usage chunk with no choices;
// chunks carry "usage": null before it, as OpenAI's do. Tools are ignored: the
// demo only writes text.
//
// A Demo is safe for concurrent use.
type Demo struct {
	cfg DemoConfig
}

// NewDemo returns a Demo with cfg's zero fields set to their defaults.
func NewDemo(cfg DemoConfig) *Demo {
	if cfg.ReplyTokens <= 0 {
		cfg.ReplyTokens = defaultReplyTokens
	}
	if cfg.WordsPerChunk <= 0 {
		cfg.WordsPerChunk = defaultWordsPerChunk
	}
	if cfg.Tokenizer == nil {
		cfg.Tokenizer = ApproxTokenizer{}
	}
	if cfg.CountPrompt == nil {
		tok := cfg.Tokenizer
		cfg.CountPrompt = func(r *chat.Request) int64 { return promptTokens(tok, r) }
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Demo{cfg: cfg}
}

// demoAnswer is what one request gets, before it is shaped as JSON.
type demoAnswer struct {
	id      string
	created int64
	model   string
	n       int
	words   []string // one choice's content, word by word
	content string
	finish  string
	usage   chat.Usage
}

func (d *Demo) answer(body []byte) (*demoAnswer, *chat.Request, error) {
	r, err := chat.ParseRequest(body)
	if err != nil {
		return nil, nil, &Error{
			Status: http.StatusBadRequest, Type: "invalid_request_error", Code: "invalid_request",
			Message: err.Error(), Err: err,
		}
	}
	sum := sha256.Sum256(body)
	a := &demoAnswer{
		id:      "chatcmpl-" + hex.EncodeToString(sum[:12]),
		created: d.cfg.Now().Unix(),
		model:   r.Model,
		n:       int(r.Choices()),
	}
	a.words, a.finish = d.reply(r)
	a.content = strings.Join(a.words, "")
	one := int64(d.cfg.Tokenizer.Count(a.content))
	prompt := d.cfg.CountPrompt(r)
	a.usage = chat.Usage{
		PromptTokens:            prompt,
		CompletionTokens:        one * int64(a.n),
		TotalTokens:             prompt + one*int64(a.n),
		PromptTokensDetails:     json.RawMessage(`{"cached_tokens":0,"audio_tokens":0}`),
		CompletionTokensDetails: json.RawMessage(`{"reasoning_tokens":0,"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}`),
	}
	return a, r, nil
}

// reply returns one choice's content as words (each but the first led by its
// space) and its finish reason.
func (d *Demo) reply(r *chat.Request) ([]string, string) {
	tok := d.cfg.Tokenizer
	echo := ""
	for _, m := range slices.Backward(r.Messages) {
		if m.Role == "user" {
			echo = m.Text()
			break
		}
	}
	switch {
	case echo == "":
		echo = "(nothing)"
	case utf8.RuneCountInString(echo) > echoRunes:
		cut := 0
		for range echoRunes {
			_, size := utf8.DecodeRuneInString(echo[cut:])
			cut += size
		}
		echo = strings.TrimRight(echo[:cut], " \t\r\n") + "..."
	}
	words := splitWords(demoIntro + `"` + echo + `".`)
	tokens := 0
	for _, w := range words {
		tokens += tok.Count(w)
	}
	// Filler up to ReplyTokens, a whole word at a time.
	for i := 0; tokens < d.cfg.ReplyTokens; i++ {
		fw := splitWords(demoFiller[i%len(demoFiller)])
		full := false
		for _, w := range fw {
			c := tok.Count(w)
			if tokens+c > d.cfg.ReplyTokens {
				full = true
				break
			}
			words = append(words, w)
			tokens += c
		}
		if full {
			break
		}
	}
	limit := tokens
	finish := "stop"
	if c := r.OutputCap(); c > 0 && c < int64(tokens) {
		limit, finish = int(c), "length"
	}
	return fitTokens(tok, words, limit), finish
}

// fitTokens returns the longest prefix of words, the last one possibly cut
// inside, whose text is at most limit tokens. Words are counted one by one
// (exact for ApproxTokenizer, where counts add up at word starts); the whole is
// counted again at the end, so another Tokenizer can never exceed the limit.
func fitTokens(tok Tokenizer, words []string, limit int) []string {
	var out []string
	used := 0
	for _, w := range words {
		c := tok.Count(w)
		if used+c <= limit {
			out = append(out, w)
			used += c
			continue
		}
		// The longest rune prefix of w that still fits.
		best := ""
		for i := range w {
			if i > 0 && used+tok.Count(w[:i]) <= limit {
				best = w[:i]
			}
		}
		if best != "" {
			out = append(out, best)
		}
		break
	}
	for len(out) > 0 && tok.Count(strings.Join(out, "")) > limit {
		last := out[len(out)-1]
		_, size := utf8.DecodeLastRuneInString(last)
		if last = last[:len(last)-size]; last == "" {
			out = out[:len(out)-1]
		} else {
			out[len(out)-1] = last
		}
	}
	return out
}

// splitWords cuts s just before each space that follows a non-space, so each
// word but the first carries its leading space, as BPE tokens do.
func splitWords(s string) []string {
	var words []string
	start := 0
	for i := 1; i < len(s); i++ {
		if s[i] == ' ' && !isSpace(s[i-1]) {
			words = append(words, s[start:i])
			start = i
		}
	}
	if start < len(s) {
		words = append(words, s[start:])
	}
	return words
}

// Complete implements Provider.
func (d *Demo) Complete(ctx context.Context, body []byte) (*Completion, error) {
	if err := ctx.Err(); err != nil {
		return nil, contextError(err)
	}
	a, _, err := d.answer(body)
	if err != nil {
		return nil, err
	}
	c := completionJSON{
		ID: a.id, Object: "chat.completion", Created: a.created, Model: a.model,
		Choices: make([]choiceJSON, a.n), Usage: &a.usage,
		ServiceTier: "default", SystemFingerprint: demoFingerprint,
	}
	for i := range c.Choices {
		c.Choices[i] = choiceJSON{
			Index:        i,
			Message:      messageJSON{Role: "assistant", Content: a.content, Annotations: []struct{}{}},
			FinishReason: a.finish,
		}
	}
	out, err := marshal(c)
	if err != nil {
		return nil, upstreamFailed(err)
	}
	return &Completion{Body: out, Usage: a.usage, UsageReported: true, Header: http.Header{}}, nil
}

// Stream implements Provider. The answer is computed whole; ChunkDelay paces it.
func (d *Demo) Stream(ctx context.Context, body []byte) (Stream, error) {
	if err := ctx.Err(); err != nil {
		return nil, contextError(err)
	}
	a, r, err := d.answer(body)
	if err != nil {
		return nil, err
	}
	s := &demoStream{ctx: ctx, delay: d.cfg.ChunkDelay, closed: make(chan struct{}), usage: a.usage, usageAt: -1}
	base := chunkJSON{
		ID: a.id, Object: "chat.completion.chunk", Created: a.created, Model: a.model,
		ServiceTier: "default", SystemFingerprint: demoFingerprint,
	}
	if r.IncludeUsage {
		base.Usage = json.RawMessage("null")
	}
	add := func(c chunkJSON) error {
		b, err := marshal(c)
		if err != nil {
			return upstreamFailed(err)
		}
		s.events = append(s.events, b)
		return nil
	}
	perChoice := func(delta deltaJSON, finish *string) error {
		for i := range a.n {
			c := base
			c.Choices = []chunkChoiceJSON{{Index: i, Delta: delta, FinishReason: finish}}
			if err := add(c); err != nil {
				return err
			}
		}
		return nil
	}
	empty := ""
	if err := perChoice(deltaJSON{Role: "assistant", Content: &empty}, nil); err != nil {
		return nil, err
	}
	for i := 0; i < len(a.words); i += d.cfg.WordsPerChunk {
		text := strings.Join(a.words[i:min(i+d.cfg.WordsPerChunk, len(a.words))], "")
		if err := perChoice(deltaJSON{Content: &text}, nil); err != nil {
			return nil, err
		}
	}
	if err := perChoice(deltaJSON{}, &a.finish); err != nil {
		return nil, err
	}
	if r.IncludeUsage {
		c := base
		c.Choices = []chunkChoiceJSON{}
		c.Usage = &a.usage
		if err := add(c); err != nil {
			return nil, err
		}
		s.usageAt = len(s.events) - 1
	}
	return s, nil
}

// demoStream hands out a computed answer's chunks. It holds the request's
// context, as an http.Response body does, so a cancelled request ends it.
type demoStream struct {
	ctx       context.Context
	delay     time.Duration
	events    [][]byte
	next      int
	usage     chat.Usage
	usageAt   int // index of the usage chunk; -1 without include_usage
	closed    chan struct{}
	closeOnce sync.Once
}

func (s *demoStream) Next() ([]byte, error) {
	if s.next >= len(s.events) {
		return nil, io.EOF
	}
	if s.delay > 0 {
		t := time.NewTimer(s.delay)
		select {
		case <-t.C:
		case <-s.ctx.Done():
			t.Stop()
			return nil, contextError(s.ctx.Err())
		case <-s.closed:
			t.Stop()
			return nil, canceled(errClosed)
		}
	}
	select {
	case <-s.closed:
		return nil, canceled(errClosed)
	default:
	}
	if err := s.ctx.Err(); err != nil {
		return nil, contextError(err)
	}
	ev := s.events[s.next]
	s.events[s.next] = nil
	s.next++
	return ev, nil
}

func (s *demoStream) Usage() (chat.Usage, bool) {
	if s.usageAt < 0 || s.next <= s.usageAt {
		return chat.Usage{}, false
	}
	return s.usage, true
}

func (s *demoStream) Close() error {
	s.closeOnce.Do(func() { close(s.closed) })
	return nil
}

// errClosed is the cause of a stream's end after Close.
var errClosed = errors.New("stream closed")

// contextError maps the caller's context error: a deadline is a timeout, a
// cancellation means nobody waits.
func contextError(err error) *Error {
	if errors.Is(err, context.DeadlineExceeded) {
		return timeout(err)
	}
	return canceled(err)
}

// The OpenAI wire shapes the demo writes, fields in OpenAI's order.

type completionJSON struct {
	ID                string       `json:"id"`
	Object            string       `json:"object"`
	Created           int64        `json:"created"`
	Model             string       `json:"model"`
	Choices           []choiceJSON `json:"choices"`
	Usage             *chat.Usage  `json:"usage"`
	ServiceTier       string       `json:"service_tier"`
	SystemFingerprint string       `json:"system_fingerprint"`
}

type choiceJSON struct {
	Index        int         `json:"index"`
	Message      messageJSON `json:"message"`
	Logprobs     *struct{}   `json:"logprobs"`
	FinishReason string      `json:"finish_reason"`
}

type messageJSON struct {
	Role         string     `json:"role"`
	Content      string     `json:"content"`
	RefusalError *string    `json:"refusal"`
	Annotations  []struct{} `json:"annotations"`
}

type chunkJSON struct {
	ID                string            `json:"id"`
	Object            string            `json:"object"`
	Created           int64             `json:"created"`
	Model             string            `json:"model"`
	ServiceTier       string            `json:"service_tier"`
	SystemFingerprint string            `json:"system_fingerprint"`
	Choices           []chunkChoiceJSON `json:"choices"`
	Usage             any               `json:"usage,omitempty"` // absent, null, or *chat.Usage
}

type chunkChoiceJSON struct {
	Index        int       `json:"index"`
	Delta        deltaJSON `json:"delta"`
	Logprobs     *struct{} `json:"logprobs"`
	FinishReason *string   `json:"finish_reason"`
}

type deltaJSON struct {
	Role    string  `json:"role,omitempty"`
	Content *string `json:"content,omitempty"`
}

// marshal encodes v as compact JSON without HTML escaping, as OpenAI does.
func marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

var (
	_ Provider = (*Demo)(nil)
	_ Stream   = (*demoStream)(nil)
)
