package redis

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/internal/testdb"
)

// pipelineHook counts the pipelines of scripts a client sends, by length
// (a new connection's handshake is a pipeline too).
type pipelineHook struct {
	mu   sync.Mutex
	lens map[int]int
}

func (h *pipelineHook) DialHook(next goredis.DialHook) goredis.DialHook          { return next }
func (h *pipelineHook) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook { return next }
func (h *pipelineHook) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		scripts := 0
		for _, c := range cmds {
			if c.Name() == "evalsha" {
				scripts++
			}
		}
		h.mu.Lock()
		h.lens[scripts]++
		h.mu.Unlock()
		return next(ctx, cmds)
	}
}

func openInternal(t *testing.T) *DB {
	t.Helper()
	u, _ := testdb.RedisPrefix(t, "lines")
	db, err := Open(t.Context(), u, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func claimOf(key string) store.PaymentClaim {
	return store.PaymentClaim{Key: key, Network: "eip155:84532", Payer: "0x857b06519e91e3a54538791bdbb0e22373e36b66",
		Amount: "10000", Owner: "lines", ExpiresAt: time.Now().Add(time.Hour)}
}

// TestClaimsPipelined checks that concurrent claims of distinct keys on one
// DB go to the server in pipelines of several, that each is won once, and
// that no line is left behind.
func TestClaimsPipelined(t *testing.T) {
	db := openInternal(t)
	hook := &pipelineHook{lens: map[int]int{}}
	db.client.AddHook(hook)
	const n = 64
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			_, won, err := db.ClaimPayment(t.Context(), claimOf(fmt.Sprintf("k%d", i)), time.Minute)
			if err != nil || !won {
				t.Errorf("claim k%d: won %v, %v", i, won, err)
			}
		})
	}
	wg.Wait()
	hook.mu.Lock()
	defer hook.mu.Unlock()
	piped := 0
	for l, count := range hook.lens {
		if l > 1 {
			piped += l * count
		}
	}
	t.Logf("pipelines by length: %v", hook.lens)
	if piped == 0 {
		t.Errorf("no claim went in a pipeline of several: %v", hook.lens)
	}
	if l := db.lines.Len(); l != 0 {
		t.Errorf("%d lines left behind", l)
	}
}

// TestClaimsPipelineNoScript checks that a pipeline of claims sent after
// the server lost its scripts (a restart or SCRIPT FLUSH since Open) runs
// every claim once, by sending each script's body.
func TestClaimsPipelineNoScript(t *testing.T) {
	db := openInternal(t)
	if err := db.client.ScriptFlush(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	var batch []*scriptCall
	for i := range 3 {
		c := claimOf(fmt.Sprintf("k%d", i))
		batch = append(batch, &scriptCall{script: claimPaymentScript,
			keys: []string{db.keys.payment(c.Key), db.keys.paymentFence()},
			args: []any{"", "60000", strconv.FormatInt(c.ExpiresAt.UnixMilli(), 10), strconv.FormatInt(expiryMargin.Milliseconds(), 10),
				c.Network, c.Payer, c.Amount, c.Owner}})
	}
	db.send(t.Context(), batch)
	for i, c := range batch {
		status, _, err := db.reply(t.Context(), c.reply, c.err)
		if err != nil || status != "won" {
			t.Errorf("claim %d after SCRIPT FLUSH: %q, %v; want won", i, status, err)
		}
	}
}
