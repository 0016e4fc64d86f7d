package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/llm4agents/llm4agents/internal/store"
)

// The credits ledger (store.Ledger), in the tables of migration 0004, seqs
// from ledger_entry_seq (see extras in schema.go).
//
// # One statement per operation
//
// Credit, Hold and each resolution (Capture, Release, CloseLease, one hold
// of the sweep) are one statement under READ COMMITTED, so an operation is
// applied whole or not at all, in one round trip. The statement has three
// phases, chained by data dependencies between its CTEs so that they run in
// this order:
//
//  1. Lock. SELECT ... FOR UPDATE of every row the operation decides on, in
//     one order for every operation: the owner's user and held balances,
//     the hold (resolutions only), the key's total, the key's window. A row
//     another transaction is changing is waited for and read as that
//     transaction left it, so the values the decision sees are current.
//     Every write of an owner locks the user balance first, so it serialises
//     them, and two of them never deadlock, alone or in batches.
//  2. Decide. One CASE over the locked values: the operation was applied
//     before (a replay), is refused (balance, key total cap, key period cap),
//     needs rows that do not exist yet, or goes ahead.
//  3. Write. The journal entry first, INSERT ... ON CONFLICT (op_class,
//     op_id) DO NOTHING, with its seq drawn now, after the locks; the
//     balance, key and hold updates run only if that insert did, so the
//     unique operation id is the last guard: of two concurrent calls with one
//     id, the second finds the first's entry (waiting for its commit if
//     need be) and writes nothing.
//
// The updates set each row to its locked value plus the change (balance =
// <locked balance> - amount), never to "balance - amount": an UPDATE first
// builds the new row from the version its snapshot sees, and PostgreSQL
// checks the table's CHECK constraints on that row before it finds that the
// version is stale and builds the row again from the current one. Built
// from a stale balance, a valid hold could fail "balance >= 0". The locked
// value is the current one: no other transaction can change the row before
// this one commits.
//
// Nothing is written unless every check passed, so no refusal needs a
// rollback. Rows are locked, never created, in phase 1: a row that does not
// exist yet (an owner's first credit, a key's first hold, a new cap window)
// makes the statement write nothing and report it; ensureRows then creates
// it with zeros, in a statement of its own, and the operation runs again.
//
// Reads that are not locks see the statement's snapshot, which may predate a
// concurrent operation with the same id that committed while the statement
// waited for a lock. So a refusal, or an entry insert that found the id
// taken, is followed by a fresh read of the operation (findOp): a replay of
// a committed operation is answered with its result, never refused.
//
// # Group commit per owner
//
// A write holds its owner's user balance locked until its commit is on
// disk, so one owner's writes run one disk flush at a time: a hot account
// (an agent with many calls in flight) would be held to a few hundred
// operations a second on a fast disk, to tens on a slow one. So each DB
// sends an owner's writes in one asset on one line (lines.go): while one
// write of the line is in flight, the others queue, and then go as one
// batch, one round trip and one flush for the lot. Writes of different
// owners never wait for each other in a DB; between DBs (processes) the
// row locks order them. A write once sent runs to its end whatever becomes
// of its caller's context, and a call that fails wrote nothing unless the
// connection failed under it: then repeating the call (with the same
// operation id) answers it.
//
// # Seqs and statements
//
// Seqs come from ledger_entry_seq, drawn in phase 3, after the owner's
// balance rows are locked: the entries of one user or held account get
// increasing seqs in commit order, so a reader paging a statement by the
// last seq it saw misses none. The system accounts (deposits, revenue, loss)
// have no row to lock, so two operations of different owners may commit
// their seqs out of order; store.Entry gives them no such promise.

// Operation classes: the namespaces of op ids (ledger_entries.op_class) the
// Go code looks up; resolutions are class 'resolve', written by resolveStmt.
const (
	classCredit = "credit"
	classHold   = "hold"
)

// ledgerAttempts bounds how often one operation runs its statement: after
// creating missing rows, after a deadlock or serialization failure, or when
// the time moved into a new cap window between two attempts.
const ledgerAttempts = 8

// Verdicts of the decide phase.
const (
	verdictOK       = "ok"         // applied, unless the operation id was taken meanwhile
	verdictReplay   = "replay"     // the operation id was applied before this statement began
	verdictMissing  = "missing"    // a row the operation locks does not exist yet
	verdictOverflow = "overflow"   // a credit past int64
	verdictBalance  = "balance"    // store.LimitBalance
	verdictKeyTotal = "key_total"  // store.LimitKeyTotal
	verdictKeyWin   = "key_period" // store.LimitKeyPeriod
	verdictAbsent   = "absent"     // no such hold
	verdictSettled  = "settled"    // the hold is resolved, or not expired for the sweep
	verdictKind     = "kind"       // a lease asked to end as a call's hold, or the other way round
)

// creditStmt: $1 now (nowExpr), $2 op id, $3 owner, $4 asset, $5 amount,
// $6 user account, $7 held account, $8 args.
//
// The held balance is locked as well as the user balance: user + held must
// stay within int64 (see store.Ledger.Credit), and only a lock reads held as
// it is now rather than as the statement's snapshot saw it.
const creditStmt = withNow + `,
prev AS MATERIALIZED (
    SELECT seq, args FROM ledger_entries WHERE op_class = 'credit' AND op_id = $2::text),
bal AS MATERIALIZED (
    SELECT account, balance FROM ledger_balances
    WHERE asset = $4::text AND account IN ($6::text, $7::text) AND NOT EXISTS (SELECT 1 FROM prev)
    ORDER BY account DESC
    FOR UPDATE),
v AS MATERIALIZED (
    SELECT (SELECT balance FROM bal WHERE account = $6::text) AS ubal,
        (SELECT balance FROM bal WHERE account = $7::text) AS hbal),
d AS MATERIALIZED (
    SELECT CASE
        WHEN EXISTS (SELECT 1 FROM prev) THEN 'replay'
        WHEN v.ubal IS NULL OR v.hbal IS NULL THEN 'missing'
        WHEN v.ubal > 9223372036854775807 - $5::bigint - v.hbal THEN 'overflow'
        ELSE 'ok' END AS verdict
    FROM v),
e AS (
    INSERT INTO ledger_entries (seq, op_class, op_id, kind, asset, owner, hold_id, args, created_at_ms)
    SELECT nextval('ledger_entry_seq'), 'credit', $2::text, 'credit', $4::text, $3::text, '', $8::text, n.ms
    FROM d, n WHERE d.verdict = 'ok'
    ON CONFLICT (op_class, op_id) DO NOTHING
    RETURNING seq, created_at_ms),
ub AS (
    UPDATE ledger_balances SET balance = v.ubal + $5::bigint
    FROM v
    WHERE account = $6::text AND asset = $4::text AND EXISTS (SELECT 1 FROM e)
    RETURNING balance),
p AS (
    INSERT INTO ledger_postings (seq, account, asset, delta, balance_after)
    SELECT e.seq, 'deposits', $4::text, -$5::bigint, 0 FROM e
    UNION ALL
    SELECT e.seq, $6::text, $4::text, $5::bigint, ub.balance FROM e, ub)
SELECT d.verdict, prev.seq, prev.args, e.seq, e.created_at_ms, ub.balance
FROM d LEFT JOIN prev ON true LEFT JOIN e ON true LEFT JOIN ub ON true`

