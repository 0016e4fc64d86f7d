package e2e

import (
	"context"
	"crypto/rand"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"

	"github.com/llm4agents/llm4agents/internal/ledger"
	"github.com/llm4agents/llm4agents/internal/proctest"
	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/internal/upstream/upstreamtest"
)

// TestReceiptLogReplicaKilled: three replicas on one PostgreSQL database
// keep one receipt log. Credit calls go to all three; the replica holding the
// log lease is killed with SIGKILL in the middle; the calls go on to the
// other two. Within a few merge delays every kept receipt is in the log,
// each exactly once, under a lease another replica took over.
func TestReceiptLogReplicaKilled(t *testing.T) {
	skipShort(t)
	bin := proctest.BuildBinary(t)
	c := startChain(t)
	up := upstreamtest.NewServer(t, upstreamtest.Config{})
	dsn := freshPostgres(t)
	st := openPostgres(t, dsn)
	secret, _ := fundedKey(t, st, ledger.AssetID(network, c.token))

	skey, _, err := note.GenerateKey(rand.Reader, "e2e.test/receipts")
	if err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(t.TempDir(), "log.key")
	if err := os.WriteFile(keyFile, []byte(skey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	const mergeDelay = time.Second
	cfg := replicaConfig(c, dsn, up.URL()) + creditsConfig + fmt.Sprintf("log:\n  enabled: true\n  key_file: %s\n  max_merge_delay: %s\n", keyFile, mergeDelay)
	replicas := startCreditReplicas(t, bin, cfg, numReplicas)

	hc := newHTTPClient(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	var mu sync.Mutex
	answered := 0
	calls := func(targets []*proctest.Process, n int) {
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				status, body, err := creditCall(ctx, hc, targets[i%len(targets)].URL, secret)
				mu.Lock()
				defer mu.Unlock()
				if err == nil && status == http.StatusOK {
					answered++
				} else if status != http.StatusPaymentRequired {
					t.Errorf("credit call: %d, %v: %.200s", status, err, body)
				}
			})
		}
		wg.Wait()
	}
	calls(replicas, 30)
	// Leased credit calls write their charges and receipts within the
	// flush interval of their answer (docs/DESIGN.md D28): a kill -9 right
	// after a call may lose its charge and its receipt (a free call, the
	// operator's loss). This test is about the log's holder, not that
	// window: let the writes land first.
	time.Sleep(time.Second)

	// The lease holder, by the holder name serve gives it: host/pid.
	var holder *proctest.Process
	deadline := time.Now().Add(10 * mergeDelay)
	for holder == nil && time.Now().Before(deadline) {
		s, err := st.LogState(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range replicas {
			if strings.HasSuffix(s.Holder, fmt.Sprintf("/%d", p.Pid)) && s.LeaseUntil.After(time.Now()) {
				holder = p
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	if holder == nil {
		t.Fatal("no replica holds the log lease")
	}
	if err := holder.Kill(); err != nil {
		t.Fatal(err)
	}
	var alive []*proctest.Process
	for _, p := range replicas {
		if p != holder {
			alive = append(alive, p)
		}
	}
	calls(alive, 30)

	want := int64(answered)
	deadline = time.Now().Add(10 * mergeDelay)
	var s store.LogState
	for time.Now().Before(deadline) {
		if s, err = st.LogState(ctx); err != nil {
			t.Fatal(err)
		}
		if s.Size >= want {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if s.Size != want || strings.HasSuffix(s.Holder, fmt.Sprintf("/%d", holder.Pid)) {
		t.Fatalf("the log holds %d leaves under %q, want all %d answered calls' receipts under a live replica", s.Size, s.Holder, want)
	}
	pending, err := st.PendingLog(ctx, store.MaxLogBatch)
	if err != nil || len(pending) != 0 {
		t.Errorf("%d leaves still queued (%v)", len(pending), err)
	}
	leaves, err := st.LogLeaves(ctx, 0, s.Size)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for i, l := range leaves {
		if seen[string(l)] {
			t.Errorf("leaf %d is in the log twice", i)
		}
		seen[string(l)] = true
	}
}
