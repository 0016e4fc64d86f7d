// Package paywall is the resource server's payment lifecycle for x402 `exact`
// payments, with no HTTP in it: what the gateway does with a PAYMENT-SIGNATURE
// from the moment it arrives until the payment is settled, refused, released
// or recovered (docs/DESIGN.md, "The life of a payment").
//
// Admit runs the checks of DESIGN.md D0 before the upstream (decode, match,
// freshness, recovery lookup, verify, claim) and returns one typed admission:
//
//   - *Fresh: this request holds the claim and calls the upstream; its
//     methods settle, stage, promote, release.
//   - *Replay: a recorded answer this payment already bought (D14, D15); it is
//     served as recorded and the upstream is not called.
//   - *Staged: a pending settlement with the answer staged (D3); Resolve
//     settles it again and returns the answer once paid.
//   - *Orphan: this request's answer, staged by another request that holds
//     the claim, alive or dead; Resume finds out from the chain.
//
// AdmitTopUp is the same first steps for a credit top-up, and returns a
// *TopUp. A refusal is a *RefusalError naming its Reason; the gateway turns it into
// an HTTP status and an OpenAI error body in one table.
//
// Steps that must finish even when the client has left (recording a
// settlement, releasing or staging a claim) run on a context detached from the
// request's cancellation and bounded by their own timeout: writeTimeout for a
// store write, the settle timeout plus writeTimeout for a settlement.
package paywall

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"math/big"
	"time"

	"github.com/ethereum/go-ethereum/common"

	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/x402"
	"github.com/llm4agents/llm4agents/x402/evm/exact"
	"github.com/llm4agents/llm4agents/x402/evm/upto"
)

// Facilitator verifies and settles payments: ours in process, or a remote one
// over HTTP. It may also implement confirmer and authConfirmer (settle.go).
type Facilitator interface {
	Verify(ctx context.Context, p *x402.PaymentPayload, req x402.PaymentRequirements) (*x402.VerifyResponse, error)
	Settle(ctx context.Context, p *x402.PaymentPayload, req x402.PaymentRequirements) (*x402.SettleResponse, error)
}

// Metrics counts what the paywall does. Payment counts one outcome of a paid
// request (the label values are documented with the gateway's metric).
type Metrics interface {
	Payment(outcome string)
	SettleLatency(d time.Duration)
}

// Config is what a Paywall needs besides its collaborators. Every field is
// required; the gateway fills in the defaults.
type Config struct {
	Network string // CAIP-2, eip155:<id>
	// Asset and PayTo are as offered in every 402 (the configured spelling);
	// AssetAddress and PayToAddress are the same, parsed.
	Asset        string
	PayTo        string
	AssetAddress common.Address
	PayToAddress common.Address
	// Extra is the exact offer's extra: the token's EIP-712 domain.
	Extra json.RawMessage
	// UptoExtra is the upto offer's extra, naming the facilitator that
	// settles it (facilitatorAddress); nil offers exact alone.
	UptoExtra         json.RawMessage
	MaxTimeoutSeconds int64
	// UpstreamTimeout and SettleTimeout bound the work of a fresh payment:
	// its authorization must outlive both (D6).
	UpstreamTimeout time.Duration
	SettleTimeout   time.Duration
	// ClaimLease bounds how long a crashed request's claim blocks its
	// authorization.
	ClaimLease time.Duration
	Owner      string // this replica's name in claims and records
	// RecoveryTTL is how long a paid answer may be replayed to its buyer;
	// RecoveryReplays how many times.
	RecoveryTTL     time.Duration
	RecoveryReplays int
}

// writeTimeout bounds a store write that must finish even when the client
// has left: a claim's outcome, a staged answer, a release.
const writeTimeout = store.DefaultTimeout

// Paywall runs the payment lifecycle for one network and asset.
type Paywall struct {
	cfg      Config
	fac      Facilitator
	payments store.Payments
	// recoveries holds the recovery records; nil when the store keeps none,
	// and then no payment-identifier is offered and nothing is replayed.
	recoveries store.Recoveries
	metrics    Metrics
	log        *slog.Logger
	now        func() time.Time
	// set is the Set p is part of, nil when it is alone.
	set *Set
}

// New returns a Paywall. payments holds the claims, and the recovery records
// when it implements store.Recoveries.
func New(cfg Config, fac Facilitator, payments store.Payments, m Metrics, log *slog.Logger) *Paywall {
	p := &Paywall{cfg: cfg, fac: fac, payments: payments, metrics: m, log: log, now: time.Now}
	p.recoveries, _ = payments.(store.Recoveries)
	return p
}

