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

// The receipt log (store.ReceiptLog). Its keys:
//
//   - keys.logLeaves(): a hash from the request id of every queued entry to
//     its leaf's bytes, written once.
//   - keys.logPending(): the queue, a sorted set of the pending request ids
//     scored by their queue number, drawn from the counter keys.logQueue()
//     in the order AppendLog (or PutReceipt) was given them. PendingLog reads
//     it from the lowest score; an integration takes its ids out. Scores are
//     doubles, so the scripts refuse to draw a queue number of 2^53 or more:
//     at 5,000 receipts a second that is some 57,000 years away.
//   - keys.logIndex(): a hash from the request id of every integrated entry
//     to its index (decimal), and keys.logLeafIDs() the other way, from
//     each index to its request id, so that LogLeaves reads a range of
//     indexes without a scan. An entry is pending exactly while its id is in
//     the queue and not in these two hashes.
//   - keys.logHashes(): a hash from each stored hash's storage index
//     (decimal) to its 32 bytes.
//   - keys.logState(): a hash with the fields logStateFields; absent until the
//     lease is first taken, which reads as the zero state. The checkpoint is
//     "" until the first integration. The state's fence is the lease's fence
//     counter too: a takeover writes the state's fence plus one, and nothing
//     deletes the state, so a fence is never handed out twice.
//
// Entries are fields of a few hashes rather than a hash each, so that a
// batch reads and writes them with one multi-field command per logChunk
// entries (HMGET, HSET, ZADD, ZMSCORE, ZREM), not one command per entry:
// Redis serves no one else while a script runs, and scripts that made a
// call or two per entry kept every other client waiting two to three times
// as long on a full batch. It also saves the key and field names a record
// per entry would repeat. Unlike the SQL backends, Redis keeps no time of
// queuing.
//
// Every write is one script that checks everything it depends on before
// its first write (Redis does not roll a script back), so a refusal found
// late (a conflicting leaf after new ones, a hash index already stored after
// the entries were checked) leaves nothing behind. IntegrateLog checks, in
// this order, the fence, the size, that every request id is pending
// (ErrFenced for any of these: another integrator moved the log), and that no
// hash index is repeated or already stored (an error that is no sentinel);
// then it writes the new size and checkpoint, the entries' indexes both
// ways and the hashes, and takes the ids out of the queue. A batch has up to
// store.MaxLogBatch ids and store.MaxLogHashes hashes: the scripts never
// hand more than logChunk values to one command, since Lua cannot unpack a
// table much longer than 8,000 onto its stack. Leaves, hashes and
// checkpoints are bytes, which Lua strings and Redis keep as they are.
//
// Sizes and indexes are Lua numbers, exact below 2^53: a size is only ever
// written by an integration, which refuses to grow the log past 2^53 leaves,
// and a size or index from Go is compared with what is stored as a decimal
// string before it is used as a number. Fences are compared as decimal
// strings, as in scripts.go.
//
// Nothing here has a TTL, and nothing is ever deleted: the log is
// append-only and lives in the server's memory, some hundreds of bytes per
// leaf with its hashes; run the server with maxmemory-policy noeviction (see
// the package comment). The scripts follow the conventions of scripts.go
// and start with its common Lua; they live here so that this file holds the
// whole backend for the log (receipts.go queues a receipt's leaf with the
// functions of receiptLogLua).

// logChunk bounds the values a script hands to one Redis command with
// unpack: Lua's C stack holds some 8,000, and a batch may carry over 16,000.
// It is even, so that a chunk of field-value pairs holds whole pairs.
const logChunk = 1000

// The fields of the log's state, in the order the scripts read them.
var logStateFields = []string{"size", "checkpoint", "holder", "fence", "lease_until_ms"}

