package sqlite_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/internal/store/storetest"
)

// TestReceipts runs the receipts conformance suite with two DB values on one
// temporary file, as two processes would share it.
func TestReceipts(t *testing.T) {
	storetest.RunReceipts(t, func(t *testing.T, now func() time.Time) (a, b store.Receipts) {
		path := filepath.Join(t.TempDir(), "llm4agents.db")
		return open(t, path, now), open(t, path, now)
	})
}
