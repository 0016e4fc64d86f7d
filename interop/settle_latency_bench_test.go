package interop_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/ethclient"
	"github.com/ethereum/go-ethereum/rpc"

	"github.com/llm4agents/llm4agents/client"
	"github.com/llm4agents/llm4agents/x402"
)

// The settle latency benchmark: how long a paid call takes
// on a chain that mines a block a second, by the facilitator's receipt poll
// interval. docs/BENCHMARKS.md has the command, the expected times and the
// results.

const (
	// latencyBlockTime is how often anvil mines once the chain is set up.
	latencyBlockTime = time.Second
	// latencyCalls is how many measured paid calls each gateway answers per
	// round of each sub-benchmark.
	latencyCalls = 40
	// latencyTarget is the target for a paid call's p50: within 150ms
	// of the block interval.
	latencyTarget = latencyBlockTime + 150*time.Millisecond
)

// latencyGateways are the `llm4agents serve` processes BenchmarkSettleLatency
// runs side by side, one per receipt poll interval, each settling from its own
// dev account so their nonces never meet. A zero poll leaves
// facilitator.poll_interval unset: the network's default, 100ms on eip155:1337.
var latencyGateways = []struct {
	name   string
	poll   time.Duration
	keyIdx int
}{
	{"poll=1s", time.Second, facilitatorIdx},
	{"poll=250ms", 250 * time.Millisecond, tsFacilitatorIdx},
	{"poll=100ms-default", 0, 7},
	{"poll=50ms", 50 * time.Millisecond, 8},
}

// BenchmarkSettleLatency measures the latency of paid calls through `llm4agents
// serve` (in-process facilitator, demo upstream, SQLite) on an anvil that mines
// a block every second, for the receipt poll intervals of latencyGateways side
// by side on one chain, one paying Go client. A call's latency is from the
// paid request (the one carrying PAYMENT-SIGNATURE) to the last byte of the
// answer; the 402 and the signing before it are left out. Each call is split
// at the moment the benchmark saw the block holding its settlement (a newHeads
// subscription): before-block is verify, claim, broadcast and the wait for the
// block; after-block is the receipt poll's lag plus the settlement's and the
// payment's store writes and the answer.
//
// Two sub-benchmarks, each making latencyCalls calls per gateway per round:
//
//   - random: before each call the client pauses a random time below a block,
//     so calls start at a random point of the block interval, as independent
//     callers do; the gateways take turns call by call in a shuffled order.
//   - back-to-back: each gateway in turn answers its calls one right after the
//     other, as a sequential agent makes them; a call then starts just after a
//     block, so it waits nearly a whole block for the next one.
//
// Target: p50 within 150ms of the block interval.
//
//	go test -run '^$' -bench SettleLatency -benchtime=1x -count=1 -timeout 20m ./interop/
func BenchmarkSettleLatency(b *testing.B) {
	requireTools(b)
	bin := buildBenchBinary(b)
	c := newChain(b)
	ctx, cancel := context.WithTimeout(b.Context(), chainTimeout)
	defer cancel()
	// The chain is set up on automine; from here on anvil mines every
	// latencyBlockTime (as `anvil --block-time 1` does) and no sooner.
	if err := c.anvil.RPC.CallContext(ctx, nil, "evm_setIntervalMining", int(latencyBlockTime/time.Second)); err != nil {
		b.Fatalf("evm_setIntervalMining: %v", err)
	}
	chain := watchChain(b, c)
	urls := make([]string, len(latencyGateways))
	for i, g := range latencyGateways {
		urls[i] = startBenchBinary(b, bin, c, benchServe{keyIdx: g.keyIdx, pollInterval: g.poll}).url
	}
	payer := newBenchPayer(b, c.token)
	tr := payer.Transport.(*client.Transport)
	tr.Base = paidClock{base: tr.Base}
	// One unmeasured paid call each: a broken setup fails here, and every
	// gateway starts warm (connections, the tokenizer, the Sender's nonce).
	for i, u := range urls {
		if r := benchCall(b.Context(), payer, u, benchBody); r.err != nil {
			b.Fatalf("first paid call to %s: %v", latencyGateways[i].name, r.err)
		}
	}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 18))

	b.Run("random", func(b *testing.B) {
		calls := make([][]latencyCall, len(urls))
		for range b.N {
			for range latencyCalls {
				for _, i := range rng.Perm(len(urls)) {
					time.Sleep(time.Duration(rng.Int64N(int64(latencyBlockTime))))
					calls[i] = append(calls[i], timedPaidCall(b.Context(), payer, urls[i]))
				}
			}
		}
		reportLatency(b, c, chain, calls)
	})
	b.Run("back-to-back", func(b *testing.B) {
		calls := make([][]latencyCall, len(urls))
		for round := range b.N {
			for k := range urls {
				i := (k + round) % len(urls)
				for range latencyCalls {
					calls[i] = append(calls[i], timedPaidCall(b.Context(), payer, urls[i]))
				}
			}
		}
		reportLatency(b, c, chain, calls)
	})
}

