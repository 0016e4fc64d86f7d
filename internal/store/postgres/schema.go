package postgres

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/llm4agents/llm4agents/internal/store/migrations"
)

// minServerVersion is the oldest PostgreSQL this backend runs on: the
// statements use WITH ... AS MATERIALIZED (12) and the migration lock
// hashtextextended (11).
const minServerVersion = 120000

// blob matches SQLite's BLOB type name, case-insensitively, as a whole word.
var blob = regexp.MustCompile(`(?i)\bblob\b`)

// rewrite turns one shared migration file (written for SQLite and PostgreSQL
// alike, see package migrations) into PostgreSQL. The only construct the
// shared files use that PostgreSQL lacks is SQLite's BLOB type, which
// becomes BYTEA. The rewrite applies to the code of each line, not to what
// follows "--", so comments read as written. It does not parse string
// literals: a "--" inside one would hide the rest of its line from the
// rewrite, so the shared files keep such literals out of lines that name a
// type.
func rewrite(sql string) string {
	lines := strings.Split(sql, "\n")
	for i, line := range lines {
		code, comment, found := strings.Cut(line, "--")
		code = blob.ReplaceAllString(code, "BYTEA")
		if found {
			code += "--" + comment
		}
		lines[i] = code
	}
	return strings.Join(lines, "\n")
}

// dialectExtra is what PostgreSQL adds to a shared migration, applied in the
// same transaction and recorded under the same version.
type dialectExtra struct {
	name     string // the shared migration's name, checked, so a renumbering cannot misplace it
	up, down string // run after the shared up, before the shared down
}

// extras move the marks of open leases into their table (19), and draw
// fences, ledger seqs and the receipt log's queue order from a
// SEQUENCE per table instead of the shared migrations' one-row counter
// tables (which stay, unused): nextval never blocks and is never rolled
// back, so concurrent claims, ledger operations and receipts do not queue
// behind one counter row until each other's COMMIT, and a value is never
// handed out twice. CACHE 1 (the default)
// keeps the values increasing across sessions, in the order they are drawn,
// so a takeover's fence is always above the one it replaces, and a ledger
// entry drawn after another's commit has a higher seq (see ledger.go).
var extras = map[int]dialectExtra{
	1:  {name: "settlements", up: "CREATE SEQUENCE settlement_fence_seq AS BIGINT;", down: "DROP SEQUENCE settlement_fence_seq;"},
	2:  {name: "payments", up: "CREATE SEQUENCE payment_fence_seq AS BIGINT;", down: "DROP SEQUENCE payment_fence_seq;"},
	4:  {name: "ledger", up: "CREATE SEQUENCE ledger_entry_seq AS BIGINT;", down: "DROP SEQUENCE ledger_entry_seq;"},
	12: {name: "receipt_log", up: "CREATE SEQUENCE log_entry_seq AS BIGINT;", down: "DROP SEQUENCE log_entry_seq;"},
	// The marks of the leases open when the table is made move into it,
	// and back when it goes.
	19: {
		name: "lease_marks",
		up:   "INSERT INTO ledger_lease_marks (lease_id, issued) SELECT hold_id, issued FROM ledger_holds WHERE lease = 1 AND state = 'held';",
		down: "UPDATE ledger_holds h SET issued = m.issued FROM ledger_lease_marks m WHERE h.hold_id = m.lease_id;",
	},
}

// dialectMigration is a shared migration as PostgreSQL runs it.
type dialectMigration struct {
	Version  int
	Name     string
	Up, Down string
}

// dialectMigrations returns every shared migration rewritten for
// PostgreSQL, with its extras.
func dialectMigrations() ([]dialectMigration, error) {
	all, err := migrations.All()
	if err != nil {
		return nil, err
	}
	out := make([]dialectMigration, 0, len(all))
	for _, m := range all {
		d := dialectMigration{Version: m.Version, Name: m.Name, Up: rewrite(m.Up), Down: rewrite(m.Down)}
		if x, ok := extras[m.Version]; ok {
			if x.name != m.Name {
				return nil, fmt.Errorf("postgres extra for migration %04d is for %q, the migration is %q", m.Version, x.name, m.Name)
			}
			d.Up += "\n" + x.up + "\n"
			d.Down = x.down + "\n" + d.Down
		}
		out = append(out, d)
	}
	for v, x := range extras {
		if v < 1 || v > len(all) {
			return nil, fmt.Errorf("postgres extra for migration %04d_%s has no shared migration", v, x.name)
		}
	}
	return out, nil
}

