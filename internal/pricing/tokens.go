package pricing

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"strings"
	"sync"
	"sync/atomic"
	"unicode"
	"unicode/utf8"

	"github.com/tiktoken-go/tokenizer"

	"github.com/llm4agents/llm4agents/internal/chat"
)

// Encodings a Counter knows, by their tiktoken names.
const (
	O200kBase  = "o200k_base"  // gpt-4o, gpt-4.1, gpt-4.5, gpt-5, o-series; our default
	Cl100kBase = "cl100k_base" // gpt-4 (not 4o/4.1), gpt-3.5-turbo, text-embedding-*
	P50kBase   = "p50k_base"
	P50kEdit   = "p50k_edit"
	R50kBase   = "r50k_base"
)

// Chat framing overheads, as OpenAI's cookbook counts them ("How to count
// tokens with tiktoken", num_tokens_from_messages) for every current chat
// model: each message is wrapped as <|start|>{role/name}\n{content}<|end|>\n,
// a name costs one token more, and the reply is primed with
// <|start|>assistant<|message|>.
const (
	tokensPerMessage = 3
	tokensPerName    = 1
	tokensReplyPrime = 3
)

// MediaPartTokens is what Counter counts for each content part that is not
// text (image_url, input_audio, file, or any type it does not know), so a quote
// for such a request is never zero. It is the most one image costs on gpt-4o
// with detail "high": OpenAI scales an image to fit 2048x2048, then its short
// side to 768, and bills 85 + 170 tokens per 512-pixel tile; a long image ends
// at 768x2048, 2x4 tiles, 85 + 8*170 = 1445 tokens (a square one at 765, a
// 2048x4096 one at 1105).
//
// It is an estimate, not a bound, for some parts and models: gpt-4o-mini bills
// images at about 33 times the tokens (to keep its per-image price equal to
// gpt-4o's), audio is billed by duration, and a file part by its pages. An
// operator serving those should price the model's input to cover them.
const MediaPartTokens = 1445

// ErrUnknownEncoding is returned for an encoding name the tokenizer does not
// have.
var ErrUnknownEncoding = errors.New("unknown tokenizer encoding")

// codecs holds one lazily built codec per encoding. A codec is immutable once
// built and safe for concurrent use (its split regexp keeps per-call state in
// a pool), so every Counter shares them; the BPE tables are embedded in the
// tokenizer module and decoded on first use.
var codecs = map[string]func() (tokenizer.Codec, error){
	O200kBase:  lazyCodec(tokenizer.O200kBase),
	Cl100kBase: lazyCodec(tokenizer.Cl100kBase),
	P50kBase:   lazyCodec(tokenizer.P50kBase),
	P50kEdit:   lazyCodec(tokenizer.P50kEdit),
	R50kBase:   lazyCodec(tokenizer.R50kBase),
}

func lazyCodec(enc tokenizer.Encoding) func() (tokenizer.Codec, error) {
	return sync.OnceValues(func() (tokenizer.Codec, error) { return tokenizer.Get(enc) })
}

// KnownEncoding reports whether name is an encoding a Counter can use.
func KnownEncoding(name string) bool {
	_, ok := codecs[name]
	return ok
}

// EncodingFor returns the encoding for a model name, as OpenAI assigns them:
// cl100k_base for gpt-4 (but not gpt-4o, gpt-4.1 or gpt-4.5), gpt-3.5 and the
// text-embedding models, and o200k_base for everything else, including models
// it does not know (o200k_base is what current OpenAI models use; for other
// providers' models any BPE count is an estimate). A provider prefix such as
// "openai/" and a fine-tune prefix "ft:" are ignored; case is ignored.
func EncodingFor(model string) string {
	m := strings.ToLower(model)
	if i := strings.LastIndexByte(m, '/'); i >= 0 {
		m = m[i+1:]
	}
	m = strings.TrimPrefix(m, "ft:")
	switch {
	case strings.HasPrefix(m, "gpt-4o"), strings.HasPrefix(m, "gpt-4.1"), strings.HasPrefix(m, "gpt-4.5"):
		return O200kBase
	case m == "gpt-4", strings.HasPrefix(m, "gpt-4-"), strings.HasPrefix(m, "gpt-4:"),
		strings.HasPrefix(m, "gpt-3.5"), strings.HasPrefix(m, "gpt-35"),
		strings.HasPrefix(m, "text-embedding-"), strings.HasPrefix(m, "davinci-002"), strings.HasPrefix(m, "babbage-002"):
		return Cl100kBase
	}
	return O200kBase
}

