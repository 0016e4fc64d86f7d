package redis_test

import (
	"testing"
	"time"

	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/internal/store/storetest"
)

// TestReceipts runs the receipts conformance suite with two DB values (two
// clients) on one fresh prefix, as two replicas would share it.
func TestReceipts(t *testing.T) {
	storetest.RunReceipts(t, func(t *testing.T, now func() time.Time) (a, b store.Receipts) {
		return pair(t, now)
	})
}
