package postgres

import (
	"testing"
	"time"

	"github.com/llm4agents/llm4agents/internal/store/storetest"
)

// TestLeases runs the credit lease conformance suite with two DB values
// (two pools) on one fresh schema, as two processes would share it.
func TestLeases(t *testing.T) {
	storetest.RunLeases(t, func(t *testing.T, now func() time.Time) (a, b storetest.LeaseStore) {
		_, dsn := freshSchema(t)
		return open(t, dsn, now, nil), open(t, dsn, now, nil)
	})
}
