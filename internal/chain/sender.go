package chain

import (
	"bytes"
	"cmp"
	"context"
	"crypto/ecdsa"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"math/big"
	"slices"
	"sync"
	"time"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/ethereum/go-ethereum/params"
)

const (
	defaultFeeBumpPercent   = 12.5
	minFeeBumpPercent       = 10 // geth's default replacement rule; anvil asks for any increase
	maxFeeBumpPercent       = 1000
	defaultReplaceAfter     = 30 * time.Second
	defaultPollInterval     = 250 * time.Millisecond
	defaultGasMarginPercent = 20
	maxGasMarginPercent     = 100
	defaultGasLimit         = 300_000
	maxGasLimit             = 1 << 23 // with the margin, within the cap on one transaction's gas, 2^24 (EIP-7825)
	defaultRPCTimeout       = 10 * time.Second

	// firstRecheck is when, after it starts, Wait first looks for a receipt
	// again if its first poll found none; the delay doubles below
	// PollInterval (see Wait).
	firstRecheck = 5 * time.Millisecond

	// sendAttempts bounds how often Send takes another nonce after the node said
	// the one it used was taken (not counting free nonces found taken, of which
	// there are finitely many).
	sendAttempts = 3
	// keepSettled is how many nonces below the account's mined nonce the Sender
	// still remembers, so a late Wait finds which version was mined.
	keepSettled = 256
)

// SenderConfig tunes a Sender. Only MaxFeePerGas is required; zero values of the
// other fields select the defaults given in their comments.
type SenderConfig struct {
	// MaxFeePerGas caps the fee per gas, in wei, of every transaction the Sender
	// signs, replacements included. Send refuses with ErrFeeAboveCap when the
	// base fee plus the tip is above it.
	MaxFeePerGas *big.Int
	// FeeBumpPercent is how much a replacement raises both the tip and the fee
	// cap over the version it replaces. Default 12.5; at least 10, which nodes
	// require of a replacement.
	FeeBumpPercent float64
	// ReplaceAfter is how long a transaction may sit unmined before Wait looks
	// at it: it re-broadcasts it if the node dropped it, and replaces it with
	// higher fees if it is the account's next nonce. Default 30s.
	ReplaceAfter time.Duration
	// PollInterval is how often Wait asks for receipts once a transaction
	// has waited one interval; before that it looks sooner (see Wait). On a
	// chain with blocks, half of it is the mean delay between a transaction's
	// block and its Wait returning. Default 250ms.
	PollInterval time.Duration
	// GasLimit is how much gas a call may take in its simulation (eth_call
	// on the latest block) for Send to skip the node's gas estimate, which
	// runs the call several times (geth and anvil search for the lowest limit
	// that passes) and was most of a settle's cost on the node. A call that
	// passes goes out with GasMarginPercent over this limit, as it would over
	// an estimate; the account pays for the gas used, not the limit. A call
	// that fails at this limit is estimated as before: one that needs more
	// gas still goes out, under its estimate, and one that reverts fails with
	// the estimate's error, nothing broadcast. Default 300,000; at least
	// 21,000 and at most 2^23.
	GasLimit uint64
	// GasMarginPercent is added to the node's gas estimate, since state can change
	// between estimate and inclusion. Default 20, at most 100.
	GasMarginPercent uint64
	// FeeCacheTTL is how long the node's tip and base fee are reused for new
	// transactions. Default 1s; negative disables the cache.
	FeeCacheTTL time.Duration
	// RPCTimeout bounds each call to the node. Default 10s.
	RPCTimeout time.Duration
	// Now returns the current time. Default time.Now.
	Now func() time.Time
}

// Sender signs and broadcasts EIP-1559 transactions from one account. It is
// safe for concurrent use.
//
// It hands out nonces itself, starting from the node's pending nonce. Taking a
// nonce and signing happen under a short lock with no call to the node in it
// (except the pending nonce, when the Sender is not synced); the broadcasts of
// concurrent Sends run concurrently and may reach the node out of order, which
// nodes accept: a later nonce waits in the pool until the ones below it arrive.
//
// A nonce has at most one owner: a Send's call while it is being broadcast and
// until it is mined, or a gap filler. When the node definitively refuses a
// broadcast, the nonce is freed, since a nonce without a transaction blocks
// every later one: the next Send takes the lowest free nonce before new ones,
// and if none comes, a Wait on a later nonce fills the gap with a 0-value
// transfer to the account itself.
//
// It remembers every transaction it broadcast for a nonce until that nonce is
// mined, so Wait can re-broadcast a transaction the node dropped and replace a
// stuck one with higher fees.
type Sender struct {
	backend Backend
	key     *ecdsa.PrivateKey
	addr    common.Address
	chainID *big.Int
	signer  types.Signer
	cfg     SenderConfig
	bumpBP  uint64 // cfg.FeeBumpPercent in basis points
	log     *slog.Logger

	feeMu   sync.Mutex
	feeAt   time.Time // guarded by feeMu; when feeTip and feeBase were read
	feeTip  *big.Int  // guarded by feeMu
	feeBase *big.Int  // guarded by feeMu

	// syncing holds a token while one caller asks the node for the pending
	// nonce, so the Sends that find the Sender unsynced wait for that one answer.
	// It is a channel rather than a mutex so a caller's ctx bounds the wait.
	syncing chan struct{}

	// mu guards the nonce bookkeeping and the flights. It is only held for
	// short sections without calls to the node; a Send holds it while it takes
	// a nonce and signs, never while it broadcasts.
	//
	// Every nonce below next is in flights (a transaction of ours is or may be
	// in the pool, or is being broadcast), in free, settled, or known to be used
	// by a transaction the Sender did not sign. A nonce is handed out only from
	// free or next, and never while it is in flights.
	mu     sync.Mutex
	synced bool   // next is valid: it came from the node, and no refusal since said it was stale
	gen    uint64 // counts syncs; a refusal of a nonce handed out before the latest one says nothing new
	next   uint64 // above every nonce handed out; the one for a new transaction when free is empty
	// free holds nonces below next the Sender has no transaction for, since the
	// node refused it, with the time they were freed. It is small: the next
	// Sends take its nonces first.
	free    map[uint64]time.Time
	flights map[uint64]*flight // by nonce

	// repairing holds a token while one Wait checks for dropped and stuck
	// transactions and nonce gaps, so concurrent Waits neither queue up behind
	// each other nor replace the same transaction twice.
	repairing chan struct{}
}

