package sqlite_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/internal/store/storetest"
)

// TestLogAnchors runs the anchors conformance suite with two DB values on
// one temporary file, as two processes would share it.
func TestLogAnchors(t *testing.T) {
	storetest.RunLogAnchors(t, func(t *testing.T, now func() time.Time) (a, b store.LogAnchors) {
		path := filepath.Join(t.TempDir(), "llm4agents.db")
		return open(t, path, now), open(t, path, now)
	})
}
