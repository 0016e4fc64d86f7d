package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/llm4agents/llm4agents/internal/store"
)

// API keys, sign-in nonces and sessions (store.Keys), in the tables of
// migration 0006. Only hashes of secrets reach the database (key_hash,
// session_hash); the caller hashes. Every operation is one statement except
// CreateKey, whose per-owner limit needs a count and an insert that no other
// creation for the owner interleaves with (see createKey). Times are the
// server's clock or DB.Now, to the millisecond.

const keyColumns = `key_id, key_hash, owner, name, total_cap, period_cap, period_ms, expires_at_ms, models,
    rate_per_minute, tokens_per_minute, created_at_ms, revoked_at_ms`

// ownerKeysLock serializes the key creations of one owner ($1) in one
// schema, for the length of the transaction. READ COMMITTED gives each
// statement a snapshot taken when it starts, so a count taken after the
// lock is granted sees every key created under it before; without the lock
// two creations could both count MaxKeysPerOwner-1 and both insert. A
// collision of two owners' hashes only makes them wait for each other.
const ownerKeysLock = `SELECT pg_advisory_xact_lock(hashtextextended('llm4agents/store/postgres keys ' || current_schema() || ' ' || $1, 0))`

// createKey inserts the key unless the owner has $13 live keys or $14 keys
// in all, or a key with its id or hash exists, and always returns one row:
// the owner's live and total key counts before, then the key if inserted,
// else NULLs.
const createKey = withNow + `, c AS (SELECT count(*) FILTER (WHERE revoked_at_ms = 0) AS live, count(*) AS keys FROM api_keys WHERE owner = $4),
i AS (
    INSERT INTO api_keys (` + keyColumns + `)
    SELECT $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, n.ms, 0
    FROM n, c
    WHERE c.live < $13 AND c.keys < $14
    ON CONFLICT DO NOTHING
    RETURNING ` + keyColumns + `)
SELECT c.live, c.keys, i.* FROM c LEFT JOIN i ON true`

// CreateKey implements store.Keys.
func (db *DB) CreateKey(ctx context.Context, k store.APIKey) (_ store.APIKey, err error) {
	defer store.Wrap(&err, "postgres", "create key %q", k.ID)
	if err := k.Validate(); err != nil {
		return store.APIKey{}, err
	}
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return store.APIKey{}, err
	}
	defer cancel()

	var expires int64 // 0 is "never"
	if !k.ExpiresAt.IsZero() {
		expires = max(k.ExpiresAt.UnixMilli(), 1)
	}
	var out store.APIKey
	err = db.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, ownerKeysLock, k.Owner); err != nil {
			return err
		}
		var live, all int64
		got, found, err := scanKey(tx.QueryRow(ctx, createKey, db.nowArg(),
			k.ID, k.Hash, k.Owner, k.Name, k.TotalCap, k.PeriodCap, k.Period.Milliseconds(), expires,
			strings.Join(k.Models, " "), k.RatePerMinute, k.TokensPerMinute, store.MaxKeysPerOwner, store.MaxStoredKeysPerOwner), &live, &all)
		switch {
		case err != nil:
			return err
		case found:
			out = got
			return nil
		case live >= store.MaxKeysPerOwner:
			return fmt.Errorf("owner has %d live keys: %w", live, store.ErrConflict)
		case all >= store.MaxStoredKeysPerOwner:
			return fmt.Errorf("owner has %d keys, revoked ones included: %w", all, store.ErrConflict)
		default:
			return fmt.Errorf("a key with this id or hash exists: %w", store.ErrConflict)
		}
	})
	if err != nil {
		return store.APIKey{}, err
	}
	return out, nil
}

// inTx runs f in a READ COMMITTED transaction and commits it if f returns
// nil. The store's ErrConflict and ErrFenced that f returns are passed on
// as they are; other errors are mapped (see mapOpErr).
func (db *DB) inTx(ctx context.Context, f func(pgx.Tx) error) error {
	tx, err := db.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return db.mapErr(ctx, err)
	}
	defer func() {
		// A no-op after Commit. Bounded on its own: ctx may have ended.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), store.DefaultTimeout)
		defer cancel()
		_ = tx.Rollback(rctx)
	}()
	if err := f(tx); err != nil {
		return db.mapOpErr(ctx, err)
	}
	return db.mapErr(ctx, tx.Commit(ctx))
}

// mapOpErr is mapErr for what an operation's own code returns, which may
// wrap the store's ErrConflict or ErrFenced: those pass as they are, where
// mapErr would keep only their text.
func (db *DB) mapOpErr(ctx context.Context, err error) error {
	if errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrFenced) {
		return err
	}
	return db.mapErr(ctx, err)
}

