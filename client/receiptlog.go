package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"time"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/llm4agents/llm4agents/x402/receipt"
)

// The buyer's side of the receipt log (docs/DESIGN.md D30): a gateway promises, in each
// receipt's logBy, to publish the receipt's leaf in its append-only log by
// then. ReceiptLog checks that promise against the key the gateway
// publishes, and checks that every checkpoint it sees extends the ones it
// saw before: a gateway that shows a different history to different
// buyers, or rewrites its own, is caught as a fork.

// Log paths, relative to the gateway's origin.
const (
	PathLogCheckpoint = "/log/checkpoint"
	PathLogTiles      = "/log/" // + receipt.TilePath
)

// Errors of the receipt log checks.
var (
	// ErrNotLoggedYet: the receipt's leaf is queued and its logBy has not
	// passed; ask again later.
	ErrNotLoggedYet = errors.New("client: the receipt is not in the log yet")
	// ErrNotLogged: the receipt's logBy passed and the log does not include
	// it: the gateway broke its promise.
	ErrNotLogged = errors.New("client: the gateway's log does not include the receipt by its logBy")
	// ErrNoLog: the gateway publishes no receipt log.
	ErrNoLog = errors.New("client: the gateway keeps no receipt log")
)

// maxTileBytes bounds one tile read: 256 hashes, or 256 leaves of at most
// a few hundred bytes each.
const maxTileBytes = 1 << 20

// ReceiptLog reads and checks one gateway's receipt log. Its zero value is
// not usable: Account must be set (its Base, Client and, for proofs, a
// Token that sees the receipts). It is safe for concurrent use.
type ReceiptLog struct {
	Account *Account
	// Now, if not nil, is the clock logBy is judged by.
	Now func() time.Time

	mu     sync.Mutex
	wk     *receipt.WellKnown
	key    note.Verifier
	latest *receipt.Checkpoint // the largest checkpoint verified
}

// setup fetches the gateway's well-known document once: its receipt
// domain and log key.
func (l *ReceiptLog) setup(ctx context.Context) (*receipt.WellKnown, note.Verifier, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.wk != nil {
		return l.wk, l.key, nil
	}
	wk, err := FetchWellKnown(ctx, l.Account.Client, l.Account.Base.String())
	if err != nil {
		return nil, nil, err
	}
	if wk.Log == nil {
		return nil, nil, ErrNoLog
	}
	key, err := wk.Log.Verifier()
	if err != nil {
		return nil, nil, err
	}
	l.wk, l.key = wk, key
	return wk, key, nil
}

// WellKnown returns the gateway's well-known document, fetched once: its
// receipt domain, and its log's key and anchoring. ErrNoLog when it keeps no
// receipt log.
func (l *ReceiptLog) WellKnown(ctx context.Context) (*receipt.WellKnown, error) {
	wk, _, err := l.setup(ctx)
	return wk, err
}

// Latest returns the largest checkpoint verified so far, if any.
func (l *ReceiptLog) Latest() (receipt.Checkpoint, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.latest == nil {
		return receipt.Checkpoint{}, false
	}
	return *l.latest, true
}

// Checkpoint fetches the gateway's latest checkpoint, verifies its
// signature, and checks it against the checkpoints seen before (Observe).
func (l *ReceiptLog) Checkpoint(ctx context.Context) (receipt.Checkpoint, error) {
	_, key, err := l.setup(ctx)
	if err != nil {
		return receipt.Checkpoint{}, err
	}
	b, err := l.get(ctx, PathLogCheckpoint, receipt.MaxCheckpointBytes)
	if err != nil {
		return receipt.Checkpoint{}, err
	}
	c, err := receipt.OpenCheckpoint(b, key)
	if err != nil {
		return receipt.Checkpoint{}, err
	}
	return c, l.Observe(ctx, c)
}

