package gateway_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llm4agents/llm4agents/internal/gateway"
	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/internal/store/postgres"
	"github.com/llm4agents/llm4agents/internal/store/redis"
	"github.com/llm4agents/llm4agents/internal/store/sqlite"
	"github.com/llm4agents/llm4agents/internal/testchain"
	"github.com/llm4agents/llm4agents/internal/testdb"
	"github.com/llm4agents/llm4agents/internal/upstream"
	"github.com/llm4agents/llm4agents/x402"
	"github.com/llm4agents/llm4agents/x402/evm/exact"
)

// latencyRequests is how many requests each path gets per round (per b.N) of
// BenchmarkAddedLatency. The paths of a route take turns within a round, so a
// burst of load from a neighbour on a shared machine hits all of them alike.
const latencyRequests = 400

// benchAsset is the token the latency gateway names in its offers. Nothing is
// sent on chain: the facilitator is instantFacilitator.
const benchAsset = "0x5FbDB2315678afecb367f032d93F642f64180aa3"

// fixedCompletion is what the fixed upstream answers every chat completion
// with: a short completion with usage, as OpenAI sends it.
const fixedCompletion = `{"id":"chatcmpl-bench","object":"chat.completion","created":1700000000,"model":"demo-upstream",` +
	`"choices":[{"index":0,"message":{"role":"assistant","content":"Hello! This is a fixed answer from the benchmark upstream."},` +
	`"logprobs":null,"finish_reason":"stop"}],` +
	`"usage":{"prompt_tokens":9,"completion_tokens":12,"total_tokens":21},"system_fingerprint":"fp_bench"}` + "\n"

// BenchmarkAddedLatency measures what the gateway adds to a request over
// calling the same upstream directly, with a bare httputil.ReverseProxy in
// front of that upstream measured alongside as the floor. Each b.N
// is one round of latencyRequests requests per path at a fixed number of
// concurrent clients; p50 and p99 are over all the rounds' samples.
//
// Two routes, each with three paths:
//
//   - free: GET /v1/models. direct = a fixed-response server answering the
//     gateway's own /v1/models bytes; proxy = a bare ReverseProxy in front of
//     it; gateway = the gateway's /v1/models (built per request, no upstream
//     hop).
//   - paid: POST /v1/chat/completions. direct = the fixed upstream; proxy = a
//     bare ReverseProxy in front of it; gateway = a paid request with a
//     PAYMENT-SIGNATURE signed beforehand, through the whole gateway path
//     (decode, tokenizer quote, match, freshness, verify, claim in SQLite,
//     upstream, settle, record in SQLite, annotate) with a facilitator double
//     whose Verify and Settle succeed at once: the chain's work is left out.
//
// Reported: p50 and p99 of each path in µs, and added-ratio = (gateway -
// direct) / (proxy - direct) at p50 and at p99. Target on free: p50 ratio <=
// 1.5.
//
//	go test -run '^$' -bench AddedLatency -benchtime=5x -count=5 ./internal/gateway/
func BenchmarkAddedLatency(b *testing.B) {
	h := newLatencyHarness(b, openBenchSQLite(b))
	for _, route := range []string{"free", "paid"} {
		for _, clients := range []int{1, 16} {
			b.Run(fmt.Sprintf("%s/c=%d", route, clients), func(b *testing.B) {
				paths := h.paths(route)
				// Warm the connection pools and the tokenizer, unmeasured.
				for _, p := range paths {
					h.load(b, p, clients, 2*clients)
				}
				samples := make([][]time.Duration, len(paths))
				h.store.reset()
				b.ResetTimer()
				for round := range b.N {
					// Rotate who goes first, so no path always runs right after
					// another's SQLite checkpoint or GC.
					for k := range paths {
						i := (k + round) % len(paths)
						samples[i] = append(samples[i], h.load(b, paths[i], clients, latencyRequests)...)
					}
				}
				b.StopTimer()
				var p50, p99 [3]time.Duration
				for i := range paths {
					p50[i], p99[i] = percentile(samples[i], 0.50), percentile(samples[i], 0.99)
					b.ReportMetric(us(p50[i]), paths[i].name+"-p50-us")
					b.ReportMetric(us(p99[i]), paths[i].name+"-p99-us")
				}
				if route == "paid" {
					// Where the gateway's time goes: the two SQLite writes of a
					// paid request, as the gateway waited for them.
					claims, records := h.store.take()
					b.ReportMetric(us(percentile(claims, 0.50)), "claim-p50-us")
					b.ReportMetric(us(percentile(records, 0.50)), "record-p50-us")
					b.ReportMetric(us(percentile(claims, 0.99)), "claim-p99-us")
					b.ReportMetric(us(percentile(records, 0.99)), "record-p99-us")
				}
				b.ReportMetric(addedRatio(p50), "added-ratio-p50")
				b.ReportMetric(addedRatio(p99), "added-ratio-p99")
				b.ReportMetric(0, "ns/op") // a round's duration says nothing
				b.Logf("%s, %d clients, %d requests per path: p50 %s / %s / %s, p99 %s / %s / %s (direct / proxy / gateway); added: proxy %s, gateway %s (x%.2f) at p50",
					route, clients, len(samples[0]), p50[0], p50[1], p50[2], p99[0], p99[1], p99[2], p50[1]-p50[0], p50[2]-p50[0], addedRatio(p50))
			})
		}
	}
}

