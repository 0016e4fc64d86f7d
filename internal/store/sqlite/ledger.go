package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/llm4agents/llm4agents/internal/store"
)

// The credits ledger (store.Ledger), in the tables of migration 0004.
//
// Every operation that writes is one op of a write batch (writer.go): its
// idempotency check, its conditional balance and cap updates and its journal
// rows run inside the batch's IMMEDIATE transaction, in a savepoint of their
// own, so a refused hold leaves nothing behind and two DB values on one file
// can never both pass a check that only one of them may pass.
//
// The guards are conditional UPDATEs (WHERE balance >= amount, WHERE spent +
// held <= cap - amount), not a read followed by a write: that is what keeps a
// backend with concurrent writers (PostgreSQL) correct, and SQLite runs the
// same statements. Operations take an owner's rows in the order user, held,
// key total, key period, and draw the entry's seq after the balance rows.

// The statements of the ledger's writes, which the writer prepares once
// (ledgerStatements); reads on the read pool use some of them too.
const (
	selectOp    = `SELECT seq, args FROM ledger_entries WHERE op_class = ? AND op_id = ?`
	nextSeq     = `UPDATE ledger_seq SET last = last + 1 WHERE id = 1 RETURNING last`
	insertEntry = `INSERT INTO ledger_entries (seq, op_class, op_id, kind, asset, owner, hold_id, args, created_at_ms)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`
	selectBalance = `SELECT balance FROM ledger_balances WHERE account = ? AND asset = ?`
	lowerBalance  = `UPDATE ledger_balances SET balance = balance + ?
WHERE account = ? AND asset = ? AND balance >= ?
RETURNING balance`
	raiseBalance = `INSERT INTO ledger_balances (account, asset, balance) VALUES (?, ?, ?)
ON CONFLICT (account, asset) DO UPDATE SET balance = ledger_balances.balance + excluded.balance
WHERE ledger_balances.balance <= ?
RETURNING balance`
	holdKeyUsage = `INSERT INTO ledger_key_usage (key_id, asset, held, spent) VALUES (?, ?, ?, 0)
ON CONFLICT (key_id, asset) DO UPDATE SET held = ledger_key_usage.held + excluded.held
WHERE ledger_key_usage.spent + ledger_key_usage.held <= ?`
	selectKeyUsage     = `SELECT held, spent FROM ledger_key_usage WHERE key_id = ? AND asset = ?`
	holdKeyPeriodUsage = `INSERT INTO ledger_key_periods (key_id, asset, period_ms, period_start_ms, held, spent)
VALUES (?, ?, ?, ?, ?, 0)
ON CONFLICT (key_id, asset, period_ms, period_start_ms) DO UPDATE SET held = ledger_key_periods.held + excluded.held
WHERE ledger_key_periods.spent + ledger_key_periods.held <= ?`
	selectKeyPeriod = `SELECT held, spent FROM ledger_key_periods
WHERE key_id = ? AND asset = ? AND period_ms = ? AND period_start_ms = ?`
	resolveKeyUsage = `UPDATE ledger_key_usage SET held = held - ?, spent = spent + ?
WHERE key_id = ? AND asset = ?`
	resolveKeyPeriodUsage = `UPDATE ledger_key_periods SET held = held - ?, spent = spent + ?
WHERE key_id = ? AND asset = ? AND period_ms = ? AND period_start_ms = ?`

	holdColumns = `hold_id, owner, asset, amount, actual, key_id, key_period_ms, key_period_start_ms, state,
    expires_at_ms, created_at_ms, seq, resolved_at_ms, resolved_seq, lease, drawn, drawn_cost, issued`
	selectHold = `SELECT ` + holdColumns + ` FROM ledger_holds WHERE hold_id = ?`
	insertHold = `INSERT INTO ledger_holds (
    hold_id, owner, asset, amount, key_id, key_period_ms, key_period_start_ms, state, expires_at_ms, created_at_ms, seq, lease, issued)
VALUES (?, ?, ?, ?, ?, ?, ?, 'held', ?, ?, ?, ?, ?)
RETURNING ` + holdColumns
	resolveHold = `UPDATE ledger_holds
SET state = ?, actual = ?, resolved_at_ms = ?, resolved_seq = ?
WHERE hold_id = ? AND state = 'held'
RETURNING ` + holdColumns
	selectExpired = `SELECT hold_id FROM ledger_holds
WHERE state = 'held' AND expires_at_ms <= ?
ORDER BY expires_at_ms, hold_id
LIMIT ?`

	entryColumns = `e.seq, e.op_id, e.kind, e.asset, e.owner, e.hold_id, e.created_at_ms`
	selectEntry  = `SELECT ` + entryColumns + `, p.account, p.delta, p.balance_after
FROM ledger_entries e JOIN ledger_postings p ON p.seq = e.seq
WHERE e.seq = ?
ORDER BY p.account`
)

