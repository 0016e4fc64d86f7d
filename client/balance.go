package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"time"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/common"

	"github.com/llm4agents/llm4agents/x402"
	"github.com/llm4agents/llm4agents/x402/evm/exact"
	"github.com/llm4agents/llm4agents/x402/evm/upto"
)

// Balances reads how much of a token a payer holds, so that a Transport can
// pass over an option the wallet cannot fund for the next one (see
// Policy.Balances). Any error means the balance is unknown, which refuses
// nothing; an implementation that does not read network at all says so with
// an error wrapping ErrBalanceUnknown.
type Balances interface {
	// Balance returns owner's balance of the token asset on network (a CAIP-2
	// id such as "eip155:8453"), in atomic units.
	Balance(ctx context.Context, network string, asset, owner common.Address) (*big.Int, error)
}

// Permit2Allowances is a Balances that also reads what Permit2 may move of
// a payer's token (the token's ERC-20 allowance to Permit2), so that a
// Transport passes over an upto option the wallet has not approved Permit2
// for, for the next option (an exact one, say), instead of signing a permit
// the server refuses. NodeBalances is one. Errors are as Balance's: an
// allowance that cannot be read refuses nothing.
type Permit2Allowances interface {
	Permit2Allowance(ctx context.Context, network string, asset, owner common.Address) (*big.Int, error)
}

// ErrBalanceUnknown is wrapped by a Balances that cannot read the network it
// is asked about. A Transport tries such an option as if no Balances were
// set.
var ErrBalanceUnknown = errors.New("client: balance unknown")

// balanceTimeout bounds one balance read: a slow node costs the payment a
// few seconds, never the request's whole deadline.
const balanceTimeout = 5 * time.Second

// NodeBalances reads ERC-20 balances (balanceOf) from a node of one EVM
// chain, at its latest block. Asked about any other network it returns
// ErrBalanceUnknown. It keeps nothing between reads and is safe for
// concurrent use.
type NodeBalances struct {
	node    ethereum.ContractCaller
	chainID *big.Int
}

// NewNodeBalances returns a NodeBalances reading chain chainID through node,
// an *ethclient.Client for instance. The caller makes sure node is a node of
// that chain (ethclient.Client.ChainID says); a node of another chain would
// answer for the wrong tokens.
func NewNodeBalances(node ethereum.ContractCaller, chainID *big.Int) *NodeBalances {
	return &NodeBalances{node: node, chainID: new(big.Int).Set(chainID)}
}

// Network is the CAIP-2 id of the chain b reads, such as "eip155:8453".
func (b *NodeBalances) Network() string { return "eip155:" + b.chainID.String() }

// reads returns nil if network is b's chain, and otherwise ErrBalanceUnknown
// naming both.
func (b *NodeBalances) reads(network string) error {
	if id, err := exact.ChainID(network); err != nil || id.Cmp(b.chainID) != 0 {
		return fmt.Errorf("%w: %s is not %s", ErrBalanceUnknown, network, b.Network())
	}
	return nil
}

// Balance returns owner's balance of the token asset, or ErrBalanceUnknown
// when network is not b's chain.
func (b *NodeBalances) Balance(ctx context.Context, network string, asset, owner common.Address) (*big.Int, error) {
	if err := b.reads(network); err != nil {
		return nil, err
	}
	bal, err := exact.BalanceOf(ctx, b.node, asset, owner)
	if err != nil {
		return nil, fmt.Errorf("balance of %s in %s on %s: %w", owner.Hex(), asset.Hex(), network, err)
	}
	if bal == nil {
		return nil, fmt.Errorf("balance of %s in %s on %s: no value returned", owner.Hex(), asset.Hex(), network)
	}
	return bal, nil
}

