package upstream_test

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/llm4agents/llm4agents/internal/upstream"
)

// benchCompletion is what the benchmark's upstream answers, at once.
const benchCompletion = `{"id":"chatcmpl-b","object":"chat.completion","created":1700000000,"model":"m",` +
	`"choices":[{"index":0,"message":{"role":"assistant","content":"Hello from the benchmark."},"finish_reason":"stop"}],` +
	`"usage":{"prompt_tokens":9,"completion_tokens":6,"total_tokens":15}}`

// BenchmarkFallbackOverhead measures what a Fallback adds to a call when its
// first provider answers: each b.N is a round of 200 calls through the
// provider alone and 200 through a Fallback of it and a second provider,
// taking turns, against the same local upstream. Reported: the p50 of each
// and added-p50-us, their difference (target: no measurable latency).
//
//	go test -run '^$' -bench FallbackOverhead -benchtime=20x ./internal/upstream/
func BenchmarkFallbackOverhead(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, benchCompletion)
	}))
	b.Cleanup(srv.Close)
	log := slog.New(slog.DiscardHandler)
	newProvider := func() upstream.Provider {
		p, err := upstream.NewOpenAI(upstream.OpenAIConfig{BaseURL: srv.URL + "/v1", Timeout: 5 * time.Second}, log)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(p.CloseIdleConnections)
		return p
	}
	direct := newProvider()
	fb, err := upstream.NewFallback([]upstream.Route{
		{Name: "a", Provider: newProvider(), Health: upstream.NewHealth(upstream.HealthConfig{})},
		{Name: "b", Provider: newProvider(), Model: "other", Health: upstream.NewHealth(upstream.HealthConfig{})},
	}, nil, log)
	if err != nil {
		b.Fatal(err)
	}
	body := []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":16}`)
	paths := []upstream.Provider{direct, fb}
	var lat [2][]time.Duration
	call := func(i int) {
		t0 := time.Now()
		if _, err := paths[i].Complete(b.Context(), body); err != nil {
			b.Fatal(err)
		}
		lat[i] = append(lat[i], time.Since(t0))
	}
	for range 50 { // warm both pools, unmeasured
		call(0)
		call(1)
	}
	lat = [2][]time.Duration{}
	b.ResetTimer()
	for round := range b.N {
		for range 200 {
			call(round % 2)
			call((round + 1) % 2)
		}
	}
	b.StopTimer()
	p50 := func(d []time.Duration) time.Duration {
		slices.Sort(d)
		return d[len(d)/2]
	}
	d, f := p50(lat[0]), p50(lat[1])
	b.ReportMetric(float64(d)/1e3, "direct-p50-us")
	b.ReportMetric(float64(f)/1e3, "fallback-p50-us")
	b.ReportMetric(float64(f-d)/1e3, "added-p50-us")
	b.ReportMetric(0, "ns/op")
}