// receiptLogLua reads the log's state and queues leaves. The state is the
// HMGET reply v: v[1] size, v[2] checkpoint, v[3] holder, v[4] fence,
// v[5] lease_until_ms.
var receiptLogLua = common + `
local chunk = ` + strconv.Itoa(logChunk) + `
-- max_exact is 2^53: Lua numbers (doubles) hold every integer up to it.
local max_exact = 9007199254740992

-- is_uint63 reports whether s is the decimal string of an integer in
-- 0..2^63-1 as Go writes it (no sign, no leading zero): what Go reads back
-- as an int64 >= 0. Such strings of one length compare as their numbers.
local function is_uint63(s)
  if s == '0' then return true end
  if not (s and string.match(s, '^[1-9]%d*$')) then return false end
  return #s < 19 or (#s == 19 and s <= '9223372036854775807')
end

-- dec_less reports a < b for two strings of is_uint63.
local function dec_less(a, b)
  if #a ~= #b then return #a < #b end
  return a < b
end

-- is_index reports whether s is an index a script wrote: below 2^53.
local function is_index(s)
  return is_uint63(s) and tonumber(s) < max_exact
end

local function get_state(key)
  local v = redis.call('HMGET', key, ` + luaStrings(logStateFields) + `)
  if not present(key, v, 5) then return nil end
  if not (is_uint63(v[1]) and tonumber(v[1]) <= max_exact and is_index(v[4]) and
      is_int(v[5]) and math.abs(tonumber(v[5])) < 1e15) then
    fail('record ' .. key .. ' has a size, fence or time out of range')
  end
  if v[1] ~= '0' and v[2] == '' then fail('record ' .. key .. ' has a size but no checkpoint') end
  return v
end

-- state_or_new returns the state at key, or the zero state of a new log,
-- and whether the record exists.
local function state_or_new(key)
  local v = get_state(key)
  if v == nil then return {'0', '', '', '0', '0'}, false end
  return v, true
end

-- each calls fn(first, last) for the ranges of 1..n of at most size.
local function each(n, size, fn)
  for c = 1, n, size do fn(c, math.min(c + size - 1, n)) end
end

-- queued_leaves returns the leaves queued under ids (false for none), read
-- from the leaves hash in chunks.
local function queued_leaves(leaves, ids)
  local out = {}
  each(#ids, chunk, function(c, e)
    local got = redis.call('HMGET', leaves, unpack(ids, c, e))
    for j = 1, e - c + 1 do
      if got[j] == '' then fail('hash ' .. leaves .. ' has an empty leaf for ' .. ids[c + j - 1]) end
      out[c + j - 1] = got[j]
    end
  end)
  return out
end

-- check_queue fails unless the queue and the leaves are absent or of their
-- types and the counter leaves room for n more queue numbers below 2^53.
-- GET fails on a counter that is not a string.
local function check_queue(pending, counter, leaves, n)
  expect_type(pending, 'zset')
  expect_type(leaves, 'hash')
  local c = redis.call('GET', counter)
  if c == false then c = '0' end
  if not is_uint63(c) or tonumber(c) + n >= max_exact then
    fail('counter ' .. counter .. ' is not a queue number below 2^53 with room for ' .. n .. ' more')
  end
end

-- queue queues ids with their leaves, in their order, after those queued
-- before. The caller checked that none is queued, and ran check_queue,
-- before its first write.
local function queue(pending, counter, leaves, ids, leaf_of)
  local first = redis.call('INCRBY', counter, #ids) - #ids
  each(#ids, chunk / 2, function(c, e)
    local kv, scored = {}, {}
    for i = c, e do
      local k = #kv
      kv[k + 1], kv[k + 2] = ids[i], leaf_of[i]
      scored[k + 1], scored[k + 2] = fmt_int(first + i), ids[i]
    end
    redis.call('HSET', leaves, unpack(kv))
    redis.call('ZADD', pending, unpack(scored))
  end)
end
`

// appendLogScript queues entries, new ids only, or refuses them all.
//
// KEYS: leaves, queue, queue counter.
// ARGV: each entry's request id and leaf.
// Reply: {'ok'} | {'conflict', msg}.
var appendLogScript = goredis.NewScript(receiptLogLua + `
-- The call's own ids once each, in their order, and the leaf each has.
local ids, leaf_of, seen = {}, {}, {}
for i = 1, #ARGV, 2 do
  local id, leaf = ARGV[i], ARGV[i + 1]
  if seen[id] == nil then
    seen[id] = leaf
    ids[#ids + 1], leaf_of[#leaf_of + 1] = id, leaf
  elseif seen[id] ~= leaf then
    return {'conflict', 'request id ' .. id .. ' has two leaves in the call'}
  end
end
local queued = queued_leaves(KEYS[1], ids)
local new_ids, new_leaves = {}, {}
for i = 1, #ids do
  if queued[i] then
    if queued[i] ~= leaf_of[i] then return {'conflict', 'request id ' .. ids[i] .. ' has another leaf queued'} end
  else
    new_ids[#new_ids + 1], new_leaves[#new_leaves + 1] = ids[i], leaf_of[i]
  end
end
if #new_ids == 0 then return {'ok'} end
check_queue(KEYS[2], KEYS[3], KEYS[1], #new_ids)
queue(KEYS[2], KEYS[3], KEYS[1], new_ids, new_leaves)
return {'ok'}
`)