// latencyCall is one paid call of BenchmarkSettleLatency.
type latencyCall struct {
	paid, end time.Time // the paid request sent; the answer read
	tx        common.Hash
	err       error
}

// timedPaidCall makes one paid call through payer, whose base transport is a
// paidClock, and reads the whole answer.
func timedPaidCall(ctx context.Context, payer *http.Client, url string) latencyCall {
	var lc latencyCall
	r := benchCall(context.WithValue(ctx, paidClockKey{}, &lc), payer, url, benchBody)
	lc.end = time.Now()
	if lc.err == nil {
		lc.err = r.err
	}
	if lc.err == nil && lc.paid.IsZero() {
		lc.err = errors.New("no paid request was sent")
	}
	return lc
}

// paidClockKey is the context key of the *latencyCall a paidClock fills in.
type paidClockKey struct{}

// paidClock is the paying client's base transport: for the first request that
// carries PAYMENT-SIGNATURE in a call it records when it was sent and the
// settlement's transaction from the answer's PAYMENT-RESPONSE.
type paidClock struct{ base http.RoundTripper }

func (p paidClock) RoundTrip(req *http.Request) (*http.Response, error) {
	lc, _ := req.Context().Value(paidClockKey{}).(*latencyCall)
	if lc == nil || req.Header.Get(x402.HeaderPaymentSignature) == "" || !lc.paid.IsZero() {
		return p.base.RoundTrip(req)
	}
	lc.paid = time.Now()
	resp, err := p.base.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	if sr, serr := client.SettleResponse(resp); serr != nil || sr == nil {
		lc.err = fmt.Errorf("paid answer %d without a readable PAYMENT-RESPONSE: %w", resp.StatusCode, serr)
	} else {
		lc.tx = common.HexToHash(sr.Transaction)
	}
	return resp, nil
}

var _ http.RoundTripper = paidClock{}

// chainClock records when the benchmark first heard of each block and of each
// transaction the node took into its pool.
type chainClock struct {
	mu     sync.Mutex
	blocks map[uint64]time.Time      // guarded by mu
	txs    map[common.Hash]time.Time // guarded by mu
	err    error                     // why a subscription ended before the benchmark; guarded by mu
}

// ended notes why a subscription ended: nil when unsubscribed.
func (cc *chainClock) ended(err error) {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	cc.err = err
}

func (cc *chainClock) block(n uint64) (time.Time, bool) {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	t, ok := cc.blocks[n]
	return t, ok
}

func (cc *chainClock) tx(h common.Hash) (time.Time, bool) {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	t, ok := cc.txs[h]
	return t, ok
}

// watchChain subscribes to c's new blocks and pending transactions over
// WebSocket until the benchmark ends, and records when each arrived.
func watchChain(tb testing.TB, c *testChain) *chainClock {
	tb.Helper()
	ctx, cancel := context.WithTimeout(tb.Context(), chainTimeout)
	defer cancel()
	rc, err := rpc.DialContext(ctx, "ws://"+strings.TrimPrefix(c.anvil.URL, "http://"))
	if err != nil {
		tb.Fatalf("dial anvil over WebSocket: %v", err)
	}
	heads := make(chan *types.Header, 64)
	hsub, err := ethclient.NewClient(rc).SubscribeNewHead(ctx, heads)
	if err != nil {
		rc.Close()
		tb.Fatalf("subscribe to new heads: %v", err)
	}
	pending := make(chan common.Hash, 64)
	psub, err := rc.EthSubscribe(ctx, pending, "newPendingTransactions")
	if err != nil {
		hsub.Unsubscribe()
		rc.Close()
		tb.Fatalf("subscribe to pending transactions: %v", err)
	}
	cc := &chainClock{blocks: map[uint64]time.Time{}, txs: map[common.Hash]time.Time{}}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case h := <-heads:
				now := time.Now()
				cc.mu.Lock()
				cc.blocks[h.Number.Uint64()] = now
				cc.mu.Unlock()
			case h := <-pending:
				now := time.Now()
				cc.mu.Lock()
				if _, ok := cc.txs[h]; !ok {
					cc.txs[h] = now
				}
				cc.mu.Unlock()
			case err := <-hsub.Err():
				cc.ended(err)
				return
			case err := <-psub.Err():
				cc.ended(err)
				return
			}
		}
	})
	tb.Cleanup(func() {
		hsub.Unsubscribe()
		psub.Unsubscribe()
		wg.Wait()
		rc.Close()
		cc.mu.Lock()
		defer cc.mu.Unlock()
		if cc.err != nil {
			tb.Errorf("a chain subscription ended early; the splits may lack blocks: %v", cc.err)
		}
	})
	return cc
}