// flight is one nonce the Sender handed out and the transactions it signed for
// it.
type flight struct {
	nonce  uint64
	to     *common.Address
	data   []byte
	gas    uint64
	gen    uint64 // Sender.gen when the nonce was handed out
	reused bool   // the nonce came from Sender.free

	txs     []*types.Transaction // guarded by Sender.mu; every version, oldest first
	touched time.Time            // guarded by Sender.mu; last broadcast or check by repair
	capped  bool                 // guarded by Sender.mu; logged that MaxFeePerGas stops replacement
	nudged  time.Time            // guarded by Sender.mu; last time repair re-sent the same bytes
	// unshelved is set once repair replaced the flight because the node held
	// it without counting it pending (unshelve).
	unshelved bool // guarded by Sender.mu
	// sending is set while the first broadcast is under way: repair leaves the
	// flight alone, since its owner frees the nonce if the node refuses it.
	sending bool // guarded by Sender.mu
	// before is the caller's BeforeBroadcast for every version of the call
	// (nil: none); repair calls it before sending a replacement.
	before BeforeBroadcast // guarded by Sender.mu
}

// BeforeBroadcast is called with each transaction a Sender signed for a call,
// before that transaction first goes to the node: the first one, one under
// another nonce after the node refused a nonce, and every fee-bump
// replacement. If it returns an error the transaction is not sent. It lets
// the caller write down what is about to leave, so that a crash right after
// the send leaves a record naming the transaction (the facilitator's
// settlement record, D3). It may be called from the goroutine of
// any Wait, and must be safe for that.
type BeforeBroadcast func(ctx context.Context, tx *types.Transaction) error

// NewSender returns a Sender for the account of key on the chain chainID. It
// makes no calls to the node.
func NewSender(backend Backend, key *ecdsa.PrivateKey, chainID *big.Int, cfg SenderConfig, log *slog.Logger) (*Sender, error) {
	switch {
	case backend == nil:
		return nil, errors.New("new sender: nil backend")
	case key == nil:
		return nil, errors.New("new sender: nil key")
	case chainID == nil || chainID.Sign() <= 0:
		return nil, fmt.Errorf("new sender: invalid chain id %v", chainID)
	case cfg.MaxFeePerGas == nil || cfg.MaxFeePerGas.Sign() <= 0:
		return nil, fmt.Errorf("new sender: max fee per gas %v, want a positive amount of wei", cfg.MaxFeePerGas)
	}
	if cfg.FeeBumpPercent == 0 {
		cfg.FeeBumpPercent = defaultFeeBumpPercent
	}
	if !(cfg.FeeBumpPercent >= minFeeBumpPercent && cfg.FeeBumpPercent <= maxFeeBumpPercent) {
		return nil, fmt.Errorf("new sender: fee bump %v%%, want %d to %d", cfg.FeeBumpPercent, minFeeBumpPercent, maxFeeBumpPercent)
	}
	if cfg.GasMarginPercent == 0 {
		cfg.GasMarginPercent = defaultGasMarginPercent
	}
	if cfg.GasMarginPercent > maxGasMarginPercent {
		return nil, fmt.Errorf("new sender: gas margin %d%%, want at most %d", cfg.GasMarginPercent, maxGasMarginPercent)
	}
	if cfg.GasLimit == 0 {
		cfg.GasLimit = defaultGasLimit
	}
	if cfg.GasLimit < params.TxGas || cfg.GasLimit > maxGasLimit {
		return nil, fmt.Errorf("new sender: gas limit %d, want %d to %d", cfg.GasLimit, params.TxGas, maxGasLimit)
	}
	if cfg.ReplaceAfter <= 0 {
		cfg.ReplaceAfter = defaultReplaceAfter
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = defaultPollInterval
	}
	if cfg.FeeCacheTTL == 0 {
		cfg.FeeCacheTTL = time.Second
	}
	if cfg.RPCTimeout <= 0 {
		cfg.RPCTimeout = defaultRPCTimeout
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	cfg.MaxFeePerGas = new(big.Int).Set(cfg.MaxFeePerGas)
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	addr := crypto.PubkeyToAddress(key.PublicKey)
	return &Sender{
		backend:   backend,
		key:       key,
		addr:      addr,
		chainID:   new(big.Int).Set(chainID),
		signer:    types.LatestSignerForChainID(chainID),
		cfg:       cfg,
		bumpBP:    uint64(math.Round(cfg.FeeBumpPercent * 100)),
		log:       log.With("component", "chain", "account", addr),
		syncing:   make(chan struct{}, 1),
		free:      make(map[uint64]time.Time),
		flights:   make(map[uint64]*flight),
		repairing: make(chan struct{}, 1),
	}, nil
}

// Address returns the account the Sender sends from.
func (s *Sender) Address() common.Address { return s.addr }

// Balance returns the account's balance in wei at the latest block.
func (s *Sender) Balance(ctx context.Context) (*big.Int, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.RPCTimeout)
	defer cancel()
	bal, err := s.backend.BalanceAt(ctx, s.addr, nil)
	if err != nil {
		return nil, fmt.Errorf("balance of %s: %w", s.addr, err)
	}
	return bal, nil
}

// Send signs a call of to with data (and no value) under the account's next
// nonce, broadcasts it and returns without waiting for it to be mined. The call
// is run on the node first (see SenderConfig.GasLimit), so a call that would
// revert fails here and nothing is broadcast.
//
// Concurrent Sends broadcast concurrently. If the node refuses the transaction,
// Send returns an error and frees the nonce for the next Send (or a gap filler).
// If the node says another transaction took the nonce, Send resyncs with the
// node and tries again under another nonce. If the broadcast's fate is unknown
// (a transport error or timeout), Send returns the transaction together with a
// *PendingError: the nonce stays taken, and Wait on the transaction delivers it.
func (s *Sender) Send(ctx context.Context, to common.Address, data []byte) (*types.Transaction, error) {
	return s.SendRecorded(ctx, to, data, nil)
}

