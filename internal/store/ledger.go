package store

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
)

// The credits ledger (D16): double-entry and append-only. Every operation
// writes one journal Entry, identified by an operation id and numbered by a
// ledger sequence, whose Postings sum to zero in the entry's asset. Nothing
// is ever updated or deleted in the journal; holds and balances are state
// derived from it and kept in the same transaction.
//
// Accounts, per asset:
//
//	user:<owner>  what the owner may spend; never negative
//	held:<owner>  reserved for the owner's calls in flight; never negative
//	deposits      the outside world: top-ups come from here; never positive
//	revenue       captured charges; never negative
//	loss          the operator's loss (D16: the part of a call's cost above
//	              its hold, never billed); never positive
//
// user and held balances are materialised, so that a hold is one conditional
// update of one row, atomic across processes and replicas. The three system
// accounts are not: every call would update the same row and queue behind the
// others' commits, so their balances are the sums of their postings.
//
// Notes for backends with row locks (PostgreSQL): take an owner's rows in one
// order in every operation (user, held, key total, key period), so two
// operations never deadlock; draw an entry's Seq after its balance rows are
// locked, so the entries of one owner account get increasing seqs in commit
// order; lock a hold's row before resolving it, so a capture and a release
// racing for it end with one resolution and one ErrConflict;
// and let two concurrent calls with one operation id end with one entry, both
// answered with it (or the second with ErrConflict if its arguments differ).

// Ledger sentinels.
var (
	// ErrConflict means an operation id was used before with other arguments,
	// or a hold was already resolved another way (captured for another amount,
	// captured when a release was asked, released or expired when a capture
	// was asked). Retrying the same call cannot succeed.
	ErrConflict = errors.New("store: conflict")
	// ErrInsufficient means a hold was refused because the owner's balance or
	// a key's cap is below its amount. It always comes as an
	// *InsufficientError carrying the numbers.
	ErrInsufficient = errors.New("store: insufficient balance or cap")
)

// MaxAmount bounds every single amount the ledger takes: a credit, a hold, a
// capture. 10^15 atomic units is a billion dollars of 6-decimal USDC; the
// bound keeps every sum a backend computes inside int64, so SQL can do the
// arithmetic in both dialects.
const MaxAmount int64 = 1_000_000_000_000_000

// NoCap is a key cap that never binds. A zero cap is a cap of zero: the key
// may spend nothing.
const NoCap int64 = math.MaxInt64

// MaxHoldTTL bounds how long a hold may stay open before the sweep releases it.
const MaxHoldTTL = 7 * 24 * time.Hour

// MaxKeyPeriod bounds a key's cap period.
const MaxKeyPeriod = 366 * 24 * time.Hour

// MaxEntries bounds the limit of one Entries call.
const MaxEntries = 1000

// System accounts.
const (
	AccountDeposits = "deposits"
	AccountRevenue  = "revenue"
	AccountLoss     = "loss"
)

// UserAccount is the account of what owner may spend.
func UserAccount(owner string) string { return "user:" + owner }

// HeldAccount is the account of what is reserved for owner's calls in flight.
func HeldAccount(owner string) string { return "held:" + owner }

// EntryKind says which operation wrote an entry.
type EntryKind string

// Entry kinds. A hold entry moves the hold's amount from user to held; exactly
// one capture, release or expire entry later moves it out again.
const (
	EntryCredit  EntryKind = "credit"  // deposits -> user: a top-up
	EntryHold    EntryKind = "hold"    // user -> held
	EntryCapture EntryKind = "capture" // held -> revenue (the charge) and user (the rest); loss for a shortfall
	EntryRelease EntryKind = "release" // held -> user: nothing delivered
	EntryExpire  EntryKind = "expire"  // held -> user: the sweep released a hold past its TTL
)

// Posting is one account's change in an entry.
type Posting struct {
	Account string
	Delta   int64
	// BalanceAfter is the account's balance right after the entry, for user
	// and held accounts; it is 0 for the system accounts, whose balances are
	// not kept (see Ledger.Balance).
	BalanceAfter int64
}