// maxPostings bounds the postings of one entry: a capture's held, user,
// revenue and loss.
const maxPostings = 4

// insertPostings[n] writes the n postings of an entry in one statement. Only
// placeholders are repeated; every value is a parameter.
var insertPostings = func() (q [maxPostings + 1]string) {
	for n := 1; n <= maxPostings; n++ {
		q[n] = `INSERT INTO ledger_postings (seq, account, asset, delta, balance_after) VALUES (?, ?, ?, ?, ?)` +
			strings.Repeat(`, (?, ?, ?, ?, ?)`, n-1)
	}
	return q
}()

// ledgerStatements returns the statements the ledger's write ops run, for
// the writer to prepare.
func ledgerStatements() []string {
	qs := []string{selectOp, nextSeq, insertEntry, selectBalance, lowerBalance, raiseBalance,
		holdKeyUsage, selectKeyUsage, holdKeyPeriodUsage, selectKeyPeriod, resolveKeyUsage, resolveKeyPeriodUsage,
		selectHold, insertHold, resolveHold, selectExpired, selectEntry}
	return append(qs, insertPostings[1:]...)
}

// Operation classes: the namespaces of op ids (ledger_entries.op_class).
const (
	classCredit  = "credit"
	classHold    = "hold"
	classResolve = "resolve"
)

// errOutOfRange is what addBalance returns when the new balance would leave
// [0, MaxInt64]; callers turn it into the error their operation owes.
var errOutOfRange = errors.New("balance out of range")

// Credit implements store.Ledger.
func (db *DB) Credit(ctx context.Context, opID, owner, asset string, amount int64) (_ store.Entry, err error) {
	defer store.Wrap(&err, "sqlite", "credit %q", opID)
	if err := store.ValidateCredit(opID, owner, asset, amount); err != nil {
		return store.Entry{}, err
	}
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return store.Entry{}, err
	}
	defer cancel()

	var e store.Entry
	err = db.write(ctx, func(ctx context.Context, sqlTx *sql.Tx) error {
		tx := db.wtx(sqlTx)
		args := fmt.Sprintf("owner=%s asset=%s amount=%d", owner, asset, amount)
		seq, found, err := findOp(ctx, tx, classCredit, opID, args)
		if err != nil || found {
			if err == nil {
				e, err = loadEntry(ctx, tx, seq)
			}
			return err
		}
		// user + held stays within int64, so no release can overflow user.
		held, err := balance(ctx, tx, store.HeldAccount(owner), asset)
		if err != nil {
			return err
		}
		user, err := addBalance(ctx, tx, store.UserAccount(owner), asset, amount, math.MaxInt64-held)
		if errors.Is(err, errOutOfRange) {
			return fmt.Errorf("the balance would exceed %d", int64(math.MaxInt64))
		}
		if err != nil {
			return err
		}
		e = store.Entry{OpID: opID, Kind: store.EntryCredit, Asset: asset, Owner: owner, Postings: []store.Posting{
			{Account: store.AccountDeposits, Delta: -amount},
			{Account: store.UserAccount(owner), Delta: amount, BalanceAfter: user},
		}}
		return db.appendEntry(ctx, tx, classCredit, args, &e)
	})
	if err != nil {
		return store.Entry{}, err
	}
	return e, nil
}