// KeysByOwner implements store.Keys. Keys created in the same millisecond
// are ordered by id, byte by byte.
func (db *DB) KeysByOwner(ctx context.Context, owner string) (_ []store.APIKey, err error) {
	defer store.Wrap(&err, "postgres", "keys of %q", owner)
	if !store.ValidOwner(owner) {
		return nil, errors.New("invalid owner")
	}
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return nil, err
	}
	defer cancel()

	rows, err := db.pool.Query(ctx, `SELECT `+keyColumns+` FROM api_keys WHERE owner = $1
ORDER BY created_at_ms, key_id COLLATE "C"`, owner)
	if err != nil {
		return nil, db.mapErr(ctx, err)
	}
	keys, err := collect(rows, func(row pgx.Row) (store.APIKey, error) {
		k, _, err := scanKey(row)
		return k, err
	})
	if err != nil {
		return nil, db.mapErr(ctx, err)
	}
	return keys, nil
}

// KeyByHash implements store.Keys.
func (db *DB) KeyByHash(ctx context.Context, hash string) (_ store.APIKey, err error) {
	defer store.Wrap(&err, "postgres", "key by hash")
	if !store.ValidHash(hash) {
		return store.APIKey{}, errors.New("invalid key hash")
	}
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return store.APIKey{}, err
	}
	defer cancel()

	k, _, err := scanKey(db.pool.QueryRow(ctx, `SELECT `+keyColumns+` FROM api_keys WHERE key_hash = $1`, hash))
	if err != nil {
		return store.APIKey{}, db.mapErr(ctx, err)
	}
	return k, nil
}

// revokeKey revokes owner's ($3) key $2 unless it is revoked already, and
// then notifies its hash on the schema's key channel (see WatchKeys): the
// notification is part of the statement's transaction, so it is sent when
// the revocation commits and never for one that did not. It returns the
// number of notifications (1) and the key, or no row.
const revokeKey = withNow + `, u AS (
    UPDATE api_keys SET revoked_at_ms = greatest(n.ms, 1)
    FROM n WHERE key_id = $2 AND owner = $3 AND revoked_at_ms = 0
    RETURNING ` + keyColumns + `),
` + notifyChanged + `
SELECT (SELECT count(*) FROM notified), u.* FROM u`

// RevokeKey implements store.Keys: one UPDATE revokes a key not yet
// revoked and notifies the change (WatchKeys); when it changes nothing, the
// key is read, revoked with its first RevokedAt (a revocation is never
// undone) or not the owner's, and nothing is notified.
func (db *DB) RevokeKey(ctx context.Context, owner, id string) (_ store.APIKey, err error) {
	defer store.Wrap(&err, "postgres", "revoke key %q", id)
	if !store.ValidOwner(owner) || !store.ValidID(id) {
		return store.APIKey{}, errors.New("invalid owner or key id")
	}
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return store.APIKey{}, err
	}
	defer cancel()

	var notified int64
	k, _, err := scanKey(db.pool.QueryRow(ctx, revokeKey, db.nowArg(), id, owner), &notified)
	if errors.Is(err, pgx.ErrNoRows) {
		// Another owner's key is not found: its existence is not disclosed.
		k, _, err = scanKey(db.pool.QueryRow(ctx, `SELECT `+keyColumns+` FROM api_keys WHERE key_id = $1 AND owner = $2`, id, owner))
	}
	if err != nil {
		return store.APIKey{}, db.mapErr(ctx, err)
	}
	return k, nil
}

// updateKey updates owner's ($2) unrevoked key $1, notifying its hash on
// the schema's key channel when it does (as revokeKey), and always returns
// one row if owner has key $1: its revocation time before, the number of
// notifications, then the key if updated, else NULLs. No row: not the
// owner's key, or no such key.
const updateKey = `WITH c AS (SELECT revoked_at_ms FROM api_keys WHERE key_id = $1 AND owner = $2),
u AS (
    UPDATE api_keys SET name = $3, total_cap = $4, period_cap = $5, period_ms = $6, expires_at_ms = $7,
        models = $8, rate_per_minute = $9, tokens_per_minute = $10
    WHERE key_id = $1 AND owner = $2 AND revoked_at_ms = 0
        AND name = $11 AND total_cap = $12 AND period_cap = $13 AND period_ms = $14 AND expires_at_ms = $15
        AND models = $16 AND rate_per_minute = $17 AND tokens_per_minute = $18
    RETURNING ` + keyColumns + `),
` + notifyChanged + `
SELECT c.revoked_at_ms, (SELECT count(*) FROM notified), u.* FROM c LEFT JOIN u ON true`