// SendRecorded is Send with before called on every transaction signed for
// the call before it goes to the node (see BeforeBroadcast), the ones Wait
// signs to replace it included. When before fails, nothing is broadcast, the
// nonce is freed and SendRecorded returns a nil transaction with the error.
func (s *Sender) SendRecorded(ctx context.Context, to common.Address, data []byte, before BeforeBroadcast) (*types.Transaction, error) {
	data = bytes.Clone(data)
	gas, err := s.gasFor(ctx, to, data)
	if err != nil {
		return nil, fmt.Errorf("send tx: %w", err)
	}
	tip, feeCap, err := s.fees(ctx)
	if err != nil {
		return nil, fmt.Errorf("send tx: %w", err)
	}
	tx, err := s.broadcastNew(ctx, &to, data, gas, tip, feeCap, before)
	if err != nil && tx == nil && isBelowBaseFee(err) && s.cfg.FeeCacheTTL > 0 {
		// The cached fees went stale (the base fee rose): read fresh ones, once.
		s.feeMu.Lock()
		s.feeTip = nil
		s.feeMu.Unlock()
		if tip, feeCap, err = s.fees(ctx); err != nil {
			return nil, fmt.Errorf("send tx: %w", err)
		}
		tx, err = s.broadcastNew(ctx, &to, data, gas, tip, feeCap, before)
	}
	if err != nil {
		return tx, fmt.Errorf("send tx: %w", err)
	}
	return tx, nil
}

// isBelowBaseFee reports a node refusing a fee cap under the current base fee
// (geth: "max fee per gas less than block base fee"; anvil words it alike).
func isBelowBaseFee(err error) bool {
	return nodeAnswered(err) && containsAny(err, "less than block base fee", "fee cap less than block base fee", "basefee")
}

// broadcastNew signs a transaction under a nonce of its own and broadcasts it.
func (s *Sender) broadcastNew(ctx context.Context, to *common.Address, data []byte, gas uint64, tip, feeCap *big.Int, before BeforeBroadcast) (*types.Transaction, error) {
	for attempt := 1; ; {
		f, tx, err := s.assign(ctx, to, data, gas, tip, feeCap, before)
		if err != nil {
			return nil, err
		}
		if before != nil {
			if err := before(ctx, tx); err != nil {
				s.unassign(f)
				return nil, fmt.Errorf("before broadcast of nonce %d: %w", tx.Nonce(), err)
			}
		}
		err = s.broadcast(ctx, tx)
		switch {
		case err == nil || (nodeAnswered(err) && isAlreadyKnown(err)):
			s.launched(f)
			s.log.Debug("sent transaction", "nonce", tx.Nonce(), "hash", tx.Hash(), "to", to,
				"gas", gas, "tip", tip, "max_fee", feeCap)
			return tx, nil
		case !nodeAnswered(err):
			// The node may hold the transaction: keep the nonce and let Wait
			// re-broadcast it if the node turns out not to know it.
			s.launched(f)
			s.log.Warn("broadcast outcome unknown", "nonce", tx.Nonce(), "hash", tx.Hash(), "err", err)
			return tx, &PendingError{Hash: tx.Hash(), Nonce: tx.Nonce(), Err: fmt.Errorf("broadcast: %w", err)}
		}
		if isNonceTooLow(err) && s.knows(ctx, tx.Hash()) {
			// The nonce was used by this very transaction: its recorded
			// bytes were sent by someone else first (a replica resuming the
			// record, D5) and mined. It is sent; signing the call again
			// under another nonce would pay nothing and waste gas.
			s.launched(f)
			s.log.Info("transaction was already mined when sent", "nonce", tx.Nonce(), "hash", tx.Hash())
			return tx, nil
		}
		s.abandon(f, err)
		if !isNonceTooLow(err) && !isReplaceUnderpriced(err) {
			return nil, fmt.Errorf("broadcast nonce %d: %w", tx.Nonce(), err)
		}
		if !f.reused {
			attempt++
		}
		if attempt > sendAttempts {
			return nil, fmt.Errorf("broadcast nonce %d: %w", tx.Nonce(), err)
		}
		s.log.Info("nonce taken, trying another", "nonce", tx.Nonce(), "err", err)
	}
}

// knows reports whether the node has transaction h, pending or mined. A
// failed lookup reports false: the caller then acts as it did without it.
func (s *Sender) knows(ctx context.Context, h common.Hash) bool {
	tctx, cancel := context.WithTimeout(ctx, s.cfg.RPCTimeout)
	defer cancel()
	tx, _, err := s.backend.TransactionByHash(tctx, h)
	return err == nil && tx != nil
}

// assign hands a nonce to a new transaction for a call of to with data, signs
// it, and records its flight, all under mu so no other caller can take the
// nonce: the lowest free nonce, else next. If the Sender is not synced, it
// first asks the node for the pending nonce.
func (s *Sender) assign(ctx context.Context, to *common.Address, data []byte, gas uint64, tip, feeCap *big.Int, before BeforeBroadcast) (*flight, *types.Transaction, error) {
	s.mu.Lock()
	for !s.synced {
		s.mu.Unlock()
		if err := s.resync(ctx); err != nil {
			return nil, nil, err
		}
		s.mu.Lock()
	}
	defer s.mu.Unlock()
	n, reused := s.takeNonceLocked()
	f := &flight{nonce: n, to: to, data: data, gas: gas, gen: s.gen, reused: reused, sending: true, before: before}
	tx, err := s.sign(f, tip, feeCap)
	if err != nil {
		s.freeLocked(n)
		return nil, nil, err
	}
	f.txs = []*types.Transaction{tx}
	f.touched = s.cfg.Now()
	s.flights[n] = f
	return f, tx, nil
}

// takeNonceLocked removes the lowest free nonce from free, or else next, and
// returns it, skipping nonces that have a flight (which only a Wait on a
// transaction the Sender did not send can start). The caller holds mu.
func (s *Sender) takeNonceLocked() (n uint64, reused bool) {
	for len(s.free) > 0 {
		n := slices.Min(slices.Collect(maps.Keys(s.free)))
		delete(s.free, n)
		if s.flights[n] == nil {
			return n, true
		}
	}
	for s.flights[s.next] != nil {
		s.next++
	}
	s.next++
	return s.next - 1, false
}

// freeLocked frees nonce n, which has no transaction. The highest nonce handed
// out goes back to next (with any free ones right below it), others into free.
// The caller holds mu.
func (s *Sender) freeLocked(n uint64) {
	if n+1 != s.next {
		s.free[n] = s.cfg.Now()
		return
	}
	s.next = n
	for s.next > 0 {
		if _, ok := s.free[s.next-1]; !ok {
			break
		}
		delete(s.free, s.next-1)
		s.next--
	}
}