// Hold implements store.Ledger.
func (db *DB) Hold(ctx context.Context, r store.HoldRequest) (_ store.Hold, err error) {
	defer store.Wrap(&err, "sqlite", "hold %q", r.ID)
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
	ttlMs := store.CeilMillis(r.TTL)
	var h store.Hold
	err := db.write(ctx, func(ctx context.Context, sqlTx *sql.Tx) error {
		tx := db.wtx(sqlTx)
		keyID := ""
		if r.Key != nil {
			keyID = r.Key.ID
		}
		args := store.HoldArgs(r)
		_, found, err := findOp(ctx, tx, classHold, r.ID, args)
		if err != nil || found {
			if err == nil {
				h, err = scanHold(tx.QueryRowContext(ctx, selectHold, r.ID))
			}
			return err
		}
		now := db.nowMs()
		user, err := addBalance(ctx, tx, store.UserAccount(r.Owner), r.Asset, -r.Amount, math.MaxInt64)
		if errors.Is(err, errOutOfRange) {
			avail, err := balance(ctx, tx, store.UserAccount(r.Owner), r.Asset)
			if err != nil {
				return err
			}
			return &store.InsufficientError{Limit: store.LimitBalance, Available: avail, Requested: r.Amount}
		}
		if err != nil {
			return err
		}
		held, err := addBalance(ctx, tx, store.HeldAccount(r.Owner), r.Asset, r.Amount, math.MaxInt64)
		if err != nil {
			return err // user + held <= MaxInt64 (Credit), so never out of range
		}
		var periodMs, periodStart int64
		if r.Key != nil {
			if err := holdKey(ctx, tx, r.Key.ID, r.Asset, r.Amount, r.Key.TotalCap); err != nil {
				return err
			}
			if r.Key.PeriodCap != store.NoCap {
				periodMs = r.Key.Period.Milliseconds()
				periodStart = store.PeriodStart(time.UnixMilli(now), r.Key.Period).UnixMilli()
				if err := holdKeyPeriod(ctx, tx, r.Key.ID, r.Asset, periodMs, periodStart, r.Amount, r.Key.PeriodCap); err != nil {
					return err
				}
			}
		}
		e := store.Entry{OpID: r.ID, Kind: store.EntryHold, Asset: r.Asset, Owner: r.Owner, HoldID: r.ID, Postings: []store.Posting{
			{Account: store.HeldAccount(r.Owner), Delta: r.Amount, BalanceAfter: held},
			{Account: store.UserAccount(r.Owner), Delta: -r.Amount, BalanceAfter: user},
		}}
		if err := db.appendEntry(ctx, tx, classHold, args, &e); err != nil {
			return err
		}
		h, err = scanHold(tx.QueryRowContext(ctx, insertHold,
			r.ID, r.Owner, r.Asset, r.Amount, keyID, periodMs, periodStart, now+ttlMs, e.CreatedAt.UnixMilli(), e.Seq, boolInt(r.Lease), r.Issued))
		return err
	})
	if err != nil {
		return store.Hold{}, err
	}
	return h, nil
}

// holdKey adds amount to the key's held if its spent + held stays within
// limit, in one conditional upsert; otherwise it returns an
// *store.InsufficientError.
func holdKey(ctx context.Context, tx wtx, keyID, asset string, amount, limit int64) error {
	if amount <= limit { // a new row holds amount: it must fit on its own
		res, err := tx.ExecContext(ctx, holdKeyUsage, keyID, asset, amount, limit-amount)
		if err != nil {
			return err
		}
		if ok, err := oneRow(res); ok || err != nil {
			return err
		}
	}
	var held, spent int64
	err := tx.QueryRowContext(ctx, selectKeyUsage, keyID, asset).Scan(&held, &spent)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return err
	}
	return &store.InsufficientError{Limit: store.LimitKeyTotal, Available: max(limit-spent-held, 0), Requested: amount}
}

