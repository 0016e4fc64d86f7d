// Package ledger is the credits domain (docs/DESIGN.md D16): top-ups
// credited once per on-chain settlement, a hold of the maximum cost of each
// credit-paid call at admission, the capture of its actual cost
// from the usage the upstream reported, and the release of a hold when
// nothing was delivered. It sits on store.Ledger, which keeps the books
// double-entry and append-only and makes every operation atomic and
// idempotent across replicas; this package adds the prices, the wallet
// addresses and the big-integer amounts of the wire. It does no HTTP.
//
// What is on-chain and what is not: a top-up is an x402 payment settled
// on-chain, and Credit records it once under its settlement reference; every
// hold, capture and release after it is an off-chain ledger entry.
//
// The call of a credit-paid request, as the gateway makes it:
//
//	h, err := l.Reserve(ctx, ledger.Call{...})   // before the upstream; refused -> 402 with the numbers
//	...upstream...
//	c, err := l.Charge(ctx, h.ID, usage, price)  // the actual cost (a cut stream: what was delivered)
//	c, err := l.Release(ctx, h.ID)               // or: nothing delivered, nothing charged
//
// Amounts cross this package as *big.Int atomic units of the asset; the store
// keeps int64 and refuses any single amount above store.MaxAmount.
package ledger

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/llm4agents/llm4agents/internal/chat"
	"github.com/llm4agents/llm4agents/internal/pricing"
	"github.com/llm4agents/llm4agents/internal/store"
)

// DefaultHoldTTL is how long a hold lasts, when Config gives none, before the
// sweep may release it: longer than any call the gateway lets run.
const DefaultHoldTTL = 15 * time.Minute

// sweepBatch is how many expired holds one sweep write releases.
const sweepBatch = 200

// Config configures a Ledger.
type Config struct {
	// Asset is the asset credits are kept in, as AssetID names it.
	Asset string
	// HoldTTL is how long a hold lasts before the sweep may release it; it
	// must be longer than the longest call (upstream timeout plus the time
	// to capture). Zero means DefaultHoldTTL.
	HoldTTL time.Duration
}

// Ledger is the credits ledger of one asset. Its methods are safe for
// concurrent use, as the store's are.
type Ledger struct {
	st  store.Ledger
	cfg Config
	log *slog.Logger
	// lostCalls sums the bounds the sweep reported for the leases it
	// ended (see LostCalls).
	lostCalls atomic.Int64
}

