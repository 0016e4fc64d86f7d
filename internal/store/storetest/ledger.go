package storetest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/llm4agents/llm4agents/internal/store"
)

// OpenLedger opens two independent handles (separate connection pools or
// clients, as two processes would have) on one new, empty database. Both must
// take the time from now for every hold expiry, key period and timestamp. It
// registers the handles' cleanup with t.Cleanup and stops the test with
// t.Fatal if anything fails.
type OpenLedger func(t *testing.T, now func() time.Time) (a, b store.Ledger)

// RunLedger runs the store.Ledger conformance suite against the backend that
// open opens. Every subtest opens a database of its own and ends with an
// audit of the books through the second handle (see Books).
//
// Beyond the interface's comments, the suite pins down:
//   - Entry shapes: a credit posts deposits and user; a hold, user and held;
//     a capture, release or expiry, held and user always, revenue and loss
//     only when not zero. Postings come in account order (byte order) and
//     BalanceAfter is 0 for system accounts.
//   - A hold's ExpiresAt is its creation plus the TTL rounded up to the
//     millisecond; a hold past it may still be captured or released until
//     the sweep has released it.
//   - Invalid arguments fail with an error that is no sentinel and write
//     nothing.
//   - Concurrent holds through both handles never exceed a balance or a cap,
//     and are never refused while they would still fit.
//
// The property test (random operations with crashes, see
// LedgerPropertySeeds) runs as the subtest Property.
func RunLedger(t *testing.T, open OpenLedger) {
	tests := []struct {
		name string
		run  func(*ledgerEnv)
	}{
		{"Credit/Basic", testLedgerCredit},
		{"Credit/Idempotent", testLedgerCreditIdempotent},
		{"Credit/InvalidArguments", testLedgerCreditInvalid},
		{"Hold/Basic", testLedgerHold},
		{"Hold/Insufficient", testLedgerHoldInsufficient},
		{"Hold/Idempotent", testLedgerHoldIdempotent},
		{"Hold/ZeroAmount", testLedgerHoldZero},
		{"Hold/InvalidArguments", testLedgerHoldInvalid},
		{"Hold/KeyTotalCap", testLedgerKeyTotalCap},
		{"Hold/KeyPeriodCap", testLedgerKeyPeriodCap},
		{"Hold/KeyZeroCap", testLedgerKeyZeroCap},
		{"Capture/Basic", testLedgerCapture},
		{"Capture/Shortfall", testLedgerCaptureShortfall},
		{"Capture/Zero", testLedgerCaptureZero},
		{"Capture/Idempotent", testLedgerCaptureIdempotent},
		{"Capture/InvalidArguments", testLedgerCaptureInvalid},
		{"Release/Basic", testLedgerRelease},
		{"Release/Idempotent", testLedgerReleaseIdempotent},
		{"Expiry/Sweep", testLedgerExpiry},
		{"Expiry/OrderAndLimit", testLedgerExpiryOrder},
		{"Expiry/ResolveBeforeSweep", testLedgerResolveBeforeSweep},
		{"Statement/Paging", testLedgerStatement},
		{"Reads/InvalidArguments", testLedgerReadsInvalid},
		{"Race/BalanceCap", testLedgerRaceBalance},
		{"Race/KeyTotalCap", testLedgerRaceKeyTotal},
		{"Race/KeyPeriodCap", testLedgerRaceKeyPeriod},
		{"Race/SameOperation", testLedgerRaceSameOp},
		{"Race/CaptureVsRelease", testLedgerRaceCaptureRelease},
		{"Closed", testLedgerClosed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := &clock{now: start}
			a, b := open(t, c.Now)
			e := &ledgerEnv{t: t, ctx: t.Context(), clock: c, a: a, b: b, books: NewBooks(b)}
			tc.run(e)
			e.audit()
		})
	}
	t.Run("Property", func(t *testing.T) { runLedgerProperty(t, open) })
}

// Test accounts and assets.
const (
	alice  = "0x857b06519e91e3a54538791bdbb0e22373e36b66"
	bob    = "0x209693bc6afc0c5328ba36faf03c514ef312287c"
	usdc   = "eip155:84532/erc20:0x036cbd53842c5426634e7929541ec2318f3dcf7e"
	eurc   = "eip155:84532/erc20:0x808456652fdb597867f38412077a9182bf77359f"
	dollar = int64(1_000_000) // $1.00 of a 6-decimal asset
	ttl    = 10 * time.Minute
)

// ledgerEnv is one subtest's database: handle a does most writes, handle b
// reads them back, so every check also shows the two handles see one
// database.
type ledgerEnv struct {
	t     *testing.T
	ctx   context.Context
	clock *clock
	a, b  store.Ledger
	books *Books
}

func (e *ledgerEnv) audit() {
	e.t.Helper()
	for _, err := range e.books.Check(e.ctx) {
		e.t.Error(err)
	}
}

func (e *ledgerEnv) credit(opID, owner, asset string, amount int64) store.Entry {
	e.t.Helper()
	e.books.Track(owner, asset)
	got, err := e.a.Credit(e.ctx, opID, owner, asset, amount)
	if err != nil {
		e.t.Fatalf("Credit(%q, %s, %d): %v", opID, owner, amount, err)
	}
	return got
}

func holdReq(id, owner string, amount int64) store.HoldRequest {
	return store.HoldRequest{ID: id, Owner: owner, Asset: usdc, Amount: amount, TTL: ttl}
}

func (e *ledgerEnv) hold(r store.HoldRequest) store.Hold {
	e.t.Helper()
	e.books.Track(r.Owner, r.Asset)
	got, err := e.a.Hold(e.ctx, r)
	if err != nil {
		e.t.Fatalf("Hold(%+v): %v", r, err)
	}
	return got
}

func (e *ledgerEnv) capture(id string, actual int64) (store.Hold, store.Entry) {
	e.t.Helper()
	h, en, err := e.a.Capture(e.ctx, id, actual)
	if err != nil {
		e.t.Fatalf("Capture(%q, %d): %v", id, actual, err)
	}
	return h, en
}

func (e *ledgerEnv) release(id string) (store.Hold, store.Entry) {
	e.t.Helper()
	h, en, err := e.a.Release(e.ctx, id)
	if err != nil {
		e.t.Fatalf("Release(%q): %v", id, err)
	}
	return h, en
}

func (e *ledgerEnv) holdRecord(id string) store.Hold {
	e.t.Helper()
	h, err := e.b.HoldRecord(e.ctx, id)
	if err != nil {
		e.t.Fatalf("HoldRecord(%q): %v", id, err)
	}
	return h
}

func (e *ledgerEnv) balance(account, asset string) int64 {
	e.t.Helper()
	got, err := e.b.Balance(e.ctx, account, asset)
	if err != nil {
		e.t.Fatalf("Balance(%q): %v", account, err)
	}
	return got
}

// balances fails the test unless alice's user and held balances in usdc
// are user and held.
func (e *ledgerEnv) balances(user, held int64) {
	e.t.Helper()
	if got := e.balance(store.UserAccount(alice), usdc); got != user {
		e.t.Errorf("alice's user balance = %d, want %d", got, user)
	}
	if got := e.balance(store.HeldAccount(alice), usdc); got != held {
		e.t.Errorf("alice's held balance = %d, want %d", got, held)
	}
}

