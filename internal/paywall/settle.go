package paywall

import (
	"context"
	"fmt"
	"math/big"

	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/x402"
	"github.com/llm4agents/llm4agents/x402/evm/upto"
)

// confirmer is an optional facilitator extra: it tells from the chain whether an
// authorization was paid (D1, D5), for a settle answer that is ambiguous.
type confirmer interface {
	Confirm(ctx context.Context, p *x402.PaymentPayload, req x402.PaymentRequirements) (tx string, paid bool, err error)
}

// Outcome is how a settlement ended for the request that ran it.
type Outcome int

const (
	// Paid: paid on chain; the claim is settled with the transaction.
	Paid Outcome = iota
	// Pending: broadcast, not mined within the deadline (D3); the claim is
	// pending and the answer is to be staged with it (Hold).
	Pending
	// Unknown: the facilitator answered nonce_already_used (another call
	// holds the settlement, or a transaction we cannot see yet), or gave no
	// verdict, and the chain does not show this authorization paid. The claim
	// stays pending with whatever transaction is known, never settled without
	// one; the answer is to be staged (Hold) and the buyer told to retry.
	Unknown
	// Failed: not paid; the claim was released and the answer is withheld.
	Failed
)

// Settle settles the payment after the upstream answered, within the settle
// deadline, and records the outcome on the claim. A prepaid payment (a dead
// request settled it) is only recorded. The work outlives ctx's
// cancellation: once a settlement may be broadcast, its outcome is written
// whether or not the client stays.
//
// For any outcome but Paid, Unsettled is the refusal to answer with.
func (f *Fresh) Settle(ctx context.Context) (*x402.SettleResponse, Outcome) {
	p := f.pw
	ctx, cancel := detached(ctx, p.settleBudget())
	defer cancel()
	if f.prepaid != nil {
		f.record(ctx, store.PaymentSettled, f.prepaid.Transaction)
		p.metrics.Payment("recovered")
		return f.prepaid, Paid
	}
	start := p.now()
	sr, err := f.settleCall(ctx)
	p.metrics.SettleLatency(p.now().Sub(start))
	if err != nil {
		p.log.Error("settle", "key", f.key, "err", err)
		// An error is no verdict: another replica may have settled this very
		// authorization meanwhile. The claim holder asks the chain (D1).
		if tx, ok := f.confirm(ctx); ok {
			f.record(ctx, store.PaymentSettled, tx)
			p.metrics.Payment("settled")
			return p.paid(f.payer, tx), Paid
		}
		// Not seen paid (yet): a timeout or a lost answer may hide a
		// broadcast that mines later, above all behind a remote
		// facilitator. The claim stays pending, the answer is staged, and a
		// retry with the same payment settles again (a facilitator's settle
		// of one authorization resumes its record, D5) or reads the chain:
		// never released, so the payment can never buy a second answer, nor
		// be refused as unpaid once it mines (D29).
		f.record(ctx, store.PaymentPending, f.claim.TxHash)
		p.metrics.Payment("unresolved")
		return &x402.SettleResponse{Success: false, ErrorReason: x402.ReasonUnexpectedSettleError, Network: p.cfg.Network, Payer: f.payer}, Unknown
	}
	switch {
	case sr.Success && sr.Transaction == "" && f.charge != nil && f.charge.Sign() == 0:
		// An upto charge of nothing: nothing was sent, nothing can be
		// checked on chain, and the permit expires unused. The claim is
		// settled without a transaction (never promoted for replay: D14).
		f.recordAs(ctx, store.PaymentSettled, "", true)
		p.metrics.Payment("settled")
		return sr, Paid
	case sr.Success:
		tx := sr.Transaction
		if tx == "" {
			// A success that names no transaction: the answer is served (the
			// facilitator says paid) but, without a settlement reference,
			// never promoted (D14); the claim takes the chain's transaction,
			// or stays pending without one.
			tx, _ = f.confirm(ctx)
		}
		f.record(ctx, store.PaymentSettled, tx)
		p.metrics.Payment("settled")
		return sr, Paid
	case sr.ErrorReason == x402.ReasonSettlementPending:
		f.record(ctx, store.PaymentPending, sr.Transaction)
		p.metrics.Payment("pending")
		return sr, Pending
	case spent(sr.ErrorReason):
		// Ambiguous: resolved from the chain by the claim holder (D1).
		if tx, ok := f.confirm(ctx); ok {
			f.record(ctx, store.PaymentSettled, tx)
			p.metrics.Payment("settled")
			return p.paid(f.payer, tx), Paid
		}
		// Spent, or about to be, but not seen paid to us: pending, so that
		// neither a retry nor a takeover reaches the upstream again, and
		// never settled without the transaction that paid.
		tx := sr.Transaction
		if tx == "" {
			tx = f.claim.TxHash
		}
		f.record(ctx, store.PaymentPending, tx)
		p.metrics.Payment("unresolved")
		return sr, Unknown
	case sr.Transaction != "":
		// A failure that names a transaction: something was broadcast, and
		// may still mine (some facilitators answer a receipt timeout so).
		// The chain decides; until it does, the claim stays pending with
		// that transaction, never released for a second use.
		if tx, ok := f.confirm(ctx); ok {
			f.record(ctx, store.PaymentSettled, tx)
			p.metrics.Payment("settled")
			return p.paid(f.payer, tx), Paid
		}
		f.record(ctx, store.PaymentPending, sr.Transaction)
		p.metrics.Payment("unresolved")
		return sr, Unknown
	case f.delivered:
		// Not paid, but the answer is out (D27's deliver_then_settle): the
		// seller's loss. The claim is kept, pending without a transaction,
		// so that the same payment never buys the answer a second time.
		f.record(ctx, store.PaymentPending, "")
		p.metrics.Payment("delivered_unpaid")
		p.log.Error("an upto stream was delivered and its settlement failed: the seller's loss",
			"key", f.key, "charge", f.charge, "reason", sr.ErrorReason)
		return sr, Failed
	default:
		// Not spent on chain (insufficient funds, a node error), nothing
		// broadcast: the authorization may be presented again once fixed.
		f.Release(ctx)
		p.metrics.Payment("failed")
		return sr, Failed
	}
}

