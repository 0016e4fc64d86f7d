package upstream

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/google/go-cmp/cmp"
	"github.com/llm4agents/llm4agents/internal/chat"
)

// readAll returns every event of r and the error that ended it.
func readAll(r io.Reader, limit int) ([]string, error) {
	p := newSSEReader(r, limit)
	var evs []string
	for {
		ev, err := p.next()
		if err != nil {
			return evs, err
		}
		evs = append(evs, string(ev))
	}
}

func TestSSEReader(t *testing.T) {
	const limit = 32
	big := strings.Repeat("x", limit)
	tests := []struct {
		name    string
		in      string
		want    []string
		wantErr error
	}{
		{"empty", "", nil, io.EOF},
		{"two events", "data: a\n\ndata: b\n\n", []string{"a", "b"}, io.EOF},
		{"CRLF", "data: a\r\n\r\ndata: b\r\n\r\n", []string{"a", "b"}, io.EOF},
		{"lone CR", "data: a\r\rdata: b\r\r", []string{"a", "b"}, io.EOF},
		{"mixed line ends", "data: a\r\n\ndata: b\r\r\n", []string{"a", "b"}, io.EOF},
		{"multi-line data", "data: {\"a\":\ndata: 1}\n\n", []string{"{\"a\":\n1}"}, io.EOF},
		{"multi-line data CRLF", "data: x\r\ndata: y\r\n\r\n", []string{"x\ny"}, io.EOF},
		{"comments", ": keep-alive\n\n:\ndata: a\n: inside\ndata: b\n\n", []string{"a\nb"}, io.EOF},
		{"other fields ignored", "event: message\nid: 7\nretry: 100\nfoo: bar\ndata: a\n\n", []string{"a"}, io.EOF},
		{"no space after colon", "data:a\n\n", []string{"a"}, io.EOF},
		{"only one space stripped", "data:  a \n\n", []string{" a "}, io.EOF},
		{"field without colon", "data\n\n", []string{""}, io.EOF},
		{"empty data", "data:\n\n", []string{""}, io.EOF},
		{"event without data", "event: ping\nid: 1\n\n", nil, io.EOF},
		{"blank lines only", "\n\n\r\n\r", nil, io.EOF},
		{"BOM", "\xef\xbb\xbfdata: a\n\n", []string{"a"}, io.EOF},
		{"BOM only at start", "data: a\n\n\xef\xbb\xbfdata: b\n\n", []string{"a"}, io.EOF},
		{"DONE", "data: {}\n\ndata: [DONE]\n\n", []string{"{}", "[DONE]"}, io.EOF},
		{"last event without blank line", "data: a\n\ndata: [DONE]\n", []string{"a", "[DONE]"}, io.EOF},
		{"last line without newline", "data: [DONE]", []string{"[DONE]"}, io.EOF},
		{"data at the limit", "data: " + big + "\n\n", []string{big}, io.EOF},
		{"data over the limit", "data: a\n\ndata: " + big + "x\n\n", []string{"a"}, errEventTooLarge},
		{"lines over the limit together", "data: " + big[:20] + "\ndata: " + big[:20] + "\n\n", nil, errEventTooLarge},
		{"comment over the line limit", ": " + strings.Repeat("c", 2*limit) + "\ndata: a\n\n", nil, errEventTooLarge},
	}
	readers := map[string]func(string) io.Reader{
		"whole":    func(s string) io.Reader { return strings.NewReader(s) },
		"one byte": func(s string) io.Reader { return iotest.OneByteReader(strings.NewReader(s)) },
		"half":     func(s string) io.Reader { return iotest.HalfReader(strings.NewReader(s)) },
	}
	for _, tc := range tests {
		for rname, mk := range readers {
			t.Run(tc.name+"/"+rname, func(t *testing.T) {
				got, err := readAll(mk(tc.in), limit)
				if diff := cmp.Diff(tc.want, got); diff != "" {
					t.Errorf("events (-want +got):\n%s", diff)
				}
				if !errors.Is(err, tc.wantErr) {
					t.Errorf("error = %v, want %v", err, tc.wantErr)
				}
			})
		}
	}
}

func TestSSEReaderReadError(t *testing.T) {
	boom := errors.New("boom")
	r := io.MultiReader(strings.NewReader("data: a\n\ndata: b"), iotest.ErrReader(boom))
	got, err := readAll(r, 64)
	if diff := cmp.Diff([]string{"a"}, got); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	if !errors.Is(err, boom) {
		t.Errorf("error = %v, want %v", err, boom)
	}
}

