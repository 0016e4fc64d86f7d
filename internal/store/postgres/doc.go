// Package postgres is the PostgreSQL store backend, for several gateway or
// facilitator replicas sharing one database, through
// github.com/jackc/pgx/v5 (pgxpool). It implements store.Settlements,
// store.Payments, store.Ledger, store.Leases, store.Recoveries, store.Keys,
// store.Receipts, store.ReceiptLog and store.StagedLister with the
// semantics the storetest suites pin down.
//
// # Atomicity
//
// Every decision is one SQL statement run under READ COMMITTED: a claim is
// INSERT ... ON CONFLICT DO UPDATE ... WHERE <the lease has ended> RETURNING,
// a fenced write is UPDATE or DELETE ... WHERE fence = $ AND state IN (...).
// A statement that meets a row another transaction is changing waits for
// that transaction and re-evaluates its conditions on the row as it was
// left, so of any number of callers, in any number of processes, exactly one
// wins a claim, a takeover or the "success reported" mark, and no statement
// ever fails with a serialization error that would need a retry. When a
// write changes nothing, a second statement reads the record to say why
// (ErrNotFound, ErrFenced, a terminal state). Open forces
// default_transaction_isolation to read committed on its connections, since
// the statements are written for it.
//
// CreateKey is the one decision of two statements: it counts the owner's
// keys and inserts in one transaction under an advisory lock keyed by the
// owner, so that concurrent creations cannot both pass MaxKeysPerOwner.
//
// The receipt log's batch writes (AppendLog, PutReceipt with a leaf,
// IntegrateLog) are transactions of a few statements, each statement
// handling the whole batch as arrays, because a refusal found halfway must
// undo what the batch wrote before it. IntegrateLog begins with the
// conditional UPDATE of the log's one state row (WHERE size = from AND
// fence = fence), which locks the row until the commit: of concurrent
// integrations of one size exactly one writes (see receiptlog.go).
//
// A batch of credit lease draws (Draw) is a transaction of three
// statements: it locks its leases' rows, reads what its draws are decided
// on, and writes the accepted ones as arrays; a draw it refuses is never
// written, so no refusal needs the transaction undone (see leases.go).
//
// Settlement and payment fences come from one SEQUENCE per table (nextval
// never blocks, is never rolled back and, with the default CACHE 1, only
// grows), so a fence is never handed out twice, not even for a key released
// or expired and claimed again, and a takeover's fence is above the one it
// replaces. Recovery fences come from the one-row counter of migration 0005,
// incremented by the statement that begins a record and locked until it
// commits, so they too are unique and increasing (see recovery.go).
//
// # Clock
//
// Leases, expiry and every timestamp are judged by the server's clock,
// inside the statement that decides (clock_timestamp(), to the millisecond),
// so replicas whose clocks disagree still agree on who holds a claim.
// DB.Now replaces that clock for tests, through the same SQL: the time is a
// nullable parameter that falls back to the server's clock.
//
// # Durability and failover
//
// A write is acknowledged once the server has committed it. With
// synchronous_commit=on (the default; Open logs a warning when it is off) a
// committed claim or mark survives a crash of the server. On failover to a
// streaming replica, the last commits survive only if the replica confirmed
// them (synchronous replication: synchronous_standby_names set and
// synchronous_commit at least remote_write); with asynchronous replication a
// failover can lose the last acknowledged claims, as Redis can, and the
// chain (the facilitator reads authorizationState before broadcasting and
// the reconciler resolves pending settlements from it) is what keeps such a
// lost claim from turning into a second settlement. List every host in the
// DSN with target_session_attrs=read-write so a replica reconnects to the
// new primary; statements in flight during the switch fail with an error,
// and the caller fails closed.
//
// # Replicas and schema
//
// Any number of replicas may share one database and schema: Open applies the
// shared migrations of internal/store/migrations (rewritten for PostgreSQL by
// rewrite, plus the fence sequences) in one transaction under a
// transaction-scoped advisory lock keyed by the schema, and records them in
// schema_migrations, so replicas starting at once migrate once, and opening
// an up-to-date schema applies nothing. The schema is the first existing one
// of the connection's search_path (search_path=... in the DSN selects
// another). PostgreSQL 12 or later is required.
//
// # Connection pool
//
// Each DB holds one pgxpool pool, of pool_max_conns connections (DSN
// setting; default 16, pgx's own default would be 4 on a small machine).
// Each operation holds a connection for one or two statements, so a pool of
// a few connections serves many concurrent callers; with more callers than
// connections they queue for one, and concurrent commits share the server's
// WAL flushes. Claims and ledger writes go further: concurrent ones are
// sent as batches, one round trip and one commit each (lines.go), which is
// where the claim throughput and tail latency come from. Budget the server's
// max_connections (default 100) for every pool: pool_max_conns times the DB
// values each replica opens times the replicas, plus room for operators and
// migrations. A connection attempt gives up after connect_timeout (DSN
// setting; default 10 s). pgx prepares and caches each statement per
// connection: behind PgBouncer in transaction mode, add
// default_query_exec_mode=exec to the DSN, and let PgBouncer pass
// default_transaction_isolation and search_path, which Open sends as
// start-up parameters.
//
// # Errors and secrets
//
// Every operation is bounded by store.DefaultTimeout when its context has no
// earlier deadline; a context that ends interrupts the statement and the
// error wraps the context's error (claims and ledger writes once sent run
// to their end instead, see lines.go). The interruption is a cancel request to
// the server, not only a closed socket, so a write that was waiting for a
// row lock is rolled back there instead of committing once the lock is
// free. A write that had already committed when the cancel arrived stays
// committed, and an answer lost with the network leaves the outcome
// unknown: an error from a write never proves that nothing was written
// (see cancelOnContextEnd). Driver errors never leave this package: they
// are mapped to store.ErrNotFound, store.ErrFenced or store.ErrConflict, or
// kept as text with the operation that failed. No error or log line carries
// the DSN's password: DSN parse errors carry only pgx's reason, never the
// DSN, and the password is scrubbed from every error text besides.
package postgres