// Entry is one journal entry: what one operation did.
type Entry struct {
	// Seq numbers the entry. Seqs are unique in a store and may have gaps.
	// The entries of one user or held account have increasing seqs in the
	// order they were committed, so a reader paging through such an account
	// with Entries (after the last seq it saw) never misses one. The system
	// accounts give no such promise while writes are in flight (a backend
	// with concurrent writers may commit a lower seq later): read their
	// statements for reports, or once writes are quiet.
	Seq int64
	// OpID is the operation id: the caller's for a credit, the hold's id for
	// a hold and for the capture, release or expire that resolves it.
	OpID  string
	Kind  EntryKind
	Asset string
	// Owner is the owner whose accounts the entry touches; every entry
	// touches exactly one owner.
	Owner  string
	HoldID string // for hold, capture, release and expire entries
	// Postings sum to zero. They include the owner's user and held accounts
	// whenever the entry is about a hold (with a zero delta where nothing
	// moved) and a system account only where its delta is not zero; they are
	// in account order.
	Postings  []Posting
	CreatedAt time.Time
}

// HoldState is where a hold stands.
type HoldState string

// Hold states. HoldHeld is the only open one; the others are terminal.
const (
	HoldHeld     HoldState = "held"
	HoldCaptured HoldState = "captured"
	HoldReleased HoldState = "released"
	HoldExpired  HoldState = "expired"
)

// Hold is the reservation of the maximum cost of one call (D16).
type Hold struct {
	ID     string
	Owner  string
	Asset  string
	Amount int64
	// Actual is the cost the capture was asked for; Captured the part billed
	// to the owner (never above Amount) and Loss the rest (Actual - Captured),
	// recorded as the operator's loss. All three are 0 unless HoldCaptured.
	Actual, Captured, Loss int64
	KeyID                  string // empty when the hold is not drawn through a key
	// KeyPeriod and KeyPeriodStart name the key's cap window the hold counts
	// against; zero when the key has no period cap.
	KeyPeriod      time.Duration
	KeyPeriodStart time.Time
	State          HoldState
	// ExpiresAt is when the sweep may release the hold, by the store's clock.
	// Until the sweep does, the hold may still be captured or released.
	ExpiresAt time.Time
	CreatedAt time.Time
	Seq       int64 // the hold entry
	// ResolvedAt and ResolvedSeq are the time and the entry of the capture,
	// release or expiry; zero while HoldHeld.
	ResolvedAt  time.Time
	ResolvedSeq int64
	// Lease says the hold is a credit lease. Drawn is what its recorded
	// draws charged so far and DrawnCost their full cost, saturating at
	// MaxAmount (the part above it is loss no book needs); once the lease
	// is captured, Captured is Drawn and Actual DrawnCost.
	Lease            bool
	Drawn, DrawnCost int64
	// Issued is a lease's issued mark (see Leases.Issue): the highest
	// position its replica may hand to a call. 0 for a call's hold.
	Issued int64
}

// KeyLimits are the caps of the API key a hold is drawn through.
// The store keeps what each key has spent and holds, per asset, and checks
// the caps in the same atomic step as the balance, so concurrent holds through
// one key on any number of replicas never exceed them.
type KeyLimits struct {
	// ID is the key's public id, never the secret key: it is stored with
	// every hold and may appear in errors and logs.
	ID string
	// TotalCap bounds spent + held over the key's life; NoCap for none.
	TotalCap int64
	// PeriodCap bounds spent + held within one period; NoCap for none.
	// Periods are windows of length Period aligned to the Unix epoch by the
	// store's clock (a day is a UTC day); a hold counts against the window it
	// was placed in, even if captured in the next.
	PeriodCap int64
	Period    time.Duration // > 0 and whole milliseconds unless PeriodCap is NoCap
}

