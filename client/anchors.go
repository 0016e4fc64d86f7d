package client

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/big"
	"slices"
	"strconv"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/llm4agents/llm4agents/x402/receipt"
)

// A gateway that anchors its receipt log writes checkpoints (a size and a
// root hash) on chain, from the sender and at the contract its well-known
// document names, and lists them at /log/anchors. CheckAnchors holds the
// log to them: an anchored root that is not the log's own at that size is a
// fork the gateway signed on chain, where it cannot take it back.

// PathLogAnchors lists a gateway's anchors, relative to its origin.
const PathLogAnchors = "/log/anchors"

var (
	// ErrNotAnchored: the gateway does not anchor its receipt log.
	ErrNotAnchored = errors.New("client: the gateway does not anchor its receipt log on chain")
	// ErrBadAnchor: an anchor the gateway lists is not on chain as listed:
	// its transaction is missing, failed or carries no Anchored event of
	// the published sender, size and root at the published contract; or the
	// listing names another network, contract or sender.
	ErrBadAnchor = errors.New("client: an anchor of the receipt log does not check out on chain")
)

// maxAnchorsBytes bounds a read of /log/anchors: receipt.MaxAnchors anchors
// of about 400 bytes.
const maxAnchorsBytes = 64 << 10

// ChainReceipts reads transaction receipts from a node of the anchors'
// network: *ethclient.Client is one.
type ChainReceipts interface {
	TransactionReceipt(ctx context.Context, hash common.Hash) (*types.Receipt, error)
}

// AnchorCheck is what CheckAnchors found of one anchor.
type AnchorCheck struct {
	Anchor receipt.Anchor
	// OnChain is set when the node showed the anchor's transaction mined,
	// in Block, with its event. It stays false without a node, and for an
	// anchor not mined yet, which is no failure.
	OnChain bool
	Block   uint64
	// Err is why the anchor does not check, nil when it does: wrapping
	// receipt.ErrFork when its root is not the log's at its size,
	// ErrBadAnchor when the chain does not show it as listed, or the node's
	// error.
	Err error
}

// Anchors fetches the gateway's latest anchors, newest first (at most
// receipt.MaxAnchors), as it lists them: nothing is checked but the format.
// ErrNotAnchored when the gateway does not anchor its log.
func (l *ReceiptLog) Anchors(ctx context.Context, limit int) ([]receipt.Anchor, error) {
	wk, _, err := l.setup(ctx)
	if err != nil {
		return nil, err
	}
	if !wk.Log.Anchored() {
		return nil, ErrNotAnchored
	}
	path := PathLogAnchors
	if limit > 0 {
		path += "?limit=" + strconv.Itoa(min(limit, receipt.MaxAnchors))
	}
	b, err := l.get(ctx, path, maxAnchorsBytes)
	if err != nil {
		return nil, err
	}
	return receipt.ParseAnchors(b)
}

// CheckAnchors checks the gateway's latest anchors against its log and,
// given a node of the anchors' network, against the chain. It reads the
// anchors first and then the latest checkpoint (verified and observed as
// Checkpoint does), which must reach every anchored size. For each anchor:
//
//   - it is at the network and contract, and from the sender, that the
//     well-known document publishes, else ErrBadAnchor;
//   - its root is the log's own at its size, computed from the tiles of the
//     checkpoint (tlog.TreeHash over a tlog.TileHashReader), else
//     receipt.ErrFork: both are the gateway's word, and they disagree;
//   - with node, its transaction, if mined, succeeded and carries
//     Anchored(sender, size, root) from the contract; one the gateway lists
//     as mined must be. Else ErrBadAnchor. Without a node nothing is asked
//     of the chain, and no anchor is OnChain.
//
// It returns the checkpoint, every anchor's check, and the first failure,
// nil when every anchor checks.
func (l *ReceiptLog) CheckAnchors(ctx context.Context, node ChainReceipts) (receipt.Checkpoint, []AnchorCheck, error) {
	as, err := l.Anchors(ctx, receipt.MaxAnchors)
	if err != nil {
		return receipt.Checkpoint{}, nil, err
	}
	c, err := l.Checkpoint(ctx)
	if err != nil {
		return receipt.Checkpoint{}, nil, err
	}
	wk, _, err := l.setup(ctx)
	if err != nil {
		return receipt.Checkpoint{}, nil, err
	}
	hashes := tlog.TileHashReader(c.Tree(), l.tiles(ctx))
	checks := make([]AnchorCheck, len(as))
	var first error
	for i, a := range as {
		checks[i] = AnchorCheck{Anchor: a}
		ch := &checks[i]
		ch.Err = checkAnchorLog(a, c, hashes, *wk.Log)
		if ch.Err == nil && node != nil {
			ch.OnChain, ch.Block, ch.Err = checkAnchorChain(ctx, node, a, *wk.Log)
		}
		if ch.Err != nil && first == nil {
			first = fmt.Errorf("anchor of size %d (transaction %s): %w", a.Size, a.Transaction.Hex(), ch.Err)
		}
	}
	return c, checks, first
}