// SetNow replaces the clock (tests).
func (p *Paywall) SetNow(now func() time.Time) { p.now = now }

// Recovers reports whether paid answers are recorded for replay.
func (p *Paywall) Recovers() bool { return p.recoveries != nil }

// Offer is the `exact` offer of amount on this paywall's network and asset.
func (p *Paywall) Offer(amount *big.Int) x402.PaymentRequirements {
	return x402.PaymentRequirements{
		Scheme: exact.Scheme, Network: p.cfg.Network, Amount: amount.String(), Asset: p.cfg.Asset,
		PayTo: p.cfg.PayTo, MaxTimeoutSeconds: p.cfg.MaxTimeoutSeconds, Extra: p.cfg.Extra,
	}
}

// UptoOffer is the `upto` offer of at most max beside Offer's exact one, or
// nil when this paywall offers exact alone.
func (p *Paywall) UptoOffer(max *big.Int) *x402.PaymentRequirements {
	if p.cfg.UptoExtra == nil {
		return nil
	}
	return &x402.PaymentRequirements{
		Scheme: upto.Scheme, Network: p.cfg.Network, Amount: max.String(), Asset: p.cfg.Asset,
		PayTo: p.cfg.PayTo, MaxTimeoutSeconds: p.cfg.MaxTimeoutSeconds, Extra: p.cfg.UptoExtra,
	}
}

// Quote is the price of one request and the offer that asks for it.
type Quote struct {
	Amount *big.Int
	// Offer is the quote's exact offer, of Amount.
	Offer x402.PaymentRequirements
	// Upto is the upto offer beside it, for at most Amount; nil when the
	// quote offers exact alone.
	Upto     *x402.PaymentRequirements
	Resource *x402.ResourceInfo
	// Accepts, when set (Set.Offer), is every offer of the 402 in its
	// order, Offer and Upto among them; nil lists Offer and Upto alone.
	Accepts []x402.PaymentRequirements
	// withUpto says the quote offers upto where a network does (Set.Offer).
	withUpto bool
	// PaymentIDRequired makes the payment-identifier extension required.
	PaymentIDRequired bool
	// What names the purchase in refusals: "request" or "top-up".
	What string
	// Op is the operation id of the answer, "" without a recovery record; the
	// paywall sets it when it begins or finds one.
	Op string
}

// accepts are the quote's offers, as a 402 lists them: exact first, as the
// official clients take the first offer they can pay.
func (q *Quote) accepts() []x402.PaymentRequirements {
	if q.Accepts != nil {
		return q.Accepts
	}
	if q.Upto == nil {
		return []x402.PaymentRequirements{q.Offer}
	}
	return []x402.PaymentRequirements{q.Offer, *q.Upto}
}

// offer is the quote's offer of scheme; exact's when it offers none of it,
// which the match then refuses.
func (q *Quote) offer(scheme string) x402.PaymentRequirements {
	if q.Upto != nil && scheme == q.Upto.Scheme {
		return *q.Upto
	}
	return q.Offer
}

// errUnknownScheme refuses a payload of a scheme the paywall cannot read.
var errUnknownScheme = errors.New("the payment's scheme is not offered here")

// What a quote buys, as refusals name it.
const (
	WhatRequest = "request"
	WhatTopUp   = "top-up"
)

// Request is what a paid request's fingerprint (D14) is computed from: a
// recorded answer is only ever replayed to the same request.
type Request struct {
	Method, Path, Model string
	Body                []byte
}

// Presented is the payment a request carries: the PAYMENT-SIGNATURE header's
// value, and whether it also (or instead) carries x402 v1's X-PAYMENT.
type Presented struct {
	Signature string
	LegacyV1  bool
}

// detached returns a context that outlives ctx's cancellation (the client
// leaving) but not d: for the writes that must land whatever the client does.
func detached(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), d)
}

// settleBudget is how long a settlement and the writes after it may take.
func (p *Paywall) settleBudget() time.Duration { return p.cfg.SettleTimeout + writeTimeout }

// SettleBudget is how long a caller must let a settlement run, with the reads
// and writes after it: the settle timeout plus one store write.
func (p *Paywall) SettleBudget() time.Duration { return p.settleBudget() }

// paid returns the answer of a payment the chain shows made by tx.
func (p *Paywall) paid(payer, tx string) *x402.SettleResponse {
	return &x402.SettleResponse{Success: true, Transaction: tx, Network: p.cfg.Network, Payer: payer}
}

func bigUnix(t time.Time) *big.Int { return big.NewInt(t.Unix()) }
