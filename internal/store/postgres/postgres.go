package postgres

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/internal/store/lines"
)

const (
	// openTimeout bounds Open, connecting and migrating included, when ctx
	// has no earlier deadline.
	openTimeout = 30 * time.Second
	// defaultMaxConns is the pool size when the DSN sets no pool_max_conns:
	// enough for the 32 concurrent callers the gateway is measured with to
	// share commits (see doc.go), few enough that several replicas, each
	// with a gateway and a facilitator store, stay well under the server's
	// default max_connections of 100.
	defaultMaxConns = 16
	// claimAttempts bounds how often a claim that lost to a record which
	// then vanished (released or purged between two statements) tries again.
	claimAttempts = 8
	// defaultConnectTimeout bounds one connection attempt when the DSN sets
	// no connect_timeout. A pool keeps connecting in the background after
	// the caller's context ends, holding a pool slot; pgx's own default is
	// two minutes.
	defaultConnectTimeout = 10 * time.Second
	// cancelGrace is how long a statement whose context ended may take to
	// answer the cancel request sent for it before the connection is closed
	// under it. A live server answers within milliseconds; the bound only
	// matters when the server or the network is gone, and it is then how
	// long past its context's end the caller waits.
	cancelGrace = 2 * time.Second
)

// DB is a PostgreSQL store. Its methods are safe for concurrent use, and any
// number of DB values, in any number of processes, may share one database
// (and schema): every decision is taken by the server inside one statement.
type DB struct {
	// Now, when set, is the clock leases are judged by and records are
	// stamped with, to the millisecond, instead of the server's clock. Open
	// leaves it nil: production uses the server's clock, so replicas with
	// skewed clocks agree on every lease. Tests set it before the first call
	// and must not change the field afterwards (the time it returns may
	// change). The same SQL runs either way: the time is a
	// nullable parameter that falls back to the server's clock.
	Now func() time.Time

	pool   *pgxpool.Pool
	log    *slog.Logger
	secret string // the DSN's password, scrubbed from every error text
	gate   store.Gate

	// held remembers the lines of the holds this DB placed until it resolves
	// them (ledger.go, "Hold lines").
	heldMu sync.Mutex
	held   map[string]heldLine

	// lines batches concurrent claims and ledger writes (lines.go).
	lines *lines.Set[*lineWrite]
}

// Open connects to the PostgreSQL database dsn names and brings the schema
// its search_path selects up to date. dsn is a postgres:// or postgresql://
// URL or key=value settings, as libpq and pgx accept them; unknown keys are
// sent to the server as run-time parameters (search_path=... selects the
// schema), and pool_max_conns sizes the pool (default 16). A nil log discards
// log output.
//
// Open fails, within ctx's deadline (30 s when ctx has none), if the server
// cannot be reached, refuses the login or runs a schema newer than this
// binary's. Neither its errors nor its log lines carry the DSN's password.
func Open(ctx context.Context, dsn string, log *slog.Logger) (_ *DB, err error) {
	defer store.Wrap(&err, "postgres", "open")
	cfg, secret, err := parseConfig(dsn)
	if err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("component", "store/postgres")
	ctx, cancel := context.WithTimeout(ctx, openTimeout)
	defer cancel()

	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, errors.New(scrub(err.Error(), secret))
	}
	db := &DB{pool: pool, log: log, secret: secret, held: map[string]heldLine{}}
	db.lines = newLines(db)
	defer func() {
		if err != nil {
			_ = db.Close()
		}
	}()
	if err := db.migrate(ctx); err != nil {
		return nil, err
	}
	if err := db.checkDurability(ctx); err != nil {
		return nil, err
	}
	return db, nil
}

