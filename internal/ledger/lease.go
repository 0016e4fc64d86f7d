package ledger

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"strconv"
	"sync"
	"time"

	"github.com/ethereum/go-ethereum/common"

	"github.com/llm4agents/llm4agents/internal/chat"
	"github.com/llm4agents/llm4agents/internal/pricing"
	"github.com/llm4agents/llm4agents/internal/store"
)

// Credit leases (docs/DESIGN.md D28): a replica serves the calls of an API
// key from a lease, a hold in the shared store of a slice of what the key
// may spend, placed and counted like a call's hold so that every cap holds
// across replicas. Calls are admitted and charged against the lease in
// memory; their draws, with their receipts, are written in batches by
// group commit, off the calls' path. A lease admits calls for a short
// window, is replaced ahead of need, and is closed once its calls are done
// and written: what they drew is captured, the rest returns to the buyer.
//
// What a crash can cost is bounded: a replica killed between two flushes
// loses the draws it had not written (at most one flush interval of calls,
// and never more than the queue bound). Those calls were free: the
// operator's loss. Nothing is charged twice, and the buyer is never charged
// more than the receipts it holds say. The rest of a dead replica's lease
// returns to the buyer when the lease's TTL ends it.
//
// And that loss is counted. A lease hands a call a position only up to its
// issued mark as the store has it (store.Leases.Issue): every flush, and a
// background write once a lease has handed out half its headroom, raise
// the marks of the leases admitting calls to what they handed out plus
// the headroom (headroomFlushes flush intervals of their calls), so calls
// seldom wait for it; a call that finds its lease's mark reached waits for
// it to be raised or is refused, never answered unaccounted. When the sweep ends a dead
// replica's lease, the positions issued without a draw bound the calls it
// answered and never wrote (Ledger.SweepExpired counts them).

// LeaseStore is what leases need of the store.
type LeaseStore interface {
	Hold(ctx context.Context, r store.HoldRequest) (store.Hold, error)
	Balance(ctx context.Context, account, asset string) (int64, error)
	Draw(ctx context.Context, draws []store.LeaseDraw) ([]error, error)
	Issue(ctx context.Context, marks []store.LeaseMark) ([]error, error)
	CloseLease(ctx context.Context, leaseID string) (store.Hold, store.Entry, error)
	OpenLeases(ctx context.Context, owner, asset string) (store.LeaseBook, error)
}

// Lease defaults.
const (
	DefaultFlushInterval = 20 * time.Millisecond
	DefaultFlushBatch    = 256
	DefaultLeaseWindow   = 5 * time.Second
	// leaseStoreTimeout bounds each store call of the lease machinery, and
	// the wait of a call for its lease's mark.
	leaseStoreTimeout = 5 * time.Second
	// A lease is issued ahead of its calls by about headroomFlushes flush
	// intervals of them at the last second's rate, at least minHeadroom and
	// at most maxHeadroom positions: what the sweep may count as lost
	// beyond the calls really lost is at most that. Its marks are raised
	// once half of it is handed out: one store write per four flush
	// intervals of steady traffic, with room for a burst of several times
	// the rate while the write runs (on PostgreSQL it waits for the row
	// lock of the lease's draws being written).
	minHeadroom, maxHeadroom = 32, 1024
	headroomFlushes          = 8
)

// ErrBacklog refuses a call while the draws not yet written reach the
// queue's bound: the store is not keeping up (or is down), and a call
// admitted now could not be recorded in time.
var ErrBacklog = errors.New("ledger: credit draws are not being written; the queue is full")

// ErrLeasesClosed refuses a call once the replica is shutting down.
var ErrLeasesClosed = errors.New("ledger: credit leases are closed")

// ErrNotIssued refuses a call whose lease's issued mark could not be raised
// to its position in time: the store is down or slow, and a call answered
// now could not be accounted for if this replica died.
var ErrNotIssued = errors.New("ledger: the credit lease's next positions could not be issued")

// LeaseConfig configures Leases.
type LeaseConfig struct {
	// Replica names this replica's leases (with a random part): lease ids
	// must not collide across replicas and restarts.
	Replica string
	// FlushInterval is the longest a draw waits to be written; FlushBatch
	// the most draws one write takes (a full batch is written at once).
	FlushInterval time.Duration
	FlushBatch    int
	// MaxPending bounds the calls admitted and not yet written; a call past
	// it is refused with ErrBacklog. Zero means 16 batches.
	MaxPending int
	// Window is how long a lease admits calls: the staleness bound of a
	// lowered cap, and the window of the spend rate a lease is sized on.
	Window time.Duration
	// TTL is the lease's hold TTL: longer than Window plus the longest call
	// plus the time to write its draw, since a call admitted at the end of
	// the window still draws on the lease.
	TTL time.Duration
	// MaxSize bounds a lease, in atomic units (0: store.MaxAmount). A call
	// whose maximum cost is above it gets a lease of its own size.
	MaxSize int64
}