// unassign forgets f, whose transaction never left (its BeforeBroadcast
// failed), and frees its nonce.
func (s *Sender) unassign(f *flight) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.flights[f.nonce] == f {
		delete(s.flights, f.nonce)
	}
	s.freeLocked(f.nonce)
}

// launched marks f's first broadcast done, successful or of unknown outcome:
// the nonce is f's until it is mined.
func (s *Sender) launched(f *flight) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f.sending = false
	f.touched = s.cfg.Now()
}

// abandon forgets f after the node answered its first broadcast with err, a
// refusal. "Nonce too low" means the account used the nonce, and "replacement
// underpriced" that the pool holds another transaction for it; neither the
// Sender signed, so next may be stale. Any other refusal leaves the nonce
// without a transaction: it is freed.
func (s *Sender) abandon(f *flight, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.flights[f.nonce] == f {
		delete(s.flights, f.nonce)
	}
	switch {
	case isNonceTooLow(err):
		// The account's nonce is past every free nonce up to f's as well.
		for n := range s.free {
			if n <= f.nonce {
				delete(s.free, n)
			}
		}
		if f.gen == s.gen {
			s.synced = false
		}
	case isReplaceUnderpriced(err):
		if f.gen == s.gen {
			s.synced = false
		}
	default:
		s.freeLocked(f.nonce)
	}
}

// resync sets next to the node's pending nonce, but above every nonce with a
// flight, so a nonce that a concurrent Send is broadcasting or that may still
// be mined is never handed out again. Until it is done no nonce is handed out;
// of the callers that find the Sender unsynced, one asks the node.
func (s *Sender) resync(ctx context.Context) error {
	select {
	case s.syncing <- struct{}{}:
		defer func() { <-s.syncing }()
	case <-ctx.Done():
		return fmt.Errorf("wait for the nonce: %w", ctx.Err())
	}
	s.mu.Lock()
	synced := s.synced
	s.mu.Unlock()
	if synced {
		return nil // by the caller before
	}
	pending, err := s.pendingNonce(ctx)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	next := pending
	for n := range s.flights {
		next = max(next, n+1)
	}
	for n := range s.free {
		if n >= next {
			delete(s.free, n) // next hands it out
		}
	}
	if s.gen > 0 && next != s.next {
		s.log.Info("resynced nonce", "from", s.next, "to", next, "node_pending", pending)
	}
	s.next, s.synced = next, true
	s.gen++
	return nil
}

// Wait waits until one of the transactions broadcast for tx's nonce is mined
// and returns its receipt, which names the transaction and its status (a
// reverted call is mined too: check Status). tx must come from Send or an
// earlier Wait's *PendingError.
//
// It looks for the receipt at once, so a receipt already there is returned
// without waiting, then polls every PollInterval. The first look asks for the
// receipt alone: the account's nonce and the repairs below wait for the
// first tick, since a transaction just sent has had no time to be consumed
// or dropped, and the node is spared a read per settlement. Before that tick
// it also looks for the receipt alone 5ms, 10ms, 20ms and so on after it
// started, while below PollInterval: a node that mines on arrival (anvil's
// automine, the simulated backend) serves the receipt a few milliseconds
// after it took the transaction, often just after the first look, and Wait
// would otherwise wait a whole interval for it. Once a transaction of this or a lower nonce
// has waited ReplaceAfter it re-broadcasts it if the node no longer knows it,
// or replaces it with the same call at FeeBumpPercent higher fees if it is
// the account's next nonce and so priced too low.
//
// When ctx ends first, Wait returns a *PendingError with the latest hash; the
// Sender keeps the transaction and a later Wait continues. When the account's
// nonce moved past tx's without any of the Sender's transactions being mined,
// it returns ErrNonceConsumed.
func (s *Sender) Wait(ctx context.Context, tx *types.Transaction) (*types.Receipt, error) {
	return s.WaitRecorded(ctx, tx, nil)
}

// WaitRecorded is Wait that gives before to a transaction the Sender does not
// remember (one signed before a restart, read back from the caller's record),
// so replacements of it are recorded as SendRecorded's are. For a transaction
// the Sender remembers, the BeforeBroadcast it was sent with stays.
func (s *Sender) WaitRecorded(ctx context.Context, tx *types.Transaction, before BeforeBroadcast) (*types.Receipt, error) {
	if tx == nil {
		return nil, errors.New("wait tx: nil transaction")
	}
	if from, err := types.Sender(s.signer, tx); err != nil || from != s.addr {
		return nil, fmt.Errorf("wait tx %s: not signed by %s on chain %s", tx.Hash(), s.addr, s.chainID)
	}
	f := s.flightFor(tx, before)
	tick := time.NewTicker(s.cfg.PollInterval)
	defer tick.Stop()
	// Until the first tick, the receipt alone is looked up again recheckAt
	// after the start, recheckAt doubling while it is below PollInterval.
	recheckAt := firstRecheck
	recheck := time.NewTimer(recheckAt)
	defer recheck.Stop()
	if recheckAt >= s.cfg.PollInterval {
		recheck.Stop()
	}
	var (
		lastErr  error
		consumed int // polls in a row that saw the nonce used without our receipt
	)
	for first := true; ; first = false {
		var (
			r    *types.Receipt
			used bool
			err  error
		)
		if first {
			r, err = s.receipt(ctx, f)
		} else {
			r, used, err = s.poll(ctx, f)
		}
		switch {
		case r != nil:
			// A mined nonce puts the account's past it: what poll would
			// prune after asking the node, pruned without asking, since a
			// node that mines at once answers the first look and is never
			// polled.
			s.prune(f.nonce + 1)
			return r, nil
		case err != nil && ctx.Err() == nil: // keep the node's error, not the one ctx caused
			lastErr = err
			s.log.Debug("poll transaction", "nonce", f.nonce, "err", err)
		case err == nil:
			lastErr = nil
		}
		if used {
			consumed++
		} else {
			consumed = 0
		}
		// A node can report the new nonce a moment before the receipt (behind a
		// load balancer, say, or anvil under load), so the nonce must be seen
		// used twice, and even then the node must not know any version of ours
		// as mined: one it does is ours, and its receipt is only late.
		if consumed >= 2 {
			r, ours, err := s.minedVersion(ctx, f)
			switch {
			case r != nil:
				return r, nil
			case err == nil && !ours:
				return nil, fmt.Errorf("wait tx %s: nonce %d: %w", tx.Hash(), f.nonce, ErrNonceConsumed)
			case err != nil && ctx.Err() == nil:
				lastErr = err
			}
			consumed = 0 // ours, or no verdict: look again after the next polls
		}
	wait:
		for {
			select {
			case <-ctx.Done():
				cause := ctx.Err()
				if lastErr != nil && !errors.Is(lastErr, cause) {
					cause = fmt.Errorf("%w (last node error: %w)", cause, lastErr)
				}
				return nil, fmt.Errorf("wait tx: %w", &PendingError{Hash: s.latest(f).Hash(), Nonce: f.nonce, Err: cause})
			case <-recheck.C:
				r, err := s.receipt(ctx, f)
				switch {
				case r != nil:
					return r, nil
				case err != nil && ctx.Err() == nil:
					lastErr = err
				}
				if 2*recheckAt < s.cfg.PollInterval {
					recheck.Reset(recheckAt)
					recheckAt *= 2
				}
			case <-tick.C:
				break wait
			}
		}
	}
}

