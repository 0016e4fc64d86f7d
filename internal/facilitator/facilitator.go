// Package facilitator is the in-process x402 facilitator for the EVM exact scheme:
// it verifies payments and settles them on chain exactly once, keeping its
// settlement records in a store so that the guarantee survives restarts and is
// shared by every process on the same store. The package also serves the
// facilitator over HTTP (Handler) and talks to a remote one (Client).
//
// Exactly-once rests on three things. The settlement record's key is the
// authorization's on-chain identity (docs/DESIGN.md D4), claimed atomically
// before any broadcast, so one authorization is broadcast by at most one
// caller. Every transaction is written into the record before it is sent, so a
// record that says "claimed" sent nothing, and one that reached "broadcast" is
// only ever resolved from the chain: nothing new is signed for it, though the
// very bytes it holds may be sent again if the node dropped them (they can be
// mined at most once). And the one success:true an authorization may produce is
// decided by an atomic mark in the store (D5).
package facilitator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"sync"
	"time"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"

	"github.com/llm4agents/llm4agents/internal/chain"
	"github.com/llm4agents/llm4agents/internal/crashpoint"
	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/x402"
	"github.com/llm4agents/llm4agents/x402/evm/exact"
	"github.com/llm4agents/llm4agents/x402/evm/upto"
)

// Backend is what the facilitator reads from a node. *ethclient.Client and
// simulated.Client satisfy it.
type Backend interface {
	exact.Chain
	ethereum.LogFilterer
	TransactionReceipt(ctx context.Context, hash common.Hash) (*types.Receipt, error)
	TransactionByHash(ctx context.Context, hash common.Hash) (*types.Transaction, bool, error)
	BlockNumber(ctx context.Context) (uint64, error)
	HeaderByNumber(ctx context.Context, number *big.Int) (*types.Header, error)
	NonceAt(ctx context.Context, account common.Address, blockNumber *big.Int) (uint64, error)
	SendTransaction(ctx context.Context, tx *types.Transaction) error
}

// Sender broadcasts transactions from the facilitator's account. internal/chain's
// Sender implements it.
type Sender interface {
	Address() common.Address
	// Send broadcasts a transaction calling to with data. A nil transaction with an
	// error means nothing was broadcast; a transaction with an error means it may
	// have been.
	Send(ctx context.Context, to common.Address, data []byte) (*types.Transaction, error)
	// Wait returns the receipt of tx (or of a replacement of it) once mined. When
	// ctx ends first it returns a *chain.PendingError carrying the hash of the
	// latest transaction broadcast for it.
	Wait(ctx context.Context, tx *types.Transaction) (*types.Receipt, error)
	// SendRecorded is Send calling before with every transaction signed for
	// the call before it goes to the node, replacements included; when before
	// fails nothing is sent (chain.BeforeBroadcast).
	SendRecorded(ctx context.Context, to common.Address, data []byte, before chain.BeforeBroadcast) (*types.Transaction, error)
	// WaitRecorded is Wait giving before to a transaction the Sender does not
	// remember (one read back from a record after a restart).
	WaitRecorded(ctx context.Context, tx *types.Transaction, before chain.BeforeBroadcast) (*types.Receipt, error)
}

// Asset is a token the facilitator settles.
type Asset struct {
	Address common.Address
	Name    string // EIP-712 domain name
	Version string // EIP-712 domain version
}

// Config tunes a Facilitator.
type Config struct {
	Network string // eip155:<chain id>
	Assets  []Asset
	// SettleTimeout bounds the wait for a receipt; past it the answer is
	// settlement_pending (D3). Default 30 s.
	SettleTimeout time.Duration
	// ClaimLease is how long a claim without a broadcast blocks others before it
	// may be taken over. Default 2 min.
	ClaimLease time.Duration
	// LookbackBlocks bounds the log search for who used an authorization.
	// Default 100,000.
	LookbackBlocks uint64
	// Owner names this process in claims.
	Owner string
	// ReorgWindow is how long the reconciler keeps re-reading a settled
	// payment's receipt for reorgs (D17): from when it was
	// recorded settled, or last found dropped or mined again. Default
	// DefaultReorgWindow; at most store.RecentRetention.
	ReorgWindow time.Duration
	// Now is the clock that places the reorg window. Default time.Now.
	Now func() time.Time
	// Schemes are the x402 schemes served: exact.Scheme, upto.Scheme.
	// Default exact alone: upto needs Permit2 and the x402 upto proxy on the
	// chain.
	Schemes []string
}

