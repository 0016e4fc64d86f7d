package redis

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/llm4agents/llm4agents/internal/store"
)

// Sign-in nonces and sessions (store.SignIns), so that a gateway on Redis can
// sign payers in without keeping API keys. A nonce is a hash at
// keys.signInNonce(name) with the field expires_at_ms, where name is the
// nonce's SHA-256 in hex: a nonce is not secret (the wallet signs it in its
// message), but keyed by its digest every sign-in key has one length and
// holds nothing a client sent. A session is a hash at
// keys.signInSession(its hash) with the fields signInSessionFields; the
// token itself never reaches the store. Each kind has an index, the sorted
// set keys.signInNonces() or keys.signInSessions(), whose members are the
// records' names scored by their expires_at_ms, so that SweepAuth finds
// expired records, soonest expired first, without scanning the keyspace.
// The scripts that write or delete a record keep its member in step. The
// scripts follow the conventions of scripts.go and start with its common
// Lua; they live here so that this file holds the whole backend for
// sign-ins. Like the settlement listings, sweepSignInsScript reads the
// records its sets name, which are not in KEYS but share the sets' hash tag,
// so their cluster slot.
//
// Expiry. A nonce or a session counts as absent from its expires_at_ms on,
// by the store's clock, whether or not it is still there. Redis also forgets
// it by itself: each record carries a TTL ending at its expiry, measured
// from the script's now (PEXPIRE, so that a test clock far from the server's
// gives the same TTL the server's clock would), with no margin: Redis
// dropping one a little early only asks for a new nonce or a new sign-in. An
// index's TTL is raised to that of every record added to it, so it outlives
// the records it names and goes once they are all gone. On the server's
// clock Redis drops a record at the very millisecond it expires, and what
// SweepAuth finds is the members left in the indexes by records Redis
// dropped; it deletes them and counts them, so that every nonce or session
// that expired unconsumed is counted by exactly one sweep, as on the SQL
// backends, and a caller that sweeps again while it gets its limit back
// empties the indexes.

// The fields of a session record, in the order the scripts read them; all
// of them are always there.
var signInSessionFields = []string{"owner", "created_at_ms", "expires_at_ms"}

// signInLua reads sign-in records. A nonce is the HMGET reply v with
// v[1] expires_at_ms; a session v[1] owner, v[2] created_at_ms,
// v[3] expires_at_ms.
var signInLua = common + `
local function get_nonce(key)
  local v = redis.call('HMGET', key, 'expires_at_ms')
  if not present(key, v, 1) then return nil end
  if not is_int(v[1]) then fail('record ' .. key .. ' has an expiry that is not an integer') end
  return v
end

local function get_session(key)
  local v = redis.call('HMGET', key, ` + luaStrings(signInSessionFields) + `)
  if not present(key, v, 3) then return nil end
  if v[1] == '' or not (is_int(v[2]) and is_int(v[3])) then
    fail('record ' .. key .. ' has no owner, or a time that is not an integer')
  end
  return v
end

-- index_add puts name in the index set at score expires and raises the
-- set's TTL to ttl ms if it is lower (PTTL is -1 without one). The caller
-- checked the set's type (expect_type) before its first write.
local function index_add(set, expires, name, ttl)
  redis.call('ZADD', set, fmt_int(expires), name)
  if redis.call('PTTL', set) < ttl then redis.call('PEXPIRE', set, fmt_int(ttl)) end
end
`

// putNonceScript stores a nonce, or replaces one of the same name that has
// expired (it can no longer be consumed, so storing it again is a fresh
// issue).
//
// KEYS: record, index.
// ARGV: now, ttl ms, name.
// Reply: {'ok'} | {'conflict'}.
var putNonceScript = goredis.NewScript(signInLua + `
local now = clock(ARGV[1])
local ttl = tonumber(ARGV[2])
local v = get_nonce(KEYS[1])
if v ~= nil and now < tonumber(v[1]) then return {'conflict'} end
expect_type(KEYS[2], 'zset')
if v ~= nil then redis.call('DEL', KEYS[1]) end
redis.call('HSET', KEYS[1], 'expires_at_ms', fmt_int(now + ttl))
redis.call('PEXPIRE', KEYS[1], fmt_int(ttl))
index_add(KEYS[2], now + ttl, ARGV[3], ttl)
return {'ok'}
`)

