package gateway

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/llm4agents/llm4agents/internal/pricing"
)

// The worst 402: what an unpaid chat request whose body
// is at the default limit.max_body_bytes costs the gateway, per prompt shape,
// and what the same request costs once the unpaid limit refuses it. Each
// iteration changes the prompt's first bytes, so that the Counter's cache of
// long texts never answers: an attacker varies the prompt as cheaply.
//
//	go test -run '^$' -bench 'BenchmarkWorst402|BenchmarkUnpaidRefused' -benchmem -count=5 ./internal/gateway

// unpaidBenchServer is a gateway with one model and nothing behind it: an
// unpaid request needs no facilitator, store or upstream.
func unpaidBenchServer(b *testing.B, limits UnpaidLimits) *Server {
	b.Helper()
	s, err := New(Config{
		PublicURL: "http://gw.example", Network: "eip155:8453", Asset: "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913",
		AssetName: "USD Coin", AssetVersion: "2", Decimals: 6, PayTo: "0x70997970C51812dc3A010C7d01b50e0d17dc79C8",
		Models: []Model{{ID: "demo", Price: pricing.Price{Input: 1_000_000, Output: 2_000_000}, MaxOutputTokens: 256, Encoding: pricing.O200kBase}},
		Unpaid: limits,
	}, nil, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	return s
}

// worstPrompts are prompt shapes chosen against the tokenizer, each made to
// fill a body of DefaultMaxBodyBytes.
var worstPrompts = []struct {
	name string
	unit func(r *rand.Rand) string // appended until the body is full
}{
	{"short-words", func(*rand.Rand) string { return "a " }},
	{"one-run", func(*rand.Rand) string { return "a" }},
	{"run-of-digits", func(r *rand.Rand) string { return strconv.Itoa(r.IntN(10)) }},
	{"punctuation", func(*rand.Rand) string { return "!" }},
	{"random-letters", func(r *rand.Rand) string { return string(rune('a' + r.IntN(26))) }},
	{"random-unicode", func(r *rand.Rand) string {
		for {
			if c := rune(r.IntN(0x2FFFF)); c > ' ' && c != '"' && c != '\\' && utf8.ValidRune(c) {
				return string(c)
			}
		}
	}},
	{"mixed-white-space", func(r *rand.Rand) string { return [...]string{" ", "\\n", "\\t", "x"}[r.IntN(4)] }},
}

// maxBody returns a chat request body of at most max bytes whose one
// message's content is unit repeated, and the offset of the content in it.
func maxBody(b *testing.B, unit func(*rand.Rand) string, max int) ([]byte, int) {
	b.Helper()
	head := []byte(`{"model":"demo","max_tokens":16,"messages":[{"role":"user","content":"`)
	tail := []byte(`"}]}`)
	r := rand.New(rand.NewPCG(1, 2))
	var content strings.Builder
	for {
		u := unit(r)
		if len(head)+content.Len()+len(u)+len(tail) > max {
			break
		}
		content.WriteString(u)
	}
	body := append(append(append([]byte{}, head...), content.String()...), tail...)
	if !json.Valid(body) {
		b.Fatal("the benchmark body is not JSON")
	}
	return body, len(head)
}

// cpuTime is the CPU time the process has used, user and system, all
// threads: the garbage collector's work counts too.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU reports the CPU time per iteration since start as cpu-ns/op.
func reportCPU(b *testing.B, start time.Duration) {
	b.ReportMetric(float64(cpuTime()-start)/float64(b.N), "cpu-ns/op")
}

// serveUnpaid serves one unpaid chat request with body and returns its
// status.
func serveUnpaid(s *Server, body []byte) int {
	req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", bytes.NewReader(body))
	req.RemoteAddr = "203.0.113.9:4000"
	w := httptest.NewRecorder()
	s.ServeHTTP(w, req)
	return w.Code
}

// BenchmarkWorst402 is the quote of an unpaid request at the body limit:
// read, parse, tokenize, answer 402.
func BenchmarkWorst402(b *testing.B) {
	for _, p := range worstPrompts {
		b.Run(p.name, func(b *testing.B) {
			s := unpaidBenchServer(b, UnpaidLimits{})
			body, at := maxBody(b, p.unit, DefaultMaxBodyBytes)
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			var i uint64
			start := cpuTime()
			for b.Loop() {
				i++
				// 8 hex digits in place of the first 8 bytes: a new text, as
				// long, every time.
				copy(body[at:], strconv.FormatUint(i|1<<28, 16))
				if code := serveUnpaid(s, body); code != http.StatusPaymentRequired {
					b.Fatalf("status %d", code)
				}
			}
			reportCPU(b, start)
		})
	}
}

// BenchmarkUnpaidRefused is the same request once its address has spent
// its burst: the 429 of the unpaid limit, before the body is read.
func BenchmarkUnpaidRefused(b *testing.B) {
	s := unpaidBenchServer(b, UnpaidLimits{PerMinute: 1, Burst: 1})
	body, _ := maxBody(b, worstPrompts[0].unit, DefaultMaxBodyBytes)
	serveUnpaid(s, body) // spends the burst
	b.ReportAllocs()
	start := cpuTime()
	for b.Loop() {
		if code := serveUnpaid(s, body); code != http.StatusTooManyRequests {
			b.Fatalf("status %d", code)
		}
	}
	reportCPU(b, start)
}
