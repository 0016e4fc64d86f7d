// Package receiptlog runs the gateway's receipt log (D30): an append-only
// Merkle tree of receipt leaves that every replica shares through the store,
// with checkpoints signed by the log's key, so that a buyer can prove that
// its receipts were published and an auditor that the log never rewrote its
// history.
//
// A receipt's leaf is queued in the store in the same write that keeps the
// receipt (store.StoredReceipt.Leaf). Run integrates the queue: the replica
// holding the log lease gives the pending leaves the next indexes, computes
// the tree's new hashes with golang.org/x/mod/sumdb/tlog, signs a checkpoint
// of the new size, and stores all three in one atomic write that fails if
// another replica moved the log first. Checkpoint, Tile and Proof read the
// log for the HTTP routes; the formats are x402/receipt's. With
// Config.Anchor, the replica holding the lease also writes the latest
// checkpoint on chain from time to time (anchor.go), and Anchors lists what
// it wrote.
package receiptlog

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/x402/receipt"
)

// DefaultMaxMergeDelay is how long after a receipt is issued the log
// includes it, at the latest, when the config says nothing.
const DefaultMaxMergeDelay = 2 * time.Second

// Store is what the log keeps in the shared store.
type Store interface {
	TakeLogLease(ctx context.Context, holder string, ttl time.Duration) (store.LogState, bool, error)
	ReleaseLogLease(ctx context.Context, holder string, fence int64) error
	PendingLog(ctx context.Context, limit int) ([]store.LogEntry, error)
	IntegrateLog(ctx context.Context, fence, from int64, requestIDs []string, hashes []store.LogHash, checkpoint []byte) error
	LogState(ctx context.Context) (store.LogState, error)
	LogHashes(ctx context.Context, indexes []int64) ([][32]byte, error)
	LogEntry(ctx context.Context, requestID string) (store.LogEntry, error)
	LogLeaves(ctx context.Context, from, to int64) ([][]byte, error)
}

// Config configures a Log.
type Config struct {
	// Store keeps the log; every replica of the gateway shares it.
	Store Store
	// Key signs checkpoints; its name is the log's origin. VerifierKey is
	// its public half ("<origin>+<hash>+<base64>"), which the gateway
	// publishes.
	Key         note.Signer
	VerifierKey string
	// Holder names this replica in the log lease: unique per process.
	Holder string
	// MaxMergeDelay is the log's promise: a receipt is included this long
	// after it was issued, at the latest. Zero means DefaultMaxMergeDelay.
	MaxMergeDelay time.Duration
	// Log receives what the integrator did and what failed.
	Log *slog.Logger
	// Anchor, if not nil, anchors the log's checkpoints on chain
	// (anchor.go).
	Anchor *Anchoring
}

// Errors of the readers.
var (
	// ErrPending: the receipt's leaf is queued but not integrated yet.
	ErrPending = errors.New("receiptlog: the receipt is not in the log yet")
	// ErrNotFound: no such receipt, tile or entry in the log.
	ErrNotFound = errors.New("receiptlog: not in the log")
	// ErrRolledBack: the store's log is shorter than one this replica saw
	// integrated, so the store lost leaves it had acknowledged (a Redis
	// failover or a crash without appendfsync always, a database restored
	// from an old backup). Integrating on it would sign a second checkpoint
	// of a size already signed, with another root: a fork every buyer and
	// auditor would catch. The integrator stops instead, until an operator
	// restores the log.
	ErrRolledBack = errors.New("receiptlog: the store lost integrated leaves; not signing a fork")
)

// Log integrates and reads the receipt log. It is safe for concurrent use.
type Log struct {
	cfg      Config
	verifier note.Verifier
	// hashes caches stored hashes: a stored hash never changes, and the
	// integrator reads the same few (the tree's right edge) for every leaf.
	mu     sync.Mutex
	hashes map[int64]tlog.Hash
	// wake asks Run for a round now (Poke).
	wake chan struct{}
	// anchor anchors checkpoints on chain; nil when the log is not
	// anchored.
	anchor *anchorer
	// seen is the largest size this replica saw integrated: the store's
	// log never gets shorter than that unless it lost writes.
	seen atomic.Int64
}

// maxCachedHashes bounds Log.hashes; past it the cache starts over, since
// what the next rounds read is a handful of hashes on the tree's edge.
const maxCachedHashes = 1 << 16