// Defaults of Config.
const (
	DefaultSettleTimeout  = 30 * time.Second
	DefaultClaimLease     = 2 * time.Minute
	DefaultLookbackBlocks = 100_000
	// DefaultReorgWindow outlasts the reorgs a rollup like Base sees (rare,
	// of a few unsafe blocks) and the time its blocks take to reach L1
	// finality, so a settlement is watched until it cannot be reorged.
	DefaultReorgWindow = 15 * time.Minute
)

// Facilitator verifies and settles EVM exact payments on one network.
type Facilitator struct {
	cfg     Config
	chainID *big.Int
	backend Backend
	sender  Sender
	store   store.Settlements
	schemes map[string]scheme // by name
	log     *slog.Logger
	assets  map[common.Address]Asset
	metrics metrics
	// confirmer reads the chain for an authorization's use.
	confirmer *ChainConfirmer

	// sent holds the transaction this process broadcast for each settlement in
	// flight, so resolve can keep waiting on it. Entries are dropped once their
	// settlement concludes.
	sent sync.Map // settlement key -> *types.Transaction
}

// New returns a Facilitator for cfg.Network.
func New(cfg Config, backend Backend, sender Sender, st store.Settlements, log *slog.Logger) (*Facilitator, error) {
	chainID, err := exact.ChainID(cfg.Network)
	if err != nil {
		return nil, err
	}
	if len(cfg.Assets) == 0 {
		return nil, errors.New("facilitator: no assets configured")
	}
	if cfg.SettleTimeout <= 0 {
		cfg.SettleTimeout = DefaultSettleTimeout
	}
	if cfg.ClaimLease <= 0 {
		cfg.ClaimLease = DefaultClaimLease
	}
	if cfg.LookbackBlocks == 0 {
		cfg.LookbackBlocks = DefaultLookbackBlocks
	}
	if cfg.Owner == "" {
		cfg.Owner = sender.Address().Hex()
	}
	switch {
	case cfg.ReorgWindow == 0:
		cfg.ReorgWindow = DefaultReorgWindow
	case cfg.ReorgWindow < 0 || cfg.ReorgWindow > store.RecentRetention:
		return nil, fmt.Errorf("facilitator: reorg window %s is not between 0 and %s", cfg.ReorgWindow, store.RecentRetention)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	f := &Facilitator{
		cfg: cfg, chainID: chainID, backend: backend, sender: sender, store: st,
		log:       log.With("component", "facilitator", "network", cfg.Network),
		assets:    make(map[common.Address]Asset, len(cfg.Assets)),
		confirmer: NewChainConfirmer(backend, cfg.LookbackBlocks),
		metrics:   newMetrics(),
	}
	for _, a := range cfg.Assets {
		f.assets[a.Address] = a
	}
	if len(cfg.Schemes) == 0 {
		cfg.Schemes = []string{exact.Scheme}
	}
	f.schemes = make(map[string]scheme, len(cfg.Schemes))
	for _, name := range cfg.Schemes {
		switch name {
		case exact.Scheme:
			f.schemes[name] = exactScheme{&exact.Verifier{Chain: backend, ChainID: chainID, Caller: sender.Address()}}
		case upto.Scheme:
			f.schemes[name] = uptoScheme{&upto.Verifier{Chain: backend, ChainID: chainID, Facilitators: []common.Address{sender.Address()}}}
		default:
			return nil, fmt.Errorf("facilitator: scheme %q is not served (%s, %s)", name, exact.Scheme, upto.Scheme)
		}
	}
	return f, nil
}

// Supported lists the kinds this facilitator serves and its signer.
func (f *Facilitator) Supported(context.Context) (*x402.SupportedResponse, error) {
	kinds := make([]x402.SupportedKind, 0, len(f.schemes))
	for _, name := range schemeOrder {
		if s, ok := f.schemes[name]; ok {
			kinds = append(kinds, s.supported(f.cfg.Network, f.sender.Address()))
		}
	}
	return &x402.SupportedResponse{
		Kinds:      kinds,
		Extensions: []string{},
		Signers:    map[string][]string{"eip155:*": {f.sender.Address().Hex()}},
	}, nil
}

// schemeOrder is the order of the kinds in GET /supported.
var schemeOrder = []string{exact.Scheme, upto.Scheme}

// route picks the scheme of requirements this facilitator serves, and refuses
// the others.
func (f *Facilitator) route(req x402.PaymentRequirements) (scheme, *x402.VerifyError) {
	s, ok := f.schemes[req.Scheme]
	if !ok {
		return nil, &x402.VerifyError{Reason: x402.ReasonUnsupportedScheme, Message: fmt.Sprintf("scheme %q is not supported", req.Scheme)}
	}
	if req.Network != f.cfg.Network {
		return nil, &x402.VerifyError{Reason: x402.ReasonInvalidNetwork, Message: fmt.Sprintf("network %q is not supported", req.Network)}
	}
	asset, err := exact.ParseAddress(req.Asset)
	if err != nil {
		return nil, &x402.VerifyError{Reason: x402.ReasonInvalidRequirements, Message: "asset is not an address"}
	}
	a, ok := f.assets[asset]
	if !ok {
		return nil, &x402.VerifyError{Reason: x402.ReasonEVMAssetNotSupported, Message: fmt.Sprintf("asset %s is not supported", asset.Hex())}
	}
	if verr := s.route(req, a); verr != nil {
		return nil, verr
	}
	return s, nil
}

// Verify checks a payment without changing chain state.
func (f *Facilitator) Verify(ctx context.Context, p *x402.PaymentPayload, req x402.PaymentRequirements) (*x402.VerifyResponse, error) {
	s, refused := f.route(req)
	if refused != nil {
		return refused.Response(), nil
	}
	pm, err := s.verify(ctx, p, req)
	var verr *x402.VerifyError
	switch {
	case errors.As(err, &verr):
		return verr.Response(), nil
	case err != nil:
		return nil, fmt.Errorf("verify: %w", err)
	}
	return &x402.VerifyResponse{IsValid: true, Payer: pm.Payer().Hex()}, nil
}

// Settle verifies a payment and settles it on chain, at most once per
// authorization. It answers protocol outcomes as responses; an error means no
// verdict could be reached. A transaction may still have been broadcast for
// the authorization (by this call or another holder of its record): the
// record keeps it, and the caller asks the chain (D1) or settles again later,
// never treats the error as "not paid".
func (f *Facilitator) Settle(ctx context.Context, p *x402.PaymentPayload, req x402.PaymentRequirements) (*x402.SettleResponse, error) {
	s, verr := f.route(req)
	if verr != nil {
		return settleFailure(req.Network, verr), nil
	}
	pm, recovered, err := s.check(p, req)
	if verr, ok := errors.AsType[*x402.VerifyError](err); ok {
		return settleFailure(req.Network, verr), nil
	} else if err != nil {
		return nil, err
	}
	// Work past this point outlives the caller: once a claim is taken the outcome
	// must be recorded even if the client goes away. It is bounded instead by
	// retryBudget settle timeouts from here, or the caller's deadline if that
	// comes first, so a node that stops answering cannot hold the call (and
	// its claim) forever: the chain reads before the claim have no bound of
	// their own, and the wait for a receipt has one settle timeout. A caller
	// in the same process (the gateway) so gets its answer while it can still
	// record it. Store writes run to their end whatever (writeCtx).
	start := time.Now()
	deadline := start.Add(retryBudget * f.cfg.SettleTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	ctx, cancel := context.WithDeadline(context.WithValue(context.WithoutCancel(ctx), callerKey{}, ctx), deadline)
	defer cancel()
	resp, err := f.settle(ctx, s, pm, recovered, p, req)
	if !errors.Is(err, errAbandoned) {
		return resp, err
	}
	// The record's transaction can never be mined and the record was given
	// back, nothing paid: settle again now, as the buyer's retry would. Once
	// only: a second dead transaction in one call is no longer bad luck.
	//
	// The retry gets what remains of two settle timeouts from the call's
	// start (or of the caller's deadline): one for the attempt that found the record dead (its wait for a
	// receipt is one settle timeout), one for the retry's own wait. However
	// slow the first attempt was, the call so ends near 2 x SettleTimeout, as
	// a caller that bounds its request by the settle timeout can bear, rather
	// than two full timeouts plus chain reads. Cut short, the retry answers
	// settlement_pending with what it broadcast (D3), or an error before it
	// broadcast anything; its store writes run to their end (writeCtx). With
	// nothing left, the abandoned record's error stands: nothing was paid, and
	// the authorization is free for the buyer's own retry.
	if time.Until(deadline) <= 0 {
		return nil, err
	}
	f.log.Info("settlement given back; claiming it again", "key", pm.Key(), "err", err)
	return f.settle(ctx, s, pm, recovered, p, req)
}

// callerKey holds, in the context of a Settle call's work, the caller's own
// context, which the work outlives: report gives the one success of an
// authorization only to a caller still waiting for it.
type callerKey struct{}

// retryBudget is how many settle timeouts a Settle call that re-settles an
// abandoned record may take in all (see Settle).
const retryBudget = 2

// settle is Settle past the checks that need no store or chain state.
func (f *Facilitator) settle(ctx context.Context, s scheme, pm payment, recovered bool, p *x402.PaymentPayload, req x402.PaymentRequirements) (*x402.SettleResponse, error) {
	key := pm.Key()
	rec, err := f.store.Settlement(ctx, key)
	switch {
	case err == nil:
		return f.resume(ctx, s, pm, rec, p, req)
	case !errors.Is(err, store.ErrNotFound):
		return nil, fmt.Errorf("settle: %w", err)
	}
	if err := s.verifyForSettle(ctx, pm, recovered); err != nil {
		if verr, ok := errors.AsType[*x402.VerifyError](err); ok {
			if verr.Reason == pm.usedReason() {
				return f.usedElsewhere(ctx, pm, verr)
			}
			return settleFailure(req.Network, verr), nil
		}
		return nil, fmt.Errorf("settle: %w", err)
	}
	if pm.settledAmount() == "0" {
		// An upto charge of nothing: no transaction is sent and the permit
		// expires unused, as the scheme says. Nothing is claimed either:
		// nothing moved, and the resource server holding the request's claim
		// settles it once.
		return &x402.SettleResponse{Success: true, Transaction: "", Network: pm.Network(), Payer: pm.Payer().Hex(), Amount: "0"}, nil
	}
	rec, held, err := f.claim(ctx, pm)
	if err != nil {
		return nil, fmt.Errorf("settle: claim: %w", err)
	}
	if !held {
		return f.resume(ctx, s, pm, rec, p, req)
	}
	return f.broadcast(ctx, s, pm, rec)
}

// broadcast sends the transfer for a claim this call holds and waits for it.
// Every transaction is written into the record before it is sent (see
// recorder), so the record names whatever may reach the chain even if this
// process dies right after the send.
func (f *Facilitator) broadcast(ctx context.Context, s scheme, pm payment, rec store.Settlement) (*x402.SettleResponse, error) {
	to, data, err := pm.call()
	if err != nil {
		f.release(ctx, rec)
		return nil, err
	}
	r := f.recorder(pm, rec)
	tx, err := f.sender.SendRecorded(ctx, to, data, r.before)
	switch {
	case tx == nil && errors.Is(err, errMayHavePaid):
		// The transaction recorded first may have paid (checkUnpaid): the
		// record still names it under this call's claim, and the chain tells.
		// Giving the record back here could free an authorization that is
		// being paid.
		rec.State, rec.TxHash = store.StateBroadcast, r.last().Hex()
		return f.fromChain(ctx, pm, rec, true)
	case tx == nil && errors.Is(err, store.ErrFenced):
		// The record moved on without this claim, and nothing was sent for
		// it (BeforeBroadcast failed): answer from the record as it stands.
		return f.fenced(ctx, pm, rec, err)
	}
	if err != nil && tx == nil {
		// Nothing left this process: give the authorization back. A revert during
		// gas estimation is a verdict; anything else is not.
		f.giveBack(ctx, rec, r.last())
		if s.isRevert(err) {
			// The node's pending state may differ from the latest block (a third
			// party's transaction for the same authorization waiting in the pool):
			// diagnose on the latest state, else trust the revert message.
			verr := f.diagnose(ctx, s, pm)
			if verr == nil {
				verr = s.revertReason(pm, err)
			}
			if verr.Reason == pm.usedReason() {
				return f.usedElsewhere(ctx, pm, verr)
			}
			return settleFailure(pm.Network(), verr), nil
		}
		return nil, fmt.Errorf("settle: send: %w", err)
	}
	if err != nil {
		f.log.Warn("broadcast outcome unknown; resolving from chain", "key", rec.Key, "tx", tx.Hash().Hex(), "err", err)
	}
	crashpoint.Hit(crashpoint.AfterBroadcast) // sent and recorded, not mined
	f.remember(rec.Key, tx)
	rec.State, rec.TxHash = store.StateBroadcast, tx.Hash().Hex()
	waitCtx, cancel := context.WithTimeout(ctx, f.cfg.SettleTimeout)
	defer cancel()
	receipt, err := f.sender.WaitRecorded(waitCtx, tx, r.before)
	if err != nil {
		if h, ok := PendingHash(err); ok {
			return pending(pm, h), nil
		}
		// The nonce was consumed by something else, or the node failed: the chain
		// decides.
		f.log.Warn("wait for settlement", "key", rec.Key, "err", err)
		return f.fromChain(ctx, pm, rec, true)
	}
	return f.conclude(ctx, pm, rec, receipt, true)
}

// fenced answers a settle call whose record-before-send the store refused
// with ErrFenced: another holder took the claim over (this call's lease ran
// out), or the record was resolved meanwhile, as when another replica sent
// the recorded transaction again and its reconciler recorded it mined. The
// call sent nothing, so there is nothing of its own to give back: the record
// decides. Settled with a transfer that pays this authorization, the one
// success mark decides between success and nonce_already_used (D5);
// broadcast by another holder, the answer is settlement_pending with that
// transaction (D3), for the chain to resolve; failed by another holder, its
// recorded reason, as resume answers it. Anything else stays an error, no
// verdict.
func (f *Facilitator) fenced(ctx context.Context, pm payment, rec store.Settlement, sendErr error) (*x402.SettleResponse, error) {
	cur, err := f.store.Settlement(ctx, rec.Key)
	if err != nil {
		return nil, fmt.Errorf("settle: send: %w (re-read record: %w)", sendErr, err)
	}
	switch {
	case cur.State == store.StateSettled && cur.TxHash != "":
		return f.settled(ctx, pm.asRecorded(cur), cur)
	case cur.State == store.StateBroadcast && cur.Fence != rec.Fence && cur.TxHash != "":
		f.log.Info("claim taken over; answering the other holder's transaction", "key", cur.Key, "tx", cur.TxHash)
		return pending(pm, common.HexToHash(cur.TxHash)), nil
	case cur.State == store.StateFailed:
		// Final: another holder recorded a verdict (a revert, a transfer
		// that did not pay). Its reason is the answer, as for any call that
		// finds the record failed.
		return failed(pm, cur), nil
	}
	return nil, fmt.Errorf("settle: send: %w", sendErr)
}

// settled answers a settle call that finds its record settled. The record's
// key is the authorization's nonce (D4), which the payer may have signed into
// two authorizations (other amounts, say): the success may only be reported
// for the one the settling transfer pays, so while it is not yet reported
// the transfer is checked against this call's authorization first. Once
// reported, the mark answers alone.
func (f *Facilitator) settled(ctx context.Context, pm payment, rec store.Settlement) (*x402.SettleResponse, error) {
	tx := common.HexToHash(rec.TxHash)
	if rec.SuccessReported {
		return alreadySettled(pm, tx), nil
	}
	receipt, err := f.backend.TransactionReceipt(ctx, tx)
	if err != nil {
		return nil, fmt.Errorf("settlement %s: read receipt of %s: %w", rec.Key, tx.Hex(), err)
	}
	if receipt.Status != types.ReceiptStatusSuccessful || !pm.paidBy(receipt.Logs) {
		return alreadySettled(pm, tx), nil // the nonce paid another authorization
	}
	return f.report(ctx, pm, rec.Key, tx, true)
}

// PendingHash extracts the latest transaction hash from a Sender.Wait error that
// means "broadcast, not mined yet".
func PendingHash(err error) (common.Hash, bool) {
	if p, ok := errors.AsType[*chain.PendingError](err); ok {
		return p.Hash, true
	}
	return common.Hash{}, false
}

// conclude records the outcome of a mined transaction. answer says a settle
// call is waiting for it: only then may its success be reported (D5); the
// reconciler records outcomes without answering anyone.
func (f *Facilitator) conclude(ctx context.Context, pm payment, rec store.Settlement, receipt *types.Receipt, answer bool) (*x402.SettleResponse, error) {
	f.forget(rec.Key) // mined: the Sender has nothing left to keep alive
	if receipt.Status == types.ReceiptStatusSuccessful && pm.paidBy(receipt.Logs) {
		crashpoint.Hit(crashpoint.AfterReceipt) // paid on chain, not recorded
		if err := f.update(ctx, rec, store.StateSettled, receipt.TxHash, ""); err != nil && !errors.Is(err, store.ErrFenced) {
			return nil, fmt.Errorf("record settlement: %w", err)
		}
		crashpoint.Hit(crashpoint.AfterRecord) // recorded, nobody answered
		return f.report(ctx, pm, rec.Key, receipt.TxHash, answer)
	}
	if receipt.Status == types.ReceiptStatusSuccessful {
		// Mined, but the logs do not show this transfer: never call it paid.
		return f.fail(ctx, pm, rec, x402.ReasonEVMTransferEventMismatch, receipt.TxHash, "transaction succeeded without the expected transfer")
	}
	// Reverted. If the authorization is now used, someone else got there first.
	return f.fromChain(ctx, pm, rec, answer)
}

// report answers success:true to exactly one caller per authorization (D5) and
// "already used" with the settling transaction to every other. Without a
// caller to answer (answer false: the reconciler) it marks nothing, so the
// success stays for the first settle call that observes it.
func (f *Facilitator) report(ctx context.Context, pm payment, key string, tx common.Hash, answer bool) (*x402.SettleResponse, error) {
	if !answer {
		return &x402.SettleResponse{Success: true, Transaction: tx.Hex(), Network: pm.Network(), Payer: pm.Payer().Hex(), Amount: pm.settledAmount()}, nil
	}
	if caller, ok := ctx.Value(callerKey{}).(context.Context); ok && caller.Err() != nil {
		// The caller stopped waiting (its timeout, a dropped connection):
		// the one success given to it would be lost, and the buyer's retry
		// would meet nonce_already_used for a payment that went through.
		// It stays unreported, for the next settle call of this
		// authorization to receive (D5, as after settlement_pending).
		return nil, fmt.Errorf("settled in %s, but the caller left before the answer: %w", tx.Hex(), context.Cause(caller))
	}
	wctx, cancel := writeCtx(ctx)
	won, err := f.store.MarkSuccessReported(wctx, key)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("mark success: %w", err)
	}
	if !won {
		return alreadySettled(pm, tx), nil
	}
	f.log.Info("settled", "key", key, "tx", tx.Hex())
	return &x402.SettleResponse{Success: true, Transaction: tx.Hex(), Network: pm.Network(), Payer: pm.Payer().Hex(), Amount: pm.settledAmount()}, nil
}

// resume continues from an existing record, never re-broadcasting what was sent.
// p and req are the call's own payload and requirements, verified again before a
// taken-over claim is broadcast.
func (f *Facilitator) resume(ctx context.Context, s scheme, pm payment, rec store.Settlement, p *x402.PaymentPayload, req x402.PaymentRequirements) (*x402.SettleResponse, error) {
	switch rec.State {
	case store.StateSettled:
		return f.settled(ctx, pm.asRecorded(rec), rec)
	case store.StateFailed:
		return failed(pm, rec), nil
	case store.StateBroadcast:
		return f.resolve(ctx, pm.asRecorded(rec), rec, true)
	case store.StateClaimed:
		// Another call holds the claim. The store takes it over for us only when
		// its lease expired (the holder died before or while broadcasting); then
		// the chain is read before anything else.
		rec2, held, err := f.claim(ctx, pm)
		if err != nil {
			return nil, fmt.Errorf("take over claim: %w", err)
		}
		if !held {
			if rec2.State == store.StateClaimed {
				return alreadyInFlight(pm), nil
			}
			return f.resume(ctx, s, pm, rec2, p, req)
		}
		used, err := pm.used(ctx, f.backend)
		if err != nil {
			f.release(ctx, rec2)
			return nil, fmt.Errorf("take over claim: %w", err)
		}
		if used {
			return f.resolve(ctx, pm, rec2, true)
		}
		full, err := s.verifySettle(ctx, p, req)
		if err != nil {
			f.release(ctx, rec2)
			if verr, ok := errors.AsType[*x402.VerifyError](err); ok {
				return settleFailure(pm.Network(), verr), nil
			}
			return nil, err
		}
		return f.broadcast(ctx, s, full, rec2)
	}
	return nil, fmt.Errorf("settlement %s in unknown state %q", rec.Key, rec.State)
}

// resolve settles the fate of a record whose transaction may or may not have
// mined. A transaction our own signer sent (remembered, or read back from the
// record) is waited for again (up to the settle timeout), which also sends its
// very bytes again if the node dropped them and replaces it, recorded first, if
// it is stuck; everything else is read from the chain. answer is conclude's.
func (f *Facilitator) resolve(ctx context.Context, pm payment, rec store.Settlement, answer bool) (*x402.SettleResponse, error) {
	if rec.State == store.StateBroadcast && rec.TxHash != "" {
		if tx := f.knownTx(ctx, rec); tx != nil {
			waitCtx, cancel := context.WithTimeout(ctx, f.cfg.SettleTimeout)
			receipt, err := f.sender.WaitRecorded(waitCtx, tx, f.recorder(pm, rec).before)
			cancel()
			if err == nil {
				return f.conclude(ctx, pm, rec, receipt, answer)
			}
			if h, ok := PendingHash(err); ok {
				return pending(pm, h), nil
			}
			f.log.Warn("wait for settlement", "key", rec.Key, "err", err)
		}
	}
	return f.fromChain(ctx, pm, rec, answer)
}

// knownTx returns the transaction our signer broadcast for a settlement: from
// memory, from the record, or (a record written without its raw transaction)
// from the node's pool; nil when none has it or another signer sent it, which
// only the chain can resolve. The Sender tracks replacements of it by nonce.
func (f *Facilitator) knownTx(ctx context.Context, rec store.Settlement) *types.Transaction {
	if tx, ok := f.sent.Load(rec.Key); ok {
		return tx.(*types.Transaction)
	}
	if tx, from, ok := f.recordedTx(rec); ok {
		if from != f.sender.Address() {
			return nil
		}
		return tx
	}
	tx, isPending, err := f.backend.TransactionByHash(ctx, common.HexToHash(rec.TxHash))
	if err != nil || !isPending {
		return nil
	}
	if from, err := types.Sender(types.LatestSignerForChainID(f.chainID), tx); err != nil || from != f.sender.Address() {
		return nil
	}
	return tx
}

// remember keeps the transaction broadcast for a settlement until the
// settlement concludes, so a later resolve can keep waiting on it.
func (f *Facilitator) remember(key string, tx *types.Transaction) { f.sent.Store(key, tx) }

// forget drops what remember kept, once a settlement reached a final state.
func (f *Facilitator) forget(key string) { f.sent.Delete(key) }

// fromChain settles the fate of a record from the chain alone, without waiting.
func (f *Facilitator) fromChain(ctx context.Context, pm payment, rec store.Settlement, answer bool) (*x402.SettleResponse, error) {
	if rec.TxHash != "" {
		receipt, err := f.backend.TransactionReceipt(ctx, common.HexToHash(rec.TxHash))
		if err == nil && receipt.Status == types.ReceiptStatusSuccessful && pm.paidBy(receipt.Logs) {
			return f.conclude(ctx, pm, rec, receipt, answer)
		}
		if err != nil && !errors.Is(err, ethereum.NotFound) {
			return nil, fmt.Errorf("read receipt: %w", err)
		}
	}
	used, err := pm.used(ctx, f.backend)
	if err != nil {
		return nil, fmt.Errorf("resolve settlement: %w", err)
	}
	if !used {
		if rec.State == store.StateBroadcast {
			return f.unmined(ctx, pm, rec)
		}
		return nil, fmt.Errorf("settlement %s: authorization unused and nothing broadcast", rec.Key)
	}
	ev, receipt, err := f.findUse(ctx, pm)
	if err != nil {
		return nil, err
	}
	if ev == nil {
		// Used, but the node does not show the event (yet: logs and receipts can
		// lag the account state under load). Our own transaction may be the one,
		// so nothing final is recorded without the evidence.
		if rec.State == store.StateBroadcast {
			return pending(pm, common.HexToHash(rec.TxHash)), nil
		}
		return nil, fmt.Errorf("settlement %s: authorization used but its transaction is not visible yet", rec.Key)
	}
	ours := false
	if !ev.Canceled {
		if ours, err = f.ours(ctx, ev.TxHash, rec); err != nil {
			return nil, err
		}
	}
	switch {
	case ev.Canceled:
		return f.fail(ctx, pm, rec, pm.usedReason(), ev.TxHash, "authorization canceled by the payer")
	case receipt != nil && ours && pm.paidBy(receipt.Logs):
		if err := f.update(ctx, rec, store.StateSettled, ev.TxHash, ""); err != nil && !errors.Is(err, store.ErrFenced) {
			return nil, fmt.Errorf("record settlement: %w", err)
		}
		return f.report(ctx, pm, rec.Key, ev.TxHash, answer)
	default:
		// Someone else's transaction used it first. Report it as already settled,
		// with that transaction, never as a fresh success.
		return f.fail(ctx, pm, rec, pm.usedReason(), ev.TxHash, "authorization used by another transaction")
	}
}

// usedElsewhere answers a fresh settle whose authorization is already used on
// chain and of which we hold no record.
func (f *Facilitator) usedElsewhere(ctx context.Context, pm payment, verr *x402.VerifyError) (*x402.SettleResponse, error) {
	resp := settleFailure(pm.Network(), verr)
	if ev, _, err := f.findUse(ctx, pm); err == nil && ev != nil {
		resp.Transaction = ev.TxHash.Hex()
	}
	return resp, nil
}

func (f *Facilitator) findUse(ctx context.Context, pm payment) (*exact.UseEvent, *types.Receipt, error) {
	return f.confirmer.findUse(ctx, pm)
}

func (f *Facilitator) fail(ctx context.Context, pm payment, rec store.Settlement, reason x402.Reason, tx common.Hash, msg string) (*x402.SettleResponse, error) {
	f.forget(rec.Key)
	if err := f.update(ctx, rec, store.StateFailed, tx, reason); err != nil && !errors.Is(err, store.ErrFenced) {
		return nil, fmt.Errorf("record failure: %w", err)
	}
	return &x402.SettleResponse{
		Success: false, ErrorReason: reason, ErrorMessage: msg, Transaction: txHex(tx), Network: pm.Network(), Payer: pm.Payer().Hex(),
	}, nil
}

func (f *Facilitator) diagnose(ctx context.Context, s scheme, pm payment) *x402.VerifyError {
	err := s.simulate(ctx, pm)
	if verr, ok := errors.AsType[*x402.VerifyError](err); ok {
		return verr
	}
	return nil
}

func (f *Facilitator) release(ctx context.Context, rec store.Settlement) {
	ctx, cancel := writeCtx(ctx)
	defer cancel()
	if err := f.store.ReleaseSettlement(ctx, rec.Key, rec.Fence); err != nil {
		f.log.Warn("release claim", "key", rec.Key, "err", err)
	}
}

// writeCtx gives one store write a deadline of its own, detached from ctx:
// a deadline that cut a write after it committed would leave the store ahead
// of the call (a success mark taken that nobody was told of, a claim or a
// verdict its caller reports as an error). So a call's deadline bounds its
// reads and waits, never its writes; each runs to its end within
// store.DefaultTimeout, as the record-before-send always has.
func writeCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), store.DefaultTimeout)
}

