package paywall

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/x402"
	"github.com/llm4agents/llm4agents/x402/evm/exact"
)

// TopUpMarker is the content type of the marker staged with a top-up's
// claim before anything is settled: it says the payment buys credit, so that
// only a top-up ever credits it and nothing else adopts it.
const TopUpMarker = "application/vnd.llm4agents.topup+json"

// IsTopUp reports whether claim c was taken by a top-up.
func IsTopUp(c store.PaymentClaim) bool { return isTopUpClaim(c) }

func isTopUpClaim(c store.PaymentClaim) bool {
	return c.Staged != nil && c.Staged.ContentType == TopUpMarker
}

// TopUp is a top-up's payment as admitted: its claim is held by this request
// (Settle it), pending (Resolve it) or settled (credit it), all of them
// top-up claims.
type TopUp struct{ *payment }

// State is the state of the top-up's claim.
func (t *TopUp) State() store.PaymentState { return t.claim.State }

// Transaction is the settlement of a settled top-up's claim.
func (t *TopUp) Transaction() string { return t.claim.TxHash }

// Authorization is the authorization that pays the top-up.
// A top-up's quote offers exact alone (its amount is the credit bought), so
// read never gives it another kind.
func (t *TopUp) Authorization() *exact.Authorization { return &t.auth.(exactAuth).p.Authorization }

// Payer is the paying address as the settlement names it.
func (t *TopUp) Payer() string { return t.payer }

// Settle settles the top-up this request holds the claim of, as Fresh.Settle
// does.
func (t *TopUp) Settle(ctx context.Context) (*x402.SettleResponse, Outcome) {
	return (&Fresh{t.payment}).Settle(ctx)
}

// AdmitTopUp runs the payment steps of D0 for a top-up: decode, match (D7),
// freshness (D6), the lookup of an existing claim, verify, claim, mark. req
// names the route, for the marker's fingerprint.
func (p *Paywall) AdmitTopUp(ctx context.Context, q *Quote, in Presented, req Request) (*TopUp, error) {
	payload, offer, auth, err := p.read(q, in)
	if mm, ok := errors.AsType[*mismatch](err); ok {
		err = mm.offer // top-ups keep their own answer to a mismatch (TestTopUpMismatch)
	}
	if err != nil {
		return nil, err
	}
	ea, ok := auth.(exactAuth)
	if !ok {
		p.metrics.Payment("mismatch")
		return nil, p.challenge(q, Mismatch, textNoMatch, fmt.Errorf("a top-up is paid with %q only", exact.Scheme))
	}
	a := &ea.p.Authorization
	if a.Value.Cmp(q.Amount) != 0 || !strings.EqualFold(a.To.Hex(), p.cfg.PayTo) {
		// The facilitator checks these too; the credit depends on them, so
		// they are checked here as well.
		p.metrics.Payment("mismatch")
		return nil, p.challenge(q, Mismatch, textNoMatch,
			fmt.Errorf("authorization of %s to %s for an offer of %s to %s", a.Value, a.To.Hex(), q.Amount, p.cfg.PayTo))
	}
	pd := &payment{pw: p, q: q, payload: payload, offer: offer, auth: auth,
		key: auth.claimKey(p.cfg.Network, p.cfg.AssetAddress), payer: a.From.Hex(), request: req}
	if verr := p.fresh(auth); verr != nil {
		p.metrics.Payment("stale")
		return nil, p.refuse(ctx, pd, false, p.verifyChallenge(q, verr.Reason, verr))
	}
	c, err := p.payments.Payment(ctx, pd.key)
	switch {
	case errors.Is(err, store.ErrNotFound):
	case err != nil:
		return nil, &RefusalError{Reason: StoreUnavailable, Err: err, Message: "the payment could not be looked up; nothing was charged"}
	case !isTopUpClaim(c):
		// Claimed for something else (a chat completion): never credited.
		p.metrics.Payment("replayed")
		return nil, inUse(c)
	case c.Amount != q.Amount.String():
		return nil, p.challenge(q, Mismatch, textNoMatch, fmt.Errorf("claim of %s", c.Amount))
	case c.State == store.PaymentSettled || c.State == store.PaymentPending:
		pd.claim = c
		return &TopUp{pd}, nil
	default:
		pd.claim = c // held by a top-up request, alive or dead: claimTopUp judges
	}
	return p.claimTopUp(ctx, pd)
}