// consumeNonceScript deletes a nonce that has not expired. Redis runs one
// script at a time, so of concurrent calls the first deletes it and the
// others find nothing.
//
// KEYS: record, index.
// ARGV: now, name.
// Reply: {'ok'} | {'not_found', msg}.
var consumeNonceScript = goredis.NewScript(signInLua + `
local now = clock(ARGV[1])
local v = get_nonce(KEYS[1])
if v == nil then return {'not_found', 'no nonce'} end
if now >= tonumber(v[1]) then return {'not_found', 'nonce expired at ' .. v[1]} end
expect_type(KEYS[2], 'zset')
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[2])
return {'ok'}
`)

// createSessionScript stores a session, or replaces one of the same hash
// that has expired.
//
// KEYS: record, index.
// ARGV: now, ttl ms, hash, owner.
// Reply: {'ok', now} | {'conflict'}.
var createSessionScript = goredis.NewScript(signInLua + `
local now = clock(ARGV[1])
local ttl = tonumber(ARGV[2])
local v = get_session(KEYS[1])
if v ~= nil and now < tonumber(v[3]) then return {'conflict'} end
expect_type(KEYS[2], 'zset')
if v ~= nil then redis.call('DEL', KEYS[1]) end
local t = fmt_int(now)
redis.call('HSET', KEYS[1], 'owner', ARGV[4], 'created_at_ms', t, 'expires_at_ms', fmt_int(now + ttl))
redis.call('PEXPIRE', KEYS[1], fmt_int(ttl))
index_add(KEYS[2], now + ttl, ARGV[3], ttl)
return {'ok', t}
`)

// sessionScript reads a session that has not expired.
//
// KEYS: record.
// ARGV: now.
// Reply: {'ok', rec} | {'not_found', msg}.
var sessionScript = goredis.NewScript(signInLua + `
local now = clock(ARGV[1])
local v = get_session(KEYS[1])
if v == nil then return {'not_found', 'no session'} end
if now >= tonumber(v[3]) then return {'not_found', 'session expired at ' .. v[3]} end
return {'ok', v}
`)

// deleteSessionScript deletes a session, expired or not, and its member of
// the index.
//
// KEYS: record, index.
// ARGV: hash.
// Reply: {'ok'}.
var deleteSessionScript = goredis.NewScript(signInLua + `
local v = get_session(KEYS[1])
expect_type(KEYS[2], 'zset')
if v ~= nil then redis.call('DEL', KEYS[1]) end
redis.call('ZREM', KEYS[2], ARGV[1])
return {'ok'}
`)

// sweepSignInsScript deletes up to limit expired nonces and up to limit
// expired sessions, soonest expired first, with their members of the
// indexes, and counts them; a member whose record Redis already dropped
// counts too (see the comment at the top of this file). A member due by its
// score whose record has not expired (only after someone edited the keys
// by hand: the scripts keep the scores in step) is moved to the record's
// expiry instead. Every record is read and checked before the first write.
//
// KEYS: nonce index, session index.
// ARGV: now, limit, nonce record prefix, session record prefix.
// Reply: {'ok', nonces deleted, sessions deleted}.
var sweepSignInsScript = goredis.NewScript(signInLua + `
local now = clock(ARGV[1])
local limit = tonumber(ARGV[2])
expect_type(KEYS[1], 'zset')
expect_type(KEYS[2], 'zset')

-- due reads the members of set due at now, up to limit, and returns those
-- to delete and the {expiry, name} of those to move.
local function due(set, prefix, get, at)
  local gone, moved = {}, {}
  local names = redis.call('ZRANGEBYSCORE', set, '-inf', fmt_int(now), 'LIMIT', '0', fmt_int(limit))
  for _, name in ipairs(names) do
    local v = get(prefix .. name)
    if v == nil or now >= tonumber(v[at]) then
      gone[#gone + 1] = name
    else
      moved[#moved + 1] = {v[at], name}
    end
  end
  return gone, moved
end

local function drop(set, prefix, gone, moved)
  for _, name in ipairs(gone) do
    redis.call('DEL', prefix .. name)
    redis.call('ZREM', set, name)
  end
  for _, m in ipairs(moved) do redis.call('ZADD', set, m[1], m[2]) end
end

local nonces, moved_nonces = due(KEYS[1], ARGV[3], get_nonce, 1)
local sessions, moved_sessions = due(KEYS[2], ARGV[4], get_session, 3)
drop(KEYS[1], ARGV[3], nonces, moved_nonces)
drop(KEYS[2], ARGV[4], sessions, moved_sessions)
return {'ok', fmt_int(#nonces), fmt_int(#sessions)}
`)