// takeLogLeaseScript takes the lease when it is free (never taken, or
// ended: now >= lease_until_ms), with the next fence, or renews it for its
// live holder, keeping the fence.
//
// KEYS: state.
// ARGV: now, holder, ttl ms.
// Reply: {'held', state} | {'busy', state}.
var takeLogLeaseScript = goredis.NewScript(receiptLogLua + `
local now = clock(ARGV[1])
local v, exists = state_or_new(KEYS[1])
local live = exists and now < tonumber(v[5])
if live and v[3] ~= ARGV[2] then return {'busy', v} end
if not live then v[4] = fmt_int(tonumber(v[4]) + 1) end
v[3], v[5] = ARGV[2], fmt_int(now + tonumber(ARGV[3]))
redis.call('HSET', KEYS[1], 'size', v[1], 'checkpoint', v[2], 'holder', v[3], 'fence', v[4], 'lease_until_ms', v[5])
return {'held', v}
`)

// releaseLogLeaseScript ends the lease of holder under fence at now, unless
// it already ended.
//
// KEYS: state.
// ARGV: now, holder, fence.
// Reply: {'ok'} | {'fenced', msg}.
var releaseLogLeaseScript = goredis.NewScript(receiptLogLua + `
local now = clock(ARGV[1])
local v = get_state(KEYS[1])
if v == nil or v[4] == '0' then return {'fenced', 'the lease was never taken'} end
if v[3] ~= ARGV[2] or v[4] ~= ARGV[3] then
  return {'fenced', 'the lease is ' .. v[3] .. '\'s under fence ' .. v[4]}
end
if now < tonumber(v[5]) then redis.call('HSET', KEYS[1], 'lease_until_ms', fmt_int(now)) end
return {'ok'}
`)

// pendingLogScript lists up to limit pending entries, oldest queued first.
// A queued id without its leaf fails: the scripts write both together.
//
// KEYS: queue, leaves.
// ARGV: limit.
// Reply: {'ok', request id, leaf, ...}.
var pendingLogScript = goredis.NewScript(receiptLogLua + `
expect_type(KEYS[1], 'zset')
local ids = redis.call('ZRANGE', KEYS[1], '0', fmt_int(tonumber(ARGV[1]) - 1))
local leaves = queued_leaves(KEYS[2], ids)
local out = {'ok'}
for i, id in ipairs(ids) do
  if not leaves[i] then fail('queue ' .. KEYS[1] .. ' names ' .. id .. ', which has no leaf') end
  out[#out + 1] = id
  out[#out + 1] = leaves[i]
end
return out
`)

