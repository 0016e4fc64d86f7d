package postgres

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llm4agents/llm4agents/internal/store"
)

// floorClients is the concurrency of BenchmarkPerCallFloor: the gateway's
// credit benchmark's (internal/gateway, creditClients).
const floorClients = 4

// floorCalls is how many calls each path makes per round.
const floorCalls = 400

// BenchmarkPerCallFloor sets what durability per_call costs a credit call on
// PostgreSQL against the least any two durable writes of one account can
// cost: floorClients callers of one owner, each call two writes that wait
// for their commit, the second after the first, as a per_call call makes
// them (its hold before the upstream, its capture after). Four paths, in
// the same rounds, taking turns:
//
//   - ledger: Hold through a key with both caps, then CaptureWithReceipt
//     with a receipt and its log leaf, on the owner's line: the writes of
//     one per_call call.
//   - no-receipt: the same with Capture, which keeps no receipt: what the
//     receipt and its second round trip cost.
//   - line-floor: two one-row UPDATEs of one row, sent on the owner's line
//     as well, so batched as the ledger's writes are: what the line costs
//     with statements that do next to nothing.
//   - floor: the same two UPDATEs, each its own transaction off any line,
//     as pgbench would send them.
//
// Reported per path: p50 and p99 of a call (both writes), and calls/s.
//
//	go test -run '^$' -bench PerCallFloor -benchtime=5x ./internal/store/postgres/
func BenchmarkPerCallFloor(b *testing.B) {
	_, dsn := freshSchema(b)
	db := open(b, dsn, nil, nil)
	ctx := b.Context()
	if _, err := db.Credit(ctx, "c0", testOwner, testAsset, store.MaxAmount); err != nil {
		b.Fatal(err)
	}
	if _, err := db.pool.Exec(ctx, `CREATE TABLE floor_row (id INT PRIMARY KEY, n BIGINT NOT NULL);
INSERT INTO floor_row VALUES (1, 0)`); err != nil {
		b.Fatal(err)
	}
	key := &store.KeyLimits{ID: "k1", TotalCap: store.NoCap, PeriodCap: store.MaxAmount, Period: 24 * time.Hour}
	var ids atomic.Int64
	// hold places a new call's hold, as a per_call call does first.
	hold := func(ctx context.Context) (string, error) {
		id := fmt.Sprintf("call-%d", ids.Add(1))
		_, err := db.Hold(ctx, store.HoldRequest{ID: id, Owner: testOwner, Asset: testAsset, Amount: 30_000, TTL: time.Minute, Key: key})
		return id, err
	}
	ledger := func(ctx context.Context) error {
		id, err := hold(ctx)
		if err != nil {
			return err
		}
		_, err = db.CaptureWithReceipt(ctx, id, 12_345, func(h store.Hold, e store.Entry) *store.StoredReceipt {
			return &store.StoredReceipt{RequestID: id, Owner: h.Owner, KeyID: key.ID, Seq: e.Seq,
				Envelope: []byte(`{"receipt":{},"signature":"0x"}`), Leaf: []byte(id)}
		})
		return err
	}
	noReceipt := func(ctx context.Context) error {
		id, err := hold(ctx)
		if err != nil {
			return err
		}
		_, _, err = db.Capture(ctx, id, 12_345)
		return err
	}
	const bump = `UPDATE floor_row SET n = n + 1 WHERE id = 1 RETURNING n`
	lineFloor := func(ctx context.Context) error {
		for range 2 {
			var n int64
			if err := db.write(ctx, ledgerLine(testOwner, testAsset), &lineWrite{sql: bump, dest: []any{&n}}); err != nil {
				return err
			}
		}
		return nil
	}
	floor := func(ctx context.Context) error {
		for range 2 {
			var n int64
			if err := db.pool.QueryRow(ctx, bump).Scan(&n); err != nil {
				return err
			}
		}
		return nil
	}
	paths := []struct {
		name string
		call func(context.Context) error
	}{{"ledger", ledger}, {"no-receipt", noReceipt}, {"line-floor", lineFloor}, {"floor", floor}}
	for _, p := range paths { // warm the pool and the statements, unmeasured
		floorRound(b, p.call, 2*floorClients)
	}
	lat := make([][]time.Duration, len(paths))
	wall := make([]time.Duration, len(paths))
	b.ResetTimer()
	for round := range b.N {
		for k := range paths {
			i := (k + round) % len(paths) // rotate who goes first
			l, w := floorRound(b, paths[i].call, floorCalls)
			lat[i], wall[i] = append(lat[i], l...), wall[i]+w
		}
	}
	b.StopTimer()
	for i, p := range paths {
		slices.Sort(lat[i])
		b.ReportMetric(float64(lat[i][len(lat[i])/2].Microseconds())/1000, p.name+"-p50-ms")
		b.ReportMetric(float64(lat[i][len(lat[i])*99/100].Microseconds())/1000, p.name+"-p99-ms")
		b.ReportMetric(float64(len(lat[i]))/wall[i].Seconds(), p.name+"-calls/s")
	}
	b.ReportMetric(0, "ns/op")
}

// floorRound makes calls calls of call from floorClients goroutines and
// returns each call's latency and the round's duration.
func floorRound(b *testing.B, call func(context.Context) error, calls int) ([]time.Duration, time.Duration) {
	b.Helper()
	var next atomic.Int64
	lat := make([]time.Duration, calls)
	errs := make([]error, floorClients)
	var wg sync.WaitGroup
	start := time.Now()
	for c := range floorClients {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < int64(calls); i = next.Add(1) - 1 {
				t0 := time.Now()
				if err := call(b.Context()); err != nil {
					errs[c] = err
					return
				}
				lat[i] = time.Since(t0)
			}
		})
	}
	wg.Wait()
	wall := time.Since(start)
	for _, err := range errs {
		if err != nil {
			b.Fatal(err)
		}
	}
	return lat, wall
}
