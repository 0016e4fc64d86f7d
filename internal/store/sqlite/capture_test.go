package sqlite_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/llm4agents/llm4agents/internal/store/storetest"
)

// TestCaptureWithReceipt runs the capture-with-receipt conformance suite
// with two DB values on one temporary file.
func TestCaptureWithReceipt(t *testing.T) {
	storetest.RunCaptureWithReceipt(t, func(t *testing.T, now func() time.Time) (a, b storetest.CaptureStore) {
		path := filepath.Join(t.TempDir(), "llm4agents.db")
		return open(t, path, now), open(t, path, now)
	})
}