// New returns a Ledger on st. A nil log discards log output.
func New(st store.Ledger, cfg Config, log *slog.Logger) (*Ledger, error) {
	if st == nil {
		return nil, errors.New("ledger: no store")
	}
	if !store.ValidAsset(cfg.Asset) {
		return nil, fmt.Errorf("ledger: asset %q is not a lower-case CAIP-19 asset id (see AssetID)", cfg.Asset)
	}
	if cfg.HoldTTL == 0 {
		cfg.HoldTTL = DefaultHoldTTL
	}
	if cfg.HoldTTL < time.Second || cfg.HoldTTL > store.MaxHoldTTL {
		return nil, fmt.Errorf("ledger: hold TTL %v is outside [1s, %v]", cfg.HoldTTL, store.MaxHoldTTL)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Ledger{st: st, cfg: cfg, log: log.With("component", "ledger")}, nil
}

// AssetID names an ERC-20 token on an EVM network (CAIP-2, "eip155:8453")
// the way the ledger keys its accounts: the CAIP-19 asset id, lower-case.
func AssetID(network string, token common.Address) string {
	return strings.ToLower(network + "/erc20:" + token.Hex())
}

// SettlementRef is the operation id of a top-up: the network, the settlement
// transaction and the index of the token's Transfer log in it, lower-case,
// so that a settlement seen twice (a retry, a replica, a reconciler) credits
// once.
func SettlementRef(network string, tx common.Hash, logIndex uint) string {
	return strings.ToLower(fmt.Sprintf("%s:%s:%d", network, tx.Hex(), logIndex))
}

// owner is the ledger's owner name for a payer: its lower-case hex address.
func owner(payer common.Address) (string, error) {
	if payer == (common.Address{}) {
		return "", errors.New("zero payer address")
	}
	return strings.ToLower(payer.Hex()), nil
}

// amount converts a non-negative amount to the store's int64, refusing one
// above store.MaxAmount.
func amount(what string, a *big.Int) (int64, error) {
	switch {
	case a == nil:
		return 0, fmt.Errorf("no %s", what)
	case a.Sign() < 0:
		return 0, fmt.Errorf("%s %s is negative", what, a)
	case !a.IsInt64() || a.Int64() > store.MaxAmount:
		return 0, fmt.Errorf("%s %s is above the ledger's bound of %d", what, a, store.MaxAmount)
	}
	return a.Int64(), nil
}

// TopUp credits payer with amount (atomic units, > 0) for the settlement ref
// (SettlementRef), once: a second TopUp with the same ref and amount returns
// the first entry; with another amount or payer it is store.ErrConflict.
// Call it only once the settlement is final (D17).
func (l *Ledger) TopUp(ctx context.Context, ref string, payer common.Address, amt *big.Int) (_ store.Entry, err error) {
	defer wrap(&err, "top up %s", ref)
	o, err := owner(payer)
	if err != nil {
		return store.Entry{}, err
	}
	n, err := amount("amount", amt)
	if err != nil {
		return store.Entry{}, err
	}
	e, err := l.st.Credit(ctx, ref, o, l.cfg.Asset, n)
	if err != nil {
		return store.Entry{}, err
	}
	l.log.InfoContext(ctx, "credited top-up", "ref", ref, "payer", o, "amount", n, "seq", e.Seq)
	return e, nil
}

// Key is an API key's limits as the ledger enforces them on
// every hold drawn through it, atomically across replicas.
type Key struct {
	ID string
	// TotalCap bounds what the key may spend over its life, nil for no cap.
	TotalCap *big.Int
	// PeriodCap bounds what it may spend per Period (windows aligned to the
	// Unix epoch: a day is a UTC day), nil for no cap.
	PeriodCap *big.Int
	Period    time.Duration
}

// KeyOf is key's caps as the ledger takes them: nil for no cap.
func KeyOf(key store.APIKey) *Key {
	k := &Key{ID: key.ID}
	if key.TotalCap != store.NoCap {
		k.TotalCap = big.NewInt(key.TotalCap)
	}
	if key.PeriodCap != store.NoCap {
		k.PeriodCap, k.Period = big.NewInt(key.PeriodCap), key.Period
	}
	return k
}

func (k *Key) limits() (*store.KeyLimits, error) {
	if k == nil {
		return nil, nil
	}
	capOf := func(what string, c *big.Int) (int64, error) {
		switch {
		case c == nil:
			return store.NoCap, nil
		case c.Sign() < 0:
			return 0, fmt.Errorf("key %s %s is negative", what, c)
		case !c.IsInt64():
			return store.NoCap, nil // no balance can reach it
		}
		return c.Int64(), nil
	}
	total, err := capOf("total cap", k.TotalCap)
	if err != nil {
		return nil, err
	}
	period, err := capOf("period cap", k.PeriodCap)
	if err != nil {
		return nil, err
	}
	return &store.KeyLimits{ID: k.ID, TotalCap: total, PeriodCap: period, Period: k.Period}, nil
}

// Call is a credit-paid call at admission.
type Call struct {
	// RequestID identifies the call; it is the hold's id, so a retry of the
	// admission with the same id holds once.
	RequestID    string
	Payer        common.Address
	Key          *Key // nil when the owner pays without a key
	PromptTokens int64
	// OutputBound is the output tokens the call may produce
	// (pricing.OutputBound: max_tokens or the model's default cap, times n).
	OutputBound int64
	Price       pricing.Price
}

// MaxCost is the most a call with promptTokens in and outputBound out can
// cost: the exact price, rounded up to the atomic unit, not to the cent
// (credits are drawn down per token). It is the hold (D16): a call can never
// run out of credit mid-stream.
func MaxCost(promptTokens, outputBound int64, p pricing.Price) *big.Int {
	return pricing.Cost(chat.Usage{PromptTokens: promptTokens, CompletionTokens: outputBound}, p)
}

// Reserve holds the maximum cost of c on the payer's balance, within its
// key's caps. A refusal is an *store.InsufficientError (errors.Is
// store.ErrInsufficient) with the balance or remaining cap and the maximum
// cost: the gateway answers 402 with those numbers and calls no upstream.
// Calling Reserve again with the same request id returns the same hold.
func (l *Ledger) Reserve(ctx context.Context, c Call) (_ store.Hold, err error) {
	defer wrap(&err, "reserve %s", c.RequestID)
	o, err := owner(c.Payer)
	if err != nil {
		return store.Hold{}, err
	}
	maxCost := MaxCost(c.PromptTokens, c.OutputBound, c.Price)
	n, err := amount("maximum cost", maxCost)
	if err != nil {
		return store.Hold{}, err
	}
	key, err := c.Key.limits()
	if err != nil {
		return store.Hold{}, err
	}
	return l.st.Hold(ctx, store.HoldRequest{ID: c.RequestID, Owner: o, Asset: l.cfg.Asset, Amount: n, TTL: l.cfg.HoldTTL, Key: key})
}

// Charge is the outcome of a call for the buyer's receipt (D18).
type Charge struct {
	Hold store.Hold
	// Cost is the call's cost from its usage; Charged what the payer paid of
	// it (never more than the hold); Loss the rest, the operator's (D16).
	Cost, Charged, Loss *big.Int
	// BalanceAfter is the payer's spendable balance right after this charge
	// (the receipt's balanceAfter), Seq its ledger entry (ledgerSeq) and At
	// its time.
	BalanceAfter *big.Int
	Seq          int64
	At           time.Time
	// Ref is a leased call's reference (Ticket.Ref), nil for a call held
	// on its own: its receipt's ledgerSeq, in place of Seq.
	Ref *big.Int
}

func charge(h store.Hold, e store.Entry) Charge {
	c := Charge{
		Hold: h, Cost: big.NewInt(h.Actual), Charged: big.NewInt(h.Captured), Loss: big.NewInt(h.Loss),
		BalanceAfter: new(big.Int), Seq: e.Seq, At: e.CreatedAt,
	}
	for _, p := range e.Postings {
		if p.Account == store.UserAccount(h.Owner) {
			c.BalanceAfter.SetInt64(p.BalanceAfter)
		}
	}
	return c
}

// Charge captures the cost of the usage the upstream reported for the call
// held by holdID: the payer pays that cost up to the hold, and gets the rest
// of the hold back; a cost above the hold is recorded as the operator's loss
// and never billed (D16). For a stream cut off mid-way, u is what was
// delivered, counted; for one cut off before any token, call Release.
// Charging again for the same cost returns the same Charge; for another it
// is store.ErrConflict, as is charging a released or expired hold.
func (l *Ledger) Charge(ctx context.Context, holdID string, u chat.Usage, p pricing.Price) (_ Charge, err error) {
	defer wrap(&err, "charge %s", holdID)
	h, e, err := l.st.Capture(ctx, holdID, l.actual(ctx, holdID, u, p))
	if err != nil {
		return Charge{}, err
	}
	l.warnLoss(ctx, h)
	return charge(h, e), nil
}

// actual is what a capture records for usage u at price p: its cost, or
// the ledger's bound for a cost beyond it (all of it loss: recording as
// much as the store takes rather than leave the hold open).
func (l *Ledger) actual(ctx context.Context, holdID string, u chat.Usage, p pricing.Price) int64 {
	cost := pricing.Cost(u, p)
	actual, err := amount("cost", cost)
	if err != nil {
		l.log.WarnContext(ctx, "call cost above the ledger's bound; recording the bound", "hold", holdID, "cost", cost.String())
		return store.MaxAmount
	}
	return actual
}

func (l *Ledger) warnLoss(ctx context.Context, h store.Hold) {
	if h.Loss > 0 {
		l.log.WarnContext(ctx, "call cost more than its hold; the rest is the operator's loss",
			"hold", h.ID, "held", h.Amount, "cost", h.Actual, "loss", h.Loss)
	}
}

// Release ends the call held by holdID with nothing charged: nothing was
// delivered. Releasing again returns the same Charge; releasing a charged
// hold is store.ErrConflict.
func (l *Ledger) Release(ctx context.Context, holdID string) (_ Charge, err error) {
	defer wrap(&err, "release %s", holdID)
	h, e, err := l.st.Release(ctx, holdID)
	if err != nil {
		return Charge{}, err
	}
	return charge(h, e), nil
}

// Balance is a payer's credit.
type Balance struct {
	Available *big.Int // what it may spend
	Held      *big.Int // reserved for its calls in flight
}

// Balance returns payer's balance.
func (l *Ledger) Balance(ctx context.Context, payer common.Address) (_ Balance, err error) {
	defer wrap(&err, "balance of %s", payer.Hex())
	o, err := owner(payer)
	if err != nil {
		return Balance{}, err
	}
	avail, err := l.st.Balance(ctx, store.UserAccount(o), l.cfg.Asset)
	if err != nil {
		return Balance{}, err
	}
	held, err := l.st.Balance(ctx, store.HeldAccount(o), l.cfg.Asset)
	if err != nil {
		return Balance{}, err
	}
	return Balance{Available: big.NewInt(avail), Held: big.NewInt(held)}, nil
}

// Statement returns up to limit (1..store.MaxEntries) entries of payer's
// spendable account after the entry afterSeq (0 for the first page), oldest
// first: top-ups, holds and their captures and releases.
func (l *Ledger) Statement(ctx context.Context, payer common.Address, afterSeq int64, limit int) (_ []store.Entry, err error) {
	defer wrap(&err, "statement of %s", payer.Hex())
	o, err := owner(payer)
	if err != nil {
		return nil, err
	}
	return l.st.Entries(ctx, store.UserAccount(o), l.cfg.Asset, afterSeq, limit)
}

// LeaseDraws returns what the recorded draws on each of payer's open
// credit leases charged, by lease: spent, and captured when the lease ends
// (docs/DESIGN.md D28). It is empty for a store that keeps no leases.
func (l *Ledger) LeaseDraws(ctx context.Context, payer common.Address) (_ map[string]int64, err error) {
	defer wrap(&err, "lease draws of %s", payer.Hex())
	out := map[string]int64{}
	ls, ok := l.st.(interface {
		OpenLeases(ctx context.Context, owner, asset string) (store.LeaseBook, error)
	})
	if !ok {
		return out, nil
	}
	o, err := owner(payer)
	if err != nil {
		return nil, err
	}
	book, err := ls.OpenLeases(ctx, o, l.cfg.Asset)
	if err != nil {
		return nil, err
	}
	for _, h := range book.Leases {
		out[h.ID] = h.Drawn
	}
	return out, nil
}

// KeyUsage returns what k has spent and holds, with its current period.
func (l *Ledger) KeyUsage(ctx context.Context, k Key) (_ store.KeyUsage, err error) {
	defer wrap(&err, "key usage %s", k.ID)
	var period time.Duration
	if k.PeriodCap != nil {
		period = k.Period
	}
	return l.st.KeyUsage(ctx, k.ID, l.cfg.Asset, period)
}

// SweepExpired releases every hold whose TTL has passed, in batches, and
// returns how many it released. A hold expires only if the process that
// took it died or lost track of it, so a sweep that released any logs a
// warning with the count.
//
// A credit lease it ends had a replica that died (D28): the calls that
// replica answered and had not written are free, the operator's loss. The
// store bounds them for each lease by the positions the lease had issued
// without a draw; each bound is logged and added to LostCalls here, by the
// one process whose sweep ended the lease.
func (l *Ledger) SweepExpired(ctx context.Context) (int, error) {
	total := 0
	for {
		swept, err := l.st.ReleaseExpiredHolds(ctx, sweepBatch)
		total += swept.Released
		for _, lost := range swept.Lost {
			l.lostCalls.Add(lost.Calls)
			l.log.WarnContext(ctx, "credit lease ended by the sweep: calls its replica answered and never wrote are free (the operator's loss)",
				"lease", lost.LeaseID, "key_id", lost.KeyID, "lost_calls_bound", lost.Calls)
		}
		if err != nil {
			return total, fmt.Errorf("ledger: sweep expired holds: %w", err)
		}
		if swept.Released < sweepBatch {
			if total > 0 {
				l.log.WarnContext(ctx, "released expired holds", "count", total)
			}
			return total, nil
		}
	}
}

// LostCalls is the sum, since the process started, of the bounds of the
// calls lost by the credit leases this process's sweep ended (see
// store.LostCalls): an upper bound of the leased calls answered and never
// billed because their replica died before writing them.
func (l *Ledger) LostCalls() int64 { return l.lostCalls.Load() }

// wrap prefixes a non-nil *errp with the package and the operation.
func wrap(errp *error, format string, args ...any) {
	if *errp != nil {
		*errp = fmt.Errorf("ledger: %s: %w", fmt.Sprintf(format, args...), *errp)
	}
}