// BenchmarkPaidPathByStore measures the paid path's added latency on each
// store backend: the paid route of BenchmarkAddedLatency, with the
// gateway's claims and records in SQLite, PostgreSQL or Redis, at 1 and 32
// concurrent clients. Reported per backend: the gateway's p50 and p99 added
// over calling the upstream directly (gateway - direct, in µs), and the
// claim and record p50/p99 as the gateway waited for them. Within a
// backend the direct and gateway batches take turns, so load from a
// neighbour hits both alike. PostgreSQL
// and Redis come from LLM4AGENTS_TEST_POSTGRES_DSN and
// LLM4AGENTS_TEST_REDIS_URL; one not configured is skipped.
//
//	go test -run '^$' -bench PaidPathByStore -benchtime=5x -count=3 ./internal/gateway/
func BenchmarkPaidPathByStore(b *testing.B) {
	backends := []struct {
		name string
		open func(b *testing.B) store.Payments
	}{
		{"sqlite", openBenchSQLite},
		{"postgres", func(b *testing.B) store.Payments {
			db, err := postgres.Open(b.Context(), testdb.PostgresDSN(b, "bench"), discard())
			return benchStore(b, db, err)
		}},
		{"redis", func(b *testing.B) store.Payments {
			db, err := redis.Open(b.Context(), testdb.RedisURL(b, "bench"), discard())
			return benchStore(b, db, err)
		}},
	}
	for _, clients := range []int{1, 32} {
		for _, be := range backends {
			b.Run(fmt.Sprintf("%s/c=%d", be.name, clients), func(b *testing.B) {
				h := newLatencyHarness(b, be.open(b))
				paths := h.paths("paid")
				direct, gw := paths[0], paths[2]
				h.load(b, direct, clients, 2*clients)
				h.load(b, gw, clients, 2*clients)
				var ds, gs []time.Duration
				h.store.reset()
				b.ResetTimer()
				for round := range b.N {
					if round%2 == 0 {
						ds = append(ds, h.load(b, direct, clients, latencyRequests)...)
						gs = append(gs, h.load(b, gw, clients, latencyRequests)...)
					} else {
						gs = append(gs, h.load(b, gw, clients, latencyRequests)...)
						ds = append(ds, h.load(b, direct, clients, latencyRequests)...)
					}
				}
				b.StopTimer()
				claims, records := h.store.take()
				b.ReportMetric(us(percentile(gs, 0.50)-percentile(ds, 0.50)), "added-p50-us")
				b.ReportMetric(us(percentile(gs, 0.99)-percentile(ds, 0.99)), "added-p99-us")
				b.ReportMetric(us(percentile(claims, 0.50)), "claim-p50-us")
				b.ReportMetric(us(percentile(claims, 0.99)), "claim-p99-us")
				b.ReportMetric(us(percentile(records, 0.50)), "record-p50-us")
				b.ReportMetric(us(percentile(records, 0.99)), "record-p99-us")
				b.ReportMetric(0, "ns/op")
			})
		}
	}
}