// Credit implements store.Ledger.
func (db *DB) Credit(ctx context.Context, opID, owner, asset string, amount int64) (_ store.Entry, err error) {
	defer store.Wrap(&err, "postgres", "credit %q", opID)
	if err := store.ValidateCredit(opID, owner, asset, amount); err != nil {
		return store.Entry{}, err
	}
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return store.Entry{}, err
	}
	defer cancel()

	args := fmt.Sprintf("owner=%s asset=%s amount=%d", owner, asset, amount)
	user, held := store.UserAccount(owner), store.HeldAccount(owner)
	now := db.nowArg()
	for range ledgerAttempts {
		var verdict string
		var prevSeq, seq, created, userAfter *int64
		var prevArgs *string
		err := db.write(ctx, ledgerLine(owner, asset), &lineWrite{sql: creditStmt,
			args: []any{now, opID, owner, asset, amount, user, held, args},
			dest: []any{&verdict, &prevSeq, &prevArgs, &seq, &created, &userAfter}})
		switch {
		case db.retry(ctx, err, "credit"):
			continue
		case err != nil:
			return store.Entry{}, db.mapErr(ctx, err)
		}
		switch verdict {
		case verdictOK:
			if seq == nil {
				return db.replayEntry(ctx, classCredit, opID, args) // a concurrent credit with this id won
			}
			return store.Entry{Seq: *seq, OpID: opID, Kind: store.EntryCredit, Asset: asset, Owner: owner,
				Postings: []store.Posting{
					{Account: store.AccountDeposits, Delta: -amount},
					{Account: user, Delta: amount, BalanceAfter: *userAfter},
				},
				CreatedAt: time.UnixMilli(*created).UTC(),
			}, nil
		case verdictReplay:
			if err := sameArgs(*prevArgs, args); err != nil {
				return store.Entry{}, err
			}
			return db.loadEntry(ctx, *prevSeq)
		case verdictMissing:
			if err := db.ensureRows(ctx, owner, asset, nil, 0); err != nil {
				return store.Entry{}, err
			}
		case verdictOverflow:
			if e, err := db.replayEntry(ctx, classCredit, opID, args); !errors.Is(err, store.ErrNotFound) {
				return e, err
			}
			return store.Entry{}, fmt.Errorf("the balance would exceed %d", int64(math.MaxInt64))
		default:
			return store.Entry{}, fmt.Errorf("unexpected verdict %q", verdict)
		}
	}
	return store.Entry{}, fmt.Errorf("no decision after %d attempts", ledgerAttempts)
}

// holdStmt: $1 now, $2 hold id, $3 owner, $4 asset, $5 amount, $6 user
// account, $7 held account, $8 key id (” for none), $9 key total cap, $10
// key period in ms (0 for no period cap), $11 key period cap, $12 TTL in
// ms, $13 args, $14 1 for a credit lease (store.HoldRequest.Lease), else 0,
// $15 the lease's first issued mark (store.HoldRequest.Issued).
// w.start is the cap window the hold counts against (0
// without a period cap), aligned to the unix epoch as store.PeriodStart.
const holdStmt = withNow + `,
prev AS MATERIALIZED (
    SELECT seq, args FROM ledger_entries WHERE op_class = 'hold' AND op_id = $2::text),
w AS MATERIALIZED (
    SELECT CASE WHEN $10::bigint > 0
        THEN n.ms - ((n.ms % $10::bigint) + $10::bigint) % $10::bigint ELSE 0 END AS start
    FROM n),
bal AS MATERIALIZED (
    SELECT account, balance FROM ledger_balances
    WHERE asset = $4::text AND account IN ($6::text, $7::text) AND NOT EXISTS (SELECT 1 FROM prev)
    ORDER BY account DESC
    FOR UPDATE),
kt AS MATERIALIZED (
    SELECT held, spent FROM ledger_key_usage, (SELECT count(*) FROM bal) AS after_bal
    WHERE $8::text <> '' AND key_id = $8::text AND asset = $4::text AND NOT EXISTS (SELECT 1 FROM prev)
    FOR UPDATE OF ledger_key_usage),
kp AS MATERIALIZED (
    SELECT held, spent FROM ledger_key_periods, w, (SELECT count(*) FROM kt) AS after_kt
    WHERE $10::bigint > 0 AND key_id = $8::text AND asset = $4::text AND period_ms = $10::bigint
        AND period_start_ms = w.start AND NOT EXISTS (SELECT 1 FROM prev)
    FOR UPDATE OF ledger_key_periods),
v AS MATERIALIZED (
    SELECT (SELECT balance FROM bal WHERE account = $6::text) AS ubal,
        (SELECT balance FROM bal WHERE account = $7::text) AS hbal,
        (SELECT held FROM kt) AS kt_held, (SELECT spent FROM kt) AS kt_spent,
        (SELECT held FROM kp) AS kp_held, (SELECT spent FROM kp) AS kp_spent),
d AS MATERIALIZED (
    SELECT v.*, CASE
        WHEN EXISTS (SELECT 1 FROM prev) THEN 'replay'
        WHEN COALESCE(v.ubal, 0) < $5::bigint THEN 'balance'
        WHEN $8::text <> '' AND $5::bigint > $9::bigint - COALESCE(v.kt_held, 0) - COALESCE(v.kt_spent, 0) THEN 'key_total'
        WHEN $10::bigint > 0 AND $5::bigint > $11::bigint - COALESCE(v.kp_held, 0) - COALESCE(v.kp_spent, 0) THEN 'key_period'
        WHEN v.ubal IS NULL OR v.hbal IS NULL OR ($8::text <> '' AND v.kt_held IS NULL)
            OR ($10::bigint > 0 AND v.kp_held IS NULL) THEN 'missing'
        ELSE 'ok' END AS verdict
    FROM v),
e AS (
    INSERT INTO ledger_entries (seq, op_class, op_id, kind, asset, owner, hold_id, args, created_at_ms)
    SELECT nextval('ledger_entry_seq'), 'hold', $2::text, 'hold', $4::text, $3::text, $2::text, $13::text, n.ms
    FROM d, n WHERE d.verdict = 'ok'
    ON CONFLICT (op_class, op_id) DO NOTHING
    RETURNING seq, created_at_ms),
ub AS (
    UPDATE ledger_balances b
    SET balance = CASE WHEN b.account = $6::text THEN d.ubal - $5::bigint ELSE d.hbal + $5::bigint END
    FROM d
    WHERE b.asset = $4::text AND b.account IN ($6::text, $7::text) AND EXISTS (SELECT 1 FROM e)
    RETURNING b.account, b.balance),
ku AS (
    UPDATE ledger_key_usage SET held = d.kt_held + $5::bigint
    FROM d
    WHERE $8::text <> '' AND key_id = $8::text AND asset = $4::text AND EXISTS (SELECT 1 FROM e)),
kpu AS (
    UPDATE ledger_key_periods SET held = d.kp_held + $5::bigint
    FROM d, w
    WHERE $10::bigint > 0 AND key_id = $8::text AND asset = $4::text AND period_ms = $10::bigint
        AND period_start_ms = w.start AND EXISTS (SELECT 1 FROM e)),
p AS (
    INSERT INTO ledger_postings (seq, account, asset, delta, balance_after)
    SELECT e.seq, ub.account, $4::text,
        CASE WHEN ub.account = $6::text THEN -$5::bigint ELSE $5::bigint END, ub.balance
    FROM e, ub),
h AS (
    INSERT INTO ledger_holds (hold_id, owner, asset, amount, key_id, key_period_ms, key_period_start_ms,
        state, expires_at_ms, created_at_ms, seq, lease, issued)
    SELECT $2::text, $3::text, $4::text, $5::bigint, $8::text, $10::bigint, w.start,
        'held', e.created_at_ms + $12::bigint, e.created_at_ms, e.seq, $14::smallint, $15::bigint
    FROM e, w
    RETURNING ` + holdColumns + `),
mk AS (
    INSERT INTO ledger_lease_marks (lease_id, issued)
    SELECT h.hold_id, $15::bigint FROM h WHERE $14::smallint = 1)
SELECT d.verdict, d.ubal, d.kt_held, d.kt_spent, d.kp_held, d.kp_spent, w.start, prev.args, h.*
FROM d CROSS JOIN w LEFT JOIN prev ON true LEFT JOIN h ON true`

