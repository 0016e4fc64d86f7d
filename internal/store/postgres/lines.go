package postgres

import (
	"cmp"
	"context"
	"errors"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/internal/store/lines"
)

// Lines: group commit on the client (package lines).
//
// A commit waits for its WAL flush, and a row lock is held until then; so
// writes that queue on one lock, or that each pay their own round trip and
// commit, go no faster than the flushes. So writes that are many and short
// go on lines: the concurrent writes of one line are sent as one batch, a
// pipeline of their statements in one implicit transaction, one round trip
// and one flush for the lot (send). Two kinds of line:
//   - the ledger's, one per owner and asset (ledger.go, "Group commit per
//     owner"), because an owner's writes serialise on its balance row;
//   - the claims', claimLines per DB, a claim going to the line its key
//     hashes to (claimRow), because a claim is a short insert whose cost is
//     mostly its round trip and its commit.
//
// A write once sent runs to its end, bounded by store.DefaultTimeout, even
// if its caller's context ends meanwhile, and the call returns its outcome:
// pgx abandons a statement whose context ends without telling the server,
// which then runs it on and may commit it after the call has returned an
// error; and a batch carries other callers' writes. A write still queued
// when its context ends is withdrawn and writes nothing. So a call that
// fails wrote nothing, unless the connection to the server failed under it:
// then the outcome is unknown, and the caller must judge the record by a
// read or by repeating the write, which every statement sent on a line
// allows (see send).

// maxBatch bounds the writes of one batch: a batch holds the locks of all
// of its statements until they have all run and committed.
const maxBatch = 64

// claimLines is how many lines of claims each DB has. More lines keep more
// of the pool's connections busy; fewer make bigger batches. Two measured
// best for 32 concurrent callers on two cores (docs/BENCHMARKS.md).
const claimLines = 2

// newLines returns the lines of db's writes.
func newLines(db *DB) *lines.Set[*lineWrite] {
	return &lines.Set[*lineWrite]{Send: db.send, Max: maxBatch}
}

// ledgerLine names the line of owner's writes in asset.
func ledgerLine(owner, asset string) string {
	return "ledger\x00" + owner + "\x00" + asset
}

// claimLine names the line of the claims of key: one key always goes to
// the same line, so a batch never waits on a lock another batch of this DB
// holds for the same record.
func claimLine(key string) string {
	return lines.ByKey("claim\x00", key, claimLines)
}

// lineWrite is one write statement, returning one row scanned into dest.
type lineWrite struct {
	sql  string
	args []any
	dest []any
	// order sorts the statements of a batch, so that two batches (of
	// different DBs) locking several records lock them in one order and
	// never deadlock. The ledger leaves it empty: every write of a ledger
	// line locks its owner's balance first.
	order string
	// then, when set, is called once the statement's row is scanned, with
	// no error, inside the batch's transaction: it returns a statement to
	// run after the batch's statements in that transaction (nil for none),
	// such as the receipt of a capture, which depends on the capture's
	// entry. It may run again for another attempt of the write, and what it
	// computed counts only when followed is set.
	then func() *lineWrite

	err error // the outcome, set by send
	// followed is set by send when then ran and the transaction it ran in
	// committed, with the statement it returned. A write sent again on its
	// own, after its batch failed, runs without its then.
	followed bool
}

// write runs w on the line called name (see package lines): a write
// withdrawn because ctx ended was never sent and wrote nothing; once sent
// it runs to its end, bounded by store.DefaultTimeout.
func (db *DB) write(ctx context.Context, name string, w *lineWrite) error {
	if err := db.lines.Write(ctx, name, w); err != nil {
		return err
	}
	return w.err
}

// send runs batch: one write as one statement; several as a pipeline of
// statements in one implicit transaction (pgx sends a batch with one Sync),
// so they cost one round trip and one commit, and are applied together or
// not at all. A statement that returns no row is that write's outcome
// (pgx.ErrNoRows), not the batch's. If the batch fails where it is known
// to have written nothing (the server refused a statement, which rolls the
// transaction back, or pgx never sent it), each write runs again on its
// own, so one bad write does not fail the others. Any other failure (a
// connection lost, a deadline passed mid-batch) leaves the outcome unknown
// and is every write's error, as it is a lone statement's: running a claim
// again then would find its own live lease and report it lost.
//
// A batch with a write that has a then runs in an explicit transaction
// instead (sendTx): one more round trip, and no more commits.
func (db *DB) send(ctx context.Context, batch []*lineWrite) {
	ctx, cancel := context.WithTimeout(ctx, store.DefaultTimeout)
	defer cancel()
	ordered := batch
	if len(batch) > 1 {
		ordered = slices.Clone(batch)
		slices.SortStableFunc(ordered, func(a, b *lineWrite) int { return cmp.Compare(a.order, b.order) })
	}
	var err error
	switch {
	case slices.ContainsFunc(batch, func(w *lineWrite) bool { return w.then != nil }):
		err = db.sendTx(ctx, ordered)
	case len(batch) > 1:
		err = db.pipeline(ctx, db.pool, ordered, nil, nil)
	default:
		w := batch[0]
		w.err = db.pool.QueryRow(ctx, w.sql, w.args...).Scan(w.dest...)
		return
	}
	switch {
	case err == nil:
		return
	case !rolledBack(err):
		for _, w := range batch {
			w.err = err
		}
		return
	}
	db.log.DebugContext(ctx, "batch failed, running its writes one by one", "writes", len(batch), "error", scrub(err.Error(), db.secret))
	for _, w := range batch {
		w.err = db.pool.QueryRow(ctx, w.sql, w.args...).Scan(w.dest...)
	}
}

