package main

import (
	"context"
	"fmt"
	"io"
	"math/big"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/ethereum/go-ethereum/ethclient"

	"github.com/llm4agents/llm4agents/client"
)

// nodeTimeout bounds connecting to an --rpc node and reading its chain id.
const nodeTimeout = 10 * time.Second

// dialBalances connects to the --rpc node and returns the balances of its
// chain, with the function that closes the connection. Its errors never
// repeat the URL, which may carry an API key.
func dialBalances(ctx context.Context, rpc string) (*client.NodeBalances, func(), error) {
	ctx, cancel := context.WithTimeout(ctx, nodeTimeout)
	defer cancel()
	ec, err := ethclient.DialContext(ctx, rpc)
	if err != nil {
		return nil, nil, redactURL(err, rpc)
	}
	id, err := ec.ChainID(ctx)
	if err != nil {
		ec.Close()
		return nil, nil, fmt.Errorf("chain id: %w", redactURL(err, rpc))
	}
	return client.NewNodeBalances(ec, id), ec.Close, nil
}

// ownerBalances reads owner's balances whichever payer it is asked about. A
// dry run's Transport signs with nullSigner, which has no address of its
// own; the balances that matter are the wallet's.
type ownerBalances struct {
	b     client.Balances
	owner common.Address
}

func (o ownerBalances) Balance(ctx context.Context, network string, asset, _ common.Address) (*big.Int, error) {
	return o.b.Balance(ctx, network, asset, o.owner)
}

// balanceCheck is what a dry run says of the wallet's balances.
type balanceCheck struct {
	// Network is the chain the --rpc node reads; absent when it was not
	// reached.
	Network string `json:"network,omitempty"`
	Owner   string `json:"owner,omitempty"`
	// Note says it for a person.
	Note string `json:"note"`
}

// dryRunBalances connects, with --rpc, to the node a dry run reads the
// wallet's balances from. It returns the Balances for the dry run's
// Transport (nil when it reads none), what to say of them, and the function
// that closes the node. Like checkApproval it reads the key's address but
// signs nothing, and what it cannot read it says it cannot tell.
func dryRunBalances(ctx context.Context, f *payFlags, e env) (client.Balances, *balanceCheck, func()) {
	c := &balanceCheck{}
	cannot := func(why string) (client.Balances, *balanceCheck, func()) {
		c.Note = "the wallet's balances were not read, so no offer is refused for them: " + why
		return nil, c, func() {}
	}
	key, err := loadWallet(f.buyer.keyFile, e.getenv, io.Discard)
	if err != nil {
		return cannot("no wallet key to name the owner (--key-file or " + walletKeyEnv + ")")
	}
	owner := crypto.PubkeyToAddress(key.PublicKey)
	c.Owner = owner.Hex()
	nb, closeNode, err := dialBalances(ctx, f.rpc)
	if err != nil {
		return cannot(fmt.Sprintf("--rpc: %v", err))
	}
	c.Network = nb.Network()
	c.Note = fmt.Sprintf("read on %s for %s: an offer there over the wallet's balance is refused (balance); offers on other chains are judged without it",
		c.Network, c.Owner)
	return ownerBalances{b: nb, owner: owner}, c, closeNode
}

var _ client.Balances = ownerBalances{}