func (e *ledgerEnv) keyUsage(keyID string, period time.Duration) store.KeyUsage {
	e.t.Helper()
	u, err := e.b.KeyUsage(e.ctx, keyID, usdc, period)
	if err != nil {
		e.t.Fatalf("KeyUsage(%q): %v", keyID, err)
	}
	return u
}

// entries returns every entry of account in asset, paging by 2 so that
// paging is exercised too.
func (e *ledgerEnv) entries(account, asset string) []store.Entry {
	e.t.Helper()
	var out []store.Entry
	var after int64
	for {
		page, err := e.b.Entries(e.ctx, account, asset, after, 2)
		if err != nil {
			e.t.Fatalf("Entries(%q, %d): %v", account, after, err)
		}
		out = append(out, page...)
		if len(page) < 2 {
			return out
		}
		after = page[len(page)-1].Seq
	}
}

// refused fails the test unless err is an *store.InsufficientError with
// these numbers.
func (e *ledgerEnv) refused(what string, err error, want store.InsufficientError) {
	e.t.Helper()
	var ie *store.InsufficientError
	if !errors.As(err, &ie) || !errors.Is(err, store.ErrInsufficient) {
		e.t.Errorf("%s: error %v, want an *InsufficientError matching ErrInsufficient", what, err)
		return
	}
	if *ie != want {
		e.t.Errorf("%s: %+v, want %+v", what, *ie, want)
	}
}

// noSentinel fails the test unless err is an error that matches none of the
// store's sentinels.
func noSentinel(t *testing.T, what string, err error) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: no error", what)
		return
	}
	for _, s := range []error{store.ErrNotFound, store.ErrConflict, store.ErrInsufficient, store.ErrFenced} {
		if errors.Is(err, s) {
			t.Errorf("%s: error %v matches %v, want no sentinel", what, err, s)
		}
	}
}

func testLedgerCredit(e *ledgerEnv) {
	now := e.clock.Now()
	got := e.credit("eip155:84532:0xabc:0", alice, usdc, 5*dollar)
	want := store.Entry{
		Seq: got.Seq, OpID: "eip155:84532:0xabc:0", Kind: store.EntryCredit, Asset: usdc, Owner: alice,
		Postings: []store.Posting{
			{Account: store.AccountDeposits, Delta: -5 * dollar},
			{Account: store.UserAccount(alice), Delta: 5 * dollar, BalanceAfter: 5 * dollar},
		},
		CreatedAt: now,
	}
	if diff := cmp.Diff(want, got); diff != "" || got.Seq <= 0 {
		e.t.Errorf("Credit() entry (-want +got):\n%s (seq %d)", diff, got.Seq)
	}
	e.clock.Advance(time.Second)
	second := e.credit("eip155:84532:0xabc:1", alice, usdc, store.MaxAmount)
	if second.Seq <= got.Seq {
		e.t.Errorf("second entry's Seq %d is not above the first's %d", second.Seq, got.Seq)
	}
	e.balances(5*dollar+store.MaxAmount, 0)
	if got := e.balance(store.AccountDeposits, usdc); got != -5*dollar-store.MaxAmount {
		e.t.Errorf("deposits = %d", got)
	}
	// Other assets and owners are other accounts.
	e.books.Track(bob, eurc)
	for _, acct := range []struct{ account, asset string }{
		{store.UserAccount(alice), eurc}, {store.UserAccount(bob), usdc}, {store.AccountDeposits, eurc}, {store.AccountRevenue, usdc},
	} {
		if got := e.balance(acct.account, acct.asset); got != 0 {
			e.t.Errorf("Balance(%s, %s) = %d, want 0", acct.account, acct.asset, got)
		}
	}
	if diff := cmp.Diff([]store.Entry{got, second}, e.entries(store.UserAccount(alice), usdc)); diff != "" {
		e.t.Errorf("statement (-want +got):\n%s", diff)
	}
}

func testLedgerCreditIdempotent(e *ledgerEnv) {
	first := e.credit("top-up-1", alice, usdc, dollar)
	e.clock.Advance(time.Minute)
	for _, h := range []store.Ledger{e.a, e.b} {
		again, err := h.Credit(e.ctx, "top-up-1", alice, usdc, dollar)
		if err != nil {
			e.t.Fatalf("Credit() again: %v", err)
		}
		if diff := cmp.Diff(first, again); diff != "" {
			e.t.Errorf("Credit() again returned another entry (-first +again):\n%s", diff)
		}
	}
	e.books.Track(bob, eurc)
	for name, args := range map[string]struct {
		owner, asset string
		amount       int64
	}{
		"other amount": {alice, usdc, dollar + 1},
		"other owner":  {bob, usdc, dollar},
		"other asset":  {alice, eurc, dollar},
	} {
		if _, err := e.a.Credit(e.ctx, "top-up-1", args.owner, args.asset, args.amount); !errors.Is(err, store.ErrConflict) {
			e.t.Errorf("%s: Credit() = %v, want ErrConflict", name, err)
		}
	}
	e.balances(dollar, 0)
	if got := e.balance(store.UserAccount(bob), usdc); got != 0 {
		e.t.Errorf("bob's balance = %d after a conflicting credit", got)
	}
	// A hold with the credit's id is another operation.
	e.hold(holdReq("top-up-1", alice, 10))
}

func testLedgerCreditInvalid(e *ledgerEnv) {
	e.books.Track(alice, usdc)
	long := strings.Repeat("x", 129)
	for _, tc := range []struct {
		name, opID, owner, asset string
		amount                   int64
	}{
		{"empty op id", "", alice, usdc, 1},
		{"op id with a space", "a b", alice, usdc, 1},
		{"op id with a newline", "a\nb", alice, usdc, 1},
		{"op id not ASCII", "café", alice, usdc, 1},
		{"op id too long", long, alice, usdc, 1},
		{"empty owner", "op", "", usdc, 1},
		{"upper-case owner", "op", strings.ToUpper(alice), usdc, 1},
		{"owner with a colon", "op", "user:" + alice, usdc, 1},
		{"owner too long", "op", long, usdc, 1},
		{"empty asset", "op", alice, "", 1},
		{"upper-case asset", "op", alice, strings.ToUpper(usdc), 1},
		{"asset with a space", "op", alice, "eip155:1 usdc", 1},
		{"zero amount", "op", alice, usdc, 0},
		{"negative amount", "op", alice, usdc, -1},
		{"amount over the bound", "op", alice, usdc, store.MaxAmount + 1},
		{"int64 max", "op", alice, usdc, math.MaxInt64},
	} {
		_, err := e.a.Credit(e.ctx, tc.opID, tc.owner, tc.asset, tc.amount)
		noSentinel(e.t, tc.name, err)
	}
	e.balances(0, 0)
	if got := e.entries(store.AccountDeposits, usdc); len(got) != 0 {
		e.t.Errorf("invalid credits wrote %d entries", len(got))
	}
}