// claimTopUp verifies a top-up's payment and claims it for this request (a
// new claim, or a dead request's held one whose lease ended), then marks the
// claim as a top-up's before anything is settled. pd.claim is the top-up
// claim the lookup found held by a request, if any.
func (p *Paywall) claimTopUp(ctx context.Context, pd *payment) (*TopUp, error) {
	q := pd.q
	vr, err := p.fac.Verify(ctx, pd.payload, pd.offer)
	if err != nil {
		return nil, facilitatorDown(err)
	}
	switch {
	case !vr.IsValid && !spent(vr.InvalidReason):
		p.metrics.Payment("invalid")
		return nil, p.refuse(ctx, pd, false, p.verifyChallenge(q, vr.InvalidReason, errors.New(vr.InvalidMessage)))
	case vr.IsValid:
		// D6 for what is still to be settled; a spent one (a dead
		// request's, adopted below) settles nothing more.
		if verr := p.lasts(pd.auth); verr != nil {
			p.metrics.Payment("stale")
			return nil, p.refuse(ctx, pd, false, p.verifyChallenge(q, verr.Reason, verr))
		}
	case pd.claim.Key != "":
		// Spent on chain while a top-up request holds the claim: it
		// broadcast, and is recording its settlement or died doing so. The
		// chain answers now, as it does for a chat's staged answer
		// (orphan.go), rather than after the holder's lease.
		if tx, ok := pd.confirm(ctx); ok {
			return p.settledByChain(ctx, pd, tx), nil
		}
	}
	claim, held, err := p.claim(ctx, pd)
	if err != nil {
		return nil, err
	}
	if !held {
		p.metrics.Payment("replayed")
		return nil, inUse(claim)
	}
	pd.claim = claim
	if !vr.IsValid {
		// Spent on chain: credited only if this was a top-up's claim whose
		// request died after its broadcast (held with the marker) and the
		// chain shows the payment made to us; never a claim of our own
		// making for an authorization spent elsewhere.
		return p.adoptTopUp(ctx, pd, claim)
	}
	if err := p.markTopUp(ctx, pd); err != nil {
		pd.release(ctx)
		return nil, err
	}
	return &TopUp{pd}, nil
}

// adoptTopUp handles a held claim this request took over whose
// authorization verify found spent.
func (p *Paywall) adoptTopUp(ctx context.Context, pd *payment, claim store.PaymentClaim) (*TopUp, error) {
	if !isTopUpClaim(claim) {
		// Spent, and never by a top-up of ours: no credit, and no offer
		// either (D29), since the chain has used it.
		pd.release(ctx)
		p.metrics.Payment("replayed")
		return nil, alreadyUsed()
	}
	tx, ok := pd.confirm(ctx)
	if !ok {
		// A dead request's broadcast not seen paid (yet): pending, resolved
		// by the next presentation, never released while it may be spent.
		pd.record(ctx, store.PaymentPending, claim.TxHash)
		return nil, settlementUnresolved()
	}
	pd.record(ctx, store.PaymentSettled, tx)
	pd.claim.State, pd.claim.TxHash = store.PaymentSettled, tx
	p.metrics.Payment("recovered")
	return &TopUp{pd}, nil
}

// markTopUp stages the top-up marker with the claim pd holds.
func (p *Paywall) markTopUp(ctx context.Context, pd *payment) error {
	body := []byte(`{"amount":"` + pd.auth.value().String() + `"}`)
	m := store.StagedResponse{Status: http.StatusOK, ContentType: TopUpMarker, Body: body,
		Fingerprint: Fingerprint(pd.request.Method, pd.request.Path, "", body)}
	if err := p.claims().StagePayment(ctx, pd.key, pd.claim.Fence, m); err != nil {
		p.metrics.Payment("store_down")
		return &RefusalError{Reason: StoreUnavailable, Err: err, Message: "the payment could not be recorded; nothing was charged"}
	}
	pd.claim.Staged = &m
	return nil
}

// settledByChain records a top-up claim held by another request settled by
// tx, which the chain shows paid this authorization, and returns it as
// settled, to be credited. The write carries the fence the lookup read: it
// is a fact from the chain, the one the holder, if alive, writes too; a
// holder that moved on in between fences it out, harmlessly, as the credit
// is keyed by the settlement and lands once whoever sees it.
func (p *Paywall) settledByChain(ctx context.Context, pd *payment, tx string) *TopUp {
	if err := p.claims().UpdatePayment(ctx, pd.key, pd.claim.Fence, store.PaymentSettled, tx); err != nil && !errors.Is(err, store.ErrFenced) {
		p.log.Warn("record a top-up settled from the chain", "key", pd.key, "err", err)
	}
	pd.claim.State, pd.claim.TxHash = store.PaymentSettled, tx
	p.metrics.Payment("recovered")
	return &TopUp{pd}
}

// Resolve settles a pending top-up's authorization again with the same
// payload and offer (the facilitator resumes its record and never
// broadcasts twice, D5) and returns the transaction once paid. Still pending
// or unknown: refused as pending, with Retry-After; failed: the 402 refusal
// with the settlement's answer, the claim left pending for the chain to tell.
func (t *TopUp) Resolve(ctx context.Context) (string, error) {
	p := t.pw
	sr, err := t.settleCall(ctx)
	if err != nil {
		// No verdict (D29): the chain may tell; else the claim stays pending.
		p.log.Warn("settle a pending top-up again", "key", t.key, "err", err)
		sr = &x402.SettleResponse{Success: false, ErrorReason: x402.ReasonUnexpectedSettleError}
	}
	tx := sr.Transaction
	switch {
	case sr.Success && tx != "":
	case sr.ErrorReason == x402.ReasonSettlementPending:
		if tx != "" && tx != t.claim.TxHash {
			t.record(ctx, store.PaymentPending, tx) // a replacement transaction
		}
		return "", inUse(t.claim)
	default:
		// A success without its transaction, no verdict, or a refusal: the
		// chain decides (a facilitator without a record of the first
		// broadcast refuses to settle what that broadcast spent).
		var paid bool
		if tx, paid = t.confirm(ctx); paid {
			break
		}
		if sr.Success || spent(sr.ErrorReason) || sr.ErrorReason == x402.ReasonUnexpectedSettleError {
			return "", inUse(t.claim)
		}
		p.metrics.Payment("failed")
		return "", settleRefusal(sr)
	}
	t.record(ctx, store.PaymentSettled, tx)
	p.metrics.Payment("recovered")
	return tx, nil
}
