// Package devchain runs an embedded EVM chain for `llm4agents demo` and local
// development: go-ethereum's simulated backend (chain id 1337) with our EIP-3009
// test token deployed as "USD Coin" version "2", the receipt log's anchor
// contract deployed after it, Permit2 and the x402 upto proxy at their
// canonical addresses (contracts.Permit2Address, contracts.UptoProxyAddress),
// and the well-known dev accounts funded. Blocks are sealed automatically while transactions are pending, so code
// that broadcasts and waits for receipts behaves as on a real chain.
//
// Nothing here is secret: the dev keys are public test keys.
package devchain

import (
	"context"
	"crypto/ecdsa"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"sync"
	"time"

	"github.com/ethereum/go-ethereum/accounts/abi/bind"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/ethereum/go-ethereum/ethclient/simulated"
	"github.com/ethereum/go-ethereum/params"

	"github.com/llm4agents/llm4agents/contracts"
)

// Chain facts.
const (
	ChainID      = 1337
	Network      = "eip155:1337"
	TokenName    = "USD Coin"
	TokenVersion = "2"
	TokenDecimal = 6
)

// devKeys are the first accounts of the mnemonic "test test ... junk" that anvil
// and hardhat fund by default.
var devKeys = [...]string{
	"ac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80",
	"59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d",
	"5de4111afa1a4b94908f83103eb1f1706367c2e68ca870fc3fb9a804cdab365a",
	"7c852118294e51e653712a81e05800f419141751be58f605c371e15141b007a6",
	"47e179ec197488593b187f80a00eb0da91f1b9d0b13f8733639f19c30a34926a",
	"8b3a350cf5c34c9194ca85829a2df0ec3153be0318b5e2d3348e872092edffba",
	"92db14e403b83dfe3df233f83dfa3a0d7096f21ca9b0d6d6b8d88b2b4ec1564e",
	"4bbbf85ce3377467afe5d46f804f221813b2bb87f24d81f60f1fcdbf7cbf4356",
	"dbda1821b80551c9d65939329250298aa3472ba22feea921c0cf5d620ea67b97",
	"2a871d0798f97d79848a013d4936a73bf4cc922c825d33c1cf7073dff6d409c6",
}

// NumKeys is how many dev keys Key knows.
const NumKeys = len(devKeys)

// Key returns dev key i. It panics when i is out of range: dev keys are
// constants, and a bad index is a programming error.
func Key(i int) *ecdsa.PrivateKey {
	k, err := crypto.HexToECDSA(devKeys[i])
	if err != nil {
		panic(fmt.Sprintf("devchain: dev key %d: %v", i, err))
	}
	return k
}

// Address returns the address of Key(i).
func Address(i int) common.Address { return crypto.PubkeyToAddress(Key(i).PublicKey) }

// Chain is a running embedded chain.
type Chain struct {
	Backend *simulated.Backend
	Client  simulated.Client
	ChainID *big.Int
	Token   common.Address
	// Anchor is the ReceiptLogAnchor the demo's gateway anchors its receipt
	// log at: dev account 0's second contract, after the token.
	Anchor common.Address

	// Permit2 and UptoProxy are contracts.Permit2Address and
	// contracts.UptoProxyAddress, where the genesis placed them.
	Permit2   common.Address
	UptoProxy common.Address

	log    *slog.Logger
	sealMu sync.Mutex
	stop   context.CancelFunc
	wg     sync.WaitGroup
}

