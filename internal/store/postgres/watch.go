package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/llm4agents/llm4agents/internal/store"
)

// Key change notifications. RevokeKey and UpdateKey notify the hash of the
// key they changed on a channel of the store's schema, inside the
// statement that changes it, so that the notification is sent when the
// change commits and never for a change that did not (a no-op revocation, a
// refused update). WatchKeys listens on the channel, so that every replica
// can drop the key from its cache (credits.Keys) at once instead of at the
// end of the cache's TTL.

// keysChannel is the SQL expression of the channel key changes are notified
// on: one per schema, so that stores sharing a database (tests, or several
// deployments) do not hear each other's changes. The schema's name is
// hashed so that any name gives a valid identifier of fixed length: 16 + 32
// bytes, under PostgreSQL's 63. It is evaluated by the connection that
// notifies and by the one that listens, from their own search_path, which
// is the DSN's for both.
const keysChannel = `'llm4agents_keys_' || left(encode(sha256(convert_to(current_schema(), 'UTF8')), 'hex'), 32)`

// notifyChanged is a CTE that notifies the hash of every key in the CTE u,
// which must be referenced (MATERIALIZED: it runs once, whole, whatever the
// query reads of it).
const notifyChanged = `notified AS MATERIALIZED (SELECT pg_notify(` + keysChannel + `, key_hash) FROM u)`

const (
	// watchConnectTimeout bounds connecting the listening connection and
	// its LISTEN.
	watchConnectTimeout = 10 * time.Second
	// watchPingEvery is how long the listening connection may stay silent
	// before WatchKeys checks that the server still answers: a connection
	// whose server or network vanished without closing it would otherwise
	// wait for notifications that never come.
	watchPingEvery = 30 * time.Second
	// watchPingTimeout bounds that check.
	watchPingTimeout = 5 * time.Second
	// watchRetryMin and watchRetryMax bound the wait before connecting
	// again after the listening connection broke; it doubles with each
	// failure in a row.
	watchRetryMin = 100 * time.Millisecond
	watchRetryMax = 5 * time.Second
)

// WatchKeys calls changed with the hash of each API key that RevokeKey or
// UpdateKey changes on this store's schema, through any DB value in any
// process, shortly after the change commits, until ctx ends; it then
// returns nil. It holds one connection of its own, outside the pool, which
// LISTENs on the schema's channel. When that connection breaks,
// WatchKeys connects again (waiting 100 ms, doubling up to 5 s, between
// attempts) and, once it listens again, calls lost: changes made
// meanwhile were not notified, so the caller drops everything it kept. It
// also calls lost after a first attempt that failed. It returns
// store.ErrClosed if it finds the DB closed when it would connect; cancel
// ctx before Close.
//
// Anyone who may connect to the database can notify on the channel, so a
// payload that is not a key hash (store.ValidHash) is ignored: the worst a
// notification can do is make the caller drop a cached key early. changed
// and lost run on WatchKeys' goroutine, one at a time; a slow one delays
// the next notification, not a store call.
func (db *DB) WatchKeys(ctx context.Context, changed func(hash string), lost func()) error {
	retry, missed := watchRetryMin, false
	for {
		if db.gate.Closed() {
			return store.ErrClosed
		}
		conn, channel, err := db.listen(ctx)
		if err == nil {
			if missed {
				db.log.InfoContext(ctx, "listening for API key changes again; notifications may have been missed meanwhile")
				lost()
			}
			retry = watchRetryMin
			err = db.receive(ctx, conn, channel, changed)
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), watchPingTimeout)
			_ = conn.Close(cctx) // broken or done with; nothing to keep
			cancel()
		}
		if ctx.Err() != nil {
			return nil //nolint:nilerr // err is the wait that ctx's end interrupted: the watch is done, not failed
		}
		missed = true
		db.log.WarnContext(ctx, "listening for API key changes: connection lost; cached keys bind within their TTL until it is back",
			"err", err, "retry_in", retry)
		t := time.NewTimer(retry)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		retry = min(2*retry, watchRetryMax)
	}
}

// listen opens a connection with the pool's settings and LISTENs on the
// key channel of its schema, which it returns. Its errors carry no
// password.
func (db *DB) listen(ctx context.Context) (_ *pgx.Conn, channel string, err error) {
	ctx, cancel := context.WithTimeout(ctx, watchConnectTimeout)
	defer cancel()
	cfg := db.pool.Config().ConnConfig // a copy
	// A watch ending (ctx) interrupts its wait for a notification at once.
	// The pool's handler would send the server a cancel request first and
	// wait up to cancelGrace for an answer that an idle connection never
	// gives; here there is no statement to stop.
	cfg.BuildContextWatcherHandler = func(c *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.DeadlineContextWatcherHandler{Conn: c.Conn()}
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, "", db.mapErr(ctx, err)
	}
	defer func() {
		if err != nil {
			_ = conn.Close(context.WithoutCancel(ctx))
		}
	}()
	if err := conn.QueryRow(ctx, `SELECT `+keysChannel).Scan(&channel); err != nil {
		return nil, "", db.mapErr(ctx, err)
	}
	if _, err := conn.Exec(ctx, `LISTEN `+pgx.Identifier{channel}.Sanitize()); err != nil {
		return nil, "", db.mapErr(ctx, err)
	}
	return conn, channel, nil
}

// receive calls changed for each key hash notified on channel until ctx
// ends or conn breaks, checking a silent connection every watchPingEvery.
func (db *DB) receive(ctx context.Context, conn *pgx.Conn, channel string, changed func(hash string)) error {
	for {
		wctx, cancel := context.WithTimeout(ctx, watchPingEvery)
		n, err := conn.WaitForNotification(wctx)
		cancel()
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case err == nil && n.Channel == channel && store.ValidHash(n.Payload):
			changed(n.Payload)
		case err == nil:
			db.log.DebugContext(ctx, "ignored a notification that is not a key hash", "bytes", len(n.Payload))
		case errors.Is(err, context.DeadlineExceeded) && !conn.IsClosed():
			// Silent for watchPingEvery: the connection stays usable
			// after a timed-out wait, and must still answer.
			pctx, cancel := context.WithTimeout(ctx, watchPingTimeout)
			err := conn.Ping(pctx)
			cancel()
			if err != nil {
				return db.mapErr(ctx, err)
			}
		default:
			return db.mapErr(ctx, err)
		}
	}
}
