package gateway_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/llm4agents/llm4agents/internal/credits"
	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/internal/store/postgres"
	"github.com/llm4agents/llm4agents/internal/testdb"
)

// keyWatcher is a store that tells of changed keys, as serve uses it.
type keyWatcher interface {
	WatchKeys(ctx context.Context, changed func(hash string), lost func()) error
}

// watchTestKeys drops the keys db tells of from keys' cache, as serve
// does, until the test ends.
func watchTestKeys(tb testing.TB, db creditStore, keys *credits.Keys) {
	tb.Helper()
	w, ok := db.(keyWatcher)
	if !ok {
		tb.Fatalf("%T does not tell of key changes", db)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.WatchKeys(ctx, keys.Forget, keys.ForgetAll) }()
	tb.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			tb.Errorf("WatchKeys() = %v", err)
		}
	})
}

// waitListening waits until n sessions listen for the key changes of the
// schema dsn selects (the channel is the store's: llm4agents_keys_ and the
// first 32 hex digits of the SHA-256 of the schema's name).
func waitListening(t *testing.T, dsn string, n int) {
	t.Helper()
	conn := testdb.PostgresConn(t, t.Context(), dsn)
	defer func() { _ = conn.Close(context.Background()) }()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		var got int
		if err := conn.QueryRow(t.Context(), `SELECT count(*) FROM pg_stat_activity WHERE state = 'idle'
AND query = 'LISTEN "llm4agents_keys_' || left(encode(sha256(convert_to(current_schema(), 'UTF8')), 'hex'), 32) || '"'`).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d sessions listen for key changes after 5s, want %d", got, n)
		}
	}
}

// TestCreditKeyCacheAcrossReplicas: two replicas on one PostgreSQL schema,
// each caching keys for 1s. A key revoked, or its cap lowered, through one
// replica's account routes is refused by the other well within the cache's
// TTL: the store notifies the change and the other replica drops the key
// from its cache.
func TestCreditKeyCacheAcrossReplicas(t *testing.T) {
	const bound = 300 * time.Millisecond // the cache's TTL is 1s
	dsn := testdb.PostgresDSN(t, "gw")
	be := creditBackend{name: "postgres-leased", leased: true, keyCache: time.Second, watchKeys: true,
		open: func(tb testing.TB, log *slog.Logger) creditStore {
			tb.Helper()
			db, err := postgres.Open(t.Context(), dsn, log)
			if err != nil {
				tb.Fatal(err)
			}
			tb.Cleanup(func() {
				if err := db.Close(); err != nil {
					tb.Error(err)
				}
			})
			return db
		}}
	a, b := newCreditEnv(t, creditOpts{backend: be}), newCreditEnv(t, creditOpts{backend: be})
	waitListening(t, dsn, 2)
	a.topUp(t, alice, 10_000_000)
	session := a.newSession(t, alice)

	// refusedBy polls b with secret until it answers status, failing past
	// bound after the change.
	refusedBy := func(t *testing.T, secret string, status int, changed time.Time) {
		t.Helper()
		for {
			resp := b.chat(t, secret, chatBody)
			body := readAll(t, resp)
			if resp.StatusCode == status {
				t.Logf("refused by the other replica %v after the change", time.Since(changed))
				return
			}
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("the other replica answered %d %s, want %d", resp.StatusCode, body, status)
			}
			if time.Since(changed) > bound {
				t.Fatalf("the other replica still served the key %v after the change, want %d within %v", time.Since(changed), status, bound)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	// warm serves a call of secret on b, which caches the key.
	warm := func(t *testing.T, secret string) {
		t.Helper()
		if resp := b.chat(t, secret, chatBody); resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d: %s", resp.StatusCode, readAll(t, resp))
		}
	}

	t.Run("revoke", func(t *testing.T) {
		secret, key := a.newKey(t, alice, nil)
		warm(t, secret)
		resp := a.do(t, t.Context(), http.MethodDelete, "/v1/keys/"+key.ID, session, "", nil)
		changed := time.Now()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("revoke through the first replica: %d %s", resp.StatusCode, readAll(t, resp))
		}
		refusedBy(t, secret, http.StatusUnauthorized, changed)
	})
	t.Run("lower cap", func(t *testing.T) {
		secret, key := a.newKey(t, alice, func(k *store.APIKey) { k.TotalCap = 5_000_000 })
		warm(t, secret)
		body := fmt.Sprintf(`{"totalCap":"%d"}`, maxCostOf(t, chatBody)-1) // below one more call
		resp := a.do(t, t.Context(), http.MethodPatch, "/v1/keys/"+key.ID, session, body, nil)
		changed := time.Now()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("update through the first replica: %d %s", resp.StatusCode, readAll(t, resp))
		}
		refusedBy(t, secret, http.StatusPaymentRequired, changed)
	})
}
