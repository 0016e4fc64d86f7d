package facilitator_test

import (
	"path/filepath"
	"testing"

	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/internal/store/postgres"
	"github.com/llm4agents/llm4agents/internal/store/redis"
	"github.com/llm4agents/llm4agents/internal/store/sqlite"
	"github.com/llm4agents/llm4agents/internal/testdb"
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
	dsn := testdb.PostgresDSN(t, "fac")
	return func(t *testing.T) settleStore {
		t.Helper()
		db, err := postgres.Open(t.Context(), dsn, discard())
		if err != nil {
			t.Fatal(err)
		}
		return closeOnCleanup(t, db)
	}
}

// freshRedis gives the test a key prefix of its own; its keys are deleted
// when the test ends.
func freshRedis(t *testing.T) storeOpener {
	t.Helper()
	dsn := testdb.RedisURL(t, "fac")
	return func(t *testing.T) settleStore {
		t.Helper()
		db, err := redis.Open(t.Context(), dsn, discard())
		if err != nil {
			t.Fatal(err)
		}
		return closeOnCleanup(t, db)
	}
}