// reserveFunded is ledger.reserve that also passes over an option the payer's
// balance cannot fund, when the Policy has Balances. Balances are read one
// option at a time, in the order the Transport prefers them, and only for
// an option that the policy and the budget allow: the first one funded, or
// whose balance is unknown, is the one chosen. The chosen option is held
// while its balance is read, as it is while it is signed, so that calls in
// flight never commit more than the budget between them.
//
// Balances are read only for a call's first authorization. A call that has
// signed one before (a retry whose recorded authorization is too close to
// its validBefore) may have been paid by it already, and the funds it moved
// say nothing about what this call can pay: the server recognises the call
// by its payment id, and refuses an unfunded payment itself.
func (t *Transport) reserveFunded(ctx context.Context, c *call, r *rules, pr *x402.PaymentRequired) (int, *big.Int, []Option) {
	i, amount, opts := t.ledger.reserve(r, pr)
	if r.balances == nil || c.e.Header != "" {
		return i, amount, opts
	}
	checked := *r
	checked.unfunded = map[int]verdict{}
	for i >= 0 {
		v, ok := t.funded(ctx, c, r.balances, pr.Accepts[i], amount)
		if ok {
			return i, amount, opts
		}
		t.ledger.release(amount)
		checked.unfunded[i] = v
		i, amount, opts = t.ledger.reserve(&checked, pr)
	}
	return i, amount, opts
}

// funded reads the payer's balance of req's asset and says whether it covers
// amount (an upto option's maximum), or else the refusal. A balance that
// cannot be read covers it: the server refuses an unfunded payment with its
// own reason, and charges nothing.
func (t *Transport) funded(ctx context.Context, c *call, b Balances, req x402.PaymentRequirements, amount *big.Int) (verdict, bool) {
	asset, err := exact.ParseAddress(req.Asset)
	if err != nil {
		return verdict{}, true // judge refused it already; not reached
	}
	log := c.log.With(paymentAttrs(req)...)
	rctx, cancel := context.WithTimeout(ctx, balanceTimeout)
	defer cancel()
	bal, err := b.Balance(rctx, req.Network, asset, t.Signer.Address())
	switch {
	case errors.Is(err, ErrBalanceUnknown):
		log.DebugContext(ctx, "balance not read; trying the option", "error", err.Error())
		return verdict{}, true
	case err != nil:
		log.InfoContext(ctx, "balance read failed; trying the option", "error", err.Error())
		return verdict{}, true
	case bal == nil:
		log.InfoContext(ctx, "balance read returned no value; trying the option")
		return verdict{}, true
	case amount.Cmp(bal) <= 0:
		return t.approved(ctx, log, b, req, asset, amount)
	}
	what := "amount"
	if req.Scheme == upto.Scheme {
		what = "maximum"
	}
	log.InfoContext(ctx, "option passed over: the balance does not cover it", "balance", bal.String())
	return refuse(RefusedBalance, "the payer holds %s of the asset, less than the %s %s", bal, what, amount), false
}

// approved says whether the payer's allowance to Permit2 covers an upto
// option's maximum, when b reads allowances (Permit2Allowances); any other
// option, or an allowance that cannot be read, passes.
func (t *Transport) approved(ctx context.Context, log *slog.Logger, b Balances, req x402.PaymentRequirements, asset common.Address, maximum *big.Int) (verdict, bool) {
	pa, ok := b.(Permit2Allowances)
	if !ok || req.Scheme != upto.Scheme {
		return verdict{}, true
	}
	rctx, cancel := context.WithTimeout(ctx, balanceTimeout)
	defer cancel()
	allowance, err := pa.Permit2Allowance(rctx, req.Network, asset, t.Signer.Address())
	switch {
	case err != nil:
		log.InfoContext(ctx, "Permit2 allowance not read; trying the option", "error", err.Error())
		return verdict{}, true
	case allowance == nil || maximum.Cmp(allowance) <= 0:
		return verdict{}, true
	}
	log.InfoContext(ctx, "option passed over: the Permit2 allowance does not cover it", "allowance", allowance.String())
	return refuse(RefusedPermit2Allowance,
		"the payer's Permit2 allowance of the asset is %s, less than the maximum %s (approve Permit2 once: llm4agents wallet approve-permit2)",
		allowance, maximum), false
}

// Permit2Allowance returns what Permit2 may move of owner's token asset,
// or ErrBalanceUnknown when network is not b's chain.
func (b *NodeBalances) Permit2Allowance(ctx context.Context, network string, asset, owner common.Address) (*big.Int, error) {
	if err := b.reads(network); err != nil {
		return nil, err
	}
	allowance, err := upto.Permit2Allowance(ctx, b.node, asset, owner)
	if err != nil {
		return nil, fmt.Errorf("Permit2 allowance of %s in %s on %s: %w", owner.Hex(), asset.Hex(), network, err)
	}
	return allowance, nil
}

var (
	_ Balances          = (*NodeBalances)(nil)
	_ Permit2Allowances = (*NodeBalances)(nil)
)
