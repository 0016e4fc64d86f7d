package postgres

import (
	"testing"
	"time"

	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/internal/store/storetest"
)

// TestLogAnchors runs the anchors conformance suite with two DB values (two
// pools) on one fresh schema, as two replicas would share it.
func TestLogAnchors(t *testing.T) {
	storetest.RunLogAnchors(t, func(t *testing.T, now func() time.Time) (a, b store.LogAnchors) {
		_, dsn := freshSchema(t)
		return open(t, dsn, now, nil), open(t, dsn, now, nil)
	})
}