// Counter estimates the prompt tokens of a chat request the way the upstream
// will count them, with the model's tiktoken encoding. It is safe for
// concurrent use, and its zero value is ready to use; the encoders are built
// once per process and shared. A Counter must not be copied after first use.
//
// Tokenizing runs at roughly 13 MB/s a core, and the same texts come back often: a
// paid retry repeats the request its 402 quoted, and every turn of a
// conversation resends the turns before it. So a Counter remembers the count of
// each text of at least cacheMinBytes, keyed by a 128-bit keyed hash of the
// text (the key is random per process, so collisions cannot be aimed at), for
// up to cacheMaxEntries texts; past that it forgets them all and starts over.
type Counter struct {
	cache   sync.Map     // cacheKey -> int64
	entries atomic.Int64 // approximate size of cache
	noCache bool         // tests and benchmarks measure the tokenizer itself
}

// Bounds of Counter's cache: texts shorter than cacheMinBytes are cheaper to
// count than to remember; cacheMaxEntries keys and counts take about 4 MB of
// heap (measured: about 100 bytes an entry in a sync.Map).
const (
	cacheMinBytes   = 256
	cacheMaxEntries = 1 << 15
)

type cacheKey struct {
	encoding string // one of the encoding constants: no allocation
	h1, h2   uint64
}

var cacheSeed1, cacheSeed2 = maphash.MakeSeed(), maphash.MakeSeed()

// count counts text with codec, through the cache when text is long enough.
func (c *Counter) count(codec tokenizer.Codec, encoding, text string) (int64, error) {
	if c == nil || c.noCache || len(text) < cacheMinBytes {
		return countBounded(codec, text)
	}
	key := cacheKey{encoding, maphash.String(cacheSeed1, text), maphash.String(cacheSeed2, text)}
	if v, ok := c.cache.Load(key); ok {
		return v.(int64), nil
	}
	n, err := countBounded(codec, text)
	if err != nil {
		return 0, err
	}
	if c.entries.Add(1) > cacheMaxEntries {
		c.cache.Clear()
		c.entries.Store(1)
	}
	c.cache.Store(key, n)
	return n, nil
}

// maxWhitespaceRun is the longest run of white space countBounded hands to
// the tokenizer in one piece. The tokenizer's split pattern (the tiktoken
// regexps, run by a backtracking engine) rescans the rest of a white space
// run at every match inside it, so a run that mixes line breaks with other
// white space (" \n \n ...") costs time quadratic in its length: 146 ms for
// 16 KiB, about 10 minutes of a core for 1 MiB, before anyone has paid. Runs
// this long do not occur in prompts people write; indentation is a few
// dozen bytes.
const maxWhitespaceRun = 128

// countBounded counts text with codec in linear time: white space runs
// longer than maxWhitespaceRun bytes are cut into pieces of at most that
// length, each piece ending where the next starts, and the text between
// cuts is counted on its own. Text with no such run is counted exactly as
// codec.Count counts it. A cut keeps the tokenizer from merging across it,
// which can only add tokens for white space, and one token more is added
// for each cut, so a cut never lowers a quote (FuzzCountBounded checks
// both).
func countBounded(codec tokenizer.Codec, text string) (int64, error) {
	var total int64
	start, run := 0, 0
	for i := 0; i < len(text); {
		r, w := utf8.DecodeRuneInString(text[i:])
		if !unicode.IsSpace(r) {
			run = 0
			i += w
			continue
		}
		if run+w > maxWhitespaceRun {
			n, err := codec.Count(text[start:i])
			if err != nil {
				return 0, err
			}
			total += int64(n) + 1
			start, run = i, 0
		}
		run += w
		i += w
	}
	n, err := codec.Count(text[start:])
	if err != nil {
		return 0, err
	}
	return total + int64(n), nil
}

// NewCounter returns a Counter.
func NewCounter() *Counter { return &Counter{} }

// PromptTokens counts the prompt tokens of req with the encoding of its model
// (EncodingFor(req.Model)).
func (c *Counter) PromptTokens(req *chat.Request) (int64, error) {
	return c.PromptTokensWith(req, "")
}

