package redis

import (
	"slices"
	"strings"

	goredis "github.com/redis/go-redis/v9"
)

// The Lua scripts, one per operation. Redis runs a script to its end before it
// runs any other command, so each read-decide-write below is atomic against
// every other client, on any number of DB values.
//
// Redis does not roll a script back when it fails half way: whatever it wrote
// before the error stays. So every script reads and checks everything it
// depends on (key types, record fields, the counter) before its first write,
// and the writes after that point cannot fail on the data. Commands that fail
// on a key of another type (HMGET, INCR) serve as their own check where they
// come before any write.
//
// Conventions:
//   - ARGV[1] of every script that needs the time is the caller's clock in
//     unix milliseconds, or "" to take it from the server's TIME (DB.Now ==
//     nil, what Open sets). One script text serves both.
//   - Integers go into Redis through fmt_int (string.format '%d'): Lua numbers
//     are doubles, and tostring would write large ones with an exponent.
//   - Fences are compared as the decimal strings Redis stores, never as Lua
//     numbers, so a fence argument too large for a double cannot match by
//     rounding.
//   - Records are read with HMGET in a fixed field order (settlementFields,
//     paymentFields) and handed back to Go in that order; a script never
//     reads a record back after writing it, Go applies the write to what was
//     read (or to its own input, for a new record). That keeps each script to
//     a few commands: Redis runs one script at a time, so its cost is every
//     caller's latency.
//   - A script answers with an array whose first element is a status word;
//     expected outcomes (not found, fenced) are statuses, and only foreign
//     data raises a Redis error.
//   - Every key a script touches is in KEYS, except the records a listing
//     reads by the names in its set (unresolvedScript, recentScript,
//     receiptsOfScript, recentReceiptsScript, logAnchorsScript, the sign-in
//     sweep), and the per-network set of a settlement record, which a
//     script that did not know the record's network before reading it
//     names from the record (ARGV then carries the sets' prefix): those
//     share the store's hash tag, so they live in its cluster slot.

// The fields of a settlement record, in the order the scripts read them. The
// first 14 are always there; raw_tx only once RecordBroadcast wrote it, and
// reorg, reorgs and lost_to (all three or none) once MarkReorg did.
var settlementFields = []string{
	"network", "asset", "payer", "pay_to", "amount", "state", "tx_hash", "reason", "owner",
	"fence", "lease_until_ms", "success_reported", "created_at_ms", "updated_at_ms", "raw_tx",
	"reorg", "reorgs", "lost_to",
}

// The fields of a payment record, in the order the scripts read them. The
// first 11 are always there; the staged_ ones all or none. staged_body comes
// last so that scripts that do not need the body can leave it out.
var paymentFields = []string{
	"network", "payer", "amount", "state", "tx_hash", "owner",
	"fence", "lease_until_ms", "expires_at_ms", "created_at_ms", "updated_at_ms",
	"staged_status", "staged_content_type", "staged_fingerprint", "staged_body",
}

// common is the Lua every script starts with.
const common = `
local function fail(msg)
  error({err = 'ERR llm4agents store: ' .. msg})
end

local function fmt_int(n)
  return string.format('%d', n)
end

local function clock(arg)
  if arg ~= '' then
    local n = tonumber(arg)
    if n == nil then fail('clock argument is not a number') end
    return n
  end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function is_int(s)
  return s and string.match(s, '^%-?%d+$') ~= nil
end

-- expect_type fails unless key is absent or of type want.
local function expect_type(key, want)
  local got = redis.call('TYPE', key)['ok']
  if got ~= 'none' and got ~= want then
    fail('key ' .. key .. ' holds a ' .. got .. ', not a ' .. want)
  end
end

-- present counts the fields of v from 1 to n that are there, and fails if
-- some but not all are: a record is all of them or absent. If none is,
-- key must not exist (a hash with only other fields is foreign).
local function present(key, v, n)
  local c = 0
  for i = 1, n do
    if v[i] then c = c + 1 end
  end
  if c == 0 then
    if redis.call('EXISTS', key) == 1 then fail('key ' .. key .. ' is not a record of this store') end
    return false
  end
  if c < n then fail('record ' .. key .. ' lacks fields') end
  return true
end

-- add_recent puts name in a set of recent names (the settled records',
-- the receipts') at score now, forgets what is older than retention ms and
-- renews the set's TTL, so that the set holds one retention's worth and
-- goes away when nothing is added for that long. The caller checked the
-- set's type (expect_type) before its first write.
local function add_recent(set, now, name, retention)
  redis.call('ZADD', set, fmt_int(now), name)
  redis.call('ZREMRANGEBYSCORE', set, '-inf', '(' .. fmt_int(now - retention))
  redis.call('PEXPIRE', set, fmt_int(retention))
end

-- next_fence draws a fence from counter, above floor (the fence the record
-- carried before, or nil), so a key's fences only grow even if the counter
-- was deleted by hand. INCR fails on a counter that is not an integer.
local function next_fence(counter, floor)
  local f = redis.call('INCR', counter)
  if floor ~= nil and f <= floor then
    f = redis.call('INCRBY', counter, floor - f + 1)
  end
  return fmt_int(f)
end
`

