package paywall

import (
	"context"
	"errors"

	"github.com/llm4agents/llm4agents/internal/store"
)

// Orphaned payments: a claim whose holder died (kill -9, a lost replica)
// after its broadcast, or is still recording its settlement, may leave an
// authorization spent on chain with nothing recorded as paid. Any of them
// answered with a new 402 would make the buyer pay twice; answered with a new
// upstream call and a settlement, the settlement fails and the answer is
// lost. Neither happens:
//
// A retry that finds such a claim asks the chain (the facilitator's Confirm,
// DESIGN.md D1, D5) whether the authorization paid the offer:
//
//   - paid, with the answer staged: the record is promoted by its operation
//     id with the chain's transaction (only after settlement, only with a
//     settlement reference, fingerprint checked) and replayed; the claim is
//     recorded settled with that transaction.
//   - not paid, with the answer staged: a live holder is still settling
//     (operation in flight, with Retry-After); a dead one's claim is taken
//     over once its lease ended, and the staged answer is settled now with
//     the same payload, as a pending one is (staged.go): the facilitator
//     resumes its own record and never broadcasts twice (D5).
//   - paid, nothing staged (a stream dies past its broadcast before its end):
//     once the dead holder's lease ended, the claim is taken over and the
//     upstream called again, the answer served as paid by the transaction the
//     chain shows and never settled again (a prepaid Fresh). The buyer pays
//     once and gets one answer; the dead request's upstream call is the
//     operator's loss.
//   - not paid, nothing staged (a crash before the upstream answered): the
//     normal path, operation in flight until the lease ends, then a fresh
//     purchase with the same authorization, settled once.

// stagedHere reports whether the recovery record the lookup found holds this
// request's answer (the fingerprint was checked by the lookup), staged under
// this very authorization.
func (pd *payment) stagedHere() bool {
	r := pd.found
	return r != nil && r.State == store.RecoveryStaged && r.PaymentKey == pd.key && r.Response != nil
}

// Resume answers a request whose answer another request staged under the
// same authorization and whose claim that request still holds, alive or
// dead. It returns the answer once paid, or the refusal to send. The work
// outlives ctx's cancellation: it may settle.
func (o *Orphan) Resume(ctx context.Context) (*Answer, error) {
	p := o.pw
	ctx, cancel := detached(ctx, p.settleBudget())
	defer cancel()
	rec := o.found
	if err := p.proveControl(ctx, o.payment, rec); err != nil {
		p.metrics.Payment("unproven")
		return nil, err
	}
	if tx, ok := o.confirm(ctx); ok {
		return o.replay(ctx, tx)
	}
	claim, held, err := p.claim(ctx, o.payment)
	if err != nil {
		return nil, err
	}
	if !held {
		if claim.State == store.PaymentHeld {
			// Its holder is alive, settling: it answers its own client, and
			// a retry once it recorded the outcome gets the replay.
			p.metrics.Payment("in_flight")
			return nil, operationInFlight()
		}
		p.metrics.Payment("replayed")
		return nil, inUse(claim) // it moved on while we looked
	}
	// The holder died before the chain showed its payment: settle its staged
	// answer now, under the claim taken over.
	o.claim, o.rec = claim, rec
	o.q.Op = rec.OperationID
	f := &Fresh{o.payment}
	answer := &store.StagedResponse{Status: rec.Response.Status, ContentType: rec.Response.ContentType, Body: rec.Response.Body}
	sr, out := f.Settle(ctx)
	switch out {
	case Paid:
		f.Promote(ctx, sr)
		return &Answer{Settlement: sr, Response: staged(answer), Replay: "staged", Op: rec.OperationID, Upto: f.Upto(), PaymentKey: f.key}, nil
	case Pending, Unknown:
		f.Hold(ctx, *answer) // a retry resolves it as D3 says
		return nil, Unsettled(sr, out)
	default:
		return nil, Unsettled(sr, out) // Settle released the claim and abandoned the record
	}
}

// replay answers with the staged answer of a payment the chain shows made by
// transaction tx: the claim is recorded settled, the record promoted and
// replayed.
func (o *Orphan) replay(ctx context.Context, tx string) (*Answer, error) {
	p := o.pw
	// The claim's fence is the one the lookup read: the write is a fact from
	// the chain, the one its holder, if alive, writes too (the same values
	// again are a no-op); a holder that moved on in between fences it out.
	if err := p.claims().UpdatePayment(ctx, o.key, o.claim.Fence, store.PaymentSettled, tx); err != nil && !errors.Is(err, store.ErrFenced) {
		p.log.Warn("record an orphaned payment settled", "key", o.key, "err", err)
	}
	rec := o.found
	if _, err := p.promote(ctx, rec, o.fp(), tx); err != nil {
		return nil, p.recoveryFailed(err)
	}
	r, took, err := p.recoveries.TakeReplay(ctx, rec.Key, rec.OperationID)
	switch {
	case err != nil:
		return nil, p.recoveryFailed(err)
	case !took:
		// Promoted just now with a full budget, spent by concurrent copies
		// of this payment (each of which got the answer): the same refusal
		// as any copy past the budget, never a store failure.
		p.metrics.Payment("replayed")
		return nil, replayBudgetSpent()
	}
	replay, err := p.replayOf(&r)
	if err != nil {
		return nil, err
	}
	return replay.answer, nil
}

// adoptPaid handles an authorization that verify found spent with nothing
// staged for this request. When the chain shows it paid the offer and no
// live request holds its claim (its holder's lease ended, or nobody here
// claimed it: a claim a store lost, a transfer the payer sent themselves),
// this request takes the claim and pd becomes prepaid: the upstream is
// called and the answer served as paid, never settled again. A live holder
// is refused as in flight. When the chain does not show it paid, it returns
// false, and Admit refuses the payment without an offer (refuse).
func (p *Paywall) adoptPaid(ctx context.Context, pd *payment) (bool, error) {
	tx, ok := pd.confirm(ctx)
	if !ok {
		return false, nil
	}
	if r := pd.found; r != nil && r.State == store.RecoveryInFlight && r.LeaseUntil.After(p.now()) {
		// The dead request's record outlives its claim by a moment: taking
		// the claim over now would only lock the buyer out for another lease.
		p.metrics.Payment("in_flight")
		return false, operationInFlight()
	}
	claim, held, err := p.claim(ctx, pd)
	if err != nil {
		return false, err
	}
	if !held {
		if claim.State == store.PaymentHeld {
			p.metrics.Payment("in_flight")
			return false, operationInFlight()
		}
		p.metrics.Payment("replayed")
		return false, inUse(claim)
	}
	pd.claim = claim
	if p.recoveries != nil && !claimSwitchedOff() {
		// On failure the claim stays held under this request's lease: the
		// authorization is spent, so it must never be released; a retry
		// takes it over again once the lease ends.
		if err := p.openRecovery(ctx, pd); err != nil {
			return false, err
		}
	}
	pd.prepaid = p.paid(pd.payer, tx)
	return true, nil
}
