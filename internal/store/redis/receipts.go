package redis

import (
	"context"
	"fmt"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/llm4agents/llm4agents/internal/store"
)

// Signed receipts (store.Receipts). Each receipt is a hash at
// keys.receipt(request id) with the fields receiptFields, all of them
// always there, the envelope as the bytes given; it is written once and
// never changed or deleted, and has no TTL.
//
// Listings. An owner's receipts are the sorted set keys.receiptsOf(owner),
// and those drawn through one key are also in keys.receiptsOfKey(owner, key
// id), so that a key's page reads only its own receipts; a call drawn
// without a key is in the owner's set only. Every member is at score 0, so
// that a set is ordered by its members' bytes: a member is the receipt's Seq
// in 19 zero-padded digits, then its request id. ZREVRANGEBYLEX reads a set
// newest first, by Seq and then by request id, both descending, byte by
// byte, as the SQL backends order them; Before is the exclusive bound
// "(" + Before in 19 digits. A ZSET score, a double, would round a Seq above
// 2^53, and Seqs go up to 2^63-1.
//
// The recent listing (store.RecentReceipts, every owner's receipts) is the
// sorted set keys.recentReceipts(): request ids scored by their receipt's
// created_at_ms, so that ZREVRANGEBYSCORE reads it newest first, and the
// receipts of one millisecond by request id, descending, byte by byte, as
// the SQL backends order them (a millisecond time is exact in a double).
// The put that keeps a receipt adds it, and forgets what is older than
// store.RecentRetention, which is also the set's TTL, renewed on every add,
// as the recent settlements are kept (settlementLua): the set is bounded by
// the receipts of one retention, never more than the records themselves
// take. Receipts kept before the set existed are not in it; a replay of a
// put does not add them, as it writes nothing.
//
// Drawn seqs. Redis keeps no ledger, so a receipt put with Seq 0 draws its
// seq from the counter keys.receiptSeq(), which every put with an explicit
// Seq raises to at least that Seq: a drawn seq is above every seq put
// before it, as one drawn from the ledger's sequence would be, so that an
// owner's receipts of both kinds share one order. Seqs are not unique (two
// puts may name one Seq; the request id orders them), and a put whose Seq
// is 2^63-1 leaves no seq to draw: later puts with Seq 0 fail, writing
// nothing. The counter, like every seq, is handled as a decimal string,
// never as a Lua number, which would round it above 2^53.
//
// A put is one script: it compares a receipt already kept under the request
// id as store.SameReceipt does, and, when the receipt carries a leaf, the
// entry already queued under the id (receiptlog.go); only when neither
// conflicts does it write the receipt, its listings and the new entry, so a
// conflicting leaf keeps no receipt. The scripts follow the conventions of
// scripts.go and start with its common Lua (through receiptLogLua, whose
// functions queue the leaf); they live here so that this file holds the
// whole backend for receipts. Like the settlement listings,
// receiptsOfScript reads the records its set names, which are not in KEYS
// but share the set's hash tag, so its cluster slot.

// The fields of a receipt record, in the order the scripts read them.
var receiptFields = []string{"owner", "key_id", "seq", "envelope", "created_at_ms"}

// receiptLua reads receipt records. A record is the HMGET reply r: r[1] owner,
// r[2] key_id, r[3] seq, r[4] envelope, r[5] created_at_ms.
var receiptLua = receiptLogLua + `
local function get_receipt(key)
  local r = redis.call('HMGET', key, ` + luaStrings(receiptFields) + `)
  if not present(key, r, 5) then return nil end
  if r[1] == '' or r[4] == '' or not (is_uint63(r[3]) and r[3] ~= '0' and is_int(r[5])) then
    fail('record ' .. key .. ' has no owner or envelope, or a seq or time out of range')
  end
  return r
end

-- receipt_member is the member of the listings for a receipt of seq (a
-- string of is_uint63) and request id.
local function receipt_member(seq, id)
  return string.rep('0', 19 - #seq) .. seq .. id
end
`