// settlementLua reads settlement records. A record is the HMGET reply v:
// v[6] state, v[7] tx_hash, v[8] reason, v[9] owner, v[10] fence,
// v[11] lease_until_ms, v[12] success_reported, v[14] updated_at_ms,
// v[16] reorg, v[17] reorgs, v[18] lost_to (get_settlement fills these
// three in for a record that lacks them).
//
// The records in StateClaimed or StateBroadcast are in the unresolved sets
// (the one of their network and the one of every network, see keys),
// scored by created_at_ms: the claim adds them, and the scripts that
// resolve, release or abandon a record take it out.
//
// The settled records that RecentSettlements may list (not lost to a
// reorg) are also in the sets of recent settlements, scored by
// updated_at_ms: the scripts that write such a record add it there
// (add_recent) with the time they write, so the score is the record's
// updated_at_ms, and the one that marks it lost takes it out. The sets
// forget what is older than store.RecentRetention and have that TTL.
var settlementLua = common + `
local settlement_states = {claimed = true, broadcast = true, settled = true, failed = true}
local reorg_states = {[''] = true, dropped = true, lost = true}

local function get_settlement(key)
  local v = redis.call('HMGET', key, ` + luaStrings(settlementFields) + `)
  if not present(key, v, 14) then return nil end
  if not settlement_states[v[6]] then fail('record ' .. key .. ' has unknown state ' .. v[6]) end
  if not (is_int(v[10]) and is_int(v[11]) and is_int(v[13]) and is_int(v[14])) then
    fail('record ' .. key .. ' has a fence or time that is not an integer')
  end
  if v[12] ~= '0' and v[12] ~= '1' then fail('record ' .. key .. ' has success_reported ' .. v[12]) end
  if v[16] or v[17] or v[18] then
    if not (v[16] and reorg_states[v[16]] and is_int(v[17]) and v[18]) then
      fail('record ' .. key .. ' has a malformed reorg mark')
    end
  else
    v[16], v[17], v[18] = '', '0', ''
  end
  return v
end

local function stale(fence, v)
  return {'fenced', 'fence ' .. fence .. ' is stale, the record\'s is ' .. v[10]}
end

local function is_unresolved(v)
  return v[6] == 'claimed' or v[6] == 'broadcast'
end

local function is_recent(v)
  return v[6] == 'settled' and v[16] ~= 'lost'
end

-- drain moves up to batch names out of the legacy set old, which versions
-- before per-network sets kept for every network (and still write while
-- they run, during an upgrade), into the set all and the set of each
-- record's network (net_prefix .. network), scored by field score of the
-- record (13 created_at_ms, 14 updated_at_ms). A record keep(v) refuses
-- (resolved, lost, or gone) is only taken out. When ttl is not nil, each
-- set it adds to gets that TTL, as add_recent gives. It reads every record
-- before its first write; each name moves whole, so a listing that fails
-- after the drain leaves the sets in step.
local function drain(old, all, net_prefix, rec_prefix, batch, keep, score, ttl)
  expect_type(old, 'zset')
  local names = redis.call('ZRANGE', old, '0', fmt_int(batch - 1))
  if #names == 0 then return end
  expect_type(all, 'zset')
  local moves = {}
  for _, name in ipairs(names) do
    local v = get_settlement(rec_prefix .. name)
    if v ~= nil and keep(v) then
      local net = net_prefix .. v[1]
      expect_type(net, 'zset')
      moves[#moves + 1] = {name, v[score], net}
    end
  end
  for _, m in ipairs(moves) do
    redis.call('ZADD', all, m[2], m[1])
    redis.call('ZADD', m[3], m[2], m[1])
    if ttl then
      redis.call('PEXPIRE', all, ttl)
      redis.call('PEXPIRE', m[3], ttl)
    end
  end
  redis.call('ZREMRANGEBYRANK', old, '0', fmt_int(#names - 1))
end
`