// FuzzSSEReader checks that the parser never panics, never returns an event
// over its limit, and finds the same events however the input is cut into reads.
func FuzzSSEReader(f *testing.F) {
	for _, s := range []string{
		"data: a\n\ndata: b\n\n", "data: a\r\n\r\n", "data: a\r\rdata: b\r", ": c\nevent: e\ndata:x\ndata: y\n\n",
		"\xef\xbb\xbfdata: [DONE]\n\n", "data: " + strings.Repeat("z", 70) + "\n\n", "data\r\n\r\ndata: \r", "\r\n\r\r\n\n",
	} {
		f.Add([]byte(s))
	}
	const limit = 48
	f.Fuzz(func(t *testing.T, in []byte) {
		whole, werr := readAll(bytes.NewReader(in), limit)
		for _, ev := range whole {
			if len(ev) > limit {
				t.Fatalf("event of %d bytes, over the limit %d", len(ev), limit)
			}
			if strings.ContainsRune(ev, '\r') {
				t.Fatalf("event %q contains CR", ev)
			}
		}
		bytewise, berr := readAll(iotest.OneByteReader(bytes.NewReader(in)), limit)
		if diff := cmp.Diff(whole, bytewise); diff != "" {
			t.Fatalf("events differ, whole vs one byte at a time (-whole +bytewise):\n%s", diff)
		}
		if !errors.Is(berr, werr) && !errors.Is(werr, berr) {
			t.Fatalf("errors differ: whole %v, one byte at a time %v", werr, berr)
		}
	})
}

// FuzzSSERoundTrip checks that any text without CR, written as data lines,
// reads back unchanged.
func FuzzSSERoundTrip(f *testing.F) {
	f.Add("hello")
	f.Add("{\"a\":\n1}")
	f.Add("")
	f.Add(" leading space\n\nblank line inside")
	f.Fuzz(func(t *testing.T, s string) {
		if strings.ContainsRune(s, '\r') || len(s) > 1024 {
			t.Skip()
		}
		var b strings.Builder
		for line := range strings.SplitSeq(s, "\n") {
			fmt.Fprintf(&b, "data: %s\n", line)
		}
		b.WriteString("\n")
		got, err := readAll(strings.NewReader(b.String()), 2048)
		if !errors.Is(err, io.EOF) {
			t.Fatalf("error %v", err)
		}
		if diff := cmp.Diff([]string{s}, got); diff != "" {
			t.Fatalf("round trip (-want +got):\n%s", diff)
		}
	})
}

// FuzzHasMember checks that the shortcut that skips decoding a chunk never
// misses a top-level usage object or error.
func FuzzHasMember(f *testing.F) {
	f.Add(`{"choices":[],"usage":{"prompt_tokens":1}}`)
	f.Add(`{"usage" : null, "x":{"usage":{}}}`)
	f.Add(`{"content":"\"usage\":{","error":"boom"}`)
	f.Add(`{"error":null,"usage":null}`)
	f.Fuzz(func(t *testing.T, s string) {
		var top map[string]json.RawMessage
		if strings.Contains(s, `\u`) || json.Unmarshal([]byte(s), &top) != nil {
			return // an escaped key is the documented exception
		}
		for k, raw := range top {
			v := bytes.TrimSpace(raw)
			if k == "usage" && v[0] == '{' && !hasMember([]byte(s), keyUsage, isObject) {
				t.Fatalf("usage object in %s missed", s)
			}
			if k == "error" && present(v) && !hasMember([]byte(s), keyError, notNull) {
				t.Fatalf("error in %s missed", s)
			}
		}
	})
}

// testStream is an eventStream over a fixed body, as OpenAI.Stream makes one.
func testStream(tb testing.TB, body io.Reader, limit int) *eventStream {
	tb.Helper()
	s := streamOver(testProvider(tb, limit), body)
	tb.Cleanup(func() { _ = s.Close() })
	return s
}

func testProvider(tb testing.TB, limit int) *OpenAI {
	tb.Helper()
	o, err := NewOpenAI(OpenAIConfig{BaseURL: "http://upstream.invalid/v1", MaxEventBytes: limit}, nil)
	if err != nil {
		tb.Fatal(err)
	}
	return o
}

func streamOver(o *OpenAI, body io.Reader) *eventStream {
	ctx, cancel := context.WithCancelCause(context.Background())
	return o.newEventStream(ctx, cancel, io.NopCloser(body), "")
}