// poll looks for a receipt of any version of f. Without one, it reports whether
// the account's nonce has passed f's, and otherwise repairs nonce gaps and
// dropped and stuck transactions up to f's nonce.
func (s *Sender) poll(ctx context.Context, f *flight) (r *types.Receipt, used bool, err error) {
	r, err = s.receipt(ctx, f)
	if r != nil || err != nil {
		return r, false, err
	}
	mined, err := s.nonceAt(ctx)
	if err != nil {
		return nil, false, err
	}
	s.prune(mined)
	if mined > f.nonce {
		return nil, true, nil
	}
	return nil, false, s.repair(ctx, mined, f.nonce)
}

// minedVersion looks once more, after f's nonce was seen used, for a
// version of f that was mined: it returns its receipt if the node has one
// now, or reports ours when the node knows a version as mined (in a block,
// not pending) while its receipt is not served yet. Neither means another
// transaction used the nonce.
func (s *Sender) minedVersion(ctx context.Context, f *flight) (_ *types.Receipt, ours bool, _ error) {
	r, err := s.receipt(ctx, f)
	if r != nil || err != nil {
		return r, false, err
	}
	for _, h := range s.hashes(f) {
		tctx, cancel := context.WithTimeout(ctx, s.cfg.RPCTimeout)
		_, isPending, err := s.backend.TransactionByHash(tctx, h)
		cancel()
		switch {
		case err == nil && !isPending:
			s.log.Info("nonce used before the receipt of our transaction is served; waiting for it", "nonce", f.nonce, "hash", h)
			return nil, true, nil
		case err != nil && !errors.Is(err, ethereum.NotFound):
			return nil, false, fmt.Errorf("look up %s: %w", h, err)
		}
	}
	return nil, false, nil
}

// receipt returns the receipt of whichever version of f was mined, or nil.
func (s *Sender) receipt(ctx context.Context, f *flight) (*types.Receipt, error) {
	for _, h := range s.hashes(f) {
		rctx, cancel := context.WithTimeout(ctx, s.cfg.RPCTimeout)
		r, err := s.backend.TransactionReceipt(rctx, h)
		cancel()
		switch {
		case err == nil && r != nil:
			return r, nil
		case err != nil && !errors.Is(err, ethereum.NotFound):
			return nil, fmt.Errorf("receipt of %s: %w", h, err)
		}
	}
	return nil, nil
}

// repair first fills the nonce gaps from nonce mined (the account's next nonce
// on chain) up to upTo, then looks at the flights in that range that have
// waited ReplaceAfter: a flight the node no longer knows is re-broadcast (a
// dropped nonce blocks every later one), or replaced if the node refuses it as
// it is, and the one at nonce mined, which nothing else blocks, is replaced
// with higher fees.
func (s *Sender) repair(ctx context.Context, mined, upTo uint64) error {
	select {
	case s.repairing <- struct{}{}:
		defer func() { <-s.repairing }()
	default:
		return nil // another Wait is repairing; the next poll looks again
	}
	if err := s.fillGaps(ctx, mined, upTo); err != nil {
		return err
	}

	now := s.cfg.Now()
	s.mu.Lock()
	var due []*flight
	var head *flight
	var nudge *types.Transaction
	for n, f := range s.flights {
		if n >= mined && n <= upTo && !f.sending && now.Sub(f.touched) >= s.cfg.ReplaceAfter {
			due = append(due, f)
		}
		// The account's next transaction waiting longer than a few polls: send
		// its bytes again. Nodes that mine on arrival (anvil's automine) leave
		// a transaction that arrived ahead of a lower nonce queued until another
		// one comes; the same bytes again are harmless anywhere else.
		if n == mined && !f.sending && now.Sub(f.touched) >= nudgeAfter(s.cfg) && now.Sub(f.nudged) >= nudgeAfter(s.cfg) {
			f.nudged = now
			head, nudge = f, f.txs[len(f.txs)-1]
		}
	}
	s.mu.Unlock()
	if nudge != nil {
		switch err := s.broadcast(ctx, nudge); {
		case err == nil:
			// The node took the bytes as new: it had dropped them.
			s.log.Warn("transaction dropped by the node, re-broadcasting", "nonce", nudge.Nonce(), "hash", nudge.Hash())
		case isAlreadyKnown(err):
			replaced, err := s.unshelve(ctx, head)
			if err != nil {
				return err
			}
			if replaced {
				// Not again below, if it was due as well.
				due = slices.DeleteFunc(due, func(f *flight) bool { return f == head })
			}
		default:
			s.log.Debug("nudge transaction", "nonce", nudge.Nonce(), "err", err)
		}
	}
	slices.SortFunc(due, func(a, b *flight) int { return cmp.Compare(a.nonce, b.nonce) })

	for _, f := range due {
		known, err := s.known(ctx, f)
		if err != nil {
			return err
		}
		s.mu.Lock()
		f.touched = now
		s.mu.Unlock()
		switch {
		case !known:
			err := s.rebroadcast(ctx, f)
			if err != nil && nodeAnswered(err) {
				// The node refuses the old bytes (its fee cap is below the
				// base fee now, say): sign the call anew at current fees.
				err = s.replace(ctx, f)
			}
			if err != nil {
				return err
			}
		case f.nonce == mined:
			if err := s.replace(ctx, f); err != nil {
				return err
			}
		}
	}
	return nil
}