// holdKeyPeriod is holdKey for one window of the key's period.
func holdKeyPeriod(ctx context.Context, tx wtx, keyID, asset string, periodMs, start, amount, limit int64) error {
	if amount <= limit {
		res, err := tx.ExecContext(ctx, holdKeyPeriodUsage, keyID, asset, periodMs, start, amount, limit-amount)
		if err != nil {
			return err
		}
		if ok, err := oneRow(res); ok || err != nil {
			return err
		}
	}
	var held, spent int64
	err := tx.QueryRowContext(ctx, selectKeyPeriod, keyID, asset, periodMs, start).Scan(&held, &spent)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return err
	}
	return &store.InsufficientError{Limit: store.LimitKeyPeriod, Available: max(limit-spent-held, 0), Requested: amount}
}

// Capture implements store.Ledger.
func (db *DB) Capture(ctx context.Context, holdID string, actual int64) (_ store.Hold, _ store.Entry, err error) {
	defer store.Wrap(&err, "sqlite", "capture %q", holdID)
	if err := store.ValidateActual(holdID, actual); err != nil {
		return store.Hold{}, store.Entry{}, err
	}
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return store.Hold{}, store.Entry{}, err
	}
	defer cancel()

	var h store.Hold
	var e store.Entry
	err = db.write(ctx, func(ctx context.Context, sqlTx *sql.Tx) error {
		var err error
		h, e, err = capture(ctx, db, db.wtx(sqlTx), holdID, actual)
		return err
	})
	if err != nil {
		return store.Hold{}, store.Entry{}, err
	}
	return h, e, nil
}

// capture is Capture's op, inside a write batch.
func capture(ctx context.Context, db *DB, tx wtx, holdID string, actual int64) (store.Hold, store.Entry, error) {
	cur, err := scanHold(tx.QueryRowContext(ctx, selectHold, holdID))
	if err != nil {
		return store.Hold{}, store.Entry{}, err
	}
	switch {
	case cur.Lease:
		return store.Hold{}, store.Entry{}, fmt.Errorf("hold is a lease: %w", store.ErrConflict)
	case cur.State == store.HoldHeld:
		return db.resolve(ctx, tx, cur, store.EntryCapture, actual, min(actual, cur.Amount))
	case cur.State == store.HoldCaptured && cur.Actual == actual:
		e, err := loadEntry(ctx, tx, cur.ResolvedSeq)
		return cur, e, err
	case cur.State == store.HoldCaptured:
		return store.Hold{}, store.Entry{}, fmt.Errorf("hold was captured for %d, not %d: %w", cur.Actual, actual, store.ErrConflict)
	default:
		return store.Hold{}, store.Entry{}, fmt.Errorf("hold is %s: %w", cur.State, store.ErrConflict)
	}
}

// Release implements store.Ledger.
func (db *DB) Release(ctx context.Context, holdID string) (_ store.Hold, _ store.Entry, err error) {
	defer store.Wrap(&err, "sqlite", "release %q", holdID)
	if !store.ValidID(holdID) {
		return store.Hold{}, store.Entry{}, errors.New("invalid hold id")
	}
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return store.Hold{}, store.Entry{}, err
	}
	defer cancel()

	var h store.Hold
	var e store.Entry
	err = db.write(ctx, func(ctx context.Context, sqlTx *sql.Tx) error {
		tx := db.wtx(sqlTx)
		cur, err := scanHold(tx.QueryRowContext(ctx, selectHold, holdID))
		if err != nil {
			return err
		}
		if cur.Lease {
			return fmt.Errorf("hold is a lease: %w", store.ErrConflict)
		}
		switch cur.State {
		case store.HoldHeld:
			h, e, err = db.resolve(ctx, tx, cur, store.EntryRelease, 0, 0)
			return err
		case store.HoldReleased, store.HoldExpired:
			h = cur
			e, err = loadEntry(ctx, tx, cur.ResolvedSeq)
			return err
		default:
			return fmt.Errorf("hold is %s: %w", cur.State, store.ErrConflict)
		}
	})
	if err != nil {
		return store.Hold{}, store.Entry{}, err
	}
	return h, e, nil
}