// claimSettlementScript creates, takes over or returns a settlement record.
//
// KEYS: record, fence counter, unresolved set of every network, unresolved
// set of the record's network.
// ARGV: now, lease ms, key, network, asset, payer, pay_to, amount, owner.
// Reply: {'won', fence, now} | {'took_over', rec, fence, now} | {'held', rec}.
var claimSettlementScript = goredis.NewScript(settlementLua + `
local now = clock(ARGV[1])
local lease = tonumber(ARGV[2])
-- A new claim is the hot path: one EXISTS tells it, instead of HMGET and
-- then EXISTS (see present).
local v = nil
if redis.call('EXISTS', KEYS[1]) == 1 then v = get_settlement(KEYS[1]) end
if v == nil then
  expect_type(KEYS[3], 'zset')
  expect_type(KEYS[4], 'zset')
  local fence = next_fence(KEYS[2], nil)
  local t = fmt_int(now)
  redis.call('HSET', KEYS[1],
    'network', ARGV[4], 'asset', ARGV[5], 'payer', ARGV[6], 'pay_to', ARGV[7], 'amount', ARGV[8],
    'state', 'claimed', 'tx_hash', '', 'reason', '', 'owner', ARGV[9], 'fence', fence,
    'lease_until_ms', fmt_int(now + lease), 'success_reported', '0', 'created_at_ms', t, 'updated_at_ms', t)
  redis.call('ZADD', KEYS[3], t, ARGV[3])
  redis.call('ZADD', KEYS[4], t, ARGV[3])
  return {'won', fence, t}
end
if v[6] == 'claimed' and now >= tonumber(v[11]) then
  local fence = next_fence(KEYS[2], tonumber(v[10]))
  local t = fmt_int(now)
  redis.call('HSET', KEYS[1], 'owner', ARGV[9], 'fence', fence, 'lease_until_ms', fmt_int(now + lease), 'updated_at_ms', t,
    'pay_to', ARGV[7], 'amount', ARGV[8])
  return {'took_over', v, fence, t}
end
return {'held', v}
`)

// updateSettlementScript moves a record under its fence.
//
// KEYS: record, unresolved set of every network, recent set of every
// network.
// ARGV: now, fence, state, tx hash, reason, key, recent retention ms,
// prefix of the unresolved sets of one network, prefix of the recent sets
// of one network.
// Reply: {'ok'} | {'not_found', msg} | {'fenced', msg}.
var updateSettlementScript = goredis.NewScript(settlementLua + `
local now = clock(ARGV[1])
local v = get_settlement(KEYS[1])
if v == nil then return {'not_found', 'no record'} end
if v[10] ~= ARGV[2] then return stale(ARGV[2], v) end
if v[6] == 'settled' or v[6] == 'failed' then
  if v[6] == ARGV[3] and v[7] == ARGV[4] and v[8] == ARGV[5] then return {'ok'} end
  return {'fenced', 'record is already ' .. v[6]}
end
local resolved = ARGV[3] == 'settled' or ARGV[3] == 'failed'
local settled = ARGV[3] == 'settled'
local unresolved_net, recent_net = ARGV[8] .. v[1], ARGV[9] .. v[1]
if resolved then
  expect_type(KEYS[2], 'zset')
  expect_type(unresolved_net, 'zset')
end
if settled then
  expect_type(KEYS[3], 'zset')
  expect_type(recent_net, 'zset')
end
redis.call('HSET', KEYS[1], 'state', ARGV[3], 'tx_hash', ARGV[4], 'reason', ARGV[5], 'updated_at_ms', fmt_int(now))
if resolved then
  redis.call('ZREM', KEYS[2], ARGV[6])
  redis.call('ZREM', unresolved_net, ARGV[6])
end
if settled then
  add_recent(KEYS[3], now, ARGV[6], tonumber(ARGV[7]))
  add_recent(recent_net, now, ARGV[6], tonumber(ARGV[7]))
end
return {'ok'}
`)