// Upto reports whether the payment is an upto permit, settled for the
// charge Charge sets rather than for the quote.
func (f *Fresh) Upto() bool { return f.offer.Scheme == upto.Scheme }

// Charge sets what an upto payment settles for (D27), at most its maximum:
// a larger charge is capped, since the facilitator would refuse it and the
// answer would be withheld. It does nothing to an exact payment, whose
// amount is the authorization's.
func (f *Fresh) Charge(amount *big.Int) {
	if !f.Upto() {
		return
	}
	c := new(big.Int).Set(amount)
	if max := f.auth.value(); c.Cmp(max) > 0 {
		f.pw.log.Error("an upto charge above its maximum was capped", "key", f.key, "charge", c, "max", max)
		c.Set(max)
	}
	if c.Sign() < 0 {
		c.SetInt64(0)
	}
	f.charge = c
}

// SettleDelivered is Settle for an answer already delivered (an upto stream,
// D27): on Failed the claim is kept rather than released, since the payment
// must not buy the answer again, and the loss is counted.
func (f *Fresh) SettleDelivered(ctx context.Context) (*x402.SettleResponse, Outcome) {
	f.delivered = true
	return f.Settle(ctx)
}

// Unsettled is the refusal of a settlement that did not pay (now): a 409
// with Retry-After for one that is unresolved, the 402 refusal with
// PAYMENT-RESPONSE otherwise (D3, D10).
func Unsettled(sr *x402.SettleResponse, out Outcome) error {
	if out == Unknown {
		return settlementUnresolved()
	}
	return settleRefusal(sr)
}

// Release gives the authorization back after an upstream failure: nothing was
// settled, so the buyer may present it again. It drops the recovery record.
func (f *Fresh) Release(ctx context.Context) { f.release(ctx) }

// release is Release for any payment this request holds the claim of.
func (pd *payment) release(ctx context.Context) {
	p := pd.pw
	ctx, cancel := detached(ctx, writeTimeout)
	defer cancel()
	pd.abandon(ctx)
	if pd.prepaid != nil {
		// Spent on chain already: the claim must keep the authorization from
		// ever reaching the upstream as a new payment. It stays held until its
		// lease ends, when a retry takes it over again (orphan.go).
		p.log.Warn("kept a paid claim after its upstream failed", "key", pd.key)
		return
	}
	if err := p.claims().ReleasePayment(ctx, pd.key, pd.claim.Fence); err != nil {
		p.log.Warn("release payment claim", "key", pd.key, "err", err)
	}
}