// integrateLogScript grows the log from size from by the given request ids,
// storing the hashes and the checkpoint (see the comment at the top of this
// file for its checks). An id both pending and indexed fails: the scripts
// never write one.
//
// KEYS: state, queue, id-to-index hash, index-to-id hash, hashes.
// ARGV: fence, from, checkpoint, n, then the n request ids, then each hash's
// storage index and bytes.
// Reply: {'ok'} | {'fenced', msg} | {'bad', msg}.
var integrateLogScript = goredis.NewScript(receiptLogLua + `
local v = get_state(KEYS[1])
if v == nil or v[4] == '0' then return {'fenced', 'the lease was never taken'} end
if v[4] ~= ARGV[1] then return {'fenced', 'fence ' .. ARGV[1] .. ' is stale, the lease\'s is ' .. v[4]} end
if v[1] ~= ARGV[2] then return {'fenced', 'the log\'s size is ' .. v[1] .. ', not ' .. ARGV[2]} end
local from, n = tonumber(v[1]), tonumber(ARGV[4])
if from + n > max_exact then return {'bad', 'the log cannot grow past 2^53 leaves'} end
local ids = {}
for i = 1, n do ids[i] = ARGV[4 + i] end
local first_hash = 5 + n
expect_type(KEYS[2], 'zset')
local reply = nil
each(n, chunk, function(c, e)
  if reply then return end
  local scores = redis.call('ZMSCORE', KEYS[2], unpack(ids, c, e))
  local indexes = redis.call('HMGET', KEYS[3], unpack(ids, c, e))
  for j = 1, e - c + 1 do
    local id = ids[c + j - 1]
    if scores[j] and indexes[j] then fail('request id ' .. id .. ' is both pending and integrated') end
    if not scores[j] then
      if indexes[j] then
        reply = {'fenced', 'request id ' .. id .. ' is integrated at ' .. indexes[j]}
      else
        reply = {'fenced', 'request id ' .. id .. ' is not queued'}
      end
      return
    end
  end
end)
if reply then return reply end
local seen = {}
for i = first_hash, #ARGV, 2 do
  if seen[ARGV[i]] then return {'bad', 'hash index ' .. ARGV[i] .. ' is repeated'} end
  seen[ARGV[i]] = true
end
for c = first_hash, #ARGV, 2 * chunk do
  local fields = {}
  for i = c, math.min(c + 2 * chunk - 1, #ARGV), 2 do fields[#fields + 1] = ARGV[i] end
  local got = redis.call('HMGET', KEYS[5], unpack(fields))
  for j = 1, #fields do
    if got[j] then return {'bad', 'hash index ' .. fields[j] .. ' is already stored'} end
  end
end
expect_type(KEYS[4], 'hash')
expect_type(KEYS[5], 'hash')

redis.call('HSET', KEYS[1], 'size', fmt_int(from + n), 'checkpoint', ARGV[3])
each(n, chunk / 2, function(c, e)
  local by_id, by_index = {}, {}
  for i = c, e do
    local k, x = #by_id, fmt_int(from + i - 1)
    by_id[k + 1], by_id[k + 2] = ids[i], x
    by_index[k + 1], by_index[k + 2] = x, ids[i]
  end
  redis.call('HSET', KEYS[3], unpack(by_id))
  redis.call('HSET', KEYS[4], unpack(by_index))
  redis.call('ZREM', KEYS[2], unpack(ids, c, e))
end)
for c = first_hash, #ARGV, chunk do
  redis.call('HSET', KEYS[5], unpack(ARGV, c, math.min(c + chunk - 1, #ARGV)))
end
return {'ok'}
`)

// logStateScript reads the state, the zero state for a new log.
//
// KEYS: state.
// Reply: {'ok', state}.
var logStateScript = goredis.NewScript(receiptLogLua + `
local v = state_or_new(KEYS[1])
return {'ok', v}
`)

// logHashesScript reads the hashes at the given storage indexes.
//
// KEYS: hashes.
// ARGV: the indexes.
// Reply: {'ok', hash or nil for each index, in order}.
var logHashesScript = goredis.NewScript(receiptLogLua + `
expect_type(KEYS[1], 'hash')
local out = {'ok'}
each(#ARGV, chunk, function(c, e)
  local got = redis.call('HMGET', KEYS[1], unpack(ARGV, c, e))
  for j = 1, e - c + 1 do out[#out + 1] = got[j] end
end)
return out
`)

// logEntryScript reads an entry: its leaf and its index, -1 while pending.
// A leaf neither pending nor indexed fails: the scripts never write one.
//
// KEYS: leaves, queue, id-to-index hash.
// ARGV: request id.
// Reply: {'ok', leaf, index} | {'not_found', msg}.
var logEntryScript = goredis.NewScript(receiptLogLua + `
local leaf = queued_leaves(KEYS[1], {ARGV[1]})[1]
if not leaf then return {'not_found', 'no entry'} end
local x = redis.call('HGET', KEYS[3], ARGV[1])
if x then
  if not is_index(x) then fail('hash ' .. KEYS[3] .. ' has index ' .. x .. ' for ' .. ARGV[1]) end
  return {'ok', leaf, x}
end
expect_type(KEYS[2], 'zset')
if not redis.call('ZSCORE', KEYS[2], ARGV[1]) then fail('entry ' .. ARGV[1] .. ' is neither pending nor integrated') end
return {'ok', leaf, '-1'}
`)

