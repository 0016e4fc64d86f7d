package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/internal/store/migrations"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

const (
	// busyTimeoutMs is how long a connection waits for another connection's
	// write lock before the statement fails with SQLITE_BUSY.
	busyTimeoutMs = 5000
	// maxReaders bounds the read pool; WAL readers never block each other.
	maxReaders = 4
	// openTimeout bounds Open, migrations included, when ctx has no earlier
	// deadline.
	openTimeout = 30 * time.Second
)

// Connection parameters (modernc.org/sqlite DSN keys, validated by the driver
// before it applies any). The writer connection takes the write lock at BEGIN
// (_txlock=immediate), so a read-modify-write transaction never has to upgrade
// a read snapshot another connection has meanwhile made stale.
//
// The writer keeps its temporary files in memory (temp_store=MEMORY): every
// op of a batch runs in a savepoint, and SQLite saves the first change of
// each page inside a savepoint to a statement journal, which otherwise is a
// temporary file: two more write calls per page changed, more than the WAL
// itself took in the per-call credit benchmark (strace: 229,000 pwrites
// before, 95,000 after). The statement journal only undoes a savepoint
// inside an open transaction, so a crash loses nothing it kept; its memory
// is at most the pages one batch changes, freed at the batch's end.
var (
	writerParams = fmt.Sprintf("_txlock=immediate&_busy_timeout=%d&_journal_mode=WAL&_synchronous=FULL&_foreign_keys=1&_pragma=temp_store(MEMORY)", busyTimeoutMs)
	readerParams = fmt.Sprintf("_busy_timeout=%d&_foreign_keys=1&_query_only=1", busyTimeoutMs)
)

// DB is a SQLite store. Its methods are safe for concurrent use, and several
// DB values may be open on one file at once, in one process or in several.
//
// Writes go through a queue to one writer goroutine, which commits them in
// batches (group commit, see writer.go); reads go straight to the read pool.
type DB struct {
	// Now is the clock leases are judged by and records are stamped with,
	// to the millisecond. Open sets it to time.Now (nil means the same);
	// tests replace it before the first call and must not change the field
	// afterwards (the time it returns may change).
	Now func() time.Time

	gate store.Gate
	rw   *sql.DB // exactly one connection: every write, in IMMEDIATE transactions
	ro   *sql.DB // read-only connections
	log  *slog.Logger

	// roStmts are the hot reads prepared on the read pool (readStmt), so a
	// credit call's key lookup does not parse its SQL every time.
	roMu    sync.Mutex
	roStmts map[string]*sql.Stmt

	// The write queue. mu guards queue and closing; wake (on mu) tells the
	// writer goroutine that an op was queued or Close was called.
	mu      sync.Mutex
	wake    *sync.Cond
	queue   []*writeOp
	closing bool
	// writerDone is closed when the writer goroutine has returned.
	writerDone chan struct{}
	// commitWait is how long a caller whose context ended after its op ran
	// still waits for the batch's outcome (see write). Tests may shorten it
	// before the first write.
	commitWait time.Duration
	// beforeCommit, if not nil, is called by the writer with the number of
	// ops in a batch just before its COMMIT. Tests set it before the first
	// write, to count batches or to hold one open.
	beforeCommit func(ops int)
	// seqOneByOne makes Draw draw each receipt's seq with a statement of its
	// own, as before reserveSeqs (tests and BenchmarkDrawSeqs compare).
	seqOneByOne bool

	// watches are the running WatchKeys (watch.go).
	watches keyWatches
}

