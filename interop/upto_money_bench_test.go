package interop_test

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"math/big"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llm4agents/llm4agents/client"
	"github.com/llm4agents/llm4agents/internal/chat"
	"github.com/llm4agents/llm4agents/internal/pricing"
	"github.com/llm4agents/llm4agents/internal/testchain"
	"github.com/llm4agents/llm4agents/internal/upstream"
	"github.com/llm4agents/llm4agents/x402/evm/exact"
)

// The money check of upto (D27): many paid calls with random max_tokens
// and random answer lengths, and the sum paid on chain must equal the sum of
// the charges the rule (pricing.Charge) gives from each answer's reported
// usage, to the atomic unit. docs/BENCHMARKS.md has the commands and results.

const (
	// The money check's prices, in atomic units per million tokens: 2.50 and
	// 10.00 USDC, a large model's list prices, so that quotes span several
	// cents and the one-cent minimum charge matters.
	moneyInputPrice  = 2_500_000
	moneyOutputPrice = 10_000_000
	// moneyMaxOutput is the model's output cap; max_tokens is drawn from
	// [moneyMinTokens, moneyMaxOutput].
	moneyMaxOutput = 4096
	moneyMinTokens = 16
	// moneyMaxReply bounds the answer the upstream would give uncapped: its
	// length in tokens is drawn from [1, moneyMaxReply], then max_tokens cuts
	// it.
	moneyMaxReply = 4096
	// moneySeed seeds the requests and the answer lengths.
	moneySeed = 15
)

// TestUptoMoney is the money check with few calls, for CI: every charge is
// the rule's, and the payee received exactly their sum.
func TestUptoMoney(t *testing.T) {
	requireTools(t)
	m := uptoMoney(t, 24, 4, moneySeed)
	t.Logf("%d calls: the quotes (what exact charges) sum to %s, upto charged %s (%.2fx less); %d quoted the minimum, %d more charged it, %d capped at the maximum",
		m.calls, m.quotes, m.charged, m.ratio(), m.minQuotes, m.atMinimum, m.atMaximum)
}

// moneyRuns counts the runs of BenchmarkUptoMoney in this process: each
// -count run draws its calls from its own seed.
var moneyRuns atomic.Uint64

// BenchmarkUptoMoney is the money check of upto (D27): 1,000 paid upto calls
// from 8 clients through our gateway on anvil, each b.N a fresh chain and a
// new seed (moneySeed, moneySeed+1, ... over the rounds of all runs). It
// fails when a call fails or when the sum paid on chain, the payer's loss,
// the client's Spent or any answer's charge differs from the rule's.
// Reported: exact/upto, the sum of the quotes over the sum of the charges
// (what exact would have charged per unit upto charged), and the buyer's
// saving in percent of the quotes.
//
//	go test -run '^$' -bench UptoMoney -benchtime=1x -count=3 ./interop/
func BenchmarkUptoMoney(b *testing.B) {
	requireTools(b)
	const calls, clients = 1000, 8
	var quotes, charged big.Int
	for i := range b.N {
		seed := moneySeed + moneyRuns.Add(1) - 1
		m := uptoMoney(b, calls, clients, seed)
		quotes.Add(&quotes, m.quotes)
		charged.Add(&charged, m.charged)
		b.Logf("round %d, seed %d: %d calls in %s, %d failed; quotes %s, charged %s on chain (%.2fx); max_tokens mean %.0f, completion tokens mean %.0f, %d quoted the minimum, %d more charged it, %d capped at the maximum",
			i, seed, m.calls, m.elapsed.Round(time.Millisecond), m.failed, m.quotes, m.charged, m.ratio(),
			m.meanMaxTokens, m.meanCompletion, m.minQuotes, m.atMinimum, m.atMaximum)
	}
	q, _ := new(big.Float).SetInt(&quotes).Float64()
	c, _ := new(big.Float).SetInt(&charged).Float64()
	b.ReportMetric(q/c, "exact/upto")
	b.ReportMetric(100*(q-c)/q, "saved-%")
	b.ReportMetric(0, "ns/op")
}

// moneyResult is what one money check found.
type moneyResult struct {
	calls, failed   int
	quotes, charged *big.Int // sums: the maxima (exact's price), what was paid on chain
	// minQuotes are the calls quoted the minimum charge, which upto
	// charges in full as exact does; of the others, atMinimum were raised
	// to it and atMaximum capped at their quote.
	minQuotes, atMinimum, atMaximum int
	meanMaxTokens                   float64
	meanCompletion                  float64
	elapsed                         time.Duration
}

