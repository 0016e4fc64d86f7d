package testdb_test

import (
	"context"
	"fmt"
	"net/url"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/llm4agents/llm4agents/internal/store/postgres"
	"github.com/llm4agents/llm4agents/internal/store/redis"
	"github.com/llm4agents/llm4agents/internal/testdb"
)

// fakeTB records what a helper reports instead of failing or skipping the
// real test, so the skip and failure paths can be tested. Its methods other
// than those below panic (the embedded interface is nil): a helper calling
// one is a surprise worth seeing.
type fakeTB struct {
	testing.TB
	mu       sync.Mutex
	failed   bool
	skipped  bool
	msgs     []string
	cleanups []func()
}

func (f *fakeTB) Helper() {}

func (f *fakeTB) record(failed, skipped bool, msg string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failed = f.failed || failed
	f.skipped = f.skipped || skipped
	f.msgs = append(f.msgs, msg)
}

func (f *fakeTB) Errorf(format string, args ...any) {
	f.record(true, false, fmt.Sprintf(format, args...))
}

func (f *fakeTB) Fatalf(format string, args ...any) {
	f.record(true, false, fmt.Sprintf(format, args...))
	runtime.Goexit()
}

func (f *fakeTB) Skipf(format string, args ...any) {
	f.record(false, true, fmt.Sprintf(format, args...))
	runtime.Goexit()
}

func (f *fakeTB) Cleanup(fn func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cleanups = append(f.cleanups, fn)
}

func (f *fakeTB) log() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return strings.Join(f.msgs, "\n")
}

// runFake runs fn with a fakeTB, then its cleanups (last registered first),
// each in a goroutine of its own as the testing package does, so that
// Fatalf and Skipf end it.
func runFake(fn func(tb testing.TB)) *fakeTB {
	f := &fakeTB{}
	goexit := func(fn func()) {
		done := make(chan struct{})
		go func() {
			defer close(done)
			fn()
		}()
		<-done
	}
	goexit(func() { fn(f) })
	for _, c := range slices.Backward(f.cleanups) {
		goexit(c)
	}
	return f
}

// TestServer checks the skip-or-fail rule for an unset server.
func TestServer(t *testing.T) {
	const env = "LLM4AGENTS_TESTDB_SELFTEST_URL"
	for _, tc := range []struct {
		name, value, require string
		wantFail, wantSkip   bool
		wantMsg              string
	}{
		{name: "set", value: "postgres://h/db", wantMsg: ""},
		{name: "set and required", value: "postgres://h/db", require: "1"},
		{name: "unset", wantSkip: true, wantMsg: env + " is unset"},
		{name: "unset and required", require: "1", wantFail: true, wantMsg: env + " is unset and " + testdb.RequireEnv + "=1"},
		{name: "unset, required is not 1", require: "true", wantSkip: true, wantMsg: env + " is unset"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(env, tc.value)
			t.Setenv(testdb.RequireEnv, tc.require)
			var got string
			f := runFake(func(tb testing.TB) { got = testdb.Server(tb, env) })
			if f.failed != tc.wantFail || f.skipped != tc.wantSkip || f.log() != tc.wantMsg {
				t.Errorf("Server(): failed %t skipped %t %q, want failed %t skipped %t %q", f.failed, f.skipped, f.log(), tc.wantFail, tc.wantSkip, tc.wantMsg)
			}
			if !tc.wantFail && !tc.wantSkip && got != tc.value {
				t.Errorf("Server() = %q, want %q", got, tc.value)
			}
		})
	}
}

