package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/llm4agents/llm4agents/internal/store"
)

// API keys, sign-in nonces and sessions (store.Keys), in the tables of the
// keys migration. Writes are ops of a write batch (writer.go), so each
// check-then-write (the owner's key count, a nonce's consumption) runs under
// the database's write lock and is atomic across DB values and processes.

const keyColumns = `key_id, key_hash, owner, name, total_cap, period_cap, period_ms, expires_at_ms, models,
    rate_per_minute, tokens_per_minute, created_at_ms, revoked_at_ms`

// CreateKey implements store.Keys.
func (db *DB) CreateKey(ctx context.Context, k store.APIKey) (_ store.APIKey, err error) {
	defer store.Wrap(&err, "sqlite", "create key %q", k.ID)
	if err := k.Validate(); err != nil {
		return store.APIKey{}, err
	}
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return store.APIKey{}, err
	}
	defer cancel()

	var out store.APIKey
	err = db.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		var all, live int
		if err := tx.QueryRowContext(ctx, `SELECT count(*), count(*) FILTER (WHERE revoked_at_ms = 0) FROM api_keys WHERE owner = ?`,
			k.Owner).Scan(&all, &live); err != nil {
			return err
		}
		switch {
		case live >= store.MaxKeysPerOwner:
			return fmt.Errorf("owner has %d live keys: %w", live, store.ErrConflict)
		case all >= store.MaxStoredKeysPerOwner:
			return fmt.Errorf("owner has %d keys, revoked ones included: %w", all, store.ErrConflict)
		}
		var expires int64
		if !k.ExpiresAt.IsZero() {
			expires = max(k.ExpiresAt.UnixMilli(), 1)
		}
		// ON CONFLICT DO NOTHING: a duplicate id or hash is a conflict, not
		// a driver error that would spoil the batch's transaction.
		res, err := tx.ExecContext(ctx, `INSERT INTO api_keys (`+keyColumns+`)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0)
ON CONFLICT DO NOTHING`,
			k.ID, k.Hash, k.Owner, k.Name, k.TotalCap, k.PeriodCap, k.Period.Milliseconds(), expires,
			strings.Join(k.Models, " "), k.RatePerMinute, k.TokensPerMinute, db.nowMs())
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n != 1 {
			if err == nil {
				err = fmt.Errorf("a key with this id or hash exists: %w", store.ErrConflict)
			}
			return err
		}
		out, err = scanKey(tx.QueryRowContext(ctx, `SELECT `+keyColumns+` FROM api_keys WHERE key_id = ?`, k.ID))
		return err
	})
	if err != nil {
		return store.APIKey{}, mapErr(ctx, err)
	}
	return out, nil
}

// KeysByOwner implements store.Keys.
func (db *DB) KeysByOwner(ctx context.Context, owner string) (_ []store.APIKey, err error) {
	defer store.Wrap(&err, "sqlite", "keys of %q", owner)
	if !store.ValidOwner(owner) {
		return nil, errors.New("invalid owner")
	}
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return nil, err
	}
	defer cancel()

	rows, err := db.ro.QueryContext(ctx, `SELECT `+keyColumns+` FROM api_keys WHERE owner = ?
ORDER BY created_at_ms, key_id`, owner)
	if err != nil {
		return nil, mapErr(ctx, err)
	}
	defer func() { _ = rows.Close() }() // rows.Err reports what iterating hit
	var out []store.APIKey
	for rows.Next() {
		k, err := scanKey(rows)
		if err != nil {
			return nil, mapErr(ctx, err)
		}
		out = append(out, k)
	}
	if err := rows.Err(); err != nil {
		return nil, mapErr(ctx, err)
	}
	return out, nil
}

// selectKeyByHash is the lookup of every credit call: prepared once.
const selectKeyByHash = `SELECT ` + keyColumns + ` FROM api_keys WHERE key_hash = ?`

// KeyByHash implements store.Keys.
func (db *DB) KeyByHash(ctx context.Context, hash string) (_ store.APIKey, err error) {
	defer store.Wrap(&err, "sqlite", "key by hash")
	if !store.ValidHash(hash) {
		return store.APIKey{}, errors.New("invalid key hash")
	}
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return store.APIKey{}, err
	}
	defer cancel()

	k, err := scanKey(db.readRow(ctx, selectKeyByHash, hash))
	if err != nil {
		return store.APIKey{}, mapErr(ctx, err)
	}
	return k, nil
}

