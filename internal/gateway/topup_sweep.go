package gateway

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"strings"
	"sync"
	"time"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/common"

	"github.com/llm4agents/llm4agents/internal/paywall"
	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/x402/evm/exact"
)

// The top-up sweep: a top-up whose settlement was recorded but not
// credited (the process died between the two, the receipt was not final
// yet, the chain or the ledger was down) is credited by the next
// presentation of the same PAYMENT-SIGNATURE (topup.go). A buyer who gives up
// would lose the credit; the sweep closes that window. It lists the claims
// that carry the top-up marker and a transaction (settled, or pending), and
// for each rebuilds the authorization from what the claim holds (the claim
// key is exact.Key(network, token, from, nonce), the amount the claim's, the
// payee ours), reads the transaction's receipt with the finality rule of the
// request path (settlementRef), and credits with ledger.TopUp under the same
// reference, so that the sweep and a retry credit once between them. A
// pending claim whose transaction the node does not know (replaced by a fee
// bump, D19) is credited through the transaction that used its
// authorization, found by the token's AuthorizationUsed log. Once a claim
// has expired, only the sweep can credit it: the purge of expired claims
// waits for a sweep that left none of them waiting (SweepBeforePurge).

// stagedLister is what the sweep needs of the payments store besides
// store.Payments: the claims whose staged response is of one content type,
// settled or pending with a transaction, oldest first, after a cursor
// (CreatedAt, Key). The SQL stores have it; Redis, which holds no credits,
// does not.
type stagedLister interface {
	StagedPayments(ctx context.Context, contentType string, afterCreated time.Time, afterKey string, limit int) ([]store.PaymentClaim, error)
}

const (
	// sweepPage is how many claims one listing reads.
	sweepPage = 200
	// sweepClaimTimeout bounds the chain reads and writes of one claim.
	sweepClaimTimeout = 3 * store.DefaultTimeout
	// sweepMemory is how long past its claim's expiry a claim the sweep is
	// done with stays remembered: an expired claim is listed until the
	// store's purge deletes it (hourly in serve), and should not be read from
	// the chain every minute until then.
	sweepMemory = 2 * time.Hour
	// maxSweepMemory bounds what the sweep remembers. Past it, claims are
	// checked again on later sweeps, which credits nothing twice.
	maxSweepMemory = 100_000
)

// TopUpSweepConfig is what a TopUpSweep needs: the payment terms of the
// gateway it sweeps for (the same values as its Config), its credits and
// its payments store.
type TopUpSweepConfig struct {
	Network string // CAIP-2, eip155:<id>
	Asset   string // token address
	PayTo   string
	// Credits gives the ledger to credit, the chain to read and the
	// confirmations to wait for.
	Credits *Credits
	// Payments holds the claims; it must also list them by their staged
	// content type (the SQL stores do).
	Payments store.Payments
	// Now is the sweep's clock, for what it remembers and for telling an
	// expired claim; nil is time.Now.
	Now func() time.Time
}

// TopUpSweep credits settled top-ups nobody came back for. Its zero value is
// not usable: build it with NewTopUpSweep. It is safe for concurrent use;
// sweeps run one at a time.
type TopUpSweep struct {
	network string
	asset   common.Address
	payTo   common.Address
	credits *Credits
	claims  store.Payments
	list    stagedLister
	now     func() time.Time
	log     *slog.Logger

	mu sync.Mutex // held for a whole sweep; guards done
	// done remembers the claims (key and transaction) the sweep is finished
	// with, credited or hopeless, until the time it maps to.
	done map[string]time.Time
}

