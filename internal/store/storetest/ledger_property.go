package storetest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/llm4agents/llm4agents/internal/store"
)

// Books audits a ledger through its public reads only, so it runs against
// any backend: it pages every tracked account's statement (incrementally: it
// remembers the last seq it saw per account) and checks that
//   - every entry's postings sum to zero, are in account order, touch only
//     the entry's owner and the system accounts, and name a valid kind;
//   - an entry read through several accounts is the same entry;
//   - every operation id (per class: credit, hold, resolution) has one entry;
//   - the seqs of an account's entries increase;
//   - each user and held posting's BalanceAfter is the running sum of the
//     account's postings, and Balance equals that sum for every account
//     (materialised balances agree with the journal);
//   - user, held and revenue are never negative, deposits and loss never
//     positive, and every asset's balances sum to zero.
//
// An entry that touches an owner not tracked yet makes Check track it.
type Books struct {
	l        store.Ledger
	mu       sync.Mutex
	accounts map[bookKey]*bookAccount
	entries  map[int64]store.Entry
	ops      map[opRef]int64
}

type bookKey struct{ account, asset string }

type bookAccount struct{ after, sum int64 }

type opRef struct{ class, id string }

// NewBooks returns Books that read through l.
func NewBooks(l store.Ledger) *Books {
	return &Books{l: l, accounts: map[bookKey]*bookAccount{}, entries: map[int64]store.Entry{}, ops: map[opRef]int64{}}
}

// Track adds owner's accounts and the system accounts in asset to the audit.
func (b *Books) Track(owner, asset string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.track(owner, asset)
}

func (b *Books) track(owner, asset string) bool {
	added := false
	for _, a := range []string{store.UserAccount(owner), store.HeldAccount(owner), store.AccountDeposits, store.AccountRevenue, store.AccountLoss} {
		k := bookKey{a, asset}
		if b.accounts[k] == nil {
			b.accounts[k] = &bookAccount{}
			added = true
		}
	}
	return added
}

// Entry returns the entry seq if Check has seen it.
func (b *Books) Entry(seq int64) (store.Entry, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	e, ok := b.entries[seq]
	return e, ok
}

// Len is the number of entries Check has seen.
func (b *Books) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.entries)
}

// Balances returns the balance of every tracked account as Check last
// computed it.
func (b *Books) Balances() map[string]int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := map[string]int64{}
	for k, a := range b.accounts {
		out[k.account+" "+k.asset] = a.sum
	}
	return out
}

// Check reads what is new and returns every violation it finds.
func (b *Books) Check(ctx context.Context) []error {
	b.mu.Lock()
	defer b.mu.Unlock()
	var errs []error
	for pass := 0; ; pass++ {
		added := false
		keys := slices.SortedFunc(maps.Keys(b.accounts), func(x, y bookKey) int {
			if x.asset != y.asset {
				return cmpStrings(x.asset, y.asset)
			}
			return cmpStrings(x.account, y.account)
		})
		for _, k := range keys {
			more, err := b.read(ctx, k)
			errs = append(errs, err...)
			added = added || more
		}
		if !added || pass > 10 {
			break
		}
	}
	totals := map[string]int64{}
	for k, a := range b.accounts {
		got, err := b.l.Balance(ctx, k.account, k.asset)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("Balance(%s, %s): %w", k.account, k.asset, err))
		case got != a.sum:
			errs = append(errs, fmt.Errorf("Balance(%s, %s) = %d, its postings sum to %d", k.account, k.asset, got, a.sum))
		}
		kind, _, _ := store.ParseAccount(k.account)
		if neg := kind == store.AccountDeposits || kind == store.AccountLoss; (neg && a.sum > 0) || (!neg && a.sum < 0) {
			errs = append(errs, fmt.Errorf("%s in %s has the balance %d, of the wrong sign", k.account, k.asset, a.sum))
		}
		totals[k.asset] += a.sum
	}
	for asset, sum := range totals {
		if sum != 0 {
			errs = append(errs, fmt.Errorf("the balances in %s sum to %d, not 0", asset, sum))
		}
	}
	return errs
}

func cmpStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// read pages the account's new entries; it reports whether it tracked a new
// owner.
func (b *Books) read(ctx context.Context, k bookKey) (bool, []error) {
	var errs []error
	a := b.accounts[k]
	added := false
	for {
		page, err := b.l.Entries(ctx, k.account, k.asset, a.after, 100)
		if err != nil {
			return added, append(errs, fmt.Errorf("Entries(%s, %s, %d): %w", k.account, k.asset, a.after, err))
		}
		for _, e := range page {
			if e.Seq <= a.after {
				errs = append(errs, fmt.Errorf("%s: entry %d after %d: seqs do not increase", k.account, e.Seq, a.after))
				continue
			}
			errs = append(errs, b.checkEntry(k, e)...)
			if b.track(e.Owner, e.Asset) {
				added = true
			}
			i := slices.IndexFunc(e.Postings, func(p store.Posting) bool { return p.Account == k.account })
			if i < 0 {
				errs = append(errs, fmt.Errorf("%s: statement has entry %d, which does not post to it", k.account, e.Seq))
			} else {
				p := e.Postings[i]
				if (p.Delta > 0 && a.sum > math.MaxInt64-p.Delta) || (p.Delta < 0 && a.sum < math.MinInt64-p.Delta) {
					errs = append(errs, fmt.Errorf("%s: sum of postings overflows at entry %d", k.account, e.Seq))
				}
				a.sum += p.Delta
				if kind, _, _ := store.ParseAccount(k.account); (kind == "user" || kind == "held") && p.BalanceAfter != a.sum {
					errs = append(errs, fmt.Errorf("%s: entry %d says the balance after is %d, its postings sum to %d", k.account, e.Seq, p.BalanceAfter, a.sum))
				}
			}
			a.after = e.Seq
		}
		if len(page) < 100 {
			return added, errs
		}
	}
}

// checkEntry checks one entry's shape, and that it is the one seen before
// under its seq and its operation id.
func (b *Books) checkEntry(k bookKey, e store.Entry) []error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("entry %d (%s %q): %s", e.Seq, e.Kind, e.OpID, fmt.Sprintf(format, args...)))
	}
	if prev, ok := b.entries[e.Seq]; ok {
		if diff := cmp.Diff(prev, e); diff != "" {
			bad("read differently through %s (-before +now):\n%s", k.account, diff)
		}
		return errs
	}
	b.entries[e.Seq] = e
	var class string
	switch e.Kind {
	case store.EntryCredit:
		class = "credit"
		if e.HoldID != "" {
			bad("a credit with a hold id")
		}
	case store.EntryHold:
		class = "hold"
	case store.EntryCapture, store.EntryRelease, store.EntryExpire:
		class = "resolve"
	default:
		bad("unknown kind")
	}
	if e.Kind != store.EntryCredit && e.HoldID != e.OpID {
		bad("hold id %q is not the op id", e.HoldID)
	}
	if seq, ok := b.ops[opRef{class, e.OpID}]; ok && seq != e.Seq {
		bad("operation already applied as entry %d", seq)
	}
	b.ops[opRef{class, e.OpID}] = e.Seq
	if e.Asset != k.asset {
		bad("asset %q in the statement of %s", e.Asset, k.asset)
	}
	var sum int64
	for i, p := range e.Postings {
		sum += p.Delta
		if i > 0 && e.Postings[i-1].Account >= p.Account {
			bad("postings not in account order")
		}
		kind, owner, ok := store.ParseAccount(p.Account)
		switch {
		case !ok:
			bad("posting to the invalid account %q", p.Account)
		case owner != "" && owner != e.Owner:
			bad("posting to %s, not of the entry's owner %s", p.Account, e.Owner)
		case owner == "" && p.BalanceAfter != 0:
			bad("system account %s with BalanceAfter %d", kind, p.BalanceAfter)
		case owner == "" && p.Delta == 0:
			bad("zero posting to %s", kind)
		}
	}
	if sum != 0 {
		bad("postings sum to %d", sum)
	}
	return errs
}

// LedgerSeedsEnv names the environment variable that sets how many seeds the
// ledger property test runs (a soak: LLM4AGENTS_LEDGER_SEEDS=500).
const LedgerSeedsEnv = "LLM4AGENTS_LEDGER_SEEDS"

// DefaultLedgerSeeds is how many seeds the property test runs by default.
const DefaultLedgerSeeds = 20

// LedgerPropertySeeds returns the number of seeds to run: DefaultLedgerSeeds,
// or LedgerSeedsEnv's value.
func LedgerPropertySeeds() (uint64, error) {
	v := os.Getenv(LedgerSeedsEnv)
	if v == "" {
		return DefaultLedgerSeeds, nil
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("%s=%q: want a positive number of seeds", LedgerSeedsEnv, v)
	}
	return n, nil
}

// The property test's shape. Four workers (two per handle) act at once in
// each round; after a round the clock moves on, the sweep runs, and every
// invariant is checked.
const (
	propWorkers = 4
	propRounds  = 15
	propMaxTTL  = 10 * time.Minute
	propPeriod  = 10 * time.Minute
)

// scenario is the world of one seed: owners, assets and keys with caps.
type scenario struct {
	owners []string
	assets []string
	keys   map[string][]store.KeyLimits // by owner
}