// New returns a Log for cfg.
func New(cfg Config) (*Log, error) {
	switch {
	case cfg.Store == nil:
		return nil, errors.New("receiptlog: no store")
	case cfg.Key == nil:
		return nil, errors.New("receiptlog: no checkpoint key")
	case cfg.Holder == "":
		return nil, errors.New("receiptlog: no holder name")
	case cfg.MaxMergeDelay < 0:
		return nil, fmt.Errorf("receiptlog: max merge delay %v is negative", cfg.MaxMergeDelay)
	}
	v, err := note.NewVerifier(cfg.VerifierKey)
	if err != nil {
		return nil, fmt.Errorf("receiptlog: verifier key: %w", err)
	}
	if cfg.Key.Name() != v.Name() || cfg.Key.KeyHash() != v.KeyHash() {
		return nil, errors.New("receiptlog: the checkpoint key and the verifier key are not one key pair")
	}
	if cfg.MaxMergeDelay == 0 {
		cfg.MaxMergeDelay = DefaultMaxMergeDelay
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	l := &Log{cfg: cfg, verifier: v, hashes: map[int64]tlog.Hash{}, wake: make(chan struct{}, 1)}
	if cfg.Anchor != nil {
		if l.anchor, err = newAnchorer(*cfg.Anchor); err != nil {
			return nil, err
		}
	}
	return l, nil
}

// Origin returns the log's origin, the name its checkpoints carry.
func (l *Log) Origin() string { return l.cfg.Key.Name() }

// Verifier returns the log's public key.
func (l *Log) Verifier() note.Verifier { return l.verifier }

// VerifierKey returns the log's public key in its text form, as published.
func (l *Log) VerifierKey() string { return l.cfg.VerifierKey }

// MaxMergeDelay returns the log's promise.
func (l *Log) MaxMergeDelay() time.Duration { return l.cfg.MaxMergeDelay }

// LogBy returns the time, in unix seconds, by which a receipt issued at
// issued is in the log: its LogBy.
func (l *Log) LogBy(issued time.Time) uint64 {
	by := issued.Add(l.cfg.MaxMergeDelay)
	s := by.Unix()
	if by.After(time.Unix(s, 0)) {
		s++ // a promise rounded up, never earlier than kept
	}
	return uint64(max(s, 0)) // #nosec G115 -- clamped at zero
}

// Poke asks Run for an integration round now rather than at its next tick.
func (l *Log) Poke() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// Run integrates the log until ctx is done: each round it takes (or renews)
// the log lease and, while it holds it, integrates every pending leaf. A
// round comes every quarter of the merge delay, and the lease lasts half of
// it, so that a replica that dies holding it delays the queue by at most
// about three quarters of the promise. After a round that held the lease it
// starts an anchoring round when one is due (anchor.go), which runs beside
// the integration rounds. On return it gives the lease back and waits for
// the anchoring round.
func (l *Log) Run(ctx context.Context) {
	tick := time.NewTicker(l.cfg.MaxMergeDelay / 4)
	defer tick.Stop()
	var anchoring sync.WaitGroup
	defer anchoring.Wait()
	var held store.LogState
	for {
		st, ok, _, err := l.round(ctx)
		switch {
		case errors.Is(err, ErrRolledBack):
			l.cfg.Log.Error("receipt log: not integrating: the store lost part of the log; "+
				"restore it from a backup that holds every signed checkpoint", "err", err)
		case err != nil && ctx.Err() == nil:
			l.cfg.Log.Warn("receipt log: integration round failed", "err", err)
		case ok:
			held = st
			if err == nil && ctx.Err() == nil {
				l.kickAnchor(ctx, &anchoring)
			}
		default:
			held = store.LogState{}
		}
		select {
		case <-ctx.Done():
			if held.Fence != 0 {
				rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
				if err := l.cfg.Store.ReleaseLogLease(rctx, l.cfg.Holder, held.Fence); err != nil && !errors.Is(err, store.ErrFenced) {
					l.cfg.Log.Warn("receipt log: release the lease", "err", err)
				}
				cancel()
			}
			return
		case <-tick.C:
		case <-l.wake:
		}
	}
}

// leaseTTL is how long one round's lease lasts.
func (l *Log) leaseTTL() time.Duration { return max(l.cfg.MaxMergeDelay/2, 50*time.Millisecond) }

// round takes or renews the lease and, holding it, integrates until the
// queue is empty; it reports the lease it holds and how many leaves it
// integrated.
func (l *Log) round(ctx context.Context) (st store.LogState, held bool, n int, err error) {
	for {
		st, held, err = l.cfg.Store.TakeLogLease(ctx, l.cfg.Holder, l.leaseTTL())
		if err != nil || !held {
			return store.LogState{}, false, n, err
		}
		// A full batch means more may be waiting: the next one renews the
		// lease first, so that a long backlog does not outlive it.
		batch, err := l.integrate(ctx, st.Fence)
		n += batch
		if err != nil || batch < store.MaxLogBatch {
			return st, true, n, err
		}
	}
}

// Integrate runs one round now, if this replica can take the lease, and
// returns how many leaves it integrated: what Run does at each tick, for
// tests and for a shutdown that drains the queue.
func (l *Log) Integrate(ctx context.Context) (int, error) {
	_, _, n, err := l.round(ctx)
	return n, err
}

// integrate integrates one batch of pending leaves under fence.
func (l *Log) integrate(ctx context.Context, fence int64) (int, error) {
	st, err := l.cfg.Store.LogState(ctx)
	if err != nil {
		return 0, fmt.Errorf("receiptlog: read state: %w", err)
	}
	if st.Fence != fence {
		return 0, fmt.Errorf("receiptlog: lost the lease: %w", store.ErrFenced)
	}
	if err := l.observe(st.Size); err != nil {
		return 0, err
	}
	pending, err := l.cfg.Store.PendingLog(ctx, store.MaxLogBatch)
	if err != nil || len(pending) == 0 {
		return 0, err
	}
	r := &batchReader{log: l, ctx: ctx, batch: map[int64]tlog.Hash{}}
	ids := make([]string, len(pending))
	var hashes []store.LogHash
	for i, e := range pending {
		n := st.Size + int64(i)
		hs, err := tlog.StoredHashes(n, e.Leaf, r)
		if err != nil {
			return 0, fmt.Errorf("receiptlog: hash leaf %d: %w", n, err)
		}
		at := tlog.StoredHashIndex(0, n)
		for j, h := range hs {
			r.batch[at+int64(j)] = h
			hashes = append(hashes, store.LogHash{Index: at + int64(j), Hash: h})
		}
		ids[i] = e.RequestID
	}
	size := st.Size + int64(len(pending))
	root, err := tlog.TreeHash(size, r)
	if err != nil {
		return 0, fmt.Errorf("receiptlog: tree hash of %d: %w", size, err)
	}
	signed, err := note.Sign(&note.Note{Text: receipt.Checkpoint{Origin: l.Origin(), Size: size, Root: root}.Text()}, l.cfg.Key)
	if err != nil {
		return 0, fmt.Errorf("receiptlog: sign checkpoint: %w", err)
	}
	if err := l.cfg.Store.IntegrateLog(ctx, fence, st.Size, ids, hashes, signed); err != nil {
		return 0, fmt.Errorf("receiptlog: integrate %d leaves at %d: %w", len(ids), st.Size, err)
	}
	l.remember(r.batch) // stored now, so never to change
	_ = l.observe(size)
	l.cfg.Log.Debug("receipt log: integrated", "from", st.Size, "size", size)
	return len(pending), nil
}

// observe records that the log had size leaves, and returns
// ErrRolledBack if it once had more.
func (l *Log) observe(size int64) error {
	for {
		seen := l.seen.Load()
		if size < seen {
			return fmt.Errorf("%w: the store holds %d leaves, this replica saw %d", ErrRolledBack, size, seen)
		}
		if size == seen || l.seen.CompareAndSwap(seen, size) {
			return nil
		}
	}
}

// remember adds stored hashes to the cache.
func (l *Log) remember(hs map[int64]tlog.Hash) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.hashes)+len(hs) > maxCachedHashes {
		l.hashes = map[int64]tlog.Hash{}
	}
	maps.Copy(l.hashes, hs)
}