// NewTopUpSweep returns the sweep of cfg's top-ups. It fails when cfg has no
// ledger or chain, or its store cannot list claims by their staged content
// type.
func NewTopUpSweep(cfg TopUpSweepConfig, log *slog.Logger) (*TopUpSweep, error) {
	c := cfg.Credits
	switch {
	case c == nil || c.Ledger == nil || c.Chain == nil:
		return nil, errors.New("top-up sweep: credits need a ledger and a chain")
	case cfg.Network == "":
		return nil, errors.New("top-up sweep: no network")
	case cfg.Payments == nil:
		return nil, errors.New("top-up sweep: no payments store")
	}
	asset, err := exact.ParseAddress(cfg.Asset)
	if err != nil {
		return nil, fmt.Errorf("top-up sweep: asset: %w", err)
	}
	payTo, err := exact.ParseAddress(cfg.PayTo)
	if err != nil {
		return nil, fmt.Errorf("top-up sweep: payTo: %w", err)
	}
	list, ok := cfg.Payments.(stagedLister)
	if !ok {
		return nil, fmt.Errorf("top-up sweep: the payments store (%T) cannot list claims by their staged content type", cfg.Payments)
	}
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	return &TopUpSweep{
		network: cfg.Network, asset: asset, payTo: payTo, credits: c, claims: cfg.Payments, list: list,
		now: now, log: log.With("component", "topup_sweep"), done: map[string]time.Time{},
	}, nil
}

// sweepOutcome is what became of one claim.
type sweepOutcome int

const (
	sweptCredited sweepOutcome = iota // credited now (or found credited)
	sweptLater                        // not final or not mined yet: next sweep
	sweptNever                        // will never credit: skipped for good
)

const (
	// sweepMaxFailures is how many claims in a row may fail on the chain or
	// the ledger before a sweep stops: one bad claim is skipped until the
	// next sweep, so that it cannot starve the claims listed after it, but
	// several in a row mean the chain or the ledger is down.
	sweepMaxFailures = 3
	// sweepGiveUp is how long past its claim's expiry a claim may wait for
	// its credit before the sweep gives it up: until then it holds back the
	// purge of expired claims (SweepBeforePurge), and a claim that cannot be
	// read in a week must not hold it back for ever.
	sweepGiveUp = 7 * 24 * time.Hour
	// purgeLead is how soon a claim must expire, at the end of the sweep
	// that precedes a purge, to count as expired for that purge: the purge
	// runs after the sweep and takes time of its own.
	purgeLead = 5 * time.Minute
)

// SweepTopUps credits, once, every listed top-up claim whose transaction is
// final and pays its authorization, and returns how many it credited. A
// claim credited before (by a retry, or by a sweep before a restart) counts
// as credited again the first time this sweep sees it: ledger.TopUp answers
// it without a second credit. Claims it is done with are remembered and
// skipped by later sweeps. A claim that fails on the chain or the ledger is
// logged and left for the next sweep; the sweep stops at a failure of the
// listing or after sweepMaxFailures such failures in a row, returning what
// it credited until then and the error; the next sweep tries again.
func (w *TopUpSweep) SweepTopUps(ctx context.Context) (credited int, err error) {
	credited, _, err = w.run(ctx)
	return credited, err
}

// SweepBeforePurge sweeps as SweepTopUps does and returns how many expired
// claims (or claims about to expire, purgeLead) it left waiting for their
// credit: not final yet, or not readable. Expired payment claims may be
// purged only when it returns 0 and no error: once expired, a top-up's claim
// is credited by the sweep alone (a retry no longer finds it), and a claim
// purged before its credit is a payment never credited. A claim still
// waiting sweepGiveUp past its expiry is given up, logged at Error, and no
// longer counted.
func (w *TopUpSweep) SweepBeforePurge(ctx context.Context) (waiting int, err error) {
	_, waiting, err = w.run(ctx)
	return waiting, err
}