// logLeavesScript reads the leaves of the indexes from..to-1, all below the
// log's size; an index below the size without its entry fails, as the
// scripts never write one.
//
// KEYS: state, index-to-id hash, id-to-index hash, leaves.
// ARGV: from, to.
// Reply: {'ok', leaf...} | {'not_found', msg}.
var logLeavesScript = goredis.NewScript(receiptLogLua + `
local v = state_or_new(KEYS[1])
if dec_less(v[1], ARGV[2]) then
  return {'not_found', 'the log has ' .. v[1] .. ' leaves, not ' .. ARGV[2]}
end
local from, to = tonumber(ARGV[1]), tonumber(ARGV[2])
local out = {'ok'}
each(to - from, chunk, function(c, e)
  local xs = {}
  for i = c, e do xs[#xs + 1] = fmt_int(from + i - 1) end
  local ids = redis.call('HMGET', KEYS[2], unpack(xs))
  for j = 1, #xs do
    if not ids[j] then fail('index ' .. xs[j] .. ' of the log has no entry') end
  end
  local back = redis.call('HMGET', KEYS[3], unpack(ids))
  local leaves = queued_leaves(KEYS[4], ids)
  for j = 1, #xs do
    if back[j] ~= xs[j] or not leaves[j] then fail('index ' .. xs[j] .. ' of the log has no entry') end
    out[#out + 1] = leaves[j]
  end
end)
return out
`)

// receiptLogScripts are the scripts of store.Receipts and store.ReceiptLog.
var receiptLogScripts = []*goredis.Script{
	putReceiptScript, receiptScript, receiptsOfScript, recentReceiptsScript,
	appendLogScript, takeLogLeaseScript, releaseLogLeaseScript, pendingLogScript, integrateLogScript,
	logStateScript, logHashesScript, logEntryScript, logLeavesScript,
}

// The log's keys. The byte after "log-" tells them apart, from each other
// and from the anchors' "log-anchor:" and "log-anchors".
func (k keys) logLeaves() string  { return k.tag + "log-leaves" }
func (k keys) logPending() string { return k.tag + "log-pending" }
func (k keys) logQueue() string   { return k.tag + "log-queue" }
func (k keys) logIndex() string   { return k.tag + "log-index" }
func (k keys) logLeafIDs() string { return k.tag + "log-ids" }
func (k keys) logHashes() string  { return k.tag + "log-hashes" }
func (k keys) logState() string   { return k.tag + "log-state" }

// AppendLog implements store.ReceiptLog in one script.
func (db *DB) AppendLog(ctx context.Context, entries []store.LogEntry) (err error) {
	defer store.Wrap(&err, "redis", "append %d log entries", len(entries))
	if err := store.CheckAppendLog(entries); err != nil {
		return err
	}
	if len(entries) == 0 {
		_, cancel, err := db.gate.Op(ctx)
		if err != nil {
			return err
		}
		cancel()
		return nil
	}
	args := make([]any, 0, 2*len(entries))
	for _, e := range entries {
		args = append(args, e.RequestID, e.Leaf)
	}
	status, rest, err := db.run(ctx, appendLogScript, []string{db.keys.logLeaves(), db.keys.logPending(), db.keys.logQueue()}, args...)
	if err != nil {
		return err
	}
	return logOutcome(status, rest)
}

// TakeLogLease implements store.ReceiptLog in one script. A holder whose
// lease ended takes it again as anyone would, with a new fence: between the
// end and now another integrator could have held it.
func (db *DB) TakeLogLease(ctx context.Context, holder string, ttl time.Duration) (_ store.LogState, _ bool, err error) {
	defer store.Wrap(&err, "redis", "take log lease for %q", holder)
	if err := store.CheckLogLease(holder, ttl); err != nil {
		return store.LogState{}, false, err
	}
	status, rest, err := db.run(ctx, takeLogLeaseScript, []string{db.keys.logState()},
		db.nowArg(), holder, strconv.FormatInt(store.CeilMillis(ttl), 10))
	if err != nil {
		return store.LogState{}, false, err
	}
	if (status != "held" && status != "busy") || len(rest) != 1 {
		return store.LogState{}, false, fmt.Errorf("unexpected script reply %q of %d elements", status, len(rest))
	}
	st, err := decodeLogState(rest[0])
	return st, err == nil && status == "held", err
}