// claim claims the settlement of pm for this process (writeCtx).
func (f *Facilitator) claim(ctx context.Context, pm payment) (store.Settlement, bool, error) {
	ctx, cancel := writeCtx(ctx)
	defer cancel()
	return f.store.ClaimSettlement(ctx, pm.record(f.cfg.Owner), f.cfg.ClaimLease)
}

// update moves a record held under rec.Fence to state (writeCtx).
func (f *Facilitator) update(ctx context.Context, rec store.Settlement, state store.SettlementState, tx common.Hash, reason x402.Reason) error {
	ctx, cancel := writeCtx(ctx)
	defer cancel()
	return f.store.UpdateSettlement(ctx, rec.Key, rec.Fence, state, txHex(tx), string(reason))
}

func txHex(h common.Hash) string {
	if h == (common.Hash{}) {
		return ""
	}
	return h.Hex()
}

func settleFailure(network string, verr *x402.VerifyError) *x402.SettleResponse {
	return &x402.SettleResponse{
		Success: false, ErrorReason: verr.Reason, ErrorMessage: verr.Message, Payer: verr.Payer, Transaction: "", Network: network,
	}
}

func pending(pm payment, tx common.Hash) *x402.SettleResponse {
	return &x402.SettleResponse{
		Success: false, ErrorReason: x402.ReasonSettlementPending, ErrorMessage: "transaction broadcast, not yet mined",
		Transaction: tx.Hex(), Network: pm.Network(), Payer: pm.Payer().Hex(),
	}
}