// parseConfig parses dsn into a pool configuration and returns the password
// it holds (empty if none). Its errors never carry the DSN's text: pgx
// redacts passwords on a best-effort basis only, and a malformed DSN is
// exactly where that can fail.
func parseConfig(dsn string) (*pgxpool.Config, string, error) {
	if strings.TrimSpace(dsn) == "" {
		return nil, "", errors.New("empty DSN")
	}
	if scheme, _, ok := strings.Cut(dsn, "://"); ok && !strings.ContainsAny(scheme, " =") {
		switch {
		case scheme == "postgres", scheme == "postgresql":
		case uriScheme.MatchString(scheme) && len(scheme) <= 20:
			return nil, "", fmt.Errorf("DSN scheme %q: want postgres:// or postgresql://", scheme)
		default: // not a scheme: quoting it could quote a password
			return nil, "", errors.New("invalid DSN: want a postgres:// or postgresql:// URL or key=value settings")
		}
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, "", fmt.Errorf("invalid DSN: %s", scrubAll(parseErrorReason(err), dsn))
	}
	if !strings.Contains(dsn, "pool_max_conns") {
		cfg.MaxConns = defaultMaxConns
	}
	if cfg.ConnConfig.ConnectTimeout <= 0 {
		cfg.ConnConfig.ConnectTimeout = defaultConnectTimeout
	}
	cfg.ConnConfig.BuildContextWatcherHandler = cancelOnContextEnd
	rp := cfg.ConnConfig.RuntimeParams
	if rp["application_name"] == "" {
		rp["application_name"] = "llm4agents"
	}
	// Every statement is written for READ COMMITTED (a conflicting claim
	// waits for the row and re-reads it); a server or role defaulting to
	// SERIALIZABLE would make them fail with serialization errors instead.
	rp["default_transaction_isolation"] = "read committed"
	return cfg, cfg.ConnConfig.Password, nil
}

// cancelOnContextEnd makes a statement whose context ends stop on the
// server, not only in the client. pgx's default closes the socket, and the
// server does not notice a closed socket while a statement waits for a row
// lock: the statement goes on once the lock is free and, in an implicit
// transaction, commits, so a ClaimPayment that returned a context error
// could still have claimed. A cancel request (sent at once over a second
// connection) interrupts the statement where it waits; the server rolls it
// back and answers 57014, and the connection stays usable. The socket is
// closed only if no answer comes within cancelGrace.
//
// A window remains: a statement that has already committed when the cancel
// arrives stays committed, and if the answer is lost (cancelGrace passes,
// the network fails) the caller gets an error for a write that may have
// happened. Callers therefore treat every error from a write as "outcome
// unknown", never as "nothing happened": a claim stays leased until its
// lease ends, and the chain (authorizationState, the reconciler) decides
// whether an authorization was spent.
func cancelOnContextEnd(c *pgconn.PgConn) ctxwatch.Handler {
	return &pgconn.CancelRequestContextWatcherHandler{Conn: c, DeadlineDelay: cancelGrace}
}

// parseErrorReason returns what pgx says is wrong with a DSN, without the
// DSN itself. The underlying error is kept only when it quotes nothing: a
// *url.Error quotes the whole URL, password included, and others quote
// parts of the DSN (missing "=" after a key), which a malformed DSN can
// make part of its password; the fixed ones ("sslmode is invalid") help.
func parseErrorReason(err error) string {
	const unknown = "not a postgres:// URL or key=value settings"
	var pe *pgconn.ParseConfigError
	if !errors.As(err, &pe) {
		return unknown
	}
	bare := *pe
	bare.ConnString = "" // Error() then reads "cannot parse ``: <reason>[ (<underlying error>)]"
	reason, ok := strings.CutPrefix(bare.Error(), "cannot parse ``: ")
	if !ok {
		return unknown
	}
	if inner := pe.Unwrap(); inner != nil {
		if reason, ok = strings.CutSuffix(reason, " ("+inner.Error()+")"); !ok {
			return unknown
		}
		var ue *url.Error
		if !errors.As(inner, &ue) && !strings.Contains(inner.Error(), `"`) {
			reason += " (" + inner.Error() + ")"
		}
	}
	return reason
}