// Hold implements store.Ledger.
func (db *DB) Hold(ctx context.Context, r store.HoldRequest) (_ store.Hold, err error) {
	defer store.Wrap(&err, "postgres", "hold %q", r.ID)
	if err := r.Validate(); err != nil {
		return store.Hold{}, err
	}
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return store.Hold{}, err
	}
	defer cancel()
	if h, done, err := db.unsafeHold(ctx, r); done {
		return h, err
	}
	return db.hold(ctx, r)
}

// hold is Hold after its arguments were checked.
func (db *DB) hold(ctx context.Context, r store.HoldRequest) (store.Hold, error) {
	var keyID string
	var totalCap, periodMs, periodCap int64 = store.NoCap, 0, store.NoCap
	if r.Key != nil {
		keyID, totalCap = r.Key.ID, r.Key.TotalCap
		if r.Key.PeriodCap != store.NoCap {
			periodMs, periodCap = r.Key.Period.Milliseconds(), r.Key.PeriodCap
		}
	}
	args := store.HoldArgs(r)
	lease := 0
	if r.Lease {
		lease = 1
	}
	now := db.nowArg()
	for range ledgerAttempts {
		var verdict string
		var userBal, ktHeld, ktSpent, kpHeld, kpSpent *int64
		var windowStart int64
		var prevArgs *string
		var hs holdScan
		err := db.write(ctx, ledgerLine(r.Owner, r.Asset), &lineWrite{sql: holdStmt,
			args: []any{now, r.ID, r.Owner, r.Asset, r.Amount, store.UserAccount(r.Owner), store.HeldAccount(r.Owner),
				keyID, totalCap, periodMs, periodCap, store.CeilMillis(r.TTL), args, lease, r.Issued},
			dest: hs.dest(&verdict, &userBal, &ktHeld, &ktSpent, &kpHeld, &kpSpent, &windowStart, &prevArgs)})
		h, found := hs.hold()
		switch {
		case db.retry(ctx, err, "hold"):
			continue
		case err != nil:
			return store.Hold{}, db.mapErr(ctx, err)
		}
		var refused *store.InsufficientError
		switch verdict {
		case verdictOK:
			if found {
				db.rememberHold(h)
				return h, nil
			}
			return db.replayHold(ctx, r.ID, args) // a concurrent hold with this id won
		case verdictReplay:
			if err := sameArgs(*prevArgs, args); err != nil {
				return store.Hold{}, err
			}
			return db.HoldRecord(ctx, r.ID)
		case verdictMissing:
			if err := db.ensureRows(ctx, r.Owner, r.Asset, r.Key, windowStart); err != nil {
				return store.Hold{}, err
			}
			continue
		case verdictBalance:
			refused = &store.InsufficientError{Limit: store.LimitBalance, Available: deref(userBal)}
		case verdictKeyTotal:
			refused = &store.InsufficientError{Limit: store.LimitKeyTotal, Available: remaining(totalCap, ktHeld, ktSpent)}
		case verdictKeyWin:
			refused = &store.InsufficientError{Limit: store.LimitKeyPeriod, Available: remaining(periodCap, kpHeld, kpSpent)}
		default:
			return store.Hold{}, fmt.Errorf("unexpected verdict %q", verdict)
		}
		// Refused by what the locks saw: unless a hold with this id
		// committed while this statement waited for them.
		if h, err := db.replayHold(ctx, r.ID, args); !errors.Is(err, store.ErrNotFound) {
			return h, err
		}
		refused.Requested = r.Amount
		return store.Hold{}, refused
	}
	return store.Hold{}, fmt.Errorf("no decision after %d attempts", ledgerAttempts)
}

// remaining is what a cap leaves for a new hold, given a key's held and
// spent (NULL when the key has no row yet): never negative, as a lowered cap
// may be below what the key already uses.
func remaining(limit int64, held, spent *int64) int64 {
	return max(limit-deref(held)-deref(spent), 0)
}

func deref(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}

// ensureStmt creates, with zero balances, the rows an operation locks:
// $1 user account, $2 held account, $3 asset, $4 key id (” for none), $5
// key period in ms (0 for none), $6 window start. Every call inserts them
// in the same order, so two of them never deadlock; they wait only for each
// other's inserts, never for a row lock.
const ensureStmt = `WITH b AS (
    INSERT INTO ledger_balances (account, asset, balance) VALUES ($1::text, $3::text, 0), ($2::text, $3::text, 0)
    ON CONFLICT DO NOTHING),
k AS (
    INSERT INTO ledger_key_usage (key_id, asset, held, spent)
    SELECT $4::text, $3::text, 0, 0 WHERE $4::text <> ''
    ON CONFLICT DO NOTHING)
INSERT INTO ledger_key_periods (key_id, asset, period_ms, period_start_ms, held, spent)
SELECT $4::text, $3::text, $5::bigint, $6::bigint, 0, 0 WHERE $5::bigint > 0
ON CONFLICT DO NOTHING`