// TestBadLabel checks that a label that would not make a plain schema name
// and key prefix fails the test, before the server is even looked up.
func TestBadLabel(t *testing.T) {
	// With the servers unset and not required, a label that passes the
	// check ends in a skip; one that does not, in a failure.
	t.Setenv(testdb.PostgresEnv, "")
	t.Setenv(testdb.RedisEnv, "")
	t.Setenv(testdb.RequireEnv, "")
	helpers := map[string]func(tb testing.TB, label string){
		"PostgresSchema": func(tb testing.TB, label string) { testdb.PostgresSchema(tb, label) },
		"RedisPrefix":    func(tb testing.TB, label string) { testdb.RedisPrefix(tb, label) },
	}
	for _, tc := range []struct {
		label   string
		wantErr string
	}{
		{"rec", ""},
		{"e2e", ""},
		{strings.Repeat("a", 32), ""},
		{"", "label is empty"},
		{strings.Repeat("a", 33), "33 bytes long, over 32"},
		{"Rec", `character 'R'`},
		{"a_b", `character '_'`},
		{"a-b", `character '-'`},
		{"a b", `character ' '`},
		{"x;DROP", `character ';'`},
		{"a*", `character '*'`},
		{"{a}", `character '{'`},
		{"é", `character 'é'`},
	} {
		for name, helper := range helpers {
			t.Run(name+"/"+tc.label, func(t *testing.T) {
				f := runFake(func(tb testing.TB) { helper(tb, tc.label) })
				if tc.wantErr == "" {
					if f.failed || !f.skipped {
						t.Errorf("label %q: failed %t skipped %t %q, want a skip (no server)", tc.label, f.failed, f.skipped, f.log())
					}
					return
				}
				if !f.failed || f.skipped || !strings.Contains(f.log(), tc.wantErr) {
					t.Errorf("label %q: failed %t skipped %t %q, want a failure with %q", tc.label, f.failed, f.skipped, f.log(), tc.wantErr)
				}
			})
		}
	}
}

// TestNoPasswordInErrors checks that a malformed or unreachable server URL
// fails the test without quoting its password (url.Parse's errors quote the
// whole URL).
func TestNoPasswordInErrors(t *testing.T) {
	const secret = "s3cr3tpw9"
	t.Setenv(testdb.RequireEnv, "")
	for _, tc := range []struct {
		name, env, value string
		run              func(tb testing.TB)
		wantErr          string
	}{
		{"postgres bad port", testdb.PostgresEnv, "postgres://u:" + secret + "@h:badport/db",
			func(tb testing.TB) { testdb.PostgresSchema(tb, "self") }, "invalid port"},
		{"postgres control character", testdb.PostgresEnv, "postgres://u:" + secret + "@h/db\x7f",
			func(tb testing.TB) { testdb.PostgresDSN(tb, "self") }, "invalid control character"},
		{"postgres unreachable", testdb.PostgresEnv, "postgres://u:" + secret + "@127.0.0.1:1/db?connect_timeout=5",
			func(tb testing.TB) { testdb.PostgresSchema(tb, "self") }, "connect to the PostgreSQL test server"},
		{"postgres key=value unreachable", testdb.PostgresEnv, "host=127.0.0.1 port=1 user=u password=" + secret + " connect_timeout=5",
			func(tb testing.TB) { testdb.PostgresSchema(tb, "self") }, "connect to the PostgreSQL test server"},
		{"redis bad port", testdb.RedisEnv, "redis://u:" + secret + "@h:badport/0",
			func(tb testing.TB) { testdb.RedisPrefix(tb, "self") }, "invalid port"},
		{"redis control character", testdb.RedisEnv, "redis://u:" + secret + "@h/0\x7f",
			func(tb testing.TB) { testdb.RedisURL(tb, "self") }, "invalid control character"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(tc.env, tc.value)
			f := runFake(tc.run)
			if !f.failed || !strings.Contains(f.log(), tc.wantErr) {
				t.Errorf("failed %t %q, want a failure with %q", f.failed, f.log(), tc.wantErr)
			}
			if strings.Contains(f.log(), secret) {
				t.Errorf("the error quotes the password: %q", f.log())
			}
		})
	}
}

// TestPostgresParam checks that a setting is added in the DSN's own form.
func TestPostgresParam(t *testing.T) {
	for _, tc := range []struct{ name, dsn, want string }{
		{"url", "postgres://u@h:5432/db?sslmode=disable", "postgres://u@h:5432/db?search_path=s&sslmode=disable"},
		{"postgresql url", "postgresql://h/db", "postgresql://h/db?search_path=s"},
		{"url replaces", "postgres://h/db?search_path=public", "postgres://h/db?search_path=s"},
		{"key=value", "host=h dbname=db", "host=h dbname=db search_path=s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := testdb.PostgresParam(t, tc.dsn, "search_path", "s"); got != tc.want {
				t.Errorf("PostgresParam(%q) = %q, want %q", tc.dsn, got, tc.want)
			}
		})
	}
}