// unshelve replaces f, the account's next transaction, which the node says
// it already has, if the node does not count it in the account's pending
// nonce: it then holds it as not executable, though no nonce is missing below
// it, and will not mine it as it is. Anvil's automine can leave a transaction
// so when it arrives while a block with the nonce below is being mined (its
// pool judges it against the nonce before that block and never looks again),
// and every later transaction of the account then waits behind it; a new
// version under the nonce is judged afresh. It replaces a flight at most once
// this way, so a node whose pending nonce lags its pool costs one fee bump,
// not one per poll; ReplaceAfter still applies after that. It reports whether
// it replaced f.
func (s *Sender) unshelve(ctx context.Context, f *flight) (replaced bool, _ error) {
	s.mu.Lock()
	done := f.unshelved
	s.mu.Unlock()
	if done {
		return false, nil
	}
	pending, err := s.pendingNonce(ctx)
	if err != nil {
		return false, fmt.Errorf("nonce %d held by the node: %w", f.nonce, err)
	}
	if pending > f.nonce {
		return false, nil // the node counts it: pending, waiting for a block
	}
	s.mu.Lock()
	f.unshelved = true
	f.touched = s.cfg.Now()
	s.mu.Unlock()
	s.log.Warn("the node holds the account's next transaction without counting it pending; replacing it",
		"nonce", f.nonce, "pending_nonce", pending)
	return true, s.replace(ctx, f)
}

// fillGaps sends a gap filler, a 0-value transfer to the account itself at
// current fees, under each nonce from mined up to (not including) upTo that has
// no transaction, since upTo waits for all of them. Such a nonce is a free one
// no Send took within a PollInterval, or mined itself when neither the Sender
// nor the node's pool has a transaction for it (one the Sender did not sign
// held it and was dropped, say).
func (s *Sender) fillGaps(ctx context.Context, mined, upTo uint64) error {
	if s.orphaned(mined, upTo) {
		pending, err := s.pendingNonce(ctx)
		if err != nil {
			return fmt.Errorf("fill nonce gap %d: %w", mined, err)
		}
		s.mu.Lock()
		if pending == mined && s.orphanedLocked(mined, upTo) {
			s.free[mined] = time.Time{} // due at once
		}
		s.mu.Unlock()
	}

	now := s.cfg.Now()
	s.mu.Lock()
	var gaps []uint64
	for n, freed := range s.free {
		if n >= mined && n < upTo && now.Sub(freed) >= s.cfg.PollInterval {
			gaps = append(gaps, n)
		}
	}
	s.mu.Unlock()
	if len(gaps) == 0 {
		return nil
	}
	slices.Sort(gaps)
	tip, feeCap, err := s.fees(ctx)
	if err != nil {
		return fmt.Errorf("fill nonce gap %d: %w", gaps[0], err)
	}
	for _, n := range gaps {
		f, tx, err := s.claimGap(n, tip, feeCap)
		if err != nil {
			return fmt.Errorf("fill nonce gap %d: %w", n, err)
		}
		if f == nil {
			continue // a Send took it meanwhile
		}
		err = s.broadcast(ctx, tx)
		switch {
		case err == nil || (nodeAnswered(err) && isAlreadyKnown(err)):
			s.launched(f)
			s.log.Info("filled nonce gap", "nonce", n, "hash", tx.Hash(), "tip", tip, "max_fee", feeCap)
		case !nodeAnswered(err):
			s.launched(f) // it may be in the pool: repair treats it like any flight
			return fmt.Errorf("fill nonce gap %d: %w", n, err)
		default:
			s.abandon(f, err)
			return fmt.Errorf("fill nonce gap %d: %w", n, err)
		}
	}
	return nil
}

// orphaned reports whether nonce mined, below upTo, has neither a flight nor a
// place in free, though the Sender handed out nonces above it.
func (s *Sender) orphaned(mined, upTo uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.orphanedLocked(mined, upTo)
}

func (s *Sender) orphanedLocked(mined, upTo uint64) bool {
	_, free := s.free[mined]
	return mined < upTo && s.synced && mined < s.next && s.flights[mined] == nil && !free
}

// claimGap takes free nonce n for a gap filler, signs the filler and records
// its flight. It returns a nil flight if n is no longer free.
func (s *Sender) claimGap(n uint64, tip, feeCap *big.Int) (*flight, *types.Transaction, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.free[n]; !ok || s.flights[n] != nil {
		return nil, nil, nil
	}
	f := &flight{nonce: n, to: &s.addr, gas: params.TxGas, gen: s.gen, sending: true}
	tx, err := s.sign(f, tip, feeCap)
	if err != nil {
		return nil, nil, err
	}
	delete(s.free, n)
	f.txs = []*types.Transaction{tx}
	f.touched = s.cfg.Now()
	s.flights[n] = f
	return f, tx, nil
}

// known reports whether the node knows any version of f, in its pool or mined.
func (s *Sender) known(ctx context.Context, f *flight) (bool, error) {
	for _, h := range s.hashes(f) {
		tctx, cancel := context.WithTimeout(ctx, s.cfg.RPCTimeout)
		_, _, err := s.backend.TransactionByHash(tctx, h)
		cancel()
		switch {
		case err == nil:
			return true, nil
		case !errors.Is(err, ethereum.NotFound):
			return false, fmt.Errorf("look up %s: %w", h, err)
		}
	}
	return false, nil
}

// rebroadcast sends the latest version of a flight the node dropped. The bytes
// are the same, so it can be mined at most once however often it is sent.
func (s *Sender) rebroadcast(ctx context.Context, f *flight) error {
	tx := s.latest(f)
	s.log.Warn("transaction dropped by the node, re-broadcasting", "nonce", f.nonce, "hash", tx.Hash())
	err := s.broadcast(ctx, tx)
	if err == nil || isAlreadyKnown(err) || isNonceTooLow(err) {
		// Nonce too low: mined meanwhile, which the next poll sees.
		return nil
	}
	return fmt.Errorf("re-broadcast nonce %d: %w", f.nonce, err)
}

