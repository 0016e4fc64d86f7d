package redis

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/internal/store/lines"
)

const (
	// DefaultKeyPrefix is the key prefix when the URL names none.
	DefaultKeyPrefix = "l4a:"
	// maxKeyPrefix bounds key_prefix: it is repeated in every key.
	maxKeyPrefix = 64
	// expiryMargin is how long after a payment claim's ExpiresAt Redis keeps
	// its key. The store already counts the claim as absent from ExpiresAt on;
	// the margin only keeps Redis from dropping it early when the store's
	// clock and the server's differ a little (a DB.Now that is not the
	// server's clock).
	expiryMargin = 5 * time.Minute
	// maxListLimit bounds what one UnresolvedSettlements call returns, and
	// how many names of a legacy set one listing drains: the whole listing
	// runs in one script, during which Redis serves no one else.
	maxListLimit = 10_000
)

// DB is a Redis store. Its methods are safe for concurrent use, and any number
// of DB values, in one process or in several, may share one Redis database
// and key prefix: every operation is one Lua script, which Redis runs
// atomically.
type DB struct {
	// Now, if not nil, is the clock leases and expiries are judged by and
	// records are stamped with, to the millisecond; each script receives its
	// time as an argument. Nil (what Open sets) means the Redis server's own
	// clock (TIME, read inside each script), so that replicas whose clocks
	// disagree still agree on every lease. Tests set it before the first call
	// and must not change the field afterwards (the time it returns may
	// change).
	Now func() time.Time

	client *goredis.Client
	keys   keys
	log    *slog.Logger
	// password is kept only to scrub it from error texts.
	password string
	gate     store.Gate
	// lines batches concurrent claims (lines.go).
	lines *lines.Set[*scriptCall]
}

// keys names the Redis keys of one store. Every key starts with the hash tag
// "{" + key prefix + "}", so all keys of a store live in one cluster slot and
// every script stays single-slot; stores with different prefixes are
// independent.
type keys struct{ tag string }

func newKeys(prefix string) keys { return keys{tag: "{" + prefix + "}"} }

func (k keys) settlement(key string) string { return k.tag + "settlement:" + key }
func (k keys) settlementPrefix() string     { return k.tag + "settlement:" }
func (k keys) settlementFence() string      { return k.tag + "settlement-fence" }
func (k keys) payment(key string) string    { return k.tag + "payment:" + key }
func (k keys) paymentFence() string         { return k.tag + "payment-fence" }

// The reconcilers' lists of settlement records (settlements.go, reorg.go)
// are sorted sets kept twice: a record is in the set of its network (the
// network's name after the prefix), which that network's reconciler
// reads, and in the set of every network, which the operator's view
// (store.AllNetworks) reads. Versions before per-network sets kept one set
// of every network under the legacy name; the listing scripts drain it
// (settlementLua's drain), so that the records such a version claimed or
// settled, before an upgrade or during one, are still found.
func (k keys) unresolvedAll() string              { return k.tag + "settlement-unresolved-all" }
func (k keys) unresolvedNetPrefix() string        { return k.tag + "settlement-unresolved:" }
func (k keys) unresolvedOf(network string) string { return k.unresolvedNetPrefix() + network }
func (k keys) unresolvedLegacy() string           { return k.tag + "settlement-unresolved" }
func (k keys) recentAll() string                  { return k.tag + "settlement-recent-all" }
func (k keys) recentNetPrefix() string            { return k.tag + "settlement-recent:" }
func (k keys) recentOf(network string) string     { return k.recentNetPrefix() + network }
func (k keys) recentLegacy() string               { return k.tag + "settlement-recent" }