// Leases serves credit calls from per-replica leases. Its methods are safe
// for concurrent use; Run must be running for draws to be written and
// leases to be closed.
type Leases struct {
	l     *Ledger
	st    LeaseStore
	asset string
	cfg   LeaseConfig
	log   *slog.Logger
	now   func() time.Time
	// Stats, read by the gateway's metrics.
	stats LeaseStats

	// flushMu makes one Flush at a time: Run's and Close's would take the
	// same batch.
	flushMu sync.Mutex
	// closeMu makes one closeRetired at a time, so that Close and Quiesce
	// return only once the closes Run started meanwhile are done.
	closeMu sync.Mutex
	mu      sync.Mutex
	keys    map[string]*keyLeases
	queue   []queuedDraw
	pending int // admitted calls not yet written: tickets out plus queued draws
	opening int // leases being opened
	seq     uint64
	closed  bool
	// One write of issued marks runs at a time (issuing). issueSeq counts
	// the writes started, issueDone names the last one ended and issueErr
	// is its error; issuedCh is closed, and replaced, as each ends.
	issuing   bool
	issueSeq  uint64
	issueDone uint64
	issueErr  error
	issuedCh  chan struct{}
	wake      chan struct{}
	done      chan struct{} // closed when Run returns
	prefix    string
}

// LeaseCounts are what leases did, for metrics.
type LeaseCounts struct {
	Opened, Closed, OpenFailed  int64
	Flushes, Drawn, FlushErrors int64
	// Unbilled counts draws the store refused (their lease had ended):
	// calls that were free, the operator's loss.
	Unbilled int64
	// Issues and IssueErrors count the writes of issued marks and those
	// that failed. IssueWaits counts calls that waited on their path for
	// their lease's mark to be raised (none while the marks written every
	// flush keep ahead of the calls), and IssueRefused those of them
	// refused with ErrNotIssued.
	Issues, IssueErrors, IssueWaits, IssueRefused int64
}

// LeaseStats keeps LeaseCounts, safe for concurrent use.
type LeaseStats struct {
	mu sync.Mutex
	c  LeaseCounts
}

// Snapshot returns a copy of the counts.
func (s *LeaseStats) Snapshot() LeaseCounts {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.c
}

func (s *LeaseStats) add(f func(*LeaseCounts)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(&s.c)
}

// keyLeases is one key's leases on this replica.
type keyLeases struct {
	cur     *lease
	next    *lease        // opened ahead of need, admitting once cur is done
	opening chan struct{} // non-nil while a lease is being opened; closed when done
	retired []*lease
	// spend is the maximum cost admitted in the current rate window,
	// rate the last full window's: a lease is sized on it. calls and
	// callRate are the same in calls: a lease's headroom is sized on them.
	spend, rate     int64
	calls, callRate int64
	windowAt        time.Time
	// balance is the owner's spendable balance after this key's latest
	// lease was placed: the receipts' balanceAfter.
	balance int64
}

// lease is one lease in memory.
type lease struct {
	id      string
	seq     int64 // the hold entry's seq: the receipts' reference
	size    int64
	limits  store.KeyLimits
	until   time.Time // admits calls before it
	next    int64     // the next position
	issued  int64     // the issued mark as the store has it: positions up to it may be handed out
	ended   bool      // the store refused its mark: it ended (the sweep), it admits no call
	drawn   int64     // charged to calls answered, written or not
	held    int64     // maximum cost of the calls in flight
	unwrit  int       // draws queued, not yet written
	retired bool
	closing bool
}

func (l *lease) room() int64 { return l.size - l.drawn - l.held }

// spendable is the owner's balance as this replica sees it: the balance
// after the key's latest lease was placed (which excludes every lease of
// every replica) plus what this key's leases here have not drawn or held.
// It is exact while one replica serves the account; with several, it lags
// the others' charges by at most a lease window.
func (kl *keyLeases) spendable() int64 {
	b := kl.balance
	add := func(l *lease) {
		if l != nil && !l.closing {
			b += l.room()
		}
	}
	add(kl.cur)
	add(kl.next)
	for _, l := range kl.retired {
		add(l)
	}
	return b
}

// Ticket is a call admitted against a lease.
type Ticket struct {
	lease *lease
	key   string
	pos   int64
	max   int64
	done  bool
}

// Ref is the call's reference in the ledger, known at admission: the seq
// of its lease's hold entry times 2^32 plus its position in the lease. It
// is the receipt's ledgerSeq.
func (t *Ticket) Ref() *big.Int {
	r := new(big.Int).Lsh(big.NewInt(t.lease.seq), 32)
	return r.Add(r, big.NewInt(t.pos))
}

type queuedDraw struct {
	lease *lease
	draw  store.LeaseDraw
}