// ensureRows creates the rows of owner's balances in asset and, with key,
// of the key's total and of the window starting at windowStart, where
// missing. Zero rows change no balance and no usage; they only give the
// next attempt something to lock.
func (db *DB) ensureRows(ctx context.Context, owner, asset string, key *store.KeyLimits, windowStart int64) error {
	var keyID string
	var periodMs int64
	if key != nil {
		keyID = key.ID
		if key.PeriodCap != store.NoCap {
			periodMs = key.Period.Milliseconds()
		}
	}
	_, err := db.pool.Exec(ctx, ensureStmt, store.UserAccount(owner), store.HeldAccount(owner), asset,
		keyID, periodMs, windowStart)
	if err != nil && !db.retry(ctx, err, "create ledger rows") {
		return db.mapErr(ctx, err)
	}
	return nil
}

// Which holds a resolution may end, $5 of resolveStmt: Capture and Release
// end a call's hold, CloseLease a lease, and the sweep either. A hold of the
// other kind is left as it is, with verdictKind.
const (
	endCalls  = "call"
	endLeases = "lease"
	endAny    = "any"
)

// resolveStmt ends an open hold: $1 now, $2 hold id, $3 entry kind
// (capture, release or expire), $4 actual cost (0 but for a capture), $5
// which holds it may end (endCalls, endLeases or endAny). An expiry
// applies only to a hold whose ExpiresAt has come. The final SELECT returns
// the hold as locked, before this statement changed it, and what o decided.
//
// A lease ends for what its draws recorded, whatever $3 and $4 say: with
// draws it is captured for drawn at the cost drawn_cost, without them it
// is released or expired as $3 asks. Those are read from the locked row
// (hl), so a Draw that committed while this statement waited for the lock
// is counted: Draw updates drawn under the same row lock.
//
// An expiry of a lease also returns the calls its replica may have lost
// (store.LostCalls): its issued mark less its draws at positions up to it.
// The mark is read from its row in ledger_lease_marks, locked (mk) after
// the hold, so an Issue that committed while this statement waited is
// counted, and one that comes after finds no row (deleted here, mkd, once
// the lease ends) and reports the lease closed; the final mark is written
// back to the hold's row. mkd names mk so that mk has read the row before
// it goes: a CTE runs when first read, and x may not read it.
// Those draws are counted in the statement's snapshot, taken before the
// lock: a draw committed while it waited (only a live replica draws, and
// its lease is past its TTL) is counted as lost too, which keeps the
// bound an upper bound.
//
// The owner's balances are locked before the hold, as every write locks
// them first: hs, the hold as the snapshot saw it, names them (a hold's
// owner, asset, amount and key never change), and hl, the hold locked, says
// whether it is still open.
const resolveStmt = withNow + `,
hs AS MATERIALIZED (
    SELECT asset, 'user:' || owner AS user_account, 'held:' || owner AS held_account
    FROM ledger_holds WHERE hold_id = $2::text AND state = 'held'),
bal AS MATERIALIZED (
    SELECT b.account, b.balance FROM ledger_balances b, hs
    WHERE b.asset = hs.asset AND b.account IN (hs.user_account, hs.held_account)
    ORDER BY b.account DESC
    FOR UPDATE OF b),
hl AS MATERIALIZED (
    SELECT ` + holdColumns + ` FROM ledger_holds, (SELECT count(*) FROM bal) AS after_bal
    WHERE hold_id = $2::text
    FOR UPDATE OF ledger_holds),
mk AS MATERIALIZED (
    SELECT m.issued FROM ledger_lease_marks m, (SELECT count(*) FROM hl) AS after_hl
    WHERE m.lease_id = $2::text
    FOR UPDATE OF m),
wrong AS MATERIALIZED (
    SELECT 1 FROM hl
    WHERE $5::text <> 'any' AND hl.lease <> CASE WHEN $5::text = 'lease' THEN 1 ELSE 0 END),
x AS MATERIALIZED (
    SELECT CASE WHEN hl.lease = 1 AND hl.drawn_cost > 0 THEN 'capture' ELSE $3::text END AS kind,
        CASE WHEN hl.lease = 1 THEN hl.drawn_cost ELSE $4::bigint END AS actual,
        CASE WHEN hl.lease = 1 THEN hl.drawn ELSE LEAST($4::bigint, hl.amount) END AS charged,
        CASE WHEN $3::text = 'expire' AND hl.lease = 1 AND m.issued > 0 THEN m.issued -
            (SELECT count(*) FROM ledger_lease_draws dr WHERE dr.lease_id = hl.hold_id AND dr.position <= m.issued)
            ELSE 0 END AS lost
    FROM hl, (SELECT COALESCE((SELECT issued FROM mk), (SELECT issued FROM hl)) AS issued) AS m),
o AS MATERIALIZED (
    SELECT hl.owner, hl.asset, hl.amount, hl.key_id, hl.key_period_ms, hl.key_period_start_ms,
        'user:' || hl.owner AS user_account, 'held:' || hl.owner AS held_account,
        x.kind, x.actual, x.charged, x.lost,
        CASE x.kind WHEN 'capture' THEN 'captured' WHEN 'release' THEN 'released' ELSE 'expired' END AS state
    FROM hl, x, n
    WHERE hl.state = 'held' AND ($3::text <> 'expire' OR hl.expires_at_ms <= n.ms)
        AND NOT EXISTS (SELECT 1 FROM wrong)),
kt AS MATERIALIZED (
    SELECT k.held, k.spent FROM ledger_key_usage k, o, (SELECT count(*) FROM hl) AS after_hl
    WHERE o.key_id <> '' AND k.key_id = o.key_id AND k.asset = o.asset
    FOR UPDATE OF k),
kp AS MATERIALIZED (
    SELECT k.held, k.spent FROM ledger_key_periods k, o, (SELECT count(*) FROM kt) AS after_kt
    WHERE o.key_period_ms > 0 AND k.key_id = o.key_id AND k.asset = o.asset
        AND k.period_ms = o.key_period_ms AND k.period_start_ms = o.key_period_start_ms
    FOR UPDATE OF k),
d AS MATERIALIZED (
    SELECT CASE
        WHEN NOT EXISTS (SELECT 1 FROM hl) THEN 'absent'
        WHEN EXISTS (SELECT 1 FROM wrong) THEN 'kind'
        WHEN o.owner IS NULL THEN 'settled'
        WHEN (SELECT count(*) FROM bal) <> 2 OR (o.key_id <> '' AND NOT EXISTS (SELECT 1 FROM kt))
            OR (o.key_period_ms > 0 AND NOT EXISTS (SELECT 1 FROM kp)) THEN 'missing'
        ELSE 'ok' END AS verdict,
        (SELECT balance FROM bal WHERE account = o.user_account) AS ubal,
        (SELECT balance FROM bal WHERE account = o.held_account) AS hbal,
        (SELECT held FROM kt) AS kt_held, (SELECT spent FROM kt) AS kt_spent,
        (SELECT held FROM kp) AS kp_held, (SELECT spent FROM kp) AS kp_spent
    FROM (SELECT 1) AS one LEFT JOIN o ON true),
e AS (
    INSERT INTO ledger_entries (seq, op_class, op_id, kind, asset, owner, hold_id, args, created_at_ms)
    SELECT nextval('ledger_entry_seq'), 'resolve', $2::text, o.kind, o.asset, o.owner, $2::text,
        CASE WHEN o.kind = 'capture' THEN 'actual=' || o.actual::text ELSE '' END, n.ms
    FROM d, o, n WHERE d.verdict = 'ok'
    ON CONFLICT (op_class, op_id) DO NOTHING
    RETURNING seq, created_at_ms),
ub AS (
    UPDATE ledger_balances b
    SET balance = CASE WHEN b.account = o.user_account THEN d.ubal + o.amount - o.charged ELSE d.hbal - o.amount END
    FROM o, d
    WHERE b.asset = o.asset AND b.account IN (o.user_account, o.held_account) AND EXISTS (SELECT 1 FROM e)
    RETURNING b.account, b.balance),
ku AS (
    UPDATE ledger_key_usage k SET held = d.kt_held - o.amount, spent = d.kt_spent + o.charged
    FROM o, d
    WHERE o.key_id <> '' AND k.key_id = o.key_id AND k.asset = o.asset AND EXISTS (SELECT 1 FROM e)),
kpu AS (
    UPDATE ledger_key_periods k SET held = d.kp_held - o.amount, spent = d.kp_spent + o.charged
    FROM o, d
    WHERE o.key_period_ms > 0 AND k.key_id = o.key_id AND k.asset = o.asset
        AND k.period_ms = o.key_period_ms AND k.period_start_ms = o.key_period_start_ms
        AND EXISTS (SELECT 1 FROM e)),
p AS (
    INSERT INTO ledger_postings (seq, account, asset, delta, balance_after)
    SELECT e.seq, ub.account, o.asset,
        CASE WHEN ub.account = o.user_account THEN o.amount - o.charged ELSE -o.amount END, ub.balance
    FROM e, o, ub
    UNION ALL
    SELECT e.seq, 'revenue', o.asset, o.actual, 0 FROM e, o WHERE o.actual > 0
    UNION ALL
    SELECT e.seq, 'loss', o.asset, o.charged - o.actual, 0 FROM e, o WHERE o.actual > o.charged),
hu AS (
    UPDATE ledger_holds h SET state = o.state, actual = o.actual, resolved_at_ms = e.created_at_ms, resolved_seq = e.seq,
        issued = COALESCE((SELECT issued FROM mk), h.issued)
    FROM e, o
    WHERE h.hold_id = $2::text),
mkd AS (
    DELETE FROM ledger_lease_marks
    WHERE lease_id = $2::text AND EXISTS (SELECT 1 FROM e) AND EXISTS (SELECT 1 FROM mk))
SELECT d.verdict, e.seq, e.created_at_ms,
    (SELECT balance FROM ub WHERE account LIKE 'user:%'), (SELECT balance FROM ub WHERE account LIKE 'held:%'),
    o.kind, o.actual, o.charged, o.lost,
    hl.*
FROM d LEFT JOIN e ON true LEFT JOIN o ON true LEFT JOIN hl ON true`