// signInScripts are the scripts of store.SignIns.
var signInScripts = []*goredis.Script{
	putNonceScript, consumeNonceScript, createSessionScript, sessionScript, deleteSessionScript, sweepSignInsScript,
}

// The sign-in keys. Records are "signin-nonce:<name>" and
// "signin-session:<hash>", indexes "signin-nonces" and "signin-sessions":
// the byte after "signin-nonce" or "signin-session" tells them apart.
func (k keys) signInNonce(name string) string   { return k.tag + "signin-nonce:" + name }
func (k keys) signInNoncePrefix() string        { return k.tag + "signin-nonce:" }
func (k keys) signInNonces() string             { return k.tag + "signin-nonces" }
func (k keys) signInSession(hash string) string { return k.tag + "signin-session:" + hash }
func (k keys) signInSessionPrefix() string      { return k.tag + "signin-session:" }
func (k keys) signInSessions() string           { return k.tag + "signin-sessions" }

// nonceName is the name a nonce is kept under: its SHA-256 in hex.
func nonceName(nonce string) string {
	sum := sha256.Sum256([]byte(nonce))
	return hex.EncodeToString(sum[:])
}

// PutNonce implements store.SignIns in one script. A nonce of the same
// text that has expired is replaced: it can no longer be consumed.
func (db *DB) PutNonce(ctx context.Context, nonce string, ttl time.Duration) (err error) {
	defer store.Wrap(&err, "redis", "put nonce")
	if err := store.ValidateNonce(nonce, ttl); err != nil {
		return err
	}
	name := nonceName(nonce)
	status, rest, err := db.run(ctx, putNonceScript, []string{db.keys.signInNonce(name), db.keys.signInNonces()},
		db.nowArg(), strconv.FormatInt(store.CeilMillis(ttl), 10), name)
	switch {
	case err != nil:
		return err
	case status == "ok" && len(rest) == 0:
		return nil
	case status == "conflict" && len(rest) == 0:
		return fmt.Errorf("nonce exists: %w", store.ErrConflict)
	default:
		return fmt.Errorf("unexpected script reply %q of %d elements", status, len(rest))
	}
}

// ConsumeNonce implements store.SignIns in one script, which Redis runs
// alone: of concurrent calls on any number of DB values at most one
// succeeds.
func (db *DB) ConsumeNonce(ctx context.Context, nonce string) (err error) {
	defer store.Wrap(&err, "redis", "consume nonce")
	if !store.ValidNonce(nonce) {
		return store.ErrNotFound // a nonce we could never have issued
	}
	name := nonceName(nonce)
	status, rest, err := db.run(ctx, consumeNonceScript, []string{db.keys.signInNonce(name), db.keys.signInNonces()},
		db.nowArg(), name)
	if err != nil {
		return err
	}
	return outcome(status, rest)
}