// ReleaseLogLease implements store.ReceiptLog in one script. A lease that
// already ended is left ended; releasing twice succeeds.
func (db *DB) ReleaseLogLease(ctx context.Context, holder string, fence int64) (err error) {
	defer store.Wrap(&err, "redis", "release log lease of %q", holder)
	status, rest, err := db.run(ctx, releaseLogLeaseScript, []string{db.keys.logState()},
		db.nowArg(), holder, strconv.FormatInt(fence, 10))
	if err != nil {
		return err
	}
	return outcome(status, rest)
}

// PendingLog implements store.ReceiptLog.
func (db *DB) PendingLog(ctx context.Context, limit int) (_ []store.LogEntry, err error) {
	defer store.Wrap(&err, "redis", "pending log entries")
	if err := store.CheckPendingLog(limit); err != nil {
		return nil, err
	}
	status, rest, err := db.run(ctx, pendingLogScript, []string{db.keys.logPending(), db.keys.logLeaves()}, strconv.Itoa(limit))
	if err != nil {
		return nil, err
	}
	if status != "ok" || len(rest)%2 != 0 {
		return nil, fmt.Errorf("unexpected script reply %q of %d elements", status, len(rest))
	}
	out := make([]store.LogEntry, 0, len(rest)/2)
	for i := 0; i < len(rest); i += 2 {
		id, ok1 := rest[i].(string)
		leaf, ok2 := rest[i+1].(string)
		if !ok1 || !ok2 {
			return nil, fmt.Errorf("unexpected pending entry %T, %T", rest[i], rest[i+1])
		}
		out = append(out, store.LogEntry{RequestID: id, Leaf: []byte(leaf), Index: -1})
	}
	return out, nil
}

// IntegrateLog implements store.ReceiptLog in one script, which checks the
// whole batch before its first write.
func (db *DB) IntegrateLog(ctx context.Context, fence, from int64, requestIDs []string, hashes []store.LogHash, checkpoint []byte) (err error) {
	defer store.Wrap(&err, "redis", "integrate %d log entries at %d", len(requestIDs), from)
	if err := store.CheckIntegrateLog(from, requestIDs, hashes, checkpoint); err != nil {
		return err
	}
	args := make([]any, 0, 4+len(requestIDs)+2*len(hashes))
	args = append(args, strconv.FormatInt(fence, 10), strconv.FormatInt(from, 10), checkpoint, strconv.Itoa(len(requestIDs)))
	for _, id := range requestIDs {
		args = append(args, id)
	}
	for _, h := range hashes {
		args = append(args, strconv.FormatInt(h.Index, 10), h.Hash[:])
	}
	status, rest, err := db.run(ctx, integrateLogScript,
		[]string{db.keys.logState(), db.keys.logPending(), db.keys.logIndex(), db.keys.logLeafIDs(), db.keys.logHashes()}, args...)
	if err != nil {
		return err
	}
	return logOutcome(status, rest)
}

// LogState implements store.ReceiptLog.
func (db *DB) LogState(ctx context.Context) (_ store.LogState, err error) {
	defer store.Wrap(&err, "redis", "log state")
	status, rest, err := db.run(ctx, logStateScript, []string{db.keys.logState()})
	if err != nil {
		return store.LogState{}, err
	}
	if status != "ok" || len(rest) != 1 {
		return store.LogState{}, fmt.Errorf("unexpected script reply %q of %d elements", status, len(rest))
	}
	return decodeLogState(rest[0])
}

