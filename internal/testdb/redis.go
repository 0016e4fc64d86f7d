package testdb

import (
	"context"
	"net/url"
	"testing"

	goredis "github.com/redis/go-redis/v9"
)

// RedisURL returns a URL of the Redis test server with a fresh key prefix;
// see RedisPrefix.
func RedisURL(tb testing.TB, label string) string {
	tb.Helper()
	u, _ := RedisPrefix(tb, label)
	return u
}

// RedisPrefix returns a URL of the Redis test server whose key_prefix option
// is a fresh prefix, l4a-<label>-<16 random hex digits>:, and that prefix.
// Every key under the prefix is deleted when the test ends, in both forms
// the store writes (prefix… and the hash-tagged {prefix}…). label is as for
// PostgresSchema.
//
// Without the server the test is skipped or fails, as Server says.
func RedisPrefix(tb testing.TB, label string) (rawURL, prefix string) {
	tb.Helper()
	if err := checkLabel(label); err != nil {
		tb.Fatalf("testdb.RedisPrefix: %v", err)
	}
	base := Server(tb, RedisEnv)
	prefix = "l4a-" + label + "-" + randomHex() + ":"
	rawURL, err := withQuery(base, "key_prefix", prefix)
	if err != nil {
		tb.Fatalf("%s: %v", RedisEnv, err)
	}
	tb.Cleanup(func() { dropRedisPrefix(tb, base, prefix) })
	return rawURL, prefix
}

// unlinkBatch is how many keys one UNLINK of dropRedisPrefix deletes.
const unlinkBatch = 1000

// dropRedisPrefix deletes the keys under prefix on the server at base
// (SCAN + UNLINK), in both the plain and the hash-tagged form.
func dropRedisPrefix(tb testing.TB, base, prefix string) {
	tb.Helper()
	u, err := url.Parse(base)
	if err != nil {
		tb.Errorf("delete test keys: %s: %v", RedisEnv, redactURLError(err))
		return
	}
	// go-redis refuses options it does not know, such as a key_prefix
	// left in the environment's URL.
	q := u.Query()
	q.Del("key_prefix")
	u.RawQuery = q.Encode()
	opts, err := goredis.ParseURL(u.String())
	if err != nil {
		tb.Errorf("delete test keys: %s: %v", RedisEnv, redactURLError(err))
		return
	}
	c := goredis.NewClient(opts)
	defer func() { _ = c.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
	defer cancel()
	for _, pattern := range []string{prefix + "*", "{" + prefix + "}*"} {
		var batch []string
		flush := func() {
			if len(batch) > 0 {
				if err := c.Unlink(ctx, batch...).Err(); err != nil {
					tb.Errorf("delete test keys: unlink: %v", err)
				}
				batch = batch[:0]
			}
		}
		iter := c.Scan(ctx, 0, pattern, unlinkBatch).Iterator()
		for iter.Next(ctx) {
			if batch = append(batch, iter.Val()); len(batch) == unlinkBatch {
				flush()
			}
		}
		flush()
		if err := iter.Err(); err != nil {
			tb.Errorf("delete test keys: scan %s: %v", pattern, err)
		}
	}
}
