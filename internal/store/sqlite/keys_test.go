package sqlite_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/internal/store/storetest"
)

// TestKeys runs the keys conformance suite with two DB values on one
// temporary file, as two processes would share it.
func TestKeys(t *testing.T) {
	storetest.RunKeys(t, func(t *testing.T, now func() time.Time) (a, b store.Keys) {
		path := filepath.Join(t.TempDir(), "llm4agents.db")
		return open(t, path, now), open(t, path, now)
	})
}