// run is one sweep: what it credited, how many expired claims it left
// waiting, and the failure that stopped it.
func (w *TopUpSweep) run(ctx context.Context) (credited, waiting int, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := w.now()
	for k, until := range w.done {
		if !now.Before(until) {
			delete(w.done, k)
		}
	}
	var after time.Time
	var afterKey string
	failures := 0
	for {
		page, err := w.list.StagedPayments(ctx, paywall.TopUpMarker, after, afterKey, sweepPage)
		if err != nil {
			return credited, waiting, fmt.Errorf("list top-up claims: %w", err)
		}
		for _, c := range page {
			if _, ok := w.done[doneKey(c)]; ok {
				continue
			}
			out, err := w.sweep(ctx, c, now)
			if err != nil {
				failures++
				if failures >= sweepMaxFailures {
					return credited, waiting, fmt.Errorf("stopped after %d top-up claims failed in a row: %w", failures, err)
				}
				w.log.Warn("a top-up claim failed; left for the next sweep", "key", c.Key, "tx", c.TxHash, "err", err)
			} else {
				failures = 0
			}
			if out == sweptLater && !now.Before(c.ExpiresAt.Add(sweepGiveUp)) {
				// Only the key and the transaction: what an operator needs to
				// credit it by hand, and no secret.
				w.log.Error("gave up a top-up claim still uncredited a week past its expiry", "key", c.Key, "tx", c.TxHash)
				out = sweptNever
			}
			switch out {
			case sweptCredited:
				credited++
				w.remember(c, now)
			case sweptNever:
				w.remember(c, now)
			case sweptLater:
				if !w.now().Add(purgeLead).Before(c.ExpiresAt) {
					waiting++
				}
			}
		}
		if len(page) < sweepPage {
			return credited, waiting, nil
		}
		last := page[len(page)-1]
		after, afterKey = last.CreatedAt, last.Key
	}
}

// doneKey names a claim with its transaction: a claim whose pending
// transaction was replaced is a new one to check.
func doneKey(c store.PaymentClaim) string { return c.Key + " " + c.TxHash }

func (w *TopUpSweep) remember(c store.PaymentClaim, now time.Time) {
	if len(w.done) >= maxSweepMemory {
		return
	}
	until := c.ExpiresAt
	if until.Before(now) {
		until = now
	}
	w.done[doneKey(c)] = until.Add(sweepMemory)
}

// sweep credits one claim. The error is a failure of the chain or the
// ledger on this claim, answered sweptLater: the caller goes on with the next
// claim unless several fail in a row. Anything wrong with the claim itself
// is logged and answered sweptNever.
func (w *TopUpSweep) sweep(ctx context.Context, c store.PaymentClaim, now time.Time) (sweepOutcome, error) {
	a, err := w.authorization(c)
	if err != nil {
		w.log.Warn("skipped a top-up claim that does not describe a payment to us", "key", c.Key, "tx", c.TxHash, "err", err)
		return sweptNever, nil
	}
	ctx, cancel := context.WithTimeout(ctx, sweepClaimTimeout)
	defer cancel()
	ref, err := settlementRef(ctx, w.credits, w.network, w.asset, c.TxHash, a)
	if errors.Is(err, errNotMined) && c.State == store.PaymentPending {
		// The claim's transaction may have been replaced (a fee bump, D19):
		// the chain then knows the authorization used by another one.
		tx, found, ferr := w.replacement(ctx, a, c.ExpiresAt)
		switch {
		case errors.Is(ferr, errUnusable):
			// Otherwise it would hold back the purge until given up.
			w.log.Warn("skipped a pending top-up claim whose authorization expired unused", "key", c.Key, "tx", c.TxHash)
			return sweptNever, nil
		case ferr != nil:
			return sweptLater, fmt.Errorf("top-up %s: %w", c.Key, ferr)
		case found:
			w.log.Info("found the transaction that replaced a pending top-up's", "key", c.Key, "tx", c.TxHash, "replacement", tx)
			c.TxHash = tx // the caller remembers the claim as listed
			ref, err = settlementRef(ctx, w.credits, w.network, w.asset, c.TxHash, a)
		}
	}
	switch {
	case errors.Is(err, errNotFinal):
		w.log.Debug("top-up settlement not final yet", "key", c.Key, "tx", c.TxHash)
		return sweptLater, nil
	case errors.Is(err, errUnpaid):
		w.log.Warn("skipped a top-up claim whose transaction does not pay it", "key", c.Key, "tx", c.TxHash, "err", err)
		return sweptNever, nil
	case err != nil:
		return sweptLater, fmt.Errorf("top-up %s: %w", c.Key, err)
	}
	if c.State == store.PaymentPending && now.Before(c.ExpiresAt) {
		// Paid and final: the claim is recorded settled under its own fence,
		// as the request that resolves a pending top-up does (resolveTopUp),
		// so that a retry finds it settled and only credits. The credit does
		// not depend on this write: it rests on the chain and the marker.
		switch err := w.claims.UpdatePayment(ctx, c.Key, c.Fence, store.PaymentSettled, c.TxHash); {
		case errors.Is(err, store.ErrFenced), errors.Is(err, store.ErrNotFound):
			w.log.Info("a pending top-up claim moved on before the sweep recorded it settled", "key", c.Key, "tx", c.TxHash, "err", err)
		case err != nil:
			w.log.Warn("record a pending top-up claim settled", "key", c.Key, "tx", c.TxHash, "err", err)
		}
	}
	e, err := w.credits.Ledger.TopUp(ctx, ref, a.From, a.Value)
	switch {
	case errors.Is(err, store.ErrConflict):
		// The reference was credited with another payer or amount: the
		// ledger keeps the first; nothing here may override it.
		w.log.Warn("skipped a top-up claim whose settlement was credited otherwise", "key", c.Key, "tx", c.TxHash, "err", err)
		return sweptNever, nil
	case err != nil:
		return sweptLater, fmt.Errorf("credit top-up %s: %w", c.Key, err)
	}
	w.log.Info("credited a settled top-up", "key", c.Key, "tx", c.TxHash, "amount", a.Value.String(), "seq", e.Seq)
	return sweptCredited, nil
}