// PromptTokensWith counts the prompt tokens of req with the named encoding (a
// model's configured one), or with EncodingFor(req.Model) when encoding is "".
//
// The count follows OpenAI's cookbook: per message 3 tokens plus the tokens of
// its role and its content, and of its name plus 1 when it has one; plus 3 for
// the reply's priming. Beyond the cookbook, so that nothing the model reads is
// free, it adds the tokens of each part of what the cookbook leaves out, each
// counted as raw JSON: a message's tool_calls and tool_call_id, and the
// request's tools, functions and response_format. OpenAI renders tool
// definitions more compactly than their JSON, so this over-estimates them, by
// design (a quote should not fall short). Text parts of array content are
// counted one by one, refusal parts as text, and every other part as
// MediaPartTokens. Content that is neither a string nor an array of parts is
// counted as its raw JSON.
func (c *Counter) PromptTokensWith(req *chat.Request, encoding string) (int64, error) {
	if encoding == "" {
		encoding = EncodingFor(req.Model)
	}
	codec, err := codecFor(encoding)
	if err != nil {
		return 0, err
	}
	t := tally{c: c, codec: codec, encoding: encoding}
	t.n = tokensReplyPrime
	for i := range req.Messages {
		m := &req.Messages[i]
		t.n += tokensPerMessage
		t.text(m.Role)
		t.content(m.Content)
		if m.Name != "" {
			t.n += tokensPerName
			t.text(m.Name)
		}
		t.raw(m.ToolCalls)
		t.text(m.ToolCallID)
	}
	t.raw(req.Tools)
	for _, key := range []string{"functions", "response_format"} {
		if v, ok := req.Field(key); ok {
			t.raw(v)
		}
	}
	return t.n, t.err
}

// Tokens counts the tokens of one text with the named encoding. The demo
// upstream uses it to report usage.
func (c *Counter) Tokens(encoding, text string) (int64, error) {
	codec, err := codecFor(encoding)
	if err != nil {
		return 0, err
	}
	n, err := c.count(codec, encoding, text)
	if err != nil {
		return 0, fmt.Errorf("count tokens: %w", err)
	}
	return n, nil
}

func codecFor(encoding string) (tokenizer.Codec, error) {
	get, ok := codecs[encoding]
	if !ok {
		return nil, fmt.Errorf("%w %q", ErrUnknownEncoding, encoding)
	}
	codec, err := get()
	if err != nil {
		return nil, fmt.Errorf("load encoding %s: %w", encoding, err)
	}
	return codec, nil
}

// tally sums token counts and keeps the first error.
type tally struct {
	c        *Counter
	codec    tokenizer.Codec
	encoding string
	n        int64
	err      error
}

func (t *tally) text(s string) {
	if s == "" || t.err != nil {
		return
	}
	n, err := t.c.count(t.codec, t.encoding, s)
	if err != nil {
		t.err = fmt.Errorf("count tokens: %w", err)
		return
	}
	t.n += n
}

// raw counts a JSON value as its text; absent and null count nothing.
func (t *tally) raw(v json.RawMessage) {
	v = bytes.TrimSpace(v)
	if len(v) == 0 || string(v) == "null" {
		return
	}
	t.text(string(v))
}

// contentPart is the part of a content array element the count reads.
type contentPart struct {
	Type         string `json:"type"`
	Text         string `json:"text"`
	RefusalError string `json:"refusal"`
}

// content counts a message's content: a string, or an array of parts (text and
// refusal parts by their text, any other part as MediaPartTokens). Anything
// else is counted as raw JSON, so it is never free.
func (t *tally) content(c json.RawMessage) {
	c = bytes.TrimSpace(c)
	if len(c) == 0 || string(c) == "null" {
		return
	}
	switch c[0] {
	case '"':
		var s string
		if json.Unmarshal(c, &s) == nil {
			t.text(s)
			return
		}
	case '[':
		var parts []contentPart
		if json.Unmarshal(c, &parts) == nil {
			for _, p := range parts {
				switch p.Type {
				case "text":
					t.text(p.Text)
				case "refusal":
					t.text(p.RefusalError)
				default:
					t.n += MediaPartTokens
				}
			}
			return
		}
	}
	t.text(string(c))
}
