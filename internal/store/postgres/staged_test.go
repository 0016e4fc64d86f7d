package postgres

import (
	"testing"
	"time"

	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/internal/store/storetest"
)

// TestStagedPayments runs the StagedPayments conformance suite with two DB
// values (two pools) on one fresh schema, as two replicas would share it.
func TestStagedPayments(t *testing.T) {
	storetest.RunStagedPayments(t, func(t *testing.T, now func() time.Time) (a, b store.StagedLister) {
		_, dsn := freshSchema(t)
		return open(t, dsn, now, nil), open(t, dsn, now, nil)
	})
}
