package testdb

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// PostgresDSN returns the DSN of a fresh, empty schema on the PostgreSQL
// test server; see PostgresSchema.
func PostgresDSN(tb testing.TB, label string) string {
	tb.Helper()
	_, dsn := PostgresSchema(tb, label)
	return dsn
}

// PostgresSchema creates a schema named l4a_<label>_<16 random hex digits> on
// the PostgreSQL test server and returns its name and a DSN whose
// search_path selects it. The schema is dropped (CASCADE) when the test
// ends, after the handles the test opened on it later have been closed:
// cleanups run last registered first. label says which tests made it, for
// whoever looks at a schema left behind by a killed test run; it is
// lower-case letters and digits.
//
// Without the server the test is skipped or fails, as Server says.
func PostgresSchema(tb testing.TB, label string) (schema, dsn string) {
	tb.Helper()
	if err := checkLabel(label); err != nil {
		tb.Fatalf("testdb.PostgresSchema: %v", err)
	}
	base := Server(tb, PostgresEnv)
	schema = "l4a_" + label + "_" + randomHex()
	// The DSN is built before the schema exists, so a bad one leaves
	// nothing behind.
	dsn = PostgresParam(tb, base, "search_path", schema)
	PostgresExec(tb, base, "CREATE SCHEMA "+schema)
	tb.Cleanup(func() { PostgresExec(tb, base, "DROP SCHEMA "+schema+" CASCADE") })
	return schema, dsn
}

// PostgresParam returns dsn with the setting key=value added, in the DSN's
// own form: a URL query option, or a key=value pair appended (the later
// pair wins).
func PostgresParam(tb testing.TB, dsn, key, value string) string {
	tb.Helper()
	if !strings.HasPrefix(dsn, "postgres://") && !strings.HasPrefix(dsn, "postgresql://") {
		return dsn + " " + key + "=" + value
	}
	out, err := withQuery(dsn, key, value)
	if err != nil {
		tb.Fatalf("%s: %v", PostgresEnv, err)
	}
	return out
}

// PostgresConn connects to dsn outside any store; the caller closes the
// connection. The DSN is parsed as a pool's, so that the pool_* settings
// meant for the store are not sent to the server as run-time parameters.
func PostgresConn(tb testing.TB, ctx context.Context, dsn string) *pgx.Conn {
	tb.Helper()
	cfg, err := pgxpool.ParseConfig(dsn) // its errors mask the password
	if err != nil {
		tb.Fatalf("%s: %v", PostgresEnv, err)
	}
	conn, err := pgx.ConnectConfig(ctx, cfg.ConnConfig)
	if err != nil {
		tb.Fatalf("connect to the PostgreSQL test server: %v", err)
	}
	return conn
}

// PostgresExec runs sql with args on dsn in a connection of its own, outside
// any store, for statements a test makes as the server's administrator
// (creating schemas, tampering with rows). It has a deadline of its own, not
// tb.Context(), so that it also works in a cleanup.
func PostgresExec(tb testing.TB, dsn, sql string, args ...any) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
	defer cancel()
	conn := PostgresConn(tb, ctx, dsn)
	defer func() { _ = conn.Close(ctx) }()
	if _, err := conn.Exec(ctx, sql, args...); err != nil {
		tb.Fatalf("%s: %v", sql, err)
	}
}
