package redis

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/llm4agents/llm4agents/internal/store"
)

// Recovery records (store.Recoveries). Each record is a hash at
// keys.recovery(key) with the fields recoveryFields, the response_ ones only
// once an answer is staged. Promotion finds a record by its operation id
// alone, through an index: a string at keys.recoveryOp(operation id) holding
// the record's store key. Fences come from the counter at
// keys.recoveryFence(). The scripts follow the conventions of scripts.go and
// start with its common Lua; they live here so that this file holds the whole
// backend for recoveries.
//
// Expiry. A record counts as absent everywhere from its ExpiresAt on, by the
// store's clock (see store.Recoveries). Redis also forgets it by
// itself: the record and its index carry a TTL ending at ExpiresAt, measured
// from the script's now (PEXPIRE, so that a test clock far from the server's
// gives the same TTL the server's clock would), and promotion moves both
// TTLs with the new expiry. Unlike a payment claim, a recovery record gets no
// margin: Redis dropping it a little early only sends the buyer to the
// paywall again, it can never hand out an answer.
//
// The index is a pointer, never a proof: every script that follows it checks
// that the record it names carries the operation id asked for, so an index
// left behind by a replaced record (its TTL not yet over) promotes nothing.

// The fields of a recovery record, in the order the scripts read them. The
// first 17 are always there; the response_ ones all or none, and exactly when
// the state is not in_flight. response_body comes last so that scripts that do
// not need the body can leave it out.
var recoveryFields = []string{
	"payer", "fingerprint", "operation_id", "payment_key", "proof_hash", "proof_until_ms", "amount",
	"state", "network", "tx_hash", "owner", "fence", "lease_until_ms", "expires_at_ms", "replays_left",
	"created_at_ms", "updated_at_ms",
	"response_status", "response_content_type", "response_body",
}

// recoveryLua reads recovery records. A record is the HMGET reply v:
// v[2] fingerprint, v[3] operation_id, v[8] state, v[9] network,
// v[10] tx_hash, v[11] owner, v[12] fence, v[13] lease_until_ms,
// v[14] expires_at_ms, v[15] replays_left, v[18..20] the response (v[20], the
// body, read only when asked for).
var recoveryLua = common + `
local recovery_states = {in_flight = true, staged = true, promoted = true}

local function get_recovery(key, with_body)
  local v
  if with_body then
    v = redis.call('HMGET', key, ` + luaStrings(recoveryFields) + `)
  else
    v = redis.call('HMGET', key, ` + luaStrings(recoveryFields[:len(recoveryFields)-1]) + `)
  end
  if not present(key, v, 17) then return nil end
  if not recovery_states[v[8]] then fail('record ' .. key .. ' has unknown state ' .. v[8]) end
  for _, i in ipairs({6, 12, 13, 14, 15, 16, 17}) do
    if not is_int(v[i]) then fail('record ' .. key .. ' has a fence, count or time that is not an integer') end
  end
  local body = v[20]
  if not with_body then body = redis.call('HEXISTS', key, 'response_body') == 1 end
  local n = 0
  if v[18] then n = n + 1 end
  if v[19] then n = n + 1 end
  if body then n = n + 1 end
  if n ~= 0 and (n ~= 3 or not is_int(v[18])) then fail('record ' .. key .. ' has an incomplete response') end
  if n == 3 and (tonumber(v[18]) < 100 or tonumber(v[18]) > 599) then
    fail('record ' .. key .. ' has response status ' .. v[18])
  end
  if (v[8] == 'in_flight') ~= (n == 0) then fail('record ' .. key .. ' is ' .. v[8] .. ' but has the wrong response fields') end
  if v[8] == 'promoted' and (v[9] == '' or v[10] == '') then fail('record ' .. key .. ' is promoted without a settlement') end
  return v
end

-- counts_absent reports whether BeginRecovery may replace v: expired, in
-- flight past its lease, or promoted with no replay left.
local function counts_absent(v, now)
  if now >= tonumber(v[14]) then return true end
  if v[8] == 'in_flight' and now >= tonumber(v[13]) then return true end
  return v[8] == 'promoted' and tonumber(v[15]) <= 0
end

-- live_recovery returns the record at key (without the body) if it exists,
-- has not expired at now and carries fence; otherwise nil and the reply to
-- give.
local function live_recovery(key, fence, now)
  local v = get_recovery(key, false)
  if v == nil then return nil, {'not_found', 'no record'} end
  if now >= tonumber(v[14]) then return nil, {'not_found', 'record expired at ' .. v[14]} end
  if v[12] ~= fence then return nil, {'fenced', 'fence ' .. fence .. ' is stale, the record\'s is ' .. v[12]} end
  return v
end

-- drop_index deletes the index at idx if it still names key; the caller
-- checked idx's type before its first write.
local function drop_index(idx, key)
  if redis.call('GET', idx) == key then redis.call('DEL', idx) end
end
`

