package upstream

import (
	"unicode/utf8"

	"github.com/llm4agents/llm4agents/internal/chat"
)

// Tokenizer counts the tokens of a text. The Demo model reports its usage with
// one; the gateway's tiktoken counter fits it through TokenizerFunc.
type Tokenizer interface {
	Count(text string) int
}

// TokenizerFunc adapts a function to Tokenizer, such as the gateway's tiktoken
// counter: TokenizerFunc(func(s string) int { n, _ := c.Tokens(enc, s); return int(n) }).
type TokenizerFunc func(text string) int

// Count implements Tokenizer.
func (f TokenizerFunc) Count(text string) int { return f(text) }

// ApproxTokenizer is a Tokenizer that needs no vocabulary. It approximates
// OpenAI's byte-pair encodings for English text, and over-counts others:
//
//   - a run of ASCII letters is ceil(len/4) tokens, a run of ASCII digits
//     ceil(len/3) (tiktoken splits numbers into groups of up to three digits);
//   - a single space before a letter or digit run is part of that run's first
//     token, as " word" is one BPE token; any other whitespace run is 1 token;
//   - every other ASCII character is 1 token, and so is every non-ASCII rune.
//
// Counts are additive over a text split just before a space that follows a
// non-space character, which lets the demo build its reply word by word and
// cut it at a token count exactly.
type ApproxTokenizer struct{}

// Count implements Tokenizer.
func (ApproxTokenizer) Count(s string) int {
	n := 0
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case isLetter(c):
			j := runEnd(s, i, isLetter)
			n += (j - i + 3) / 4
			i = j
		case isDigit(c):
			j := runEnd(s, i, isDigit)
			n += (j - i + 2) / 3
			i = j
		case isSpace(c):
			j := runEnd(s, i, isSpace)
			if j < len(s) && (isLetter(s[j]) || isDigit(s[j])) && s[j-1] == ' ' {
				if j-1 > i {
					n++ // the whitespace before the space that joins the word
				}
			} else {
				n++
			}
			i = j
		case c < utf8.RuneSelf:
			n++
			i++
		default:
			_, size := utf8.DecodeRuneInString(s[i:])
			n++
			i += size
		}
	}
	return n
}

func runEnd(s string, i int, in func(byte) bool) int {
	for i < len(s) && in(s[i]) {
		i++
	}
	return i
}

func isLetter(c byte) bool { return c|0x20 >= 'a' && c|0x20 <= 'z' }
func isDigit(c byte) bool  { return c >= '0' && c <= '9' }
func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'
}

// promptTokens counts a request's prompt the way OpenAI's cookbook does for its
// current chat models: 3 tokens of framing per message, the tokens of its role,
// text, name (+1), tool calls and tool_call_id, 3 to prime the reply, and the
// tools' JSON as text. Non-text content parts (images, audio) are not counted.
func promptTokens(tok Tokenizer, r *chat.Request) int64 {
	n := 3
	for _, m := range r.Messages {
		n += 3 + tok.Count(m.Role) + tok.Count(m.Text())
		if m.Name != "" {
			n += tok.Count(m.Name) + 1
		}
		if len(m.ToolCalls) > 0 && string(m.ToolCalls) != "null" {
			n += tok.Count(string(m.ToolCalls))
		}
		n += tok.Count(m.ToolCallID)
	}
	if len(r.Tools) > 0 {
		n += tok.Count(string(r.Tools))
	}
	return int64(n)
}

var (
	_ Tokenizer = ApproxTokenizer{}
	_ Tokenizer = TokenizerFunc(nil)
)
