package receiptlog

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/llm4agents/llm4agents/contracts"
	"github.com/llm4agents/llm4agents/internal/chain"
	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/x402/receipt"
)

// An anchor writes the log's latest checkpoint on chain: its size and root
// hash, in a call of the ReceiptLogAnchor contract, which emits them in an
// Anchored event with the sender. Once mined, that history is pinned where
// the gateway cannot take it back: a later checkpoint that does not extend an
// anchored root is a fork anyone can show.
//
// The replica holding the log lease anchors, at most every Anchoring.Every
// and only when the log grew since the last anchor, from a goroutine of its
// own so that a slow or unreachable node never holds up integration: a
// failed anchor is logged and counted, and tried again a period later.
//
// Every anchor transaction is recorded in the store before it is sent
// (chain.Sender's BeforeBroadcast), its replacements too, and confirmed with
// its block once seen mined. The pace is read from the records, so that it
// survives restarts and moves with the lease. A replica that dies between
// the record and the chain leaves an anchor nobody waits for: once a period
// has passed without it being seen mined, the next holder anchors that size
// again, once, since its own anchor is then the latest, which it waits for
// and never sends twice. At most one anchor of a replica is in flight: a
// second one would queue behind the first's nonce anyway.

// AnchorSender sends the anchor transactions: the in-process facilitator's
// *chain.Sender, so that anchors and settlements take their nonces from one
// sequence, which a second sender on the same account would break.
type AnchorSender interface {
	Address() common.Address
	SendRecorded(ctx context.Context, to common.Address, data []byte, before chain.BeforeBroadcast) (*types.Transaction, error)
	Wait(ctx context.Context, tx *types.Transaction) (*types.Receipt, error)
}

// AnchorNode reads the receipts of anchor transactions the sender does not
// wait for: those of another replica, or of this one before a restart.
type AnchorNode interface {
	TransactionReceipt(ctx context.Context, hash common.Hash) (*types.Receipt, error)
}

// Anchoring configures the log's anchors.
type Anchoring struct {
	// Network is the chain's CAIP-2 id, Contract the ReceiptLogAnchor on it.
	Network  string
	Contract common.Address
	// Every is the least time between two anchors (> 0).
	Every time.Duration
	// Sender sends the anchors; the gateway publishes its address as theirs.
	Sender AnchorSender
	// OtherSenders are the other replicas' senders, published with Sender's
	// address: their anchors are the gateway's too.
	OtherSenders []common.Address
	// Node reads receipts; Store records the anchors.
	Node  AnchorNode
	Store store.LogAnchors
	// Now is the clock anchors are paced by; nil means time.Now. The records'
	// SentAt is the store's clock: the two may differ by seconds, which only
	// moves an anchor by as much.
	Now func() time.Time
}

// ErrNotAnchored: the log is not anchored on chain.
var ErrNotAnchored = errors.New("receiptlog: the log is not anchored on chain")

// anchorLookback is how many of the latest records one anchoring round
// reads: enough to find the latest anchor of the configured contract, and
// the few not yet seen mined, which each round looks up on chain.
const anchorLookback = 16

// Bounds of one anchoring round: it waits for its transaction at most this
// long (or Every, if longer), then leaves it to the next round.
const (
	minAnchorRound = 5 * time.Second
	maxAnchorRound = 2 * time.Minute
)

// Outcomes of llm4agents_log_anchors_total.
const (
	anchorSent      = "sent"
	anchorConfirmed = "confirmed"
	anchorFailed    = "failed"
)

// anchorer is the state of a Log's anchoring.
type anchorer struct {
	cfg    Anchoring
	sender common.Address
	// outcomes counts anchors by outcome; anchored is the largest size seen
	// anchored and mined.
	outcomes *prometheus.CounterVec
	anchored prometheus.Gauge

	mu      sync.Mutex
	running bool      // a round is under way
	next    time.Time // no round before
	// mine is the anchor this replica sent and has not seen mined, nil if
	// none: at most one in flight; mineRec is what it anchors.
	mine    *types.Transaction
	mineRec store.LogAnchor
	// bad holds the transactions seen mined without their event, so that a
	// round looks each up once, and counts it failed once.
	bad map[string]bool
	// maxAnchored is the value of anchored.
	maxAnchored int64
}

// maxBad bounds anchorer.bad: past it, it starts over, and a bad anchor
// still among the latest records is looked up once more.
const maxBad = 64

