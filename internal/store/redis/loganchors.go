package redis

import (
	"context"
	"encoding/hex"
	"fmt"
	"strconv"

	goredis "github.com/redis/go-redis/v9"

	"github.com/llm4agents/llm4agents/internal/store"
)

// The receipt log's anchors (store.LogAnchors). Each anchor is a hash at
// keys.logAnchor(tx hash) with the fields logAnchorFields, all of them always
// there: the root as 64 lowercase hex digits, the size and the block as the
// decimal strings Go sent (never Lua numbers, which are doubles and would
// round a size or a block above 2^53), block "0" until ConfirmAnchor. The
// listing is the sorted set keys.logAnchors(), every member at score 0, so
// that the set is ordered by its members' bytes: a member is the anchor's
// SentAt in unix milliseconds plus 10^15, in 16 digits (so that a time before
// 1970 still sorts by value; a clock more than 10^15 ms, some 31,000 years,
// from 1970 is refused), its size in 19 digits, then its tx hash, the
// numbers zero-padded to those widths. ZREVRANGEBYLEX reads it newest first, by
// SentAt, then Size, then TxHash, each descending, as store.LogAnchors asks;
// a ZSET score could not hold all three exactly. RecordAnchor writes the
// record and its member in one script, and nothing moves a member after:
// ConfirmAnchor changes only the block, which is no part of the order.
//
// Anchors have no TTL and nothing deletes them: they are what may have gone
// out on chain, for anyone to check (D30). The scripts follow the
// conventions of scripts.go and start with its common Lua; they live here so
// that this file holds the whole backend for anchors. Like the settlement
// listings, logAnchorsScript reads the records its set names, which are
// not in KEYS but share the set's hash tag, so its cluster slot.

// The fields of an anchor record, in the order the scripts read them.
var logAnchorFields = []string{"size", "root", "network", "contract", "sender", "sent_at_ms", "block"}

// logAnchorLua reads anchor records and builds their members of the listing.
// A record is the HMGET reply v: v[1] size, v[2] root, v[3] network,
// v[4] contract, v[5] sender, v[6] sent_at_ms, v[7] block.
var logAnchorLua = common + `
-- is_int64 reports whether s is the decimal string of an integer in
-- 1..2^63-1, or 0 too if zero: what Go reads back as an int64. Digit strings
-- of one length compare as their numbers.
local function is_int64(s, zero)
  if zero and s == '0' then return true end
  if not string.match(s, '^[1-9]%d*$') then return false end
  return #s < 19 or (#s == 19 and s <= '9223372036854775807')
end

local function get_anchor(key)
  local v = redis.call('HMGET', key, ` + luaStrings(logAnchorFields) + `)
  if not present(key, v, 7) then return nil end
  if not (is_int64(v[1], false) and is_int(v[6]) and math.abs(tonumber(v[6])) < 1e15 and is_int64(v[7], true)) then
    fail('record ' .. key .. ' has a size, time or block out of its range')
  end
  if #v[2] ~= 64 or string.find(v[2], '[^0-9a-f]') then fail('record ' .. key .. ' has a root that is not 64 hex digits') end
  return v
end

-- anchor_member is the member of the listing for an anchor sent at ms
-- (a Lua number) with size (a decimal string) and tx hash.
local function anchor_member(ms, size, tx)
  if ms <= -1e15 or ms >= 1e15 then fail('time ' .. fmt_int(ms) .. ' ms is out of the range anchors are ordered in') end
  if #size > 19 then fail('size ' .. size .. ' has over 19 digits') end
  return string.format('%016d', ms + 1e15) .. string.rep('0', 19 - #size) .. size .. tx
end
`

// recordAnchorScript records an anchor, or returns the record of its
// transaction for Go to compare (store.SameAnchor).
//
// KEYS: record, listing set.
// ARGV: now, tx hash, size, root, network, contract, sender.
// Reply: {'ok'} | {'exists', rec}.
var recordAnchorScript = goredis.NewScript(logAnchorLua + `
local now = clock(ARGV[1])
local v = get_anchor(KEYS[1])
if v ~= nil then return {'exists', v} end
expect_type(KEYS[2], 'zset')
local member = anchor_member(now, ARGV[3], ARGV[2])
redis.call('HSET', KEYS[1], 'size', ARGV[3], 'root', ARGV[4], 'network', ARGV[5], 'contract', ARGV[6],
  'sender', ARGV[7], 'sent_at_ms', fmt_int(now), 'block', '0')
redis.call('ZADD', KEYS[2], '0', member)
return {'ok'}
`)

// confirmAnchorScript sets the block of an anchor, whatever it was.
//
// KEYS: record.
// ARGV: block.
// Reply: {'ok'} | {'not_found', msg}.
var confirmAnchorScript = goredis.NewScript(logAnchorLua + `
local v = get_anchor(KEYS[1])
if v == nil then return {'not_found', 'no anchor has this transaction'} end
if v[7] ~= ARGV[1] then redis.call('HSET', KEYS[1], 'block', ARGV[1]) end
return {'ok'}
`)