// checkAnchorLog checks a against the published anchoring and against the
// log of checkpoint c.
func checkAnchorLog(a receipt.Anchor, c receipt.Checkpoint, hashes tlog.HashReader, wk receipt.WellKnownLog) error {
	switch {
	case a.Network != wk.Network || a.Contract != wk.AnchorContract:
		return fmt.Errorf("%w: at %s on %s, not the published %s on %s", ErrBadAnchor, a.Contract.Hex(), a.Network, wk.AnchorContract.Hex(), wk.Network)
	case !wk.IsAnchorSender(a.Sender):
		return fmt.Errorf("%w: sent by %s, not a published sender (%s)", ErrBadAnchor, a.Sender.Hex(), wk.AnchorSender.Hex())
	case a.Size > c.Size:
		return fmt.Errorf("%w: anchored size %d is past the log's checkpoint of %d", receipt.ErrFork, a.Size, c.Size)
	}
	root, err := tlog.TreeHash(a.Size, hashes)
	if err != nil {
		// The tiles do not hash to the checkpoint's root: the log served
		// tiles of another tree than it signed.
		return fmt.Errorf("%w: the tiles of size %d: %w", receipt.ErrFork, c.Size, err)
	}
	if root != a.Root {
		return fmt.Errorf("%w: anchored root %x of size %d is not the log's %x", receipt.ErrFork, a.Root[:8], a.Size, root[:8])
	}
	return nil
}

// checkAnchorChain looks a's transaction up on chain: mined with its event
// (true and the block), not mined and not listed as mined (false), or a
// failure.
func checkAnchorChain(ctx context.Context, node ChainReceipts, a receipt.Anchor, wk receipt.WellKnownLog) (bool, uint64, error) {
	r, err := node.TransactionReceipt(ctx, a.Transaction)
	switch {
	case errors.Is(err, ethereum.NotFound) && a.Block == 0:
		return false, 0, nil // sent, not mined yet, or never sent by a replica that died
	case errors.Is(err, ethereum.NotFound):
		return false, 0, fmt.Errorf("%w: listed as mined in block %d, but the node has no such transaction", ErrBadAnchor, a.Block)
	case err != nil:
		return false, 0, fmt.Errorf("the node: %w", err)
	case r.TxHash != a.Transaction || r.BlockNumber == nil:
		return false, 0, fmt.Errorf("%w: the node answered with another transaction's receipt", ErrBadAnchor)
	case r.Status != types.ReceiptStatusSuccessful:
		return false, 0, fmt.Errorf("%w: the transaction reverted", ErrBadAnchor)
	}
	// checkAnchorLog checked that a.Sender is a published sender.
	want := receipt.Anchored{Contract: wk.AnchorContract, By: a.Sender, Size: uint64(a.Size), Root: a.Root} // #nosec G115 -- ParseAnchors checked it positive
	if slices.Contains(receipt.AnchoredEvents(r), want) {
		return true, r.BlockNumber.Uint64(), nil
	}
	return false, 0, fmt.Errorf("%w: the transaction emitted no Anchored(%s, %d, %x) at %s", ErrBadAnchor, a.Sender.Hex(), a.Size, a.Root[:8], wk.AnchorContract.Hex())
}