func newScenario(seed uint64) scenario {
	r := rand.New(rand.NewPCG(seed, math.MaxUint64)) //nolint:gosec // G404: a seeded test workload, reproducible by design
	s := scenario{
		owners: []string{alice, bob, "0x000000000000000000000000000000000000c0de"},
		assets: []string{usdc, eurc},
		keys:   map[string][]store.KeyLimits{},
	}
	for i, o := range s.owners {
		for j := range 2 {
			k := store.KeyLimits{ID: fmt.Sprintf("sk-%d-%d", i, j), TotalCap: store.NoCap, PeriodCap: store.NoCap}
			if r.IntN(4) > 0 {
				k.TotalCap = 100_000 + r.Int64N(2_000_000)
			}
			if r.IntN(2) == 0 {
				k.PeriodCap, k.Period = 50_000+r.Int64N(1_000_000), propPeriod
			}
			s.keys[o] = append(s.keys[o], k)
		}
	}
	return s
}

// opState is what the caller knows of an operation's effect.
type opState int

const (
	opDone    opState = iota // succeeded: applied exactly once
	opMaybe                  // the caller gave up (its "process" died): applied or not
	opRefused                // failed: applied not at all
)

// opRecord is one operation as attempted, with its outcome. The exported
// fields are its intent, the line a crash worker writes before it calls the
// store.
type opRecord struct {
	Op     string           `json:"op"` // credit, hold, capture, release
	ID     string           `json:"id"`
	Owner  string           `json:"owner,omitempty"`
	Asset  string           `json:"asset,omitempty"`
	Amount int64            `json:"amount,omitempty"`
	TTL    time.Duration    `json:"ttl,omitempty"`
	Key    *store.KeyLimits `json:"key,omitempty"`

	state opState
	hold  store.Hold
	entry store.Entry
}

// ledgerModel is what the test knows of the ledger: every operation
// attempted, with its outcome.
type ledgerModel struct {
	sc    scenario
	books *Books
	mu    sync.Mutex
	ops   []*opRecord
	// intents, if not nil, gets each operation's intent as a JSON line
	// before the operation is attempted (crash workers).
	intents io.Writer
	// final keeps the holds checkHolds found resolved: they never change
	// again, so they are not read again. Only the checking goroutine uses it.
	final map[string]store.Hold
}

// record writes op's intent, if the model has an intents writer. It is
// called before the operation; add, once its outcome is set.
func (m *ledgerModel) record(op *opRecord) error {
	if m.intents == nil {
		return nil
	}
	line, err := json.Marshal(op)
	if err != nil {
		return err
	}
	_, err = m.intents.Write(append(line, '\n')) // one write: a kill leaves whole lines
	return err
}

// add appends op, its outcome set, to the operations other workers see.
func (m *ledgerModel) add(op *opRecord) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.ops = append(m.ops, op)
}

// pick returns a random operation of kind op in state, or nil.
func (m *ledgerModel) pick(r *rand.Rand, op string, state opState) *opRecord {
	m.mu.Lock()
	defer m.mu.Unlock()
	var c []*opRecord
	for _, o := range m.ops {
		if o.Op == op && o.state == state {
			c = append(c, o)
		}
	}
	if len(c) == 0 {
		return nil
	}
	return c[r.IntN(len(c))]
}

// propWorker is one worker of the property test: a "process" with the holds
// it has in flight. A crash loses them, as a killed gateway would.
type propWorker struct {
	id       uint64
	m        *ledgerModel
	l        store.Ledger
	r        *rand.Rand
	n        int
	inflight []*opRecord
	crashes  int // 0: never crash (the crash workload is killed from outside)
}

// step does one random action and returns what went wrong, if anything.
func (w *propWorker) step(ctx context.Context) error {
	switch x := w.r.IntN(100); {
	case x < 22:
		return w.credit(ctx, ctx)
	case x < 55:
		return w.hold(ctx, ctx)
	case x < 75:
		return w.resolve(ctx, true)
	case x < 85:
		return w.resolve(ctx, false)
	case x < 93:
		return w.replay(ctx)
	default:
		if w.crashes == 0 {
			return w.credit(ctx, ctx)
		}
		return w.crash(ctx)
	}
}

func (w *propWorker) nextID(prefix string) string {
	w.n++
	return fmt.Sprintf("%s-%d-%d", prefix, w.id, w.n)
}