// ReleaseExpiredHolds implements store.Ledger. limit bounds the work of one
// write op, which shares its batch's transaction and deadline with other
// writes: keep it in the hundreds.
func (db *DB) ReleaseExpiredHolds(ctx context.Context, limit int) (_ store.Swept, err error) {
	defer store.Wrap(&err, "sqlite", "release expired holds")
	if err := store.CheckLimit(limit); err != nil {
		return store.Swept{}, err
	}
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return store.Swept{}, err
	}
	defer cancel()

	var swept store.Swept
	err = db.write(ctx, func(ctx context.Context, sqlTx *sql.Tx) error {
		tx := db.wtx(sqlTx)
		swept = store.Swept{}
		ids, err := expiredHolds(ctx, tx, db.nowMs(), limit)
		if err != nil {
			return err
		}
		for _, id := range ids {
			cur, err := scanHold(tx.QueryRowContext(ctx, selectHold, id))
			if err != nil {
				return err
			}
			lost, err := lostCalls(ctx, tx, cur)
			if err != nil {
				return err
			}
			if _, _, err := db.expire(ctx, tx, cur); err != nil {
				return err
			}
			swept.Released++
			if lost > 0 {
				swept.Lost = append(swept.Lost, store.LostCalls{LeaseID: cur.ID, KeyID: cur.KeyID, Calls: lost})
			}
		}
		return nil
	})
	if err != nil {
		return store.Swept{}, err
	}
	return swept, nil
}

// lostCalls is, for the open lease h about to be ended by the sweep, the
// positions up to its issued mark without a recorded draw (see
// store.LostCalls); 0 for a call's hold. It is read in the sweep's write,
// which no other writer shares, so no draw lands between it and the end.
func lostCalls(ctx context.Context, tx wtx, h store.Hold) (int64, error) {
	if !h.Lease || h.Issued == 0 {
		return 0, nil
	}
	var drawn int64
	if err := tx.QueryRowContext(ctx, countIssuedDraws, h.ID, h.Issued).Scan(&drawn); err != nil {
		return 0, err
	}
	return h.Issued - drawn, nil
}