func alreadySettled(pm payment, tx common.Hash) *x402.SettleResponse {
	return &x402.SettleResponse{
		Success: false, ErrorReason: pm.usedReason(), ErrorMessage: "authorization already settled",
		Transaction: txHex(tx), Network: pm.Network(), Payer: pm.Payer().Hex(),
	}
}

// failed answers a call that finds its record failed: the recorded reason,
// final.
func failed(pm payment, rec store.Settlement) *x402.SettleResponse {
	return &x402.SettleResponse{
		Success: false, ErrorReason: x402.Reason(rec.Reason), Transaction: "", Network: pm.Network(), Payer: pm.Payer().Hex(),
	}
}

func alreadyInFlight(pm payment) *x402.SettleResponse {
	return &x402.SettleResponse{
		Success: false, ErrorReason: pm.usedReason(), ErrorMessage: "authorization is being settled by another request",
		Transaction: "", Network: pm.Network(), Payer: pm.Payer().Hex(),
	}
}

var _ Sender = (*chain.Sender)(nil)

// Confirm tells from the chain whether the authorization of p was paid to
// req.payTo (ChainConfirmer.Confirm). A resource server holding the request's
// claim uses it to resolve an ambiguous settle answer (D1).
func (f *Facilitator) Confirm(ctx context.Context, p *x402.PaymentPayload, req x402.PaymentRequirements) (string, bool, error) {
	return f.confirmer.Confirm(ctx, p, req)
}

// ConfirmAuthorization is ChainConfirmer.ConfirmAuthorization on this
// facilitator's node.
func (f *Facilitator) ConfirmAuthorization(ctx context.Context, network string, asset common.Address, a exact.Authorization) (string, bool, error) {
	return f.confirmer.ConfirmAuthorization(ctx, network, asset, a)
}