func (w *propWorker) credit(ctx, opCtx context.Context) error {
	sc := w.m.sc
	op := &opRecord{
		Op: "credit", ID: "eip155:84532:0x" + w.nextID("tx"),
		Owner:  sc.owners[w.r.IntN(len(sc.owners))],
		Asset:  sc.assets[w.r.IntN(len(sc.assets))],
		Amount: 1 + w.r.Int64N(400_000),
	}
	if w.r.IntN(40) == 0 { // now and then a larger top-up
		op.Amount = 5_000_000
	}
	if err := w.m.record(op); err != nil {
		return err
	}
	defer w.m.add(op)
	e, err := w.l.Credit(opCtx, op.ID, op.Owner, op.Asset, op.Amount)
	if err != nil {
		return w.gaveUp(ctx, op, err)
	}
	op.entry, op.state = e, opDone
	if e.OpID != op.ID || e.Kind != store.EntryCredit || e.Owner != op.Owner || e.Asset != op.Asset {
		return fmt.Errorf("Credit(%+v) = %+v", *op, e)
	}
	return nil
}

func (w *propWorker) hold(ctx, opCtx context.Context) error {
	sc := w.m.sc
	op := &opRecord{
		Op: "hold", ID: w.nextID("req"),
		Owner:  sc.owners[w.r.IntN(len(sc.owners))],
		Asset:  sc.assets[w.r.IntN(len(sc.assets))],
		Amount: w.r.Int64N(300_000),
		TTL:    time.Duration(1+w.r.Int64N(int64(propMaxTTL/time.Millisecond))) * time.Millisecond,
	}
	if w.r.IntN(10) < 6 {
		keys := sc.keys[op.Owner]
		k := keys[w.r.IntN(len(keys))]
		op.Key = &k
	}
	if err := w.m.record(op); err != nil {
		return err
	}
	defer w.m.add(op)
	h, err := w.l.Hold(opCtx, store.HoldRequest{ID: op.ID, Owner: op.Owner, Asset: op.Asset, Amount: op.Amount, TTL: op.TTL, Key: op.Key})
	var ie *store.InsufficientError
	switch {
	case errors.As(err, &ie):
		op.state = opRefused
		if ie.Requested != op.Amount || ie.Available >= op.Amount || ie.Available < 0 {
			return fmt.Errorf("Hold(%s, %d) refused with %+v", op.ID, op.Amount, *ie)
		}
		return nil
	case err != nil:
		return w.gaveUp(ctx, op, err)
	}
	op.hold, op.state = h, opDone
	if h.ID != op.ID || h.Amount != op.Amount || h.State != store.HoldHeld || h.Owner != op.Owner {
		return fmt.Errorf("Hold(%+v) = %+v", *op, h)
	}
	w.inflight = append(w.inflight, op)
	return nil
}

// resolve captures (for a random actual cost, up to one and a half times
// the hold) or releases a hold this worker has in flight.
func (w *propWorker) resolve(ctx context.Context, capture bool) error {
	if len(w.inflight) == 0 {
		return w.hold(ctx, ctx)
	}
	i := w.r.IntN(len(w.inflight))
	held := w.inflight[i]
	w.inflight = slices.Delete(w.inflight, i, i+1)
	op := &opRecord{Op: "release", ID: held.ID}
	if capture {
		op.Op, op.Amount = "capture", w.r.Int64N(held.Amount*3/2+1000)
	}
	if err := w.m.record(op); err != nil {
		return err
	}
	defer w.m.add(op)
	var h store.Hold
	var e store.Entry
	var err error
	if capture {
		h, e, err = w.l.Capture(ctx, op.ID, op.Amount)
	} else {
		h, e, err = w.l.Release(ctx, op.ID)
	}
	if errors.Is(err, store.ErrConflict) && capture {
		// The sweep got there first; only an expired hold may conflict.
		op.state = opRefused
		if cur, rerr := w.l.HoldRecord(ctx, op.ID); rerr != nil || cur.State != store.HoldExpired {
			return fmt.Errorf("Capture(%s) = %w, but the hold is %+v (%w)", op.ID, err, cur, rerr)
		}
		return nil
	}
	if err != nil {
		return w.gaveUp(ctx, op, err)
	}
	op.hold, op.entry, op.state = h, e, opDone
	switch {
	case capture && (h.State != store.HoldCaptured || h.Actual != op.Amount || h.Captured != min(op.Amount, held.Amount) || h.Loss != op.Amount-h.Captured):
		return fmt.Errorf("Capture(%s, %d) of %d = %+v", op.ID, op.Amount, held.Amount, h)
	case !capture && h.State != store.HoldReleased && h.State != store.HoldExpired:
		return fmt.Errorf("Release(%s) = %+v", op.ID, h)
	case e.Seq != h.ResolvedSeq || e.HoldID != op.ID:
		return fmt.Errorf("resolution of %s: entry %+v, hold %+v", op.ID, e, h)
	}
	return nil
}