// openBenchSQLite opens a SQLite store in a temporary directory for a
// benchmark, closed when it ends.
func openBenchSQLite(b *testing.B) store.Payments {
	b.Helper()
	db, err := sqlite.Open(b.Context(), filepath.Join(b.TempDir(), "gw.db"), discard())
	return benchStore(b, db, err)
}

// benchStore fails b if a store did not open, and otherwise closes it when
// b ends.
func benchStore[S interface {
	store.Payments
	Close() error
}](b *testing.B, db S, err error) store.Payments {
	b.Helper()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = db.Close() })
	return db
}

// latencyHarness holds the servers of BenchmarkAddedLatency: the fixed
// upstream, a bare reverse proxy to it, and the gateway in front of it.
type latencyHarness struct {
	upstream *httptest.Server
	proxy    *httptest.Server
	gateway  *httptest.Server
	client   *http.Client
	offer    *x402.PaymentRequired // the 402 of chatBody, to sign payments for
	signer   exact.Signer
	store    *timedPayments
}

// latencyPath is one way to make the same request.
type latencyPath struct {
	name   string
	method string
	url    string
	body   string
	// prepare, when set, runs before a batch of n requests, untimed, and
	// returns a PAYMENT-SIGNATURE for each.
	prepare func(tb testing.TB, n int) []string
}

func newLatencyHarness(b *testing.B, payments store.Payments) *latencyHarness {
	b.Helper()
	h := &latencyHarness{signer: exact.NewKeySigner(testchain.DevKey(buyerIdx))}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns, tr.MaxIdleConnsPerHost = 256, 64
	h.client = &http.Client{Transport: tr, Timeout: 30 * time.Second}
	b.Cleanup(tr.CloseIdleConnections)

	var models []byte // the gateway's /v1/models, served as is by the upstream
	h.upstream = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.Method == http.MethodPost && r.URL.Path == "/v1/chat/completions":
			_, _ = io.WriteString(w, fixedCompletion)
		case r.Method == http.MethodGet && r.URL.Path == "/v1/models":
			_, _ = w.Write(models)
		default:
			http.NotFound(w, r)
		}
	}))
	b.Cleanup(h.upstream.Close)

	target, _ := url.Parse(h.upstream.URL)
	ptr := http.DefaultTransport.(*http.Transport).Clone()
	ptr.MaxIdleConnsPerHost = 64 // as the gateway's provider keeps
	b.Cleanup(ptr.CloseIdleConnections)
	h.proxy = httptest.NewServer(&httputil.ReverseProxy{
		Rewrite:   func(pr *httputil.ProxyRequest) { pr.SetURL(target) },
		Transport: ptr,
	})
	b.Cleanup(h.proxy.Close)

	h.store = &timedPayments{Payments: payments}
	prov, err := upstream.NewOpenAI(upstream.OpenAIConfig{BaseURL: h.upstream.URL + "/v1", APIKey: "sk-upstream", Timeout: 5 * time.Second}, discard())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(prov.CloseIdleConnections)
	h.gateway = httptest.NewUnstartedServer(nil)
	gw, err := gateway.New(gateway.Config{
		PublicURL: "http://" + h.gateway.Listener.Addr().String(),
		Network:   network, Asset: benchAsset, AssetName: "USD Coin", AssetVersion: "2", Decimals: 6,
		PayTo: testchain.DevAddress(payToIdx).Hex(), UpstreamTimeout: 5 * time.Second, SettleTimeout: 10 * time.Second,
		Models: []gateway.Model{{ID: "demo", UpstreamModel: "demo-upstream", Provider: prov, Price: price, MaxOutputTokens: 256}},
	}, instantFacilitator{}, h.store, discard())
	if err != nil {
		b.Fatal(err)
	}
	h.gateway.Config.Handler = gw
	h.gateway.Start()
	b.Cleanup(h.gateway.Close)

	status, body, _ := h.do(b.Context(), http.MethodGet, h.gateway.URL+"/v1/models", "", "")
	if status != http.StatusOK {
		b.Fatalf("gateway /v1/models: %d %s", status, body)
	}
	models = body
	status, body, hdr := h.do(b.Context(), http.MethodPost, h.gateway.URL+"/v1/chat/completions", chatBody, "")
	if status != http.StatusPaymentRequired {
		b.Fatalf("unpaid chat: %d %s", status, body)
	}
	if h.offer, err = x402.DecodePaymentRequired(hdr.Get(x402.HeaderPaymentRequired)); err != nil {
		b.Fatal(err)
	}
	// One paid request end to end, so a broken path fails here and not as a
	// latency.
	sig := h.sign(b, 1)
	if status, body, _ = h.do(b.Context(), http.MethodPost, h.gateway.URL+"/v1/chat/completions", chatBody, sig[0]); status != http.StatusOK ||
		!bytes.Contains(body, []byte(`"x_llm4agents"`)) {
		b.Fatalf("paid chat: %d %s", status, body)
	}
	return h
}