// beginRecoveryScript creates, replaces (absent by the rules of
// counts_absent) or returns a recovery record, and points the operation id's
// index at it. An operation id still carried by another live record is
// refused: promotion must find one record only.
//
// KEYS: record, fence counter, operation id index.
// ARGV: now, lease ms, expires ms, index prefix, record prefix, key, payer,
// fingerprint, operation id, payment key, proof hash, proof until ms, amount,
// owner.
// Reply: {'won', fence, now} | {'replaced', fence, now, previous owner,
// previous state} | {'held', rec} | {'bad', now} | {'dup'}.
var beginRecoveryScript = goredis.NewScript(recoveryLua + `
local now = clock(ARGV[1])
local lease = tonumber(ARGV[2])
local expires = tonumber(ARGV[3])
if expires <= now then return {'bad', fmt_int(now)} end
local v = get_recovery(KEYS[1], false)
if v ~= nil and not counts_absent(v, now) then
  v[20] = redis.call('HGET', KEYS[1], 'response_body')
  return {'held', v}
end
expect_type(KEYS[3], 'string')
local named = redis.call('GET', KEYS[3])
if named and named ~= ARGV[6] then
  local o = get_recovery(ARGV[5] .. named, false)
  if o ~= nil and o[3] == ARGV[9] and now < tonumber(o[14]) then return {'dup'} end
end
local old_index = nil
local floor = nil
if v ~= nil then
  old_index = ARGV[4] .. v[3]
  expect_type(old_index, 'string')
  floor = tonumber(v[12])
end
local fence = next_fence(KEYS[2], floor)
if v ~= nil then
  redis.call('DEL', KEYS[1])
  drop_index(old_index, ARGV[6])
end
local t = fmt_int(now)
redis.call('HSET', KEYS[1],
  'payer', ARGV[7], 'fingerprint', ARGV[8], 'operation_id', ARGV[9], 'payment_key', ARGV[10],
  'proof_hash', ARGV[11], 'proof_until_ms', ARGV[12], 'amount', ARGV[13], 'state', 'in_flight',
  'network', '', 'tx_hash', '', 'owner', ARGV[14], 'fence', fence, 'lease_until_ms', fmt_int(now + lease),
  'expires_at_ms', fmt_int(expires), 'replays_left', '0', 'created_at_ms', t, 'updated_at_ms', t)
local ttl = fmt_int(expires - now)
redis.call('PEXPIRE', KEYS[1], ttl)
redis.call('SET', KEYS[3], ARGV[6], 'PX', ttl)
if v ~= nil then return {'replaced', fence, t, v[11], v[8]} end
return {'won', fence, t}
`)