// putReceiptScript keeps a receipt, and queues its leaf, unless either
// conflicts with what the request id already has.
//
// KEYS: record, seq counter, owner's listing, key's listing, the log's
// leaves, queue and queue counter, recent listing.
// ARGV: now, request id, owner, key id ("" for none), seq ("0" to draw
// one), envelope, leaf ("" for none), recent retention ms.
// Reply: {'ok'} | {'conflict', msg}.
var putReceiptScript = goredis.NewScript(receiptLua + `
local now = clock(ARGV[1])
local id, owner, key_id, seq, envelope, leaf = ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7]
local r = get_receipt(KEYS[1])
if r ~= nil and not (r[1] == owner and r[2] == key_id and (seq == '0' or r[3] == seq) and r[4] == envelope) then
  return {'conflict', 'request id holds another receipt'}
end
local new_leaf = false
if leaf ~= '' then
  local queued = queued_leaves(KEYS[5], {id})[1]
  if queued and queued ~= leaf then return {'conflict', 'request id has another leaf queued'} end
  new_leaf = not queued
end
if r ~= nil and not new_leaf then return {'ok'} end

local counter
if r == nil then
  expect_type(KEYS[3], 'zset')
  if key_id ~= '' then expect_type(KEYS[4], 'zset') end
  expect_type(KEYS[8], 'zset')
  counter = redis.call('GET', KEYS[2])
  if counter == false then counter = '0' end
  if not is_uint63(counter) then fail('counter ' .. KEYS[2] .. ' is not a seq') end
  if seq == '0' and counter == '9223372036854775807' then fail('no seq is left to draw') end
end
if new_leaf then check_queue(KEYS[6], KEYS[7], KEYS[5], 1) end

if r == nil then
  if seq == '0' then
    redis.call('INCR', KEYS[2])
    seq = redis.call('GET', KEYS[2])
  elseif dec_less(counter, seq) then
    redis.call('SET', KEYS[2], seq)
  end
  redis.call('HSET', KEYS[1], 'owner', owner, 'key_id', key_id, 'seq', seq, 'envelope', envelope, 'created_at_ms', fmt_int(now))
  local member = receipt_member(seq, id)
  redis.call('ZADD', KEYS[3], '0', member)
  if key_id ~= '' then redis.call('ZADD', KEYS[4], '0', member) end
  add_recent(KEYS[8], now, id, tonumber(ARGV[8]))
end
if new_leaf then queue(KEYS[6], KEYS[7], KEYS[5], {id}, {leaf}) end
return {'ok'}
`)

// receiptScript reads a receipt.
//
// KEYS: record.
// Reply: {'ok', rec} | {'not_found', msg}.
var receiptScript = goredis.NewScript(receiptLua + `
local r = get_receipt(KEYS[1])
if r == nil then return {'not_found', 'no receipt'} end
return {'ok', r}
`)

// receiptsOfScript lists up to limit receipts of a listing, newest first,
// below a bound. A member whose record is gone (the scripts never delete
// one, so that only happens after someone edited the keys by hand) is
// skipped; a member that is not the one its record makes, or whose record
// is another owner's or key's, fails, as the page would be out of order or
// not the caller's.
//
// KEYS: listing.
// ARGV: the bound ("+" or "(" and a seq in 19 digits), limit, record key
// prefix, owner, key id ("" for every key).
// Reply: {'ok', {request id, rec}...}.
var receiptsOfScript = goredis.NewScript(receiptLua + `
expect_type(KEYS[1], 'zset')
local limit = tonumber(ARGV[2])
local out = {'ok'}
local n, from = 0, 0
while n < limit do
  local members = redis.call('ZREVRANGEBYLEX', KEYS[1], ARGV[1], '-', 'LIMIT', fmt_int(from), fmt_int(limit - n))
  if #members == 0 then break end
  for _, m in ipairs(members) do
    if #m < 20 or string.find(string.sub(m, 1, 19), '[^0-9]') then
      fail('listing ' .. KEYS[1] .. ' has a member that is not a receipt\'s')
    end
    local id = string.sub(m, 20)
    local r = get_receipt(ARGV[3] .. id)
    if r ~= nil then
      if receipt_member(r[3], id) ~= m or r[1] ~= ARGV[4] or (ARGV[5] ~= '' and r[2] ~= ARGV[5]) then
        fail('listing ' .. KEYS[1] .. ' has a member that does not match the record of ' .. id)
      end
      out[#out + 1] = {id, r}
      n = n + 1
    end
  end
  from = from + #members
end
return out
`)