// resolution is what resolve did to a hold.
type resolution struct {
	verdict string      // verdictOK, verdictAbsent, verdictKind or verdictSettled
	hold    store.Hold  // as it stands after the statement
	entry   store.Entry // the resolution's entry; set for verdictOK only
	// lost is, for a lease it expired, the calls its replica may have lost
	// (store.LostCalls); set for verdictOK only.
	lost int64
	// followed is whether the statement that resolve's follow returned
	// (if any) committed with the resolution (lineWrite.followed).
	followed bool
}

// resolve ends the open hold holdID, if it is of the kind ends names
// (endCalls, endLeases or endAny), with an entry of kind (capture, release
// or expire): a call's hold billing min(actual, amount) and recording the
// rest of actual as loss (release and expire pass 0), a lease for its draws
// (see resolveStmt). An expiry applies only to a hold past its ExpiresAt by
// the time now. follow, when not nil, is given a resolution with
// verdictOK inside the write, and may return a statement to commit with it
// (see lineWrite.then).
func (db *DB) resolve(ctx context.Context, now *int64, holdID string, kind store.EntryKind, actual int64, ends string,
	follow func(resolution) *lineWrite) (resolution, error) {
	l, ok := db.heldLine(holdID)
	if !ok {
		var err error
		l.owner, l.asset, err = db.holdOwner(ctx, holdID)
		switch {
		case errors.Is(err, store.ErrNotFound):
			return resolution{verdict: verdictAbsent}, nil
		case err != nil:
			return resolution{}, err
		}
	}
	res, err := db.resolveOf(ctx, now, holdID, l.owner, l.asset, kind, actual, ends, follow)
	// A hold of the other kind is still open, to be ended by its own
	// operation: its line stays remembered for that.
	if err == nil && ok && res.verdict != verdictKind {
		db.forgetHold(holdID)
	}
	return res, err
}

// Hold lines.
//
// A resolution runs in its hold's line (owner and asset), which the hold id
// alone does not name. Rather than read the hold first, one more round trip
// on the paid path (hold, then capture), each DB remembers the line of the
// holds it placed until it resolves them. A hold's owner and asset never
// change, so a remembered line is never stale; and a wrong one would still
// be safe: the statement locks the rows the hold names, whatever line it
// runs in, and a batch that fails runs again write by write.

// maxHeldLines bounds the remembered lines; when full, they are forgotten
// all at once, and resolutions read their hold's line until it refills.
const maxHeldLines = 1 << 16

type heldLine struct{ owner, asset string }

// rememberHold remembers the line of h, placed by db.
func (db *DB) rememberHold(h store.Hold) {
	db.heldMu.Lock()
	defer db.heldMu.Unlock()
	if len(db.held) >= maxHeldLines {
		clear(db.held)
	}
	db.held[h.ID] = heldLine{h.Owner, h.Asset}
}

// heldLine returns the line of a hold db placed and has not resolved.
func (db *DB) heldLine(holdID string) (heldLine, bool) {
	db.heldMu.Lock()
	defer db.heldMu.Unlock()
	l, ok := db.held[holdID]
	return l, ok
}

// forgetHold forgets the line of a resolved hold.
func (db *DB) forgetHold(holdID string) {
	db.heldMu.Lock()
	defer db.heldMu.Unlock()
	delete(db.held, holdID)
}

// holdOwner reads the owner and asset of a hold, which name the line its
// resolution runs in.
func (db *DB) holdOwner(ctx context.Context, holdID string) (owner, asset string, err error) {
	err = db.pool.QueryRow(ctx, `SELECT owner, asset FROM ledger_holds WHERE hold_id = $1`, holdID).Scan(&owner, &asset)
	return owner, asset, db.mapErr(ctx, err)
}