func testLedgerHold(e *ledgerEnv) {
	e.credit("c1", alice, usdc, dollar)
	e.clock.Advance(time.Second)
	now := e.clock.Now()
	r := holdReq("req-1", alice, 300_000)
	r.TTL = ttl + 500*time.Microsecond // rounded up to the millisecond
	got := e.hold(r)
	want := store.Hold{
		ID: "req-1", Owner: alice, Asset: usdc, Amount: 300_000, State: store.HoldHeld,
		ExpiresAt: now.Add(ttl + time.Millisecond), CreatedAt: now, Seq: got.Seq,
	}
	if diff := cmp.Diff(want, got); diff != "" || got.Seq <= 0 {
		e.t.Errorf("Hold() (-want +got):\n%s (seq %d)", diff, got.Seq)
	}
	if diff := cmp.Diff(got, e.holdRecord("req-1")); diff != "" {
		e.t.Errorf("HoldRecord() differs from Hold()'s answer (-hold +record):\n%s", diff)
	}
	e.balances(700_000, 300_000)
	stmt := e.entries(store.HeldAccount(alice), usdc)
	wantEntry := store.Entry{
		Seq: got.Seq, OpID: "req-1", Kind: store.EntryHold, Asset: usdc, Owner: alice, HoldID: "req-1",
		Postings: []store.Posting{
			{Account: store.HeldAccount(alice), Delta: 300_000, BalanceAfter: 300_000},
			{Account: store.UserAccount(alice), Delta: -300_000, BalanceAfter: 700_000},
		},
		CreatedAt: now,
	}
	if diff := cmp.Diff([]store.Entry{wantEntry}, stmt); diff != "" {
		e.t.Errorf("held statement (-want +got):\n%s", diff)
	}
	// Exactly the balance fits.
	e.hold(holdReq("req-2", alice, 700_000))
	e.balances(0, dollar)
	if _, err := e.b.HoldRecord(e.ctx, "absent"); !errors.Is(err, store.ErrNotFound) {
		e.t.Errorf("HoldRecord(absent) = %v, want ErrNotFound", err)
	}
}

func testLedgerHoldInsufficient(e *ledgerEnv) {
	e.books.Track(bob, usdc)
	_, err := e.a.Hold(e.ctx, holdReq("h0", bob, 1))
	e.refused("hold on an account never credited", err, store.InsufficientError{Limit: store.LimitBalance, Available: 0, Requested: 1})

	e.credit("c1", alice, usdc, dollar)
	e.hold(holdReq("h1", alice, 600_000))
	_, err = e.a.Hold(e.ctx, holdReq("h2", alice, 400_001))
	e.refused("hold one unit over the balance", err, store.InsufficientError{Limit: store.LimitBalance, Available: 400_000, Requested: 400_001})
	_, err = e.b.Hold(e.ctx, holdReq("h2", alice, store.MaxAmount))
	e.refused("hold of MaxAmount", err, store.InsufficientError{Limit: store.LimitBalance, Available: 400_000, Requested: store.MaxAmount})
	e.balances(400_000, 600_000)
	if _, err := e.b.HoldRecord(e.ctx, "h2"); !errors.Is(err, store.ErrNotFound) {
		e.t.Errorf("a refused hold left a record: %v", err)
	}
	// A refused id is free: the same id succeeds once the balance covers it.
	e.credit("c2", alice, usdc, 1)
	e.hold(holdReq("h2", alice, 400_001))
	e.balances(0, dollar+1)
}

func testLedgerHoldIdempotent(e *ledgerEnv) {
	e.credit("c1", alice, usdc, dollar)
	r := holdReq("h1", alice, 600_000)
	r.Key = &store.KeyLimits{ID: "key-1", TotalCap: store.NoCap, PeriodCap: store.NoCap}
	first := e.hold(r)
	e.clock.Advance(time.Second)
	// Again, through both handles, with other TTL and caps: the first hold.
	again := r
	again.TTL = time.Hour
	again.Key = &store.KeyLimits{ID: "key-1", TotalCap: 1, PeriodCap: 1, Period: time.Hour}
	for _, h := range []store.Ledger{e.a, e.b} {
		got, err := h.Hold(e.ctx, again)
		if err != nil {
			e.t.Fatalf("Hold() again: %v", err)
		}
		if diff := cmp.Diff(first, got); diff != "" {
			e.t.Errorf("Hold() again (-first +again):\n%s", diff)
		}
	}
	e.balances(400_000, 600_000)
	if u := e.keyUsage("key-1", 0); u.Held != 600_000 {
		e.t.Errorf("key held %d after a repeated hold, want 600000", u.Held)
	}
	// Other arguments under the same id conflict, even when they would fit.
	e.books.Track(bob, usdc)
	for name, mod := range map[string]func(*store.HoldRequest){
		"other amount": func(r *store.HoldRequest) { r.Amount = 1 },
		"other owner":  func(r *store.HoldRequest) { r.Owner = bob },
		"other asset":  func(r *store.HoldRequest) { r.Asset = eurc },
		"other key": func(r *store.HoldRequest) {
			r.Key = &store.KeyLimits{ID: "key-2", TotalCap: store.NoCap, PeriodCap: store.NoCap}
		},
		"no key": func(r *store.HoldRequest) { r.Key = nil },
	} {
		c := r
		mod(&c)
		if _, err := e.a.Hold(e.ctx, c); !errors.Is(err, store.ErrConflict) {
			e.t.Errorf("%s: Hold() = %v, want ErrConflict", name, err)
		}
	}
	// Once captured, the repeat returns the hold as it now stands, though the
	// balance no longer covers it.
	captured, _ := e.capture("h1", 600_000)
	got, err := e.a.Hold(e.ctx, r)
	if err != nil {
		e.t.Fatalf("Hold() after capture: %v", err)
	}
	if diff := cmp.Diff(captured, got); diff != "" {
		e.t.Errorf("Hold() after capture (-captured +got):\n%s", diff)
	}
	e.balances(400_000, 0)
}

func testLedgerHoldZero(e *ledgerEnv) {
	e.books.Track(alice, usdc)
	h := e.hold(holdReq("free", alice, 0))
	if h.Amount != 0 || h.State != store.HoldHeld {
		e.t.Errorf("zero hold = %+v", h)
	}
	// Nothing was held, so any actual cost is the operator's loss.
	h, en := e.capture("free", 42)
	if h.Captured != 0 || h.Loss != 42 {
		e.t.Errorf("capture of a zero hold = %+v, want captured 0, loss 42", h)
	}
	want := []store.Posting{
		{Account: store.HeldAccount(alice)},
		{Account: store.AccountLoss, Delta: -42},
		{Account: store.AccountRevenue, Delta: 42},
		{Account: store.UserAccount(alice)},
	}
	if diff := cmp.Diff(want, en.Postings); diff != "" {
		e.t.Errorf("postings (-want +got):\n%s", diff)
	}
	e.balances(0, 0)
}