// migrateLock is the transaction-scoped advisory lock every Open takes
// before it looks at the schema, keyed by the schema it migrates, so that
// replicas starting at once migrate one after the other and the second
// finds the work done; stores in other schemas of the same database do not
// wait for each other.
const migrateLock = `SELECT pg_advisory_xact_lock(hashtextextended('llm4agents/store/postgres migrate ' || current_schema(), 0))`

// migrate applies every migration the schema lacks, all in one transaction
// under migrateLock, and refuses a schema newer than this binary's.
func (db *DB) migrate(ctx context.Context) (err error) {
	defer func() {
		if err != nil {
			err = fmt.Errorf("migrate: %w", err)
		}
	}()
	all, err := dialectMigrations()
	if err != nil {
		return err
	}
	tx, err := db.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return db.mapErr(ctx, err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }() // no-op after Commit

	var version int
	var schema *string
	if err := tx.QueryRow(ctx, `SELECT current_setting('server_version_num')::int, current_schema()`).Scan(&version, &schema); err != nil {
		return db.mapErr(ctx, err)
	}
	switch {
	case version < minServerVersion:
		return fmt.Errorf("server version %d is older than PostgreSQL 12", version)
	case schema == nil:
		return errors.New("no schema to create tables in: the search_path names no existing schema")
	}
	if _, err := tx.Exec(ctx, migrateLock); err != nil {
		return db.mapErr(ctx, err)
	}
	if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
    version       BIGINT NOT NULL PRIMARY KEY,
    name          TEXT   NOT NULL,
    applied_at_ms BIGINT NOT NULL
)`); err != nil {
		return db.mapErr(ctx, err)
	}
	applied, err := db.appliedMigrations(ctx, tx)
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
		// Without arguments pgx sends the text as a simple query, which may
		// hold several statements.
		if _, err := tx.Exec(ctx, m.Up); err != nil {
			return fmt.Errorf("%04d_%s: %w", m.Version, m.Name, db.mapErr(ctx, err))
		}
		if _, err := tx.Exec(ctx, `INSERT INTO schema_migrations (version, name, applied_at_ms)
VALUES ($1, $2, floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint)`, m.Version, m.Name); err != nil {
			return db.mapErr(ctx, err)
		}
		db.log.InfoContext(ctx, "applied migration", "version", m.Version, "name", m.Name, "schema", *schema)
	}
	return db.mapErr(ctx, tx.Commit(ctx))
}

// appliedMigrations returns the names of the applied migrations, index i
// holding version i+1; it fails if the versions have a gap.
func (db *DB) appliedMigrations(ctx context.Context, tx pgx.Tx) ([]string, error) {
	rows, err := tx.Query(ctx, `SELECT version, name FROM schema_migrations ORDER BY version`)
	if err != nil {
		return nil, db.mapErr(ctx, err)
	}
	defer rows.Close() // rows.Err reports what iterating hit
	var names []string
	for rows.Next() {
		var v int64
		var name string
		if err := rows.Scan(&v, &name); err != nil {
			return nil, db.mapErr(ctx, err)
		}
		if v != int64(len(names)+1) {
			return nil, fmt.Errorf("schema_migrations has version %d where %d was expected", v, len(names)+1)
		}
		names = append(names, name)
	}
	return names, db.mapErr(ctx, rows.Err())
}

// checkDurability warns when the server acknowledges commits before they
// are on disk: a claim or a "success reported" mark lost in a crash can let
// an authorization reach the upstream twice or be answered success twice.
func (db *DB) checkDurability(ctx context.Context) error {
	var sync string
	if err := db.pool.QueryRow(ctx, `SELECT current_setting('synchronous_commit')`).Scan(&sync); err != nil {
		return db.mapErr(ctx, err)
	}
	if sync == "off" {
		db.log.WarnContext(ctx, "synchronous_commit is off: the last acknowledged claims can be lost in a server crash",
			"synchronous_commit", sync)
	}
	return nil
}