// replace broadcasts f's call again under the same nonce with the tip and fee
// cap raised by FeeBumpPercent (or to the market's, if higher), up to
// MaxFeePerGas.
func (s *Sender) replace(ctx context.Context, f *flight) error {
	old := s.latest(f)
	tip, feeCap, err := s.bumpedFees(ctx, old)
	if errors.Is(err, ErrFeeAboveCap) {
		s.mu.Lock()
		logIt := !f.capped
		f.capped = true
		s.mu.Unlock()
		if logIt {
			s.log.Warn("stuck transaction not replaced", "nonce", f.nonce, "hash", old.Hash(), "err", err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("replace nonce %d: %w", f.nonce, err)
	}
	tx, err := s.sign(f, tip, feeCap)
	if err != nil {
		return fmt.Errorf("replace nonce %d: %w", f.nonce, err)
	}
	s.mu.Lock()
	before := f.before
	s.mu.Unlock()
	if before != nil {
		if err := before(ctx, tx); err != nil {
			return fmt.Errorf("replace nonce %d: before broadcast: %w", f.nonce, err)
		}
	}
	// Track it before the broadcast: if the outcome is unknown it may be mined.
	s.addVersion(f, tx)
	err = s.broadcast(ctx, tx)
	switch {
	case err == nil || (nodeAnswered(err) && isAlreadyKnown(err)):
		s.log.Info("replaced stuck transaction", "nonce", f.nonce, "old_hash", old.Hash(), "hash", tx.Hash(),
			"tip", tip, "max_fee", feeCap)
		return nil
	case nodeAnswered(err):
		s.removeVersion(f, tx)
		if isNonceTooLow(err) {
			return nil // mined meanwhile
		}
		return fmt.Errorf("replace nonce %d: %w", f.nonce, err)
	default:
		return fmt.Errorf("replace nonce %d: %w", f.nonce, err)
	}
}

// fees returns the tip and fee cap for a new transaction: the node's suggested
// tip, and twice the latest base fee plus the tip (room for the base fee to
// rise for a few blocks), lowered to MaxFeePerGas.
func (s *Sender) fees(ctx context.Context) (tip, feeCap *big.Int, err error) {
	tip, baseFee, err := s.cachedMarket(ctx)
	if err != nil {
		return nil, nil, err
	}
	need := new(big.Int).Add(baseFee, tip)
	if need.Cmp(s.cfg.MaxFeePerGas) > 0 {
		return nil, nil, fmt.Errorf("%w: base fee %s + tip %s > %s wei", ErrFeeAboveCap, baseFee, tip, s.cfg.MaxFeePerGas)
	}
	feeCap = new(big.Int).Add(need, baseFee)
	return tip, minBig(feeCap, s.cfg.MaxFeePerGas), nil
}

// bumpedFees returns fees for a replacement of old: each raised by
// FeeBumpPercent, or to the market's if higher, with the fee cap at most
// MaxFeePerGas. It returns ErrFeeAboveCap if the cap leaves no room for the
// minimum raise nodes accept.
func (s *Sender) bumpedFees(ctx context.Context, old *types.Transaction) (tip, feeCap *big.Int, err error) {
	marketTip, baseFee, err := s.market(ctx)
	if err != nil {
		return nil, nil, err
	}
	tip = maxBig(raise(old.GasTipCap(), s.bumpBP), marketTip)
	feeCap = new(big.Int).Add(baseFee, baseFee)
	feeCap = maxBig(raise(old.GasFeeCap(), s.bumpBP), feeCap.Add(feeCap, tip))
	feeCap = minBig(feeCap, s.cfg.MaxFeePerGas)
	tip = minBig(tip, feeCap)
	if feeCap.Cmp(raise(old.GasFeeCap(), minFeeBumpPercent*100)) < 0 || tip.Cmp(raise(old.GasTipCap(), minFeeBumpPercent*100)) < 0 {
		return nil, nil, fmt.Errorf("%w: replacing max fee %s needs %d%% more, cap %s wei",
			ErrFeeAboveCap, old.GasFeeCap(), minFeeBumpPercent, s.cfg.MaxFeePerGas)
	}
	return tip, feeCap, nil
}

// market returns the node's suggested tip and the latest block's base fee.
// nudgeAfter is how long the account's next transaction may wait before its
// bytes are sent again: a few polls, and always well before ReplaceAfter.
func nudgeAfter(cfg SenderConfig) time.Duration {
	return min(5*cfg.PollInterval, cfg.ReplaceAfter/2)
}

// cachedMarket is market for new transactions, remembered for FeeCacheTTL:
// under load every send would otherwise ask the node twice for the same fees.
// The fee cap (twice the base fee plus the tip) absorbs the base fee's moves
// within that time; replacements always read fresh fees.
func (s *Sender) cachedMarket(ctx context.Context) (tip, baseFee *big.Int, err error) {
	if s.cfg.FeeCacheTTL < 0 {
		return s.market(ctx)
	}
	s.feeMu.Lock()
	if s.feeTip != nil && s.cfg.Now().Sub(s.feeAt) < s.cfg.FeeCacheTTL {
		tip, baseFee = s.feeTip, s.feeBase
		s.feeMu.Unlock()
		return tip, baseFee, nil
	}
	s.feeMu.Unlock()
	tip, baseFee, err = s.market(ctx)
	if err != nil {
		return nil, nil, err
	}
	s.feeMu.Lock()
	s.feeTip, s.feeBase, s.feeAt = tip, baseFee, s.cfg.Now()
	s.feeMu.Unlock()
	return tip, baseFee, nil
}

func (s *Sender) market(ctx context.Context) (tip, baseFee *big.Int, err error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.RPCTimeout)
	defer cancel()
	tip, err = s.backend.SuggestGasTipCap(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("suggest tip: %w", err)
	}
	head, err := s.backend.HeaderByNumber(ctx, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("latest header: %w", err)
	}
	if head.BaseFee == nil {
		return nil, nil, fmt.Errorf("latest block %v has no base fee: not an EIP-1559 chain", head.Number)
	}
	return tip, head.BaseFee, nil
}

// gasFor returns the gas limit of a call of to with data: GasLimit plus the
// margin if the call succeeds at GasLimit, else the node's estimate plus the
// margin. The estimate also answers for a call that reverts, so its error
// reads as it always did. When the node did not answer the first call, it
// is not asked again.
func (s *Sender) gasFor(ctx context.Context, to common.Address, data []byte) (uint64, error) {
	callCtx, cancel := context.WithTimeout(ctx, s.cfg.RPCTimeout)
	_, err := s.backend.CallContract(callCtx, ethereum.CallMsg{From: s.addr, To: &to, Gas: s.cfg.GasLimit, Data: data}, nil)
	cancel()
	switch {
	case err == nil:
		return s.cfg.GasLimit * (100 + s.cfg.GasMarginPercent) / 100, nil
	case !nodeAnswered(err):
		return 0, fmt.Errorf("simulate call: %w", err)
	}
	return s.estimateGas(ctx, to, data)
}

func (s *Sender) estimateGas(ctx context.Context, to common.Address, data []byte) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.RPCTimeout)
	defer cancel()
	gas, err := s.backend.EstimateGas(ctx, ethereum.CallMsg{From: s.addr, To: &to, Data: data})
	if err != nil {
		return 0, fmt.Errorf("estimate gas: %w", err)
	}
	if gas == 0 || gas > math.MaxUint64/(100+maxGasMarginPercent) {
		return 0, fmt.Errorf("estimate gas: implausible estimate %d", gas)
	}
	return gas * (100 + s.cfg.GasMarginPercent) / 100, nil
}