// paths returns the three paths of route, direct first, proxy second.
func (h *latencyHarness) paths(route string) []latencyPath {
	if route == "free" {
		return []latencyPath{
			{name: "direct", method: http.MethodGet, url: h.upstream.URL + "/v1/models"},
			{name: "proxy", method: http.MethodGet, url: h.proxy.URL + "/v1/models"},
			{name: "gateway", method: http.MethodGet, url: h.gateway.URL + "/v1/models"},
		}
	}
	return []latencyPath{
		{name: "direct", method: http.MethodPost, url: h.upstream.URL + "/v1/chat/completions", body: chatBody},
		{name: "proxy", method: http.MethodPost, url: h.proxy.URL + "/v1/chat/completions", body: chatBody},
		{name: "gateway", method: http.MethodPost, url: h.gateway.URL + "/v1/chat/completions", body: chatBody, prepare: h.sign},
	}
}

// sign returns n PAYMENT-SIGNATURE values for chatBody's quote, each a fresh
// authorization.
func (h *latencyHarness) sign(tb testing.TB, n int) []string {
	tb.Helper()
	out := make([]string, n)
	for i := range out {
		p, err := exact.NewPaymentPayload(context.Background(), h.signer, h.offer, 0, exact.SignOptions{})
		if err != nil {
			tb.Fatal(err)
		}
		if out[i], err = x402.EncodeHeader(p); err != nil {
			tb.Fatal(err)
		}
	}
	return out
}

// load sends n requests on p from clients goroutines and returns each one's
// latency, from before the request is built to the end of its body. A request
// that does not answer 200 fails the benchmark.
func (h *latencyHarness) load(b *testing.B, p latencyPath, clients, n int) []time.Duration {
	b.Helper()
	var sigs []string
	if p.prepare != nil {
		b.StopTimer()
		sigs = p.prepare(b, n)
		b.StartTimer()
	}
	lat := make([]time.Duration, n)
	var next atomic.Int64
	var failed atomic.Int64
	var first sync.Once
	var firstErr string
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				sig := ""
				if sigs != nil {
					sig = sigs[i]
				}
				start := time.Now()
				status, body, _ := h.do(context.Background(), p.method, p.url, p.body, sig)
				lat[i] = time.Since(start)
				if status != http.StatusOK {
					failed.Add(1)
					first.Do(func() { firstErr = fmt.Sprintf("%d %.300s", status, body) })
				}
			}
		})
	}
	wg.Wait()
	if f := failed.Load(); f > 0 {
		b.Fatalf("%s %s: %d of %d requests failed; first: %s", p.name, p.url, f, n, firstErr)
	}
	return lat
}