// TestPostgresSchema checks on the real server that each call creates its
// own empty schema, that the store migrates into it and nowhere else, and
// that the schema is dropped when the test ends.
func TestPostgresSchema(t *testing.T) {
	base := testdb.Server(t, testdb.PostgresEnv)
	ctx := t.Context()
	conn := testdb.PostgresConn(t, ctx, base)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	tables := func(t *testing.T, schema string) int {
		t.Helper()
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE schemaname = $1`, schema).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	exists := func(t *testing.T, schema string) bool {
		t.Helper()
		var ok bool
		if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)`, schema).Scan(&ok); err != nil {
			t.Fatal(err)
		}
		return ok
	}
	name := regexp.MustCompile(`^l4a_self_[0-9a-f]{16}$`)
	var schemas []string
	t.Run("test", func(t *testing.T) {
		a, dsnA := testdb.PostgresSchema(t, "self")
		b, _ := testdb.PostgresSchema(t, "self")
		schemas = []string{a, b}
		for _, s := range schemas {
			if !name.MatchString(s) {
				t.Errorf("schema %q does not match %s", s, name)
			}
			if !exists(t, s) || tables(t, s) != 0 {
				t.Fatalf("schema %q: exists %t with %d tables, want an empty one", s, exists(t, s), tables(t, s))
			}
		}
		if a == b {
			t.Fatalf("two calls gave the same schema %q", a)
		}
		db, err := postgres.Open(ctx, dsnA, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = db.Close() })
		if n := tables(t, a); n == 0 {
			t.Errorf("the store's migrations made no table in %s", a)
		}
		if n := tables(t, b); n != 0 {
			t.Errorf("the store on %s made %d tables in %s", a, n, b)
		}
	})
	for _, s := range schemas {
		if exists(t, s) {
			t.Errorf("schema %s still exists after its test ended", s)
			testdb.PostgresExec(t, base, "DROP SCHEMA "+s+" CASCADE")
		}
	}
}

// TestRedisPrefix checks on the real server that the store accepts the URL,
// and that the prefix's keys, plain and hash-tagged, more than one UNLINK
// batch of them, are deleted when the test ends, and no key outside it.
func TestRedisPrefix(t *testing.T) {
	base := testdb.Server(t, testdb.RedisEnv)
	ctx := t.Context()
	opts, err := goredis.ParseURL(base)
	if err != nil {
		t.Fatal(err)
	}
	raw := goredis.NewClient(opts)
	t.Cleanup(func() { _ = raw.Close() })
	under := func(t *testing.T, prefix string) []string {
		t.Helper()
		var keys []string
		for _, pattern := range []string{prefix + "*", "{" + prefix + "}*"} {
			iter := raw.Scan(ctx, 0, pattern, 1000).Iterator()
			for iter.Next(ctx) {
				keys = append(keys, iter.Val())
			}
			if err := iter.Err(); err != nil {
				t.Fatal(err)
			}
		}
		return keys
	}
	name := regexp.MustCompile(`^l4a-self-[0-9a-f]{16}:$`)
	var prefix, outside string
	t.Run("test", func(t *testing.T) {
		u, p := testdb.RedisPrefix(t, "self")
		prefix = p
		if !name.MatchString(p) {
			t.Errorf("prefix %q does not match %s", p, name)
		}
		parsed, err := url.Parse(u)
		if err != nil {
			t.Fatal(err)
		}
		if got := parsed.Query().Get("key_prefix"); got != p {
			t.Errorf("URL key_prefix = %q, want %q", got, p)
		}
		if other := testdb.RedisURL(t, "self"); other == u {
			t.Errorf("two calls gave the same URL %q", u)
		}
		db, err := redis.Open(ctx, u, nil)
		if err != nil {
			t.Fatalf("the store refuses the URL: %v", err)
		}
		t.Cleanup(func() { _ = db.Close() })
		if err := db.Ping(ctx); err != nil {
			t.Fatal(err)
		}
		// A key that shares the prefix's text but not its colon is
		// another test's.
		outside = strings.TrimSuffix(p, ":") + "-outside"
		pipe := raw.Pipeline()
		pipe.Set(ctx, outside, "keep", 0)
		pipe.Set(ctx, p+"plain", "x", 0)
		for i := range 1500 {
			pipe.Set(ctx, fmt.Sprintf("{%s}k%d", p, i), "x", 0)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatal(err)
		}
		if n := len(under(t, p)); n != 1501 {
			t.Fatalf("%d keys under %s, want 1501", n, p)
		}
	})
	t.Cleanup(func() { _ = raw.Del(context.Background(), outside).Err() })
	if left := under(t, prefix); len(left) != 0 {
		t.Errorf("%d keys under %s after its test ended, such as %q", len(left), prefix, left[0])
	}
	if n, err := raw.Exists(ctx, outside).Result(); err != nil || n != 1 {
		t.Errorf("the key %s outside the prefix: exists %d, %v; want it kept", outside, n, err)
	}
}