// reportLatency reports, for each gateway of latencyGateways, the percentiles
// of its calls' latencies, the p50 minus the block interval, and the p50 of
// each part of a call: to the node's pool (verify, claim, the Sender's
// estimate and broadcast), in the pool until the block, and from the block to
// the answer (the receipt poll's lag, the store writes, the answer); it logs
// them as a table.
func reportLatency(b *testing.B, c *testChain, cc *chainClock, calls [][]latencyCall) {
	b.Helper()
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	row := "%-20s %5v %6v %8v %8v %8v %10v %8v %8v %8v %8v %s"
	lines := []string{
		fmt.Sprintf(row, "gateway", "calls", "failed", "p50", "p90", "p99", "p50-block", "to-pool", "in-pool", "after", "after", "target"),
		fmt.Sprintf(row, "", "", "", "ms", "ms", "ms", "ms", "p50 ms", "p50 ms", "p50 ms", "mean ms", "p50 <= "+latencyTarget.String()),
	}
	for i, g := range latencyGateways {
		var total, toPool, inPool, after []time.Duration
		failed := 0
		var firstErr error
		for _, lc := range calls[i] {
			if lc.err != nil {
				failed++
				firstErr = cmp.Or(firstErr, lc.err)
				continue
			}
			total = append(total, lc.end.Sub(lc.paid))
			pooled, mined, err := cc.times(b, c, lc.tx)
			if err != nil {
				firstErr = cmp.Or(firstErr, err)
				continue
			}
			toPool = append(toPool, pooled.Sub(lc.paid))
			inPool = append(inPool, mined.Sub(pooled))
			after = append(after, lc.end.Sub(mined))
		}
		if len(total) == 0 {
			b.Fatalf("%s: no successful call: %v", g.name, firstErr)
		}
		p50 := percentile(total, 0.5)
		b.ReportMetric(ms(p50), g.name+"-p50-ms")
		b.ReportMetric(ms(percentile(total, 0.9)), g.name+"-p90-ms")
		b.ReportMetric(ms(percentile(total, 0.99)), g.name+"-p99-ms")
		b.ReportMetric(ms(p50-latencyBlockTime), g.name+"-p50-minus-block-ms")
		b.ReportMetric(ms(percentile(toPool, 0.5)), g.name+"-to-pool-p50-ms")
		b.ReportMetric(ms(percentile(inPool, 0.5)), g.name+"-in-pool-p50-ms")
		b.ReportMetric(ms(percentile(after, 0.5)), g.name+"-after-block-p50-ms")
		b.ReportMetric(ms(mean(after)), g.name+"-after-block-mean-ms")
		b.ReportMetric(float64(failed), g.name+"-failed")
		verdict := "met"
		if p50 > latencyTarget || failed > 0 {
			verdict = "NOT met"
		}
		f1 := func(d time.Duration) string { return fmt.Sprintf("%.1f", ms(d)) }
		lines = append(lines, fmt.Sprintf(row, g.name, len(calls[i]), failed,
			f1(p50), f1(percentile(total, 0.9)), f1(percentile(total, 0.99)), fmt.Sprintf("%+.1f", ms(p50-latencyBlockTime)),
			f1(percentile(toPool, 0.5)), f1(percentile(inPool, 0.5)), f1(percentile(after, 0.5)), f1(mean(after)), verdict))
		if firstErr != nil {
			b.Logf("%s: first failure: %v", g.name, firstErr)
		}
	}
	b.ReportMetric(0, "ns/op")
	b.Logf("paid call latency, blocks every %s:\n%s", latencyBlockTime, strings.Join(lines, "\n"))
}

// times returns when the benchmark saw tx arrive in the node's pool and the
// block that holds it.
func (cc *chainClock) times(tb testing.TB, c *testChain, tx common.Hash) (pooled, mined time.Time, err error) {
	ctx, cancel := context.WithTimeout(tb.Context(), chainTimeout)
	defer cancel()
	r, err := c.anvil.Client.TransactionReceipt(ctx, tx)
	if err != nil {
		return pooled, mined, fmt.Errorf("receipt of %s: %w", tx, err)
	}
	mined, ok := cc.block(r.BlockNumber.Uint64())
	if !ok {
		return pooled, mined, fmt.Errorf("block %d of %s was not seen", r.BlockNumber, tx)
	}
	if pooled, ok = cc.tx(tx); !ok {
		return pooled, mined, fmt.Errorf("%s was not seen in the pool", tx)
	}
	return pooled, mined, nil
}

// percentile returns the q-quantile of d by nearest rank; d is sorted in place.
func percentile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	i := int(math.Ceil(q*float64(len(d)))) - 1
	return d[max(0, min(i, len(d)-1))]
}

// mean returns the mean of d, or 0 for none.
func mean(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	var sum time.Duration
	for _, x := range d {
		sum += x
	}
	return sum / time.Duration(len(d))
}
