package paywall

import (
	"context"

	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/x402"
	"github.com/llm4agents/llm4agents/x402/evm/upto"
)

// Staged answers (DESIGN.md D3, D14). When a settlement answers
// settlement_pending, the answer the buyer paid for is staged with the claim
// (Fresh.Hold): the upstream's JSON body, or the whole SSE text of a stream,
// as the upstream sent it. A later request that re-presents the same
// authorization (same claim key, D4) is looked up before verify (D0) and
// settles again with the same payload: the facilitator resolves the broadcast
// settlement from the chain and gives its one success:true to the first later
// call that observes it (D5). Once paid, the staged answer is served as a
// live one would be, marked as staged; the upstream is never called again and
// nothing is charged again.

// Resolve settles the pending payment again with the same payload and offer,
// and returns the staged answer once it is paid. Still pending: refused as
// pending, with Retry-After; failed: the 402 refusal with the settlement's
// answer, the claim left as it is (the reconciler resolves it from the
// chain). The upstream is never called. The work outlives ctx's
// cancellation, as a settlement does.
func (s *Staged) Resolve(ctx context.Context) (*Answer, error) {
	p := s.pw
	ctx, cancel := detached(ctx, p.settleBudget())
	defer cancel()
	start := p.now()
	sr, err := s.settleCall(ctx)
	p.metrics.SettleLatency(p.now().Sub(start))
	switch {
	case err != nil:
		// No verdict (D29): the chain may still tell; otherwise the claim
		// stays pending for the next retry.
		p.log.Warn("settle a pending payment again", "key", s.key, "err", err)
		tx, yes := s.confirm(ctx)
		if !yes {
			return nil, inUse(s.claim)
		}
		sr = p.paid(s.payer, tx)
	case sr.Success && sr.Transaction == "":
		// Never recorded settled, nor promoted, without the transaction.
		tx, yes := s.confirm(ctx)
		if !yes {
			return nil, inUse(s.claim)
		}
		sr = p.paid(s.payer, tx)
	case sr.Success:
	case sr.ErrorReason == x402.ReasonSettlementPending:
		if sr.Transaction != "" && sr.Transaction != s.claim.TxHash {
			s.record(ctx, store.PaymentPending, sr.Transaction) // a replacement transaction
		}
		return nil, inUse(s.claim)
	case spent(sr.ErrorReason):
		tx, yes, known := s.confirmKnown(ctx)
		switch {
		case yes:
			sr = p.paid(s.payer, tx)
		case sr.Transaction == "" || !known:
			// Another call holds the settlement (alive, or dead until its
			// lease ends), or the chain cannot be read now: not known yet.
			// The claim stays pending.
			return nil, inUse(s.claim)
		default:
			// Spent by a transaction that did not pay us: the answer stays
			// withheld, the claim pending, never settled.
			return nil, settleRefusal(sr)
		}
	default:
		// A facilitator that keeps no record of its earlier broadcast (the
		// official one, or ours on another store) may answer a failed
		// re-broadcast of an authorization its first one spent: the chain
		// decides before the refusal.
		tx, yes := s.confirm(ctx)
		if !yes {
			p.metrics.Payment("failed")
			return nil, settleRefusal(sr)
		}
		sr = p.paid(s.payer, tx)
	}
	s.record(ctx, store.PaymentSettled, sr.Transaction)
	p.metrics.Payment("recovered")
	// The after-settle step of the pending request's recovery record.
	op := s.promoteStaged(ctx, sr)
	return &Answer{Settlement: sr, Response: staged(s.claim.Staged), Replay: "staged", Op: op, Upto: s.offer.Scheme == upto.Scheme, PaymentKey: s.key}, nil
}