func newAnchorer(cfg Anchoring) (*anchorer, error) {
	switch {
	case cfg.Network == "":
		return nil, errors.New("receiptlog: anchoring: no network")
	case cfg.Contract == (common.Address{}):
		return nil, errors.New("receiptlog: anchoring: no contract")
	case cfg.Every <= 0:
		return nil, fmt.Errorf("receiptlog: anchoring: every %v is not positive", cfg.Every)
	case cfg.Sender == nil || cfg.Node == nil || cfg.Store == nil:
		return nil, errors.New("receiptlog: anchoring: no sender, node or store")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	a := &anchorer{cfg: cfg, sender: cfg.Sender.Address(), bad: map[string]bool{},
		outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llm4agents_log_anchors_total",
			Help: "Anchors of the receipt log's checkpoints on chain, by outcome: sent (a transaction went out), confirmed " +
				"(seen mined with its Anchored event), failed (not sent: the node refused it or could not be reached; or mined " +
				"without the event, or reverted). A failed anchor is tried again a period later.",
		}, []string{"outcome"}),
		anchored: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "llm4agents_log_anchored_size",
			Help: "The largest size of the receipt log seen anchored on chain and mined, by this replica.",
		}),
	}
	for _, o := range []string{anchorSent, anchorConfirmed, anchorFailed} {
		a.outcomes.WithLabelValues(o) // present at 0 before the first anchor
	}
	return a, nil
}

// round is how long one anchoring round may take.
func (a *anchorer) round() time.Duration {
	return min(max(a.cfg.Every, minAnchorRound), maxAnchorRound)
}

// RegisterMetrics registers the anchors' metrics with reg; a log that is not
// anchored has none.
func (l *Log) RegisterMetrics(reg prometheus.Registerer) error {
	if l.anchor == nil {
		return nil
	}
	for _, c := range []prometheus.Collector{l.anchor.outcomes, l.anchor.anchored} {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("receipt log metrics: %w", err)
		}
	}
	return nil
}

// WellKnown returns the log's member of the well-known document: its origin,
// key and promise, and where it is anchored, if it is.
func (l *Log) WellKnown() receipt.WellKnownLog {
	wk := receipt.WellKnownLog{Origin: l.Origin(), Key: l.VerifierKey(),
		MaxMergeDelayMs: uint64(l.MaxMergeDelay().Milliseconds())} // #nosec G115 -- New bounds it to a positive duration
	if a := l.anchor; a != nil {
		wk.Network, wk.AnchorContract, wk.AnchorSender = a.cfg.Network, a.cfg.Contract, a.sender
		if len(a.cfg.OtherSenders) > 0 {
			wk.AnchorSenders = append([]common.Address{a.sender}, a.cfg.OtherSenders...)
			wk.AnchorSenders = wk.Senders() // without this replica's twice
		}
	}
	return wk
}

// Anchors returns up to limit (1..receipt.MaxAnchors) of the latest anchors
// recorded for the configured network and contract, newest first; anchors
// of a contract the log used before are on that chain, not here.
// ErrNotAnchored when the log is not anchored.
func (l *Log) Anchors(ctx context.Context, limit int) ([]receipt.Anchor, error) {
	a := l.anchor
	if a == nil {
		return nil, ErrNotAnchored
	}
	if limit <= 0 || limit > receipt.MaxAnchors {
		return nil, fmt.Errorf("receiptlog: %d anchors asked for, want 1..%d", limit, receipt.MaxAnchors)
	}
	recs, err := a.cfg.Store.LogAnchors(ctx, limit)
	if err != nil {
		return nil, fmt.Errorf("receiptlog: read anchors: %w", err)
	}
	out := []receipt.Anchor{}
	for _, r := range recs {
		if !a.ours(r) {
			continue
		}
		out = append(out, receipt.Anchor{Size: r.Size, Root: r.Root, Network: r.Network,
			Contract: common.HexToAddress(r.Contract), Sender: common.HexToAddress(r.Sender),
			Transaction: common.HexToHash(r.TxHash), SentAt: r.SentAt, Block: uint64(max(r.Block, 0))}) // #nosec G115 -- clamped at zero
	}
	return out, nil
}

// ours reports whether r anchors at the configured network and contract.
func (a *anchorer) ours(r store.LogAnchor) bool {
	return r.Network == a.cfg.Network && common.HexToAddress(r.Contract) == a.cfg.Contract
}

