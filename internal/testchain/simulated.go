package testchain

import (
	"context"
	"crypto/ecdsa"
	"errors"
	"math/big"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/accounts/abi"
	"github.com/ethereum/go-ethereum/accounts/abi/bind"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/ethereum/go-ethereum/ethclient/simulated"
	"github.com/ethereum/go-ethereum/params"

	"github.com/llm4agents/llm4agents/contracts"
)

const (
	// SimulatedChainID is the chain id of every simulated backend.
	SimulatedChainID = 1337

	// SimulatedPayers is how many dev accounts NewSimulated gives tokens to:
	// DevAddress(1) through DevAddress(SimulatedPayers). DevAddress(0), the
	// deployer, and the accounts after the payers start with no tokens, which
	// makes them good payees and facilitators.
	SimulatedPayers = 5

	// SimulatedPayerBalance is the token balance, in atomic units, that each
	// payer starts with: 1,000 tokens at 6 decimals.
	SimulatedPayerBalance = 1_000_000_000

	// simulatedTokenName, simulatedTokenVersion and simulatedTokenDecimals
	// match USDC on Base, so the EIP-712 domain looks like the real one.
	simulatedTokenName     = "USD Coin"
	simulatedTokenVersion  = "2"
	simulatedTokenDecimals = 6

	// simulatedTimeout bounds every call a helper makes to the backend.
	simulatedTimeout = 30 * time.Second

	// defaultAutoCommitInterval is used when StartAutoCommit gets no interval.
	defaultAutoCommitInterval = 10 * time.Millisecond
)

// Simulated is an in-process Ethereum chain (go-ethereum's simulated
// backend, chain id 1337) with the dev accounts funded, EIP3009Token
// deployed, and Permit2 and the x402 upto proxy in the genesis at their
// canonical addresses. Blocks are only sealed by Commit, or by the auto-commit loop that
// StartAutoCommit runs.
//
// Every sealed block is at least one second later than its parent, so a test
// that seals many blocks quickly runs the chain's clock ahead of the wall
// clock; keep authorization windows generous, or read BlockTime.
type Simulated struct {
	// Backend is the underlying simulated chain. Seal blocks and adjust time
	// through Simulated's methods, not Backend's: they serialize with the
	// auto-commit loop, which the backend itself does not do.
	Backend *simulated.Backend

	// Client talks to the chain. Use it rather than Backend.Client(): it
	// tells the auto-commit loop about every transaction sent through it.
	Client simulated.Client

	// ChainID is 1337.
	ChainID *big.Int

	// Token is the address of the EIP3009Token deployed as "USD Coin",
	// version "2", 6 decimals, and TokenContract a binding to it.
	Token         common.Address
	TokenContract *contracts.EIP3009Token

	// Permit2 and UptoProxy are bindings to our Permit2 and
	// X402UptoPermit2Proxy at contracts.Permit2Address and
	// contracts.UptoProxyAddress.
	Permit2   *contracts.Permit2
	UptoProxy *contracts.X402UptoPermit2Proxy

	// Keys are DevKey(0) through DevKey(NumDevKeys-1), each funded with
	// 10,000 ETH. Keys[0] deployed the token and sends the transactions of
	// Mint and DeployWallet; avoid sending from it concurrently with those.
	Keys []*ecdsa.PrivateKey

	// sent is set when a transaction went through Client since the last
	// block was sealed.
	sent atomic.Bool

	// sealMu serializes sealing: the simulated beacon is not safe for
	// concurrent Commit calls.
	sealMu sync.Mutex

	// deployerMu serializes the helpers that send from Keys[0], so their
	// nonces do not collide.
	deployerMu sync.Mutex

	autoMu   sync.Mutex
	autoStop func() // stops the auto-commit loop and waits for it; nil if none runs
}

