package sqlite_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/llm4agents/llm4agents/internal/store/storetest"
)

// TestReceiptLog runs the receipt log conformance suite with two DB values
// on one temporary file, as two processes would share it.
func TestReceiptLog(t *testing.T) {
	storetest.RunReceiptLog(t, func(t *testing.T, now func() time.Time) (a, b storetest.ReceiptLogStore) {
		path := filepath.Join(t.TempDir(), "llm4agents.db")
		return open(t, path, now), open(t, path, now)
	})
}

// BenchmarkReceiptLog runs the receipt log benchmarks every SQL backend
// shares.
func BenchmarkReceiptLog(b *testing.B) {
	storetest.RunReceiptLogBenchmarks(b, func(b *testing.B) storetest.ReceiptLogStore {
		return open(b, filepath.Join(b.TempDir(), "llm4agents.db"), nil)
	})
}