// Open opens the SQLite database file at path, creating it if needed, and
// brings its schema up to date. path is a plain file path: ":memory:" is
// refused, because every connection would get a database of its own.
// A nil log discards log output.
func Open(ctx context.Context, path string, log *slog.Logger) (_ *DB, err error) {
	defer store.Wrap(&err, "sqlite", "open %q", path)
	switch {
	case path == "", path == ":memory:", strings.HasPrefix(path, "file:"), strings.ContainsAny(path, "?#"):
		return nil, errors.New("want a plain file path (no URI, query or in-memory database)")
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("component", "store/sqlite")
	ctx, cancel := context.WithTimeout(ctx, openTimeout)
	defer cancel()

	rw, err := sql.Open("sqlite", path+"?"+writerParams)
	if err != nil {
		return nil, mapErr(ctx, err)
	}
	// One writer connection, kept open, used by the writer goroutine (and by
	// migrate before any write is queued), and the WAL stays open.
	rw.SetMaxOpenConns(1)
	rw.SetMaxIdleConns(1)
	rw.SetConnMaxLifetime(0)
	rw.SetConnMaxIdleTime(0)
	db := &DB{Now: time.Now, rw: rw, log: log, writerDone: make(chan struct{}), commitWait: store.DefaultTimeout}
	db.wake = sync.NewCond(&db.mu)
	go db.runWriter() // Close stops it and waits for it, on every return path
	defer func() {
		if err != nil {
			_ = db.Close()
		}
	}()

	var mode string
	if err := rw.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
		return nil, mapErr(ctx, err)
	}
	if !strings.EqualFold(mode, "wal") {
		return nil, fmt.Errorf("journal_mode is %q, want wal", mode)
	}
	if err := migrate(ctx, rw, log); err != nil {
		return nil, err
	}

	ro, err := sql.Open("sqlite", path+"?"+readerParams)
	if err != nil {
		return nil, mapErr(ctx, err)
	}
	ro.SetMaxOpenConns(maxReaders)
	db.ro = ro
	if err := ro.PingContext(ctx); err != nil {
		return nil, mapErr(ctx, err)
	}
	return db, nil
}

// Close closes the database. Writes already queued are still run and
// answered: Close waits for them, for the writer goroutine to return, and
// then closes the connections. Reads in progress may fail.
//
// If another connection holds the write lock, the wait can last up to
// busy_timeout for BEGIN plus store.DefaultTimeout for the batch.
func (db *DB) Close() error {
	if !db.gate.Close() {
		return nil
	}
	db.mu.Lock()
	db.closing = true
	db.mu.Unlock()
	db.wake.Broadcast()
	<-db.writerDone

	var errs []error
	db.roMu.Lock()
	for _, st := range db.roStmts {
		errs = append(errs, st.Close())
	}
	db.roStmts = nil
	db.roMu.Unlock()
	if db.ro != nil {
		errs = append(errs, db.ro.Close())
	}
	// The writer closes last: closing the last connection checkpoints the WAL.
	errs = append(errs, db.rw.Close())
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("sqlite: close: %w", err)
	}
	return nil
}

// readStmt returns query prepared on the read pool, preparing it on first
// use; on a failure to prepare it returns nil and the caller runs the query
// unprepared. The pool's connections close with it.
func (db *DB) readStmt(ctx context.Context, query string) *sql.Stmt {
	db.roMu.Lock()
	defer db.roMu.Unlock()
	if st := db.roStmts[query]; st != nil {
		return st
	}
	st, err := db.ro.PrepareContext(ctx, query) //nolint:sqlclosecheck // kept for the pool's life; Close closes it
	if err != nil {
		return nil
	}
	if db.roStmts == nil {
		db.roStmts = map[string]*sql.Stmt{}
	}
	db.roStmts[query] = st
	return st
}

// readRow runs a hot read, prepared (readStmt).
func (db *DB) readRow(ctx context.Context, query string, args ...any) *sql.Row {
	if st := db.readStmt(ctx, query); st != nil { //nolint:sqlclosecheck // kept for the pool's life; Close closes it
		return st.QueryRowContext(ctx, args...)
	}
	return db.ro.QueryRowContext(ctx, query, args...)
}

// Ping checks that the file can still be read, for readiness probes.
func (db *DB) Ping(ctx context.Context) (err error) {
	defer store.Wrap(&err, "sqlite", "ping")
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	if err := db.ro.PingContext(ctx); err != nil {
		return mapErr(ctx, err)
	}
	return nil
}