// NewSimulated starts a simulated chain, funds the ten dev accounts with ETH,
// places Permit2 and the upto proxy at their canonical addresses, deploys EIP3009Token("USD Coin", "2", 6) from DevKey(0), and mints
// SimulatedPayerBalance tokens to each of DevAddress(1) through
// DevAddress(SimulatedPayers). The chain is closed when tb's test ends.
func NewSimulated(tb testing.TB) *Simulated {
	tb.Helper()

	keys := make([]*ecdsa.PrivateKey, NumDevKeys)
	alloc := make(types.GenesisAlloc, NumDevKeys+2)
	eth := new(big.Int).Mul(big.NewInt(10_000), big.NewInt(params.Ether))
	for i := range keys {
		keys[i] = DevKey(i)
		alloc[crypto.PubkeyToAddress(keys[i].PublicKey)] = types.Account{Balance: new(big.Int).Set(eth)}
	}
	contracts.AddCanonicalAlloc(alloc)

	backend := simulated.NewBackend(alloc)
	s := &Simulated{
		Backend: backend,
		ChainID: big.NewInt(SimulatedChainID),
		Keys:    keys,
	}
	tb.Cleanup(func() {
		// The auto-commit loop must not seal on a closed backend.
		s.stopAutoCommit()
		if err := backend.Close(); err != nil {
			tb.Errorf("close simulated backend: %v", err)
		}
	})
	s.Client = notifyingClient{Client: backend.Client(), sent: &s.sent}
	var err error
	if s.Permit2, err = contracts.NewPermit2(contracts.Permit2Address, s.Client); err != nil {
		tb.Fatalf("bind Permit2: %v", err)
	}
	if s.UptoProxy, err = contracts.NewX402UptoPermit2Proxy(contracts.UptoProxyAddress, s.Client); err != nil {
		tb.Fatalf("bind X402UptoPermit2Proxy: %v", err)
	}

	ctx, cancel := context.WithTimeout(tb.Context(), simulatedTimeout)
	defer cancel()
	if id, err := s.Client.ChainID(ctx); err != nil {
		tb.Fatalf("simulated chain id: %v", err)
	} else if id.Cmp(s.ChainID) != 0 {
		tb.Fatalf("simulated chain id is %s, want %d", id, SimulatedChainID)
	}

	addr, tx, token, err := contracts.DeployEIP3009Token(s.Transactor(tb, 0), s.Client,
		simulatedTokenName, simulatedTokenVersion, simulatedTokenDecimals)
	if err != nil {
		tb.Fatalf("deploy EIP3009Token: %v", err)
	}
	s.requireSuccess(tb, "deploy EIP3009Token", tx)
	s.Token, s.TokenContract = addr, token

	// Send every mint before sealing, so they share one block. Nonces are set
	// here: the node's pending nonce may lag behind transactions just sent, which
	// made two mints share a nonce.
	opts := s.Transactor(tb, 0)
	nonce, err := s.Client.NonceAt(ctx, s.Addr(0), nil)
	if err != nil {
		tb.Fatalf("nonce of dev account 0: %v", err)
	}
	txs := make([]*types.Transaction, 0, SimulatedPayers)
	for i := 1; i <= SimulatedPayers; i++ {
		opts.Nonce = new(big.Int).SetUint64(nonce + uint64(i-1))
		tx, err := token.Mint(opts, s.Addr(i), big.NewInt(SimulatedPayerBalance))
		if err != nil {
			tb.Fatalf("mint to dev account %d: %v", i, err)
		}
		txs = append(txs, tx)
	}
	for _, tx := range txs {
		s.requireSuccess(tb, "mint", tx)
	}
	return s
}

// Addr returns the address of Keys[i].
func (s *Simulated) Addr(i int) common.Address {
	return crypto.PubkeyToAddress(s.Keys[i].PublicKey)
}

// Transactor returns fresh transaction options that sign with Keys[i] for
// this chain.
func (s *Simulated) Transactor(tb testing.TB, i int) *bind.TransactOpts {
	tb.Helper()
	opts, err := bind.NewKeyedTransactorWithChainID(s.Keys[i], s.ChainID)
	if err != nil {
		tb.Fatalf("transactor for dev key %d: %v", i, err)
	}
	return opts
}

// Commit seals the pending transactions into a new block and returns its
// hash. It is safe to call concurrently with the auto-commit loop.
func (s *Simulated) Commit() common.Hash {
	s.sealMu.Lock()
	defer s.sealMu.Unlock()
	// Transactions flagged before this point are in the pool already, so
	// this block includes them.
	s.sent.Store(false)
	return s.Backend.Commit()
}

// AdjustTime seals an empty block d later than the latest one. It fails the
// test if transactions are pending.
func (s *Simulated) AdjustTime(tb testing.TB, d time.Duration) {
	tb.Helper()
	s.sealMu.Lock()
	defer s.sealMu.Unlock()
	if err := s.Backend.AdjustTime(d); err != nil {
		tb.Fatalf("adjust simulated time by %s: %v", d, err)
	}
}