// replay repeats a successful operation, the same or with other arguments,
// as a retrying client would.
func (w *propWorker) replay(ctx context.Context) error {
	kind := []string{"credit", "hold", "capture", "release"}[w.r.IntN(4)]
	old := w.m.pick(w.r, kind, opDone)
	if old == nil {
		return nil
	}
	conflict := w.r.IntN(4) == 0 && (kind == "credit" || kind == "hold" || kind == "capture")
	amount := old.Amount
	if conflict {
		amount++
	}
	var err error
	var h store.Hold
	var e store.Entry
	switch kind {
	case "credit":
		e, err = w.l.Credit(ctx, old.ID, old.Owner, old.Asset, amount)
		if err == nil {
			err = diffErr("credit replay", old.entry, e)
		}
	case "hold":
		h, err = w.l.Hold(ctx, store.HoldRequest{ID: old.ID, Owner: old.Owner, Asset: old.Asset, Amount: amount, TTL: time.Minute, Key: old.Key})
		if err == nil {
			err = diffErr("hold replay", holdIdentity(old.hold), holdIdentity(h))
		}
	case "capture":
		h, e, err = w.l.Capture(ctx, old.ID, amount)
		if err == nil {
			err = errors.Join(diffErr("capture replay", old.hold, h), diffErr("capture replay", old.entry, e))
		}
	case "release":
		h, e, err = w.l.Release(ctx, old.ID)
		if err == nil {
			err = errors.Join(diffErr("release replay", old.hold, h), diffErr("release replay", old.entry, e))
		}
	}
	switch {
	case conflict && !errors.Is(err, store.ErrConflict):
		return fmt.Errorf("%s %s replayed with other arguments: %w, want ErrConflict", kind, old.ID, err)
	case conflict:
		return nil
	case err != nil:
		return fmt.Errorf("%s %s replayed: %w", kind, old.ID, err)
	}
	return nil
}

// crash is the worker's process dying: an operation cut off at a random
// point (its context ends after up to 300 µs, so it may or may not have been
// applied), and the holds in flight abandoned, never captured nor released:
// only the sweep run by another process frees them.
func (w *propWorker) crash(ctx context.Context) error {
	opCtx, cancel := context.WithTimeout(ctx, time.Duration(w.r.Int64N(300))*time.Microsecond)
	defer cancel()
	var err error
	if w.r.IntN(2) == 0 {
		err = w.credit(ctx, opCtx)
	} else {
		err = w.hold(ctx, opCtx)
	}
	w.inflight = nil
	return err
}

// gaveUp judges a failed operation: the caller's context ending (a crash) is
// an unknown outcome, anything else is a bug.
func (w *propWorker) gaveUp(ctx context.Context, op *opRecord, err error) error {
	if ctx.Err() == nil && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)) {
		op.state = opMaybe
		return nil
	}
	op.state = opRefused
	return fmt.Errorf("%s %s: %w", op.Op, op.ID, err)
}

// holdIdentity is what a repeated Hold must return unchanged: the hold as
// placed, whatever has happened to it since.
func holdIdentity(h store.Hold) store.Hold {
	return store.Hold{ID: h.ID, Owner: h.Owner, Asset: h.Asset, Amount: h.Amount, KeyID: h.KeyID,
		KeyPeriod: h.KeyPeriod, KeyPeriodStart: h.KeyPeriodStart, ExpiresAt: h.ExpiresAt, CreatedAt: h.CreatedAt, Seq: h.Seq}
}

func diffErr(what string, want, got any) error {
	if diff := cmp.Diff(want, got); diff != "" {
		return fmt.Errorf("%s returned another result (-first +again):\n%s", what, diff)
	}
	return nil
}

func runLedgerProperty(t *testing.T, open OpenLedger) {
	seeds, err := LedgerPropertySeeds()
	if err != nil {
		t.Fatal(err)
	}
	for seed := range seeds {
		t.Run(fmt.Sprintf("seed=%d", seed+1), func(t *testing.T) {
			t.Parallel() // each seed has a database of its own; most of the time is spent in commits
			testLedgerPropertySeed(t, open, seed+1)
		})
	}
}