// releaseSettlementScript deletes a record still claimed under its fence.
//
// KEYS: record, unresolved set of every network.
// ARGV: fence, key, prefix of the unresolved sets of one network.
// Reply: {'ok'} | {'not_found', msg} | {'fenced', msg}.
var releaseSettlementScript = goredis.NewScript(settlementLua + `
local v = get_settlement(KEYS[1])
if v == nil then return {'not_found', 'no record'} end
if v[10] ~= ARGV[1] then return stale(ARGV[1], v) end
if v[6] ~= 'claimed' then return {'fenced', 'record is ' .. v[6] .. ', past claimed'} end
local unresolved_net = ARGV[3] .. v[1]
expect_type(KEYS[2], 'zset')
expect_type(unresolved_net, 'zset')
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[2])
redis.call('ZREM', unresolved_net, ARGV[2])
return {'ok'}
`)

// recordBroadcastScript moves a claimed or broadcast record under its fence
// to broadcast with a transaction hash and the signed transaction.
//
// KEYS: record.
// ARGV: now, fence, tx hash, raw tx.
// Reply: {'ok'} | {'not_found', msg} | {'fenced', msg}.
var recordBroadcastScript = goredis.NewScript(settlementLua + `
local now = clock(ARGV[1])
local v = get_settlement(KEYS[1])
if v == nil then return {'not_found', 'no record'} end
if v[10] ~= ARGV[2] then return stale(ARGV[2], v) end
if v[6] ~= 'claimed' and v[6] ~= 'broadcast' then return {'fenced', 'record is already ' .. v[6]} end
redis.call('HSET', KEYS[1], 'state', 'broadcast', 'tx_hash', ARGV[3], 'raw_tx', ARGV[4], 'updated_at_ms', fmt_int(now))
return {'ok'}
`)

// abandonBroadcastScript deletes a broadcast record under its fence that
// still names the given transaction.
//
// KEYS: record, unresolved set of every network.
// ARGV: fence, tx hash, key, prefix of the unresolved sets of one network.
// Reply: {'ok'} | {'not_found', msg} | {'fenced', msg}.
var abandonBroadcastScript = goredis.NewScript(settlementLua + `
local v = get_settlement(KEYS[1])
if v == nil then return {'not_found', 'no record'} end
if v[10] ~= ARGV[1] then return stale(ARGV[1], v) end
if v[6] ~= 'broadcast' then return {'fenced', 'record is ' .. v[6] .. ', not broadcast'} end
if v[7] ~= ARGV[2] then return {'fenced', 'record names transaction ' .. v[7] .. ', not ' .. ARGV[2]} end
local unresolved_net = ARGV[4] .. v[1]
expect_type(KEYS[2], 'zset')
expect_type(unresolved_net, 'zset')
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[3])
redis.call('ZREM', unresolved_net, ARGV[3])
return {'ok'}
`)

// markSuccessReportedScript sets success_reported on a settled record once.
//
// KEYS: record, recent set of every network.
// ARGV: now, key, recent retention ms, prefix of the recent sets of one
// network.
// Reply: {'ok', '1' if this call set it, else '0'} | {'not_found', msg}.
var markSuccessReportedScript = goredis.NewScript(settlementLua + `
local now = clock(ARGV[1])
local v = get_settlement(KEYS[1])
if v == nil then return {'not_found', 'no record'} end
if v[6] ~= 'settled' or v[12] ~= '0' then return {'ok', '0'} end
local recent = v[16] ~= 'lost'
local recent_net = ARGV[4] .. v[1]
if recent then
  expect_type(KEYS[2], 'zset')
  expect_type(recent_net, 'zset')
end
redis.call('HSET', KEYS[1], 'success_reported', '1', 'updated_at_ms', fmt_int(now))
if recent then
  add_recent(KEYS[2], now, ARGV[2], tonumber(ARGV[3]))
  add_recent(recent_net, now, ARGV[2], tonumber(ARGV[3]))
end
return {'ok', '1'}
`)

