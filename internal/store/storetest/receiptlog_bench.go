package storetest

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llm4agents/llm4agents/internal/store"
)

// OpenReceiptLogBench opens one handle on a new, empty database for a
// benchmark, on the store's real clock, and registers its cleanup with
// b.Cleanup.
type OpenReceiptLogBench func(b *testing.B) ReceiptLogStore

// RunReceiptLogBenchmarks measures the receipt log's store work, which must
// keep up with 5,000 receipts a second, reporting receipts/s (wall time).
//
//   - integrate-N: the integrator's loop, batch after batch of N entries
//     queued before the timer starts: PendingLog, then IntegrateLog with
//     2N-1 new hashes (about what a tlog tree stores per leaf) and a
//     checkpoint. It reports the p50 and p99 latency of one batch, too.
//   - put-receipt-leaf: PutReceipt with a leaf, from BenchWorkers callers,
//     as the gateway keeps each receipt (the feed the integrator drains),
//     with the p50 and p99 latency of one put; put-receipt-no-leaf, the
//     same without a leaf, is what the leaf costs compared to.
func RunReceiptLogBenchmarks(b *testing.B, open OpenReceiptLogBench) {
	for _, batch := range []int{256, 1024, store.MaxLogBatch} {
		b.Run(fmt.Sprintf("integrate-%d", batch), func(b *testing.B) {
			benchIntegrate(b, open(b), batch)
		})
	}
	for _, leaf := range []bool{true, false} {
		name := "put-receipt-leaf"
		if !leaf {
			name = "put-receipt-no-leaf"
		}
		b.Run(name, func(b *testing.B) {
			l := open(b)
			var seq atomic.Int64
			// runTimed's ops/s is receipts/s here.
			runTimed(b, func(ctx context.Context, id string) error {
				r := logReceipt(id, seq.Add(1))
				if !leaf {
					r.Leaf = nil
				}
				return l.PutReceipt(ctx, r)
			})
		})
	}
}

// benchIntegrate queues b.N batches of batch entries, then integrates them
// one batch at a time, timed.
func benchIntegrate(b *testing.B, l store.ReceiptLog, batch int) {
	ctx := b.Context()
	st, held, err := l.TakeLogLease(ctx, "bench", time.Hour)
	if err != nil || !held {
		b.Fatalf("TakeLogLease = %v, %v", held, err)
	}
	ids := logIDs(fmt.Sprintf("bench-%d-%d-", time.Now().UnixNano(), b.N), b.N*batch)
	for chunk := range slices.Chunk(ids, store.MaxLogBatch) {
		if err := l.AppendLog(ctx, logEntries(chunk...)); err != nil {
			b.Fatal(err)
		}
	}
	size, stored := st.Size, int64(0)
	lat := make([]time.Duration, b.N)
	b.ResetTimer()
	began := time.Now()
	for i := range b.N {
		t0 := time.Now()
		page, err := l.PendingLog(ctx, batch)
		if err != nil {
			b.Fatal(err)
		}
		if len(page) != batch {
			b.Fatalf("PendingLog gave %d entries, want %d", len(page), batch)
		}
		batchIDs := make([]string, len(page))
		for j, e := range page {
			batchIDs[j] = e.RequestID
		}
		hashes := make([]store.LogHash, 2*batch-1)
		for j := range hashes {
			hashes[j].Index = stored + int64(j)
			// Any 32 bytes do: the store gives hashes no meaning.
			binary.BigEndian.PutUint32(hashes[j].Hash[:], uint32(j))
		}
		next := size + int64(batch)
		if err := l.IntegrateLog(ctx, st.Fence, size, batchIDs, hashes, logCheckpoint(next)); err != nil {
			b.Fatal(err)
		}
		size, stored = next, stored+int64(len(hashes))
		lat[i] = time.Since(t0)
	}
	elapsed := time.Since(began)
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(b.N*batch)/elapsed.Seconds(), "receipts/s")
	b.ReportMetric(ms(percentile(lat, 50)), "p50-ms")
	b.ReportMetric(ms(percentile(lat, 99)), "p99-ms")
}