// do sends one request and reads the whole answer. status is 0 on a transport
// error, with the error as body.
func (h *latencyHarness) do(ctx context.Context, method, url, body, sig string) (int, []byte, http.Header) {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return 0, []byte(err.Error()), nil
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if sig != "" {
		req.Header.Set(x402.HeaderPaymentSignature, sig)
	}
	resp, err := h.client.Do(req)
	if err != nil {
		return 0, []byte(err.Error()), nil
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, []byte(err.Error()), nil
	}
	return resp.StatusCode, b, resp.Header
}

// instantFacilitator is a facilitator double that accepts every payment and
// settles it at once with a made-up transaction: it leaves the chain (RPC
// checks, signature recovery, broadcast, receipt wait) out of the gateway's
// latency.
type instantFacilitator struct{}

const instantTx = "0x00000000000000000000000000000000000000000000000000000000000b3c4d"

func (instantFacilitator) Verify(_ context.Context, _ *x402.PaymentPayload, _ x402.PaymentRequirements) (*x402.VerifyResponse, error) {
	return &x402.VerifyResponse{IsValid: true}, nil
}

func (instantFacilitator) Settle(_ context.Context, _ *x402.PaymentPayload, req x402.PaymentRequirements) (*x402.SettleResponse, error) {
	return &x402.SettleResponse{Success: true, Transaction: instantTx, Network: req.Network, Amount: req.Amount}, nil
}

func (instantFacilitator) Supported(context.Context) (*x402.SupportedResponse, error) {
	return &x402.SupportedResponse{Kinds: []x402.SupportedKind{{X402Version: x402.Version, Scheme: exact.Scheme, Network: network}}}, nil
}

// timedPayments records how long the gateway waits for each claim and each
// record of an outcome: a timing harness around the real store.
type timedPayments struct {
	store.Payments
	mu      sync.Mutex
	claims  []time.Duration
	records []time.Duration
}

func (t *timedPayments) ClaimPayment(ctx context.Context, c store.PaymentClaim, lease time.Duration) (store.PaymentClaim, bool, error) {
	start := time.Now()
	got, held, err := t.Payments.ClaimPayment(ctx, c, lease)
	t.add(&t.claims, time.Since(start))
	return got, held, err
}

func (t *timedPayments) UpdatePayment(ctx context.Context, key string, fence int64, state store.PaymentState, tx string) error {
	start := time.Now()
	err := t.Payments.UpdatePayment(ctx, key, fence, state, tx)
	t.add(&t.records, time.Since(start))
	return err
}

func (t *timedPayments) add(to *[]time.Duration, d time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	*to = append(*to, d)
}

func (t *timedPayments) reset() { t.take() }

// take returns the durations recorded since the last take and forgets them.
func (t *timedPayments) take() (claims, records []time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	claims, records = t.claims, t.records
	t.claims, t.records = nil, nil
	return claims, records
}

// percentile returns the q-quantile of d (nearest rank); d is sorted in place.
func percentile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	i := int(q*float64(len(d))+0.5) - 1
	return d[min(max(i, 0), len(d)-1)]
}

// addedRatio is (gateway - direct) / (proxy - direct) of d = [direct, proxy,
// gateway].
func addedRatio(d [3]time.Duration) float64 {
	floor := d[1] - d[0]
	if floor <= 0 {
		return 0 // the proxy added nothing measurable: no ratio
	}
	return float64(d[2]-d[0]) / float64(floor)
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

var (
	_ gateway.Facilitator = instantFacilitator{}
	_ store.Payments      = (*timedPayments)(nil)
)
