package e2e

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/llm4agents/llm4agents/internal/ledger"
	"github.com/llm4agents/llm4agents/internal/proctest"
	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/internal/testchain"
	"github.com/llm4agents/llm4agents/internal/upstream/upstreamtest"
)

// keyCacheTTL is the replicas' credits.key_cache: the longest a replica may
// keep serving a key it cached. A revocation must reach them well before
// it, through the store's notifications.
const keyCacheTTL = time.Second

// revokeBound is how soon after a revocation every replica on PostgreSQL
// must refuse the key: well under keyCacheTTL, so that only a notification
// (not the cache running out) can meet it. On SQLite, whose processes
// sharing a file get no notification, the bound is the cache itself, plus
// a second of slack for the calls on a loaded machine: sqliteRevokeBound.
const (
	revokeBound       = 600 * time.Millisecond
	sqliteRevokeBound = keyCacheTTL + time.Second
)

// TestKeyRevokedAcrossReplicas: three replicas on one store, each caching
// keys for a second, have all just served one API key; the key is revoked
// in the store, from outside every replica. On PostgreSQL each replica
// refuses the key within revokeBound of the revocation (the store's
// notification drops it from every cache), not when its cache runs out; on
// SQLite (three processes on one file) within the cache's second.
func TestKeyRevokedAcrossReplicas(t *testing.T) {
	skipShort(t)
	bin := proctest.BuildBinary(t)
	bounds := map[string]time.Duration{"postgres": revokeBound, "sqlite": sqliteRevokeBound}
	for _, cs := range creditStores {
		t.Run(cs.name, func(t *testing.T) {
			dsn, st := cs.open(t)
			testKeyRevokedAcrossReplicas(t, bin, dsn, st, bounds[cs.name])
		})
	}
}

func testKeyRevokedAcrossReplicas(t *testing.T, bin, dsn string, st creditStore, bound time.Duration) {
	c := startChain(t)
	up := upstreamtest.NewServer(t, upstreamtest.Config{})
	secret, keyID := fundedKeyWith(t, st, ledger.AssetID(network, c.token), accountFunds, store.NoCap)
	cfg := replicaConfig(c, dsn, up.URL()) + creditsConfig + "  key_cache: " + keyCacheTTL.String() + "\n"
	replicas := startCreditReplicas(t, bin, cfg, numReplicas)
	hc := newHTTPClient(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	// Every replica serves the key now, and so holds it in its cache.
	for _, r := range replicas {
		if status, body, err := creditCall(ctx, hc, r.URL, secret); err != nil || status != http.StatusOK {
			t.Fatalf("call on %s before the revocation: %d, %v: %.200s", r.URL, status, err, body)
		}
	}
	owner := strings.ToLower(testchain.DevAddress(payerIdx).Hex())
	if _, err := st.RevokeKey(ctx, owner, keyID); err != nil {
		t.Fatalf("revoke: %v", err)
	}
	revoked := time.Now()
	for _, r := range replicas {
		for {
			status, body, err := creditCall(ctx, hc, r.URL, secret)
			if err != nil {
				t.Fatalf("call on %s after the revocation: %v", r.URL, err)
			}
			if status == http.StatusUnauthorized {
				break
			}
			if status != http.StatusOK {
				t.Fatalf("call on %s after the revocation: %d %.200s", r.URL, status, body)
			}
			if since := time.Since(revoked); since > bound {
				t.Fatalf("%s still served the key %s after its revocation (bound %s, cache %s)",
					r.URL, since.Round(time.Millisecond), bound, keyCacheTTL)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	t.Logf("every replica refused the key within %s of its revocation", time.Since(revoked).Round(time.Millisecond))
}