// NewLeases returns Leases on st for the asset of l.
func (l *Ledger) NewLeases(st LeaseStore, cfg LeaseConfig, now func() time.Time) (*Leases, error) {
	if st == nil {
		return nil, errors.New("ledger: leases: no store")
	}
	if cfg.FlushInterval == 0 {
		cfg.FlushInterval = DefaultFlushInterval
	}
	if cfg.FlushBatch == 0 {
		cfg.FlushBatch = DefaultFlushBatch
	}
	if cfg.MaxPending == 0 {
		cfg.MaxPending = 16 * cfg.FlushBatch
	}
	if cfg.Window == 0 {
		cfg.Window = DefaultLeaseWindow
	}
	if cfg.MaxSize == 0 {
		cfg.MaxSize = store.MaxAmount
	}
	switch {
	case cfg.FlushInterval < time.Millisecond || cfg.FlushInterval > time.Second:
		return nil, fmt.Errorf("ledger: leases: flush interval %v is outside [1ms, 1s]", cfg.FlushInterval)
	case cfg.FlushBatch < 1 || cfg.FlushBatch > store.MaxDrawBatch:
		return nil, fmt.Errorf("ledger: leases: flush batch %d is outside 1..%d", cfg.FlushBatch, store.MaxDrawBatch)
	case cfg.MaxPending < cfg.FlushBatch:
		return nil, fmt.Errorf("ledger: leases: max pending %d is below a batch", cfg.MaxPending)
	case cfg.Window < 10*time.Millisecond:
		return nil, fmt.Errorf("ledger: leases: window %v is under 10ms", cfg.Window)
	case cfg.TTL < cfg.Window+time.Second || cfg.TTL > store.MaxHoldTTL:
		return nil, fmt.Errorf("ledger: leases: TTL %v must exceed the window by a second and be at most %v", cfg.TTL, store.MaxHoldTTL)
	case cfg.MaxSize < 1 || cfg.MaxSize > store.MaxAmount:
		return nil, fmt.Errorf("ledger: leases: max size %d is outside 1..%d", cfg.MaxSize, store.MaxAmount)
	case len(cfg.Replica) > 32 || !store.ValidID("lease-"+cfg.Replica):
		return nil, fmt.Errorf("ledger: leases: replica name %q is not 1 to 32 printable characters without spaces", cfg.Replica)
	}
	if now == nil {
		now = time.Now
	}
	var salt [6]byte
	if _, err := rand.Read(salt[:]); err != nil {
		return nil, fmt.Errorf("ledger: leases: %w", err)
	}
	return &Leases{
		l: l, st: st, asset: l.cfg.Asset, cfg: cfg, log: l.log.With("component", "leases"), now: now,
		keys: map[string]*keyLeases{}, wake: make(chan struct{}, 1), done: make(chan struct{}), issuedCh: make(chan struct{}),
		prefix: fmt.Sprintf("lease-%s-%x-", cfg.Replica, salt),
	}, nil
}

// FlushInterval is the longest a draw waits to be written.
func (ls *Leases) FlushInterval() time.Duration { return ls.cfg.FlushInterval }

// Stats returns the leases' counters.
func (ls *Leases) Stats() *LeaseStats { return &ls.stats }