// HoldRequest asks for a hold.
type HoldRequest struct {
	// ID identifies the hold and is its operation id: the request id.
	ID     string
	Owner  string
	Asset  string
	Amount int64 // 0..MaxAmount
	// TTL is how long the hold stays before the sweep may release it: longer
	// than the call can take. 0 < TTL <= MaxHoldTTL.
	TTL time.Duration
	Key *KeyLimits // nil when the call is not drawn through a key
	// Lease makes the hold a credit lease (see Leases): calls draw on it
	// with Leases.Draw and it ends with Leases.CloseLease, never with
	// Capture or Release. It is compared on a repeated ID.
	Lease bool
	// Issued is a lease's first issued mark (see Leases.Issue), placed
	// with the lease so that its first calls need no other write:
	// 0..MaxLeasePosition, and 0 for a call's hold. It is not compared on
	// a repeated ID: the hold returned carries the mark as it stands.
	Issued int64
}

// Limit names what refused a hold.
type Limit string

// Limits.
const (
	LimitBalance   Limit = "balance"    // the owner's balance
	LimitKeyTotal  Limit = "key_total"  // the key's total cap
	LimitKeyPeriod Limit = "key_period" // the key's per-period cap
)

// InsufficientError is a refused hold, with the numbers for the error the
// buyer sees. It matches ErrInsufficient under errors.Is.
type InsufficientError struct {
	Limit     Limit
	Available int64 // the balance, or what remains of the cap
	Requested int64 // the hold's amount
}

func (e *InsufficientError) Error() string {
	return fmt.Sprintf("insufficient %s: %d available, %d requested", e.Limit, e.Available, e.Requested)
}

// Is makes errors.Is(err, ErrInsufficient) true.
func (e *InsufficientError) Is(target error) bool { return target == ErrInsufficient }

// KeyUsage is what a key has spent and holds in one asset.
type KeyUsage struct {
	KeyID string
	Asset string
	// Held is the sum of the key's open holds, Spent the sum of what its
	// captured holds billed, over the key's life.
	Held, Spent int64
	// The same within the current window of Period (zero when Period is 0).
	Period                  time.Duration
	PeriodStart             time.Time
	PeriodHeld, PeriodSpent int64
}

// Ledger is the credits ledger. Every operation that writes is idempotent by
// its operation id: repeating it with the same arguments writes nothing and
// returns the first result (for Hold, the hold as it now stands); with other
// arguments it fails with ErrConflict. A call that failed wrote nothing, so it
// may be repeated. Invalid arguments (an empty or malformed id, owner, asset
// or account, an amount outside its bounds) fail with an error that is no
// sentinel, before anything is read.
//
// Ids (operation, hold, key) are 1 to 128 printable ASCII characters without
// spaces; owners 1 to 128 lower-case ASCII letters and digits (a lower-case
// hex address with its 0x); assets 1 to 128 of lower-case letters, digits and
// ":/._-" (a CAIP-19 asset id).
type Ledger interface {
	// Credit moves amount (1..MaxAmount) from deposits to owner's user account:
	// a top-up. opID is the settlement's reference (network, transaction,
	// log index), so a replayed top-up credits once. A credit that would take
	// the owner's user + held past int64 fails with an error that is no
	// sentinel: then no later release can overflow the user balance.
	Credit(ctx context.Context, opID, owner, asset string, amount int64) (Entry, error)
	// Hold moves r.Amount from the owner's user account to its held account,
	// if the balance covers it and, with r.Key, if the key's spent + held
	// plus the amount stays within both caps; otherwise it fails with an
	// *InsufficientError (the balance is checked first, then the total cap,
	// then the period cap) and changes nothing. A repeated r.ID with the same
	// owner, asset, amount and key id returns the hold as it now stands, even
	// if the balance no longer covers it; TTL and caps are not compared.
	Hold(ctx context.Context, r HoldRequest) (Hold, error)
	// Capture resolves an open hold with the call's actual cost (0..MaxAmount):
	// min(actual, amount) moves from held to revenue and the rest of the hold
	// back to user. The part of actual above the hold is never billed to the
	// owner: it moves from loss to revenue, so revenue counts every call at
	// its cost and loss (negative) what the operator gave away (D16). The
	// key's held becomes spent for what was billed. Capturing a captured hold with the same actual
	// returns the first result; anything else on a resolved hold is
	// ErrConflict. ErrNotFound if there is no such hold.
	Capture(ctx context.Context, holdID string, actual int64) (Hold, Entry, error)
	// Release resolves an open hold with nothing billed: the whole amount
	// moves back to user. Releasing a released or expired hold returns its
	// resolution (the outcome is the same); a captured one is ErrConflict.
	// ErrNotFound if there is no such hold.
	Release(ctx context.Context, holdID string) (Hold, Entry, error)
	// ReleaseExpiredHolds releases, as EntryExpire, up to limit (> 0) open
	// holds whose ExpiresAt has come by the store's clock, soonest expired
	// first, and returns how many it released (an expired lease is ended
	// as CloseLease ends it), with the calls each lease it ended may have
	// lost (Swept.Lost). Call it periodically, and again at once while it
	// returns limit. On an error it returns what it had ended before it.
	ReleaseExpiredHolds(ctx context.Context, limit int) (Swept, error)
	// HoldRecord returns the hold with id holdID, or ErrNotFound.
	HoldRecord(ctx context.Context, holdID string) (Hold, error)
	// Balance returns an account's balance in asset: 0 for an account that
	// never had a posting. account is a system account or UserAccount or
	// HeldAccount of a valid owner.
	Balance(ctx context.Context, account, asset string) (int64, error)
	// Entries returns up to limit (1..MaxEntries) entries that post to account
	// in asset with a Seq above afterSeq, in Seq order, each with all its
	// postings: an account statement, paged by the last Seq seen.
	Entries(ctx context.Context, account, asset string, afterSeq int64, limit int) ([]Entry, error)
	// KeyUsage returns what keyID has spent and holds in asset, with the
	// window of period that contains the store's now (no window when period
	// is 0). An unknown key has zero usage.
	KeyUsage(ctx context.Context, keyID, asset string, period time.Duration) (KeyUsage, error)
}