func testLedgerHoldInvalid(e *ledgerEnv) {
	e.credit("c1", alice, usdc, dollar)
	key := func(total, period int64, p time.Duration) *store.KeyLimits {
		return &store.KeyLimits{ID: "k", TotalCap: total, PeriodCap: period, Period: p}
	}
	for name, mod := range map[string]func(*store.HoldRequest){
		"empty id":              func(r *store.HoldRequest) { r.ID = "" },
		"id with a space":       func(r *store.HoldRequest) { r.ID = "req 1" },
		"id too long":           func(r *store.HoldRequest) { r.ID = strings.Repeat("i", 129) },
		"bad owner":             func(r *store.HoldRequest) { r.Owner = "0xABC" },
		"bad asset":             func(r *store.HoldRequest) { r.Asset = "usdc!" },
		"negative amount":       func(r *store.HoldRequest) { r.Amount = -1 },
		"amount over the bound": func(r *store.HoldRequest) { r.Amount = store.MaxAmount + 1 },
		"zero TTL":              func(r *store.HoldRequest) { r.TTL = 0 },
		"negative TTL":          func(r *store.HoldRequest) { r.TTL = -time.Second },
		"TTL over the bound":    func(r *store.HoldRequest) { r.TTL = store.MaxHoldTTL + time.Millisecond },
		"empty key id":          func(r *store.HoldRequest) { r.Key = key(store.NoCap, store.NoCap, 0); r.Key.ID = "" },
		"negative total cap":    func(r *store.HoldRequest) { r.Key = key(-1, store.NoCap, 0) },
		"negative period cap":   func(r *store.HoldRequest) { r.Key = key(store.NoCap, -1, time.Hour) },
		"period cap, no period": func(r *store.HoldRequest) { r.Key = key(store.NoCap, 10, 0) },
		"sub-ms period":         func(r *store.HoldRequest) { r.Key = key(store.NoCap, 10, time.Hour+time.Microsecond) },
		"period too long":       func(r *store.HoldRequest) { r.Key = key(store.NoCap, 10, store.MaxKeyPeriod+time.Millisecond) },
	} {
		r := holdReq("h", alice, 1)
		mod(&r)
		_, err := e.a.Hold(e.ctx, r)
		noSentinel(e.t, name, err)
	}
	e.balances(dollar, 0)
	// The bounds themselves are valid.
	r := holdReq("h", alice, dollar)
	r.TTL = store.MaxHoldTTL
	r.Key = key(store.NoCap, store.NoCap, 0)
	e.hold(r)
	e.books.Track(bob, usdc)
	r = holdReq("h2", bob, 0)
	r.Key = key(0, 0, store.MaxKeyPeriod)
	r.Key.ID = "k2"
	e.hold(r)
}

func testLedgerKeyTotalCap(e *ledgerEnv) {
	e.credit("c1", alice, usdc, 10*dollar)
	key := &store.KeyLimits{ID: "sk-1", TotalCap: dollar, PeriodCap: store.NoCap}
	r := func(id string, amount int64) store.HoldRequest {
		r := holdReq(id, alice, amount)
		r.Key = key
		return r
	}
	e.hold(r("h1", 400_000))
	e.hold(r("h2", 400_000))
	_, err := e.a.Hold(e.ctx, r("h3", 400_000))
	e.refused("third hold over the cap", err, store.InsufficientError{Limit: store.LimitKeyTotal, Available: 200_000, Requested: 400_000})
	// A capture turns held into spent for what it billed; the rest is free.
	e.capture("h1", 100_000)
	if got, want := e.keyUsage("sk-1", 0), (store.KeyUsage{KeyID: "sk-1", Asset: usdc, Held: 400_000, Spent: 100_000}); got != want {
		e.t.Errorf("KeyUsage() = %+v, want %+v", got, want)
	}
	e.hold(r("h3", 400_000))
	_, err = e.a.Hold(e.ctx, r("h4", 100_001))
	e.refused("hold one over the cap", err, store.InsufficientError{Limit: store.LimitKeyTotal, Available: 100_000, Requested: 100_001})
	e.hold(r("h4", 100_000))
	// A release frees the whole hold; a shortfall bills no more than the hold.
	e.release("h2")
	e.capture("h3", 5*dollar)
	if got, want := e.keyUsage("sk-1", 0), (store.KeyUsage{KeyID: "sk-1", Asset: usdc, Held: 100_000, Spent: 500_000}); got != want {
		e.t.Errorf("KeyUsage() = %+v, want %+v", got, want)
	}
	// The cap is per key: the owner's other key and keyless holds are free.
	other := holdReq("h5", alice, 2*dollar)
	other.Key = &store.KeyLimits{ID: "sk-2", TotalCap: 3 * dollar, PeriodCap: store.NoCap}
	e.hold(other)
	e.hold(holdReq("h6", alice, 2*dollar))
	// A lower cap on the next call binds at once.
	lower := r("h7", 1)
	lower.Key = &store.KeyLimits{ID: "sk-1", TotalCap: 600_000, PeriodCap: store.NoCap}
	_, err = e.a.Hold(e.ctx, lower)
	e.refused("hold under a lowered cap", err, store.InsufficientError{Limit: store.LimitKeyTotal, Available: 0, Requested: 1})
	// The balance is checked first.
	big := r("h8", 20*dollar)
	_, err = e.a.Hold(e.ctx, big)
	e.refused("hold over balance and cap", err, store.InsufficientError{Limit: store.LimitBalance, Available: 10*dollar - 500_000 - 100_000 - 4*dollar, Requested: 20 * dollar})
	if u := e.keyUsage("unknown-key", time.Hour); u.Held != 0 || u.Spent != 0 || u.PeriodHeld != 0 || u.PeriodSpent != 0 {
		e.t.Errorf("KeyUsage(unknown) = %+v, want zero usage", u)
	}
}

func testLedgerKeyPeriodCap(e *ledgerEnv) {
	e.credit("c1", alice, usdc, 10*dollar)
	const period = time.Hour
	// Move to ten minutes before the end of a window.
	now := e.clock.Now()
	windowStart := store.PeriodStart(now, period)
	e.clock.Advance(windowStart.Add(50 * time.Minute).Sub(now))
	key := &store.KeyLimits{ID: "sk-1", TotalCap: 2 * dollar, PeriodCap: 500_000, Period: period}
	r := func(id string, amount int64) store.HoldRequest {
		r := holdReq(id, alice, amount)
		r.Key = key
		return r
	}
	h1 := e.hold(r("h1", 300_000))
	if h1.KeyPeriod != period || !h1.KeyPeriodStart.Equal(windowStart) {
		e.t.Errorf("hold window = %v from %v, want %v from %v", h1.KeyPeriod, h1.KeyPeriodStart, period, windowStart)
	}
	_, err := e.a.Hold(e.ctx, r("h2", 300_000))
	e.refused("hold over the period cap", err, store.InsufficientError{Limit: store.LimitKeyPeriod, Available: 200_000, Requested: 300_000})
	e.hold(r("h2", 200_000))
	// The next window starts empty; h1, captured in it, still counts in its own.
	e.clock.Advance(10 * time.Minute)
	e.capture("h1", 250_000)
	u := e.keyUsage("sk-1", period)
	want := store.KeyUsage{KeyID: "sk-1", Asset: usdc, Held: 200_000, Spent: 250_000, Period: period, PeriodStart: windowStart.Add(period)}
	if diff := cmp.Diff(want, u); diff != "" {
		e.t.Errorf("KeyUsage() in the next window (-want +got):\n%s", diff)
	}
	e.hold(r("h3", 500_000))
	_, err = e.a.Hold(e.ctx, r("h4", 1))
	e.refused("hold over the next window's cap", err, store.InsufficientError{Limit: store.LimitKeyPeriod, Available: 0, Requested: 1})
	// The total cap binds across windows: 250k spent + 700k held so far.
	for range 2 {
		e.clock.Advance(period)
		e.hold(r(fmt.Sprintf("h-%d", e.clock.Now().Unix()), 500_000))
	}
	e.clock.Advance(period)
	_, err = e.a.Hold(e.ctx, r("h5", 500_000))
	e.refused("hold over the total cap", err, store.InsufficientError{Limit: store.LimitKeyTotal, Available: 2*dollar - 250_000 - 1_700_000, Requested: 500_000})
	// Windows of another length are other windows.
	if u := e.keyUsage("sk-1", 2*period); u.PeriodHeld != 0 || u.PeriodSpent != 0 {
		e.t.Errorf("usage in a window of another length = %+v, want none", u)
	}
}