// readHashes reads stored hashes, from the cache first.
func (l *Log) readHashes(ctx context.Context, indexes []int64) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, len(indexes))
	var missing []int64
	l.mu.Lock()
	for i, x := range indexes {
		h, ok := l.hashes[x]
		if !ok {
			missing = append(missing, x)
		}
		out[i] = h
	}
	l.mu.Unlock()
	if len(missing) == 0 {
		return out, nil
	}
	found := make(map[int64]tlog.Hash, len(missing))
	for start := 0; start < len(missing); start += store.MaxLogHashes {
		part := missing[start:min(start+store.MaxLogHashes, len(missing))]
		hs, err := l.cfg.Store.LogHashes(ctx, part)
		if err != nil {
			return nil, err
		}
		for i, h := range hs {
			found[part[i]] = h
		}
	}
	l.remember(found)
	for i, x := range indexes {
		if h, ok := found[x]; ok {
			out[i] = h
		}
	}
	return out, nil
}

// batchReader reads hashes for a batch being integrated: its own new
// hashes first, then the stored ones.
type batchReader struct {
	log   *Log
	ctx   context.Context
	batch map[int64]tlog.Hash
}

func (r *batchReader) ReadHashes(indexes []int64) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, len(indexes))
	var stored []int64
	for i, x := range indexes {
		if h, ok := r.batch[x]; ok {
			out[i] = h
		} else {
			stored = append(stored, x)
		}
	}
	if len(stored) == 0 {
		return out, nil
	}
	hs, err := r.log.readHashes(r.ctx, stored)
	if err != nil {
		return nil, err
	}
	j := 0
	for i, x := range indexes {
		if _, ok := r.batch[x]; !ok {
			out[i] = hs[j]
			j++
		}
	}
	return out, nil
}

// storedReader reads stored hashes only, for the readers.
type storedReader struct {
	log *Log
	ctx context.Context
}

func (r storedReader) ReadHashes(indexes []int64) ([]tlog.Hash, error) {
	return r.log.readHashes(r.ctx, indexes)
}
