package postgres

import (
	"testing"
	"time"

	"github.com/llm4agents/llm4agents/internal/store/storetest"
)

// TestReceiptLog runs the receipt log conformance suite with two DB values
// (two pools) on one fresh schema, as two replicas would share it.
func TestReceiptLog(t *testing.T) {
	storetest.RunReceiptLog(t, func(t *testing.T, now func() time.Time) (a, b storetest.ReceiptLogStore) {
		_, dsn := freshSchema(t)
		return open(t, dsn, now, nil), open(t, dsn, now, nil)
	})
}

// BenchmarkReceiptLog runs the receipt log benchmarks every SQL backend
// shares, on the server's clock, one fresh schema per run.
func BenchmarkReceiptLog(b *testing.B) {
	storetest.RunReceiptLogBenchmarks(b, func(b *testing.B) storetest.ReceiptLogStore {
		_, dsn := freshSchema(b)
		return open(b, dsn, nil, nil)
	})
}