// Observe checks a verified checkpoint against the largest one seen so far:
// the same size must have the same root, and the larger must extend the
// smaller, by a consistency proof read from the log's tiles. A failure is
// receipt.ErrFork. The larger becomes the latest.
func (l *ReceiptLog) Observe(ctx context.Context, c receipt.Checkpoint) error {
	l.mu.Lock()
	prev := l.latest
	l.mu.Unlock()
	if prev != nil {
		if err := receipt.SameLog(*prev, c); err != nil {
			return err
		}
		older, newer := *prev, c
		if older.Size > newer.Size {
			older, newer = newer, older
		}
		if older.Size > 0 && older.Size < newer.Size {
			proof, err := tlog.ProveTree(newer.Size, older.Size, tlog.TileHashReader(newer.Tree(), l.tiles(ctx)))
			if err != nil {
				// The tiles do not hash to the newer root: the log served
				// tiles of another tree than it signed.
				return fmt.Errorf("%w: the tiles of size %d: %w", receipt.ErrFork, newer.Size, err)
			}
			if err := receipt.CheckConsistency(older, newer, proof); err != nil {
				return err
			}
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.latest == nil || c.Size > l.latest.Size {
		l.latest = &c
	}
	return nil
}

// VerifyReceipt checks that the log includes r (the receipt of request id),
// by its inclusion proof against a signed checkpoint, and that checkpoint
// against the others seen. Before r's logBy a leaf still queued is
// ErrNotLoggedYet; after it, ErrNotLogged.
func (l *ReceiptLog) VerifyReceipt(ctx context.Context, r *receipt.Receipt, id string) (receipt.Checkpoint, error) {
	wk, key, err := l.setup(ctx)
	if err != nil {
		return receipt.Checkpoint{}, err
	}
	var p receipt.Proof
	_, err = l.Account.Do(ctx, http.MethodGet, PathReceipts+"/"+url.PathEscape(id)+"/proof", nil, http.StatusOK, &p)
	if ae, ok := errors.AsType[*APIError](err); ok {
		logBy := time.Unix(int64(min(r.LogBy, 1<<62)), 0) // #nosec G115 -- bounded
		switch {
		case ae.Code == "receipt_not_logged_yet" && !l.now().After(logBy):
			return receipt.Checkpoint{}, ErrNotLoggedYet
		case ae.Code == "receipt_not_logged_yet":
			return receipt.Checkpoint{}, fmt.Errorf("%w (logBy %s)", ErrNotLogged, logBy.UTC().Format(time.RFC3339))
		case ae.Code == "receipt_not_found" || ae.Code == "receipt_not_logged":
			// The gateway keeps a receipt before the answer that carries
			// it: one it does not know was never kept, and will never be
			// in the log (or the token is not the payer's).
			return receipt.Checkpoint{}, fmt.Errorf("%w: the gateway does not show this receipt to this account (%s)", ErrNotLogged, ae.Code)
		}
	}
	if err != nil {
		return receipt.Checkpoint{}, err
	}
	c, err := receipt.VerifyInclusion(&p, key, wk.Receipts.Domain, r)
	if err != nil {
		return receipt.Checkpoint{}, err
	}
	return c, l.Observe(ctx, c)
}

func (l *ReceiptLog) now() time.Time {
	if l.Now != nil {
		return l.Now()
	}
	return time.Now()
}

// get reads a public log path through the account's client (Account.Do,
// which bounds the answer to 1 MiB, a full tile's size and more); limit
// bounds it further.
func (l *ReceiptLog) get(ctx context.Context, path string, limit int64) ([]byte, error) {
	b, err := l.Account.Do(ctx, http.MethodGet, path, nil, http.StatusOK, nil)
	if err == nil && int64(len(b)) > limit {
		err = fmt.Errorf("GET %s: larger than %d bytes", path, limit)
	}
	return b, err
}

// tiles reads the log's tiles over HTTP, for tlog.TileHashReader, which
// checks each against the tree it was asked for.
func (l *ReceiptLog) tiles(ctx context.Context) tlog.TileReader { return tileReader{l, ctx} }

type tileReader struct {
	log *ReceiptLog
	ctx context.Context
}

func (tileReader) Height() int { return receipt.TileHeight }

func (r tileReader) ReadTiles(ts []tlog.Tile) ([][]byte, error) {
	out := make([][]byte, len(ts))
	for i, t := range ts {
		b, err := r.log.get(r.ctx, PathLogTiles+receipt.TilePath(t), maxTileBytes)
		if err != nil {
			return nil, err
		}
		out[i] = b
	}
	return out, nil
}

func (tileReader) SaveTiles([]tlog.Tile, [][]byte) {}

// Leaves returns the log's leaves from..to-1 (to at most the size of a
// verified checkpoint c), read from its entry bundles and checked against
// c's tree: an auditor's walk of the log.
func (l *ReceiptLog) Leaves(ctx context.Context, c receipt.Checkpoint, from, to int64) ([][]byte, error) {
	if from < 0 || to > c.Size || from > to {
		return nil, fmt.Errorf("client: leaves %d..%d of a log of %d", from, to, c.Size)
	}
	thr := tlog.TileHashReader(c.Tree(), l.tiles(ctx))
	var out [][]byte
	for n := from >> receipt.TileHeight; n<<receipt.TileHeight < to; n++ {
		w := min(int64(1)<<receipt.TileHeight, c.Size-n<<receipt.TileHeight)
		t := tlog.Tile{H: receipt.TileHeight, L: -1, N: n, W: int(w)}
		b, err := l.get(ctx, PathLogTiles+receipt.TilePath(t), maxTileBytes)
		if err != nil {
			return nil, err
		}
		leaves, err := receipt.ParseEntryBundle(b, int(w))
		if err != nil {
			return nil, err
		}
		idx := make([]int64, len(leaves))
		for i := range leaves {
			idx[i] = tlog.StoredHashIndex(0, n<<receipt.TileHeight+int64(i))
		}
		hashes, err := thr.ReadHashes(idx)
		if err != nil {
			return nil, fmt.Errorf("%w: the hash tiles of size %d: %w", receipt.ErrFork, c.Size, err)
		}
		for i, leaf := range leaves {
			at := n<<receipt.TileHeight + int64(i)
			if tlog.RecordHash(leaf) != hashes[i] {
				return nil, fmt.Errorf("%w: entry %d is not the leaf the tree holds", receipt.ErrProof, at)
			}
			if at >= from && at < to {
				out = append(out, leaf)
			}
		}
	}
	return out, nil
}

// AuditResult is what a ReceiptAuditor found of one receipt: Err is nil
// when the log includes it in Checkpoint.
type AuditResult struct {
	RequestID  string
	Receipt    *receipt.Receipt
	Checkpoint receipt.Checkpoint
	Err        error
}

// DefaultAuditGrace is how long after a receipt's logBy a ReceiptAuditor
// first asks for its proof, for clocks that disagree a little.
const DefaultAuditGrace = time.Second

// ReceiptAuditor checks in the background that a gateway's log includes
// every receipt added to it, once the receipt's logBy has passed: a call
// never waits for it. Every result, good or bad, goes to Report; a failure
// is never silent. Its zero value is not usable: Log and Report must be set.
type ReceiptAuditor struct {
	Log    *ReceiptLog
	Report func(AuditResult)
	// Grace is added to logBy before the check; zero means
	// DefaultAuditGrace.
	Grace time.Duration

	wg sync.WaitGroup
}

// Add checks r, the receipt of request id, after its logBy. ctx bounds the
// wait and the check: cancelled, the check reports ctx's error.
func (a *ReceiptAuditor) Add(ctx context.Context, r *receipt.Receipt, id string) {
	a.wg.Go(func() {
		res := AuditResult{RequestID: id, Receipt: r}
		res.Checkpoint, res.Err = a.check(ctx, r, id)
		a.Report(res)
	})
}

// Wait waits for the checks of every receipt added so far.
func (a *ReceiptAuditor) Wait() { a.wg.Wait() }

func (a *ReceiptAuditor) check(ctx context.Context, r *receipt.Receipt, id string) (receipt.Checkpoint, error) {
	grace := a.Grace
	if grace == 0 {
		grace = DefaultAuditGrace
	}
	due := time.Unix(int64(min(r.LogBy, 1<<62)), 0).Add(grace) // #nosec G115 -- bounded
	for {
		if wait := due.Sub(a.Log.now()); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return receipt.Checkpoint{}, ctx.Err()
			case <-t.C:
			}
		}
		c, err := a.Log.VerifyReceipt(ctx, r, id)
		if !errors.Is(err, ErrNotLoggedYet) {
			return c, err
		}
		// Not yet, and logBy not passed by the gateway's reckoning as by
		// ours: look again shortly.
		due = a.Log.now().Add(grace / 2)
	}
}