// RevokeKey implements store.Keys. A key it revokes is told to this DB's
// WatchKeys once the revocation commits; a key already revoked is not.
func (db *DB) RevokeKey(ctx context.Context, owner, id string) (_ store.APIKey, err error) {
	defer store.Wrap(&err, "sqlite", "revoke key %q", id)
	if !store.ValidOwner(owner) || !store.ValidID(id) {
		return store.APIKey{}, errors.New("invalid owner or key id")
	}
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return store.APIKey{}, err
	}
	defer cancel()

	var out store.APIKey
	var revoked string // the hash of the key revoked now, for keyChanged
	err = db.writeThen(ctx, func(ctx context.Context, tx *sql.Tx) error {
		// Another owner's key is not found: its existence is not disclosed.
		cur, err := scanKey(tx.QueryRowContext(ctx, `SELECT `+keyColumns+` FROM api_keys WHERE key_id = ? AND owner = ?`, id, owner))
		if err != nil || cur.Revoked() {
			out = cur
			return err
		}
		out, err = scanKey(tx.QueryRowContext(ctx, `UPDATE api_keys SET revoked_at_ms = ? WHERE key_id = ?
RETURNING `+keyColumns, max(db.nowMs(), 1), id))
		revoked = out.Hash
		return err
	}, func() {
		if revoked != "" {
			db.keyChanged(revoked)
		}
	})
	if err != nil {
		return store.APIKey{}, mapErr(ctx, err)
	}
	return out, nil
}

// UpdateKey implements store.Keys. A key it changes is told to this DB's
// WatchKeys once the change commits; a refused update tells nothing.
func (db *DB) UpdateKey(ctx context.Context, owner, id string, from, k store.APIKey) (_ store.APIKey, err error) {
	defer store.Wrap(&err, "sqlite", "update key %q", id)
	if err := store.ValidateUpdate(owner, id, k); err != nil {
		return store.APIKey{}, err
	}
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return store.APIKey{}, err
	}
	defer cancel()

	var expires int64
	if !k.ExpiresAt.IsZero() {
		expires = max(k.ExpiresAt.UnixMilli(), 1)
	}
	var out store.APIKey
	err = db.writeThen(ctx, func(ctx context.Context, tx *sql.Tx) error {
		// Another owner's key is not found: its existence is not disclosed.
		cur, err := scanKey(tx.QueryRowContext(ctx, `SELECT `+keyColumns+` FROM api_keys WHERE key_id = ? AND owner = ?`, id, owner))
		switch {
		case err != nil:
			return err
		case cur.Revoked():
			return fmt.Errorf("key is revoked: %w", store.ErrConflict)
		case !store.SameLimits(cur, from):
			return fmt.Errorf("key changed since it was read: %w", store.ErrConflict)
		}
		out, err = scanKey(tx.QueryRowContext(ctx, `UPDATE api_keys SET name = ?, total_cap = ?, period_cap = ?, period_ms = ?,
    expires_at_ms = ?, models = ?, rate_per_minute = ?, tokens_per_minute = ?
WHERE key_id = ?
RETURNING `+keyColumns, k.Name, k.TotalCap, k.PeriodCap, k.Period.Milliseconds(), expires,
			strings.Join(k.Models, " "), k.RatePerMinute, k.TokensPerMinute, id))
		return err
	}, func() { db.keyChanged(out.Hash) }) // only after the op succeeded
	if err != nil {
		return store.APIKey{}, mapErr(ctx, err)
	}
	return out, nil
}

// PutNonce implements store.Keys.
func (db *DB) PutNonce(ctx context.Context, nonce string, ttl time.Duration) (err error) {
	defer store.Wrap(&err, "sqlite", "put nonce")
	if err := store.ValidateNonce(nonce, ttl); err != nil {
		return err
	}
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return err
	}
	defer cancel()

	return mapErr(ctx, db.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		now := db.nowMs()
		// An expired nonce of the same text is forgotten first: it can no
		// longer be consumed, so storing it again is a fresh issue.
		if _, err := tx.ExecContext(ctx, `DELETE FROM auth_nonces WHERE nonce = ? AND expires_at_ms <= ?`, nonce, now); err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, `INSERT INTO auth_nonces (nonce, expires_at_ms) VALUES (?, ?) ON CONFLICT DO NOTHING`,
			nonce, now+store.CeilMillis(ttl))
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n != 1 {
			if err == nil {
				err = fmt.Errorf("nonce exists: %w", store.ErrConflict)
			}
			return err
		}
		return nil
	}))
}