// stageRecoveryScript keeps a response with an in-flight or staged record
// under its fence; the record's TTL stays.
//
// KEYS: record.
// ARGV: now, fence, status, content type, body.
// Reply: {'ok'} | {'not_found', msg} | {'fenced', msg}.
var stageRecoveryScript = goredis.NewScript(recoveryLua + `
local now = clock(ARGV[1])
local v, reply = live_recovery(KEYS[1], ARGV[2], now)
if v == nil then return reply end
if v[8] == 'promoted' then return {'fenced', 'record is promoted'} end
redis.call('HSET', KEYS[1], 'state', 'staged', 'response_status', ARGV[3], 'response_content_type', ARGV[4],
  'response_body', ARGV[5], 'updated_at_ms', fmt_int(now))
return {'ok'}
`)

// promoteRecoveryScript makes the staged record an operation id names
// replayable, with a settlement reference, a replay budget and a new expiry
// (and TTL) for the record and its index.
//
// KEYS: operation id index.
// ARGV: now, operation id, fingerprint, network, tx hash, ttl ms, replays,
// record prefix.
// Reply: {'promoted', key, rec, now, expires ms} | {'same', key, rec} |
// {'not_found', msg} | {'fenced', msg}.
var promoteRecoveryScript = goredis.NewScript(recoveryLua + `
local now = clock(ARGV[1])
expect_type(KEYS[1], 'string')
local name = redis.call('GET', KEYS[1])
if not name then return {'not_found', 'no record has this operation id'} end
local rk = ARGV[8] .. name
local v = get_recovery(rk, true)
if v == nil or v[3] ~= ARGV[2] then return {'not_found', 'no record has this operation id'} end
if now >= tonumber(v[14]) then return {'not_found', 'record expired at ' .. v[14]} end
if v[2] ~= ARGV[3] then return {'fenced', 'the fingerprint is not the record\'s'} end
if v[8] == 'in_flight' then return {'fenced', 'nothing is staged'} end
if v[8] == 'promoted' then
  if v[9] == ARGV[4] and v[10] == ARGV[5] then return {'same', name, v} end
  return {'fenced', 'promoted with another settlement'}
end
local t = fmt_int(now)
local exp = fmt_int(now + tonumber(ARGV[6]))
redis.call('HSET', rk, 'state', 'promoted', 'network', ARGV[4], 'tx_hash', ARGV[5], 'replays_left', ARGV[7],
  'expires_at_ms', exp, 'updated_at_ms', t)
redis.call('PEXPIRE', rk, ARGV[6])
redis.call('PEXPIRE', KEYS[1], ARGV[6])
return {'promoted', name, v, t, exp}
`)

// abandonRecoveryScript deletes an in-flight or staged record under its
// fence, and its index.
//
// KEYS: record.
// ARGV: now, fence, index prefix, key.
// Reply: {'ok'} | {'not_found', msg} | {'fenced', msg}.
var abandonRecoveryScript = goredis.NewScript(recoveryLua + `
local v, reply = live_recovery(KEYS[1], ARGV[2], clock(ARGV[1]))
if v == nil then return reply end
if v[8] == 'promoted' then return {'fenced', 'record is promoted'} end
local idx = ARGV[3] .. v[3]
expect_type(idx, 'string')
redis.call('DEL', KEYS[1])
drop_index(idx, ARGV[4])
return {'ok'}
`)

// recoveryScript reads a record that has not expired.
//
// KEYS: record.
// ARGV: now.
// Reply: {'ok', rec} | {'not_found', msg}.
var recoveryScript = goredis.NewScript(recoveryLua + `
local now = clock(ARGV[1])
local v = get_recovery(KEYS[1], true)
if v == nil then return {'not_found', 'no record'} end
if now >= tonumber(v[14]) then return {'not_found', 'record expired at ' .. v[14]} end
return {'ok', v}
`)

