package facilitator

import (
	"context"
	"math/big"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"

	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/x402"
	"github.com/llm4agents/llm4agents/x402/evm/exact"
	"github.com/llm4agents/llm4agents/x402/evm/upto"
)

// payment is one verified authorization, of whichever scheme, as the
// settlement machinery sees it. Claims, the record written before every send,
// the waits, the one success mark (D5), the reconciler and the reorg checks
// are the same for every scheme; what differs is how an authorization is
// named, settled and recognised on chain, which is what a payment says.
type payment interface {
	// Key is the settlement record's key: the authorization's on-chain
	// identity (D4), so that one authorization has one record.
	Key() string
	Network() string
	Payer() common.Address
	// record is the settlement record claimed for the payment.
	record(owner string) store.Settlement
	// call is the transaction that settles the payment: its target and data.
	call() (common.Address, []byte, error)
	// paidBy reports whether a successful transaction's logs carry the
	// payment's transfer: its amount, from its payer to its payee.
	paidBy(logs []*types.Log) bool
	// used reads whether the authorization is spent on chain, by anyone.
	used(ctx context.Context, c exact.Chain) (bool, error)
	// findUse finds the transaction that spent the authorization, searching
	// the logs from block from on; nil when none did.
	findUse(ctx context.Context, c ChainReader, from uint64) (*exact.UseEvent, error)
	// expiry reads from tx, a recorded settlement transaction, the time from
	// which no block takes it. It reports false when tx does not settle this
	// payment.
	expiry(tx *types.Transaction) (*big.Int, bool)
	// usedReason is the reason of a settle refused because the
	// authorization was spent already.
	usedReason() x402.Reason
	// settledAmount is the amount a success reports: "" where the scheme
	// reports none (exact: the requirements' amount), the charge for upto.
	settledAmount() string
	// asRecorded is the payment as its record settles it: an upto permit is
	// settled once, for the charge its first settle recorded, whatever
	// amount a later call names; exact amounts are part of the
	// authorization.
	asRecorded(rec store.Settlement) payment
}

// exactPayment is an EIP-3009 transferWithAuthorization (scheme exact).
type exactPayment struct{ vd *exact.Verified }

var _ payment = exactPayment{}

func (p exactPayment) Key() string           { return p.vd.Key() }
func (p exactPayment) Network() string       { return p.vd.Network }
func (p exactPayment) Payer() common.Address { return p.vd.Payer() }

func (p exactPayment) record(owner string) store.Settlement {
	a := &p.vd.Payload.Authorization
	return store.Settlement{
		Key: p.vd.Key(), Network: p.vd.Network, Asset: p.vd.Asset.Hex(), Payer: a.From.Hex(),
		PayTo: a.To.Hex(), Amount: a.Value.String(), Owner: owner,
	}
}

func (p exactPayment) call() (common.Address, []byte, error) {
	data, err := exact.TransferCalldata(p.vd)
	return p.vd.Asset, data, err
}

func (p exactPayment) paidBy(logs []*types.Log) bool {
	return exact.PaysAuthorization(logs, p.vd.Asset, &p.vd.Payload.Authorization)
}

func (p exactPayment) used(ctx context.Context, c exact.Chain) (bool, error) {
	a := &p.vd.Payload.Authorization
	return exact.AuthorizationState(ctx, c, p.vd.Asset, a.From, a.Nonce)
}

func (p exactPayment) findUse(ctx context.Context, c ChainReader, from uint64) (*exact.UseEvent, error) {
	a := &p.vd.Payload.Authorization
	return exact.FindUse(ctx, c, p.vd.Asset, a.From, a.Nonce, from)
}

func (p exactPayment) expiry(tx *types.Transaction) (*big.Int, bool) { return validBeforeOf(tx, p.vd) }

func (exactPayment) usedReason() x402.Reason { return x402.ReasonEVMNonceAlreadyUsed }

func (exactPayment) settledAmount() string { return "" }

func (p exactPayment) asRecorded(store.Settlement) payment { return p }

// uptoPayment is a Permit2 witness transfer through the x402 upto proxy
// (scheme upto), settled for its charge (vd.Amount), at most the permit's
// amount.
type uptoPayment struct{ vd *upto.Verified }

var _ payment = uptoPayment{}

func (p uptoPayment) Key() string           { return p.vd.Key() }
func (p uptoPayment) Network() string       { return p.vd.Network }
func (p uptoPayment) Payer() common.Address { return p.vd.Payer() }

func (p uptoPayment) record(owner string) store.Settlement {
	a := &p.vd.Payload.Authorization
	return store.Settlement{
		Key: p.vd.Key(), Network: p.vd.Network, Asset: p.vd.Asset.Hex(), Payer: a.From.Hex(),
		PayTo: a.Witness.To.Hex(), Amount: p.vd.Amount.String(), Owner: owner,
	}
}

func (p uptoPayment) call() (common.Address, []byte, error) {
	sig := p.vd.Signature
	if sig == nil {
		sig = p.vd.Payload.Signature
	}
	data, err := upto.SettleCalldata(&p.vd.Payload.Authorization, sig, p.vd.Amount)
	return upto.ProxyAddress, data, err
}

// paidBy: a payment read back for a confirmation knows no charge (nil
// Amount); then any transfer of the permit, at most its amount, pays it.
func (p uptoPayment) paidBy(logs []*types.Log) bool {
	if p.vd.Amount == nil {
		_, ok := upto.PaidAmount(logs, p.vd.Asset, &p.vd.Payload.Authorization)
		return ok
	}
	return upto.PaysPermit(logs, p.vd.Asset, &p.vd.Payload.Authorization, p.vd.Amount)
}

func (p uptoPayment) used(ctx context.Context, c exact.Chain) (bool, error) {
	a := &p.vd.Payload.Authorization
	return upto.NonceUsed(ctx, c, a.From, a.Nonce)
}

func (p uptoPayment) findUse(ctx context.Context, c ChainReader, from uint64) (*exact.UseEvent, error) {
	a := &p.vd.Payload.Authorization
	ev, err := upto.FindUse(ctx, c, p.vd.Asset, a.From, a.Witness.To, a.Nonce, from)
	if err != nil || ev == nil {
		return nil, err
	}
	// Permit2 has no cancellation of one nonce that a transfer would show:
	// invalidateUnorderedNonces leaves no transfer, so FindUse finds none.
	return &exact.UseEvent{TxHash: ev.TxHash, Block: ev.Block}, nil
}

// expiry: the settle calldata carries the permit's deadline, which Permit2
// enforces (block.timestamp <= deadline): no block at or after deadline + 1
// takes it.
func (p uptoPayment) expiry(tx *types.Transaction) (*big.Int, bool) {
	if tx.To() == nil || *tx.To() != upto.ProxyAddress {
		return nil, false
	}
	a, err := upto.DecodeSettle(tx.Data())
	mine := &p.vd.Payload.Authorization
	if err != nil || a.From != mine.From || a.Nonce.Cmp(mine.Nonce) != 0 {
		return nil, false
	}
	return new(big.Int).Add(a.Deadline, big.NewInt(1)), true
}

func (uptoPayment) usedReason() x402.Reason { return x402.ReasonPermit2InvalidNonce }

func (p uptoPayment) settledAmount() string { return p.vd.Amount.String() }

func (p uptoPayment) asRecorded(rec store.Settlement) payment {
	amount, err := exact.ParseUint256(rec.Amount)
	if err != nil || amount.Cmp(p.vd.Amount) == 0 {
		return p
	}
	vd := *p.vd
	vd.Amount = amount
	return uptoPayment{&vd}
}