// recentReceiptsScript lists up to limit receipts of every owner created
// at or after since, newest first: the recent listing's order, by
// created_at_ms and then by request id, both descending. A member whose
// record is gone (deleted by hand) is skipped; one whose record was created
// at another time than its score fails, as the page would be out of order.
//
// KEYS: recent listing.
// ARGV: since ms, limit, record key prefix.
// Reply: {'ok', {request id, rec}...}.
var recentReceiptsScript = goredis.NewScript(receiptLua + `
expect_type(KEYS[1], 'zset')
local limit = tonumber(ARGV[2])
local out = {'ok'}
local n, from = 0, 0
while n < limit do
  local members = redis.call('ZREVRANGEBYSCORE', KEYS[1], '+inf', ARGV[1], 'WITHSCORES', 'LIMIT', fmt_int(from), fmt_int(limit - n))
  if #members == 0 then break end
  for i = 1, #members, 2 do
    local id = members[i]
    local r = get_receipt(ARGV[3] .. id)
    if r ~= nil then
      if tonumber(r[5]) ~= tonumber(members[i + 1]) then
        fail('listing ' .. KEYS[1] .. ' has a member whose score is not the created time of the record of ' .. id)
      end
      out[#out + 1] = {id, r}
      n = n + 1
    end
  end
  from = from + #members / 2
end
return out
`)

// The receipt keys. Records are "receipt:<request id>", the listings
// "receipts:<owner>", "receipts-key:<owner>:<key id>" (an owner has no
// ":") and "receipts-recent", the counter "receipt-seq": the bytes after
// "receipt" tell them apart.
func (k keys) receipt(id string) string { return k.tag + "receipt:" + id }
func (k keys) receiptPrefix() string    { return k.tag + "receipt:" }
func (k keys) receiptSeq() string       { return k.tag + "receipt-seq" }
func (k keys) receiptsOf(owner string) string {
	return k.tag + "receipts:" + owner
}
func (k keys) receiptsOfKey(owner, keyID string) string {
	return k.tag + "receipts-key:" + owner + ":" + keyID
}
func (k keys) recentReceipts() string { return k.tag + "receipts-recent" }

// PutReceipt implements store.Receipts in one script, which queues the
// receipt's leaf, when it has one, in the same write.
func (db *DB) PutReceipt(ctx context.Context, r store.StoredReceipt) (err error) {
	defer store.Wrap(&err, "redis", "put receipt %q", r.RequestID)
	if err := r.Validate(); err != nil {
		return err
	}
	status, rest, err := db.run(ctx, putReceiptScript,
		[]string{
			db.keys.receipt(r.RequestID), db.keys.receiptSeq(), db.keys.receiptsOf(r.Owner), db.keys.receiptsOfKey(r.Owner, r.KeyID),
			db.keys.logLeaves(), db.keys.logPending(), db.keys.logQueue(), db.keys.recentReceipts(),
		},
		db.nowArg(), r.RequestID, r.Owner, r.KeyID, strconv.FormatInt(r.Seq, 10), r.Envelope, r.Leaf, recentRetentionMs)
	if err != nil {
		return err
	}
	return logOutcome(status, rest)
}

