package sqlite

// Group commit.
//
// Why: with synchronous=FULL every COMMIT waits for an fsync of the WAL, and a
// settlement makes four writes (claim, broadcast, settled, success mark). When
// each write was a transaction of its own, concurrent settlements queued behind
// one another's fsyncs on the single writer connection: at 32 concurrent
// settlements a claim waited about 20 ms before it started. Durability of the
// claim and of the success mark is the product, so synchronous stays FULL;
// instead, concurrent writes share one transaction and so one fsync.
//
// How: every write of a DB is queued for one writer goroutine, owned by the DB
// (started by Open, waited for by Close). Whenever it is free, the writer
// begins one IMMEDIATE transaction, takes what is queued at that moment (up to
// maxBatch ops; it never waits for more to arrive), runs those ops one after
// another, and COMMITs once. It answers the ops only after the COMMIT returned:
// no caller ever hears of a write that is not durable, and if the COMMIT (or
// anything else that spoils the transaction) fails, every op of the batch gets
// that error.
//
// Why savepoints: ops of one batch must not share their failures. Each op runs
// between SAVEPOINT and RELEASE; an op that returns an error, including a
// logical outcome such as store.ErrFenced or store.ErrNotFound, is first rolled
// back to its savepoint, so its partial writes (a fence drawn from the counter,
// say) vanish while the ops before and after it keep theirs.
//
// Atomicity is what it was with a transaction per write: the ops of a batch run
// one at a time, on the one writer connection, inside one transaction that holds
// the database's write lock from BEGIN to COMMIT. A batch is thus the same as
// running its ops serially in queue order, and a read-then-write op (the
// takeover check of ClaimSettlement, the conditional mark of
// MarkSuccessReported) sees no other writer between its read and its write.

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/llm4agents/llm4agents/internal/store"
)

// maxBatch bounds the ops of one transaction, so a batch's commit, which every
// op in it waits for, never waits for an unbounded amount of work.
const maxBatch = 64

// writeFunc is the body of one write operation. It runs on the writer
// goroutine inside the batch's transaction and must use the ctx it is given
// for every statement: that is the batch's context, never the caller's, because
// an interrupted statement can roll back the whole transaction, and one caller
// giving up must not undo the writes of the others.
type writeFunc func(ctx context.Context, tx *sql.Tx) error

// States of a writeOp. An op leaves opQueued exactly once, by a
// compare-and-swap: to opAbandoned when its caller gave up first (the op is
// never run), or to opTaken when the writer took it first (the writer answers
// it, after the batch's COMMIT).
const (
	opQueued int32 = iota
	opAbandoned
	opTaken
)

// writeOp is one queued write.
type writeOp struct {
	fn writeFunc
	// committed, if not nil, is called by the writer once the batch of an
	// op that succeeded has committed, before the op is answered (and also
	// when its caller gave up waiting). It must not block.
	committed func()
	state     atomic.Int32
	done      chan error // buffered, so the writer never waits for a caller that left
}

// write runs fn in the writer's next batch and returns fn's outcome once that
// batch has committed; the caller's ctx only bounds the wait in the queue.
//
// If ctx ends while fn is still queued, fn never runs and write returns ctx's
// error. If fn has already run, its writes are about to be committed or rolled
// back with the rest of the batch, and answering now would be a guess: so
// write waits for the outcome, for up to db.commitWait after ctx ended. Only if
// even that passes does it give up, with an error saying the write may or may
// not be durable. It never returns nil unless the batch's COMMIT succeeded.
func (db *DB) write(ctx context.Context, fn writeFunc) error {
	return db.writeThen(ctx, fn, nil)
}

// writeThen is write, and has the writer call committed (if not nil) once
// fn's writes are committed, whether or not the caller still waits.
func (db *DB) writeThen(ctx context.Context, fn writeFunc, committed func()) error {
	op := &writeOp{fn: fn, committed: committed, done: make(chan error, 1)}
	db.mu.Lock()
	if db.closing {
		db.mu.Unlock()
		return store.ErrClosed
	}
	db.queue = append(db.queue, op)
	db.mu.Unlock()
	db.wake.Signal()

	select {
	case err := <-op.done:
		return err
	case <-ctx.Done():
	}
	if op.state.CompareAndSwap(opQueued, opAbandoned) {
		return fmt.Errorf("waiting for the writer: %w", ctx.Err())
	}
	t := time.NewTimer(db.commitWait)
	defer t.Stop()
	select {
	case err := <-op.done:
		return err
	case <-t.C:
		db.log.WarnContext(ctx, "gave up waiting for the commit of a write that ran; it may or may not be durable",
			"waited", db.commitWait)
		return fmt.Errorf("no commit outcome %v after the deadline, the write may or may not be durable: %w", db.commitWait, ctx.Err())
	}
}

// runWriter is the writer goroutine. It runs batches until Close was called
// and the queue is empty, so every op queued before Close is answered.
func (db *DB) runWriter() {
	defer close(db.writerDone)
	defer db.closeStatements()
	for {
		db.mu.Lock()
		for len(db.queue) == 0 && !db.closing {
			db.wake.Wait()
		}
		stop := len(db.queue) == 0
		db.mu.Unlock()
		if stop {
			return
		}
		db.runBatch()
	}
}

