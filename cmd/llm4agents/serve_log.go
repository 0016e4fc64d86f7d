package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/ethereum/go-ethereum/common"

	"github.com/llm4agents/llm4agents/contracts"
	"github.com/llm4agents/llm4agents/internal/chain"
	"github.com/llm4agents/llm4agents/internal/config"
	"github.com/llm4agents/llm4agents/internal/receiptlog"
	"github.com/llm4agents/llm4agents/internal/store"
)

// buildLog wires the receipt log (D30) from a validated config on the opened
// store db, as replica holder. With log.anchor on, the in-process
// facilitator's sender (nil with a remote one, which config.Validate
// refuses) anchors it on chainNode. It returns the log and the stop of its
// integrator, which gives the lease back.
func buildLog(ctx context.Context, cfg *config.Config, db backend, holder string, sender *chain.Sender, chainNode node, getenv func(string) string, log *slog.Logger) (*receiptlog.Log, func(), error) {
	st, ok := db.(receiptlog.Store)
	if !ok {
		kind, _, _ := cfg.Store.StoreDSN(getenv)
		return nil, nil, fmt.Errorf("log: the %s store does not hold the receipt log", kind)
	}
	key, vkey, err := cfg.LogKey(getenv)
	if err != nil {
		return nil, nil, err
	}
	var anchor *receiptlog.Anchoring
	if cfg.Log.Anchor.Enabled {
		if anchor, err = logAnchoring(ctx, cfg, db, sender, chainNode, log); err != nil {
			return nil, nil, err
		}
	}
	l, err := receiptlog.New(receiptlog.Config{Store: st, Key: key, VerifierKey: vkey, Holder: holder,
		MaxMergeDelay: cfg.Log.MaxMergeDelay, Log: log, Anchor: anchor})
	if err != nil {
		return nil, nil, err
	}
	runCtx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { l.Run(runCtx) })
	return l, func() { cancel(); wg.Wait() }, nil
}

// anchorCheckTimeout bounds the look at the anchor contract's code at start.
const anchorCheckTimeout = 10 * time.Second

// logAnchoring is the log's anchoring: sent by sender, at log.anchor.contract
// on the node, which must hold code there. Code other than our
// ReceiptLogAnchor's is only warned about: the same source compiled with
// other settings differs, and works.
func logAnchoring(ctx context.Context, cfg *config.Config, db backend, sender *chain.Sender, chainNode node, log *slog.Logger) (*receiptlog.Anchoring, error) {
	anchors, ok := db.(store.LogAnchors)
	switch {
	case sender == nil || chainNode == nil:
		return nil, errors.New("log.anchor: anchors are sent by the in-process facilitator's signer, and there is none")
	case !ok:
		return nil, errors.New("log.anchor: the store does not keep anchors")
	}
	contract, err := cfg.Log.Anchor.ContractAddress()
	if err != nil || contract == (common.Address{}) {
		return nil, errors.New("log.anchor.contract: is required: the ReceiptLogAnchor contract (`llm4agents devnet` prints it as receiptLogAnchor)")
	}
	cctx, cancel := context.WithTimeout(ctx, anchorCheckTimeout)
	defer cancel()
	code, err := chainNode.CodeAt(cctx, contract, nil)
	switch {
	case err != nil:
		return nil, fmt.Errorf("log.anchor.contract: read the code at %s: %w", contract.Hex(), err)
	case len(code) == 0:
		return nil, fmt.Errorf("log.anchor.contract: %s holds no contract on %s: deploy ReceiptLogAnchor there (llm4agents log deploy-anchor)", contract.Hex(), cfg.Network.ID)
	case !bytes.Equal(code, common.FromHex(contracts.ReceiptLogAnchorRuntimeBin)):
		log.Warn("log.anchor.contract holds code other than this release's ReceiptLogAnchor; anchors are checked by their Anchored events",
			"contract", contract.Hex())
	}
	return &receiptlog.Anchoring{Network: cfg.Network.ID, Contract: contract, Every: cfg.Log.Anchor.Every,
		Sender: sender, OtherSenders: cfg.Log.Anchor.SenderAddresses(), Node: chainNode, Store: anchors}, nil
}
