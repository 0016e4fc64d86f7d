package chain

import (
	"bytes"
	"cmp"
	"context"
	"crypto/ecdsa"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/big"
	"slices"
	"sync"
	"time"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/crypto"
)

const (
	defaultFeeBumpPercent   = 12.5
	minFeeBumpPercent       = 10 // geth's default replacement rule; anvil asks for any increase
	maxFeeBumpPercent       = 1000
	defaultReplaceAfter     = 30 * time.Second
	defaultPollInterval     = time.Second
	defaultGasMarginPercent = 20
	maxGasMarginPercent     = 100
	defaultRPCTimeout       = 10 * time.Second

	// sendAttempts bounds how often Send takes a fresh nonce from the node after
	// the node said the one it used was taken.
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
	// PollInterval is how often Wait asks for receipts. Default 1s.
	PollInterval time.Duration
	// GasMarginPercent is added to the node's gas estimate, since state can change
	// between estimate and inclusion. Default 20, at most 100.
	GasMarginPercent uint64
	// RPCTimeout bounds each call to the node. Default 10s.
	RPCTimeout time.Duration
	// Now returns the current time. Default time.Now.
	Now func() time.Time
}

// Sender signs and broadcasts EIP-1559 transactions from one account. It is
// safe for concurrent use.
//
// It hands out nonces itself, starting from the node's pending nonce, and
// broadcasts them in order. It remembers every transaction it broadcast for a
// nonce until that nonce is mined, so Wait can re-broadcast a transaction the
// node dropped (a dropped nonce would otherwise block all later ones) and
// replace a stuck one with higher fees.
type Sender struct {
	backend Backend
	key     *ecdsa.PrivateKey
	addr    common.Address
	chainID *big.Int
	signer  types.Signer
	cfg     SenderConfig
	bumpBP  uint64 // cfg.FeeBumpPercent in basis points
	log     *slog.Logger

	// sending holds a token while Send takes a nonce and broadcasts, so nonces
	// reach the node in order and a broadcast the node refuses leaves no gap. It
	// is a channel rather than a mutex so a caller's ctx bounds the wait for it.
	sending chan struct{}
	synced  bool   // guarded by sending; next came from the node
	next    uint64 // guarded by sending; the nonce of the next new transaction

	mu      sync.Mutex
	flights map[uint64]*flight // guarded by mu; by nonce

	// repairing holds a token while one Wait checks for dropped and stuck
	// transactions, so concurrent Waits neither queue up behind each other nor
	// replace the same transaction twice.
	repairing chan struct{}
}

// flight is one nonce the Sender broadcast and the transactions it sent for it.
type flight struct {
	nonce uint64
	to    *common.Address
	data  []byte
	gas   uint64

	txs     []*types.Transaction // guarded by Sender.mu; every version, oldest first
	touched time.Time            // guarded by Sender.mu; last broadcast or check by repair
	capped  bool                 // guarded by Sender.mu; logged that MaxFeePerGas stops replacement
}

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
	if cfg.ReplaceAfter <= 0 {
		cfg.ReplaceAfter = defaultReplaceAfter
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = defaultPollInterval
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
		sending:   make(chan struct{}, 1),
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
// nonce, broadcasts it and returns without waiting for it to be mined. The gas
// limit is the node's estimate plus GasMarginPercent, so a call that would
// revert fails here and nothing is broadcast.
//
// If the node refuses the transaction, Send returns an error and the nonce is
// used for the next transaction. If the broadcast's fate is unknown (a transport
// error or timeout), Send returns the transaction together with a *PendingError:
// the nonce stays taken, and Wait on the transaction delivers it.
func (s *Sender) Send(ctx context.Context, to common.Address, data []byte) (*types.Transaction, error) {
	data = bytes.Clone(data)
	gas, err := s.estimateGas(ctx, to, data)
	if err != nil {
		return nil, fmt.Errorf("send tx: %w", err)
	}
	tip, feeCap, err := s.fees(ctx)
	if err != nil {
		return nil, fmt.Errorf("send tx: %w", err)
	}
	tx, err := s.broadcastNew(ctx, &to, data, gas, tip, feeCap)
	if err != nil {
		return tx, fmt.Errorf("send tx: %w", err)
	}
	return tx, nil
}

// broadcastNew signs and broadcasts a transaction under the next nonce.
func (s *Sender) broadcastNew(ctx context.Context, to *common.Address, data []byte, gas uint64, tip, feeCap *big.Int) (*types.Transaction, error) {
	select {
	case s.sending <- struct{}{}:
		defer func() { <-s.sending }()
	case <-ctx.Done():
		return nil, fmt.Errorf("wait for the nonce: %w", ctx.Err())
	}
	if !s.synced {
		if err := s.resyncLocked(ctx); err != nil {
			return nil, err
		}
	}
	for attempt := 1; ; attempt++ {
		f := &flight{nonce: s.next, to: to, data: data, gas: gas}
		tx, err := s.sign(f, tip, feeCap)
		if err != nil {
			return nil, err
		}
		err = s.broadcast(ctx, tx)
		switch {
		case err == nil || (nodeAnswered(err) && isAlreadyKnown(err)):
			s.track(f, tx)
			s.next++
			s.log.Debug("sent transaction", "nonce", tx.Nonce(), "hash", tx.Hash(), "to", to,
				"gas", gas, "tip", tip, "max_fee", feeCap)
			return tx, nil
		case !nodeAnswered(err):
			// The node may hold the transaction: keep the nonce and let Wait
			// re-broadcast it if the node turns out not to know it.
			s.track(f, tx)
			s.next++
			s.log.Warn("broadcast outcome unknown", "nonce", tx.Nonce(), "hash", tx.Hash(), "err", err)
			return tx, &PendingError{Hash: tx.Hash(), Nonce: tx.Nonce(), Err: fmt.Errorf("broadcast: %w", err)}
		case attempt < sendAttempts && (isNonceTooLow(err) || isReplaceUnderpriced(err)):
			s.log.Info("nonce taken, resyncing from the node", "nonce", tx.Nonce(), "err", err)
			if err := s.resyncLocked(ctx); err != nil {
				return nil, err
			}
		default:
			return nil, fmt.Errorf("broadcast nonce %d: %w", tx.Nonce(), err)
		}
	}
}

// resyncLocked sets the next nonce to the node's pending nonce, but never to a
// nonce the Sender already broadcast and may still see mined. The caller holds
// the sending token.
func (s *Sender) resyncLocked(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.RPCTimeout)
	defer cancel()
	pending, err := s.backend.PendingNonceAt(ctx, s.addr)
	if err != nil {
		return fmt.Errorf("pending nonce: %w", err)
	}
	next := pending
	s.mu.Lock()
	for n := range s.flights {
		next = max(next, n+1)
	}
	s.mu.Unlock()
	if s.synced && next != s.next {
		s.log.Info("resynced nonce", "from", s.next, "to", next, "node_pending", pending)
	}
	s.next, s.synced = next, true
	return nil
}

