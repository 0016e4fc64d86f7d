package storetest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llm4agents/llm4agents/internal/store"
)

// BenchWorkers is how many goroutines call the store at once in
// RunBenchmarks: the gateway's measured load of 32 concurrent paid requests.
const BenchWorkers = 32

// OpenBench opens one handle on a new, empty database for a benchmark, on the
// store's real clock, and registers its cleanup with b.Cleanup.
type OpenBench func(b *testing.B) (store.Settlements, store.Payments)

// RunBenchmarks measures the operations the paid path makes, with
// BenchWorkers concurrent callers on one handle, so every backend is measured
// by the same code (targets: PostgreSQL claim p99 <= 5 ms, Redis claim p99
// <= 1 ms). Besides ns/op (wall time over b.N, which falls as
// operations share commits), it reports ops/s and the p50 and p99 latency of
// one operation as a caller sees it.
//
//   - payment-claim: one ClaimPayment (the gateway's claim before upstream).
//   - payment-lifecycle: ClaimPayment, UpdatePayment pending, UpdatePayment
//     settled (the gateway's writes for one paid request).
//   - settlement-claim: one ClaimSettlement (the facilitator's claim).
//   - settlement-lifecycle: ClaimSettlement, broadcast, settled,
//     MarkSuccessReported (the facilitator's writes for one settlement).
func RunBenchmarks(b *testing.B, open OpenBench) {
	b.Run("payment-claim", func(b *testing.B) {
		_, p := open(b)
		runTimed(b, func(ctx context.Context, key string) error {
			_, err := claimPayment(ctx, p, key)
			return err
		})
	})
	b.Run("payment-lifecycle", func(b *testing.B) {
		_, p := open(b)
		runTimed(b, func(ctx context.Context, key string) error {
			c, err := claimPayment(ctx, p, key)
			if err != nil {
				return err
			}
			if err := p.UpdatePayment(ctx, key, c.Fence, store.PaymentPending, txHash1); err != nil {
				return err
			}
			return p.UpdatePayment(ctx, key, c.Fence, store.PaymentSettled, txHash1)
		})
	})
	b.Run("settlement-claim", func(b *testing.B) {
		s, _ := open(b)
		runTimed(b, func(ctx context.Context, key string) error {
			_, err := claimSettlement(ctx, s, key)
			return err
		})
	})
	b.Run("settlement-lifecycle", func(b *testing.B) {
		s, _ := open(b)
		runTimed(b, func(ctx context.Context, key string) error {
			c, err := claimSettlement(ctx, s, key)
			if err != nil {
				return err
			}
			if err := s.UpdateSettlement(ctx, key, c.Fence, store.StateBroadcast, txHash1, ""); err != nil {
				return err
			}
			if err := s.UpdateSettlement(ctx, key, c.Fence, store.StateSettled, txHash1, ""); err != nil {
				return err
			}
			set, err := s.MarkSuccessReported(ctx, key)
			if err == nil && !set {
				err = fmt.Errorf("mark %s: not set", key)
			}
			return err
		})
	})
}

func claimPayment(ctx context.Context, p store.Payments, key string) (store.PaymentClaim, error) {
	c, ok, err := p.ClaimPayment(ctx, store.PaymentClaim{
		Key: key, Network: "eip155:84532", Payer: "0x857b06519e91e3a54538791bdbb0e22373e36b66", Amount: "10000",
		Owner: "bench", ExpiresAt: time.Now().Add(time.Hour),
	}, time.Minute)
	if err == nil && !ok {
		err = fmt.Errorf("claim payment %s: not won", key)
	}
	return c, err
}

func claimSettlement(ctx context.Context, s store.Settlements, key string) (store.Settlement, error) {
	c, ok, err := s.ClaimSettlement(ctx, input(key, "bench"), time.Minute)
	if err == nil && !ok {
		err = fmt.Errorf("claim settlement %s: not won", key)
	}
	return c, err
}

// runTimed calls fn for b.N distinct keys from BenchWorkers goroutines,
// records each call's latency, and reports ops/s, p50-ms and p99-ms.
func runTimed(b *testing.B, fn func(ctx context.Context, key string) error) {
	b.Helper()
	runTimedBy(b, BenchWorkers, fn)
}

// runTimedBy is runTimed with workers goroutines.
func runTimedBy(b *testing.B, workers int, fn func(ctx context.Context, key string) error) {
	b.Helper()
	// Keys are unique per run: a backend's database may outlive one b.N
	// round when the framework calls the benchmark again with a larger N.
	prefix := fmt.Sprintf("bench-%d-%d-", time.Now().UnixNano(), b.N)
	lat := make([]time.Duration, b.N)
	var next atomic.Int64
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	b.ResetTimer()
	began := time.Now()
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= b.N {
					return
				}
				t0 := time.Now()
				if err := fn(b.Context(), fmt.Sprintf("%s%d", prefix, i)); err != nil {
					errs <- err
					return
				}
				lat[i] = time.Since(t0)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(began)
	b.StopTimer()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	slices.Sort(lat)
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "ops/s")
	b.ReportMetric(ms(percentile(lat, 50)), "p50-ms")
	b.ReportMetric(ms(percentile(lat, 99)), "p99-ms")
}

// percentile returns the p-th percentile of sorted by the nearest-rank method.
func percentile(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := (p*len(sorted) + 99) / 100 // ceil(p/100 * n), 1-based
	return sorted[max(rank, 1)-1]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
