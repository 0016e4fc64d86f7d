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

	err error // the outcome, set by send
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
func (db *DB) send(ctx context.Context, batch []*lineWrite) {
	ctx, cancel := context.WithTimeout(ctx, store.DefaultTimeout)
	defer cancel()
	if len(batch) > 1 {
		ordered := slices.Clone(batch)
		slices.SortStableFunc(ordered, func(a, b *lineWrite) int { return cmp.Compare(a.order, b.order) })
		b := &pgx.Batch{}
		for _, w := range ordered {
			b.Queue(w.sql, w.args...)
		}
		br := db.pool.SendBatch(ctx, b)
		var err error
		for _, w := range ordered {
			if err != nil {
				break
			}
			w.err = br.QueryRow().Scan(w.dest...)
			if !errors.Is(w.err, pgx.ErrNoRows) {
				err, w.err = w.err, nil
			}
		}
		if cerr := br.Close(); err == nil {
			err = cerr
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
	}
	for _, w := range batch {
		w.err = db.pool.QueryRow(ctx, w.sql, w.args...).Scan(w.dest...)
	}
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