// Reserve admits c against a lease of its key, opening one if the key has
// none with room. A refusal is an *store.InsufficientError (with the call's
// maximum cost as Requested), ErrBacklog, ErrLeasesClosed, ErrNotIssued
// (its lease's mark could not be raised to its position within
// leaseStoreTimeout), or a store error. c.Key is required: leases are per
// key.
func (ls *Leases) Reserve(ctx context.Context, c Call) (*Ticket, error) {
	if c.Key == nil {
		return nil, errors.New("ledger: leases: a leased call needs a key")
	}
	n, err := amount("maximum cost", MaxCost(c.PromptTokens, c.OutputBound, c.Price))
	if err != nil {
		return nil, err
	}
	limits, err := c.Key.limits()
	if err != nil {
		return nil, err
	}
	o, err := owner(c.Payer)
	if err != nil {
		return nil, err
	}
	// A call that must wait for its lease's mark waits at most
	// leaseStoreTimeout in all, from its first wait.
	var issueBy time.Time
	var issueTimer *time.Timer
	var since uint64
	defer func() {
		if issueTimer != nil {
			issueTimer.Stop()
		}
	}()
	for {
		a, err := ls.admit(o, *limits, n)
		if a.ticket != nil || err != nil {
			return a.ticket, err
		}
		if a.issue || a.issueWait {
			if issueTimer == nil {
				ls.stats.add(func(s *LeaseCounts) { s.IssueWaits++ })
				issueBy, since = time.Now().Add(leaseStoreTimeout), a.since
				issueTimer = time.NewTimer(leaseStoreTimeout)
			} else if a.issueWait {
				if err := ls.issueFailedSince(since); err != nil {
					// A write of marks that started after this call
					// needed one failed: the store cannot be reached.
					return nil, ls.refuseUnissued(err)
				}
			}
		}
		switch {
		case a.issue:
			ictx, cancel := context.WithDeadline(ctx, issueBy)
			err := ls.issue(ictx)
			cancel()
			if err != nil {
				return nil, ls.refuseUnissued(err)
			}
		case a.wait != nil:
			var timeout <-chan time.Time
			if issueTimer != nil {
				timeout = issueTimer.C
			}
			select {
			case <-a.wait:
			case <-timeout:
				return nil, ls.refuseUnissued(context.DeadlineExceeded)
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		default:
			if err := ls.open(ctx, o, *limits, n, false); err != nil {
				return nil, err
			}
		}
	}
}

func (ls *Leases) refuseUnissued(err error) error {
	ls.stats.add(func(s *LeaseCounts) { s.IssueRefused++ })
	return fmt.Errorf("%w: %w", ErrNotIssued, err)
}

// admission is what admit decided: a ticket, or what the caller is to do
// before asking again.
type admission struct {
	ticket *Ticket
	// wait is closed when a lease being opened is placed (or failed), or
	// when a write of issued marks ends.
	wait <-chan struct{}
	// open: the caller opens a lease for the key (admit marked the key as
	// opening). issue: the caller writes the issued marks (admit marked
	// the write as running). issueWait: the wait is for a write of marks.
	open, issue, issueWait bool
	// since is, with issue or issueWait, how many writes of marks had
	// started: one started after it includes this call's need.
	since uint64
}

// rateWindow is the window of the spend rate a lease is sized on: a lease
// holds about one second of its key's traffic.
const rateWindow = time.Second

// admit takes n from the key's current lease, switching to the lease opened
// ahead of need when the current one is spent or past its window. Without
// a lease with room it returns a channel to wait on while another call
// opens one, or asks the caller to open one (admit marked the key as
// opening). A lease whose issued mark is below its next position admits no
// call: admit returns a channel to wait on while marks are written, or asks
// the caller to write them. Taking from a lease that is running low starts
// the opening of the next in the background.
func (ls *Leases) admit(owner string, limits store.KeyLimits, n int64) (admission, error) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.closed {
		return admission{}, ErrLeasesClosed
	}
	if ls.pending >= ls.cfg.MaxPending {
		return admission{}, ErrBacklog
	}
	now := ls.now()
	kl := ls.keys[limits.ID]
	if kl == nil {
		kl = &keyLeases{windowAt: now}
		ls.keys[limits.ID] = kl
	}
	if since := now.Sub(kl.windowAt); since >= rateWindow {
		kl.rate, kl.spend, kl.windowAt = kl.spend, 0, now
		kl.callRate, kl.calls = kl.calls, 0
		if since >= 2*rateWindow {
			kl.rate, kl.callRate = 0, 0 // idle for a whole window
		}
	}
	usable := func(l *lease) bool {
		return l != nil && !l.ended && now.Before(l.until) && l.limits == limits && l.next <= store.MaxLeasePosition
	}
	if kl.cur != nil && (!usable(kl.cur) || kl.cur.room() < n) {
		ls.retire(kl, kl.cur)
	}
	if kl.cur == nil && kl.next != nil {
		if usable(kl.next) {
			kl.cur = kl.next
		} else {
			ls.retire(kl, kl.next)
		}
		kl.next = nil
		if kl.cur != nil && kl.cur.room() < n {
			ls.retire(kl, kl.cur)
		}
	}
	if l := kl.cur; l != nil && l.next > l.issued {
		// The position is not issued yet: no call is answered that the
		// store could not account for if this replica died.
		if ls.issuing {
			return admission{wait: ls.issuedCh, issueWait: true, since: ls.issueSeq}, nil
		}
		ls.issuing = true
		return admission{issue: true, since: ls.issueSeq}, nil
	}
	if l := kl.cur; l != nil {
		l.held += n
		kl.spend += n
		kl.calls++
		ls.pending++
		t := &Ticket{lease: l, key: limits.ID, pos: l.next, max: n}
		l.next++
		// Issued ahead of need: once half the headroom is handed out, the
		// marks are raised in the background, so that a burst faster than
		// the last second's rate does not wait for the next flush's write.
		if !ls.issuing && !ls.closed && l.issued-l.next+1 < ls.headroom(kl)/2 {
			ls.issuing = true
			go ls.issueBehind()
		}
		low := l.room() < l.size/2 || now.After(l.until.Add(-ls.cfg.Window/2))
		if low && kl.next == nil && kl.opening == nil {
			kl.opening = make(chan struct{})
			ls.opening++
			go func() {
				if err := ls.open(context.Background(), owner, limits, n, true); err != nil {
					ls.log.Debug("open the next credit lease ahead of need", "key_id", limits.ID, "err", err)
				}
			}()
		}
		return admission{ticket: t}, nil
	}
	if kl.opening != nil {
		return admission{wait: kl.opening}, nil
	}
	kl.opening = make(chan struct{})
	ls.opening++
	return admission{open: true}, nil
}

