package postgres

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// testDSN returns the DSN of the test server from LLM4AGENTS_TEST_POSTGRES_DSN,
// skipping the test when it is unset, or failing it when
// LLM4AGENTS_TEST_REQUIRE_BACKENDS=1 (CI), so a missing server is never
// mistaken for a pass there.
func testDSN(tb testing.TB) string {
	tb.Helper()
	dsn := os.Getenv("LLM4AGENTS_TEST_POSTGRES_DSN")
	if dsn == "" {
		if os.Getenv("LLM4AGENTS_TEST_REQUIRE_BACKENDS") == "1" {
			tb.Fatal("LLM4AGENTS_TEST_POSTGRES_DSN is unset and LLM4AGENTS_TEST_REQUIRE_BACKENDS=1")
		}
		tb.Skip("LLM4AGENTS_TEST_POSTGRES_DSN is unset")
	}
	return dsn
}

// withParam returns dsn with the setting key=value added, in the DSN's own
// form (URL query or key=value).
func withParam(tb testing.TB, dsn, key, value string) string {
	tb.Helper()
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			tb.Fatalf("LLM4AGENTS_TEST_POSTGRES_DSN is not a URL: %v", err)
		}
		q := u.Query()
		q.Set(key, value)
		u.RawQuery = q.Encode()
		return u.String()
	}
	return dsn + " " + key + "=" + value
}

// rawConn connects to dsn outside any store. The DSN is parsed as a
// pool's, so that pool_* settings (meant for the store) are not sent to the
// server as run-time parameters.
func rawConn(tb testing.TB, ctx context.Context, dsn string) *pgx.Conn {
	tb.Helper()
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		tb.Fatalf("LLM4AGENTS_TEST_POSTGRES_DSN: %v", err)
	}
	conn, err := pgx.ConnectConfig(ctx, cfg.ConnConfig)
	if err != nil {
		tb.Fatalf("connect to the test server: %v", err)
	}
	return conn
}

// admin runs sql on the test server outside any store, in a connection of
// its own.
func admin(tb testing.TB, dsn, sql string, args ...any) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn := rawConn(tb, ctx, dsn)
	defer func() { _ = conn.Close(ctx) }()
	if _, err := conn.Exec(ctx, sql, args...); err != nil {
		tb.Fatalf("%s: %v", sql, err)
	}
}

// freshSchema creates a schema with a random name on the test server, drops
// it when the test ends (after the handles opened on it later have been
// closed: cleanups run last registered first), and returns the schema's
// name and a DSN whose search_path selects it.
func freshSchema(tb testing.TB) (name, dsn string) {
	tb.Helper()
	base := testDSN(tb)
	var b [8]byte
	_, _ = rand.Read(b[:])
	name = "llm4agents_test_" + hex.EncodeToString(b[:])
	admin(tb, base, "CREATE SCHEMA "+name)
	tb.Cleanup(func() { admin(tb, base, "DROP SCHEMA "+name+" CASCADE") })
	return name, withParam(tb, base, "search_path", name)
}

// open opens dsn with log (nil discards), sets its clock to now unless nil,
// and closes it when the test ends.
func open(tb testing.TB, dsn string, now func() time.Time, log *slog.Logger) *DB {
	tb.Helper()
	db, err := Open(tb.Context(), dsn, log)
	if err != nil {
		tb.Fatalf("Open(): %v", err)
	}
	db.Now = now
	tb.Cleanup(func() {
		if err := db.Close(); err != nil {
			tb.Errorf("Close(): %v", err)
		}
	})
	return db
}

// logBuffer collects log output; safe for concurrent use.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// logger returns a debug-level logger writing to a new logBuffer.
func logger() (*slog.Logger, *logBuffer) {
	buf := &logBuffer{}
	return slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug})), buf
}

// testClock is a settable clock for the store, safe for concurrent use.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *testClock) Advance(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	return c.now
}