// LogHashes implements store.ReceiptLog.
func (db *DB) LogHashes(ctx context.Context, indexes []int64) (_ [][32]byte, err error) {
	defer store.Wrap(&err, "redis", "%d log hashes", len(indexes))
	if err := store.CheckLogHashes(indexes); err != nil {
		return nil, err
	}
	args := make([]any, len(indexes))
	for i, x := range indexes {
		args[i] = strconv.FormatInt(x, 10)
	}
	status, rest, err := db.run(ctx, logHashesScript, []string{db.keys.logHashes()}, args...)
	if err != nil {
		return nil, err
	}
	if status != "ok" || len(rest) != len(indexes) {
		return nil, fmt.Errorf("unexpected script reply %q of %d elements", status, len(rest))
	}
	found := make(map[int64][32]byte, len(indexes))
	for i, v := range rest {
		if v == nil {
			continue
		}
		h, ok := v.(string)
		if !ok || len(h) != 32 {
			return nil, fmt.Errorf("hash %d is not 32 bytes", indexes[i])
		}
		found[indexes[i]] = [32]byte([]byte(h))
	}
	return store.OrderLogHashes(indexes, found)
}

// LogEntry implements store.ReceiptLog.
func (db *DB) LogEntry(ctx context.Context, requestID string) (_ store.LogEntry, err error) {
	defer store.Wrap(&err, "redis", "log entry %q", requestID)
	if !store.ValidID(requestID) {
		return store.LogEntry{}, store.ErrNotFound // never queued
	}
	status, rest, err := db.run(ctx, logEntryScript, []string{db.keys.logLeaves(), db.keys.logPending(), db.keys.logIndex()}, requestID)
	if err != nil {
		return store.LogEntry{}, err
	}
	if status != "ok" {
		return store.LogEntry{}, outcome(status, rest)
	}
	f, err := newFields(rest, []string{"leaf", "index"})
	if err != nil {
		return store.LogEntry{}, fmt.Errorf("entry %q: %w", requestID, err)
	}
	e := store.LogEntry{RequestID: requestID, Leaf: []byte(f.str(0)), Index: f.int(1)}
	if f.err != nil {
		return store.LogEntry{}, fmt.Errorf("entry %q: %w", requestID, f.err)
	}
	return e, nil
}

// LogLeaves implements store.ReceiptLog.
func (db *DB) LogLeaves(ctx context.Context, from, to int64) (_ [][]byte, err error) {
	defer store.Wrap(&err, "redis", "log leaves %d..%d", from, to)
	if err := store.CheckLogRange(from, to); err != nil {
		return nil, err
	}
	status, rest, err := db.run(ctx, logLeavesScript,
		[]string{db.keys.logState(), db.keys.logLeafIDs(), db.keys.logIndex(), db.keys.logLeaves()},
		strconv.FormatInt(from, 10), strconv.FormatInt(to, 10))
	if err != nil {
		return nil, err
	}
	if status != "ok" {
		return nil, outcome(status, rest)
	}
	if int64(len(rest)) != to-from {
		return nil, fmt.Errorf("unexpected reply of %d leaves", len(rest))
	}
	out := make([][]byte, len(rest))
	for i, v := range rest {
		leaf, ok := v.(string)
		if !ok {
			return nil, fmt.Errorf("unexpected leaf %T", v)
		}
		out[i] = []byte(leaf)
	}
	return out, nil
}

// logOutcome turns the reply of a script that answers ok, not_found,
// fenced, conflict (ErrConflict) or bad (an error that is no sentinel)
// into nil or the matching error.
func logOutcome(status string, rest []any) error {
	var msg string
	if len(rest) > 0 {
		msg, _ = rest[0].(string)
	}
	switch status {
	case "conflict":
		return fmt.Errorf("%s: %w", msg, store.ErrConflict)
	case "bad":
		return errors.New(msg)
	default:
		return outcome(status, rest)
	}
}

// decodeLogState reads the state, the HMGET of logStateFields, from a
// script reply. No checkpoint and no lease time read as nil and the zero
// time, as on a new log.
func decodeLogState(v any) (store.LogState, error) {
	f, err := newFields(v, logStateFields)
	if err != nil {
		return store.LogState{}, fmt.Errorf("log state: %w", err)
	}
	st := store.LogState{Size: f.int(0), Holder: f.str(2), Fence: f.int(3)}
	if cp := f.str(1); cp != "" {
		st.Checkpoint = []byte(cp)
	}
	if until := f.int(4); until != 0 {
		st.LeaseUntil = msTime(until)
	}
	if f.err != nil {
		return store.LogState{}, fmt.Errorf("log state: %w", f.err)
	}
	return st, nil
}

var _ store.ReceiptLog = (*DB)(nil)