func testLedgerKeyZeroCap(e *ledgerEnv) {
	e.credit("c1", alice, usdc, dollar)
	for _, k := range []store.KeyLimits{
		{ID: "total", TotalCap: 0, PeriodCap: store.NoCap},
		{ID: "period", TotalCap: store.NoCap, PeriodCap: 0, Period: time.Hour},
	} {
		r := holdReq("h-"+k.ID, alice, 1)
		r.Key = &k
		_, err := e.a.Hold(e.ctx, r)
		limit := store.LimitKeyTotal
		if k.ID == "period" {
			limit = store.LimitKeyPeriod
		}
		e.refused("hold through a zero cap", err, store.InsufficientError{Limit: limit, Available: 0, Requested: 1})
	}
	e.balances(dollar, 0)
}

func testLedgerCapture(e *ledgerEnv) {
	e.credit("c1", alice, usdc, dollar)
	r := holdReq("h1", alice, 300_000)
	r.Key = &store.KeyLimits{ID: "sk-1", TotalCap: dollar, PeriodCap: dollar, Period: 24 * time.Hour}
	held := e.hold(r)
	e.clock.Advance(3 * time.Second)
	now := e.clock.Now()
	h, en := e.capture("h1", 120_000)
	want := held
	want.State, want.Actual, want.Captured = store.HoldCaptured, 120_000, 120_000
	want.ResolvedAt, want.ResolvedSeq = now, en.Seq
	if diff := cmp.Diff(want, h); diff != "" {
		e.t.Errorf("Capture() hold (-want +got):\n%s", diff)
	}
	wantEntry := store.Entry{
		Seq: en.Seq, OpID: "h1", Kind: store.EntryCapture, Asset: usdc, Owner: alice, HoldID: "h1",
		Postings: []store.Posting{
			{Account: store.HeldAccount(alice), Delta: -300_000, BalanceAfter: 0},
			{Account: store.AccountRevenue, Delta: 120_000},
			{Account: store.UserAccount(alice), Delta: 180_000, BalanceAfter: 880_000},
		},
		CreatedAt: now,
	}
	if diff := cmp.Diff(wantEntry, en); diff != "" || en.Seq <= held.Seq {
		e.t.Errorf("Capture() entry (-want +got):\n%s (hold seq %d)", diff, held.Seq)
	}
	if diff := cmp.Diff(h, e.holdRecord("h1")); diff != "" {
		e.t.Errorf("HoldRecord() after capture (-capture +record):\n%s", diff)
	}
	e.balances(880_000, 0)
	if got := e.balance(store.AccountRevenue, usdc); got != 120_000 {
		e.t.Errorf("revenue = %d, want 120000", got)
	}
	u := e.keyUsage("sk-1", 24*time.Hour)
	if u.Held != 0 || u.Spent != 120_000 || u.PeriodHeld != 0 || u.PeriodSpent != 120_000 {
		e.t.Errorf("KeyUsage() = %+v, want 120000 spent and nothing held", u)
	}
	if _, _, err := e.a.Capture(e.ctx, "absent", 1); !errors.Is(err, store.ErrNotFound) {
		e.t.Errorf("Capture(absent) = %v, want ErrNotFound", err)
	}
	if _, _, err := e.a.Release(e.ctx, "absent"); !errors.Is(err, store.ErrNotFound) {
		e.t.Errorf("Release(absent) = %v, want ErrNotFound", err)
	}
}

func testLedgerCaptureShortfall(e *ledgerEnv) {
	e.credit("c1", alice, usdc, dollar)
	r := holdReq("h1", alice, 300_000)
	r.Key = &store.KeyLimits{ID: "sk-1", TotalCap: dollar, PeriodCap: store.NoCap}
	e.hold(r)
	h, en := e.capture("h1", 450_000)
	if h.Captured != 300_000 || h.Loss != 150_000 || h.Actual != 450_000 {
		e.t.Errorf("Capture() over the hold = %+v, want captured 300000, loss 150000", h)
	}
	want := []store.Posting{
		{Account: store.HeldAccount(alice), Delta: -300_000, BalanceAfter: 0},
		{Account: store.AccountLoss, Delta: -150_000},
		{Account: store.AccountRevenue, Delta: 450_000},
		{Account: store.UserAccount(alice), Delta: 0, BalanceAfter: 700_000},
	}
	if diff := cmp.Diff(want, en.Postings); diff != "" {
		e.t.Errorf("postings (-want +got):\n%s", diff)
	}
	// Never billed more than the hold.
	e.balances(700_000, 0)
	if got := e.balance(store.AccountLoss, usdc); got != -150_000 {
		e.t.Errorf("loss = %d, want -150000", got)
	}
	if u := e.keyUsage("sk-1", 0); u.Spent != 300_000 || u.Held != 0 {
		e.t.Errorf("KeyUsage() = %+v, want 300000 spent", u)
	}
}

func testLedgerCaptureZero(e *ledgerEnv) {
	e.credit("c1", alice, usdc, dollar)
	e.hold(holdReq("h1", alice, 300_000))
	h, en := e.capture("h1", 0)
	if h.State != store.HoldCaptured || h.Captured != 0 || h.Loss != 0 {
		e.t.Errorf("Capture(0) = %+v", h)
	}
	want := []store.Posting{
		{Account: store.HeldAccount(alice), Delta: -300_000, BalanceAfter: 0},
		{Account: store.UserAccount(alice), Delta: 300_000, BalanceAfter: dollar},
	}
	if diff := cmp.Diff(want, en.Postings); diff != "" {
		e.t.Errorf("postings (-want +got):\n%s", diff)
	}
	e.balances(dollar, 0)
}

func testLedgerCaptureIdempotent(e *ledgerEnv) {
	e.credit("c1", alice, usdc, dollar)
	e.hold(holdReq("h1", alice, 300_000))
	h, en := e.capture("h1", 100_000)
	e.clock.Advance(time.Minute)
	for _, l := range []store.Ledger{e.a, e.b} {
		h2, en2, err := l.Capture(e.ctx, "h1", 100_000)
		if err != nil {
			e.t.Fatalf("Capture() again: %v", err)
		}
		if diff := cmp.Diff(h, h2); diff != "" {
			e.t.Errorf("Capture() again, hold (-first +again):\n%s", diff)
		}
		if diff := cmp.Diff(en, en2); diff != "" {
			e.t.Errorf("Capture() again, entry (-first +again):\n%s", diff)
		}
	}
	if _, _, err := e.a.Capture(e.ctx, "h1", 100_001); !errors.Is(err, store.ErrConflict) {
		e.t.Errorf("Capture() with another amount = %v, want ErrConflict", err)
	}
	if _, _, err := e.a.Release(e.ctx, "h1"); !errors.Is(err, store.ErrConflict) {
		e.t.Errorf("Release() of a captured hold = %v, want ErrConflict", err)
	}
	e.balances(900_000, 0)
}