// ChainLogs reads a node's head and its event logs: *ethclient.Client is
// one.
type ChainLogs interface {
	BlockNumber(ctx context.Context) (uint64, error)
	FilterLogs(ctx context.Context, q ethereum.FilterQuery) ([]types.Log, error)
}

// ChainScanBlocks is the block range of one log query of
// CheckChainAnchors: public nodes refuse much larger ones.
const ChainScanBlocks = 10_000

// CheckChainAnchors checks every anchor the chain holds for the log, not
// only the latest ones the gateway lists: each Anchored event the published
// contract emitted for a published sender, from block from to the node's
// head, against the log of the checkpoint read after them, as CheckAnchors
// checks a listed anchor (its root must be the log's own at its size, else
// receipt.ErrFork). An event from anyone else is not the gateway's word and
// is left out. It returns the checkpoint, one check per event, oldest first
// (OnChain and Block set), the head it scanned to, and the first failure.
func (l *ReceiptLog) CheckChainAnchors(ctx context.Context, node ChainLogs, from uint64) (receipt.Checkpoint, []AnchorCheck, uint64, error) {
	wk, _, err := l.setup(ctx)
	if err != nil {
		return receipt.Checkpoint{}, nil, 0, err
	}
	if !wk.Log.Anchored() {
		return receipt.Checkpoint{}, nil, 0, ErrNotAnchored
	}
	head, err := node.BlockNumber(ctx)
	if err != nil {
		return receipt.Checkpoint{}, nil, 0, fmt.Errorf("the node's head: %w", err)
	}
	var found []receipt.Anchor
	var senders []common.Hash
	for _, a := range wk.Log.Senders() {
		senders = append(senders, common.BytesToHash(a.Bytes()))
	}
	for start := from; start <= head; start += ChainScanBlocks {
		end := min(start+ChainScanBlocks-1, head)
		logs, err := node.FilterLogs(ctx, ethereum.FilterQuery{
			FromBlock: new(big.Int).SetUint64(start), ToBlock: new(big.Int).SetUint64(end),
			Addresses: []common.Address{wk.Log.AnchorContract},
			Topics:    [][]common.Hash{{receipt.AnchoredTopic}, senders},
		})
		if err != nil {
			return receipt.Checkpoint{}, nil, 0, fmt.Errorf("the node's logs of blocks %d-%d: %w", start, end, err)
		}
		for i := range logs {
			lg := &logs[i]
			ev, err := receipt.ParseAnchored(lg)
			// A node that ignores the filter gives other events: not ours.
			if lg.Removed || err != nil || ev.Contract != wk.Log.AnchorContract || !wk.Log.IsAnchorSender(ev.By) {
				continue
			}
			size := int64(min(ev.Size, math.MaxInt64)) // #nosec G115 -- clamped; past the checkpoint either way, a fork
			found = append(found, receipt.Anchor{Size: size, Root: ev.Root, Network: wk.Log.Network, Contract: ev.Contract,
				Sender: ev.By, Transaction: lg.TxHash, Block: lg.BlockNumber})
		}
		if end == head {
			break // end+1 would wrap past the largest block number
		}
	}
	// The checkpoint is read after the events: every anchored size is at
	// most its size, unless the gateway anchored a tree it does not serve.
	c, err := l.Checkpoint(ctx)
	if err != nil {
		return receipt.Checkpoint{}, nil, 0, err
	}
	hashes := tlog.TileHashReader(c.Tree(), l.tiles(ctx))
	checks := make([]AnchorCheck, len(found))
	var first error
	for i, a := range found {
		checks[i] = AnchorCheck{Anchor: a, Err: checkAnchorLog(a, c, hashes, *wk.Log)}
		if checks[i].Err == nil {
			checks[i].OnChain, checks[i].Block = true, a.Block
		} else if first == nil {
			first = fmt.Errorf("anchor of size %d on chain (transaction %s, block %d): %w", a.Size, a.Transaction.Hex(), a.Block, checks[i].Err)
		}
	}
	return c, checks, head, first
}
