package upstream

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestApproxTokenizer(t *testing.T) {
	tests := []struct {
		in   string
		want int
	}{
		{"", 0},
		{"hello", 2},       // ceil(5/4)
		{"the", 1},         //
		{" the", 1},        // the space joins the word
		{"the cat sat", 3}, //
		{"a  b", 3},        // a, the first space, " b"
		{"2024", 2},        // ceil(4/3)
		{"hi, there!", 5},  // hi , " there"(2) !
		{"line\nnext", 3},  // line, \n, next
		{"héllo", 3},       // h, é, llo
		{"日本語", 3},         // one per rune
		{"   ", 1},         // a whitespace run
		{"{\"a\": 1}", 7},  // { " a " : " 1" }
		{"x" + strings.Repeat("y", 7), 2},
	}
	for _, tc := range tests {
		if got := (ApproxTokenizer{}).Count(tc.in); got != tc.want {
			t.Errorf("Count(%q) = %d, want %d", tc.in, got, tc.want)
		}
	}
}

// FuzzApproxTokenizerAdditive checks the property the demo relies on: counts
// add up over splitWords.
func FuzzApproxTokenizerAdditive(f *testing.F) {
	f.Add("This is the llm4agents demo model. You said: \"hi\n there\"")
	f.Add("a  b\t c\n\n d 1234 ,x")
	f.Add("日本 語 ü é")
	f.Fuzz(func(t *testing.T, s string) {
		tok := ApproxTokenizer{}
		words := splitWords(s)
		if strings.Join(words, "") != s {
			t.Fatalf("splitWords(%q) = %q does not join back", s, words)
		}
		sum := 0
		for _, w := range words {
			sum += tok.Count(w)
		}
		if whole := tok.Count(s); sum != whole {
			t.Fatalf("Count(%q) = %d, but its words %q add up to %d", s, whole, words, sum)
		}
	})
}

// byteTokenizer counts ceil(bytes/3): not additive over words.
type byteTokenizer struct{}

func (byteTokenizer) Count(s string) int { return (len(s) + 2) / 3 }

func TestFitTokens(t *testing.T) {
	words := splitWords("The quick brown fox jumps over the lazy dog, 日本語 twice over.")
	for _, tok := range []Tokenizer{ApproxTokenizer{}, byteTokenizer{}} {
		total := tok.Count(strings.Join(words, ""))
		for limit := 0; limit <= total+2; limit++ {
			got := strings.Join(fitTokens(tok, words, limit), "")
			n := tok.Count(got)
			if n > limit {
				t.Fatalf("%T: fitTokens(limit %d) = %q, %d tokens", tok, limit, got, n)
			}
			if !utf8.ValidString(got) {
				t.Fatalf("%T: fitTokens(limit %d) = %q, not UTF-8", tok, limit, got)
			}
			if _, additive := tok.(ApproxTokenizer); additive && limit <= total && n != limit {
				t.Errorf("%T: fitTokens(limit %d) = %q, %d tokens, want exactly the limit", tok, limit, got, n)
			}
		}
	}
}

// TestDemoWithTokenizerFunc: a non-additive tokenizer plugged in through
// TokenizerFunc still never exceeds the cap, and usage is its count.
func TestDemoWithTokenizerFunc(t *testing.T) {
	tok := TokenizerFunc(func(s string) int { return (len(s) + 2) / 3 })
	d := NewDemo(DemoConfig{Tokenizer: tok})
	for _, limit := range []int{1, 2, 5, 17, 60, 1000} {
		body := []byte(`{"model":"m","messages":[{"role":"user","content":"héllo wörld"}],"max_tokens":` + strconv.Itoa(limit) + `}`)
		c, err := d.Complete(t.Context(), body)
		if err != nil {
			t.Fatal(err)
		}
		var got struct {
			Choices []struct {
				Message struct{ Content string } `json:"message"`
			} `json:"choices"`
		}
		if err := json.Unmarshal(c.Body, &got); err != nil {
			t.Fatal(err)
		}
		n := tok.Count(got.Choices[0].Message.Content)
		if n > limit || int64(n) != c.Usage.CompletionTokens {
			t.Errorf("max_tokens %d: %d tokens, usage %d", limit, n, c.Usage.CompletionTokens)
		}
	}
}
