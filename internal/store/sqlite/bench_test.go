package sqlite_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/internal/store/storetest"
)

// benchWriters is how many goroutines write at once: the facilitator's
// measured load of 32 concurrent settlements.
const benchWriters = 32

// runConcurrently calls fn(i) for i in [0, b.N) from benchWriters goroutines
// and reports the first error. ns/op is wall time divided by b.N, so it falls
// as more operations share one commit.
func runConcurrently(b *testing.B, fn func(ctx context.Context, i int) error) {
	b.Helper()
	var next atomic.Int64
	errs := make(chan error, benchWriters)
	var wg sync.WaitGroup
	b.ResetTimer()
	for range benchWriters {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= b.N {
					return
				}
				if err := fn(b.Context(), i); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
}

// BenchmarkConcurrentClaims measures writes under benchWriters concurrent
// callers on one DB with synchronous=FULL on a real file: "claim" is one
// ClaimSettlement per op; "settlement" is the four writes of a settlement
// (claim, broadcast, settled, success mark) per op.
func BenchmarkConcurrentClaims(b *testing.B) {
	b.Run("claim", func(b *testing.B) {
		db := open(b, filepath.Join(b.TempDir(), "llm4agents.db"), nil)
		runConcurrently(b, func(ctx context.Context, i int) error {
			_, ok, err := db.ClaimSettlement(ctx, store.Settlement{Key: fmt.Sprintf("k%d", i), Amount: "1", Owner: "o"}, time.Minute)
			if err == nil && !ok {
				err = fmt.Errorf("claim k%d: not won", i)
			}
			return err
		})
	})
	b.Run("settlement", func(b *testing.B) {
		db := open(b, filepath.Join(b.TempDir(), "llm4agents.db"), nil)
		runConcurrently(b, func(ctx context.Context, i int) error {
			key := fmt.Sprintf("k%d", i)
			s, ok, err := db.ClaimSettlement(ctx, store.Settlement{Key: key, Amount: "1", Owner: "o"}, time.Minute)
			if err != nil {
				return err
			}
			if !ok {
				return fmt.Errorf("claim %s: not won", key)
			}
			if err := db.UpdateSettlement(ctx, key, s.Fence, store.StateBroadcast, "0xabc", ""); err != nil {
				return err
			}
			if err := db.UpdateSettlement(ctx, key, s.Fence, store.StateSettled, "0xabc", ""); err != nil {
				return err
			}
			set, err := db.MarkSuccessReported(ctx, key)
			if err == nil && !set {
				err = fmt.Errorf("mark %s: not set", key)
			}
			return err
		})
	})
}

// BenchmarkStore runs the benchmarks every backend shares, for comparison
// with PostgreSQL and Redis (docs/BENCHMARKS.md).
func BenchmarkStore(b *testing.B) {
	storetest.RunBenchmarks(b, func(b *testing.B) (store.Settlements, store.Payments) {
		db := open(b, filepath.Join(b.TempDir(), "llm4agents.db"), nil)
		return db, db
	})
}
