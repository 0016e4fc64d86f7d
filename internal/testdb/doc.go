// Package testdb gives tests a database of their own on the shared
// PostgreSQL and Redis test servers: a fresh, empty schema (PostgresDSN) or
// a fresh key prefix (RedisURL), created for one test and dropped when it
// ends, so tests running at the same time, or one after another, never see
// each other's rows or keys.
//
// The servers are named by LLM4AGENTS_TEST_POSTGRES_DSN and
// LLM4AGENTS_TEST_REDIS_URL. A test that needs one whose variable is unset
// is skipped, or fails when LLM4AGENTS_TEST_REQUIRE_BACKENDS=1 (CI), so a
// missing server is never mistaken for a pass there.
//
// This package is test infrastructure: only _test.go files import it, by
// convention (Go has no way to say so). It is an ordinary package rather than
// a _test.go file so that every package's tests share one copy. Its helpers
// call tb.Fatal on any error, and the errors they report never quote a
// password from the servers' URLs.
package testdb
