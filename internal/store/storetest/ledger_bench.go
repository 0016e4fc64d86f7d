package storetest

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llm4agents/llm4agents/internal/store"
)

// OpenLedgerBench opens one handle on a new, empty database for a benchmark,
// on the store's real clock, and registers its cleanup with b.Cleanup.
type OpenLedgerBench func(b *testing.B) store.Ledger

// RunLedgerBenchmarks measures the credit path's store writes with
// BenchWorkers concurrent callers on one handle, reporting ops/s and the p50
// and p99 latency of one operation as a caller sees it, like RunBenchmarks
// (budget for the whole credit path: p50 <= 0.5 ms, p99 <= 2 ms added).
//
//   - hold-capture: Hold through a key with both caps, then Capture: the two
//     writes of one credit-paid call; each worker pays from an owner of its
//     own.
//   - hold-capture-one-owner: the same with every worker paying from one
//     owner through one key, the hot account of an agent with many calls in
//     flight.
//   - hold-capture-serial: the same with one caller, so nothing queues: the
//     latency the ledger adds to one call on an idle store.
func RunLedgerBenchmarks(b *testing.B, open OpenLedgerBench) {
	for _, tc := range []struct {
		name            string
		owners, workers int
	}{
		{"hold-capture", BenchWorkers, BenchWorkers},
		{"hold-capture-one-owner", 1, BenchWorkers},
		{"hold-capture-serial", 1, 1},
	} {
		b.Run(tc.name, func(b *testing.B) {
			l := open(b)
			prefix := fmt.Sprintf("bench-%d-%d-", time.Now().UnixNano(), b.N)
			owners := make([]string, tc.owners)
			for i := range owners {
				owners[i] = fmt.Sprintf("0x%040x", i+1)
				if _, err := l.Credit(b.Context(), prefix+owners[i], owners[i], usdc, store.MaxAmount); err != nil {
					b.Fatal(err)
				}
			}
			key := store.KeyLimits{TotalCap: store.NoCap, PeriodCap: store.MaxAmount, Period: 24 * time.Hour}
			var next atomic.Uint64
			runTimedBy(b, tc.workers, func(ctx context.Context, id string) error {
				owner := owners[next.Add(1)%uint64(len(owners))]
				k := key
				k.ID = "key-" + owner
				if _, err := l.Hold(ctx, store.HoldRequest{ID: id, Owner: owner, Asset: usdc, Amount: 30_000, TTL: time.Minute, Key: &k}); err != nil {
					return err
				}
				_, _, err := l.Capture(ctx, id, 12_345)
				return err
			})
		})
	}
}