// takeReplayScript takes one replay from a promoted record of the operation
// id. HINCRBY is the first write: it fails, changing nothing, on a count
// that is no 64-bit integer.
//
// KEYS: record.
// ARGV: now, operation id.
// Reply: {'took', rec, now} | {'spent', rec} | {'not_found', msg}.
var takeReplayScript = goredis.NewScript(recoveryLua + `
local now = clock(ARGV[1])
local v = get_recovery(KEYS[1], true)
if v == nil then return {'not_found', 'no record'} end
if now >= tonumber(v[14]) then return {'not_found', 'record expired at ' .. v[14]} end
if v[8] ~= 'promoted' then return {'not_found', 'record is ' .. v[8] .. ', not promoted'} end
if v[3] ~= ARGV[2] then return {'not_found', 'record has another operation id'} end
if tonumber(v[15]) <= 0 then return {'spent', v} end
redis.call('HINCRBY', KEYS[1], 'replays_left', -1)
local t = fmt_int(now)
redis.call('HSET', KEYS[1], 'updated_at_ms', t)
return {'took', v, t}
`)

// The recovery keys. Records are "recovery:<key>" and indexes
// "recovery-op:<operation id>": the byte after "recovery" tells them apart,
// whatever the key or the operation id holds.
func (k keys) recovery(key string) string  { return k.tag + "recovery:" + key }
func (k keys) recoveryPrefix() string      { return k.tag + "recovery:" }
func (k keys) recoveryOp(op string) string { return k.tag + "recovery-op:" + op }
func (k keys) recoveryOpPrefix() string    { return k.tag + "recovery-op:" }
func (k keys) recoveryFence() string       { return k.tag + "recovery-fence" }

// BeginRecovery implements store.Recoveries in one script. ExpiresAt must
// also be before the year 287,000 (maxExpiryMs).
func (db *DB) BeginRecovery(ctx context.Context, r store.Recovery, lease time.Duration) (_ store.Recovery, _ bool, err error) {
	defer store.Wrap(&err, "redis", "begin recovery %q", r.Key)
	if err := store.CheckBeginRecovery(r, lease); err != nil {
		return store.Recovery{}, false, err
	}
	expiresMs := store.CeilUnixMilli(r.ExpiresAt)
	if expiresMs > maxExpiryMs {
		return store.Recovery{}, false, fmt.Errorf("expiry %s is too far in the future", r.ExpiresAt.UTC().Format(time.RFC3339Nano))
	}
	lms, proofMs := store.CeilMillis(lease), r.ProofUntil.UnixMilli()
	status, rest, err := db.run(ctx, beginRecoveryScript,
		[]string{db.keys.recovery(r.Key), db.keys.recoveryFence(), db.keys.recoveryOp(r.OperationID)},
		db.nowArg(), strconv.FormatInt(lms, 10), strconv.FormatInt(expiresMs, 10),
		db.keys.recoveryOpPrefix(), db.keys.recoveryPrefix(), r.Key,
		r.Payer, r.Fingerprint, r.OperationID, r.PaymentKey, r.ProofHash, strconv.FormatInt(proofMs, 10), r.Amount, r.Owner)
	if err != nil {
		return store.Recovery{}, false, err
	}
	switch {
	case (status == "won" && len(rest) == 2) || (status == "replaced" && len(rest) == 4):
		fence, now, err := fenceAndTime(rest[0], rest[1])
		if err != nil {
			return store.Recovery{}, false, err
		}
		if status == "replaced" {
			db.log.InfoContext(ctx, "replaced recovery record", "key", r.Key,
				"previous_owner", rest[2], "previous_state", rest[3], "owner", r.Owner, "fence", fence)
		}
		// The script does not read the record back: it is r as given.
		return store.Recovery{
			Key: r.Key, Payer: r.Payer, Fingerprint: r.Fingerprint, OperationID: r.OperationID,
			PaymentKey: r.PaymentKey, ProofHash: r.ProofHash, ProofUntil: msTime(proofMs), Amount: r.Amount,
			State: store.RecoveryInFlight, Owner: r.Owner, Fence: fence, LeaseUntil: msTime(now + lms),
			ExpiresAt: msTime(expiresMs), CreatedAt: msTime(now), UpdatedAt: msTime(now),
		}, true, nil
	case status == "held" && len(rest) == 1:
		rec, err := decodeRecovery(r.Key, rest[0])
		return rec, false, err
	case status == "bad" && len(rest) == 1:
		return store.Recovery{}, false, fmt.Errorf("expiry %s is not after the store's time %s",
			r.ExpiresAt.UTC().Format(time.RFC3339Nano), replyTime(rest[0]))
	case status == "dup" && len(rest) == 0:
		return store.Recovery{}, false, errors.New("operation id is already another live record's")
	default:
		return store.Recovery{}, false, fmt.Errorf("unexpected script reply %q of %d elements", status, len(rest))
	}
}

