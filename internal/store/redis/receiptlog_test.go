package redis_test

import (
	"testing"
	"time"

	"github.com/llm4agents/llm4agents/internal/store/storetest"
)

// TestReceiptLog runs the receipt log conformance suite with two DB values
// (two clients) on one fresh prefix, as two replicas would share it.
func TestReceiptLog(t *testing.T) {
	storetest.RunReceiptLog(t, func(t *testing.T, now func() time.Time) (a, b storetest.ReceiptLogStore) {
		return pair(t, now)
	})
}

// BenchmarkReceiptLog runs the receipt log benchmarks every backend shares,
// on the server's clock, one fresh prefix per run.
func BenchmarkReceiptLog(b *testing.B) {
	storetest.RunReceiptLogBenchmarks(b, func(b *testing.B) storetest.ReceiptLogStore {
		u, _ := freshURL(b)
		return open(b, u, nil)
	})
}
