package receiptlog_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/llm4agents/llm4agents/internal/store"
)

// BenchmarkProof measures Log.Proof, a receipt's inclusion proof against
// the latest checkpoint, on a log of 100,000 leaves, on each backend in one
// run: the store reads (the entry, the state, the proof's hashes on a cold
// cache) and the tree walk. The target is at most 1 ms.
//
//	go test -run '^$' -bench BenchmarkProof -benchtime 2000x ./internal/receiptlog/
func BenchmarkProof(b *testing.B) {
	const size = 100_000
	for _, name := range []string{"sqlite", "postgres", "redis"} {
		b.Run(name, func(b *testing.B) {
			a, _ := backends[name](b)
			key, vkey := newKey(b)
			l := newLog(b, a, "bench", key, vkey)
			ids := make([]string, 0, size)
			for from := 0; from < size; from += store.MaxLogBatch {
				var entries []store.LogEntry
				for i := from; i < min(from+store.MaxLogBatch, size); i++ {
					id := fmt.Sprintf("0x%064x", i+1)
					leaf := []byte(fmt.Sprintf("llm4agents receipt v1\nrail credits\nmodel demo\ntokens 1 1\namount %d\nissued 0\ncommitment 0x%064x\n", i, i))
					entries = append(entries, store.LogEntry{RequestID: id, Leaf: leaf})
					ids = append(ids, id)
				}
				if err := a.AppendLog(b.Context(), entries); err != nil {
					b.Fatal(err)
				}
				if _, err := l.Integrate(b.Context()); err != nil {
					b.Fatal(err)
				}
			}
			cold := newLog(b, a, "reader", key, vkey) // a replica whose cache is empty
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := range b.N {
				start := time.Now()
				p, err := cold.Proof(b.Context(), ids[rand.IntN(len(ids))])
				lat = append(lat, time.Since(start))
				if err != nil || p.Index < 0 {
					b.Fatal(i, err)
				}
			}
			b.StopTimer()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
		})
	}
}