func testLedgerPropertySeed(t *testing.T, open OpenLedger, seed uint64) {
	ctx := t.Context()
	c := &clock{now: start}
	a, b := open(t, c.Now)
	m := &ledgerModel{sc: newScenario(seed), books: NewBooks(b)}
	for _, o := range m.sc.owners {
		for _, as := range m.sc.assets {
			m.books.Track(o, as)
		}
	}
	r := rand.New(rand.NewPCG(seed, 0)) //nolint:gosec // G404: a seeded test workload, reproducible by design
	workers := make([]*propWorker, propWorkers)
	for i := range workers {
		l := a
		if i%2 == 1 {
			l = b
		}
		rng := rand.New(rand.NewPCG(seed, uint64(i+1))) //nolint:gosec // G404: a seeded test workload, reproducible by design
		workers[i] = &propWorker{id: uint64(i), m: m, l: l, r: rng, crashes: 1}
	}
	for round := range propRounds {
		errs := make(chan error, propWorkers)
		var wg sync.WaitGroup
		for _, w := range workers {
			steps := 1 + w.r.IntN(4)
			wg.Go(func() {
				for range steps {
					if err := w.step(ctx); err != nil {
						errs <- err
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Errorf("round %d: %v", round, err)
		}
		c.Advance(time.Duration(r.Int64N(int64(4*time.Minute/time.Millisecond))) * time.Millisecond)
		sweeper := []store.Ledger{a, b}[r.IntN(2)]
		for _, err := range m.sweepAndCheck(ctx, sweeper, c.Now()) {
			t.Errorf("after round %d: %v", round, err)
		}
		if t.Failed() {
			t.Fatalf("seed %d failed in round %d (rerun: %s=%d and -run with seed=%d)", seed, round, LedgerSeedsEnv, seed, seed)
		}
	}
	// Everything in flight is abandoned: the end of every process.
	for _, err := range m.finish(ctx, a, c.Advance) {
		t.Error(err)
	}
}

// sweepAndCheck runs the sweep with small limits until it is done, then
// checks every invariant as of now.
func (m *ledgerModel) sweepAndCheck(ctx context.Context, l store.Ledger, now time.Time) []error {
	for {
		swept, err := l.ReleaseExpiredHolds(ctx, 5)
		if err != nil {
			return []error{fmt.Errorf("ReleaseExpiredHolds: %w", err)}
		}
		if swept.Released < 5 {
			break
		}
	}
	errs := m.books.Check(ctx)
	return append(errs, m.checkHolds(ctx, now)...)
}

// keyWindow names a key's usage in one asset (and one window).
type keyWindow struct {
	key, asset string
	start      int64 // unix ms, 0 for the key's total
}

// checkHolds reads every hold ever attempted and checks each one (captured
// <= held, its resolution entry, no open hold past its expiry once swept), the
// held balances against the open holds, and each key's usage against its
// holds and its caps.
func (m *ledgerModel) checkHolds(ctx context.Context, now time.Time) []error {
	m.mu.Lock()
	ops := slices.Clone(m.ops)
	m.mu.Unlock()
	var errs []error
	seen := map[string]bool{}
	open := map[bookKey]int64{}
	keyHeld, keySpent := map[keyWindow]int64{}, map[keyWindow]int64{}
	keys := map[string]store.KeyLimits{}
	for _, op := range ops {
		if op.Op != "hold" || seen[op.ID] {
			continue
		}
		seen[op.ID] = true
		h, final := m.final[op.ID]
		if !final {
			var err error
			h, err = m.books.l.HoldRecord(ctx, op.ID)
			if errors.Is(err, store.ErrNotFound) && op.state != opDone {
				continue
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("HoldRecord(%s): %w", op.ID, err))
				continue
			}
			errs = append(errs, m.checkHold(h, now)...)
			if h.State != store.HoldHeld {
				if m.final == nil {
					m.final = map[string]store.Hold{}
				}
				m.final[op.ID] = h
			}
		}
		if h.State == store.HoldHeld {
			open[bookKey{store.HeldAccount(h.Owner), h.Asset}] += h.Amount
		}
		if h.KeyID == "" {
			continue
		}
		keys[h.KeyID] = *op.Key
		for _, w := range []keyWindow{{h.KeyID, h.Asset, 0}, {h.KeyID, h.Asset, h.KeyPeriodStart.UnixMilli()}} {
			if w.start != 0 && h.KeyPeriod == 0 {
				continue
			}
			if h.State == store.HoldHeld {
				keyHeld[w] += h.Amount
			}
			keySpent[w] += h.Captured
		}
	}
	for _, o := range m.sc.owners {
		for _, as := range m.sc.assets {
			k := bookKey{store.HeldAccount(o), as}
			got, err := m.books.l.Balance(ctx, k.account, as)
			if err != nil || got != open[k] {
				errs = append(errs, fmt.Errorf("Balance(%s, %s) = %d, %w; its open holds sum to %d", k.account, as, got, err, open[k]))
			}
		}
	}
	for w, spent := range keySpent {
		k := keys[w.key]
		limit := k.TotalCap
		if w.start != 0 {
			limit = k.PeriodCap
		}
		if held := keyHeld[w]; held+spent > limit {
			errs = append(errs, fmt.Errorf("key %s in %s (window %d): %d held + %d spent over its cap %d", w.key, w.asset, w.start, held, spent, limit))
		}
		if w.start != 0 && w.start != store.PeriodStart(now, k.Period).UnixMilli() {
			continue // KeyUsage reads the current window only
		}
		u, err := m.books.l.KeyUsage(ctx, w.key, w.asset, k.Period)
		if err != nil {
			errs = append(errs, fmt.Errorf("KeyUsage(%s): %w", w.key, err))
			continue
		}
		gotHeld, gotSpent := u.Held, u.Spent
		if w.start != 0 {
			gotHeld, gotSpent = u.PeriodHeld, u.PeriodSpent
		}
		if gotHeld != keyHeld[w] || gotSpent != spent {
			errs = append(errs, fmt.Errorf("KeyUsage(%s, %s) window %d: held %d spent %d; its holds say held %d spent %d",
				w.key, w.asset, w.start, gotHeld, gotSpent, keyHeld[w], spent))
		}
	}
	return errs
}

// checkHold checks one hold and its resolution entry.
func (m *ledgerModel) checkHold(h store.Hold, now time.Time) []error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("hold %s (%+v): %s", h.ID, h, fmt.Sprintf(format, args...)))
	}
	switch h.State {
	case store.HoldHeld:
		if h.ResolvedSeq != 0 || h.Actual != 0 || h.Captured != 0 {
			bad("open, but with a resolution")
		}
		if !h.ExpiresAt.After(now) {
			bad("open past its expiry after the sweep")
		}
		return errs
	case store.HoldCaptured:
		if h.Captured > h.Amount || h.Captured != min(h.Actual, h.Amount) || h.Loss != h.Actual-h.Captured {
			bad("captured more than held, or the numbers disagree")
		}
	case store.HoldReleased, store.HoldExpired:
		if h.Actual != 0 || h.Captured != 0 || h.Loss != 0 {
			bad("released with a charge")
		}
	default:
		bad("unknown state")
	}
	e, ok := m.books.Entry(h.ResolvedSeq)
	if !ok {
		bad("resolution entry %d not in any statement", h.ResolvedSeq)
		return errs
	}
	want := map[string]int64{
		store.HeldAccount(h.Owner): -h.Amount, store.UserAccount(h.Owner): h.Amount - h.Captured,
		store.AccountRevenue: h.Actual, store.AccountLoss: -h.Loss,
	}
	kinds := map[store.HoldState]store.EntryKind{store.HoldCaptured: store.EntryCapture, store.HoldReleased: store.EntryRelease, store.HoldExpired: store.EntryExpire}
	if e.Kind != kinds[h.State] || e.HoldID != h.ID || e.Seq <= h.Seq {
		bad("resolved by entry %+v", e)
	}
	for _, p := range e.Postings {
		if want[p.Account] != p.Delta {
			bad("resolution posts %d to %s, want %d", p.Delta, p.Account, want[p.Account])
		}
	}
	return errs
}