// Start launches the chain, funds every dev account with ETH, places Permit2
// and the upto proxy in the genesis, deploys the token and then the receipt
// log's anchor contract from Key(0), and seals blocks every interval while
// transactions are pending.
func Start(ctx context.Context, interval time.Duration, log *slog.Logger) (*Chain, error) {
	alloc := make(types.GenesisAlloc, NumKeys+2)
	eth := new(big.Int).Mul(big.NewInt(10_000), big.NewInt(params.Ether))
	for i := range NumKeys {
		alloc[Address(i)] = types.Account{Balance: new(big.Int).Set(eth)}
	}
	// In the genesis, not deployed: the official clients expect them at their
	// canonical addresses, and the token stays Key(0)'s first contract.
	contracts.AddCanonicalAlloc(alloc)
	b := simulated.NewBackend(alloc)
	c := &Chain{
		Backend: b, Client: b.Client(), ChainID: big.NewInt(ChainID),
		Permit2: contracts.Permit2Address, UptoProxy: contracts.UptoProxyAddress,
		log: log.With("component", "devchain"),
	}
	auth := mustTransactor(Key(0), c.ChainID)
	addr, tx, _, err := contracts.DeployEIP3009Token(auth, c.Client, TokenName, TokenVersion, TokenDecimal)
	if err != nil {
		_ = b.Close() // the deploy error is the one worth reporting
		return nil, fmt.Errorf("deploy token: %w", err)
	}
	c.Token = addr
	if err := c.mine(ctx, tx); err != nil {
		_ = b.Close() // the deploy error is the one worth reporting
		return nil, fmt.Errorf("deploy token: %w", err)
	}
	if addr, tx, _, err = contracts.DeployReceiptLogAnchor(auth, c.Client); err == nil {
		err = c.mine(ctx, tx)
	}
	if err != nil {
		_ = b.Close() // the deploy error is the one worth reporting
		return nil, fmt.Errorf("deploy the receipt log anchor: %w", err)
	}
	c.Anchor = addr
	loopCtx, cancel := context.WithCancel(context.Background())
	c.stop = cancel
	c.wg.Add(1)
	go c.autoSeal(loopCtx, interval)
	return c, nil
}

func (c *Chain) autoSeal(ctx context.Context, interval time.Duration) {
	defer c.wg.Done()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n, err := c.Client.PendingTransactionCount(ctx)
		if err == nil && n > 0 {
			c.seal()
		}
	}
}

func (c *Chain) seal() {
	c.sealMu.Lock()
	defer c.sealMu.Unlock()
	c.Backend.Commit()
}

// mine seals until tx has a receipt, and checks that it succeeded.
func (c *Chain) mine(ctx context.Context, tx *types.Transaction) error {
	for range 50 {
		c.seal()
		r, err := c.Client.TransactionReceipt(ctx, tx.Hash())
		if err == nil {
			if r.Status != types.ReceiptStatusSuccessful {
				return fmt.Errorf("transaction %s reverted", tx.Hash().Hex())
			}
			return nil
		}
	}
	return fmt.Errorf("transaction %s not mined", tx.Hash().Hex())
}

// Mint gives to amount atomic units of the token.
func (c *Chain) Mint(ctx context.Context, to common.Address, amount *big.Int) error {
	token, err := contracts.NewEIP3009Token(c.Token, c.Client)
	if err != nil {
		return err
	}
	auth := mustTransactor(Key(0), c.ChainID)
	auth.Context = ctx
	tx, err := token.Mint(auth, to, amount)
	if err != nil {
		return fmt.Errorf("mint: %w", err)
	}
	return c.mine(ctx, tx)
}

// ApprovePermit2 lets Permit2 move up to amount of dev account i's tokens:
// the one approval an upto buyer gives.
func (c *Chain) ApprovePermit2(ctx context.Context, i int, amount *big.Int) error {
	token, err := contracts.NewEIP3009Token(c.Token, c.Client)
	if err != nil {
		return err
	}
	auth := mustTransactor(Key(i), c.ChainID)
	auth.Context = ctx
	tx, err := token.Approve(auth, contracts.Permit2Address, amount)
	if err != nil {
		return fmt.Errorf("approve Permit2: %w", err)
	}
	return c.mine(ctx, tx)
}

// BalanceOf returns the token balance of addr.
func (c *Chain) BalanceOf(ctx context.Context, addr common.Address) (*big.Int, error) {
	token, err := contracts.NewEIP3009Token(c.Token, c.Client)
	if err != nil {
		return nil, err
	}
	return token.BalanceOf(&bind.CallOpts{Context: ctx}, addr)
}

// Close stops sealing and shuts the chain down.
func (c *Chain) Close() error {
	c.stop()
	c.wg.Wait()
	return errors.Join(c.Backend.Close())
}

func mustTransactor(key *ecdsa.PrivateKey, chainID *big.Int) *bind.TransactOpts {
	auth, err := bind.NewKeyedTransactorWithChainID(key, chainID)
	if err != nil {
		panic(fmt.Sprintf("devchain: transactor: %v", err))
	}
	return auth
}