// ConsumeNonce implements store.Keys: one conditional DELETE.
func (db *DB) ConsumeNonce(ctx context.Context, nonce string) (err error) {
	defer store.Wrap(&err, "sqlite", "consume nonce")
	if !store.ValidNonce(nonce) {
		return store.ErrNotFound // a nonce we could never have issued
	}
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return err
	}
	defer cancel()

	return mapErr(ctx, db.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM auth_nonces WHERE nonce = ? AND expires_at_ms > ?`, nonce, db.nowMs())
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n != 1 {
			if err == nil {
				err = store.ErrNotFound
			}
			return err
		}
		return nil
	}))
}

const sessionColumns = `session_hash, owner, created_at_ms, expires_at_ms`

// CreateSession implements store.Keys.
func (db *DB) CreateSession(ctx context.Context, hash, owner string, ttl time.Duration) (_ store.Session, err error) {
	defer store.Wrap(&err, "sqlite", "create session")
	if err := store.ValidateSession(hash, owner, ttl); err != nil {
		return store.Session{}, err
	}
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return store.Session{}, err
	}
	defer cancel()

	var s store.Session
	err = db.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		now := db.nowMs()
		res, err := tx.ExecContext(ctx, `INSERT INTO auth_sessions (`+sessionColumns+`) VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING`,
			hash, owner, now, now+store.CeilMillis(ttl))
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n != 1 {
			if err == nil {
				err = fmt.Errorf("session exists: %w", store.ErrConflict)
			}
			return err
		}
		s = store.Session{Hash: hash, Owner: owner, CreatedAt: time.UnixMilli(now).UTC(), ExpiresAt: time.UnixMilli(now + store.CeilMillis(ttl)).UTC()}
		return nil
	})
	if err != nil {
		return store.Session{}, mapErr(ctx, err)
	}
	return s, nil
}

// Session implements store.Keys.
func (db *DB) Session(ctx context.Context, hash string) (_ store.Session, err error) {
	defer store.Wrap(&err, "sqlite", "session")
	if !store.ValidHash(hash) {
		return store.Session{}, store.ErrNotFound
	}
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return store.Session{}, err
	}
	defer cancel()

	var s store.Session
	var created, expires int64
	err = db.ro.QueryRowContext(ctx, `SELECT `+sessionColumns+` FROM auth_sessions WHERE session_hash = ? AND expires_at_ms > ?`,
		hash, db.nowMs()).Scan(&s.Hash, &s.Owner, &created, &expires)
	if err != nil {
		return store.Session{}, mapErr(ctx, err)
	}
	s.CreatedAt, s.ExpiresAt = time.UnixMilli(created).UTC(), time.UnixMilli(expires).UTC()
	return s, nil
}

// DeleteSession implements store.Keys.
func (db *DB) DeleteSession(ctx context.Context, hash string) (err error) {
	defer store.Wrap(&err, "sqlite", "delete session")
	if !store.ValidHash(hash) {
		return nil
	}
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return err
	}
	defer cancel()

	return mapErr(ctx, db.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `DELETE FROM auth_sessions WHERE session_hash = ?`, hash)
		return err
	}))
}

// SweepAuth implements store.Keys.
func (db *DB) SweepAuth(ctx context.Context, limit int) (_ int, err error) {
	defer store.Wrap(&err, "sqlite", "sweep auth")
	if err := store.CheckLimit(limit); err != nil {
		return 0, err
	}
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return 0, err
	}
	defer cancel()

	var total int
	err = db.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		now := db.nowMs()
		for _, q := range []string{
			`DELETE FROM auth_nonces WHERE nonce IN (SELECT nonce FROM auth_nonces WHERE expires_at_ms <= ? ORDER BY expires_at_ms LIMIT ?)`,
			`DELETE FROM auth_sessions WHERE session_hash IN (SELECT session_hash FROM auth_sessions WHERE expires_at_ms <= ? ORDER BY expires_at_ms LIMIT ?)`,
		} {
			res, err := tx.ExecContext(ctx, q, now, limit)
			if err != nil {
				return err
			}
			n, err := res.RowsAffected()
			if err != nil {
				return err
			}
			total += int(n)
		}
		return nil
	})
	if err != nil {
		return 0, mapErr(ctx, err)
	}
	return total, nil
}

// scanKey reads one row of keyColumns.
func scanKey(row interface{ Scan(...any) error }) (store.APIKey, error) {
	var k store.APIKey
	var periodMs, expires, created, revoked int64
	var models string
	err := row.Scan(&k.ID, &k.Hash, &k.Owner, &k.Name, &k.TotalCap, &k.PeriodCap, &periodMs, &expires, &models,
		&k.RatePerMinute, &k.TokensPerMinute, &created, &revoked)
	if err != nil {
		return store.APIKey{}, err
	}
	k.Period = time.Duration(periodMs) * time.Millisecond
	if expires != 0 {
		k.ExpiresAt = time.UnixMilli(expires).UTC()
	}
	if models != "" {
		k.Models = strings.Split(models, " ")
	}
	k.CreatedAt = time.UnixMilli(created).UTC()
	if revoked != 0 {
		k.RevokedAt = time.UnixMilli(revoked).UTC()
	}
	return k, nil
}

var _ store.Keys = (*DB)(nil)
