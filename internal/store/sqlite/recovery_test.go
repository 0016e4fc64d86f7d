package sqlite_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/internal/store/storetest"
)

// TestRecoveries runs the recovery conformance suite with two DB values on one
// temporary file, as two replicas would share it.
func TestRecoveries(t *testing.T) {
	storetest.RunRecoveries(t, func(t *testing.T, now func() time.Time) (a, b store.Recoveries) {
		path := filepath.Join(t.TempDir(), "llm4agents.db")
		return open(t, path, now), open(t, path, now)
	})
}

// TestPurgeExpiredRecoveries: the purge deletes expired records only.
func TestPurgeExpiredRecoveries(t *testing.T) {
	ctx := t.Context()
	clk := &testClock{now: time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)}
	db := open(t, filepath.Join(t.TempDir(), "llm4agents.db"), clk.Now)
	for i, d := range []time.Duration{time.Minute, time.Hour} {
		_, ok, err := db.BeginRecovery(ctx, store.Recovery{Key: string(rune('a' + i)), OperationID: string(rune('A' + i)),
			ExpiresAt: clk.Now().Add(d)}, time.Second)
		if err != nil || !ok {
			t.Fatal(ok, err)
		}
	}
	clk.Advance(2 * time.Minute)
	if n, err := db.PurgeExpiredRecoveries(ctx, 10); err != nil || n != 1 {
		t.Fatalf("purge = %d, %v; want 1", n, err)
	}
	if _, err := db.PurgeExpiredRecoveries(ctx, 0); err == nil {
		t.Error("purge with limit 0 succeeded")
	}
	if _, err := db.Recovery(ctx, "b"); err != nil {
		t.Errorf("the live record went: %v", err)
	}
}