// headroom is how far ahead of its calls a lease of kl is issued:
// headroomFlushes flush intervals of the key's calls at its observed rate,
// within [minHeadroom, maxHeadroom].
func (ls *Leases) headroom(kl *keyLeases) int64 {
	perWindow := min(max(kl.callRate, kl.calls), maxHeadroom*int64(rateWindow/time.Millisecond))
	h := (perWindow*headroomFlushes*int64(ls.cfg.FlushInterval) + int64(rateWindow) - 1) / int64(rateWindow)
	return min(max(h, minHeadroom), maxHeadroom)
}

// issue writes the issued marks of the leases admitting calls whose marks
// are short of their next positions plus headroom, in one store write. The
// caller marked the write as running (issuing); issue clears it and wakes
// the calls waiting for it. A lease whose mark the store refuses has ended
// (the sweep ended it): it is retired and admits no more calls.
func (ls *Leases) issue(ctx context.Context) error {
	ls.mu.Lock()
	ls.issueSeq++
	seq := ls.issueSeq
	marks, leases := ls.marksDue()
	ls.mu.Unlock()

	var results []error
	var err error
	if len(marks) > 0 {
		// Bounded by ctx's deadline if it has one (a call's wait), and
		// never cut short by its cancellation: calls may wait on this write.
		deadline := time.Now().Add(leaseStoreTimeout)
		if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
			deadline = d
		}
		wctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), deadline)
		results, err = ls.st.Issue(wctx, marks)
		cancel()
		ls.stats.add(func(s *LeaseCounts) {
			s.Issues++
			if err != nil {
				s.IssueErrors++
			}
		})
	}

	ls.mu.Lock()
	defer ls.mu.Unlock()
	if err == nil {
		for i, l := range leases {
			if results[i] == nil {
				l.issued = max(l.issued, marks[i].Mark)
				continue
			}
			ls.log.Warn("credit lease's mark refused by the store: it ended; retired", "lease", l.id, "err", results[i])
			l.ended = true
			if kl := ls.keys[l.limits.ID]; kl != nil {
				if kl.next == l {
					kl.next = nil
				}
				ls.retire(kl, l)
			}
		}
	} else {
		err = fmt.Errorf("ledger: issue credit lease positions: %w", err)
	}
	ls.issueDone, ls.issueErr = seq, err
	ls.issuing = false
	close(ls.issuedCh)
	ls.issuedCh = make(chan struct{})
	return err
}

// marksDue returns the marks to write: each lease admitting calls (the
// current of each key, within its window; the next keeps its first mark
// until it takes calls) whose mark is short of its next position plus
// headroom, up to one write's worth. Called with ls.mu held.
func (ls *Leases) marksDue() ([]store.LeaseMark, []*lease) {
	var marks []store.LeaseMark
	var leases []*lease
	now := ls.now()
	for _, kl := range ls.keys {
		h := ls.headroom(kl)
		l := kl.cur
		if l == nil || l.ended || l.retired || !now.Before(l.until) {
			continue
		}
		if mark := min(l.next-1+h, store.MaxLeasePosition); mark > l.issued {
			marks = append(marks, store.LeaseMark{LeaseID: l.id, Mark: mark})
			leases = append(leases, l)
		}
		if len(marks) == store.MaxDrawBatch {
			return marks, leases // the rest at the next flush
		}
	}
	return marks, leases
}

// issueAhead writes the issued marks due, unless a write of them is
// running: the next flush writes what it left.
func (ls *Leases) issueAhead(ctx context.Context) {
	ls.mu.Lock()
	if ls.issuing || ls.closed {
		ls.mu.Unlock()
		return
	}
	ls.issuing = true
	ls.mu.Unlock()
	if err := ls.issue(ctx); err != nil {
		ls.log.Error("write credit lease marks; retrying at the next flush", "err", err)
	}
}

// issueBehind writes the issued marks due for a call that marked the write
// as running (admit, ahead of need). A failure is retried by the next
// flush, or by the call that reaches the mark.
func (ls *Leases) issueBehind() {
	if err := ls.issue(context.Background()); err != nil {
		ls.log.Debug("write credit lease marks ahead of need", "err", err)
	}
}

// issueFailedSince returns the error of the last write of marks if it
// failed and started after since.
func (ls *Leases) issueFailedSince(since uint64) error {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.issueDone > since && ls.issueErr != nil {
		return ls.issueErr
	}
	return nil
}