// Open connects to the Redis server at rawURL, a redis:// or rediss:// URL as
// go-redis's ParseURL reads it (user, password, host, port, database number
// as the path, and its query options), plus the option key_prefix (default
// DefaultKeyPrefix): 1 to 64 bytes of letters, digits and "_.:-". It checks
// the server answers and loads the scripts, within ctx's deadline or
// store.DefaultTimeout. A nil log discards log output.
//
// The URL's password never appears in errors or logs. The option max_retries
// is refused: the store never retries a script whose reply was lost (see the
// package comment).
func Open(ctx context.Context, rawURL string, log *slog.Logger) (_ *DB, err error) {
	opts, prefix, err := parseURL(rawURL)
	if err != nil {
		return nil, fmt.Errorf("redis: open: %w", err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("component", "store/redis")
	defer store.Wrap(&err, "redis", "open %s", opts.Addr)

	// A script whose reply is lost may have run: resending it could claim
	// twice or report a release as not found. Errors go to the caller, who
	// fails closed; a fresh call reads the record as it stands.
	opts.MaxRetries = -1
	// Deadlines come from the caller's context (store.DefaultTimeout at most).
	opts.ContextTimeoutEnabled = true
	opts.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	db := &DB{client: goredis.NewClient(opts), keys: newKeys(prefix), log: log, password: opts.Password}
	db.lines = newLines(db)
	defer func() {
		if err != nil {
			_ = db.client.Close()
		}
	}()

	ctx, cancel := context.WithTimeout(ctx, store.DefaultTimeout)
	defer cancel()
	if err := db.client.Ping(ctx).Err(); err != nil {
		return nil, fmt.Errorf("ping: %w", db.mapErr(ctx, err))
	}
	for _, s := range allScripts {
		if err := s.Load(ctx, db.client).Err(); err != nil {
			return nil, fmt.Errorf("load scripts: %w", db.mapErr(ctx, err))
		}
	}
	db.checkDurability(ctx)
	log.InfoContext(ctx, "opened redis store", "addr", opts.Addr, "db", opts.DB, "key_prefix", prefix, "tls", opts.TLSConfig != nil)
	return db, nil
}

// checkDurability warns about server settings under which Redis may drop
// keys it acknowledged (see the package comment). The server may refuse
// CONFIG to this user; then nothing is said beyond a debug line.
func (db *DB) checkDurability(ctx context.Context) {
	get := func(name string) (string, bool) {
		m, err := db.client.ConfigGet(ctx, name).Result()
		if err != nil {
			db.log.DebugContext(ctx, "cannot read server config", "name", name, "err", db.mapErr(ctx, err))
			return "", false
		}
		v, ok := m[name]
		return v, ok
	}
	if v, ok := get("maxmemory-policy"); ok && v != "noeviction" {
		db.log.WarnContext(ctx, "redis may evict keys under memory pressure, and an evicted claim lets an authorization through again: set maxmemory-policy noeviction",
			"maxmemory_policy", v)
	}
	aof, ok1 := get("appendonly")
	fsync, ok2 := get("appendfsync")
	if ok1 && ok2 && (aof != "yes" || fsync != "always") {
		db.log.WarnContext(ctx, "redis may lose acknowledged writes on a crash: use appendonly yes and appendfsync always for the settlement store",
			"appendonly", aof, "appendfsync", fsync)
	}
}

// parseURL splits rawURL into go-redis options and the key prefix. Its
// errors never contain the URL's password.
func parseURL(rawURL string) (*goredis.Options, string, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, "", fmt.Errorf("bad URL %s", describeParseError(rawURL))
	}
	if u.Scheme != "redis" && u.Scheme != "rediss" {
		return nil, "", fmt.Errorf("URL scheme %q is not redis or rediss", u.Scheme)
	}
	if u.Opaque != "" {
		return nil, "", errors.New("URL has no host part (want redis://host:port/db)")
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return nil, "", fmt.Errorf("URL query: %w", err)
	}
	prefix := DefaultKeyPrefix
	if vs, ok := q["key_prefix"]; ok {
		if len(vs) != 1 {
			return nil, "", fmt.Errorf("key_prefix given %d times", len(vs))
		}
		prefix = vs[0]
		delete(q, "key_prefix")
	}
	if err := checkKeyPrefix(prefix); err != nil {
		return nil, "", err
	}
	if _, ok := q["max_retries"]; ok {
		return nil, "", errors.New("max_retries is not supported: the store never retries a script whose reply was lost")
	}
	u.RawQuery = q.Encode()
	u.Fragment, u.RawFragment = "", ""
	opts, err := goredis.ParseURL(u.String())
	if err != nil {
		// go-redis names the scheme, path or query option at fault, never
		// the user info; scrub it all the same.
		return nil, "", errors.New(scrub(strings.TrimPrefix(err.Error(), "redis: "), password(u)))
	}
	return opts, prefix, nil
}

// describeParseError says what url.Parse found wrong with rawURL without
// showing its user info: it parses the URL again with the user info
// replaced, and reports that error, which shows only the redacted URL.
func describeParseError(rawURL string) string {
	redacted := rawURL
	if i := strings.Index(redacted, "://"); i >= 0 {
		rest := redacted[i+3:]
		end := strings.IndexAny(rest, "/?#")
		if end < 0 {
			end = len(rest)
		}
		if at := strings.LastIndex(rest[:end], "@"); at >= 0 {
			redacted = redacted[:i+3] + "xxxxx@" + rest[at+1:]
		}
	}
	if redacted == rawURL && strings.Contains(rawURL, "@") {
		// Not a form we can redact reliably: say nothing of the text.
		return "(not shown: it may contain a password)"
	}
	if _, err := url.Parse(redacted); err != nil {
		return "(" + err.Error() + ")"
	}
	return "(in its user info, not shown)"
}

func password(u *url.URL) string {
	if u.User == nil {
		return ""
	}
	p, _ := u.User.Password()
	return p
}

// checkKeyPrefix admits 1 to maxKeyPrefix bytes of [A-Za-z0-9_.:-]: no
// braces, which would change the hash tag, and no glob characters, so the
// prefix can be matched with SCAN MATCH as it is.
func checkKeyPrefix(p string) error {
	if p == "" {
		return errors.New("key_prefix is empty")
	}
	if len(p) > maxKeyPrefix {
		return fmt.Errorf("key_prefix is %d bytes long, over %d", len(p), maxKeyPrefix)
	}
	for _, r := range p {
		switch {
		case 'a' <= r && r <= 'z', 'A' <= r && r <= 'Z', '0' <= r && r <= '9', strings.ContainsRune("_.:-", r):
		default:
			return fmt.Errorf("key_prefix %q has the character %q; use letters, digits and _.:-", p, r)
		}
	}
	return nil
}

// Close closes the connection pool. Calls in progress may fail.
func (db *DB) Close() error {
	if !db.gate.Close() {
		return nil
	}
	if err := db.client.Close(); err != nil {
		return fmt.Errorf("redis: close: %s", scrub(err.Error(), db.password))
	}
	return nil
}

// Ping checks that the server answers, within ctx's deadline or
// store.DefaultTimeout.
func (db *DB) Ping(ctx context.Context) (err error) {
	defer store.Wrap(&err, "redis", "ping")
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	return db.mapErr(ctx, db.client.Ping(ctx).Err())
}

// nowArg is ARGV[1] of the scripts: the store's time from db.Now in unix
// milliseconds, or "" for the server's clock.
func (db *DB) nowArg() string {
	if db.Now == nil {
		return ""
	}
	return strconv.FormatInt(db.Now().UnixMilli(), 10)
}

// run runs s, within ctx's deadline or store.DefaultTimeout, and returns its
// reply's status word and the rest of the reply.
func (db *DB) run(ctx context.Context, s *goredis.Script, keys []string, args ...any) (string, []any, error) {
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return "", nil, err
	}
	defer cancel()
	v, err := s.Run(ctx, db.client, keys, args...).Result()
	return db.reply(ctx, v, err)
}