// maxIDLen bounds ids, owners and assets.
const maxIDLen = 128

// ValidID reports whether s is a valid operation, hold or key id.
func ValidID(s string) bool {
	return validChars(s, func(c byte) bool { return c > ' ' && c < 0x7f })
}

// ValidOwner reports whether s is a valid owner.
func ValidOwner(s string) bool {
	return validChars(s, func(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' })
}

// ValidAsset reports whether s is a valid asset.
func ValidAsset(s string) bool {
	return validChars(s, func(c byte) bool {
		return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || strings.IndexByte(":/._-", c) >= 0
	})
}

func validChars(s string, ok func(byte) bool) bool {
	if s == "" || len(s) > maxIDLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !ok(s[i]) {
			return false
		}
	}
	return true
}

// ParseAccount splits a ledger account name into its kind ("user", "held" or
// a system account's name) and owner (empty for a system account), and
// reports whether it is a valid account.
func ParseAccount(account string) (kind, owner string, ok bool) {
	switch account {
	case AccountDeposits, AccountRevenue, AccountLoss:
		return account, "", true
	}
	kind, owner, found := strings.Cut(account, ":")
	if !found || (kind != "user" && kind != "held") || !ValidOwner(owner) {
		return "", "", false
	}
	return kind, owner, true
}

// ValidateAccount checks an account and an asset, as Ledger.Balance and
// Ledger.Entries take them, and returns the account's kind (see
// ParseAccount).
func ValidateAccount(account, asset string) (kind string, err error) {
	kind, _, ok := ParseAccount(account)
	if !ok {
		return "", errors.New("invalid account")
	}
	if !ValidAsset(asset) {
		return "", errors.New("invalid asset")
	}
	return kind, nil
}

// ValidateEntries checks the arguments of Ledger.Entries.
func ValidateEntries(account, asset string, limit int) error {
	if _, err := ValidateAccount(account, asset); err != nil {
		return err
	}
	if limit <= 0 || limit > MaxEntries {
		return fmt.Errorf("limit %d is outside 1..%d", limit, MaxEntries)
	}
	return nil
}

// ValidateKeyUsage checks the arguments of Ledger.KeyUsage: a period of 0
// asks for no window.
func ValidateKeyUsage(keyID, asset string, period time.Duration) error {
	switch {
	case !ValidID(keyID):
		return errors.New("invalid key id")
	case !ValidAsset(asset):
		return errors.New("invalid asset")
	case period != 0:
		return ValidatePeriod(period)
	}
	return nil
}

// ValidateCredit checks the arguments of Ledger.Credit, for every backend.
func ValidateCredit(opID, owner, asset string, amount int64) error {
	switch {
	case !ValidID(opID):
		return errors.New("invalid operation id")
	case !ValidOwner(owner):
		return errors.New("invalid owner")
	case !ValidAsset(asset):
		return errors.New("invalid asset")
	case amount <= 0 || amount > MaxAmount:
		return fmt.Errorf("amount %d is outside 1..%d", amount, MaxAmount)
	}
	return nil
}

// Validate checks a hold request, for every backend.
func (r HoldRequest) Validate() error {
	switch {
	case !ValidID(r.ID):
		return errors.New("invalid hold id")
	case !ValidOwner(r.Owner):
		return errors.New("invalid owner")
	case !ValidAsset(r.Asset):
		return errors.New("invalid asset")
	case r.Amount < 0 || r.Amount > MaxAmount:
		return fmt.Errorf("amount %d is outside 0..%d", r.Amount, MaxAmount)
	case r.TTL <= 0 || r.TTL > MaxHoldTTL:
		return fmt.Errorf("hold TTL %v is outside (0, %v]", r.TTL, MaxHoldTTL)
	case r.Issued < 0 || r.Issued > MaxLeasePosition:
		return fmt.Errorf("issued mark %d is outside 0..%d", r.Issued, int64(MaxLeasePosition))
	case r.Issued != 0 && !r.Lease:
		return errors.New("a call's hold has no issued mark")
	case r.Key == nil:
		return nil
	case !ValidID(r.Key.ID):
		return errors.New("invalid key id")
	case r.Key.TotalCap < 0 || r.Key.PeriodCap < 0:
		return errors.New("negative key cap")
	case r.Key.PeriodCap != NoCap:
		return ValidatePeriod(r.Key.Period)
	}
	return nil
}

// HoldArgs is the canonical text of what identifies a hold request, to
// tell a repeated Hold (the same) from a conflicting one (another): owner,
// asset, amount, key id, and whether it is a lease. TTL and caps are not in
// it (see Ledger.Hold).
func HoldArgs(r HoldRequest) string {
	keyID := ""
	if r.Key != nil {
		keyID = r.Key.ID
	}
	args := fmt.Sprintf("owner=%s asset=%s amount=%d key=%s", r.Owner, r.Asset, r.Amount, keyID)
	if r.Lease {
		args += " lease"
	}
	return args
}

// CapturedOf is what the captured hold h billed: what its draws charged for
// a lease, min(Actual, Amount) for a call's hold.
func CapturedOf(h Hold) int64 {
	if h.Lease {
		return h.Drawn
	}
	return min(h.Actual, h.Amount)
}

// ValidatePeriod checks a key's cap period: positive, whole milliseconds, at
// most MaxKeyPeriod.
func ValidatePeriod(p time.Duration) error {
	if p <= 0 || p > MaxKeyPeriod || p%time.Millisecond != 0 {
		return fmt.Errorf("key period %v is not whole milliseconds in (0, %v]", p, MaxKeyPeriod)
	}
	return nil
}

// ValidateActual checks the arguments of Ledger.Capture.
func ValidateActual(holdID string, actual int64) error {
	if !ValidID(holdID) {
		return errors.New("invalid hold id")
	}
	if actual < 0 || actual > MaxAmount {
		return fmt.Errorf("actual cost %d is outside 0..%d", actual, MaxAmount)
	}
	return nil
}

// PeriodStart returns the start of the window of period (> 0) that contains
// t: windows are aligned to the Unix epoch, to the millisecond.
func PeriodStart(t time.Time, period time.Duration) time.Time {
	p := period.Milliseconds()
	ms := t.UnixMilli()
	start := ms - ms%p
	if ms%p < 0 {
		start -= p
	}
	return time.UnixMilli(start).UTC()
}