// replacedLookback is how many blocks back from the head the sweep looks
// for the transaction that used a pending claim's authorization: a claim is
// hours old, and a week past its expiry it is given up (sweepGiveUp); node
// providers cap the range of one log query, often at 10,000 blocks.
const replacedLookback = 10_000

// unusableAfter is how long past its claim's expiry (validBefore plus
// store.ClaimRetention's margin) the chain's head must be before an unused
// authorization is taken as never usable: the head's state then includes
// every block that could still have accepted it, with room for a reorg.
const unusableAfter = time.Hour

// errUnusable: the authorization of a pending claim is unused, and the
// chain is past the claim's expiry: it will never pay.
var errUnusable = errors.New("authorization expired unused")

// replacement finds the transaction that used a's authorization, when the
// token says it is used: by its AuthorizationUsed(from, nonce) log among
// the last replacedLookback blocks. Not used: errUnusable if the chain's
// head is unusableAfter past expires, else not found, for a later sweep, as
// is a used authorization without such a log in range.
func (w *TopUpSweep) replacement(ctx context.Context, a *exact.Authorization, expires time.Time) (string, bool, error) {
	// The head first: the state read after it is at least as recent.
	hd, err := w.credits.Chain.HeaderByNumber(ctx, nil)
	if err != nil {
		return "", false, fmt.Errorf("chain head: %w", err)
	}
	used, err := exact.AuthorizationState(ctx, w.credits.Chain, w.asset, a.From, a.Nonce)
	switch {
	case err != nil:
		return "", false, err
	case !used && hd.Time >= uint64(max(expires.Add(unusableAfter).Unix(), 0)):
		return "", false, errUnusable
	case !used:
		return "", false, nil
	}
	head, err := w.credits.Chain.BlockNumber(ctx)
	if err != nil {
		return "", false, fmt.Errorf("chain head: %w", err)
	}
	from := uint64(0)
	if head > replacedLookback {
		from = head - replacedLookback
	}
	logs, err := w.credits.Chain.FilterLogs(ctx, ethereum.FilterQuery{
		FromBlock: new(big.Int).SetUint64(from), ToBlock: new(big.Int).SetUint64(head), Addresses: []common.Address{w.asset},
		Topics: [][]common.Hash{{exact.TopicAuthorizationUsed}, {common.BytesToHash(a.From[:])}, {a.Nonce}},
	})
	if err != nil {
		return "", false, fmt.Errorf("authorization logs: %w", err)
	}
	for _, l := range logs {
		if !l.Removed && l.Address == w.asset {
			return l.TxHash.Hex(), true, nil
		}
	}
	return "", false, nil
}