// finish ends a run: it applies or confirms the operations whose outcome is
// unknown (a recovering process retrying them under the same ids), moves the
// clock past every hold's TTL and sweeps, checks that nothing is held any
// more, then replays every operation that succeeded and checks that this
// changes nothing at all: every operation applied exactly once.
func (m *ledgerModel) finish(ctx context.Context, l store.Ledger, advance func(time.Duration) time.Time) []error {
	var errs []error
	m.mu.Lock()
	ops := slices.Clone(m.ops)
	m.mu.Unlock()
	for _, op := range ops {
		if op.state == opMaybe {
			errs = append(errs, m.retry(ctx, l, op)...)
		}
	}
	now := advance(propMaxTTL + time.Second)
	errs = append(errs, m.sweepAndCheck(ctx, l, now)...)
	for k, bal := range m.books.Balances() {
		if strings.HasPrefix(k, "held:") && bal != 0 {
			errs = append(errs, fmt.Errorf("%s still holds %d after every hold expired", k, bal))
		}
	}
	before, entries := m.books.Balances(), m.books.Len()
	for _, op := range ops {
		if op.state == opDone {
			errs = append(errs, m.retry(ctx, l, op)...)
		}
	}
	errs = append(errs, m.books.Check(ctx)...)
	if got := m.books.Len(); got != entries {
		errs = append(errs, fmt.Errorf("replaying every operation wrote %d entries", got-entries))
	}
	if diff := cmp.Diff(before, m.books.Balances()); diff != "" {
		errs = append(errs, fmt.Errorf("replaying every operation changed balances (-before +after):\n%s", diff))
	}
	return errs
}