// resolveOf is resolve for a hold of owner in asset.
func (db *DB) resolveOf(ctx context.Context, now *int64, holdID, owner, asset string, kind store.EntryKind, actual int64, ends string,
	follow func(resolution) *lineWrite) (resolution, error) {
	for range ledgerAttempts {
		var row resolveRow
		w := &lineWrite{sql: resolveStmt, args: []any{now, holdID, kind, actual, ends}, dest: row.dest()}
		if follow != nil {
			w.then = func() *lineWrite {
				if res, again, err := row.resolution(); err == nil && !again && res.verdict == verdictOK {
					return follow(res)
				}
				return nil
			}
		}
		err := db.write(ctx, ledgerLine(owner, asset), w)
		switch {
		case db.retry(ctx, err, string(kind)):
			continue
		case err != nil:
			return resolution{}, db.mapErr(ctx, err)
		}
		res, again, err := row.resolution()
		if again {
			continue
		}
		res.followed = w.followed
		return res, err
	}
	return resolution{}, fmt.Errorf("no decision after %d attempts", ledgerAttempts)
}

// resolveRow receives the row of resolveStmt.
type resolveRow struct {
	verdict                                                     string
	seq, created, userAfter, heldAfter, actualOf, charged, lost *int64
	kindOf                                                      *string
	hs                                                          holdScan
}

func (r *resolveRow) dest() []any {
	return r.hs.dest(&r.verdict, &r.seq, &r.created, &r.userAfter, &r.heldAfter, &r.kindOf, &r.actualOf, &r.charged, &r.lost)
}

// resolution is what the row says resolveStmt did, or again when the
// statement is to run again.
func (r *resolveRow) resolution() (_ resolution, again bool, _ error) {
	h, found := r.hs.hold()
	switch r.verdict {
	case verdictAbsent:
		return resolution{verdict: r.verdict}, false, nil
	case verdictKind, verdictSettled:
		return resolution{verdict: r.verdict, hold: h}, false, nil
	case verdictMissing:
		// Hold created every row; nothing deletes them.
		return resolution{}, false, errors.New("the balance or key rows of an open hold are missing")
	case verdictOK:
		if !found || r.seq == nil || r.kindOf == nil {
			// Only resolve writes 'resolve' entries, under the hold's
			// lock, after checking that it is open: this cannot happen.
			return resolution{}, true, nil
		}
	default:
		return resolution{}, false, fmt.Errorf("unexpected verdict %q", r.verdict)
	}
	// What the statement decided: for a lease, its draws rather than
	// the kind and actual asked.
	ended := store.EntryKind(*r.kindOf)
	refund, loss := h.Amount-*r.charged, *r.actualOf-*r.charged
	h.State, h.Actual = entryState[ended], *r.actualOf
	if h.State == store.HoldCaptured {
		h.Captured, h.Loss = *r.charged, loss
	}
	h.ResolvedAt, h.ResolvedSeq = time.UnixMilli(*r.created).UTC(), *r.seq
	e := store.Entry{Seq: *r.seq, OpID: h.ID, Kind: ended, Asset: h.Asset, Owner: h.Owner, HoldID: h.ID,
		Postings: []store.Posting{
			{Account: store.HeldAccount(h.Owner), Delta: -h.Amount, BalanceAfter: *r.heldAfter},
			{Account: store.UserAccount(h.Owner), Delta: refund, BalanceAfter: *r.userAfter},
		},
		CreatedAt: h.ResolvedAt,
	}
	if h.Actual > 0 {
		e.Postings = append(e.Postings, store.Posting{Account: store.AccountRevenue, Delta: h.Actual})
	}
	if loss > 0 {
		e.Postings = append(e.Postings, store.Posting{Account: store.AccountLoss, Delta: -loss})
	}
	sortPostings(e.Postings)
	return resolution{verdict: r.verdict, hold: h, entry: e, lost: deref(r.lost)}, false, nil
}

// entryState is the state a resolution entry of each kind leaves its hold in.
var entryState = map[store.EntryKind]store.HoldState{
	store.EntryCapture: store.HoldCaptured, store.EntryRelease: store.HoldReleased, store.EntryExpire: store.HoldExpired,
}

// Capture implements store.Ledger.
func (db *DB) Capture(ctx context.Context, holdID string, actual int64) (_ store.Hold, _ store.Entry, err error) {
	defer store.Wrap(&err, "postgres", "capture %q", holdID)
	if err := store.ValidateActual(holdID, actual); err != nil {
		return store.Hold{}, store.Entry{}, err
	}
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return store.Hold{}, store.Entry{}, err
	}
	defer cancel()

	res, err := db.resolve(ctx, db.nowArg(), holdID, store.EntryCapture, actual, endCalls, nil)
	if err != nil {
		return store.Hold{}, store.Entry{}, err
	}
	return db.captured(ctx, res, actual)
}

// captured is Capture's outcome for the resolution res of a capture for
// actual.
func (db *DB) captured(ctx context.Context, res resolution, actual int64) (store.Hold, store.Entry, error) {
	switch res.verdict {
	case verdictOK:
		return res.hold, res.entry, nil
	case verdictAbsent:
		return store.Hold{}, store.Entry{}, store.ErrNotFound
	case verdictKind:
		return store.Hold{}, store.Entry{}, fmt.Errorf("hold is a lease: %w", store.ErrConflict)
	}
	switch h := res.hold; {
	case h.State == store.HoldCaptured && h.Actual == actual:
		e, err := db.loadEntry(ctx, h.ResolvedSeq)
		return h, e, err
	case h.State == store.HoldCaptured:
		return store.Hold{}, store.Entry{}, fmt.Errorf("hold was captured for %d, not %d: %w", h.Actual, actual, store.ErrConflict)
	default:
		return store.Hold{}, store.Entry{}, fmt.Errorf("hold is %s: %w", h.State, store.ErrConflict)
	}
}

// Release implements store.Ledger.
func (db *DB) Release(ctx context.Context, holdID string) (_ store.Hold, _ store.Entry, err error) {
	defer store.Wrap(&err, "postgres", "release %q", holdID)
	if !store.ValidID(holdID) {
		return store.Hold{}, store.Entry{}, errors.New("invalid hold id")
	}
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return store.Hold{}, store.Entry{}, err
	}
	defer cancel()

	res, err := db.resolve(ctx, db.nowArg(), holdID, store.EntryRelease, 0, endCalls, nil)
	switch {
	case err != nil:
		return store.Hold{}, store.Entry{}, err
	case res.verdict == verdictOK:
		return res.hold, res.entry, nil
	case res.verdict == verdictAbsent:
		return store.Hold{}, store.Entry{}, store.ErrNotFound
	case res.verdict == verdictKind:
		return store.Hold{}, store.Entry{}, fmt.Errorf("hold is a lease: %w", store.ErrConflict)
	}
	switch h := res.hold; h.State {
	case store.HoldReleased, store.HoldExpired:
		e, err := db.loadEntry(ctx, h.ResolvedSeq)
		return h, e, err
	default:
		return store.Hold{}, store.Entry{}, fmt.Errorf("hold is %s: %w", h.State, store.ErrConflict)
	}
}

