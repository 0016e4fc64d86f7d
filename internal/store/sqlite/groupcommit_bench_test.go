package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/internal/store/lines"
)

// BenchmarkGroupCommit sets the two group-commit mechanisms of the store
// side by side on one SQLite file: "writer" is this package's writer
// goroutine (writer.go), which every write of a DB goes through; "lines" is
// package lines, which the PostgreSQL and Redis backends use, with a Send
// that runs its batch as the writer does (BEGIN IMMEDIATE, a savepoint per
// op, one COMMIT) on the leading caller's goroutine. The ops are the same:
// "fence" draws a fencing token (a one-row UPDATE), "claim" also inserts a
// settlement record. 32 goroutines write at once (the facilitator's measured
// load); docs/BENCHMARKS.md has the numbers and why both mechanisms stay.
func BenchmarkGroupCommit(b *testing.B) {
	fence := func(ctx context.Context, tx *sql.Tx) error {
		_, err := nextFence(ctx, tx)
		return err
	}
	var keys atomic.Int64
	claim := func(ctx context.Context, tx *sql.Tx) error {
		f, err := nextFence(ctx, tx)
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO settlements (
    settlement_key, network, asset, payer, pay_to, amount, state, owner,
    fence, lease_until_ms, created_at_ms, updated_at_ms)
VALUES (?, '', '', '', '', '1', 'claimed', 'o', ?, 0, 0, 0)`, fmt.Sprintf("k%d", keys.Add(1)), f)
		return err
	}
	for _, op := range []struct {
		name string
		fn   writeFunc
	}{{"fence", fence}, {"claim", claim}} {
		b.Run("writer/"+op.name, func(b *testing.B) {
			db, _ := openTest(b)
			var commits atomic.Int64
			db.beforeCommit = func(int) { commits.Add(1) }
			writeConcurrently(b, &commits, func(ctx context.Context) error { return db.write(ctx, op.fn) })
		})
		b.Run("lines/"+op.name, func(b *testing.B) {
			db, _ := openTest(b)
			var commits atomic.Int64
			set := &lines.Set[*lineOp]{Max: maxBatch, Send: func(ctx context.Context, batch []*lineOp) {
				commits.Add(1)
				db.sendLine(ctx, batch)
			}}
			writeConcurrently(b, &commits, func(ctx context.Context) error {
				w := &lineOp{fn: op.fn}
				if err := set.Write(ctx, "writes", w); err != nil {
					return err
				}
				return w.err
			})
		})
	}
}

// lineOp is one write sent on a line, and its outcome.
type lineOp struct {
	fn  writeFunc
	err error
}

// sendLine runs batch as runBatch runs one: one IMMEDIATE transaction on the
// writer connection, each op in a savepoint of its own, one COMMIT.
func (db *DB) sendLine(ctx context.Context, batch []*lineOp) {
	fail := func(err error) {
		for _, w := range batch {
			w.err = err
		}
	}
	tx, err := db.rw.BeginTx(context.Background(), nil)
	if err != nil {
		fail(mapErr(ctx, err))
		return
	}
	ctx, cancel := context.WithTimeout(ctx, store.DefaultTimeout)
	defer cancel()
	results := make([]error, len(batch))
	for i, w := range batch {
		var fatal error
		if results[i], fatal = runOp(ctx, tx, w.fn); fatal != nil {
			_ = tx.Rollback()
			fail(fatal)
			return
		}
	}
	if err := tx.Commit(); err != nil {
		fail(mapErr(ctx, err))
		return
	}
	for i, w := range batch {
		w.err = results[i]
	}
}

// writeConcurrently calls write b.N times from 32 goroutines and reports
// the first error; ns/op is wall time divided by b.N, and writes/commit is
// b.N divided by the commits counted.
func writeConcurrently(b *testing.B, commits *atomic.Int64, write func(ctx context.Context) error) {
	b.Helper()
	const writers = 32
	var next atomic.Int64
	errs := make(chan error, writers)
	var wg sync.WaitGroup
	b.ResetTimer()
	for range writers {
		wg.Go(func() {
			for next.Add(1) <= int64(b.N) {
				if err := write(b.Context()); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(b.N)/float64(max(commits.Load(), 1)), "writes/commit")
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
}
