package sqlite_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/internal/store/storetest"
)

// TestRates runs the rate limit conformance suite with two DB values on one
// temporary file, as two processes would share it.
func TestRates(t *testing.T) {
	storetest.RunRates(t, func(t *testing.T, now func() time.Time) (a, b store.Rates) {
		path := filepath.Join(t.TempDir(), "llm4agents.db")
		return open(t, path, now), open(t, path, now)
	})
}