func (m moneyResult) ratio() float64 {
	q, _ := new(big.Float).SetInt(m.quotes).Float64()
	c, _ := new(big.Float).SetInt(m.charged).Float64()
	return q / c
}

// uptoMoney makes calls paid upto calls from clients goroutines through our
// gateway on a new anvil (one-cent minimum charge, the default), in front of
// newRandomUpstream, with requests of random prompts and max_tokens drawn from
// seed, and checks the money: each answer's charge (x_llm4agents.charged and
// the PAYMENT-RESPONSE amount) is pricing.Charge of its reported usage and
// maximum, and the payee's gain, the payer's loss, the client's Spent and the
// charges it was told of all equal the sum of those charges.
func uptoMoney(tb testing.TB, calls, clients int, seed uint64) moneyResult {
	tb.Helper()
	c := newChain(tb)
	approvePermit2(tb, c, payerIdx)
	price := pricing.Price{Input: moneyInputPrice, Output: moneyOutputPrice}
	minCharge := pricing.Cent(6)
	up := newRandomUpstream(tb, seed)
	gw, _ := startBenchGateway(tb, c, up.URL+"/v1", benchSale{upto: true, minCharge: minCharge, price: price, maxOutput: moneyMaxOutput})

	// The requests, drawn before any call so that a seed names them.
	rnd := rand.New(rand.NewPCG(seed, 1))
	bodies := make([]string, calls)
	maxTokens := 0
	for i := range bodies {
		n := moneyMinTokens + rnd.IntN(moneyMaxOutput-moneyMinTokens+1)
		maxTokens += n
		prompt := fmt.Sprintf("Question %d: %s", i, strings.Repeat("tell me more ", 1+rnd.IntN(40)))
		b, err := json.Marshal(map[string]any{
			"model":      "demo",
			"messages":   []map[string]string{{"role": "user", "content": prompt}},
			"max_tokens": n,
		})
		if err != nil {
			tb.Fatal(err)
		}
		bodies[i] = string(b)
	}

	var mu sync.Mutex
	told := struct{ maxima, amounts big.Int }{}
	base := http.DefaultTransport.(*http.Transport).Clone()
	base.MaxIdleConnsPerHost = 64
	tb.Cleanup(base.CloseIdleConnections)
	tr := &client.Transport{
		Base:   base,
		Signer: exact.NewKeySigner(testchain.DevKey(payerIdx)),
		Policy: client.Policy{
			MaxPerRequest: big.NewInt(1_000_000),
			Budget:        big.NewInt(payerFunds),
			Assets:        []client.Asset{{Network: network, Address: c.token.Hex()}},
			Upto:          client.UptoPrefer,
		},
		OnCharge: func(_ context.Context, ch client.Charge) {
			mu.Lock()
			defer mu.Unlock()
			told.maxima.Add(&told.maxima, ch.Maximum)
			if ch.Amount != nil {
				told.amounts.Add(&told.amounts, ch.Amount)
			}
		},
	}
	payer := &http.Client{Transport: tr, Timeout: benchCallTimeout}

	payTo, payerAddr := testchain.DevAddress(payToIdx), testchain.DevAddress(payerIdx)
	payToBefore, payerBefore := c.balance(tb, payTo), c.balance(tb, payerAddr)
	var next atomic.Int64
	start := time.Now()
	results := benchRunFunc(clients, calls, func() benchResult {
		return benchCall(tb.Context(), payer, gw, bodies[next.Add(1)-1])
	})
	m := moneyResult{calls: calls, quotes: new(big.Int), charged: new(big.Int), elapsed: time.Since(start)}
	rule := new(big.Int) // the sum of the rule's charges
	completion := int64(0)
	mismatched := 0
	for i, r := range results {
		if r.err != nil {
			m.failed++
			if m.failed == 1 {
				tb.Errorf("call %d: %v", i, r.err)
			}
			continue
		}
		var a struct {
			Usage *chat.Usage `json:"usage"`
			X     struct {
				Charged string `json:"charged"`
				Maximum string `json:"maximum"`
			} `json:"x_llm4agents"`
		}
		if err := json.Unmarshal(r.body, &a); err != nil || a.Usage == nil {
			tb.Fatalf("call %d: answer without usage (%v): %.300s", i, err, r.body)
		}
		maximum, ok := new(big.Int).SetString(a.X.Maximum, 10)
		if !ok {
			tb.Fatalf("call %d: x_llm4agents.maximum %q", i, a.X.Maximum)
		}
		want := moneyRule(*a.Usage, minCharge, maximum)
		if a.X.Charged != want.String() || r.amount != want.String() {
			mismatched++
			if mismatched == 1 {
				tb.Errorf("call %d: usage %+v, maximum %s: charged %s (PAYMENT-RESPONSE %s), the rule says %s",
					i, *a.Usage, maximum, a.X.Charged, r.amount, want)
			}
		}
		switch {
		case maximum.Cmp(minCharge) <= 0:
			m.minQuotes++
		case want.Cmp(minCharge) == 0:
			m.atMinimum++
		case want.Cmp(maximum) == 0:
			m.atMaximum++
		}
		rule.Add(rule, want)
		m.quotes.Add(m.quotes, maximum)
		completion += a.Usage.CompletionTokens
	}
	if m.failed > 0 || mismatched > 0 {
		tb.Errorf("%d of %d calls failed, %d charged otherwise than the rule", m.failed, calls, mismatched)
	}
	m.charged.Sub(c.balance(tb, payTo), payToBefore)
	if m.charged.Cmp(rule) != 0 {
		tb.Errorf("the payee received %s, the rule's charges sum to %s", m.charged, rule)
	}
	if lost := new(big.Int).Sub(payerBefore, c.balance(tb, payerAddr)); lost.Cmp(rule) != 0 {
		tb.Errorf("the payer lost %s, the rule's charges sum to %s", lost, rule)
	}
	if spent := tr.Spent(); spent.Cmp(rule) != 0 {
		tb.Errorf("the client counts %s spent, the rule's charges sum to %s", spent, rule)
	}
	mu.Lock()
	defer mu.Unlock()
	if told.amounts.Cmp(rule) != 0 || told.maxima.Cmp(m.quotes) != 0 {
		tb.Errorf("OnCharge was told of %s charged of %s authorized; the answers say %s of %s",
			&told.amounts, &told.maxima, rule, m.quotes)
	}
	if ok := calls - m.failed; ok > 0 {
		m.meanMaxTokens = float64(maxTokens) / float64(calls)
		m.meanCompletion = float64(completion) / float64(ok)
	}
	return m
}