// BlockTime returns the timestamp of the latest block: the "now" that
// validAfter and validBefore are checked against, give or take the seconds
// the next block adds.
func (s *Simulated) BlockTime(tb testing.TB) time.Time {
	tb.Helper()
	ctx, cancel := context.WithTimeout(tb.Context(), simulatedTimeout)
	defer cancel()
	head, err := s.Client.HeaderByNumber(ctx, nil)
	if err != nil {
		tb.Fatalf("latest simulated header: %v", err)
	}
	// #nosec G115 -- the simulated chain starts at the wall clock and AdjustTime
	// moves it by a time.Duration at a time: far below 2^63 seconds.
	return time.Unix(int64(head.Time), 0)
}

// Mine seals a block with tx in it, unless a block already has it, and
// returns tx's receipt, whatever its status.
func (s *Simulated) Mine(tb testing.TB, tx *types.Transaction) *types.Receipt {
	tb.Helper()
	ctx, cancel := context.WithTimeout(tb.Context(), simulatedTimeout)
	defer cancel()
	if receipt, err := s.Client.TransactionReceipt(ctx, tx.Hash()); err == nil {
		return receipt
	}
	s.Commit()
	receipt, err := s.receipt(ctx, tx.Hash())
	if err != nil {
		tb.Fatalf("receipt of %s: %v", tx.Hash(), err)
	}
	return receipt
}

// Mint creates amount tokens for to, sealing a block.
func (s *Simulated) Mint(tb testing.TB, to common.Address, amount *big.Int) {
	tb.Helper()
	s.deployerMu.Lock()
	defer s.deployerMu.Unlock()
	tx, err := s.TokenContract.Mint(s.Transactor(tb, 0), to, amount)
	if err != nil {
		tb.Fatalf("mint %s to %s: %v", amount, to, err)
	}
	s.requireSuccess(tb, "mint", tx)
}

// ApprovePermit2 lets Permit2 move every token of dev account i, the one
// approval an upto buyer gives, sealing a block.
func (s *Simulated) ApprovePermit2(tb testing.TB, i int) {
	tb.Helper()
	tx, err := s.TokenContract.Approve(s.Transactor(tb, i), contracts.Permit2Address, abi.MaxUint256)
	if err != nil {
		tb.Fatalf("approve Permit2 for dev account %d: %v", i, err)
	}
	if r := s.Mine(tb, tx); r.Status != types.ReceiptStatusSuccessful {
		tb.Fatalf("approve Permit2 for dev account %d reverted", i)
	}
}

// DeployWallet deploys an ERC1271Wallet whose signer is owner and returns
// its address. The wallet starts with no tokens; Mint some to it.
func (s *Simulated) DeployWallet(tb testing.TB, owner common.Address) common.Address {
	tb.Helper()
	s.deployerMu.Lock()
	defer s.deployerMu.Unlock()
	addr, tx, _, err := contracts.DeployERC1271Wallet(s.Transactor(tb, 0), s.Client, owner)
	if err != nil {
		tb.Fatalf("deploy ERC1271Wallet for %s: %v", owner, err)
	}
	s.requireSuccess(tb, "deploy ERC1271Wallet", tx)
	return addr
}

// DeployReceiptLogAnchor deploys a ReceiptLogAnchor, the receipt log's
// anchor contract, from Keys[0], sealing a block, and returns its address
// and a binding to it.
func (s *Simulated) DeployReceiptLogAnchor(tb testing.TB) (common.Address, *contracts.ReceiptLogAnchor) {
	tb.Helper()
	s.deployerMu.Lock()
	defer s.deployerMu.Unlock()
	addr, tx, anchor, err := contracts.DeployReceiptLogAnchor(s.Transactor(tb, 0), s.Client)
	if err != nil {
		tb.Fatalf("deploy ReceiptLogAnchor: %v", err)
	}
	s.requireSuccess(tb, "deploy ReceiptLogAnchor", tx)
	return addr, anchor
}

