package facilitator_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	goredis "github.com/redis/go-redis/v9"

	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/internal/store/postgres"
	"github.com/llm4agents/llm4agents/internal/store/redis"
	"github.com/llm4agents/llm4agents/internal/store/sqlite"
)

// settleStore is a handle on a shared settlements store, as one replica
// process holds it.
type settleStore interface {
	store.Settlements
	Close() error
}

// storeOpener opens one more handle on a test's database, closed when the
// test ends. Replicas of one test share the database through separate
// handles, as separate processes would.
type storeOpener func(t *testing.T) settleStore

// storeBackend prepares a fresh, empty database of one kind for one test (a
// SQLite file, a PostgreSQL schema, a Redis key prefix), dropped when the
// test ends.
type storeBackend struct {
	name  string
	fresh func(t *testing.T) storeOpener
}

// storeBackends are the stores the multi-replica tests run on. PostgreSQL
// and Redis are skipped when their URL is unset, unless
// LLM4AGENTS_TEST_REQUIRE_BACKENDS=1 (CI), where a missing one fails.
var storeBackends = []storeBackend{
	{"sqlite", freshSQLite},
	{"postgres", freshPostgres},
	{"redis", freshRedis},
}

// eachBackend runs f once per backend, as subtests named after it, each on a
// fresh database.
func eachBackend(t *testing.T, f func(t *testing.T, open storeOpener)) {
	t.Helper()
	for _, b := range storeBackends {
		t.Run(b.name, func(t *testing.T) { f(t, b.fresh(t)) })
	}
}

// backendEnv returns the test server named by env, skipping the test when it
// is unset, or failing it under LLM4AGENTS_TEST_REQUIRE_BACKENDS=1.
func backendEnv(t *testing.T, env string) string {
	t.Helper()
	v := os.Getenv(env)
	if v == "" {
		if os.Getenv("LLM4AGENTS_TEST_REQUIRE_BACKENDS") == "1" {
			t.Fatalf("%s is unset and LLM4AGENTS_TEST_REQUIRE_BACKENDS=1", env)
		}
		t.Skipf("%s is unset", env)
	}
	return v
}

// randomHex names a test's schema or key prefix.
func randomHex() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func closeOnCleanup(t *testing.T, db settleStore) settleStore {
	t.Helper()
	t.Cleanup(func() {
		if err := db.Close(); err != nil {
			t.Error(err)
		}
	})
	return db
}

func freshSQLite(t *testing.T) storeOpener {
	t.Helper()
	path := filepath.Join(t.TempDir(), "fac.db")
	return func(t *testing.T) settleStore {
		t.Helper()
		db, err := sqlite.Open(t.Context(), path, discard())
		if err != nil {
			t.Fatal(err)
		}
		return closeOnCleanup(t, db)
	}
}

// freshPostgres creates a schema of its own on the test server, dropped when
// the test ends (after every handle closed: cleanups run last first).
func freshPostgres(t *testing.T) storeOpener {
	t.Helper()
	base := backendEnv(t, "LLM4AGENTS_TEST_POSTGRES_DSN")
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("LLM4AGENTS_TEST_POSTGRES_DSN is not a URL: %v", err)
	}
	schema := "l4a_fac_" + randomHex()
	pgAdmin(t, base, "CREATE SCHEMA "+schema)
	t.Cleanup(func() { pgAdmin(t, base, "DROP SCHEMA "+schema+" CASCADE") })
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	dsn := u.String()
	return func(t *testing.T) settleStore {
		t.Helper()
		db, err := postgres.Open(t.Context(), dsn, discard())
		if err != nil {
			t.Fatal(err)
		}
		return closeOnCleanup(t, db)
	}
}

func pgAdmin(t *testing.T, dsn, sql string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect to the PostgreSQL test server: %v", err)
	}
	defer func() { _ = conn.Close(ctx) }()
	if _, err := conn.Exec(ctx, sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// freshRedis gives the test a key prefix of its own; its keys are deleted
// when the test ends.
func freshRedis(t *testing.T) storeOpener {
	t.Helper()
	base := backendEnv(t, "LLM4AGENTS_TEST_REDIS_URL")
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("LLM4AGENTS_TEST_REDIS_URL is not a URL: %v", err)
	}
	prefix := "l4a-fac-" + randomHex() + ":"
	t.Cleanup(func() { dropRedisPrefix(t, base, prefix) })
	q := u.Query()
	q.Set("key_prefix", prefix)
	u.RawQuery = q.Encode()
	dsn := u.String()
	return func(t *testing.T) settleStore {
		t.Helper()
		db, err := redis.Open(t.Context(), dsn, discard())
		if err != nil {
			t.Fatal(err)
		}
		return closeOnCleanup(t, db)
	}
}

// dropRedisPrefix deletes the keys under prefix, in either of the forms the
// store writes them (plain or hash-tagged).
func dropRedisPrefix(t *testing.T, base, prefix string) {
	t.Helper()
	opts, err := goredis.ParseURL(base)
	if err != nil {
		t.Errorf("parse LLM4AGENTS_TEST_REDIS_URL: %v", err)
		return
	}
	c := goredis.NewClient(opts)
	defer func() { _ = c.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, pattern := range []string{prefix + "*", "{" + prefix + "}*"} {
		iter := c.Scan(ctx, 0, pattern, 1000).Iterator()
		for iter.Next(ctx) {
			_ = c.Unlink(ctx, iter.Val()).Err()
		}
		if err := iter.Err(); err != nil {
			t.Errorf("delete test keys: %v", err)
		}
	}
}
