package sqlite_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/internal/store/storetest"
)

// TestKeys runs the keys conformance suite with two DB values on one
// temporary file, as two processes would share it.
func TestKeys(t *testing.T) {
	storetest.RunKeys(t, func(t *testing.T, now func() time.Time) (a, b store.Keys) {
		path := filepath.Join(t.TempDir(), "llm4agents.db")
		a2 := open(t, path, now)
		ensureKeysSchema(t, path)
		return a2, open(t, path, now)
	})
}

// ensureKeysSchema creates the keys tables when the embedded migrations do
// not have them yet (the keys migration waits for its number: see
// keysSchema); once they do, it does nothing.
func ensureKeysSchema(tb testing.TB, path string) {
	tb.Helper()
	db := raw(tb, path)
	var n int
	if err := db.QueryRowContext(tb.Context(), `SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'api_keys'`).Scan(&n); err != nil {
		tb.Fatal(err)
	}
	if n == 0 {
		if _, err := db.ExecContext(tb.Context(), keysSchema); err != nil {
			tb.Fatal(err)
		}
	}
}

// keysSchema is a copy of the keys migration's up file, for as long as it is
// not among the embedded migrations; delete it and ensureKeysSchema then.
const keysSchema = `
CREATE TABLE api_keys (
    key_id          TEXT   NOT NULL PRIMARY KEY,
    key_hash        TEXT   NOT NULL,
    owner           TEXT   NOT NULL,
    name            TEXT   NOT NULL,
    total_cap       BIGINT NOT NULL CHECK (total_cap >= 0),
    period_cap      BIGINT NOT NULL CHECK (period_cap >= 0),
    period_ms       BIGINT NOT NULL CHECK (period_ms >= 0),
    expires_at_ms   BIGINT NOT NULL CHECK (expires_at_ms >= 0),
    models          TEXT   NOT NULL,
    rate_per_minute BIGINT NOT NULL CHECK (rate_per_minute >= 0),
    created_at_ms   BIGINT NOT NULL,
    revoked_at_ms   BIGINT NOT NULL DEFAULT 0 CHECK (revoked_at_ms >= 0)
);
CREATE UNIQUE INDEX api_keys_hash ON api_keys (key_hash);
CREATE INDEX api_keys_owner ON api_keys (owner, created_at_ms, key_id);
CREATE TABLE auth_nonces (
    nonce         TEXT   NOT NULL PRIMARY KEY,
    expires_at_ms BIGINT NOT NULL
);
CREATE INDEX auth_nonces_expiry ON auth_nonces (expires_at_ms);
CREATE TABLE auth_sessions (
    session_hash  TEXT   NOT NULL PRIMARY KEY,
    owner         TEXT   NOT NULL,
    created_at_ms BIGINT NOT NULL,
    expires_at_ms BIGINT NOT NULL
);
CREATE INDEX auth_sessions_expiry ON auth_sessions (expires_at_ms);
`