// Wait waits until one of the transactions broadcast for tx's nonce is mined
// and returns its receipt, which names the transaction and its status (a
// reverted call is mined too: check Status). tx must come from Send or an
// earlier Wait's *PendingError.
//
// While it waits it polls every PollInterval, and once a transaction of this or
// a lower nonce has waited ReplaceAfter it re-broadcasts it if the node no
// longer knows it, or replaces it with the same call at FeeBumpPercent higher
// fees if it is the account's next nonce and so priced too low.
//
// When ctx ends first, Wait returns a *PendingError with the latest hash; the
// Sender keeps the transaction and a later Wait continues. When the account's
// nonce moved past tx's without any of the Sender's transactions being mined,
// it returns ErrNonceConsumed.
func (s *Sender) Wait(ctx context.Context, tx *types.Transaction) (*types.Receipt, error) {
	if tx == nil {
		return nil, errors.New("wait tx: nil transaction")
	}
	if from, err := types.Sender(s.signer, tx); err != nil || from != s.addr {
		return nil, fmt.Errorf("wait tx %s: not signed by %s on chain %s", tx.Hash(), s.addr, s.chainID)
	}
	f := s.flightFor(tx)
	tick := time.NewTicker(s.cfg.PollInterval)
	defer tick.Stop()
	var (
		lastErr  error
		consumed int // polls in a row that saw the nonce used without our receipt
	)
	for {
		r, used, err := s.poll(ctx, f)
		switch {
		case r != nil:
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
		// load balancer, say), so the nonce must be seen used twice.
		if consumed >= 2 {
			return nil, fmt.Errorf("wait tx %s: nonce %d: %w", tx.Hash(), f.nonce, ErrNonceConsumed)
		}
		select {
		case <-ctx.Done():
			cause := ctx.Err()
			if lastErr != nil && !errors.Is(lastErr, cause) {
				cause = fmt.Errorf("%w (last node error: %w)", cause, lastErr)
			}
			return nil, fmt.Errorf("wait tx: %w", &PendingError{Hash: s.latest(f).Hash(), Nonce: f.nonce, Err: cause})
		case <-tick.C:
		}
	}
}

// poll looks for a receipt of any version of f. Without one, it reports whether
// the account's nonce has passed f's, and otherwise repairs dropped and stuck
// transactions up to f's nonce.
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

// repair looks at the flights from nonce mined (the account's next nonce on
// chain) up to upTo that have waited ReplaceAfter: a flight the node no longer
// knows is re-broadcast (a dropped nonce blocks every later one), or replaced
// if the node refuses it as it is, and the one at nonce mined, which nothing
// else blocks, is replaced with higher fees.
func (s *Sender) repair(ctx context.Context, mined, upTo uint64) error {
	select {
	case s.repairing <- struct{}{}:
		defer func() { <-s.repairing }()
	default:
		return nil // another Wait is repairing; the next poll looks again
	}

	now := s.cfg.Now()
	s.mu.Lock()
	var due []*flight
	for n, f := range s.flights {
		if n >= mined && n <= upTo && now.Sub(f.touched) >= s.cfg.ReplaceAfter {
			due = append(due, f)
		}
	}
	s.mu.Unlock()
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
	tip, baseFee, err := s.market(ctx)
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

// track records f with its first version tx.
func (s *Sender) track(f *flight, tx *types.Transaction) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f.txs = []*types.Transaction{tx}
	f.touched = s.cfg.Now()
	s.flights[f.nonce] = f
}

// flightFor returns the flight of tx's nonce, starting one if the Sender does
// not remember it (tx from before a restart of the Sender, or long settled).
func (s *Sender) flightFor(tx *types.Transaction) *flight {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.flights[tx.Nonce()]
	if f == nil {
		f = &flight{nonce: tx.Nonce(), to: tx.To(), data: tx.Data(), gas: tx.Gas(),
			txs: []*types.Transaction{tx}, touched: s.cfg.Now()}
		s.flights[f.nonce] = f
		return f
	}
	if !slices.ContainsFunc(f.txs, func(t *types.Transaction) bool { return t.Hash() == tx.Hash() }) {
		f.txs = slices.Insert(f.txs, 0, tx) // oldest: the latest stays the one to re-broadcast
	}
	return f
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

// prune forgets flights far below the account's mined nonce.
func (s *Sender) prune(mined uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for n := range s.flights {
		if n+keepSettled < mined {
			delete(s.flights, n)
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