// markReorgScript records what the reconciler found of a settled record's
// transaction (store.Settlements.MarkReorg), following store.ReorgStep.
//
// KEYS: record, recent set of every network.
// ARGV: now, tx hash, status, lost to, key, recent retention ms, prefix of
// the recent sets of one network.
// Reply: {'ok', '1' if this call changed the record, else '0'} |
// {'not_found', msg} | {'fenced', msg}.
var markReorgScript = goredis.NewScript(settlementLua + `
local now = clock(ARGV[1])
local v = get_settlement(KEYS[1])
if v == nil then return {'not_found', 'no record'} end
if v[6] ~= 'settled' then return {'fenced', 'record is ' .. v[6] .. ', not settled'} end
if v[7] ~= ARGV[2] then return {'fenced', 'record names transaction ' .. v[7] .. ', not ' .. ARGV[2]} end
local from, to = v[16], ARGV[3]
if from == 'lost' then
  if to == 'lost' then return {'ok', '0'} end
  return {'fenced', 'record is lost to a reorg, which is final'}
end
if from == to then return {'ok', '0'} end
if from == '' and to == 'lost' then return {'fenced', 'record is on the chain, not dropped'} end
local recent_net = ARGV[7] .. v[1]
expect_type(KEYS[2], 'zset')
expect_type(recent_net, 'zset')
local reorgs = tonumber(v[17])
if to == 'dropped' then reorgs = reorgs + 1 end
redis.call('HSET', KEYS[1], 'reorg', to, 'reorgs', fmt_int(reorgs), 'lost_to', ARGV[4], 'updated_at_ms', fmt_int(now))
if to == 'lost' then
  redis.call('ZREM', KEYS[2], ARGV[5])
  redis.call('ZREM', recent_net, ARGV[5])
else
  add_recent(KEYS[2], now, ARGV[5], tonumber(ARGV[6]))
  add_recent(recent_net, now, ARGV[5], tonumber(ARGV[6]))
end
return {'ok', '1'}
`)

// settlementScript reads a record.
//
// KEYS: record.
// Reply: {'ok', rec} | {'not_found', msg}.
var settlementScript = goredis.NewScript(settlementLua + `
local v = get_settlement(KEYS[1])
if v == nil then return {'not_found', 'no record'} end
return {'ok', v}
`)

// unresolvedScript lists up to limit claimed or broadcast records of one
// set (a network's, or every network's), oldest first: the set's order, by
// creation time, then by key. It drains the legacy set first. A name in
// the set whose record is gone, resolved or of another network than the
// one asked for is skipped and taken out of the set: the scripts keep the
// sets in step, so that happens only when a version without per-network
// sets resolved or released the record (during an upgrade), or after
// someone edited the keys by hand.
//
// KEYS: legacy unresolved set, unresolved set of every network, the set
// listed.
// ARGV: limit, record key prefix, prefix of the unresolved sets of one
// network, the network listed (empty for every network), drain batch.
// Reply: {'ok', {key, rec}...}.
var unresolvedScript = goredis.NewScript(settlementLua + `
drain(KEYS[1], KEYS[2], ARGV[3], ARGV[2], tonumber(ARGV[5]), is_unresolved, 13, nil)
expect_type(KEYS[3], 'zset')
local limit = tonumber(ARGV[1])
local network = ARGV[4]
local out = {'ok'}
local gone = {}
local n = 0
local from = 0
while n < limit do
  local names = redis.call('ZRANGE', KEYS[3], fmt_int(from), fmt_int(from + limit - 1))
  if #names == 0 then break end
  for _, name in ipairs(names) do
    local v = get_settlement(ARGV[2] .. name)
    if v ~= nil and is_unresolved(v) and (network == '' or v[1] == network) then
      out[#out + 1] = {name, v}
      n = n + 1
      if n == limit then break end
    else
      gone[#gone + 1] = name
    end
  end
  from = from + #names
end
for _, name in ipairs(gone) do
  redis.call('ZREM', KEYS[3], name)
end
return out
`)

// recentScript lists up to limit settled records of one set (a network's,
// or every network's), not lost to a reorg, updated at or after since,
// newest first: the set's order, by updated_at_ms, then by key, both
// descending. It drains the legacy set first. A name in the set whose
// record is gone, no longer such a record, updated before since or of
// another network than the one asked for is skipped (the scripts keep the
// sets in step, so that only happens when a version without per-network
// sets marked the record lost during an upgrade, or after someone edited
// the keys by hand; the set forgets such names with the others, once they
// are older than store.RecentRetention).
//
// KEYS: legacy recent set, recent set of every network, the set listed.
// ARGV: since ms, limit, record key prefix, prefix of the recent sets of
// one network, the network listed (empty for every network), drain batch,
// recent retention ms.
// Reply: {'ok', {key, rec}...}.
var recentScript = goredis.NewScript(settlementLua + `
drain(KEYS[1], KEYS[2], ARGV[4], ARGV[3], tonumber(ARGV[6]), is_recent, 14, ARGV[7])
expect_type(KEYS[3], 'zset')
local since = tonumber(ARGV[1])
local limit = tonumber(ARGV[2])
local network = ARGV[5]
local out = {'ok'}
local n = 0
local from = 0
while n < limit do
  local names = redis.call('ZREVRANGEBYSCORE', KEYS[3], '+inf', fmt_int(since), 'LIMIT', fmt_int(from), fmt_int(limit))
  if #names == 0 then break end
  for _, name in ipairs(names) do
    local v = get_settlement(ARGV[3] .. name)
    if v ~= nil and is_recent(v) and tonumber(v[14]) >= since and (network == '' or v[1] == network) then
      out[#out + 1] = {name, v}
      n = n + 1
      if n == limit then break end
    end
  end
  from = from + #names
end
return out
`)

