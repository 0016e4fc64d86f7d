package main

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/llm4agents/llm4agents/internal/credits"
	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/internal/store/postgres"
	"github.com/llm4agents/llm4agents/internal/store/sqlite"
)

// enteredWatcher tells entered when WatchKeys is called.
type enteredWatcher struct {
	keyWatcher
	entered chan struct{}
}

func (e enteredWatcher) WatchKeys(ctx context.Context, changed func(string), lost func()) error {
	close(e.entered)
	return e.keyWatcher.WatchKeys(ctx, changed, lost)
}

// TestWatchKeysWired: with a key cache, a key revoked in the store is
// dropped from the cache as soon as the store tells of it, well before
// the TTL; the stop ends the watch.
func TestWatchKeysWired(t *testing.T) {
	db, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "keys.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = db.Close() }()
	keys := credits.NewKeys(db, nil)
	keys.CacheTTL = time.Second
	secret, id, err := credits.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	const owner = "0x857b06519e91e3a54538791bdbb0e22373e36b66"
	if _, err := db.CreateKey(t.Context(), store.APIKey{ID: id, Hash: credits.HashSecret(secret), Owner: owner,
		TotalCap: store.NoCap, PeriodCap: store.NoCap}); err != nil {
		t.Fatal(err)
	}
	if _, err := keys.Authenticate(t.Context(), secret); err != nil { // cached now
		t.Fatal(err)
	}
	w := enteredWatcher{keyWatcher: db, entered: make(chan struct{})}
	stop := watchKeys(w, keys, slog.New(slog.DiscardHandler))
	// The watch registers on entry; the revocation below waits for a
	// commit (an fsync), which takes far longer.
	<-w.entered
	if _, err := db.RevokeKey(t.Context(), owner, id); err != nil {
		t.Fatal(err)
	}
	revoked := time.Now()
	for {
		_, err := keys.Authenticate(t.Context(), secret)
		if errors.Is(err, credits.ErrRevokedKey) {
			break
		}
		if time.Since(revoked) > 300*time.Millisecond {
			t.Fatalf("the cached key still served %v after its revocation (TTL 1s): %v", time.Since(revoked), err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("revocation bound after %v", time.Since(revoked))
	done := make(chan struct{})
	go func() { stop(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the watch's stop did not return")
	}
}

// The SQL stores tell of key changes.
var (
	_ keyWatcher = (*sqlite.DB)(nil)
	_ keyWatcher = (*postgres.DB)(nil)
)