// open places a new lease for the key, sized on its spend rate and at least
// n, and makes it the key's current lease (or, ahead of need, its next).
// The caller marked the key as opening; open clears the mark.
func (ls *Leases) open(ctx context.Context, owner string, limits store.KeyLimits, n int64, ahead bool) error {
	ls.mu.Lock()
	kl := ls.keys[limits.ID]
	size := min(max(2*n, kl.rate, kl.spend), max(n, ls.cfg.MaxSize))
	ls.seq++
	id := ls.prefix + strconv.FormatUint(ls.seq, 10)
	// The lease is placed with its first mark: its first calls need no
	// other write. One opened ahead of need gets the floor only, raised
	// once it takes calls: until then its headroom would only loosen the
	// sweep's bound if this replica died.
	issued := ls.headroom(kl)
	if ahead {
		issued = minHeadroom
	}
	ls.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), leaseStoreTimeout)
	defer cancel()
	req := store.HoldRequest{ID: id, Owner: owner, Asset: ls.asset, Amount: size, TTL: ls.cfg.TTL, Key: &limits, Lease: true, Issued: issued}
	h, err := ls.st.Hold(ctx, req)
	if ie, ok := errors.AsType[*store.InsufficientError](err); ok && ie.Available >= n && size > n {
		// Near a cap or the balance: take a fair share of what remains,
		// never less than this call, so other replicas are not starved.
		req.ID = id + "s"
		req.Amount = max(n, min(size, ie.Available/2))
		h, err = ls.st.Hold(ctx, req)
	}
	var balance int64
	if err == nil {
		balance, err = ls.st.Balance(ctx, store.UserAccount(owner), ls.asset)
	}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	close(kl.opening)
	kl.opening = nil
	ls.opening--
	if ie, ok := errors.AsType[*store.InsufficientError](err); ok {
		return &store.InsufficientError{Limit: ie.Limit, Available: ie.Available, Requested: n}
	}
	if err != nil {
		ls.stats.add(func(s *LeaseCounts) { s.OpenFailed++ })
		// The hold may have been written before the error: close it, so
		// its slice does not wait for the TTL (an unknown id is fine).
		go ls.closeLater(context.WithoutCancel(ctx), req.ID)
		return fmt.Errorf("ledger: open lease for key %s: %w", limits.ID, err)
	}
	ls.stats.add(func(s *LeaseCounts) { s.Opened++ })
	l := &lease{id: h.ID, seq: h.Seq, size: h.Amount, limits: limits, until: ls.now().Add(ls.cfg.Window), next: 1, issued: h.Issued}
	if !h.KeyPeriodStart.IsZero() {
		// A lease counts against the period it was placed in: it admits
		// no call of the next one.
		l.until = minTime(l.until, h.KeyPeriodStart.Add(h.KeyPeriod))
	}
	kl.balance = balance
	switch {
	case ls.closed:
		ls.retire(kl, l)
	case ahead && kl.next == nil:
		kl.next = l
	default:
		if kl.cur != nil {
			ls.retire(kl, kl.cur)
		}
		kl.cur = l
	}
	return nil
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// retire stops l admitting calls; Run closes it once its calls are done and
// written.
func (ls *Leases) retire(kl *keyLeases, l *lease) {
	if kl.cur == l {
		kl.cur = nil
	}
	if !l.retired {
		l.retired = true
		kl.retired = append(kl.retired, l)
	}
}

// Charge charges the call of t for usage u at price p: its cost, capped at
// the maximum it was admitted for (the rest is the operator's loss, D16).
// receiptOf, given the charge, returns the receipt to keep with the draw
// (nil for none); the draw is queued once it returns, and written within
// the flush interval. Charge never waits for the store.
func (ls *Leases) Charge(t *Ticket, u chat.Usage, p pricing.Price, receiptOf func(Charge) *store.StoredReceipt) Charge {
	cost := pricing.Cost(u, p)
	c, err := amount("cost", cost)
	if err != nil {
		c = store.MaxAmount
	}
	charged := min(c, t.max)
	ls.mu.Lock()
	if t.done {
		ls.mu.Unlock()
		panic("ledger: a lease ticket charged or released twice") // a bug in the caller
	}
	t.done = true
	l := t.lease
	l.held -= t.max
	l.drawn += charged
	l.unwrit++ // from here: the lease stays open until the draw is written
	balance := int64(0)
	if kl := ls.keys[t.key]; kl != nil {
		balance = kl.spendable()
	}
	ls.mu.Unlock()

	ch := Charge{
		Hold: store.Hold{ID: l.id, Asset: ls.asset, Amount: t.max, Actual: c, Captured: charged, Loss: c - charged, Lease: true},
		Cost: big.NewInt(c), Charged: big.NewInt(charged), Loss: big.NewInt(c - charged),
		BalanceAfter: big.NewInt(balance), Seq: 0, At: ls.now(), Ref: t.Ref(),
	}
	d := store.LeaseDraw{LeaseID: l.id, Position: t.pos, Charged: charged, Cost: c}
	if receiptOf != nil {
		d.Receipt = receiptOf(ch)
	}
	d.CallID = l.id + "/" + strconv.FormatInt(t.pos, 10)
	if d.Receipt != nil {
		d.CallID = d.Receipt.RequestID
	}
	ls.mu.Lock()
	ls.queue = append(ls.queue, queuedDraw{lease: l, draw: d})
	full := len(ls.queue) >= ls.cfg.FlushBatch
	ls.mu.Unlock()
	if full {
		ls.poke()
	}
	return ch
}