// paymentLua reads payment records. A record is the HMGET reply v:
// v[4] state, v[5] tx_hash, v[6] owner, v[7] fence, v[8] lease_until_ms,
// v[9] expires_at_ms, v[12..15] the staged response (v[15] the body, read
// only when asked for).
var paymentLua = common + `
local payment_states = {held = true, pending = true, settled = true}

local function get_payment(key, with_body)
  local v
  if with_body then
    v = redis.call('HMGET', key, ` + luaStrings(paymentFields) + `)
  else
    v = redis.call('HMGET', key, ` + luaStrings(paymentFields[:len(paymentFields)-1]) + `)
  end
  if not present(key, v, 11) then return nil end
  if not payment_states[v[4]] then fail('record ' .. key .. ' has unknown state ' .. v[4]) end
  if not (is_int(v[7]) and is_int(v[8]) and is_int(v[9]) and is_int(v[10]) and is_int(v[11])) then
    fail('record ' .. key .. ' has a fence or time that is not an integer')
  end
  if v[12] or v[13] or v[14] then
    local body = v[15]
    if not with_body then body = redis.call('HEXISTS', key, 'staged_body') == 1 end
    if not (is_int(v[12]) and v[13] and v[14] and body) then
      fail('record ' .. key .. ' has an incomplete staged response')
    end
  end
  return v
end

-- live_payment returns the record at key (without the body) if it exists,
-- has not expired at now and carries fence; otherwise nil and the reply to
-- give.
local function live_payment(key, fence, now)
  local v = get_payment(key, false)
  if v == nil then return nil, {'not_found', 'no record'} end
  if now >= tonumber(v[9]) then return nil, {'not_found', 'record expired at ' .. v[9]} end
  if v[7] ~= fence then return nil, {'fenced', 'fence ' .. fence .. ' is stale, the record\'s is ' .. v[7]} end
  return v
end
`

// claimPaymentScript creates, takes over, replaces (expired) or returns a
// payment claim. A record it creates expires in Redis margin ms after its
// ExpiresAt, measured from now: PEXPIRE, not PEXPIREAT, so that a test clock
// far from the server's gives the same TTL as the server's clock does; a
// takeover keeps the key's TTL.
//
// KEYS: record, fence counter.
// ARGV: now, lease ms, expires ms, margin ms, network, payer, amount, owner.
// Reply: {'won', fence, now} | {'replaced', fence, now, previous owner,
// previous state} | {'took_over', rec, fence, now} | {'held', rec} |
// {'bad', now}.
var claimPaymentScript = goredis.NewScript(paymentLua + `
local now = clock(ARGV[1])
local lease = tonumber(ARGV[2])
local expires = tonumber(ARGV[3])
local margin = tonumber(ARGV[4])
if expires <= now then return {'bad', fmt_int(now)} end
-- A new claim is the hot path: one EXISTS tells it (see claimSettlementScript).
local v = nil
if redis.call('EXISTS', KEYS[1]) == 1 then v = get_payment(KEYS[1], true) end
local expired = v ~= nil and now >= tonumber(v[9])
if v == nil or expired then
  local floor = nil
  if expired then floor = tonumber(v[7]) end
  local fence = next_fence(KEYS[2], floor)
  if expired then redis.call('DEL', KEYS[1]) end
  local t = fmt_int(now)
  redis.call('HSET', KEYS[1],
    'network', ARGV[5], 'payer', ARGV[6], 'amount', ARGV[7], 'state', 'held', 'tx_hash', '',
    'owner', ARGV[8], 'fence', fence, 'lease_until_ms', fmt_int(now + lease),
    'expires_at_ms', fmt_int(expires), 'created_at_ms', t, 'updated_at_ms', t)
  redis.call('PEXPIRE', KEYS[1], fmt_int(expires - now + margin))
  if expired then return {'replaced', fence, t, v[6], v[4]} end
  return {'won', fence, t}
end
if v[4] == 'held' and now >= tonumber(v[8]) then
  local fence = next_fence(KEYS[2], tonumber(v[7]))
  local t = fmt_int(now)
  redis.call('HSET', KEYS[1], 'owner', ARGV[8], 'fence', fence, 'lease_until_ms', fmt_int(now + lease), 'updated_at_ms', t)
  return {'took_over', v, fence, t}
end
return {'held', v}
`)

