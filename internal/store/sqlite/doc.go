// Package sqlite is the default store backend: one SQLite database file,
// accessed through modernc.org/sqlite (no cgo).
//
// Every connection runs in WAL mode with busy_timeout 5000 ms, foreign_keys on
// and synchronous=FULL. FULL, not NORMAL: in WAL mode NORMAL may lose the last
// committed transactions on power loss, and a lost "success reported" mark or
// a lost claim can make the facilitator answer success twice or broadcast an
// authorization again (D4, D5). An fsync per commit is cheap next to
// a chain round trip, and group commit shares it between concurrent writes.
//
// Writes are group-committed (writer.go). Each *DB queues its writes for one
// writer goroutine, started by Open and waited for by Close, which runs what is
// queued when it is free (up to 64 writes) in one BEGIN IMMEDIATE transaction,
// each write in a SAVEPOINT of its own so a failing write rolls back alone, and
// commits once: one fsync for the batch. A write is answered only after its
// batch's COMMIT; if that fails, every write of the batch fails. A caller whose
// context ends while its write is queued gets the context's error and the
// write never runs; once it has run, the caller waits for the COMMIT.
//
// BEGIN IMMEDIATE (_txlock=immediate) takes the database's write lock before
// the first read, and the writes of a batch run one at a time on the single
// writer connection, so read-modify-write operations stay atomic, and several
// *DB values on one file, in one process or in several, serialize correctly:
// that is what the two-handle race tests of storetest exercise. Reads use a
// separate read-only pool and, in WAL mode, never wait for a writer.
//
// The schema comes from the shared, embedded migrations of
// internal/store/migrations, applied by Open in one transaction and recorded
// in schema_migrations; opening an up-to-date file applies nothing.
//
// Times are stored as unix milliseconds (UTC) and amounts as decimal TEXT,
// except the ledger's (migration 0004): BIGINT atomic units bounded by
// store.MaxAmount, so that a hold is one conditional UPDATE.
// Driver errors never leave this package: they are mapped to the store
// sentinels or wrapped as text with the operation that failed.
package sqlite
