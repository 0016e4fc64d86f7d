package postgres

import (
	"testing"
	"time"

	"github.com/llm4agents/llm4agents/internal/store/storetest"
)

// TestCaptureWithReceipt runs the capture-with-receipt conformance suite
// with two DB values (two pools) on one fresh schema.
func TestCaptureWithReceipt(t *testing.T) {
	storetest.RunCaptureWithReceipt(t, func(t *testing.T, now func() time.Time) (a, b storetest.CaptureStore) {
		_, dsn := freshSchema(t)
		return open(t, dsn, now, nil), open(t, dsn, now, nil)
	})
}
