package receiptlog

import (
	"context"
	"errors"
	"fmt"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/x402/receipt"
)

// Checkpoint returns the latest signed checkpoint. A log that never
// integrated a leaf has a checkpoint of size zero, signed now: it is the
// same every time, since Ed25519 signatures are deterministic.
func (l *Log) Checkpoint(ctx context.Context) ([]byte, error) {
	st, err := l.cfg.Store.LogState(ctx)
	if err != nil {
		return nil, fmt.Errorf("receiptlog: read state: %w", err)
	}
	if len(st.Checkpoint) > 0 {
		return st.Checkpoint, nil
	}
	empty, err := tlog.TreeHash(0, storedReader{l, ctx})
	if err != nil {
		return nil, err
	}
	return note.Sign(&note.Note{Text: receipt.Checkpoint{Origin: l.Origin(), Size: 0, Root: empty}.Text()}, l.cfg.Key)
}

// state returns the log's size and its checkpoint, opened.
func (l *Log) state(ctx context.Context) (receipt.Checkpoint, []byte, error) {
	signed, err := l.Checkpoint(ctx)
	if err != nil {
		return receipt.Checkpoint{}, nil, err
	}
	c, err := receipt.OpenCheckpoint(signed, l.verifier)
	if err != nil {
		// The store holds a checkpoint this log's key did not sign: the key
		// changed under a log that kept its leaves. Refuse to vouch for it.
		return receipt.Checkpoint{}, nil, fmt.Errorf("receiptlog: the stored checkpoint is not this key's: %w", err)
	}
	return c, signed, nil
}

// maxTileLevel is the highest tile level of a log of fewer than 2^63
// leaves: 256^7 = 2^56.
const maxTileLevel = 7

// Tile returns the content at a C2SP tlog-tiles path (receipt.TilePath's
// form): a hash tile, or an entry bundle of leaves. full reports a tile of
// full width, which never changes and may be cached for good; a partial
// one grows with the log. A tile the log has not reached is ErrNotFound.
func (l *Log) Tile(ctx context.Context, path string) (data []byte, full bool, err error) {
	t, err := receipt.ParseTilePath(path)
	if err != nil {
		return nil, false, fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	if t.L > maxTileLevel {
		return nil, false, fmt.Errorf("%w: level %d", ErrNotFound, t.L)
	}
	st, err := l.cfg.Store.LogState(ctx)
	if err != nil {
		return nil, false, fmt.Errorf("receiptlog: read state: %w", err)
	}
	// The log has size>>(8L) hashes at tile level L (and size leaves for
	// entry bundles); the tile needs N*256 + W of them. Compared so that no
	// product can overflow.
	count := st.Size >> (receipt.TileHeight * max(t.L, 0))
	if count < int64(t.W) || t.N > (count-int64(t.W))>>receipt.TileHeight {
		return nil, false, fmt.Errorf("%w: %s is past the log's %d leaves", ErrNotFound, path, st.Size)
	}
	full = t.W == 1<<receipt.TileHeight
	if t.L == -1 {
		from := t.N << receipt.TileHeight
		leaves, err := l.cfg.Store.LogLeaves(ctx, from, from+int64(t.W))
		if err != nil {
			return nil, false, l.readErr(err)
		}
		b, err := receipt.EntryBundle(leaves)
		return b, full, err
	}
	b, err := tlog.ReadTileData(t, storedReader{l, ctx})
	if err != nil {
		return nil, false, l.readErr(err)
	}
	return b, full, nil
}

// readErr maps a store's not-found to ErrNotFound.
func (l *Log) readErr(err error) error {
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	return fmt.Errorf("receiptlog: %w", err)
}

// Proof returns where requestID's leaf is in the log and its inclusion
// proof against the latest checkpoint. ErrPending while the leaf waits in
// the queue; ErrNotFound when none was queued.
func (l *Log) Proof(ctx context.Context, requestID string) (receipt.Proof, error) {
	e, err := l.cfg.Store.LogEntry(ctx, requestID)
	if err != nil {
		return receipt.Proof{}, l.readErr(err)
	}
	if e.Index < 0 {
		return receipt.Proof{}, ErrPending
	}
	c, signed, err := l.state(ctx)
	if err != nil {
		return receipt.Proof{}, err
	}
	if e.Index >= c.Size {
		// Integrated after the checkpoint was read: the next one has it.
		return receipt.Proof{}, ErrPending
	}
	hashes, err := tlog.ProveRecord(c.Size, e.Index, storedReader{l, ctx})
	if err != nil {
		return receipt.Proof{}, l.readErr(err)
	}
	return receipt.Proof{Index: e.Index, Leaf: e.Leaf, Checkpoint: signed, Hashes: hashes}, nil
}