// moneyRule is the charge of D27 written out again, apart from
// pricing.Charge, so that the check does not take the gateway's word for it:
// the usage at the money check's prices, rounded up to the atomic unit,
// raised to minCharge, capped at maximum.
func moneyRule(u chat.Usage, minCharge, maximum *big.Int) *big.Int {
	micro := new(big.Int).Mul(big.NewInt(u.PromptTokens), big.NewInt(moneyInputPrice))
	micro.Add(micro, new(big.Int).Mul(big.NewInt(u.CompletionTokens), big.NewInt(moneyOutputPrice)))
	cost, rem := new(big.Int).QuoRem(micro, big.NewInt(1_000_000), new(big.Int))
	if rem.Sign() > 0 {
		cost.Add(cost, big.NewInt(1))
	}
	if cost.Cmp(minCharge) < 0 {
		cost.Set(minCharge)
	}
	if cost.Cmp(maximum) > 0 {
		cost.Set(maximum)
	}
	return cost
}

// newRandomUpstream serves the demo model (upstream.Demo) over HTTP, each
// answer of a random length: the reply it would give uncapped is drawn from
// [1, moneyMaxReply] tokens (but is never shorter than its intro and echo of
// the prompt), and max_tokens cuts it as the demo does. Its usage is the
// demo's own count of the answer. The draw depends on seed and the request
// alone, not on the order requests arrive in, so a seed gives the same
// answers however many clients call.
func newRandomUpstream(tb testing.TB, seed uint64) *httptest.Server {
	tb.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil || r.Method != http.MethodPost || r.URL.Path != "/v1/chat/completions" {
			http.NotFound(w, r)
			return
		}
		h := fnv.New64a()
		_, _ = h.Write(body)
		n := 1 + rand.New(rand.NewPCG(seed, h.Sum64())).IntN(moneyMaxReply)
		comp, err := upstream.NewDemo(upstream.DemoConfig{ReplyTokens: n}).Complete(r.Context(), body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(comp.Body)
	}))
	tb.Cleanup(srv.Close)
	return srv
}