// reply splits a script's reply into its status and the rest.
func (db *DB) reply(ctx context.Context, v any, err error) (string, []any, error) {
	if err != nil {
		return "", nil, db.mapErr(ctx, err)
	}
	reply, ok := v.([]any)
	if !ok || len(reply) == 0 {
		return "", nil, fmt.Errorf("unexpected script reply %T", v)
	}
	status, ok := reply[0].(string)
	if !ok {
		return "", nil, fmt.Errorf("unexpected script status %T", reply[0])
	}
	return status, reply[1:], nil
}

// outcome turns the reply of a script that answers ok, not_found or fenced
// into nil or the matching sentinel.
func outcome(status string, rest []any) error {
	msg := "no detail"
	if len(rest) > 0 {
		if s, ok := rest[0].(string); ok {
			msg = s
		}
	}
	switch status {
	case "ok":
		return nil
	case "not_found":
		return fmt.Errorf("%s: %w", msg, store.ErrNotFound)
	case "fenced":
		return fmt.Errorf("%s: %w", msg, store.ErrFenced)
	default:
		return fmt.Errorf("unexpected script status %q", status)
	}
}

// mapErr turns what go-redis returns into errors callers may inspect: context
// errors pass through wrapped (with the driver's text), a closed client is
// said so, and anything else keeps only its text, with the password scrubbed,
// so that no go-redis type leaves this package.
func (db *DB) mapErr(ctx context.Context, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, goredis.ErrClosed):
		return store.ErrClosed
	case ctx.Err() != nil:
		if errors.Is(err, ctx.Err()) {
			return ctx.Err()
		}
		return fmt.Errorf("%w (%s)", ctx.Err(), scrub(err.Error(), db.password))
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	default:
		return errors.New(scrub(err.Error(), db.password))
	}
}

// scrub replaces every occurrence of password in s.
func scrub(s, password string) string {
	if password == "" {
		return s
	}
	return strings.ReplaceAll(s, password, "xxxxx")
}