func expiredHolds(ctx context.Context, tx wtx, now int64, limit int) ([]string, error) {
	rows, err := tx.QueryContext(ctx, selectExpired, now, limit)
	if err != nil {
		return nil, err
	}
	defer func() { _ = rows.Close() }() // rows.Err reports what iterating hit
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

// expire ends the open hold h past its TTL: a call's hold, or a lease with
// nothing drawn, is released as EntryExpire; a lease with draws is captured
// for them, as CloseLease would.
func (db *DB) expire(ctx context.Context, tx wtx, h store.Hold) (store.Hold, store.Entry, error) {
	if h.Lease && h.DrawnCost > 0 {
		return db.resolve(ctx, tx, h, store.EntryCapture, h.DrawnCost, h.Drawn)
	}
	return db.resolve(ctx, tx, h, store.EntryExpire, 0, 0)
}

// resolve ends the open hold h with an entry of kind (capture, release or
// expire), billing charged (at most h.Amount and actual) and recording the
// rest of actual as loss; release and expire pass 0, 0.
func (db *DB) resolve(ctx context.Context, tx wtx, h store.Hold, kind store.EntryKind, actual, charged int64) (store.Hold, store.Entry, error) {
	if charged > h.Amount || charged > actual {
		return store.Hold{}, store.Entry{}, fmt.Errorf("charge %d of cost %d does not fit hold %d", charged, actual, h.Amount) // a bug here, never input
	}
	refund, loss := h.Amount-charged, actual-charged
	user, err := addBalance(ctx, tx, store.UserAccount(h.Owner), h.Asset, refund, math.MaxInt64)
	if err != nil {
		return store.Hold{}, store.Entry{}, err
	}
	held, err := addBalance(ctx, tx, store.HeldAccount(h.Owner), h.Asset, -h.Amount, math.MaxInt64)
	if err != nil {
		return store.Hold{}, store.Entry{}, fmt.Errorf("held balance below an open hold: %w", err)
	}
	if h.KeyID != "" {
		if err := execOne(ctx, tx, resolveKeyUsage, h.Amount, charged, h.KeyID, h.Asset); err != nil {
			return store.Hold{}, store.Entry{}, fmt.Errorf("key usage: %w", err)
		}
		if h.KeyPeriod > 0 {
			if err := execOne(ctx, tx, resolveKeyPeriodUsage, h.Amount, charged, h.KeyID, h.Asset, h.KeyPeriod.Milliseconds(), h.KeyPeriodStart.UnixMilli()); err != nil {
				return store.Hold{}, store.Entry{}, fmt.Errorf("key period usage: %w", err)
			}
		}
	}
	e := store.Entry{OpID: h.ID, Kind: kind, Asset: h.Asset, Owner: h.Owner, HoldID: h.ID, Postings: []store.Posting{
		{Account: store.HeldAccount(h.Owner), Delta: -h.Amount, BalanceAfter: held},
		{Account: store.UserAccount(h.Owner), Delta: refund, BalanceAfter: user},
	}}
	if actual > 0 {
		e.Postings = append(e.Postings, store.Posting{Account: store.AccountRevenue, Delta: actual})
	}
	if loss > 0 {
		e.Postings = append(e.Postings, store.Posting{Account: store.AccountLoss, Delta: -loss})
	}
	args := ""
	if kind == store.EntryCapture {
		args = fmt.Sprintf("actual=%d", actual)
	}
	if err := db.appendEntry(ctx, tx, classResolve, args, &e); err != nil {
		return store.Hold{}, store.Entry{}, err
	}
	state := map[store.EntryKind]store.HoldState{
		store.EntryCapture: store.HoldCaptured, store.EntryRelease: store.HoldReleased, store.EntryExpire: store.HoldExpired,
	}[kind]
	h, err = scanHold(tx.QueryRowContext(ctx, resolveHold, state, actual, e.CreatedAt.UnixMilli(), e.Seq, h.ID))
	if err != nil {
		return store.Hold{}, store.Entry{}, err
	}
	return h, e, nil
}

// findOp looks up the entry of an operation. It returns its seq and true if
// the operation was applied with the same arguments, ErrConflict if with
// others, and false if it was not applied.
func findOp(ctx context.Context, tx wtx, class, opID, args string) (int64, bool, error) {
	var seq int64
	var prev string
	err := tx.QueryRowContext(ctx, selectOp, class, opID).Scan(&seq, &prev)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return 0, false, nil
	case err != nil:
		return 0, false, err
	case prev != args:
		return 0, false, fmt.Errorf("operation id was used with other arguments: %w", store.ErrConflict)
	}
	return seq, true, nil
}

// appendEntry draws the next seq, stamps e with it and the store's time,
// sorts its postings and writes it.
func (db *DB) appendEntry(ctx context.Context, tx wtx, class, args string, e *store.Entry) error {
	var sum int64
	for _, p := range e.Postings {
		sum += p.Delta
	}
	if sum != 0 {
		return fmt.Errorf("postings of a %s entry sum to %d", e.Kind, sum) // a bug here, never input
	}
	err := tx.QueryRowContext(ctx, nextSeq).Scan(&e.Seq)
	if errors.Is(err, sql.ErrNoRows) {
		return errors.New("ledger sequence row missing")
	}
	if err != nil {
		return err
	}
	now := db.nowMs()
	e.CreatedAt = time.UnixMilli(now).UTC()
	slices.SortFunc(e.Postings, func(a, b store.Posting) int { return cmp.Compare(a.Account, b.Account) })
	if _, err := tx.ExecContext(ctx, insertEntry, e.Seq, class, e.OpID, e.Kind, e.Asset, e.Owner, e.HoldID, args, now); err != nil {
		return err
	}
	// One statement for all postings (two to four).
	if len(e.Postings) > maxPostings {
		return fmt.Errorf("a %s entry has %d postings", e.Kind, len(e.Postings)) // a bug here, never input
	}
	values := make([]any, 0, 5*len(e.Postings))
	for _, p := range e.Postings {
		values = append(values, e.Seq, p.Account, e.Asset, p.Delta, p.BalanceAfter)
	}
	_, err = tx.ExecContext(ctx, insertPostings[len(e.Postings)], values...)
	return err
}