// uriScheme is what a URL scheme may be (RFC 3986).
var uriScheme = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*$`)

// Password-looking parts of a DSN, for scrubAll: a URL's userinfo password,
// password= and sslpassword= settings, quoted or not.
var (
	kvPassword  = regexp.MustCompile(`(?i)(?:ssl)?password\s*=\s*('(?:[^'\\]|\\.)*'|[^\s&]*)`)
	urlPassword = regexp.MustCompile(`://[^:/@]*:([^@]*)@`)
)

// scrubAll removes from text everything in dsn that may be a password, for
// errors about a DSN that may not parse.
func scrubAll(text, dsn string) string {
	var secrets []string
	if u, err := url.Parse(dsn); err == nil && u.User != nil {
		if pw, ok := u.User.Password(); ok {
			secrets = append(secrets, pw, url.QueryEscape(pw), url.PathEscape(pw))
		}
	}
	for _, m := range urlPassword.FindAllStringSubmatch(dsn, -1) {
		secrets = append(secrets, m[1])
	}
	for _, m := range kvPassword.FindAllStringSubmatch(dsn, -1) {
		secrets = append(secrets, m[1], strings.Trim(m[1], "'"))
		if v, err := url.QueryUnescape(m[1]); err == nil {
			secrets = append(secrets, v)
		}
	}
	for _, s := range secrets {
		text = scrub(text, s)
	}
	return text
}

// scrub replaces every occurrence of secret in text. Secrets shorter than
// three bytes are left alone: replacing every "a" of a message would garble
// it, and no driver error quotes a password anyway; scrubbing is the second
// line of defence.
func scrub(text, secret string) string {
	if len(secret) < 3 {
		return text
	}
	return strings.ReplaceAll(text, secret, "xxxxx")
}

// Close closes every connection, waiting for the statements in flight.
func (db *DB) Close() error {
	if db.gate.Close() {
		db.pool.Close()
	}
	return nil
}

// Ping checks that the server answers, for a readiness probe. It fails with
// the ctx error (store.DefaultTimeout when ctx has no earlier deadline).
func (db *DB) Ping(ctx context.Context) (err error) {
	defer store.Wrap(&err, "postgres", "ping")
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	return db.mapErr(ctx, db.pool.Ping(ctx))
}

// nowExpr is the time of a statement in unix milliseconds: parameter $1 when
// not NULL (DB.Now), else the server's clock. Statements evaluate it once,
// in a MATERIALIZED CTE, so every decision of one statement sees one time.
const nowExpr = `COALESCE($1::bigint, floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint)`

// withNow starts a statement with the CTE n holding nowExpr as n.ms.
const withNow = `WITH n AS MATERIALIZED (SELECT ` + nowExpr + ` AS ms) `

// nowArg is the value for $1 of a statement using nowExpr: nil (the server's
// clock) unless DB.Now is set. Each operation takes it once, so the
// statements of one operation share one time under a test clock.
func (db *DB) nowArg() *int64 {
	if db.Now == nil {
		return nil
	}
	ms := db.Now().UnixMilli()
	return &ms
}

// mapErr turns what pgx returns into errors callers may inspect:
// pgx.ErrNoRows becomes store.ErrNotFound, an error while ctx is done
// becomes ctx's error, and everything else keeps only its text, with the
// password scrubbed, so that no pgx or pgconn type leaves this package.
func (db *DB) mapErr(ctx context.Context, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, pgx.ErrNoRows):
		return store.ErrNotFound
	case ctx.Err() != nil:
		// pgx interrupts a statement once ctx is done.
		return fmt.Errorf("%w (%s)", ctx.Err(), scrub(err.Error(), db.secret))
	case db.gate.Closed():
		return fmt.Errorf("%w (%s)", store.ErrClosed, scrub(err.Error(), db.secret))
	default:
		return errors.New(scrub(err.Error(), db.secret))
	}
}

// collect reads every row of rows with scan.
func collect[T any](rows pgx.Rows, scan func(pgx.Row) (T, error)) ([]T, error) {
	defer rows.Close() // rows.Err reports what iterating hit
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

var (
	_ store.Settlements  = (*DB)(nil)
	_ store.StagedLister = (*DB)(nil)
)