// logAnchorsScript lists up to limit anchors, newest first: the set's
// order, read backwards. A member whose record is gone (the scripts never
// delete one, so that only happens after someone edited the keys by hand) is
// skipped; a member that is not the one its record's fields make fails, as
// the listing would be out of order.
//
// KEYS: listing set.
// ARGV: limit, record key prefix.
// Reply: {'ok', {tx hash, rec}...}.
var logAnchorsScript = goredis.NewScript(logAnchorLua + `
expect_type(KEYS[1], 'zset')
local limit = tonumber(ARGV[1])
local out = {'ok'}
local n = 0
local from = 0
while n < limit do
  local members = redis.call('ZREVRANGEBYLEX', KEYS[1], '+', '-', 'LIMIT', fmt_int(from), fmt_int(limit))
  if #members == 0 then break end
  for _, m in ipairs(members) do
    local tx = string.sub(m, 36)
    if #m ~= 101 or string.find(string.sub(m, 1, 35), '[^0-9]') or not string.match(tx, '^0x[0-9a-f]+$') then
      fail('listing ' .. KEYS[1] .. ' has a member that is not an anchor\'s')
    end
    local v = get_anchor(ARGV[2] .. tx)
    if v ~= nil then
      if anchor_member(tonumber(v[6]), v[1], tx) ~= m then
        fail('listing ' .. KEYS[1] .. ' has a member that does not match the record of ' .. tx)
      end
      out[#out + 1] = {tx, v}
      n = n + 1
      if n == limit then break end
    end
  end
  from = from + #members
end
return out
`)

// logAnchorScripts are the scripts of store.LogAnchors.
var logAnchorScripts = []*goredis.Script{recordAnchorScript, confirmAnchorScript, logAnchorsScript}

// The anchor keys. Records are "log-anchor:<tx hash>" and the listing
// "log-anchors": the byte after "log-anchor" tells them apart.
func (k keys) logAnchor(txHash string) string { return k.tag + "log-anchor:" + txHash }
func (k keys) logAnchorPrefix() string        { return k.tag + "log-anchor:" }
func (k keys) logAnchors() string             { return k.tag + "log-anchors" }

// RecordAnchor implements store.LogAnchors in one script. A transaction
// already recorded is compared in Go, by store.SameAnchor, with the record
// the script read.
func (db *DB) RecordAnchor(ctx context.Context, a store.LogAnchor) (err error) {
	defer store.Wrap(&err, "redis", "record anchor %s", a.TxHash)
	if err := store.CheckLogAnchor(a); err != nil {
		return err
	}
	status, rest, err := db.run(ctx, recordAnchorScript, []string{db.keys.logAnchor(a.TxHash), db.keys.logAnchors()},
		db.nowArg(), a.TxHash, strconv.FormatInt(a.Size, 10), hex.EncodeToString(a.Root[:]), a.Network, a.Contract, a.Sender)
	if err != nil {
		return err
	}
	switch {
	case status == "ok" && len(rest) == 0:
		return nil
	case status == "exists" && len(rest) == 1:
		cur, err := decodeLogAnchor(a.TxHash, rest[0])
		if err != nil {
			return err
		}
		return store.SameAnchor(cur, a)
	default:
		return fmt.Errorf("unexpected script reply %q of %d elements", status, len(rest))
	}
}

// ConfirmAnchor implements store.LogAnchors.
func (db *DB) ConfirmAnchor(ctx context.Context, txHash string, block int64) (err error) {
	defer store.Wrap(&err, "redis", "confirm anchor %s in block %d", txHash, block)
	if err := store.CheckConfirmAnchor(txHash, block); err != nil {
		return err
	}
	status, rest, err := db.run(ctx, confirmAnchorScript, []string{db.keys.logAnchor(txHash)}, strconv.FormatInt(block, 10))
	if err != nil {
		return err
	}
	return outcome(status, rest)
}

// LogAnchors implements store.LogAnchors.
func (db *DB) LogAnchors(ctx context.Context, limit int) (_ []store.LogAnchor, err error) {
	defer store.Wrap(&err, "redis", "log anchors")
	if err := store.CheckLogAnchorsLimit(limit); err != nil {
		return nil, err
	}
	status, rest, err := db.run(ctx, logAnchorsScript, []string{db.keys.logAnchors()},
		strconv.Itoa(limit), db.keys.logAnchorPrefix())
	if err != nil {
		return nil, err
	}
	if status != "ok" {
		return nil, fmt.Errorf("unexpected script status %q", status)
	}
	out := make([]store.LogAnchor, 0, len(rest))
	for _, v := range rest {
		pair, ok := v.([]any)
		if !ok || len(pair) != 2 {
			return nil, fmt.Errorf("unexpected list entry %T", v)
		}
		tx, ok := pair[0].(string)
		if !ok {
			return nil, fmt.Errorf("unexpected list transaction %T", pair[0])
		}
		a, err := decodeLogAnchor(tx, pair[1])
		if err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, nil
}

// decodeLogAnchor reads an anchor record, the HMGET of logAnchorFields, from
// a script reply.
func decodeLogAnchor(txHash string, v any) (store.LogAnchor, error) {
	f, err := newFields(v, logAnchorFields)
	if err != nil {
		return store.LogAnchor{}, fmt.Errorf("anchor %s: %w", txHash, err)
	}
	a := store.LogAnchor{
		TxHash:   txHash,
		Size:     f.int(0),
		Network:  f.str(2),
		Contract: f.str(3),
		Sender:   f.str(4),
		SentAt:   msTime(f.int(5)),
		Block:    f.int(6),
	}
	root := f.str(1)
	switch {
	case f.err != nil:
	case a.Size <= 0:
		f.err = fmt.Errorf("field size: %d is not positive", a.Size)
	case a.Block < 0:
		f.err = fmt.Errorf("field block: %d is negative", a.Block)
	case len(root) != 2*len(a.Root):
		f.err = fmt.Errorf("field root: %d hex digits, want %d", len(root), 2*len(a.Root))
	default:
		if _, err := hex.Decode(a.Root[:], []byte(root)); err != nil {
			f.err = fmt.Errorf("field root: %w", err)
		}
	}
	if f.err != nil {
		return store.LogAnchor{}, fmt.Errorf("anchor %s: %w", txHash, f.err)
	}
	return a, nil
}

var _ store.LogAnchors = (*DB)(nil)
