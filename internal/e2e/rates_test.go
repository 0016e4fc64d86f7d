package e2e

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llm4agents/llm4agents/internal/ledger"
	"github.com/llm4agents/llm4agents/internal/proctest"
	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/internal/upstream/upstreamtest"
)

// TestRateLimitAcrossReplicas: three replicas on one store (a PostgreSQL
// database, or a SQLite file the three processes share) serve one API key
// limited to 20 requests per minute. 60 concurrent calls spread over the
// three get exactly 20 answers, not 60 (three replicas each allowing the
// rate), and 40 refusals with Retry-After that reach no upstream.
func TestRateLimitAcrossReplicas(t *testing.T) {
	skipShort(t)
	bin := proctest.BuildBinary(t)
	for _, cs := range creditStores {
		t.Run(cs.name, func(t *testing.T) {
			dsn, st := cs.open(t)
			testRateLimitAcrossReplicas(t, bin, dsn, st)
		})
	}
}

func testRateLimitAcrossReplicas(t *testing.T, bin, dsn string, st creditStore) {
	c := startChain(t)
	up := upstreamtest.NewServer(t, upstreamtest.Config{})
	const perMinute = 20
	limited, _ := fundedKeyWith(t, st, ledger.AssetID(network, c.token), accountFunds, store.NoCap,
		func(k *store.APIKey) { k.RatePerMinute = perMinute })

	cfg := replicaConfig(c, dsn, up.URL()) + creditsConfig
	replicas := startCreditReplicas(t, bin, cfg, numReplicas)
	// The limit's window is the store's minute: start well inside one, so
	// that the calls (a second or two) do not straddle two windows.
	if left := time.Minute - time.Duration(time.Now().UnixMilli()%60_000)*time.Millisecond; left < 5*time.Second {
		time.Sleep(left + time.Second)
	}
	hc := newHTTPClient(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var mu sync.Mutex
	answered, limitedN := 0, 0
	var wg sync.WaitGroup
	for i := range 3 * perMinute {
		wg.Go(func() {
			status, body, hdr, err := creditCallHeader(ctx, hc, replicas[i%numReplicas].URL, limited)
			mu.Lock()
			defer mu.Unlock()
			retry, _ := strconv.Atoi(hdr.Get("Retry-After"))
			switch {
			case err == nil && status == http.StatusOK:
				answered++
			case err == nil && status == http.StatusTooManyRequests && strings.Contains(string(body), `"rate_limited"`) && retry >= 1 && retry <= 60:
				limitedN++
			default:
				t.Errorf("call: %d, %v, Retry-After %q: %.200s", status, err, hdr.Get("Retry-After"), body)
			}
		})
	}
	wg.Wait()
	t.Logf("%d calls of a key limited to %d per minute on %d replicas: %d answered, %d refused 429",
		3*perMinute, perMinute, numReplicas, answered, limitedN)
	if answered != perMinute || limitedN != 2*perMinute {
		t.Errorf("%d answered and %d refused; want %d and %d", answered, limitedN, perMinute, 2*perMinute)
	}
	if n := up.Calls(); n != int64(answered) {
		t.Errorf("%d upstream calls for %d answers: a refused call reached the upstream", n, answered)
	}
}