// StageRecovery implements store.Recoveries. The body is stored as the bytes
// given (Redis strings are binary-safe).
func (db *DB) StageRecovery(ctx context.Context, key string, fence int64, resp store.RecordedResponse) (err error) {
	defer store.Wrap(&err, "redis", "stage recovery %q", key)
	if err := store.CheckResponse(resp.Status, resp.Body); err != nil {
		return err
	}
	body := resp.Body
	if body == nil {
		body = []byte{}
	}
	status, rest, err := db.run(ctx, stageRecoveryScript, []string{db.keys.recovery(key)},
		db.nowArg(), strconv.FormatInt(fence, 10), strconv.Itoa(resp.Status), resp.ContentType, body)
	if err != nil {
		return err
	}
	return outcome(status, rest)
}

// PromoteRecovery implements store.Recoveries.
func (db *DB) PromoteRecovery(ctx context.Context, operationID, fingerprint string, ref store.SettlementRef, ttl time.Duration, replays int) (_ store.Recovery, err error) {
	defer store.Wrap(&err, "redis", "promote recovery")
	if err := store.CheckPromote(operationID, ref, ttl, replays); err != nil {
		return store.Recovery{}, err
	}
	status, rest, err := db.run(ctx, promoteRecoveryScript, []string{db.keys.recoveryOp(operationID)},
		db.nowArg(), operationID, fingerprint, ref.Network, ref.TxHash, strconv.FormatInt(store.CeilMillis(ttl), 10),
		strconv.Itoa(replays), db.keys.recoveryPrefix())
	if err != nil {
		return store.Recovery{}, err
	}
	switch {
	case status == "same" && len(rest) == 2:
		return decodeNamedRecovery(rest[0], rest[1])
	case status == "promoted" && len(rest) == 4:
		rec, err := decodeNamedRecovery(rest[0], rest[1])
		if err != nil {
			return store.Recovery{}, err
		}
		now, expires, err := fenceAndTime(rest[2], rest[3])
		if err != nil {
			return store.Recovery{}, err
		}
		rec.State, rec.Settlement, rec.ReplaysLeft = store.RecoveryPromoted, ref, replays
		rec.ExpiresAt, rec.UpdatedAt = msTime(expires), msTime(now)
		return rec, nil
	case status == "not_found" || status == "fenced":
		return store.Recovery{}, outcome(status, rest)
	default:
		return store.Recovery{}, fmt.Errorf("unexpected script reply %q of %d elements", status, len(rest))
	}
}

// AbandonRecovery implements store.Recoveries.
func (db *DB) AbandonRecovery(ctx context.Context, key string, fence int64) (err error) {
	defer store.Wrap(&err, "redis", "abandon recovery %q", key)
	status, rest, err := db.run(ctx, abandonRecoveryScript, []string{db.keys.recovery(key)},
		db.nowArg(), strconv.FormatInt(fence, 10), db.keys.recoveryOpPrefix(), key)
	if err != nil {
		return err
	}
	return outcome(status, rest)
}

// Recovery implements store.Recoveries: ErrNotFound if absent or expired.
func (db *DB) Recovery(ctx context.Context, key string) (_ store.Recovery, err error) {
	defer store.Wrap(&err, "redis", "recovery %q", key)
	status, rest, err := db.run(ctx, recoveryScript, []string{db.keys.recovery(key)}, db.nowArg())
	if err != nil {
		return store.Recovery{}, err
	}
	if status != "ok" {
		return store.Recovery{}, outcome(status, rest)
	}
	if len(rest) != 1 {
		return store.Recovery{}, fmt.Errorf("unexpected reply of %d elements", len(rest))
	}
	return decodeRecovery(key, rest[0])
}

