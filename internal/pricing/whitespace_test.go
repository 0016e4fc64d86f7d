package pricing

import (
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/tiktoken-go/tokenizer"
)

// recordingCodec is a codec that remembers the longest white space run of
// any text it was asked to count.
type recordingCodec struct {
	tokenizer.Codec
	longestRun int
	calls      int
}

func (c *recordingCodec) Count(s string) (int, error) {
	c.calls++
	c.longestRun = max(c.longestRun, longestWhitespaceRun(s))
	return c.Codec.Count(s)
}

func longestWhitespaceRun(s string) int {
	longest, run := 0, 0
	for _, r := range s {
		if unicode.IsSpace(r) {
			run += utf8.RuneLen(r)
			longest = max(longest, run)
		} else {
			run = 0
		}
	}
	return longest
}

// countRecorded returns countBounded's count of text, the tokenizer's own
// count, and the codec that recorded what countBounded asked of it.
func countRecorded(t *testing.T, encoding, text string) (got, want int64, rc *recordingCodec) {
	t.Helper()
	rc = &recordingCodec{Codec: codec(t, encoding)}
	got, err := countBounded(rc, text)
	if err != nil {
		t.Fatal(err)
	}
	n, err := rc.Codec.Count(text)
	if err != nil {
		t.Fatal(err)
	}
	return got, int64(n), rc
}

func codec(tb testing.TB, encoding string) tokenizer.Codec {
	tb.Helper()
	c, err := codecFor(encoding)
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

// TestCountBoundedExact checks that text without a white space run longer
// than maxWhitespaceRun is counted exactly as the tokenizer counts it, in
// one call.
func TestCountBoundedExact(t *testing.T) {
	texts := []string{
		"",
		"hello world",
		"We know what we are,\n\n  but know not what we may be.",
		"func f() {\n\t\treturn 1\n\t}\n",
		"x" + strings.Repeat(" ", maxWhitespaceRun) + "y",
		strings.Repeat(" \n", maxWhitespaceRun/2),
		strings.Repeat("\u3000", maxWhitespaceRun/3) + "end",
		strings.Repeat("word   \n", 500),
	}
	for _, enc := range []string{O200kBase, Cl100kBase} {
		for _, text := range texts {
			got, want, rc := countRecorded(t, enc, text)
			if got != want || rc.calls != 1 {
				t.Errorf("%s %q: countBounded = %d in %d calls, the tokenizer counts %d", enc, truncateForLog(text), got, rc.calls, want)
			}
		}
	}
}

// TestCountBoundedLongRuns checks that a long white space run reaches the
// tokenizer in pieces no longer than maxWhitespaceRun, and that the count
// is never lower than the tokenizer's own.
func TestCountBoundedLongRuns(t *testing.T) {
	texts := []string{
		strings.Repeat(" \n", 4096),
		strings.Repeat("\n ", 4096),
		strings.Repeat(" ", 8192),
		strings.Repeat("\r\n\t", 3000),
		"a" + strings.Repeat(" \u00a0\n\u2028", 1000) + "b",
		strings.Repeat("word"+strings.Repeat(" \n", 200), 20),
	}
	for _, enc := range []string{O200kBase, Cl100kBase} {
		for _, text := range texts {
			got, want, rc := countRecorded(t, enc, text)
			if rc.longestRun > maxWhitespaceRun {
				t.Errorf("%s %q: the tokenizer was given a white space run of %d bytes", enc, truncateForLog(text), rc.longestRun)
			}
			if got < want {
				t.Errorf("%s %q: countBounded = %d, below the tokenizer's %d", enc, truncateForLog(text), got, want)
			}
		}
	}
}

// TestCountBoundedLinear checks the reason countBounded exists: 1 MiB of
// alternating spaces and line breaks, which the tokenizer alone takes
// minutes for, is counted in well under a minute even under -race on a
// loaded machine (about 0.3 s unloaded).
func TestCountBoundedLinear(t *testing.T) {
	if testing.Short() {
		t.Skip("counts 1 MiB")
	}
	start := time.Now()
	n, err := countBounded(codec(t, O200kBase), strings.Repeat(" \n", 1<<19))
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > time.Minute {
		t.Errorf("1 MiB of white space took %s", d)
	}
	if n < 1<<19 {
		t.Errorf("1 MiB of \" \\n\" counted %d tokens, want at least one per pair", n)
	}
}

// FuzzCountBounded checks countBounded against the tokenizer on short
// texts: exact without a long white space run, never lower with one.
func FuzzCountBounded(f *testing.F) {
	for _, s := range []string{"hello world", strings.Repeat(" \n", 100), strings.Repeat(" ", 200) + "x", "a\u3000\u3000b", "\t\t\n" + strings.Repeat("\u2028 ", 80)} {
		f.Add(s)
	}
	o200k, cl100k := codec(f, O200kBase), codec(f, Cl100kBase)
	f.Fuzz(func(t *testing.T, s string) {
		if len(s) > 4096 {
			return // the tokenizer alone is quadratic on long runs
		}
		for _, c := range []tokenizer.Codec{o200k, cl100k} {
			want, werr := c.Count(s)
			got, err := countBounded(c, s)
			if (err != nil) != (werr != nil) {
				t.Fatalf("%s: countBounded error %v, the tokenizer's %v", c.GetName(), err, werr)
			}
			if err != nil {
				continue
			}
			if longestWhitespaceRun(s) <= maxWhitespaceRun && got != int64(want) {
				t.Fatalf("%s %q: countBounded = %d, the tokenizer counts %d", c.GetName(), s, got, want)
			}
			if got < int64(want) {
				t.Fatalf("%s %q: countBounded = %d, below the tokenizer's %d", c.GetName(), s, got, want)
			}
		}
	})
}

func truncateForLog(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}