// ReleaseExpiredHolds implements store.Ledger. It reads up to limit expired
// open holds, then releases each in a statement of its own (one hold, one
// owner's locks at a time, so a sweep never deadlocks with the operations
// it overlaps), by one time. A hold captured or released, or expired by
// another sweep, between the two is skipped, so it may return fewer than
// limit while more remain. An expired lease with draws is captured for
// them, as CloseLease would end it (see resolveStmt).
func (db *DB) ReleaseExpiredHolds(ctx context.Context, limit int) (_ store.Swept, err error) {
	defer store.Wrap(&err, "postgres", "release expired holds")
	if err := store.CheckLimit(limit); err != nil {
		return store.Swept{}, err
	}
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return store.Swept{}, err
	}
	defer cancel()

	var nowMs int64
	if err := db.pool.QueryRow(ctx, withNow+`SELECT ms FROM n`, db.nowArg()).Scan(&nowMs); err != nil {
		return store.Swept{}, db.mapErr(ctx, err)
	}
	rows, err := db.pool.Query(ctx, `SELECT hold_id, owner, asset FROM ledger_holds
WHERE state = 'held' AND expires_at_ms <= $1
ORDER BY expires_at_ms, hold_id
LIMIT $2`, nowMs, limit)
	if err != nil {
		return store.Swept{}, db.mapErr(ctx, err)
	}
	type expired struct{ id, owner, asset string }
	holds, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (expired, error) {
		var x expired
		err := row.Scan(&x.id, &x.owner, &x.asset)
		return x, err
	})
	if err != nil {
		return store.Swept{}, db.mapErr(ctx, err)
	}
	var swept store.Swept
	for _, x := range holds {
		res, err := db.resolveOf(ctx, &nowMs, x.id, x.owner, x.asset, store.EntryExpire, 0, endAny, nil)
		if err != nil {
			return swept, fmt.Errorf("hold %q: %w", x.id, err)
		}
		db.forgetHold(x.id)
		if res.verdict != verdictOK {
			continue // ended by another
		}
		swept.Released++
		if res.lost > 0 {
			swept.Lost = append(swept.Lost, store.LostCalls{LeaseID: x.id, KeyID: res.hold.KeyID, Calls: res.lost})
		}
	}
	return swept, nil
}

// sameArgs compares the arguments an operation id was applied with to a
// repeat's.
func sameArgs(prev, args string) error {
	if prev != args {
		return fmt.Errorf("operation id was used with other arguments: %w", store.ErrConflict)
	}
	return nil
}

// findOp reads the entry of an operation, by a statement of its own, so it
// sees every commit before it: its seq if the operation was applied with
// args, ErrConflict if with others, ErrNotFound if not at all.
func (db *DB) findOp(ctx context.Context, class, opID, args string) (int64, error) {
	var seq int64
	var prev string
	err := db.pool.QueryRow(ctx, `SELECT seq, args FROM ledger_entries WHERE op_class = $1 AND op_id = $2`,
		class, opID).Scan(&seq, &prev)
	if err != nil {
		return 0, db.mapErr(ctx, err)
	}
	return seq, sameArgs(prev, args)
}

// replayEntry answers a repeated credit: the entry of its first run.
func (db *DB) replayEntry(ctx context.Context, class, opID, args string) (store.Entry, error) {
	seq, err := db.findOp(ctx, class, opID, args)
	if err != nil {
		return store.Entry{}, err
	}
	return db.loadEntry(ctx, seq)
}

// replayHold answers a repeated hold: the hold as it now stands.
func (db *DB) replayHold(ctx context.Context, holdID, args string) (store.Hold, error) {
	if _, err := db.findOp(ctx, classHold, holdID, args); err != nil {
		return store.Hold{}, err
	}
	return db.HoldRecord(ctx, holdID)
}

// retry reports whether err is a deadlock or serialization failure, which
// aborted the statement and wrote nothing, so it may run again. The lock
// order every statement follows should make them impossible; a retry keeps
// a bug in that order from failing calls, and the warning shows it.
func (db *DB) retry(ctx context.Context, err error, op string) bool {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || (pe.Code != "40P01" && pe.Code != "40001") || ctx.Err() != nil {
		return false
	}
	db.log.WarnContext(ctx, "ledger statement aborted by the server, running it again", "op", op, "sqlstate", pe.Code)
	return true
}

const entryColumns = `e.seq, e.op_id, e.kind, e.asset, e.owner, e.hold_id, e.created_at_ms`

// loadEntry reads the entry seq with its postings.
func (db *DB) loadEntry(ctx context.Context, seq int64) (store.Entry, error) {
	es, err := db.queryEntries(ctx, `SELECT `+entryColumns+`, p.account, p.delta, p.balance_after
FROM ledger_entries e JOIN ledger_postings p ON p.seq = e.seq
WHERE e.seq = $1
ORDER BY p.account COLLATE "C"`, seq)
	if err != nil {
		return store.Entry{}, err
	}
	if len(es) != 1 {
		return store.Entry{}, fmt.Errorf("entry %d: %w", seq, store.ErrNotFound)
	}
	return es[0], nil
}

// queryEntries reads rows of entryColumns plus a posting, ordered by seq
// and account, into entries.
func (db *DB) queryEntries(ctx context.Context, query string, args ...any) ([]store.Entry, error) {
	rows, err := db.pool.Query(ctx, query, args...)
	if err != nil {
		return nil, db.mapErr(ctx, err)
	}
	defer rows.Close() // rows.Err reports what iterating hit
	var out []store.Entry
	for rows.Next() {
		var e store.Entry
		var kind string
		var created int64
		var p store.Posting
		if err := rows.Scan(&e.Seq, &e.OpID, &kind, &e.Asset, &e.Owner, &e.HoldID, &created,
			&p.Account, &p.Delta, &p.BalanceAfter); err != nil {
			return nil, db.mapErr(ctx, err)
		}
		if n := len(out); n > 0 && out[n-1].Seq == e.Seq {
			out[n-1].Postings = append(out[n-1].Postings, p)
			continue
		}
		e.Kind = store.EntryKind(kind)
		e.CreatedAt = time.UnixMilli(created).UTC()
		e.Postings = []store.Posting{p}
		out = append(out, e)
	}
	return out, db.mapErr(ctx, rows.Err())
}

// sortPostings puts postings in account order, byte-wise.
func sortPostings(ps []store.Posting) {
	slices.SortFunc(ps, func(a, b store.Posting) int { return cmp.Compare(a.Account, b.Account) })
}

// HoldRecord implements store.Ledger.
func (db *DB) HoldRecord(ctx context.Context, holdID string) (_ store.Hold, err error) {
	defer store.Wrap(&err, "postgres", "hold record %q", holdID)
	if !store.ValidID(holdID) {
		return store.Hold{}, errors.New("invalid hold id")
	}
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return store.Hold{}, err
	}
	defer cancel()
	h, found, err := scanHold(db.pool.QueryRow(ctx, `SELECT `+holdColumns+` FROM ledger_holds WHERE hold_id = $1`, holdID))
	switch {
	case err != nil:
		return store.Hold{}, db.mapErr(ctx, err)
	case !found:
		return store.Hold{}, store.ErrNotFound
	}
	return h, nil
}