// Receipt implements store.Receipts.
func (db *DB) Receipt(ctx context.Context, requestID string) (_ store.StoredReceipt, err error) {
	defer store.Wrap(&err, "redis", "receipt %q", requestID)
	if !store.ValidID(requestID) {
		return store.StoredReceipt{}, store.ErrNotFound // never stored
	}
	status, rest, err := db.run(ctx, receiptScript, []string{db.keys.receipt(requestID)})
	if err != nil {
		return store.StoredReceipt{}, err
	}
	if status != "ok" {
		return store.StoredReceipt{}, outcome(status, rest)
	}
	if len(rest) != 1 {
		return store.StoredReceipt{}, fmt.Errorf("unexpected reply of %d elements", len(rest))
	}
	return decodeReceipt(requestID, rest[0])
}

// ReceiptsOf implements store.Receipts in one script.
func (db *DB) ReceiptsOf(ctx context.Context, q store.ReceiptsQuery) (_ []store.StoredReceipt, err error) {
	defer store.Wrap(&err, "redis", "receipts of %q", q.Owner)
	if err := q.Validate(); err != nil {
		return nil, err
	}
	listing := db.keys.receiptsOf(q.Owner)
	if q.KeyID != "" {
		listing = db.keys.receiptsOfKey(q.Owner, q.KeyID)
	}
	bound := "+"
	if q.Before > 0 {
		bound = fmt.Sprintf("(%019d", q.Before)
	}
	status, rest, err := db.run(ctx, receiptsOfScript, []string{listing},
		bound, strconv.Itoa(q.Limit), db.keys.receiptPrefix(), q.Owner, q.KeyID)
	if err != nil {
		return nil, err
	}
	return decodeReceiptList(status, rest)
}

// RecentReceipts implements store.RecentReceipts in one script. It lists
// the receipts kept since the recent listing existed (see the top of this
// file), at most store.RecentRetention back.
func (db *DB) RecentReceipts(ctx context.Context, since time.Time, limit int) (_ []store.StoredReceipt, err error) {
	defer store.Wrap(&err, "redis", "recent receipts")
	if err := store.CheckRecentReceipts(limit); err != nil {
		return nil, err
	}
	status, rest, err := db.run(ctx, recentReceiptsScript, []string{db.keys.recentReceipts()},
		strconv.FormatInt(since.UnixMilli(), 10), strconv.Itoa(limit), db.keys.receiptPrefix())
	if err != nil {
		return nil, err
	}
	return decodeReceiptList(status, rest)
}

// decodeReceiptList reads the reply of a listing script: {request id,
// record} pairs after the status "ok".
func decodeReceiptList(status string, rest []any) ([]store.StoredReceipt, error) {
	if status != "ok" {
		return nil, fmt.Errorf("unexpected script status %q", status)
	}
	out := make([]store.StoredReceipt, 0, len(rest))
	for _, v := range rest {
		pair, ok := v.([]any)
		if !ok || len(pair) != 2 {
			return nil, fmt.Errorf("unexpected list entry %T", v)
		}
		id, ok := pair[0].(string)
		if !ok {
			return nil, fmt.Errorf("unexpected list request id %T", pair[0])
		}
		r, err := decodeReceipt(id, pair[1])
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// decodeReceipt reads a receipt record, the HMGET of receiptFields, from a
// script reply.
func decodeReceipt(requestID string, v any) (store.StoredReceipt, error) {
	f, err := newFields(v, receiptFields)
	if err != nil {
		return store.StoredReceipt{}, fmt.Errorf("receipt %q: %w", requestID, err)
	}
	r := store.StoredReceipt{
		RequestID: requestID,
		Owner:     f.str(0),
		KeyID:     f.str(1),
		Seq:       f.int(2),
		Envelope:  []byte(f.str(3)),
		CreatedAt: msTime(f.int(4)),
	}
	if f.err == nil && r.Seq <= 0 {
		f.err = fmt.Errorf("field seq: %d is not positive", r.Seq)
	}
	if f.err != nil {
		return store.StoredReceipt{}, fmt.Errorf("receipt %q: %w", requestID, f.err)
	}
	return r, nil
}

var (
	_ store.Receipts       = (*DB)(nil)
	_ store.RecentReceipts = (*DB)(nil)
)