// Hold keeps the answer with the pending claim (D3): a retry with the same
// payment receives it once the settlement is seen paid. A failure is
// logged: the buyer still gets settlement_pending, and the claim stays
// pending for the reconciler.
func (f *Fresh) Hold(ctx context.Context, r store.StagedResponse) { f.hold(ctx, r) }

func (pd *payment) hold(ctx context.Context, r store.StagedResponse) {
	p := pd.pw
	r.Fingerprint = pd.fp()
	ctx, cancel := detached(ctx, writeTimeout)
	defer cancel()
	if err := p.claims().StagePayment(ctx, pd.key, pd.claim.Fence, r); err != nil {
		p.log.Error("stage response", "key", pd.key, "bytes", len(r.Body), "err", err)
	}
}

// confirm asks the chain, through the facilitator when it can tell, whether
// pd's authorization paid its offer (D1, D5), and returns the transaction.
func (pd *payment) confirm(ctx context.Context) (string, bool) {
	tx, paid, _ := pd.confirmKnown(ctx)
	return tx, paid
}

// confirmKnown is confirm that also says whether the chain answered at all:
// known is false when the facilitator cannot read the chain or the read
// failed, so that "not shown paid" is never taken for "not paid".
func (pd *payment) confirmKnown(ctx context.Context) (tx string, paid, known bool) {
	p := pd.pw
	c, ok := p.fac.(confirmer)
	if !ok {
		return "", false, false
	}
	tx, yes, err := c.Confirm(ctx, pd.payload, pd.offer)
	if err != nil {
		p.log.Warn("confirm a payment from the chain", "key", pd.key, "err", err)
		return "", false, false
	}
	return tx, yes && tx != "", true
}

// settleCall asks the facilitator to settle pd within the settle timeout,
// which ends before ctx does (every caller's ctx allows the settle budget):
// the reads and writes that follow the answer (the chain's confirmation, the
// claim's record, a promotion, a credit) keep the rest. An in-process
// facilitator ends by this deadline.
//
// An answer that is no verdict (unexpected_settle_error: the facilitator
// could not tell, as ours answers over HTTP when its own call fails) is
// returned as an error, as a timeout or a transport error is: none of them
// says the payment was not made (D29).
func (pd *payment) settleCall(ctx context.Context) (*x402.SettleResponse, error) {
	p := pd.pw
	ctx, cancel := context.WithTimeout(ctx, p.cfg.SettleTimeout)
	defer cancel()
	offer := pd.offer
	if pd.charge != nil {
		offer.Amount = pd.charge.String()
	}
	sr, err := p.fac.Settle(ctx, pd.payload, offer)
	if err == nil && !sr.Success && sr.ErrorReason == x402.ReasonUnexpectedSettleError {
		// The reason only: a third-party facilitator's message is not ours
		// to log.
		return nil, fmt.Errorf("facilitator gave no verdict: %s", sr.ErrorReason)
	}
	return sr, err
}

// record writes the claim's state. A claim is settled only with the
// transaction that paid: a settled claim without one could never be checked
// against the chain, so the request guarantees it and this refuses it.
func (pd *payment) record(ctx context.Context, state store.PaymentState, tx string) {
	pd.recordAs(ctx, state, tx, false)
}

// recordAs is record; free says the payment moved nothing (an upto charge
// of zero), the one settlement that has no transaction.
func (pd *payment) recordAs(ctx context.Context, state store.PaymentState, tx string, free bool) {
	p := pd.pw
	if state == store.PaymentSettled && tx == "" && !free {
		p.log.Error("refused to record a payment settled without a transaction; kept pending", "key", pd.key)
		state = store.PaymentPending
	}
	// The settle that came before may have used up ctx: the outcome must
	// still be written, or the claim would stay held and, once its lease
	// ended, the payment could be presented again for a second answer.
	ctx, cancel := detached(ctx, writeTimeout)
	defer cancel()
	if err := p.claims().UpdatePayment(ctx, pd.key, pd.claim.Fence, state, tx); err != nil {
		p.log.Error("record payment", "key", pd.key, "state", state, "err", err)
	}
}

// staged returns a staged answer as the response it renders as.
func staged(st *store.StagedResponse) *store.RecordedResponse {
	return &store.RecordedResponse{Status: st.Status, ContentType: st.ContentType, Body: st.Body}
}