func testLedgerCaptureInvalid(e *ledgerEnv) {
	e.credit("c1", alice, usdc, dollar)
	e.hold(holdReq("h1", alice, 300_000))
	for name, tc := range map[string]struct {
		id     string
		actual int64
	}{
		"negative":       {"h1", -1},
		"over the bound": {"h1", store.MaxAmount + 1},
		"empty id":       {"", 1},
		"id with a tab":  {"h\t1", 1},
	} {
		_, _, err := e.a.Capture(e.ctx, tc.id, tc.actual)
		noSentinel(e.t, "Capture: "+name, err)
	}
	_, _, err := e.a.Release(e.ctx, "")
	noSentinel(e.t, "Release: empty id", err)
	if h := e.holdRecord("h1"); h.State != store.HoldHeld {
		e.t.Errorf("hold is %s after invalid captures", h.State)
	}
	// The bound itself is valid: all of it above the hold is loss.
	if h, _ := e.capture("h1", store.MaxAmount); h.Loss != store.MaxAmount-300_000 {
		e.t.Errorf("Capture(MaxAmount) = %+v", h)
	}
}

func testLedgerRelease(e *ledgerEnv) {
	e.credit("c1", alice, usdc, dollar)
	r := holdReq("h1", alice, 300_000)
	r.Key = &store.KeyLimits{ID: "sk-1", TotalCap: dollar, PeriodCap: dollar, Period: time.Hour}
	held := e.hold(r)
	e.clock.Advance(time.Second)
	h, en := e.release("h1")
	want := held
	want.State, want.ResolvedAt, want.ResolvedSeq = store.HoldReleased, e.clock.Now(), en.Seq
	if diff := cmp.Diff(want, h); diff != "" {
		e.t.Errorf("Release() hold (-want +got):\n%s", diff)
	}
	wantEntry := store.Entry{
		Seq: en.Seq, OpID: "h1", Kind: store.EntryRelease, Asset: usdc, Owner: alice, HoldID: "h1",
		Postings: []store.Posting{
			{Account: store.HeldAccount(alice), Delta: -300_000, BalanceAfter: 0},
			{Account: store.UserAccount(alice), Delta: 300_000, BalanceAfter: dollar},
		},
		CreatedAt: e.clock.Now(),
	}
	if diff := cmp.Diff(wantEntry, en); diff != "" {
		e.t.Errorf("Release() entry (-want +got):\n%s", diff)
	}
	e.balances(dollar, 0)
	if u := e.keyUsage("sk-1", time.Hour); u.Held != 0 || u.Spent != 0 || u.PeriodHeld != 0 || u.PeriodSpent != 0 {
		e.t.Errorf("KeyUsage() after release = %+v, want zero", u)
	}
}

func testLedgerReleaseIdempotent(e *ledgerEnv) {
	e.credit("c1", alice, usdc, dollar)
	e.hold(holdReq("h1", alice, 300_000))
	h, en := e.release("h1")
	e.clock.Advance(time.Minute)
	for _, l := range []store.Ledger{e.a, e.b} {
		h2, en2, err := l.Release(e.ctx, "h1")
		if err != nil {
			e.t.Fatalf("Release() again: %v", err)
		}
		if diff := cmp.Diff(h, h2); diff != "" {
			e.t.Errorf("Release() again, hold (-first +again):\n%s", diff)
		}
		if diff := cmp.Diff(en, en2); diff != "" {
			e.t.Errorf("Release() again, entry (-first +again):\n%s", diff)
		}
	}
	for _, actual := range []int64{0, 1} {
		if _, _, err := e.a.Capture(e.ctx, "h1", actual); !errors.Is(err, store.ErrConflict) {
			e.t.Errorf("Capture(%d) of a released hold = %v, want ErrConflict", actual, err)
		}
	}
	e.balances(dollar, 0)
}

func (e *ledgerEnv) sweep(h store.Ledger, limit int) int {
	e.t.Helper()
	return e.sweepLost(h, limit).Released
}

func (e *ledgerEnv) sweepLost(h store.Ledger, limit int) store.Swept {
	e.t.Helper()
	swept, err := h.ReleaseExpiredHolds(e.ctx, limit)
	if err != nil {
		e.t.Fatalf("ReleaseExpiredHolds(%d): %v", limit, err)
	}
	return swept
}

func testLedgerExpiry(e *ledgerEnv) {
	e.credit("c1", alice, usdc, dollar)
	r := holdReq("h1", alice, 300_000)
	r.TTL = time.Minute
	r.Key = &store.KeyLimits{ID: "sk-1", TotalCap: dollar, PeriodCap: store.NoCap}
	e.hold(r)
	e.clock.Advance(time.Minute - time.Millisecond)
	if n := e.sweep(e.b, 10); n != 0 {
		e.t.Errorf("sweep before the TTL released %d holds", n)
	}
	e.clock.Advance(time.Millisecond)
	if n := e.sweep(e.b, 10); n != 1 {
		e.t.Errorf("sweep at the TTL released %d holds, want 1", n)
	}
	if n := e.sweep(e.a, 10); n != 0 {
		e.t.Errorf("second sweep released %d holds, want 0", n)
	}
	h := e.holdRecord("h1")
	if h.State != store.HoldExpired || !h.ResolvedAt.Equal(e.clock.Now()) || h.ResolvedSeq <= h.Seq {
		e.t.Errorf("swept hold = %+v", h)
	}
	e.balances(dollar, 0)
	if u := e.keyUsage("sk-1", 0); u.Held != 0 || u.Spent != 0 {
		e.t.Errorf("KeyUsage() after expiry = %+v", u)
	}
	stmt := e.entries(store.UserAccount(alice), usdc)
	if last := stmt[len(stmt)-1]; last.Kind != store.EntryExpire || last.Seq != h.ResolvedSeq || last.HoldID != "h1" {
		e.t.Errorf("last entry = %+v, want the expiry of h1", last)
	}
	// A late release gets the expiry (nothing was billed either way); a late
	// capture conflicts: the hold is gone, the D16 shortfall is the caller's
	// to report.
	rh, ren, err := e.a.Release(e.ctx, "h1")
	if err != nil || rh.State != store.HoldExpired || ren.Kind != store.EntryExpire {
		e.t.Errorf("Release() after expiry = %+v, %+v, %v; want the expiry", rh, ren, err)
	}
	if _, _, err := e.a.Capture(e.ctx, "h1", 1); !errors.Is(err, store.ErrConflict) {
		e.t.Errorf("Capture() after expiry = %v, want ErrConflict", err)
	}
}

func testLedgerExpiryOrder(e *ledgerEnv) {
	e.credit("c1", alice, usdc, dollar)
	// Five holds expiring at different times, placed out of order.
	ttls := map[string]time.Duration{"h3": 3 * time.Minute, "h1": time.Minute, "h5": 5 * time.Minute, "h2": 2 * time.Minute, "h4": 4 * time.Minute}
	for _, id := range []string{"h3", "h1", "h5", "h2", "h4"} {
		r := holdReq(id, alice, 1000)
		r.TTL = ttls[id]
		e.hold(r)
	}
	e.hold(holdReq("late", alice, 1000)) // ttl: never expires in this test
	e.clock.Advance(5 * time.Minute)
	var order []string
	for _, want := range []int{2, 2, 1, 0} {
		if n := e.sweep(e.a, 2); n != want {
			e.t.Errorf("sweep released %d, want %d", n, want)
		}
		for _, id := range []string{"h1", "h2", "h3", "h4", "h5"} {
			if h := e.holdRecord(id); h.State == store.HoldExpired && !slices.Contains(order, id) {
				order = append(order, id)
			}
		}
	}
	// Sweeps of 2: {h1,h2}, {h3,h4}, {h5}: soonest expired first.
	if diff := cmp.Diff([]string{"h1", "h2", "h3", "h4", "h5"}, order); diff != "" {
		e.t.Errorf("expiry order (-want +got):\n%s", diff)
	}
	if h := e.holdRecord("late"); h.State != store.HoldHeld {
		e.t.Errorf("a hold before its TTL was swept: %+v", h)
	}
	for _, limit := range []int{0, -1} {
		_, err := e.a.ReleaseExpiredHolds(e.ctx, limit)
		noSentinel(e.t, fmt.Sprintf("ReleaseExpiredHolds(%d)", limit), err)
	}
}