// addBalance adds delta to a user or held balance, if the new balance stays
// within [0, hi], and returns it; errOutOfRange otherwise. Each case is one
// statement whose condition is the guard: a debit is an UPDATE WHERE
// balance >= -delta, a credit an upsert WHERE balance <= hi - delta. The
// bounds are computed here, so SQL never computes a value outside int64.
func addBalance(ctx context.Context, tx wtx, account, asset string, delta, hi int64) (int64, error) {
	var b int64
	var err error
	switch {
	case delta == 0:
		return balance(ctx, tx, account, asset)
	case delta < 0:
		err = tx.QueryRowContext(ctx, lowerBalance, delta, account, asset, -delta).Scan(&b)
	case delta > hi:
		return 0, errOutOfRange
	default: // hi >= delta > 0: hi - delta cannot overflow
		err = tx.QueryRowContext(ctx, raiseBalance, account, asset, delta, hi-delta).Scan(&b)
	}
	if errors.Is(err, sql.ErrNoRows) {
		return 0, errOutOfRange
	}
	return b, err
}

// balance reads a user or held balance: 0 if it has no row.
func balance(ctx context.Context, q querier, account, asset string) (int64, error) {
	var b int64
	err := q.QueryRowContext(ctx, selectBalance, account, asset).Scan(&b)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	return b, err
}

// execOne runs a statement that must change exactly one row.
func execOne(ctx context.Context, tx wtx, query string, args ...any) error {
	res, err := tx.ExecContext(ctx, query, args...)
	if err != nil {
		return err
	}
	ok, err := oneRow(res)
	if err == nil && !ok {
		err = errors.New("row missing")
	}
	return err
}

func oneRow(res sql.Result) (bool, error) {
	n, err := res.RowsAffected()
	return n == 1, err
}

// querier is what reads need: a transaction or the read pool.
type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// loadEntry reads the entry seq with its postings.
func loadEntry(ctx context.Context, q querier, seq int64) (store.Entry, error) {
	es, err := queryEntries(ctx, q, selectEntry, seq)
	if err != nil {
		return store.Entry{}, err
	}
	if len(es) != 1 {
		return store.Entry{}, fmt.Errorf("entry %d: %w", seq, store.ErrNotFound)
	}
	return es[0], nil
}

// queryEntries reads rows of entryColumns plus a posting, ordered by seq,
// into entries.
func queryEntries(ctx context.Context, q querier, query string, args ...any) ([]store.Entry, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer func() { _ = rows.Close() }() // rows.Err reports what iterating hit
	var out []store.Entry
	for rows.Next() {
		var e store.Entry
		var kind string
		var created int64
		var p store.Posting
		if err := rows.Scan(&e.Seq, &e.OpID, &kind, &e.Asset, &e.Owner, &e.HoldID, &created,
			&p.Account, &p.Delta, &p.BalanceAfter); err != nil {
			return nil, err
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
	return out, rows.Err()
}

// HoldRecord implements store.Ledger.
func (db *DB) HoldRecord(ctx context.Context, holdID string) (_ store.Hold, err error) {
	defer store.Wrap(&err, "sqlite", "hold record %q", holdID)
	if !store.ValidID(holdID) {
		return store.Hold{}, errors.New("invalid hold id")
	}
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return store.Hold{}, err
	}
	defer cancel()
	h, err := scanHold(db.ro.QueryRowContext(ctx, selectHold, holdID))
	if err != nil {
		return store.Hold{}, mapErr(ctx, err)
	}
	return h, nil
}

// Balance implements store.Ledger. A system account's balance is the sum of
// its postings: a scan of its index, for reports, not for the paid path.
func (db *DB) Balance(ctx context.Context, account, asset string) (_ int64, err error) {
	defer store.Wrap(&err, "sqlite", "balance %q", account)
	kind, err := store.ValidateAccount(account, asset)
	if err != nil {
		return 0, err
	}
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return 0, err
	}
	defer cancel()
	var b int64
	if kind == "user" || kind == "held" {
		b, err = balance(ctx, db.ro, account, asset)
	} else {
		err = db.ro.QueryRowContext(ctx, `SELECT COALESCE(SUM(delta), 0) FROM ledger_postings WHERE account = ? AND asset = ?`,
			account, asset).Scan(&b)
	}
	if err != nil {
		return 0, mapErr(ctx, err)
	}
	return b, nil
}

