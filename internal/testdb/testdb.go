package testdb

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"testing"
	"time"
)

// The environment variables this package reads.
const (
	// PostgresEnv names the PostgreSQL test server, as a DSN (URL or
	// key=value form) that may create schemas.
	PostgresEnv = "LLM4AGENTS_TEST_POSTGRES_DSN"
	// RedisEnv names the Redis test server, as a redis:// or rediss:// URL.
	RedisEnv = "LLM4AGENTS_TEST_REDIS_URL"
	// RequireEnv, set to 1, turns a skip for an unset server into a failure.
	RequireEnv = "LLM4AGENTS_TEST_REQUIRE_BACKENDS"
)

// adminTimeout bounds one statement, connection or clean-up of this package.
// Clean-ups run after tb.Context() is cancelled, so they use a context of
// their own with this deadline.
const adminTimeout = 30 * time.Second

// maxLabel bounds a label so that a schema name (l4a_<label>_<16 hex>) stays
// under PostgreSQL's 63-byte identifier limit and a key prefix
// (l4a-<label>-<16 hex>:) under the Redis store's 64 bytes.
const maxLabel = 32

// Server returns the test server named by env (PostgresEnv or RedisEnv),
// skipping the test when the variable is unset, or failing it when
// RequireEnv is 1.
func Server(tb testing.TB, env string) string {
	tb.Helper()
	v := os.Getenv(env)
	if v == "" {
		if os.Getenv(RequireEnv) == "1" {
			tb.Fatalf("%s is unset and %s=1", env, RequireEnv)
		}
		tb.Skipf("%s is unset", env)
	}
	return v
}

// checkLabel refuses a label that would not make a plain (unquoted)
// PostgreSQL identifier and a Redis key prefix the store accepts: lower-case
// letters and digits only, 1 to maxLabel of them.
func checkLabel(label string) error {
	if label == "" {
		return errors.New("label is empty")
	}
	if len(label) > maxLabel {
		return fmt.Errorf("label is %d bytes long, over %d", len(label), maxLabel)
	}
	for _, r := range label {
		if (r < 'a' || r > 'z') && (r < '0' || r > '9') {
			return fmt.Errorf("label %q has the character %q; use a-z and 0-9", label, r)
		}
	}
	return nil
}

// randomHex is 16 random hex digits: a name no other test picks.
func randomHex() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand crashes the program instead)
	return hex.EncodeToString(b[:])
}

// withQuery returns rawURL with the query option key=value set. A parse
// error is returned without the URL, which may hold a password.
func withQuery(rawURL, key, value string) (string, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", redactURLError(err)
	}
	q := u.Query()
	q.Set(key, value)
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// redactURLError drops the URL a *url.Error quotes in full, password
// included, and keeps what is wrong with it.
func redactURLError(err error) error {
	if ue, ok := errors.AsType[*url.Error](err); ok {
		return fmt.Errorf("%s URL: %w", ue.Op, ue.Err)
	}
	return err
}