func testLedgerResolveBeforeSweep(e *ledgerEnv) {
	// Past its TTL but not swept, a hold can still be captured or released:
	// only the sweep ends it, as only a takeover ends a lease.
	e.credit("c1", alice, usdc, dollar)
	for _, id := range []string{"cap", "rel"} {
		r := holdReq(id, alice, 100_000)
		r.TTL = time.Minute
		e.hold(r)
	}
	e.clock.Advance(time.Hour)
	e.capture("cap", 50_000)
	e.release("rel")
	if n := e.sweep(e.b, 10); n != 0 {
		e.t.Errorf("sweep released %d resolved holds", n)
	}
	e.balances(950_000, 0)
}

func testLedgerStatement(e *ledgerEnv) {
	e.credit("a1", alice, usdc, dollar)
	e.credit("b1", bob, usdc, dollar)
	e.credit("a-eur", alice, eurc, dollar)
	e.hold(holdReq("ha", alice, 100))
	e.hold(holdReq("hb", bob, 100))
	e.capture("ha", 60)
	e.release("hb")
	e.credit("a2", alice, usdc, 5)
	stmt := e.entries(store.UserAccount(alice), usdc)
	var got []string
	for _, en := range stmt {
		got = append(got, fmt.Sprintf("%s %s", en.Kind, en.OpID))
		if en.Owner != alice || en.Asset != usdc {
			e.t.Errorf("alice's usdc statement has %+v", en)
		}
	}
	if diff := cmp.Diff([]string{"credit a1", "hold ha", "capture ha", "credit a2"}, got); diff != "" {
		e.t.Errorf("statement (-want +got):\n%s", diff)
	}
	// Paging from the middle; a seq past the end is an empty page.
	page, err := e.b.Entries(e.ctx, store.UserAccount(alice), usdc, stmt[1].Seq, 10)
	if err != nil {
		e.t.Fatal(err)
	}
	if diff := cmp.Diff(stmt[2:], page); diff != "" {
		e.t.Errorf("page after seq %d (-want +got):\n%s", stmt[1].Seq, diff)
	}
	if page, err := e.b.Entries(e.ctx, store.UserAccount(alice), usdc, stmt[3].Seq, 10); err != nil || len(page) != 0 {
		e.t.Errorf("page past the end = %+v, %v", page, err)
	}
	// System accounts have statements too.
	rev := e.entries(store.AccountRevenue, usdc)
	if len(rev) != 1 || rev[0].OpID != "ha" || rev[0].Kind != store.EntryCapture {
		e.t.Errorf("revenue statement = %+v", rev)
	}
	if dep := e.entries(store.AccountDeposits, usdc); len(dep) != 3 {
		e.t.Errorf("deposits statement has %d entries, want 3", len(dep))
	}
	if eur := e.entries(store.UserAccount(alice), eurc); len(eur) != 1 || eur[0].OpID != "a-eur" {
		e.t.Errorf("alice's eurc statement = %+v", eur)
	}
	e.books.Track(alice, eurc)
}

func testLedgerReadsInvalid(e *ledgerEnv) {
	e.books.Track(alice, usdc)
	for _, account := range []string{"", "user:", "user:0xABC", "held:" + alice + ":x", "wallet:" + alice, "Revenue", "deposits ", alice} {
		_, err := e.b.Balance(e.ctx, account, usdc)
		noSentinel(e.t, fmt.Sprintf("Balance(%q)", account), err)
		_, err = e.b.Entries(e.ctx, account, usdc, 0, 10)
		noSentinel(e.t, fmt.Sprintf("Entries(%q)", account), err)
	}
	_, err := e.b.Balance(e.ctx, store.UserAccount(alice), "USDC")
	noSentinel(e.t, "Balance(bad asset)", err)
	for _, limit := range []int{0, -1, store.MaxEntries + 1} {
		_, err := e.b.Entries(e.ctx, store.UserAccount(alice), usdc, 0, limit)
		noSentinel(e.t, fmt.Sprintf("Entries(limit %d)", limit), err)
	}
	if got, err := e.b.Entries(e.ctx, store.UserAccount(alice), usdc, -5, store.MaxEntries); err != nil || len(got) != 0 {
		e.t.Errorf("Entries(empty account) = %+v, %v", got, err)
	}
	for name, tc := range map[string]struct {
		key, asset string
		period     time.Duration
	}{
		"empty key":     {"", usdc, 0},
		"bad asset":     {"k", "", 0},
		"neg period":    {"k", usdc, -time.Hour},
		"sub-ms period": {"k", usdc, time.Microsecond},
	} {
		_, err := e.b.KeyUsage(e.ctx, tc.key, tc.asset, tc.period)
		noSentinel(e.t, "KeyUsage: "+name, err)
	}
	for _, id := range []string{"", "a b", strings.Repeat("x", 129)} {
		_, err := e.b.HoldRecord(e.ctx, id)
		noSentinel(e.t, fmt.Sprintf("HoldRecord(%q)", id), err)
	}
}

// raceHolds places n holds at once, alternating handles, with amounts from
// amount(i), and returns which succeeded; every failure must be an
// *InsufficientError with limit.
func (e *ledgerEnv) raceHolds(n int, limit store.Limit, req func(i int) store.HoldRequest) []bool {
	e.t.Helper()
	type result struct {
		i   int
		err error
	}
	startGun := make(chan struct{})
	results := make(chan result, n)
	var wg sync.WaitGroup
	for i := range n {
		h := e.a
		if i%2 == 1 {
			h = e.b
		}
		wg.Go(func() {
			<-startGun
			_, err := h.Hold(e.ctx, req(i))
			results <- result{i, err}
		})
	}
	close(startGun)
	wg.Wait()
	close(results)
	ok := make([]bool, n)
	for r := range results {
		var ie *store.InsufficientError
		switch {
		case r.err == nil:
			ok[r.i] = true
		case errors.As(r.err, &ie) && ie.Limit == limit:
			if ie.Requested != req(r.i).Amount || ie.Available >= ie.Requested {
				e.t.Errorf("hold %d refused with %+v", r.i, *ie)
			}
		default:
			e.t.Errorf("hold %d: %v, want nil or an InsufficientError on %s", r.i, r.err, limit)
		}
	}
	return ok
}