// TakeReplay implements store.Recoveries. The budget is taken inside the
// script, so concurrent callers on any number of DB values get exactly the
// budget between them.
func (db *DB) TakeReplay(ctx context.Context, key, operationID string) (_ store.Recovery, _ bool, err error) {
	defer store.Wrap(&err, "redis", "take replay %q", key)
	status, rest, err := db.run(ctx, takeReplayScript, []string{db.keys.recovery(key)}, db.nowArg(), operationID)
	if err != nil {
		return store.Recovery{}, false, err
	}
	switch {
	case status == "spent" && len(rest) == 1:
		rec, err := decodeRecovery(key, rest[0])
		return rec, false, err
	case status == "took" && len(rest) == 2:
		rec, err := decodeRecovery(key, rest[0])
		if err != nil {
			return store.Recovery{}, false, err
		}
		t, ok := rest[1].(string)
		now, perr := strconv.ParseInt(t, 10, 64)
		if !ok || perr != nil {
			return store.Recovery{}, false, fmt.Errorf("unexpected time %v in the script reply", rest[1])
		}
		// The script took one replay of what it read.
		rec.ReplaysLeft--
		rec.UpdatedAt = msTime(now)
		return rec, true, nil
	case status == "not_found":
		return store.Recovery{}, false, outcome(status, rest)
	default:
		return store.Recovery{}, false, fmt.Errorf("unexpected script reply %q of %d elements", status, len(rest))
	}
}

// decodeNamedRecovery decodes a record whose store key came in the reply.
func decodeNamedRecovery(name, v any) (store.Recovery, error) {
	key, ok := name.(string)
	if !ok {
		return store.Recovery{}, fmt.Errorf("unexpected record name %T in the script reply", name)
	}
	return decodeRecovery(key, v)
}

// decodeRecovery reads a recovery record, the HMGET of recoveryFields (all of
// them), from a script reply. A response is kept only with a valid HTTP
// status: a record read here may be replayed.
func decodeRecovery(key string, v any) (store.Recovery, error) {
	f, err := newFields(v, recoveryFields)
	if err != nil {
		return store.Recovery{}, fmt.Errorf("record %q: %w", key, err)
	}
	r := store.Recovery{
		Key:         key,
		Payer:       f.str(0),
		Fingerprint: f.str(1),
		OperationID: f.str(2),
		PaymentKey:  f.str(3),
		ProofHash:   f.str(4),
		ProofUntil:  msTime(f.int(5)),
		Amount:      f.str(6),
		State:       store.RecoveryState(f.str(7)),
		Settlement:  store.SettlementRef{Network: f.str(8), TxHash: f.str(9)},
		Owner:       f.str(10),
		Fence:       f.int(11),
		LeaseUntil:  msTime(f.int(12)),
		ExpiresAt:   msTime(f.int(13)),
		ReplaysLeft: int(f.int(14)),
		CreatedAt:   msTime(f.int(15)),
		UpdatedAt:   msTime(f.int(16)),
	}
	if f.has(17) {
		r.Response = &store.RecordedResponse{Status: int(f.int(17)), ContentType: f.str(18), Body: []byte(f.str(19))}
		if f.err == nil && (r.Response.Status < 100 || r.Response.Status > 599) {
			f.err = fmt.Errorf("field response_status: %d is not an HTTP status", r.Response.Status)
		}
	}
	if f.err != nil {
		return store.Recovery{}, fmt.Errorf("record %q: %w", key, f.err)
	}
	return r, nil
}

// replyTime renders a script's time in unix milliseconds for an error, or
// "?" if it is not one.
func replyTime(v any) string {
	s, ok := v.(string)
	if !ok {
		return "?"
	}
	ms, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return "?"
	}
	return msTime(ms).Format(time.RFC3339Nano)
}

var _ store.Recoveries = (*DB)(nil)