// kickAnchor starts an anchoring round in a goroutine of wg, unless one is
// under way or the last one said to wait: Run calls it after every round
// that held the lease, which it must not hold up.
func (l *Log) kickAnchor(ctx context.Context, wg *sync.WaitGroup) {
	a := l.anchor
	if a == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.running || a.cfg.Now().Before(a.next) {
		return
	}
	a.running = true
	wg.Go(func() { _ = l.anchorOnce(ctx) }) // anchorOnce logs and counts a failure
}

// anchorOnce runs the anchoring round the caller marked running, logs and
// counts a failure, and sets when the next round may come.
func (l *Log) anchorOnce(ctx context.Context) error {
	a := l.anchor
	next, err := l.anchorRound(ctx)
	if err != nil && ctx.Err() == nil {
		a.outcomes.WithLabelValues(anchorFailed).Inc()
		l.cfg.Log.Warn("receipt log: anchoring failed; trying again next period", "err", err, "every", a.cfg.Every)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.running, a.next = false, next
	return err
}

// Anchor runs one anchoring round now, whether or not this replica holds
// the lease and however soon the last round said to come back: what Run
// does in the background, for tests and tools. The round still anchors only
// what is due by the records (see Anchoring), and returns once its
// transaction is mined or left to the next round. ErrNotAnchored when the
// log is not anchored.
func (l *Log) Anchor(ctx context.Context) error {
	a := l.anchor
	if a == nil {
		return ErrNotAnchored
	}
	a.mu.Lock()
	if a.running {
		a.mu.Unlock()
		return errors.New("receiptlog: an anchoring round is under way")
	}
	a.running = true
	a.mu.Unlock()
	return l.anchorOnce(ctx)
}

// anchorRound waits for this replica's anchor in flight, confirms the
// latest anchors seen mined, and anchors the latest checkpoint if it is due
// (see Anchoring). It returns when the next round may come.
func (l *Log) anchorRound(ctx context.Context) (next time.Time, err error) {
	a := l.anchor
	next = a.cfg.Now().Add(a.cfg.Every)
	ctx, cancel := context.WithTimeout(ctx, a.round())
	defer cancel()
	c, _, err := l.state(ctx)
	if err != nil {
		return next, err
	}
	a.waitMine(ctx, l)
	recs, err := a.cfg.Store.LogAnchors(ctx, anchorLookback)
	if err != nil {
		return next, fmt.Errorf("receiptlog: read anchors: %w", err)
	}
	var latest *store.LogAnchor
	for i := range recs {
		r := &recs[i]
		if !a.ours(*r) {
			continue
		}
		if latest == nil {
			latest = r
		}
		if r.Block == 0 && !a.isBad(r.TxHash) {
			l.confirmAnchor(ctx, r)
		}
	}
	a.mu.Lock()
	inFlight := a.mine != nil
	a.mu.Unlock()
	switch {
	case c.Size == 0 || inFlight:
		return next, nil
	case latest == nil:
	case a.cfg.Now().Before(latest.SentAt.Add(a.cfg.Every)):
		return latest.SentAt.Add(a.cfg.Every), nil
	case latest.Size >= c.Size && latest.Block > 0:
		return next, nil // anchored, and the log has not grown since
	case latest.Size >= c.Size:
		// Nobody waits for it any more: its replica died or lost the
		// lease, or it was mined without its event. Once more; then the
		// latest is this replica's own, which it waits for.
		l.cfg.Log.Info("receipt log: anchoring the same size again: its last anchor was not seen mined",
			"size", latest.Size, "transaction", latest.TxHash)
	}
	return next, l.sendAnchor(ctx, c)
}

// waitMine waits, for at most half a round, for this replica's anchor in
// flight (the sender re-sends or replaces it meanwhile if it is stuck), and
// confirms it once mined.
func (a *anchorer) waitMine(ctx context.Context, l *Log) {
	a.mu.Lock()
	tx, rec := a.mine, a.mineRec
	a.mu.Unlock()
	if tx == nil {
		return
	}
	wctx, cancel := context.WithTimeout(ctx, a.round()/2)
	defer cancel()
	r, err := a.cfg.Sender.Wait(wctx, tx)
	switch {
	case errors.Is(err, chain.ErrNonceConsumed):
		l.cfg.Log.Warn("receipt log: an anchor's nonce was used by another transaction; anchoring again",
			"size", rec.Size, "transaction", tx.Hash())
	case err != nil:
		l.cfg.Log.Info("receipt log: an anchor is not mined yet", "size", rec.Size, "transaction", tx.Hash(), "err", err)
		return
	default:
		// The receipt names the version that was mined, a replacement
		// perhaps: each version was recorded under its own hash.
		rec.TxHash = r.TxHash.Hex()
		l.mined(ctx, r, rec)
	}
	a.mu.Lock()
	a.mine = nil
	a.mu.Unlock()
}

// confirmAnchor looks r's transaction up on chain and confirms it if mined.
func (l *Log) confirmAnchor(ctx context.Context, r *store.LogAnchor) {
	rc, err := l.anchor.cfg.Node.TransactionReceipt(ctx, common.HexToHash(r.TxHash))
	if err != nil {
		return // not mined (yet), or never sent, or the node is away: next round
	}
	if l.mined(ctx, rc, *r) {
		r.Block = rc.BlockNumber.Int64()
	}
}

// mined checks a mined anchor transaction's receipt: it succeeded, and the
// contract emitted Anchored with want's sender, size and root. If so it
// records the block and reports true; if not, it marks the transaction bad.
func (l *Log) mined(ctx context.Context, rc *types.Receipt, want store.LogAnchor) bool {
	a := l.anchor
	evs, err := contracts.AnchoredEvents(rc, a.cfg.Contract)
	found := false
	for _, ev := range evs {
		found = found || ev.By == common.HexToAddress(want.Sender) && ev.Size == uint64(want.Size) && ev.Root == want.Root // #nosec G115 -- a recorded size is positive
	}
	if err != nil || !found || rc.Status != types.ReceiptStatusSuccessful || rc.BlockNumber == nil || rc.BlockNumber.Sign() <= 0 {
		a.outcomes.WithLabelValues(anchorFailed).Inc()
		a.markBad(want.TxHash)
		l.cfg.Log.Warn("receipt log: an anchor transaction was mined without its Anchored event (reverted, or log.anchor.contract is not a ReceiptLogAnchor)",
			"transaction", rc.TxHash, "status", rc.Status, "contract", a.cfg.Contract, "err", err)
		return false
	}
	block := rc.BlockNumber.Int64()
	if err := a.cfg.Store.ConfirmAnchor(ctx, want.TxHash, block); err != nil {
		l.cfg.Log.Warn("receipt log: record an anchor's block", "transaction", rc.TxHash, "block", block, "err", err)
		return false
	}
	a.outcomes.WithLabelValues(anchorConfirmed).Inc()
	a.mu.Lock()
	defer a.mu.Unlock()
	if want.Size > a.maxAnchored {
		a.maxAnchored = want.Size
		a.anchored.Set(float64(want.Size))
	}
	l.cfg.Log.Info("receipt log: anchored on chain", "size", want.Size, "transaction", rc.TxHash, "block", block)
	return true
}

func (a *anchorer) isBad(txHash string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.bad[txHash]
}

func (a *anchorer) markBad(txHash string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.bad) >= maxBad {
		a.bad = map[string]bool{}
	}
	a.bad[txHash] = true
}