// UpdateKey implements store.Keys: one statement, which updates the key
// only while it is not revoked and its limits are still from's (the row
// lock makes the comparison and the write one step) and then notifies the
// change (WatchKeys), and says why it did not.
func (db *DB) UpdateKey(ctx context.Context, owner, id string, from, k store.APIKey) (_ store.APIKey, err error) {
	defer store.Wrap(&err, "postgres", "update key %q", id)
	if err := store.ValidateUpdate(owner, id, k); err != nil {
		return store.APIKey{}, err
	}
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return store.APIKey{}, err
	}
	defer cancel()

	var revoked, notified int64
	got, found, err := scanKey(db.pool.QueryRow(ctx, updateKey, id, owner, k.Name, k.TotalCap, k.PeriodCap,
		k.Period.Milliseconds(), expiresMs(k), strings.Join(k.Models, " "), k.RatePerMinute, k.TokensPerMinute,
		from.Name, from.TotalCap, from.PeriodCap, from.Period.Milliseconds(), expiresMs(from), strings.Join(from.Models, " "),
		from.RatePerMinute, from.TokensPerMinute), &revoked, &notified)
	switch {
	case err != nil:
		// No row (ErrNotFound): another owner's key is not disclosed.
		return store.APIKey{}, db.mapErr(ctx, err)
	case !found && revoked != 0:
		return store.APIKey{}, fmt.Errorf("key is revoked: %w", store.ErrConflict)
	case !found:
		return store.APIKey{}, fmt.Errorf("key changed since it was read: %w", store.ErrConflict)
	}
	return got, nil
}

// expiresMs is how k's expiry is stored: milliseconds, 0 for never.
func expiresMs(k store.APIKey) int64 {
	if k.ExpiresAt.IsZero() {
		return 0
	}
	return max(k.ExpiresAt.UnixMilli(), 1)
}

// PutNonce implements store.Keys. A nonce of the same text that has
// expired can no longer be consumed, so storing it again is a fresh issue:
// the insert then takes its row over. The conflict condition finds the
// statement's time as the new expiry minus the TTL ($3).
func (db *DB) PutNonce(ctx context.Context, nonce string, ttl time.Duration) (err error) {
	defer store.Wrap(&err, "postgres", "put nonce")
	if err := store.ValidateNonce(nonce, ttl); err != nil {
		return err
	}
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return err
	}
	defer cancel()

	tag, err := db.pool.Exec(ctx, withNow+`INSERT INTO auth_nonces AS a (nonce, expires_at_ms)
SELECT $2, n.ms + $3::bigint FROM n
ON CONFLICT (nonce) DO UPDATE SET expires_at_ms = excluded.expires_at_ms
WHERE a.expires_at_ms <= excluded.expires_at_ms - $3::bigint`, db.nowArg(), nonce, store.CeilMillis(ttl))
	switch {
	case err != nil:
		return db.mapErr(ctx, err)
	case tag.RowsAffected() != 1:
		return fmt.Errorf("nonce exists: %w", store.ErrConflict)
	}
	return nil
}

// ConsumeNonce implements store.Keys: one conditional DELETE. Concurrent
// callers queue on the row; the first deletes it and the others, re-reading
// it after the first commits, find nothing to delete.
func (db *DB) ConsumeNonce(ctx context.Context, nonce string) (err error) {
	defer store.Wrap(&err, "postgres", "consume nonce")
	if !store.ValidNonce(nonce) {
		return store.ErrNotFound // a nonce we could never have issued
	}
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return err
	}
	defer cancel()

	tag, err := db.pool.Exec(ctx, withNow+`DELETE FROM auth_nonces USING n WHERE nonce = $2 AND expires_at_ms > n.ms`,
		db.nowArg(), nonce)
	switch {
	case err != nil:
		return db.mapErr(ctx, err)
	case tag.RowsAffected() != 1:
		return store.ErrNotFound
	}
	return nil
}

// CreateSession implements store.Keys.
func (db *DB) CreateSession(ctx context.Context, hash, owner string, ttl time.Duration) (_ store.Session, err error) {
	defer store.Wrap(&err, "postgres", "create session")
	if err := store.ValidateSession(hash, owner, ttl); err != nil {
		return store.Session{}, err
	}
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return store.Session{}, err
	}
	defer cancel()

	s, err := scanSession(db.pool.QueryRow(ctx, withNow+`INSERT INTO auth_sessions (session_hash, owner, created_at_ms, expires_at_ms)
SELECT $2, $3, n.ms, n.ms + $4::bigint FROM n
ON CONFLICT DO NOTHING
RETURNING session_hash, owner, created_at_ms, expires_at_ms`, db.nowArg(), hash, owner, store.CeilMillis(ttl)))
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return store.Session{}, fmt.Errorf("session exists: %w", store.ErrConflict)
	case err != nil:
		return store.Session{}, db.mapErr(ctx, err)
	}
	return s, nil
}