// Entries implements store.Ledger, in one statement, so a page is one
// snapshot.
func (db *DB) Entries(ctx context.Context, account, asset string, afterSeq int64, limit int) (_ []store.Entry, err error) {
	defer store.Wrap(&err, "sqlite", "entries of %q", account)
	if err := store.ValidateEntries(account, asset, limit); err != nil {
		return nil, err
	}
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return nil, err
	}
	defer cancel()
	es, err := queryEntries(ctx, db.ro, `SELECT `+entryColumns+`, p.account, p.delta, p.balance_after
FROM (SELECT seq FROM ledger_postings WHERE account = ? AND asset = ? AND seq > ? ORDER BY seq LIMIT ?) s
JOIN ledger_entries e ON e.seq = s.seq
JOIN ledger_postings p ON p.seq = s.seq
ORDER BY e.seq, p.account`, account, asset, afterSeq, limit)
	if err != nil {
		return nil, mapErr(ctx, err)
	}
	return es, nil
}

// KeyUsage implements store.Ledger.
func (db *DB) KeyUsage(ctx context.Context, keyID, asset string, period time.Duration) (_ store.KeyUsage, err error) {
	defer store.Wrap(&err, "sqlite", "key usage %q", keyID)
	if err := store.ValidateKeyUsage(keyID, asset, period); err != nil {
		return store.KeyUsage{}, err
	}
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return store.KeyUsage{}, err
	}
	defer cancel()
	u := store.KeyUsage{KeyID: keyID, Asset: asset, Period: period}
	err = db.ro.QueryRowContext(ctx, selectKeyUsage, keyID, asset).Scan(&u.Held, &u.Spent)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return store.KeyUsage{}, mapErr(ctx, err)
	}
	if period == 0 {
		return u, nil
	}
	u.PeriodStart = store.PeriodStart(time.UnixMilli(db.nowMs()), period)
	err = db.ro.QueryRowContext(ctx, selectKeyPeriod,
		keyID, asset, period.Milliseconds(), u.PeriodStart.UnixMilli()).Scan(&u.PeriodHeld, &u.PeriodSpent)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return store.KeyUsage{}, mapErr(ctx, err)
	}
	return u, nil
}

// scanHold reads one row of holdColumns.
func scanHold(row interface{ Scan(...any) error }) (store.Hold, error) {
	var h store.Hold
	var state string
	var periodMs, periodStart, expires, created, resolved, lease int64
	err := row.Scan(&h.ID, &h.Owner, &h.Asset, &h.Amount, &h.Actual, &h.KeyID, &periodMs, &periodStart, &state,
		&expires, &created, &h.Seq, &resolved, &h.ResolvedSeq, &lease, &h.Drawn, &h.DrawnCost, &h.Issued)
	if err != nil {
		return store.Hold{}, err
	}
	h.State, h.Lease = store.HoldState(state), lease == 1
	if h.State == store.HoldCaptured {
		h.Captured = store.CapturedOf(h)
		h.Loss = h.Actual - h.Captured
	}
	if periodMs > 0 {
		h.KeyPeriod = time.Duration(periodMs) * time.Millisecond
		h.KeyPeriodStart = time.UnixMilli(periodStart).UTC()
	}
	h.ExpiresAt = time.UnixMilli(expires).UTC()
	h.CreatedAt = time.UnixMilli(created).UTC()
	if resolved > 0 {
		h.ResolvedAt = time.UnixMilli(resolved).UTC()
	}
	return h, nil
}

var _ store.Ledger = (*DB)(nil)