// BalanceOf returns the token balance of addr at the newest canonical
// block. That may be one past "latest": geth makes a new head's block
// canonical, and its receipts visible, a moment before it moves latest to
// it, so a caller that has just seen a receipt could otherwise read the
// balance from before that block.
func (s *Simulated) BalanceOf(tb testing.TB, addr common.Address) *big.Int {
	tb.Helper()
	ctx, cancel := context.WithTimeout(tb.Context(), simulatedTimeout)
	defer cancel()
	n, err := s.Client.BlockNumber(ctx)
	if err != nil {
		tb.Fatalf("block number: %v", err)
	}
	for {
		if h, err := s.Client.HeaderByNumber(ctx, new(big.Int).SetUint64(n+1)); err != nil || h == nil {
			break
		}
		n++
	}
	bal, err := s.TokenContract.BalanceOf(&bind.CallOpts{Context: ctx, BlockNumber: new(big.Int).SetUint64(n)}, addr)
	if err != nil {
		tb.Fatalf("token balance of %s at block %d: %v", addr, n, err)
	}
	return bal
}

// StartAutoCommit starts a goroutine that, every interval (10ms if interval
// is not positive), seals a block if transactions are pending, so code that
// sends a transaction and waits for its receipt works as on a real chain.
// The goroutine stops when tb's test ends, or when the chain is closed if
// that comes first. Call it at most once per chain.
//
// Transactions sent through Client are sealed on the next tick; others are
// noticed through the pending block, which the node may cache for up to two
// seconds.
func (s *Simulated) StartAutoCommit(tb testing.TB, interval time.Duration) {
	tb.Helper()
	if interval <= 0 {
		interval = defaultAutoCommitInterval
	}
	s.autoMu.Lock()
	defer s.autoMu.Unlock()
	if s.autoStop != nil {
		tb.Fatal("StartAutoCommit called twice")
	}

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		ticker := time.NewTicker(interval)
		defer ticker.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-ticker.C:
			}
			if s.hasPending(ctx) {
				s.Commit()
			}
		}
	})
	s.autoStop = sync.OnceFunc(func() {
		cancel()
		wg.Wait()
	})
	tb.Cleanup(s.stopAutoCommit)
}

// stopAutoCommit stops the auto-commit loop, if one runs, and waits for it.
func (s *Simulated) stopAutoCommit() {
	s.autoMu.Lock()
	stop := s.autoStop
	s.autoMu.Unlock()
	if stop != nil {
		stop()
	}
}

// hasPending reports whether a transaction awaits sealing.
func (s *Simulated) hasPending(ctx context.Context) bool {
	if s.sent.Load() {
		return true
	}
	ctx, cancel := context.WithTimeout(ctx, simulatedTimeout)
	defer cancel()
	n, err := s.Client.PendingTransactionCount(ctx)
	// An error here is the backend shutting down or ctx ending: both mean
	// there is nothing left worth sealing.
	return err == nil && n > 0
}

// requireSuccess seals tx and fails the test unless it succeeded.
func (s *Simulated) requireSuccess(tb testing.TB, what string, tx *types.Transaction) {
	tb.Helper()
	if receipt := s.Mine(tb, tx); receipt.Status != types.ReceiptStatusSuccessful {
		tb.Fatalf("%s: transaction %s reverted", what, tx.Hash())
	}
}

// receipt polls for the receipt of hash: the node indexes transactions in
// the background, so a sealed transaction can be briefly unknown.
func (s *Simulated) receipt(ctx context.Context, hash common.Hash) (*types.Receipt, error) {
	ticker := time.NewTicker(5 * time.Millisecond)
	defer ticker.Stop()
	for {
		receipt, err := s.Client.TransactionReceipt(ctx, hash)
		if err == nil {
			return receipt, nil
		}
		if ctx.Err() != nil {
			return nil, errors.Join(ctx.Err(), err)
		}
		select {
		case <-ctx.Done():
			return nil, errors.Join(ctx.Err(), err)
		case <-ticker.C:
		}
	}
}

// notifyingClient is the backend's client, except that SendTransaction flags
// a sent transaction for the auto-commit loop.
type notifyingClient struct {
	simulated.Client
	sent *atomic.Bool
}

func (c notifyingClient) SendTransaction(ctx context.Context, tx *types.Transaction) error {
	if err := c.Client.SendTransaction(ctx, tx); err != nil {
		return err
	}
	c.sent.Store(true)
	return nil
}

var (
	_ simulated.Client     = notifyingClient{}
	_ bind.ContractBackend = notifyingClient{}
)