// take removes up to maxBatch ops from the head of the queue, dropping
// abandoned ones, and returns the ops the writer now owns and must answer.
func (db *DB) take() []*writeOp {
	db.mu.Lock()
	defer db.mu.Unlock()
	var ops []*writeOp
	n := 0
	for ; n < len(db.queue) && len(ops) < maxBatch; n++ {
		if op := db.queue[n]; op.state.CompareAndSwap(opQueued, opTaken) {
			ops = append(ops, op)
		}
	}
	db.queue = slices.Delete(db.queue, 0, n)
	return ops
}

// runBatch runs one batch: BEGIN IMMEDIATE, every op taken in a savepoint of
// its own, one COMMIT, then the answers.
func (db *DB) runBatch() {
	db.prepareStatements()
	// The transaction lives on context.Background: database/sql rolls a
	// transaction back when its context ends, the driver runs COMMIT under
	// it, and no caller's deadline may cut a batch short. BEGIN and COMMIT
	// are bounded by busy_timeout, the ops' statements by ctx below. A failed
	// COMMIT leaves no transaction open: the driver rolls it back.
	tx, err := db.rw.BeginTx(context.Background(), nil)
	// Take the ops only now: those whose callers gave up while BEGIN waited
	// for another connection's lock are dropped, never run.
	ops := db.take()
	if err != nil {
		db.fail(context.Background(), ops, fmt.Errorf("begin: %w", mapErr(context.Background(), err)))
		return
	}
	if len(ops) == 0 {
		_ = tx.Rollback()
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), store.DefaultTimeout)
	defer cancel()

	results := make([]error, len(ops))
	for i, op := range ops {
		var fatal error
		results[i], fatal = runOp(ctx, tx, op.fn)
		if fatal != nil {
			_ = tx.Rollback()
			db.fail(ctx, ops, fatal)
			return
		}
	}
	if db.beforeCommit != nil {
		db.beforeCommit(len(ops))
	}
	if err := tx.Commit(); err != nil {
		db.fail(ctx, ops, fmt.Errorf("commit: %w", mapErr(context.Background(), err)))
		return
	}
	for i, op := range ops {
		if results[i] == nil && op.committed != nil {
			op.committed()
		}
		op.done <- results[i]
	}
}

// runOp runs fn between SAVEPOINT and RELEASE, rolling back to the savepoint
// if fn fails. It returns fn's error, mapped, as the op's outcome, and a fatal
// error if the transaction itself can no longer be trusted: then no op of the
// batch may be committed.
//
// The savepoint statements run on context.Background: they take no lock and
// do no I/O worth bounding, and an interrupt must not hit them halfway.
func runOp(ctx context.Context, tx *sql.Tx, fn writeFunc) (opErr, fatal error) {
	bg := context.Background()
	if _, err := tx.ExecContext(bg, "SAVEPOINT op"); err != nil {
		return nil, fmt.Errorf("savepoint: %w", mapErr(bg, err))
	}
	if opErr = fn(ctx, tx); opErr != nil {
		// Some errors (I/O, a full disk, an interrupt) make SQLite roll back
		// the whole transaction; then the savepoint is gone, this fails, and
		// the batch fails with it, before any later op could run outside a
		// transaction.
		if _, err := tx.ExecContext(bg, "ROLLBACK TO op"); err != nil {
			// opErr is only text here: its sentinel is no other op's outcome.
			return nil, fmt.Errorf("rollback to savepoint after %q: %w", opErr.Error(), mapErr(bg, err))
		}
	}
	if _, err := tx.ExecContext(bg, "RELEASE op"); err != nil {
		return nil, fmt.Errorf("release savepoint: %w", mapErr(bg, err))
	}
	return mapErr(ctx, opErr), nil
}

// fail answers every op of a batch that was not committed with err.
func (db *DB) fail(ctx context.Context, ops []*writeOp, err error) {
	if len(ops) == 0 {
		return
	}
	db.log.ErrorContext(ctx, "write batch not committed", "ops", len(ops), "err", err)
	err = fmt.Errorf("batch of %d writes not committed: %w", len(ops), err)
	for _, op := range ops {
		op.done <- err
	}
}

// Prepared statements.
//
// Why: modernc.org/sqlite compiles a statement's text every time it is run
// through database/sql, and for short statements compiling costs about as
// much as running them: a third of the writer's CPU in the hold+capture
// benchmark; prepared, the receipt log benchmark's puts with a leaf ran 20
// to 40% more a second. So the writer prepares the statements of the ledger's
// writes and of a receipt put (writerStatements) once on its connection,
// before its first batch, while the connection is idle (preparing inside a
// batch would wait for the one connection the batch holds), and closes them
// when it returns. An op runs them through the batch's transaction with a
// wtx: sql.Tx.StmtContext reuses a statement already prepared on the
// transaction's connection, and prepares it again only if database/sql had
// to replace the connection.
//
// If preparing fails, ops run their statements from the text, as before:
// slower, the same otherwise; the writer tries again a minute later.