// retry repeats op with its arguments. A done op must give its first result;
// a maybe op must now succeed (or, for a hold, be refused), and becomes done
// or refused.
func (m *ledgerModel) retry(ctx context.Context, l store.Ledger, op *opRecord) []error {
	var err error
	var h store.Hold
	var e store.Entry
	switch op.Op {
	case "credit":
		e, err = l.Credit(ctx, op.ID, op.Owner, op.Asset, op.Amount)
		if err == nil && op.state == opDone {
			err = diffErr("credit replay", op.entry, e)
		}
	case "hold":
		h, err = l.Hold(ctx, store.HoldRequest{ID: op.ID, Owner: op.Owner, Asset: op.Asset, Amount: op.Amount, TTL: op.TTL, Key: op.Key})
		if errors.Is(err, store.ErrInsufficient) && op.state == opMaybe {
			op.state = opRefused
			return nil
		}
		if err == nil && op.state == opDone {
			err = diffErr("hold replay", holdIdentity(op.hold), holdIdentity(h))
		}
	case "capture":
		h, e, err = l.Capture(ctx, op.ID, op.Amount)
		if err == nil && op.state == opDone {
			err = errors.Join(diffErr("capture replay", op.hold, h), diffErr("capture replay", op.entry, e))
		}
	case "release":
		h, e, err = l.Release(ctx, op.ID)
		if err == nil && op.state == opDone {
			err = errors.Join(diffErr("release replay", op.hold, h), diffErr("release replay", op.entry, e))
		}
	}
	if err != nil {
		return []error{fmt.Errorf("retry of %s %s (%v): %w", op.Op, op.ID, op.state, err)}
	}
	op.state, op.hold, op.entry = opDone, h, e
	return nil
}

// RunLedgerCrashWorkload runs the property test's random operations (credits,
// holds through keys, captures, releases) against l from workers goroutines
// until ctx ends, writing each operation's intent to intents as one JSON line
// before calling the store. It is the body of a process that a crash test
// kills at a random moment (D21); CheckLedgerAfterCrash then judges
// the database it leaves. The seed chooses the operations; seeds of
// successive processes on one database must differ, so their ids do. It
// returns the first operation that went wrong, or nil when ctx ends.
func RunLedgerCrashWorkload(ctx context.Context, l store.Ledger, seed uint64, workers int, intents io.Writer) error {
	m := &ledgerModel{sc: newScenario(0), intents: &lockedWriter{w: intents}}
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for i := range workers {
		rng := rand.New(rand.NewPCG(seed, uint64(i))) //nolint:gosec // G404: a seeded test workload, reproducible by design
		w := &propWorker{id: seed*1000 + uint64(i), m: m, l: l, r: rng}
		wg.Go(func() {
			for ctx.Err() == nil {
				if err := w.step(ctx); err != nil && ctx.Err() == nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(p)
}

// CheckLedgerAfterCrash judges a database that processes running
// RunLedgerCrashWorkload were killed on, given every intent they wrote: it
// audits the books as the processes left them, retries every intent (the
// recovery a restarted process would do; each was applied once or not at
// all, so a retry must succeed, be refused for funds, or find no hold for a
// hold that was never placed), moves the store's clock past every hold's TTL
// with advance and sweeps, audits again, and replays every intent once more,
// which must change nothing.
func CheckLedgerAfterCrash(t *testing.T, l store.Ledger, advance func(time.Duration) time.Time, intents []byte) {
	t.Helper()
	ctx := t.Context()
	m := &ledgerModel{sc: newScenario(0), books: NewBooks(l)}
	for _, o := range m.sc.owners {
		for _, as := range m.sc.assets {
			m.books.Track(o, as)
		}
	}
	for _, err := range m.books.Check(ctx) {
		t.Errorf("as the crashed processes left it: %v", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(intents))
	for sc.Scan() {
		op := &opRecord{state: opMaybe}
		if err := json.Unmarshal(sc.Bytes(), op); err != nil {
			t.Fatalf("intent %q: %v", sc.Text(), err)
		}
		m.ops = append(m.ops, op)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d intents, %d entries before recovery", len(m.ops), m.books.Len())
	var errs []error
	for _, op := range m.ops {
		e := m.retry(ctx, l, op)
		// A capture or release of a hold that was never placed finds none.
		if len(e) == 1 && (op.Op == "capture" || op.Op == "release") && errors.Is(e[0], store.ErrNotFound) {
			op.state = opRefused
			continue
		}
		errs = append(errs, e...)
	}
	// Every intent is now applied once or refused: expire, sweep, audit, and
	// replay every applied one.
	errs = append(errs, m.finish(ctx, l, advance)...)
	for _, err := range errs {
		t.Error(err)
	}
}
