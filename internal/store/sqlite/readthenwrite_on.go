//go:build l4a_unsafe_readthenwrite

package sqlite

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/llm4agents/llm4agents/internal/store"
)

// This file exists only in binaries built with -tags l4a_unsafe_readthenwrite,
// for the control run of the cap tests: with
// LLM4AGENTS_UNSAFE_READ_THEN_WRITE=1, Hold reads the balance and the key's
// usage in one statement, decides in Go, and writes the hold in another, with
// the key's caps lifted from the write: the reservation as read-then-write.
// Concurrent holds then all pass the check on the same stale usage and
// together exceed a cap. A test that does not see that overspend with the
// switch on proves nothing with it off.
//
// The write keeps its balance condition: the schema's CHECK (balance >= 0)
// would refuse a negative balance anyway, so an unconditional debit shows an
// error, not an overspend; the caps have no such backstop.

// unsafeReadThenWriteEnv switches the control on in this build only.
const unsafeReadThenWriteEnv = "LLM4AGENTS_UNSAFE_READ_THEN_WRITE"

// readThenWrite is read once, when the process starts; tests may replace it.
var readThenWrite = os.Getenv(unsafeReadThenWriteEnv) == "1"

// readThenWriteGap, if not nil, runs between the read and the write of a
// read-then-write hold: a test can line up every read before any write, so
// the control's overspend does not depend on timing.
var readThenWriteGap func(ctx context.Context)

func init() {
	if readThenWrite {
		_, _ = fmt.Fprintf(os.Stderr, "llm4agents: UNSAFE test build: %s=1, ledger holds check caps by read-then-write; never run this in production\n", unsafeReadThenWriteEnv)
	}
}

// readThenWriteSwitchedOn reports LLM4AGENTS_UNSAFE_READ_THEN_WRITE=1.
func readThenWriteSwitchedOn() bool { return readThenWrite }

// readUsage reads, in one statement on the read pool, the owner's balance
// and what the key has spent and holds in total and in the window (0s for
// missing rows).
const readUsage = `SELECT
    COALESCE((SELECT balance FROM ledger_balances WHERE account = ? AND asset = ?), 0),
    COALESCE((SELECT held + spent FROM ledger_key_usage WHERE key_id = ? AND asset = ?), 0),
    COALESCE((SELECT held + spent FROM ledger_key_periods
        WHERE key_id = ? AND asset = ? AND period_ms = ? AND period_start_ms = ?), 0)`

// unsafeHold, with the switch on, is Hold as read-then-write.
func (db *DB) unsafeHold(ctx context.Context, r store.HoldRequest) (_ store.Hold, done bool, _ error) {
	if !readThenWrite {
		return store.Hold{}, false, nil
	}
	var keyID string
	var periodMs, start int64
	if r.Key != nil {
		keyID = r.Key.ID
		if r.Key.PeriodCap != store.NoCap {
			periodMs = r.Key.Period.Milliseconds()
			start = store.PeriodStart(time.UnixMilli(db.nowMs()), r.Key.Period).UnixMilli()
		}
	}
	var bal, total, window int64
	err := db.ro.QueryRowContext(ctx, readUsage, store.UserAccount(r.Owner), r.Asset, keyID, r.Asset,
		keyID, r.Asset, periodMs, start).Scan(&bal, &total, &window)
	if err != nil {
		return store.Hold{}, true, mapErr(ctx, err)
	}
	if err := checkRead(r, bal, total, window); err != nil {
		return store.Hold{}, true, err
	}
	if readThenWriteGap != nil {
		readThenWriteGap(ctx)
	}
	h, err := db.hold(ctx, liftCaps(r))
	return h, true, err
}

// checkRead decides a hold on the values read, in Hold's order.
func checkRead(r store.HoldRequest, bal, total, window int64) error {
	refuse := func(l store.Limit, avail int64) error {
		return &store.InsufficientError{Limit: l, Available: max(avail, 0), Requested: r.Amount}
	}
	switch {
	case bal < r.Amount:
		return refuse(store.LimitBalance, bal)
	case r.Key == nil:
		return nil
	case r.Amount > r.Key.TotalCap-total:
		return refuse(store.LimitKeyTotal, r.Key.TotalCap-total)
	case r.Key.PeriodCap != store.NoCap && r.Amount > r.Key.PeriodCap-window:
		return refuse(store.LimitKeyPeriod, r.Key.PeriodCap-window)
	}
	return nil
}

// liftCaps returns r with caps that never bind, so the write checks nothing
// the read decided. A period cap stays below NoCap, so the hold still counts
// in its window.
func liftCaps(r store.HoldRequest) store.HoldRequest {
	if r.Key == nil {
		return r
	}
	k := *r.Key
	k.TotalCap = store.NoCap
	if k.PeriodCap != store.NoCap {
		k.PeriodCap = store.NoCap - 1
	}
	r.Key = &k
	return r
}