// Balance implements store.Ledger. A system account's balance is the sum of
// its postings: a scan of its index, for reports, not for the paid path.
func (db *DB) Balance(ctx context.Context, account, asset string) (_ int64, err error) {
	defer store.Wrap(&err, "postgres", "balance %q", account)
	kind, err := store.ValidateAccount(account, asset)
	if err != nil {
		return 0, err
	}
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return 0, err
	}
	defer cancel()
	query := `SELECT COALESCE(SUM(delta), 0)::bigint FROM ledger_postings WHERE account = $1 AND asset = $2`
	if kind == "user" || kind == "held" {
		query = `SELECT COALESCE((SELECT balance FROM ledger_balances WHERE account = $1 AND asset = $2), 0)`
	}
	var b int64
	if err := db.pool.QueryRow(ctx, query, account, asset).Scan(&b); err != nil {
		return 0, db.mapErr(ctx, err)
	}
	return b, nil
}

// entriesPage is one page of an account's statement, in one statement, so
// a page is one snapshot.
const entriesPage = `SELECT ` + entryColumns + `, p.account, p.delta, p.balance_after
FROM (SELECT seq FROM ledger_postings WHERE account = $1 AND asset = $2 AND seq > $3 ORDER BY seq LIMIT $4) s
JOIN ledger_entries e ON e.seq = s.seq
JOIN ledger_postings p ON p.seq = s.seq
ORDER BY e.seq, p.account COLLATE "C"`

// Entries implements store.Ledger, in one statement, so a page is one
// snapshot.
func (db *DB) Entries(ctx context.Context, account, asset string, afterSeq int64, limit int) (_ []store.Entry, err error) {
	defer store.Wrap(&err, "postgres", "entries of %q", account)
	if err := store.ValidateEntries(account, asset, limit); err != nil {
		return nil, err
	}
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return nil, err
	}
	defer cancel()
	return db.queryEntries(ctx, entriesPage, account, asset, afterSeq, limit)
}

// KeyUsage implements store.Ledger.
func (db *DB) KeyUsage(ctx context.Context, keyID, asset string, period time.Duration) (_ store.KeyUsage, err error) {
	defer store.Wrap(&err, "postgres", "key usage %q", keyID)
	if err := store.ValidateKeyUsage(keyID, asset, period); err != nil {
		return store.KeyUsage{}, err
	}
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return store.KeyUsage{}, err
	}
	defer cancel()
	u := store.KeyUsage{KeyID: keyID, Asset: asset, Period: period}
	var nowMs int64
	err = db.pool.QueryRow(ctx, withNow+`, w AS MATERIALIZED (
    SELECT n.ms, CASE WHEN $4::bigint > 0
        THEN n.ms - ((n.ms % $4::bigint) + $4::bigint) % $4::bigint ELSE 0 END AS start
    FROM n)
SELECT w.ms, COALESCE(u.held, 0), COALESCE(u.spent, 0), COALESCE(p.held, 0), COALESCE(p.spent, 0)
FROM w
LEFT JOIN ledger_key_usage u ON u.key_id = $2::text AND u.asset = $3::text
LEFT JOIN ledger_key_periods p ON $4::bigint > 0 AND p.key_id = $2::text AND p.asset = $3::text
    AND p.period_ms = $4::bigint AND p.period_start_ms = w.start`,
		db.nowArg(), keyID, asset, period.Milliseconds()).Scan(&nowMs, &u.Held, &u.Spent, &u.PeriodHeld, &u.PeriodSpent)
	if err != nil {
		return store.KeyUsage{}, db.mapErr(ctx, err)
	}
	if period > 0 {
		u.PeriodStart = store.PeriodStart(time.UnixMilli(nowMs), period)
	}
	return u, nil
}

// holdColumns are a hold's columns; an open lease's issued mark is read from
// its row in ledger_lease_marks (migration 0019).
const holdColumns = `hold_id, owner, asset, amount, actual, key_id, key_period_ms, key_period_start_ms, state,
    expires_at_ms, created_at_ms, seq, resolved_at_ms, resolved_seq, lease, drawn, drawn_cost,
    COALESCE((SELECT m.issued FROM ledger_lease_marks m WHERE m.lease_id = hold_id), issued) AS issued`

// holdScan receives one row of holdColumns, each of which may be NULL (an
// outer join).
type holdScan struct {
	id, owner, asset, keyID, state                                                      *string
	amount, actual, periodMs, periodStart, expires, created, seq, resolved, resolvedSeq *int64
	lease, drawn, drawnCost, issued                                                     *int64
}

// dest returns the scan destinations of the values of first followed by
// holdColumns.
func (s *holdScan) dest(first ...any) []any {
	dest := make([]any, 0, len(first)+18)
	dest = append(dest, first...)
	return append(dest, &s.id, &s.owner, &s.asset, &s.amount, &s.actual, &s.keyID, &s.periodMs, &s.periodStart,
		&s.state, &s.expires, &s.created, &s.seq, &s.resolved, &s.resolvedSeq, &s.lease, &s.drawn, &s.drawnCost, &s.issued)
}

// scanHold reads one row of holdColumns after the values of first: found
// is false when the hold's columns are NULL.
func scanHold(row pgx.Row, first ...any) (_ store.Hold, found bool, _ error) {
	var s holdScan
	if err := row.Scan(s.dest(first...)...); err != nil {
		return store.Hold{}, false, err
	}
	h, found := s.hold()
	return h, found, nil
}

// hold returns the hold scanned, or false if its columns were NULL.
func (s *holdScan) hold() (store.Hold, bool) {
	if s.id == nil {
		return store.Hold{}, false
	}
	// The schema makes every column NOT NULL.
	h := store.Hold{
		ID: *s.id, Owner: *s.owner, Asset: *s.asset, Amount: *s.amount, Actual: *s.actual, KeyID: *s.keyID,
		State:     store.HoldState(*s.state),
		ExpiresAt: time.UnixMilli(*s.expires).UTC(),
		CreatedAt: time.UnixMilli(*s.created).UTC(),
		Seq:       *s.seq, ResolvedSeq: *s.resolvedSeq,
		Lease: *s.lease == 1, Drawn: *s.drawn, DrawnCost: *s.drawnCost, Issued: *s.issued,
	}
	if h.State == store.HoldCaptured {
		h.Captured = store.CapturedOf(h)
		h.Loss = h.Actual - h.Captured
	}
	if *s.periodMs > 0 {
		h.KeyPeriod = time.Duration(*s.periodMs) * time.Millisecond
		h.KeyPeriodStart = time.UnixMilli(*s.periodStart).UTC()
	}
	if *s.resolved > 0 {
		h.ResolvedAt = time.UnixMilli(*s.resolved).UTC()
	}
	return h, true
}

var _ store.Ledger = (*DB)(nil)