// Release ends the call of t with nothing charged: its maximum returns to
// the lease.
func (ls *Leases) Release(t *Ticket) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if t.done {
		return
	}
	t.done = true
	t.lease.held -= t.max
	ls.pending--
}

func (ls *Leases) poke() {
	select {
	case ls.wake <- struct{}{}:
	default:
	}
}

// Run writes queued draws every flush interval (at once when a batch is
// full) and closes retired leases whose calls are done and written, until
// ctx ends; then it returns. Call Close after it to write what is left.
func (ls *Leases) Run(ctx context.Context) {
	defer close(ls.done)
	tick := time.NewTicker(ls.cfg.FlushInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-ls.wake:
		}
		ls.Flush(ctx)
		ls.closeRetired(ctx, false)
	}
}

// Flush raises the issued marks of the leases admitting calls ahead of
// them, then writes the queued draws, a batch per store write, and reports
// whether the queue is empty. A failed write keeps its batch at the head of
// the queue for the next flush.
func (ls *Leases) Flush(ctx context.Context) bool {
	ls.flushMu.Lock()
	defer ls.flushMu.Unlock()
	ls.issueAhead(ctx)
	for {
		ls.mu.Lock()
		n := min(len(ls.queue), ls.cfg.FlushBatch)
		batch := ls.queue[:n:n]
		ls.mu.Unlock()
		if n == 0 {
			return true
		}
		draws := make([]store.LeaseDraw, n)
		for i, q := range batch {
			draws[i] = q.draw
		}
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), leaseStoreTimeout)
		results, err := ls.st.Draw(wctx, draws)
		cancel()
		if err != nil {
			ls.stats.add(func(s *LeaseCounts) { s.FlushErrors++ })
			ls.log.Error("write credit draws; retrying at the next flush", "draws", n, "err", err)
			return false
		}
		unbilled := 0
		for i, rerr := range results {
			if rerr != nil {
				unbilled++
				ls.log.Error("credit draw refused by the store: the call is free (the operator's loss)",
					"lease", draws[i].LeaseID, "position", draws[i].Position, "charged", draws[i].Charged, "err", rerr)
			}
		}
		ls.mu.Lock()
		for _, q := range batch {
			q.lease.unwrit--
		}
		ls.queue = ls.queue[n:]
		ls.pending -= n
		ls.mu.Unlock()
		ls.stats.add(func(s *LeaseCounts) { s.Flushes++; s.Drawn += int64(n - unbilled); s.Unbilled += int64(unbilled) })
	}
}

// closeRetired closes the retired leases whose calls are done and written
// (all retired leases, and current ones too, when all is set).
func (ls *Leases) closeRetired(ctx context.Context, all bool) {
	ls.closeMu.Lock()
	defer ls.closeMu.Unlock()
	var todo []*lease
	ls.mu.Lock()
	now := ls.now()
	for id, kl := range ls.keys {
		// Past its window a lease is idle or replaced: return its rest.
		if kl.cur != nil && (all || !now.Before(kl.cur.until)) {
			ls.retire(kl, kl.cur)
		}
		if kl.next != nil && (all || !now.Before(kl.next.until)) {
			ls.retire(kl, kl.next)
			kl.next = nil
		}
		kept := kl.retired[:0]
		for _, l := range kl.retired {
			if l.held == 0 && l.unwrit == 0 && !l.closing {
				l.closing = true
				todo = append(todo, l)
				continue
			}
			kept = append(kept, l)
		}
		kl.retired = kept
		if kl.cur == nil && kl.next == nil && len(kl.retired) == 0 && kl.opening == nil && now.Sub(kl.windowAt) > 2*ls.cfg.Window {
			delete(ls.keys, id) // idle: forget its rate
		}
	}
	ls.mu.Unlock()
	for _, l := range todo {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), leaseStoreTimeout)
		_, _, err := ls.st.CloseLease(cctx, l.id)
		cancel()
		if err != nil {
			// The sweep ends it at its TTL, capturing what was written.
			ls.log.Warn("close credit lease; the sweep will end it at its TTL", "lease", l.id, "err", err)
			continue
		}
		ls.stats.add(func(s *LeaseCounts) { s.Closed++ })
	}
}