// sendAnchor sends the anchor of c, recording each transaction before it
// goes out, and waits for it within ctx.
func (l *Log) sendAnchor(ctx context.Context, c receipt.Checkpoint) error {
	a := l.anchor
	data, err := contracts.AnchorCalldata(uint64(c.Size), c.Root) // #nosec G115 -- a size is never negative
	if err != nil {
		return err
	}
	rec := store.LogAnchor{Size: c.Size, Root: c.Root, Network: a.cfg.Network, Contract: a.cfg.Contract.Hex(), Sender: a.sender.Hex()}
	record := func(ctx context.Context, tx *types.Transaction) error {
		r := rec
		r.TxHash = tx.Hash().Hex()
		return a.cfg.Store.RecordAnchor(ctx, r)
	}
	tx, err := a.cfg.Sender.SendRecorded(ctx, a.cfg.Contract, data, record)
	if tx == nil {
		return fmt.Errorf("receiptlog: send the anchor of size %d: %w", c.Size, err)
	}
	// Sent, or perhaps sent (a *chain.PendingError): this replica's own to
	// wait for from now on.
	a.outcomes.WithLabelValues(anchorSent).Inc()
	l.cfg.Log.Info("receipt log: anchor sent", "size", c.Size, "transaction", tx.Hash())
	rec.TxHash = tx.Hash().Hex()
	a.mu.Lock()
	a.mine, a.mineRec = tx, rec
	a.mu.Unlock()
	a.waitMine(ctx, l)
	return nil
}
