package postgres

import (
	"testing"
	"time"

	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/internal/store/storetest"
)

// TestRates runs the rate limit conformance suite with two DB values (two
// pools) on one fresh schema, as two replicas would share it.
func TestRates(t *testing.T) {
	storetest.RunRates(t, func(t *testing.T, now func() time.Time) (a, b store.Rates) {
		_, dsn := freshSchema(t)
		return open(t, dsn, now, nil), open(t, dsn, now, nil)
	})
}