// Session implements store.Keys.
func (db *DB) Session(ctx context.Context, hash string) (_ store.Session, err error) {
	defer store.Wrap(&err, "postgres", "session")
	if !store.ValidHash(hash) {
		return store.Session{}, store.ErrNotFound
	}
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return store.Session{}, err
	}
	defer cancel()

	s, err := scanSession(db.pool.QueryRow(ctx, withNow+`SELECT session_hash, owner, created_at_ms, expires_at_ms
FROM auth_sessions, n WHERE session_hash = $2 AND expires_at_ms > n.ms`, db.nowArg(), hash))
	if err != nil {
		return store.Session{}, db.mapErr(ctx, err)
	}
	return s, nil
}

// DeleteSession implements store.Keys.
func (db *DB) DeleteSession(ctx context.Context, hash string) (err error) {
	defer store.Wrap(&err, "postgres", "delete session")
	if !store.ValidHash(hash) {
		return nil // no such session can exist
	}
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return err
	}
	defer cancel()

	_, err = db.pool.Exec(ctx, `DELETE FROM auth_sessions WHERE session_hash = $1`, hash)
	return db.mapErr(ctx, err)
}

// sweepAuth deletes up to $2 expired nonces and up to $2 expired sessions,
// soonest expired first, skipping rows another transaction holds (a nonce
// being consumed or issued again), and returns how many it deleted.
const sweepAuth = withNow + `, dn AS (
    DELETE FROM auth_nonces USING n
    WHERE nonce IN (
        SELECT nonce FROM auth_nonces, n WHERE expires_at_ms <= n.ms
        ORDER BY expires_at_ms LIMIT $2 FOR UPDATE OF auth_nonces SKIP LOCKED)
      AND expires_at_ms <= n.ms
    RETURNING 1),
ds AS (
    DELETE FROM auth_sessions USING n
    WHERE session_hash IN (
        SELECT session_hash FROM auth_sessions, n WHERE expires_at_ms <= n.ms
        ORDER BY expires_at_ms LIMIT $2 FOR UPDATE OF auth_sessions SKIP LOCKED)
      AND expires_at_ms <= n.ms
    RETURNING 1)
SELECT (SELECT count(*) FROM dn) + (SELECT count(*) FROM ds)`

// SweepAuth implements store.Keys. Skipping locked rows, it may return
// fewer than it could while others remain; the next call takes them.
func (db *DB) SweepAuth(ctx context.Context, limit int) (_ int, err error) {
	defer store.Wrap(&err, "postgres", "sweep auth")
	if err := store.CheckLimit(limit); err != nil {
		return 0, err
	}
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return 0, err
	}
	defer cancel()

	var n int64
	if err := db.pool.QueryRow(ctx, sweepAuth, db.nowArg(), limit).Scan(&n); err != nil {
		return 0, db.mapErr(ctx, err)
	}
	return int(n), nil
}

// scanKey reads one row of keyColumns after the values of first. Every
// column may be NULL (createKey's outer join): found is false when the id
// is.
func scanKey(row pgx.Row, first ...any) (_ store.APIKey, found bool, _ error) {
	var id, hash, owner, name, models *string
	var totalCap, periodCap, periodMs, expires, rate, tokenRate, created, revoked *int64
	dest := make([]any, 0, len(first)+13)
	dest = append(dest, first...)
	dest = append(dest, &id, &hash, &owner, &name, &totalCap, &periodCap, &periodMs, &expires, &models,
		&rate, &tokenRate, &created, &revoked)
	if err := row.Scan(dest...); err != nil {
		return store.APIKey{}, false, err
	}
	if id == nil {
		return store.APIKey{}, false, nil
	}
	// The schema makes every column NOT NULL.
	k := store.APIKey{
		ID: *id, Hash: *hash, Owner: *owner, Name: *name, TotalCap: *totalCap, PeriodCap: *periodCap,
		Period:          time.Duration(*periodMs) * time.Millisecond,
		RatePerMinute:   int(*rate),
		TokensPerMinute: *tokenRate,
		CreatedAt:       time.UnixMilli(*created).UTC(),
	}
	if *expires != 0 {
		k.ExpiresAt = time.UnixMilli(*expires).UTC()
	}
	if *models != "" {
		k.Models = strings.Split(*models, " ")
	}
	if *revoked != 0 {
		k.RevokedAt = time.UnixMilli(*revoked).UTC()
	}
	return k, true, nil
}

// scanSession reads session_hash, owner, created_at_ms, expires_at_ms.
func scanSession(row pgx.Row) (store.Session, error) {
	var s store.Session
	var created, expires int64
	if err := row.Scan(&s.Hash, &s.Owner, &created, &expires); err != nil {
		return store.Session{}, err
	}
	s.CreatedAt, s.ExpiresAt = time.UnixMilli(created).UTC(), time.UnixMilli(expires).UTC()
	return s, nil
}

var _ store.Keys = (*DB)(nil)
