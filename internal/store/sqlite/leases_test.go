package sqlite_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/llm4agents/llm4agents/internal/store/storetest"
)

// TestLeases runs the credit lease conformance suite with two DB values on
// one temporary file, as two processes would share it.
func TestLeases(t *testing.T) {
	storetest.RunLeases(t, func(t *testing.T, now func() time.Time) (a, b storetest.LeaseStore) {
		path := filepath.Join(t.TempDir(), "llm4agents.db")
		return open(t, path, now), open(t, path, now)
	})
}