// pipeline sends, with one Sync, the statement before (if not empty), the
// writes' statements, and the statement after (if not empty), and scans
// the writes' rows. It returns the first error that is not a write's own
// pgx.ErrNoRows: the writes after it did not run.
func (db *DB) pipeline(ctx context.Context, q batchSender, ws []*lineWrite, before, after []string) error {
	b := &pgx.Batch{}
	for _, sql := range before {
		b.Queue(sql)
	}
	for _, w := range ws {
		b.Queue(w.sql, w.args...)
	}
	for _, sql := range after {
		b.Queue(sql)
	}
	br := q.SendBatch(ctx, b)
	err := func() error {
		for range before {
			if _, err := br.Exec(); err != nil {
				return err
			}
		}
		for _, w := range ws {
			w.err = br.QueryRow().Scan(w.dest...)
			if !errors.Is(w.err, pgx.ErrNoRows) {
				err := w.err
				w.err = nil
				if err != nil {
					return err
				}
			}
		}
		for range after {
			if _, err := br.Exec(); err != nil {
				return err
			}
		}
		return nil
	}()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return err
}

// batchSender sends a pgx batch: the pool, or one of its connections.
type batchSender interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// sendTx runs batch (ordered) in one explicit transaction on one
// connection: BEGIN and the writes' statements in one pipeline; then, in a
// second, the statements the writes' thens return, and COMMIT. A failure
// leaves the transaction rolled back, and the connection idle or closed.
func (db *DB) sendTx(ctx context.Context, batch []*lineWrite) error {
	conn, err := db.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer func() {
		if conn.Conn().PgConn().TxStatus() != 'I' {
			// A pipeline failed inside the transaction: end it here,
			// else the pool closes the connection.
			_, _ = conn.Exec(ctx, "ROLLBACK")
		}
		conn.Release()
	}()
	if err := db.pipeline(ctx, conn, batch, []string{"BEGIN"}, nil); err != nil {
		return err
	}
	ran := map[*lineWrite]*lineWrite{} // a write whose then ran: its follow-up, or nil
	var next []*lineWrite
	for _, w := range batch {
		if w.then == nil || w.err != nil {
			continue
		}
		f := w.then()
		ran[w] = f
		if f != nil {
			next = append(next, f)
		}
	}
	if err := db.pipeline(ctx, conn, next, nil, []string{"COMMIT"}); err != nil {
		return err
	}
	for w, f := range ran {
		// A follow-up answers one row: without one it wrote nothing, and
		// its write is left as if sent on its own.
		w.followed = f == nil || f.err == nil
	}
	return nil
}

// claimRow is the row of a claim statement for key in table, sent on key's
// claim line when the row is scanned.
func (db *DB) claimRow(ctx context.Context, table, key, sql string, args ...any) pgx.Row {
	return rowFunc(func(dest ...any) error {
		return db.write(ctx, claimLine(key), &lineWrite{sql: sql, args: args, dest: dest, order: table + "\x00" + key})
	})
}

// rowFunc is a pgx.Row whose Scan is the function.
type rowFunc func(dest ...any) error

func (f rowFunc) Scan(dest ...any) error { return f(dest...) }

// rolledBack is true when err, from a batch, shows the batch wrote nothing:
// the server refused one of its statements with an ERROR (the implicit
// transaction is then rolled back), or pgx did not send it. A FATAL may
// come after a commit (a pooler losing its server connection), so it
// leaves the outcome unknown.
func rolledBack(err error) bool {
	if pe, ok := errors.AsType[*pgconn.PgError](err); ok {
		sev := pe.SeverityUnlocalized
		if sev == "" {
			sev = pe.Severity
		}
		return sev == "ERROR"
	}
	return pgconn.SafeToRetry(err)
}