func (s *Sender) pendingNonce(ctx context.Context) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.RPCTimeout)
	defer cancel()
	n, err := s.backend.PendingNonceAt(ctx, s.addr)
	if err != nil {
		return 0, fmt.Errorf("pending nonce: %w", err)
	}
	return n, nil
}

func (s *Sender) nonceAt(ctx context.Context) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.RPCTimeout)
	defer cancel()
	n, err := s.backend.NonceAt(ctx, s.addr, nil)
	if err != nil {
		return 0, fmt.Errorf("nonce: %w", err)
	}
	return n, nil
}

// broadcast sends tx to the node. A broadcast is not abandoned halfway because
// the caller gave up: it runs to RPCTimeout.
func (s *Sender) broadcast(ctx context.Context, tx *types.Transaction) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.RPCTimeout)
	defer cancel()
	return s.backend.SendTransaction(ctx, tx)
}

func (s *Sender) sign(f *flight, tip, feeCap *big.Int) (*types.Transaction, error) {
	tx, err := types.SignNewTx(s.key, s.signer, &types.DynamicFeeTx{
		ChainID:   s.chainID,
		Nonce:     f.nonce,
		GasTipCap: tip,
		GasFeeCap: feeCap,
		Gas:       f.gas,
		To:        f.to,
		Data:      f.data,
	})
	if err != nil {
		return nil, fmt.Errorf("sign nonce %d: %w", f.nonce, err)
	}
	return tx, nil
}

// flightFor returns the flight of tx's nonce, starting one with before if the
// Sender does not remember it (tx from before a restart of the Sender, or long
// settled).
//
// If the Sender has a flight for the nonce with another call (tx was signed
// before a restart and never reached the chain, and the nonce went to a new
// call since), tx is not a version of that call: it gets a flight of its own
// that the Sender does not track, so it is waited for but never re-sent or
// replaced, and its Wait ends once the nonce is used.
func (s *Sender) flightFor(tx *types.Transaction, before BeforeBroadcast) *flight {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.flights[tx.Nonce()]
	if f != nil && !sameCall(f, tx) {
		return &flight{nonce: tx.Nonce(), to: tx.To(), data: tx.Data(), gas: tx.Gas(),
			txs: []*types.Transaction{tx}, touched: s.cfg.Now()}
	}
	if f == nil {
		f = &flight{nonce: tx.Nonce(), to: tx.To(), data: tx.Data(), gas: tx.Gas(),
			txs: []*types.Transaction{tx}, touched: s.cfg.Now(), before: before}
		s.flights[f.nonce] = f
		delete(s.free, f.nonce) // the nonce has a transaction now: not to be handed out
		return f
	}
	if f.before == nil {
		f.before = before
	}
	if !slices.ContainsFunc(f.txs, func(t *types.Transaction) bool { return t.Hash() == tx.Hash() }) {
		f.txs = slices.Insert(f.txs, 0, tx) // oldest: the latest stays the one to re-broadcast
	}
	return f
}

// sameCall reports whether tx calls what f's versions call.
func sameCall(f *flight, tx *types.Transaction) bool {
	to := tx.To()
	return (f.to == nil) == (to == nil) && (to == nil || *f.to == *to) && bytes.Equal(f.data, tx.Data())
}

func (s *Sender) addVersion(f *flight, tx *types.Transaction) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f.txs = append(f.txs, tx)
	f.touched = s.cfg.Now()
}

func (s *Sender) removeVersion(f *flight, tx *types.Transaction) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f.txs = slices.DeleteFunc(f.txs, func(t *types.Transaction) bool { return t == tx })
}

// latest returns the most recent version of f.
func (s *Sender) latest(f *flight) *types.Transaction {
	s.mu.Lock()
	defer s.mu.Unlock()
	return f.txs[len(f.txs)-1]
}

// hashes returns the hashes of f's versions, newest first.
func (s *Sender) hashes(f *flight) []common.Hash {
	s.mu.Lock()
	defer s.mu.Unlock()
	hs := make([]common.Hash, len(f.txs))
	for i, tx := range f.txs {
		hs[len(hs)-1-i] = tx.Hash()
	}
	return hs
}

// prune forgets flights far below the account's mined nonce, and free nonces
// below it: the account used them.
func (s *Sender) prune(mined uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for n := range s.flights {
		if n+keepSettled < mined {
			delete(s.flights, n)
		}
	}
	for n := range s.free {
		if n < mined {
			delete(s.free, n)
		}
	}
}

// raise returns x raised by bp basis points, rounded up, and by at least 1.
func raise(x *big.Int, bp uint64) *big.Int {
	r := new(big.Int).Mul(x, new(big.Int).SetUint64(10_000+bp))
	r.Add(r, big.NewInt(9_999))
	r.Quo(r, big.NewInt(10_000))
	return maxBig(r, new(big.Int).Add(x, common.Big1))
}

func minBig(a, b *big.Int) *big.Int {
	if a.Cmp(b) <= 0 {
		return new(big.Int).Set(a)
	}
	return new(big.Int).Set(b)
}

func maxBig(a, b *big.Int) *big.Int {
	if a.Cmp(b) >= 0 {
		return new(big.Int).Set(a)
	}
	return new(big.Int).Set(b)
}