// migrate applies every migration the file lacks, all in one transaction,
// and refuses a file whose schema is newer than this binary's.
func migrate(ctx context.Context, rw *sql.DB, log *slog.Logger) (err error) {
	defer store.Wrap(&err, "sqlite", "migrate")
	all, err := migrations.All()
	if err != nil {
		return err
	}
	tx, err := rw.BeginTx(ctx, nil)
	if err != nil {
		return mapErr(ctx, err)
	}
	defer func() { _ = tx.Rollback() }() // no-op after Commit

	if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
    version       BIGINT NOT NULL PRIMARY KEY,
    name          TEXT   NOT NULL,
    applied_at_ms BIGINT NOT NULL
)`); err != nil {
		return mapErr(ctx, err)
	}
	applied, err := appliedMigrations(ctx, tx)
	if err != nil {
		return err
	}
	for i, name := range applied {
		switch v := i + 1; {
		case v > len(all):
			return fmt.Errorf("database schema version %d is newer than this binary's %d", len(applied), len(all))
		case all[i].Name != name:
			return fmt.Errorf("database has migration %04d_%s, this binary has %04d_%s", v, name, v, all[i].Name)
		}
	}
	for _, m := range all[len(applied):] {
		if _, err := tx.ExecContext(ctx, m.Up); err != nil {
			return fmt.Errorf("%04d_%s: %w", m.Version, m.Name, mapErr(ctx, err))
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations (version, name, applied_at_ms) VALUES (?, ?, ?)`,
			m.Version, m.Name, time.Now().UnixMilli()); err != nil {
			return mapErr(ctx, err)
		}
		log.InfoContext(ctx, "applied migration", "version", m.Version, "name", m.Name)
	}
	return mapErr(ctx, tx.Commit())
}

// appliedMigrations returns the names of the applied migrations, index i
// holding version i+1; it fails if the versions have a gap.
func appliedMigrations(ctx context.Context, tx *sql.Tx) ([]string, error) {
	rows, err := tx.QueryContext(ctx, `SELECT version, name FROM schema_migrations ORDER BY version`)
	if err != nil {
		return nil, mapErr(ctx, err)
	}
	defer func() { _ = rows.Close() }() // rows.Err reports what iterating hit
	var names []string
	for rows.Next() {
		var v int
		var name string
		if err := rows.Scan(&v, &name); err != nil {
			return nil, mapErr(ctx, err)
		}
		if v != len(names)+1 {
			return nil, fmt.Errorf("schema_migrations has version %d where %d was expected", v, len(names)+1)
		}
		names = append(names, name)
	}
	return names, mapErr(ctx, rows.Err())
}

// nowMs is the store's time in unix milliseconds: DB.Now's, else the
// system clock's.
func (db *DB) nowMs() int64 {
	if db.Now == nil {
		return time.Now().UnixMilli()
	}
	return db.Now().UnixMilli()
}

// mapErr turns what database/sql and the driver return into errors callers
// may inspect: sql.ErrNoRows becomes store.ErrNotFound, the store's own
// sentinels and context errors pass through wrapped, and a driver error keeps
// only its text, so that no driver type leaves this package.
func mapErr(ctx context.Context, err error) error {
	var se *sqlite.Error
	switch {
	case err == nil:
		return nil
	case errors.Is(err, sql.ErrNoRows):
		return store.ErrNotFound
	case !errors.As(err, &se):
		return err
	case ctx.Err() != nil:
		// The busy handler and the interrupt give up once ctx is done.
		return fmt.Errorf("%w (%s)", ctx.Err(), se.Error())
	}
	switch se.Code() & 0xff {
	case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED:
		// After busy_timeout, or at once where waiting could not help.
		return fmt.Errorf("database busy: another connection holds the lock (busy_timeout %d ms): %s", busyTimeoutMs, se.Error())
	default:
		return errors.New(se.Error())
	}
}