// releasePaymentScript deletes a held or pending claim under its fence.
//
// KEYS: record.
// ARGV: now, fence.
// Reply: {'ok'} | {'not_found', msg} | {'fenced', msg}.
var releasePaymentScript = goredis.NewScript(paymentLua + `
local v, reply = live_payment(KEYS[1], ARGV[2], clock(ARGV[1]))
if v == nil then return reply end
if v[4] == 'settled' then return {'fenced', 'record is settled'} end
redis.call('DEL', KEYS[1])
return {'ok'}
`)

// updatePaymentScript moves a claim under its fence to pending or settled.
//
// KEYS: record.
// ARGV: now, fence, state, tx hash.
// Reply: {'ok'} | {'not_found', msg} | {'fenced', msg}.
var updatePaymentScript = goredis.NewScript(paymentLua + `
local now = clock(ARGV[1])
local v, reply = live_payment(KEYS[1], ARGV[2], now)
if v == nil then return reply end
if v[4] == 'settled' then
  if ARGV[3] == 'settled' and v[5] == ARGV[4] then return {'ok'} end
  return {'fenced', 'record is already settled with transaction "' .. v[5] .. '"'}
end
redis.call('HSET', KEYS[1], 'state', ARGV[3], 'tx_hash', ARGV[4], 'updated_at_ms', fmt_int(now))
return {'ok'}
`)

// stagePaymentScript keeps a response with a held or pending claim.
//
// KEYS: record.
// ARGV: now, fence, status, content type, body, fingerprint.
// Reply: {'ok'} | {'not_found', msg} | {'fenced', msg}.
var stagePaymentScript = goredis.NewScript(paymentLua + `
local now = clock(ARGV[1])
local v, reply = live_payment(KEYS[1], ARGV[2], now)
if v == nil then return reply end
if v[4] == 'settled' then return {'fenced', 'record is settled'} end
redis.call('HSET', KEYS[1], 'staged_status', ARGV[3], 'staged_content_type', ARGV[4],
  'staged_body', ARGV[5], 'staged_fingerprint', ARGV[6], 'updated_at_ms', fmt_int(now))
return {'ok'}
`)

// paymentScript reads a claim that has not expired.
//
// KEYS: record.
// ARGV: now.
// Reply: {'ok', rec} | {'not_found', msg}.
var paymentScript = goredis.NewScript(paymentLua + `
local now = clock(ARGV[1])
local v = get_payment(KEYS[1], true)
if v == nil then return {'not_found', 'no record'} end
if now >= tonumber(v[9]) then return {'not_found', 'record expired at ' .. v[9]} end
return {'ok', v}
`)

// luaStrings writes names as Lua string literals separated by commas; the
// names are plain identifiers, so no quoting is needed.
func luaStrings(names []string) string {
	var b strings.Builder
	for i, n := range names {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("'" + n + "'")
	}
	return b.String()
}

// scripts lists every script, for Open to load.
var scripts = []*goredis.Script{
	claimSettlementScript, updateSettlementScript, releaseSettlementScript, markSuccessReportedScript,
	settlementScript, unresolvedScript, recordBroadcastScript, abandonBroadcastScript, markReorgScript, recentScript,
	claimPaymentScript, releasePaymentScript, updatePaymentScript, stagePaymentScript, paymentScript,
	beginRecoveryScript, stageRecoveryScript, promoteRecoveryScript, abandonRecoveryScript, recoveryScript,
	takeReplayScript,
}

// allScripts lists every script of the backend, for Open to load: those
// above, and those of the files that keep their own (receipts and the
// receipt log, the log's anchors, sign-ins).
var allScripts = slices.Concat(scripts, receiptLogScripts, logAnchorScripts, signInScripts)
