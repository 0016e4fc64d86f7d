package gateway_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/internal/store/postgres"
	"github.com/llm4agents/llm4agents/internal/store/redis"
	"github.com/llm4agents/llm4agents/internal/store/sqlite"
)

// rigStore is what a recovery rig's replica needs of its store: the
// facilitator's settlements, the gateway's claims and recovery records. Every
// shared backend is one.
type rigStore interface {
	store.Settlements
	store.Payments
	store.Recoveries
	Close() error
}

// rigOpener opens one more handle on a rig's database, closed when the test
// ends. now, when not nil, is the handle's clock (a replica with a skewed
// clock); it is set before the handle's first call, as the stores require.
type rigOpener func(t *testing.T, now func() time.Time) rigStore

// rigBackend prepares a fresh, empty database of one kind for one test (a
// SQLite file, a PostgreSQL schema, a Redis key prefix), dropped when the test
// ends, and returns how to open handles on it: replicas of one rig share the
// database through separate handles, as separate processes would.
type rigBackend struct {
	name  string
	fresh func(t *testing.T) rigOpener
}

// rigBackends are the stores the recovery tests run on (issue 5: every
// backend). PostgreSQL and Redis are skipped when their URL is unset, unless
// LLM4AGENTS_TEST_REQUIRE_BACKENDS=1.
var rigBackends = []rigBackend{
	{"sqlite", freshRigSQLite},
	{"postgres", freshRigPostgres},
	{"redis", freshRigRedis},
}

// sqliteBackend is the default of rigOpts.backend.
var sqliteBackend = rigBackends[0]

// eachRigBackend runs f once per backend, as subtests named after it.
func eachRigBackend(t *testing.T, f func(t *testing.T, b rigBackend)) {
	t.Helper()
	for _, b := range rigBackends {
		t.Run(b.name, func(t *testing.T) { f(t, b) })
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

// randomHex names a test's schema or key prefix: 16 hex digits, so a
// schema name stays well under PostgreSQL's 63-byte identifier limit.
func randomHex() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// closeOnCleanup closes db when the test ends, failing it if that fails.
func closeOnCleanup(t *testing.T, db rigStore) rigStore {
	t.Cleanup(func() {
		if err := db.Close(); err != nil {
			t.Error(err)
		}
	})
	return db
}

func freshRigSQLite(t *testing.T) rigOpener {
	path := filepath.Join(t.TempDir(), "gw.db")
	return func(t *testing.T, now func() time.Time) rigStore {
		t.Helper()
		db, err := sqlite.Open(t.Context(), path, discard())
		if err != nil {
			t.Fatal(err)
		}
		db.Now = now
		return closeOnCleanup(t, db)
	}
}

// freshRigPostgres creates a schema of its own on the test server, dropped
// when the test ends (after every handle closed: cleanups run last first).
func freshRigPostgres(t *testing.T) rigOpener {
	t.Helper()
	base := backendEnv(t, "LLM4AGENTS_TEST_POSTGRES_DSN")
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("LLM4AGENTS_TEST_POSTGRES_DSN is not a URL: %v", err)
	}
	schema := "l4a_rec_" + randomHex()
	pgAdmin(t, base, "CREATE SCHEMA "+schema)
	t.Cleanup(func() { pgAdmin(t, base, "DROP SCHEMA "+schema+" CASCADE") })
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	dsn := u.String()
	return func(t *testing.T, now func() time.Time) rigStore {
		t.Helper()
		db, err := postgres.Open(t.Context(), dsn, discard())
		if err != nil {
			t.Fatal(err)
		}
		db.Now = now
		return closeOnCleanup(t, db)
	}
}

// freshRigRedis gives the rig a key prefix of its own; its keys are deleted
// when the test ends.
func freshRigRedis(t *testing.T) rigOpener {
	t.Helper()
	base := backendEnv(t, "LLM4AGENTS_TEST_REDIS_URL")
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("LLM4AGENTS_TEST_REDIS_URL is not a URL: %v", err)
	}
	prefix := "l4a-rec-" + randomHex() + ":"
	t.Cleanup(func() { dropRedisPrefix(t, base, prefix) })
	q := u.Query()
	q.Set("key_prefix", prefix)
	u.RawQuery = q.Encode()
	dsn := u.String()
	return func(t *testing.T, now func() time.Time) rigStore {
		t.Helper()
		db, err := redis.Open(t.Context(), dsn, discard())
		if err != nil {
			t.Fatal(err)
		}
		db.Now = now
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