func TestEventStream(t *testing.T) {
	const (
		chunk = `{"choices":[{"index":0,"delta":{"content":"hi"}}],"usage":null}`
		usage = `{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}`
	)
	tests := []struct {
		name      string
		in        string
		want      []string
		wantUsage *chat.Usage
		wantCode  string // "" for a clean io.EOF
		wantEOF   bool   // the error wraps io.ErrUnexpectedEOF
	}{
		{name: "ok", in: "data: " + chunk + "\n\ndata: " + usage + "\n\ndata: [DONE]\n\n",
			want: []string{chunk, usage}, wantUsage: &chat.Usage{PromptTokens: 3, CompletionTokens: 2, TotalTokens: 5}},
		{name: "keep-alives skipped", in: ": ping\n\ndata:\n\ndata: " + chunk + "\n\ndata: [DONE]\n\n", want: []string{chunk}},
		{name: "DONE with spaces", in: "data: " + chunk + "\r\n\r\ndata:  [DONE] \r\n\r\n", want: []string{chunk}},
		{name: "no DONE", in: "data: " + chunk + "\n\n", want: []string{chunk}, wantCode: CodeBadResponse, wantEOF: true},
		{name: "empty body", in: "", wantCode: CodeBadResponse, wantEOF: true},
		{name: "not JSON", in: "data: hello\n\n", wantCode: CodeBadResponse},
		{name: "JSON not an object", in: "data: [1]\n\n", wantCode: CodeBadResponse},
		{name: "broken JSON", in: "data: {\"choices\":[\n\n", wantCode: CodeBadResponse},
		{name: "error event", in: "data: " + chunk + "\n\ndata: {\"error\":{\"message\":\"overloaded\",\"type\":\"server_error\"}}\n\n",
			want: []string{chunk}, wantCode: CodeError},
		{name: "negative usage", in: `data: {"choices":[],"usage":{"prompt_tokens":-1}}` + "\n\n", wantCode: CodeBadResponse},
		{name: "oversized event", in: "data: {\"x\":\"" + strings.Repeat("a", 300) + "\"}\n\n", wantCode: CodeBadResponse},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := testStream(t, strings.NewReader(tc.in), 256)
			var got []string
			var err error
			for {
				var ev []byte
				if ev, err = s.Next(); err != nil {
					break
				}
				got = append(got, string(ev))
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
			if tc.wantCode == "" {
				if !errors.Is(err, io.EOF) {
					t.Fatalf("end = %v, want io.EOF", err)
				}
			} else {
				e, ok := errors.AsType[*Error](err)
				if !ok || e.Code != tc.wantCode || e.Status != http.StatusBadGateway {
					t.Fatalf("end = %v, want a 502 *Error with code %s", err, tc.wantCode)
				}
				if got := errors.Is(err, io.ErrUnexpectedEOF); got != tc.wantEOF {
					t.Errorf("errors.Is(err, io.ErrUnexpectedEOF) = %v, want %v", got, tc.wantEOF)
				}
			}
			if _, again := s.Next(); !errors.Is(again, err) {
				t.Errorf("Next after the end = %v, want the same %v", again, err)
			}
			var gotUsage *chat.Usage
			if u, ok := s.Usage(); ok {
				gotUsage = &u
			}
			if diff := cmp.Diff(tc.wantUsage, gotUsage); diff != "" {
				t.Errorf("Usage() (-want +got):\n%s", diff)
			}
		})
	}
}

// openAIStreamBody is a stream as OpenAI sends it: a role chunk, n content
// chunks, a finish chunk, a usage chunk and [DONE].
func openAIStreamBody(n int) []byte {
	var b bytes.Buffer
	head := `{"id":"chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG","object":"chat.completion.chunk","created":1741570283,"model":"gpt-4o-2024-08-06","service_tier":"default","system_fingerprint":"fp_eb9dce56a8",`
	fmt.Fprintf(&b, "data: %s\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\",\"refusal\":null},\"logprobs\":null,\"finish_reason\":null}],\"usage\":null}\n\n", head)
	for i := range n {
		fmt.Fprintf(&b, "data: %s\"choices\":[{\"index\":0,\"delta\":{\"content\":\" word%d\"},\"logprobs\":null,\"finish_reason\":null}],\"usage\":null}\n\n", head, i)
	}
	fmt.Fprintf(&b, "data: %s\"choices\":[{\"index\":0,\"delta\":{},\"logprobs\":null,\"finish_reason\":\"stop\"}],\"usage\":null}\n\n", head)
	fmt.Fprintf(&b, "data: %s\"choices\":[],\"usage\":{\"prompt_tokens\":19,\"completion_tokens\":%d,\"total_tokens\":%d,\"prompt_tokens_details\":{\"cached_tokens\":0,\"audio_tokens\":0},\"completion_tokens_details\":{\"reasoning_tokens\":0,\"audio_tokens\":0,\"accepted_prediction_tokens\":0,\"rejected_prediction_tokens\":0}}}\n\n", head, n, n+19)
	b.WriteString("data: [DONE]\n\n")
	return b.Bytes()
}

// BenchmarkStreamParse measures reading a 500-chunk OpenAI stream: the SSE
// parser alone, and the whole Stream.Next path (parse, JSON check, usage, idle
// timer).
func BenchmarkStreamParse(b *testing.B) {
	body := openAIStreamBody(500)
	b.Run("sse", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		b.ReportAllocs()
		for b.Loop() {
			p := newSSEReader(bytes.NewReader(body), defaultMaxEventBytes)
			for {
				if _, err := p.next(); err != nil {
					break
				}
			}
		}
	})
	b.Run("stream", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		b.ReportAllocs()
		o := testProvider(b, defaultMaxEventBytes)
		for b.Loop() {
			s := streamOver(o, bytes.NewReader(body))
			n := 0
			for {
				if _, err := s.Next(); err != nil {
					if !errors.Is(err, io.EOF) {
						b.Fatal(err)
					}
					break
				}
				n++
			}
			if _, ok := s.Usage(); !ok || n != 503 {
				b.Fatalf("%d events, usage %v", n, ok)
			}
			_ = s.Close()
		}
	})
}
