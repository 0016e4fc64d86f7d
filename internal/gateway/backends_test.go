package gateway_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/internal/store/postgres"
	"github.com/llm4agents/llm4agents/internal/store/redis"
	"github.com/llm4agents/llm4agents/internal/store/sqlite"
	"github.com/llm4agents/llm4agents/internal/testdb"
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

// rigBackends are the stores the recovery tests run on (every
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
	dsn := testdb.PostgresDSN(t, "rec")
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
	dsn := testdb.RedisURL(t, "rec")
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