// CreateSession implements store.SignIns in one script. A session of the
// same hash that has expired is replaced.
func (db *DB) CreateSession(ctx context.Context, hash, owner string, ttl time.Duration) (_ store.Session, err error) {
	defer store.Wrap(&err, "redis", "create session")
	if err := store.ValidateSession(hash, owner, ttl); err != nil {
		return store.Session{}, err
	}
	ttlMs := store.CeilMillis(ttl)
	status, rest, err := db.run(ctx, createSessionScript, []string{db.keys.signInSession(hash), db.keys.signInSessions()},
		db.nowArg(), strconv.FormatInt(ttlMs, 10), hash, owner)
	switch {
	case err != nil:
		return store.Session{}, err
	case status == "conflict" && len(rest) == 0:
		return store.Session{}, fmt.Errorf("session exists: %w", store.ErrConflict)
	case status != "ok" || len(rest) != 1:
		return store.Session{}, fmt.Errorf("unexpected script reply %q of %d elements", status, len(rest))
	}
	t, ok := rest[0].(string)
	now, perr := strconv.ParseInt(t, 10, 64)
	if !ok || perr != nil {
		return store.Session{}, fmt.Errorf("unexpected time %v in the script reply", rest[0])
	}
	// The script does not read the record back: it is what was sent.
	return store.Session{Hash: hash, Owner: owner, CreatedAt: msTime(now), ExpiresAt: msTime(now + ttlMs)}, nil
}

// Session implements store.SignIns: ErrNotFound if absent or expired.
func (db *DB) Session(ctx context.Context, hash string) (_ store.Session, err error) {
	defer store.Wrap(&err, "redis", "session")
	if !store.ValidHash(hash) {
		return store.Session{}, store.ErrNotFound // a hash we could never have stored
	}
	status, rest, err := db.run(ctx, sessionScript, []string{db.keys.signInSession(hash)}, db.nowArg())
	if err != nil {
		return store.Session{}, err
	}
	if status != "ok" {
		return store.Session{}, outcome(status, rest)
	}
	if len(rest) != 1 {
		return store.Session{}, fmt.Errorf("unexpected reply of %d elements", len(rest))
	}
	return decodeSession(hash, rest[0])
}

// DeleteSession implements store.SignIns in one script.
func (db *DB) DeleteSession(ctx context.Context, hash string) (err error) {
	defer store.Wrap(&err, "redis", "delete session")
	if !store.ValidHash(hash) {
		return nil // no such session can exist
	}
	status, rest, err := db.run(ctx, deleteSessionScript, []string{db.keys.signInSession(hash), db.keys.signInSessions()}, hash)
	if err != nil {
		return err
	}
	return outcome(status, rest)
}

// SweepAuth implements store.SignIns in one script, taking up to
// maxListLimit of each kind whatever limit asks: Redis serves no one else
// while the script runs.
func (db *DB) SweepAuth(ctx context.Context, limit int) (_ int, err error) {
	defer store.Wrap(&err, "redis", "sweep auth")
	if err := store.CheckLimit(limit); err != nil {
		return 0, err
	}
	status, rest, err := db.run(ctx, sweepSignInsScript, []string{db.keys.signInNonces(), db.keys.signInSessions()},
		db.nowArg(), strconv.Itoa(min(limit, maxListLimit)), db.keys.signInNoncePrefix(), db.keys.signInSessionPrefix())
	if err != nil {
		return 0, err
	}
	if status != "ok" || len(rest) != 2 {
		return 0, fmt.Errorf("unexpected script reply %q of %d elements", status, len(rest))
	}
	total := 0
	for _, v := range rest {
		s, ok := v.(string)
		n, perr := strconv.Atoi(s)
		if !ok || perr != nil || n < 0 {
			return 0, fmt.Errorf("unexpected count %v in the script reply", v)
		}
		total += n
	}
	return total, nil
}

// decodeSession reads a session record, the HMGET of signInSessionFields,
// from a script reply.
func decodeSession(hash string, v any) (store.Session, error) {
	f, err := newFields(v, signInSessionFields)
	if err != nil {
		return store.Session{}, fmt.Errorf("session record: %w", err)
	}
	s := store.Session{Hash: hash, Owner: f.str(0), CreatedAt: msTime(f.int(1)), ExpiresAt: msTime(f.int(2))}
	if f.err == nil && !store.ValidOwner(s.Owner) {
		f.err = fmt.Errorf("field owner: %q is not a valid owner", s.Owner)
	}
	if f.err != nil {
		return store.Session{}, fmt.Errorf("session record: %w", f.err)
	}
	return s, nil
}

var _ store.SignIns = (*DB)(nil)