// authorization rebuilds, from a top-up claim, the facts of its
// authorization that the credit rests on: from and nonce from the claim key,
// which must name this gateway's network and token; the value, which the
// claim and its marker must agree on; and the payee, ours. Only a claim
// with the top-up marker qualifies.
func (w *TopUpSweep) authorization(c store.PaymentClaim) (*exact.Authorization, error) {
	if !paywall.IsTopUp(c) {
		return nil, errors.New("not a top-up claim")
	}
	if c.State != store.PaymentSettled && c.State != store.PaymentPending {
		return nil, fmt.Errorf("claim is %s", c.State)
	}
	if c.Network != w.network {
		return nil, fmt.Errorf("claim is for network %q", truncate(c.Network, 80))
	}
	from, nonce, err := parseClaimKey(c.Key, w.network, w.asset)
	if err != nil {
		return nil, err
	}
	if !strings.EqualFold(c.Payer, from.Hex()) {
		return nil, fmt.Errorf("claim names payer %q, its key %s", truncate(c.Payer, 80), from.Hex())
	}
	value, err := parseAtomic(c.Amount)
	if err != nil || value.Sign() <= 0 {
		return nil, fmt.Errorf("claim amount %q is not a positive amount", truncate(c.Amount, 80))
	}
	if value.Cmp(big.NewInt(store.MaxAmount)) > 0 {
		// The ledger would refuse it on every sweep: never creditable.
		return nil, fmt.Errorf("claim amount %s is above the ledger's bound of %d", value, store.MaxAmount)
	}
	marked, err := parseTopUp(c.Staged.Body)
	if err != nil {
		return nil, fmt.Errorf("top-up marker: %w", err)
	}
	if marked != c.Amount {
		return nil, fmt.Errorf("top-up marker of %q, claim of %s", truncate(marked, 80), c.Amount)
	}
	// The validity window is not in the claim, and the credit does not rest
	// on it: the chain accepted the authorization.
	return &exact.Authorization{From: from, To: w.payTo, Value: value, Nonce: nonce,
		ValidAfter: new(big.Int), ValidBefore: new(big.Int)}, nil
}

// parseClaimKey parses a claim key exactly as exact.Key writes it,
// network/<token>/<from>/<nonce> in lower-case hex without 0x, and returns
// from and nonce, refusing a key for another network or token.
func parseClaimKey(key, network string, token common.Address) (common.Address, common.Hash, error) {
	bad := func(why string) (common.Address, common.Hash, error) {
		return common.Address{}, common.Hash{}, fmt.Errorf("claim key %q %s", truncate(key, 200), why)
	}
	rest, ok := strings.CutPrefix(key, network+"/")
	if !ok {
		return bad("is not for network " + network)
	}
	parts := strings.Split(rest, "/")
	if len(parts) != 3 {
		return bad("does not have the form network/token/from/nonce")
	}
	word := func(s string, n int) ([]byte, bool) {
		b, err := hex.DecodeString(s)
		return b, err == nil && len(b) == n && s == strings.ToLower(s)
	}
	tk, ok1 := word(parts[0], common.AddressLength)
	fr, ok2 := word(parts[1], common.AddressLength)
	nc, ok3 := word(parts[2], common.HashLength)
	switch {
	case !ok1 || !ok2 || !ok3:
		return bad("is not lower-case hex of a token, a payer and a nonce")
	case common.BytesToAddress(tk) != token:
		return bad("is not for token " + token.Hex())
	}
	from, nonce := common.BytesToAddress(fr), common.BytesToHash(nc)
	if from == (common.Address{}) {
		return bad("names the zero address")
	}
	if exact.Key(network, token, from, nonce) != key {
		return bad("is not in the form exact.Key writes") // unreachable by the checks above; kept as the definition
	}
	return from, nonce, nil
}