// checkRace checks that the successful holds fit within capacity and that
// no refused hold would have fit at the end: holds only take, so a refusal
// that fits the final remainder was a refusal that fit when it was made.
func (e *ledgerEnv) checkRace(what string, capacity int64, ok []bool, amount func(i int) int64) int64 {
	e.t.Helper()
	var sum int64
	wins := 0
	for i, won := range ok {
		if won {
			sum += amount(i)
			wins++
		}
	}
	if sum > capacity {
		e.t.Errorf("%s: %d holds took %d, over the %d available", what, wins, sum, capacity)
	}
	for i, won := range ok {
		if !won && amount(i) <= capacity-sum {
			e.t.Errorf("%s: hold %d of %d was refused though %d remained", what, i, amount(i), capacity-sum)
		}
	}
	e.t.Logf("%s: %d of %d holds won, %d of %d taken", what, wins, len(ok), sum, capacity)
	return sum
}

// raceAmounts are the amounts of a race: 1 to 20,000 units (up to 2 cents),
// seeded, so most but not all of 200 holds fit in a dollar.
func raceAmounts(n int, seed uint64) []int64 {
	r := rand.New(rand.NewPCG(seed, 0)) //nolint:gosec // G404: seeded, reproducible amounts
	out := make([]int64, n)
	for i := range out {
		out[i] = 1 + r.Int64N(20_000)
	}
	return out
}

const raceHolds = 200

func testLedgerRaceBalance(e *ledgerEnv) {
	e.credit("c1", alice, usdc, dollar)
	amounts := raceAmounts(raceHolds, 1)
	amount := func(i int) int64 { return amounts[i] }
	ok := e.raceHolds(raceHolds, store.LimitBalance, func(i int) store.HoldRequest {
		return holdReq(fmt.Sprintf("h%d", i), alice, amounts[i])
	})
	sum := e.checkRace("balance", dollar, ok, amount)
	e.balances(dollar-sum, sum)
}

func testLedgerRaceKeyTotal(e *ledgerEnv) {
	e.credit("c1", alice, usdc, 100*dollar)
	amounts := raceAmounts(raceHolds, 2)
	ok := e.raceHolds(raceHolds, store.LimitKeyTotal, func(i int) store.HoldRequest {
		r := holdReq(fmt.Sprintf("h%d", i), alice, amounts[i])
		r.Key = &store.KeyLimits{ID: "sk-1", TotalCap: dollar, PeriodCap: store.NoCap}
		return r
	})
	sum := e.checkRace("key total cap", dollar, ok, func(i int) int64 { return amounts[i] })
	if u := e.keyUsage("sk-1", 0); u.Held != sum {
		e.t.Errorf("key held %d, want %d", u.Held, sum)
	}
}

func testLedgerRaceKeyPeriod(e *ledgerEnv) {
	e.credit("c1", alice, usdc, 100*dollar)
	amounts := raceAmounts(raceHolds, 3)
	ok := e.raceHolds(raceHolds, store.LimitKeyPeriod, func(i int) store.HoldRequest {
		r := holdReq(fmt.Sprintf("h%d", i), alice, amounts[i])
		r.Key = &store.KeyLimits{ID: "sk-1", TotalCap: 50 * dollar, PeriodCap: dollar, Period: 24 * time.Hour}
		return r
	})
	sum := e.checkRace("key period cap", dollar, ok, func(i int) int64 { return amounts[i] })
	if u := e.keyUsage("sk-1", 24*time.Hour); u.PeriodHeld != sum || u.Held != sum {
		e.t.Errorf("key usage %+v, want %d held", u, sum)
	}
}

func testLedgerRaceSameOp(e *ledgerEnv) {
	// Every caller of one operation id gets the one result; it is applied once.
	type out struct {
		H   store.Hold
		En  store.Entry
		Err error
	}
	race := func(what string, fn func(l store.Ledger) out) {
		e.t.Helper()
		startGun := make(chan struct{})
		res := make([]out, workers)
		var wg sync.WaitGroup
		for i := range workers {
			l := e.a
			if i%2 == 1 {
				l = e.b
			}
			wg.Go(func() {
				<-startGun
				res[i] = fn(l)
			})
		}
		close(startGun)
		wg.Wait()
		for i, r := range res {
			if r.Err != nil {
				e.t.Fatalf("%s: worker %d: %v", what, i, r.Err)
			}
			if diff := cmp.Diff(res[0], r); diff != "" {
				e.t.Errorf("%s: worker %d got another result (-worker 0 +worker %d):\n%s", what, i, i, diff)
			}
		}
	}
	e.books.Track(alice, usdc)
	race("Credit", func(l store.Ledger) out {
		en, err := l.Credit(e.ctx, "top-up", alice, usdc, dollar)
		return out{En: en, Err: err}
	})
	race("Hold", func(l store.Ledger) out {
		h, err := l.Hold(e.ctx, holdReq("h1", alice, 400_000))
		return out{H: h, Err: err}
	})
	e.balances(600_000, 400_000)
	race("Capture", func(l store.Ledger) out {
		h, en, err := l.Capture(e.ctx, "h1", 100_000)
		return out{h, en, err}
	})
	e.balances(900_000, 0)
	e.hold(holdReq("h2", alice, 400_000))
	race("Release", func(l store.Ledger) out {
		h, en, err := l.Release(e.ctx, "h2")
		return out{h, en, err}
	})
	e.balances(900_000, 0)
	e.hold(holdReq("h3", alice, 400_000))
	e.clock.Advance(ttl)
	race("ReleaseExpiredHolds", func(l store.Ledger) out {
		_, err := l.ReleaseExpiredHolds(e.ctx, 10)
		return out{Err: err}
	})
	if h := e.holdRecord("h3"); h.State != store.HoldExpired {
		e.t.Errorf("h3 = %+v, want expired", h)
	}
	e.balances(900_000, 0)
	if stmt := e.entries(store.UserAccount(alice), usdc); len(stmt) != 7 {
		e.t.Errorf("statement has %d entries, want 7 (credit, 3 holds, 3 resolutions)", len(stmt))
	}
}

func testLedgerRaceCaptureRelease(e *ledgerEnv) {
	// For each hold, its capture and its release race through different
	// handles: exactly one takes effect, the other is ErrConflict.
	e.credit("c1", alice, usdc, dollar)
	const holds = workers
	for k := range holds {
		e.hold(holdReq(fmt.Sprintf("h%d", k), alice, 10_000))
	}
	type out struct {
		capture bool
		err     error
	}
	res := make([]out, 2*holds)
	startGun := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 2 * holds {
		l := e.a
		if i%2 == 1 {
			l = e.b
		}
		capture := (i+i/2)%2 == 0 // alternate which handle captures
		wg.Go(func() {
			<-startGun
			id := fmt.Sprintf("h%d", i/2)
			var err error
			if capture {
				_, _, err = l.Capture(e.ctx, id, 7_000)
			} else {
				_, _, err = l.Release(e.ctx, id)
			}
			res[i] = out{capture, err}
		})
	}
	close(startGun)
	wg.Wait()
	var captured int64
	for k := range holds {
		x, y := res[2*k], res[2*k+1]
		switch {
		case x.err == nil && errors.Is(y.err, store.ErrConflict), y.err == nil && errors.Is(x.err, store.ErrConflict):
		default:
			e.t.Errorf("h%d: %v and %v, want one success and one ErrConflict", k, x.err, y.err)
		}
		h := e.holdRecord(fmt.Sprintf("h%d", k))
		if h.State == store.HoldCaptured {
			captured += h.Captured
		}
	}
	e.balances(dollar-captured, 0)
	if got := e.balance(store.AccountRevenue, usdc); got != captured {
		e.t.Errorf("revenue = %d, want %d", got, captured)
	}
}