// prepareRetry is how long the writer waits before preparing again after a
// failure.
const prepareRetry = time.Minute

// prepared holds, per open DB, its writer's prepared statements by their
// text. Only the DB's writer goroutine writes its entry or reads its map
// (ops run on that goroutine); the mutex guards the map of DBs. It is
// package state, keyed by the DB, rather than a field of DB only because DB
// is declared in sqlite.go.
var prepared = struct {
	sync.Mutex
	m map[*DB]*stmtSet
}{m: map[*DB]*stmtSet{}}

// stmtSet is one DB's prepared statements: nil stmts until preparing
// succeeded, and then never changed.
type stmtSet struct {
	stmts   map[string]*sql.Stmt
	retryAt time.Time // after a failure: when to try again
}

// unpreparedRuns counts statements a wtx ran from their text although the
// writer had prepared its statements: a statement missing from
// writerStatements. Tests check it stays 0.
var unpreparedRuns atomic.Int64

// statements returns the writer's prepared statements: nil while they are not
// prepared. Ops call it on the writer goroutine, the only one that uses the
// statements.
func (db *DB) statements() map[string]*sql.Stmt {
	prepared.Lock()
	defer prepared.Unlock()
	if set := prepared.m[db]; set != nil {
		return set.stmts
	}
	return nil
}

// writerStatements returns the statements the writer prepares: those of the
// ledger's writes, and those of keeping a receipt and queuing its leaf,
// which every credit-paid call makes.
func writerStatements() []string {
	return append(append(ledgerStatements(), receiptStatements()...), leaseStatements()...)
}

// prepareStatements prepares writerStatements on the writer connection, once,
// unless it failed less than prepareRetry ago. Only the writer goroutine
// calls it, between batches.
func (db *DB) prepareStatements() {
	prepared.Lock()
	set := prepared.m[db]
	prepared.Unlock()
	if set != nil && (set.stmts != nil || time.Now().Before(set.retryAt)) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), store.DefaultTimeout)
	defer cancel()
	queries := writerStatements()
	stmts := make(map[string]*sql.Stmt, len(queries))
	var err error
	for _, q := range queries {
		var s *sql.Stmt
		if s, err = db.rw.PrepareContext(ctx, q); err != nil { //nolint:sqlclosecheck // kept; closeStatements closes it
			break
		}
		stmts[q] = s
	}
	set = &stmtSet{stmts: stmts}
	if err != nil {
		closeAll(stmts)
		set = &stmtSet{retryAt: time.Now().Add(prepareRetry)}
		db.log.WarnContext(ctx, "could not prepare the writer's statements; running them unprepared for now",
			"retry_in", prepareRetry, "err", mapErr(ctx, err))
	}
	prepared.Lock()
	prepared.m[db] = set
	prepared.Unlock()
}

// closeStatements closes the writer's prepared statements and forgets them.
func (db *DB) closeStatements() {
	prepared.Lock()
	set := prepared.m[db]
	delete(prepared.m, db)
	prepared.Unlock()
	if set != nil {
		closeAll(set.stmts)
	}
}

func closeAll(stmts map[string]*sql.Stmt) {
	for _, s := range stmts {
		_ = s.Close() // closing a statement of a connection that is still open only frees it
	}
}

// wtx is a write op's transaction that runs the statements the writer
// prepared by their prepared handle, and any other from its text.
type wtx struct {
	*sql.Tx
	stmts map[string]*sql.Stmt
}

// wtx wraps tx, the transaction of a batch, for an op: call it on the writer
// goroutine, inside the op.
func (db *DB) wtx(tx *sql.Tx) wtx { return wtx{Tx: tx, stmts: db.statements()} }

// stmt returns the transaction's handle on query's prepared statement, or nil.
// The transaction closes the handle when it ends; closing it earlier would
// wait for the rows a QueryRowContext left for its caller to scan.
func (t wtx) stmt(ctx context.Context, query string) *sql.Stmt {
	if t.stmts == nil {
		return nil
	}
	s := t.stmts[query]
	if s == nil {
		unpreparedRuns.Add(1)
		return nil
	}
	return t.StmtContext(ctx, s)
}

// ExecContext is sql.Tx.ExecContext, prepared when it can be.
func (t wtx) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if s := t.stmt(ctx, query); s != nil { //nolint:sqlclosecheck // the transaction closes it (see stmt)
		return s.ExecContext(ctx, args...)
	}
	return t.Tx.ExecContext(ctx, query, args...)
}

// QueryRowContext is sql.Tx.QueryRowContext, prepared when it can be.
func (t wtx) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	if s := t.stmt(ctx, query); s != nil { //nolint:sqlclosecheck // the transaction closes it (see stmt)
		return s.QueryRowContext(ctx, args...)
	}
	return t.Tx.QueryRowContext(ctx, query, args...)
}

// QueryContext is sql.Tx.QueryContext, prepared when it can be.
func (t wtx) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if s := t.stmt(ctx, query); s != nil { //nolint:sqlclosecheck // the transaction closes it (see stmt)
		return s.QueryContext(ctx, args...)
	}
	return t.Tx.QueryContext(ctx, query, args...)
}
