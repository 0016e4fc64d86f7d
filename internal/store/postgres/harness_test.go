package postgres

import (
	"bytes"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/llm4agents/llm4agents/internal/testdb"
)

// The test server and fresh schemas on it come from testdb: without
// LLM4AGENTS_TEST_POSTGRES_DSN a test is skipped, or fails under
// LLM4AGENTS_TEST_REQUIRE_BACKENDS=1 (CI), so a missing server is never
// mistaken for a pass there.
var (
	// withParam returns a DSN with the setting key=value added, in the
	// DSN's own form (URL query or key=value).
	withParam = testdb.PostgresParam
	// rawConn connects outside any store, ignoring the DSN's pool_*
	// settings; the caller closes the connection.
	rawConn = testdb.PostgresConn
	// admin runs SQL outside any store, in a connection of its own.
	admin = testdb.PostgresExec
)

// testDSN returns the DSN of the test server.
func testDSN(tb testing.TB) string {
	tb.Helper()
	return testdb.Server(tb, testdb.PostgresEnv)
}

// freshSchema creates a schema with a random name on the test server, drops
// it when the test ends (after the handles opened on it later have been
// closed), and returns the schema's name and a DSN whose search_path
// selects it.
func freshSchema(tb testing.TB) (name, dsn string) {
	tb.Helper()
	return testdb.PostgresSchema(tb, "pg")
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