// closeLater closes a lease whose opening failed, in case the store wrote it.
func (ls *Leases) closeLater(ctx context.Context, id string) {
	ctx, cancel := context.WithTimeout(ctx, leaseStoreTimeout)
	defer cancel()
	if _, _, err := ls.st.CloseLease(ctx, id); err != nil && !errors.Is(err, store.ErrNotFound) {
		ls.log.Warn("close a lease whose opening failed; the sweep will end it", "lease", id, "err", err)
	}
}

// Balance is Ledger.Balance with leases counted as what they are: the
// owner's credit a replica holds for its calls. What a lease's draws
// charged is spent; the rest of it is Available, not Held. This replica's
// draws are written first; another replica's of the last flush interval
// may not show yet. The two reads are not one snapshot: a lease closed
// between them is missed (Available is then low by its rest, never high).
func (ls *Leases) Balance(ctx context.Context, payer common.Address) (Balance, error) {
	ls.Flush(ctx)
	book, err := ls.openLeases(ctx, payer)
	if err != nil {
		return Balance{}, err
	}
	b := Balance{Available: big.NewInt(book.Available), Held: big.NewInt(book.Held)}
	for _, h := range book.Leases {
		b.Available.Add(b.Available, big.NewInt(h.Amount-h.Drawn))
		b.Held.Sub(b.Held, big.NewInt(h.Amount))
	}
	return b, nil
}

// KeyUsage is Ledger.KeyUsage with the draws on k's open leases counted as
// spent, and their leases not as held.
func (ls *Leases) KeyUsage(ctx context.Context, payer common.Address, k Key) (store.KeyUsage, error) {
	ls.Flush(ctx)
	u, err := ls.l.KeyUsage(ctx, k)
	if err != nil {
		return store.KeyUsage{}, err
	}
	book, err := ls.openLeases(ctx, payer)
	if err != nil {
		return store.KeyUsage{}, err
	}
	for _, h := range book.Leases {
		if h.KeyID != k.ID {
			continue
		}
		u.Held, u.Spent = max(u.Held-h.Amount, 0), u.Spent+h.Drawn
		if u.Period > 0 && h.KeyPeriod == u.Period && h.KeyPeriodStart.Equal(u.PeriodStart) {
			u.PeriodHeld, u.PeriodSpent = max(u.PeriodHeld-h.Amount, 0), u.PeriodSpent+h.Drawn
		}
	}
	return u, nil
}

func (ls *Leases) openLeases(ctx context.Context, payer common.Address) (store.LeaseBook, error) {
	o, err := owner(payer)
	if err != nil {
		return store.LeaseBook{}, err
	}
	book, err := ls.st.OpenLeases(ctx, o, ls.asset)
	if err != nil {
		return store.LeaseBook{}, fmt.Errorf("ledger: open leases of %s: %w", o, err)
	}
	return book, nil
}

// Quiesce writes every draw and closes every lease with no call in flight,
// so that the store's books show every charge; calls go on, on new leases.
// A lease being opened (ahead of need, say) is waited for and closed too,
// until ctx ends. It reports whether every lease was closed.
func (ls *Leases) Quiesce(ctx context.Context) bool {
	ok := ls.waitOpenings(ctx)
	ok = ls.Flush(ctx) && ok
	ls.closeRetired(ctx, true)
	ls.mu.Lock()
	defer ls.mu.Unlock()
	for _, kl := range ls.keys {
		if len(kl.retired) > 0 || kl.cur != nil || kl.next != nil {
			ok = false
		}
	}
	return ok
}

// waitOpenings waits until the leases being opened now are placed or have
// failed, or until ctx ends, and reports whether they all ended.
func (ls *Leases) waitOpenings(ctx context.Context) bool {
	ls.mu.Lock()
	var opening []<-chan struct{}
	for _, kl := range ls.keys {
		if kl.opening != nil {
			opening = append(opening, kl.opening)
		}
	}
	ls.mu.Unlock()
	for _, done := range opening {
		select {
		case <-done:
		case <-ctx.Done():
			return false
		}
	}
	return true
}

// Close stops admitting calls, waits (until ctx ends) for the calls in
// flight, writes every draw and closes every lease. Call it once Run has
// returned or was never started.
func (ls *Leases) Close(ctx context.Context) error {
	ls.mu.Lock()
	ls.closed = true
	ls.mu.Unlock()
	for {
		ls.mu.Lock()
		inFlight := ls.pending - len(ls.queue) + ls.opening
		if ls.issuing {
			inFlight++ // a call writing marks: it is refused, or admitted, soon
		}
		ls.mu.Unlock()
		if inFlight == 0 {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("ledger: close leases: %d calls or openings still in flight: %w", inFlight, ctx.Err())
		case <-time.After(ls.cfg.FlushInterval):
		}
		ls.Flush(ctx)
	}
	if !ls.Flush(ctx) {
		return errors.New("ledger: close leases: draws could not be written; their leases end at their TTL")
	}
	ls.closeRetired(ctx, true)
	return nil
}
