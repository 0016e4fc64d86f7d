package facilitator

import (
	"context"
	"fmt"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"

	"github.com/llm4agents/llm4agents/x402"
	"github.com/llm4agents/llm4agents/x402/evm/exact"
	"github.com/llm4agents/llm4agents/x402/evm/upto"
)

// ChainReader is what a ChainConfirmer reads from a node: the
// authorization's state, the logs of its use, that transaction and its
// receipt.
// Backend and *ethclient.Client satisfy it.
type ChainReader interface {
	exact.Chain
	ethereum.LogFilterer
	TransactionReceipt(ctx context.Context, hash common.Hash) (*types.Receipt, error)
	BlockNumber(ctx context.Context) (uint64, error)
	// TransactionByHash reads a settle call's data: Permit2 logs no event of
	// its own per use, so an upto permit's use is found by its calldata.
	TransactionByHash(ctx context.Context, hash common.Hash) (*types.Transaction, bool, error)
}

// ChainConfirmer tells from the chain alone whether an authorization was
// paid (D1, D5), whoever settled it. The in-process facilitator
// confirms with one; a gateway behind a remote facilitator adds one when it
// has a node, so that a settle answer lost to a timeout or a dropped
// connection is resolved from the chain instead of being taken for "not
// paid".
type ChainConfirmer struct {
	chain    ChainReader
	lookback uint64
}

// NewChainConfirmer returns a ChainConfirmer reading chain, searching the
// last lookback blocks (DefaultLookbackBlocks when 0) for an
// authorization's use.
func NewChainConfirmer(chain ChainReader, lookback uint64) *ChainConfirmer {
	if lookback == 0 {
		lookback = DefaultLookbackBlocks
	}
	return &ChainConfirmer{chain: chain, lookback: lookback}
}

// Confirm tells whether the authorization of p was paid to req.payTo: used
// on chain by a successful transaction whose logs carry the exact transfer.
// It returns that transaction. It is a read: it marks nothing and reports to
// no one.
func (c *ChainConfirmer) Confirm(ctx context.Context, p *x402.PaymentPayload, req x402.PaymentRequirements) (string, bool, error) {
	pm, ok := confirmable(p, req)
	if !ok {
		return "", false, nil
	}
	return c.confirm(ctx, pm)
}

// ConfirmAuthorization is Confirm for an authorization known by its parts
// alone (asset, from, to, value, nonce), as a record keeps them: whether it
// was used on chain by a successful transaction that paid a.To exactly
// a.Value. Its signature and validity window play no part.
func (c *ChainConfirmer) ConfirmAuthorization(ctx context.Context, network string, asset common.Address, a exact.Authorization) (string, bool, error) {
	if a.Value == nil {
		return "", false, nil
	}
	return c.confirm(ctx, exactPayment{&exact.Verified{Payload: &exact.Payload{Authorization: a}, Network: network, Asset: asset, PayTo: a.To}})
}

func (c *ChainConfirmer) confirm(ctx context.Context, pm payment) (string, bool, error) {
	used, err := pm.used(ctx, c.chain)
	if err != nil || !used {
		return "", false, err
	}
	ev, receipt, err := c.findUse(ctx, pm)
	if err != nil || ev == nil || ev.Canceled || receipt == nil {
		return "", false, err
	}
	if receipt.Status != types.ReceiptStatusSuccessful || !pm.paidBy(receipt.Logs) {
		return "", false, nil
	}
	return ev.TxHash.Hex(), true, nil
}

// findUse finds the transaction that used pm's authorization within the
// lookback, and its receipt; nil when none did.
func (c *ChainConfirmer) findUse(ctx context.Context, pm payment) (*exact.UseEvent, *types.Receipt, error) {
	head, err := c.chain.BlockNumber(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("read block number: %w", err)
	}
	from := uint64(0)
	if head > c.lookback {
		from = head - c.lookback
	}
	ev, err := pm.findUse(ctx, c.chain, from)
	if err != nil || ev == nil {
		return ev, nil, err
	}
	receipt, err := c.chain.TransactionReceipt(ctx, ev.TxHash)
	if err != nil {
		return ev, nil, fmt.Errorf("read receipt: %w", err)
	}
	return ev, receipt, nil
}

// confirmable parses what Confirm reads from p and req. It reports false when
// either is malformed or the authorization pays someone other than req.PayTo:
// such an authorization cannot have paid req, so Confirm answers "not paid"
// rather than an error.
func confirmable(p *x402.PaymentPayload, req x402.PaymentRequirements) (payment, bool) {
	if req.Scheme == upto.Scheme {
		return uptoConfirmable(p, req)
	}
	pl, err := exact.ParsePayload(p.Payload)
	if err != nil {
		return nil, false
	}
	asset, err := exact.ParseAddress(req.Asset)
	if err != nil {
		return nil, false
	}
	payTo, err := exact.ParseAddress(req.PayTo)
	if err != nil || pl.Authorization.To != payTo {
		return nil, false
	}
	return exactPayment{&exact.Verified{Payload: pl, Network: req.Network, Asset: asset, PayTo: payTo}}, true
}

// uptoConfirmable is confirmable for an upto permit. The charge is whatever
// its settlement moved, so the payment's Amount stays nil (paidBy).
func uptoConfirmable(p *x402.PaymentPayload, req x402.PaymentRequirements) (payment, bool) {
	pl, err := upto.ParsePayload(p.Payload)
	if err != nil {
		return nil, false
	}
	asset, err := exact.ParseAddress(req.Asset)
	if err != nil {
		return nil, false
	}
	payTo, err := exact.ParseAddress(req.PayTo)
	a := &pl.Authorization
	if err != nil || a.Witness.To != payTo || a.Permitted.Token != asset {
		return nil, false
	}
	return uptoPayment{&upto.Verified{Payload: pl, Network: req.Network, Asset: asset, PayTo: payTo}}, true
}
