package paywall

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"time"

	"github.com/llm4agents/llm4agents/internal/crashpoint"
	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/x402"
	"github.com/llm4agents/llm4agents/x402/evm/exact"
	"github.com/llm4agents/llm4agents/x402/evm/upto"
)

// Admission is what Admit decided a paid request is: *Fresh, *Replay, *Staged
// or *Orphan. No other type implements it.
type Admission interface{ admission() }

// Fresh is a payment this request holds the claim of: the request calls the
// upstream, then Settle. On an upstream failure it calls Release. A Fresh
// may be prepaid: a dead request settled its authorization on chain before
// it answered anything, and this request took the claim over; Settle then
// only records the settlement the chain shows (orphan.go).
type Fresh struct{ *payment }

// Replay is a recorded answer this payment already bought, with proof of
// control (D15): it is served as recorded; the upstream is not called and
// nothing is settled.
type Replay struct{ answer *Answer }

// Staged is a payment whose settlement is pending with the request's answer
// staged (D3): Resolve settles it again and returns the answer once paid.
type Staged struct{ *payment }

// Orphan is a payment whose claim another request holds, alive or dead, with
// this very request's answer staged in its recovery record: Resume finds out
// from the chain which, and returns the answer once paid.
type Orphan struct{ *payment }

func (*Fresh) admission()  {}
func (*Replay) admission() {}
func (*Staged) admission() {}
func (*Orphan) admission() {}

// Answer is a paid answer served without calling the upstream: a replay of a
// recorded answer ("promoted"), or a staged one paid just now ("staged").
type Answer struct {
	Settlement *x402.SettleResponse
	Response   *store.RecordedResponse
	// Replay is the value of the replay marker: "promoted" or "staged".
	Replay string
	// Op is the answer's operation id, "" when it has no record.
	Op string
	// Upto says an upto permit paid it: its charge is Settlement.Amount
	// when the facilitator's answer named it, else to be read from the
	// answer's usage.
	Upto bool
	// PaymentKey is the claim key (D4) of the payment that paid it.
	PaymentKey string
}

// Answer returns the recorded answer to serve.
func (r *Replay) Answer() *Answer { return r.answer }

// payment is a payment that passed every check before the upstream: verified
// and claimed, or found with its claim (staged, orphaned). Exactly one
// admission wraps it.
type payment struct {
	pw      *Paywall
	q       *Quote
	payload *x402.PaymentPayload
	// offer is the quote's offer the payment accepted (q.Offer or q.Upto).
	offer x402.PaymentRequirements
	auth  authorization
	// charge is what an upto payment settles for (Fresh.Charge); nil
	// settles the offer's amount.
	charge *big.Int
	// delivered says the answer went out before the settlement (an upto
	// stream): a failed settlement then keeps the claim (SettleDelivered).
	delivered bool
	key       string
	payer     string
	claim     store.PaymentClaim
	// prepaid is the settlement of an authorization that a dead request
	// settled on chain before it could answer or stage anything (orphan.go);
	// nil on every other path.
	prepaid *x402.SettleResponse
	// request is what the fingerprint (D14) is computed from, lazily: only
	// staging and recovery need it.
	request     Request
	fingerprint string
	// rkey is the recovery record key (D14), "" when recovery is off; rec is
	// the record this request holds, once begun; found is the record the
	// lookup read, if any (recovery.go).
	rkey  string
	rec   *store.Recovery
	found *store.Recovery
}

// Key is the claim key of the payment (D4), for logs.
func (pd *payment) Key() string { return pd.key }

// fp returns the request's fingerprint, computed on first use.
func (pd *payment) fp() string {
	if pd.fingerprint == "" {
		r := pd.request
		pd.fingerprint = Fingerprint(r.Method, r.Path, r.Model, r.Body)
	}
	return pd.fingerprint
}

// Admit runs the payment steps of D0 before the upstream: decode, match (D7),
// freshness (D6), recovery lookup (D14), verify, claim, begin the recovery
// record. It returns the admission, or a *RefusalError (or another error) to
// answer with.
func (p *Paywall) Admit(ctx context.Context, q *Quote, in Presented, req Request) (Admission, error) {
	payload, offer, auth, err := p.read(q, in)
	if mm, ok := errors.AsType[*mismatch](err); ok {
		// Paid for another offer, but maybe held or spent already: a
		// replica whose offer differs (another upto facilitator, a price
		// changed by a rolling deploy) must not invite a second payment
		// for it (D29).
		pd := &payment{pw: p, q: q, payload: payload, offer: mm.accepted, auth: mm.auth,
			key: mm.auth.claimKey(p.cfg.Network, p.cfg.AssetAddress), payer: mm.auth.payer().Hex(), request: req}
		return nil, p.refuse(ctx, pd, false, mm.offer)
	}
	if err != nil {
		return nil, err
	}
	var id string // a secret (D14): never logged, kept only hashed in the record key
	if p.recoveries != nil {
		if id, err = x402.PaymentIDFromPayload(payload, q.PaymentIDRequired); err != nil {
			p.metrics.Payment("malformed")
			return nil, paymentIDError(err)
		}
	}
	pd := &payment{pw: p, q: q, payload: payload, offer: offer, auth: auth,
		key: auth.claimKey(p.cfg.Network, p.cfg.AssetAddress), payer: auth.payer().Hex(), request: req}
	if verr := p.fresh(auth); verr != nil {
		// Through refuse: a replica whose clock or max_timeout_seconds
		// differs from the one that took the payment must not offer it
		// again while it is held or spent.
		p.metrics.Payment("stale")
		return nil, p.refuse(ctx, pd, false, p.verifyChallenge(q, verr.Reason, verr))
	}
	// The recovery lookups come before verify (D0): a settled authorization no
	// longer verifies, and a replay needs no new payment.
	if p.recoveries != nil {
		pd.rkey = recordKey(p.recordNetwork(), pd.payer, id, pd.key)
		r, err := p.recoveryLookup(ctx, pd)
		if err != nil || r != nil {
			return r, err
		}
	}
	c, err := p.lookup(ctx, pd.key)
	if err != nil {
		return nil, err
	}
	switch {
	case c == nil:
	case c.State == store.PaymentPending:
		if st := c.Staged; st.Fingerprint != "" && st.Fingerprint != pd.fp() {
			// The same payment, presented for another request (D14): a
			// conflict, never the other request's answer and never a new
			// upstream call.
			return nil, requestMismatch()
		}
		pd.claim = *c
		return &Staged{pd}, nil
	case pd.stagedHere():
		// The claim's holder staged this very request's answer, then died or
		// is still settling: Resume finds out which from the chain.
		pd.claim = *c
		return &Orphan{pd}, nil
	}
	// Only the fresh path calls the upstream: only it needs the authorization
	// to outlive the request (D6); a replay or recovery above does not.
	if verr := p.lasts(auth); verr != nil {
		p.metrics.Payment("stale")
		return nil, p.refuse(ctx, pd, false, p.verifyChallenge(q, verr.Reason, verr))
	}
	vr, err := p.fac.Verify(ctx, payload, offer)
	if err != nil {
		return nil, facilitatorDown(err)
	}
	if !vr.IsValid {
		used := spent(vr.InvalidReason)
		if used && (c == nil || !isTopUpClaim(*c)) {
			// Spent on chain with nothing staged for this request: paid by a
			// request that died past its broadcast, or by one recording its
			// settlement right now (adoptPaid tells them apart). A top-up's
			// claim is never adopted: its payment buys credit, and only a
			// top-up retry may credit it (topup.go).
			adopted, err := p.adoptPaid(ctx, pd)
			switch {
			case err != nil:
				return nil, err
			case adopted:
				return &Fresh{pd}, nil
			}
		}
		p.metrics.Payment("invalid")
		return nil, p.refuse(ctx, pd, used, p.verifyChallenge(q, vr.InvalidReason, errors.New(vr.InvalidMessage)))
	}
	claim, held, err := p.claim(ctx, pd)
	if err != nil {
		return nil, err
	}
	if !held {
		p.metrics.Payment("replayed")
		return nil, inUse(claim)
	}
	crashpoint.Hit(crashpoint.AfterClaim)
	pd.claim = claim
	// The recovery record is a second claim on the authorization: the
	// test-only claim switch (claimoff_on.go) turns it off too.
	if p.recoveries != nil && !claimSwitchedOff() {
		if err := p.beginRecovery(ctx, pd); err != nil {
			return nil, err
		}
	}
	return &Fresh{pd}, nil
}

// read runs the first payment steps of D0 that every paid route shares: a
// PAYMENT-SIGNATURE present (v1's X-PAYMENT refused), decoded, matching the
// request's own quote (D7: paid for another route, model, price or network
// does not count), with a payload of the accepted offer's scheme. A missing
// payment or a mismatch is the quote's 402.
func (p *Paywall) read(q *Quote, in Presented) (*x402.PaymentPayload, x402.PaymentRequirements, authorization, error) {
	var none x402.PaymentRequirements
	if in.Signature == "" {
		if in.LegacyV1 {
			return nil, none, nil, p.challenge(q, V1NotAccepted, "x402 v1 X-PAYMENT is not accepted; pay with PAYMENT-SIGNATURE (v2)", nil)
		}
		p.metrics.Payment("challenged")
		return nil, none, nil, p.challenge(q, PaymentRequired, textRequired, nil)
	}
	payload, err := x402.DecodePaymentPayload(in.Signature)
	if err != nil {
		p.metrics.Payment("malformed")
		return nil, none, nil, refusal(InvalidPayment, "PAYMENT-SIGNATURE is malformed: "+err.Error())
	}
	accepted, err := payload.AcceptedRequirements()
	if err != nil {
		p.metrics.Payment("malformed")
		return nil, none, nil, refusal(InvalidPayment, err.Error())
	}
	offer := q.offer(accepted.Scheme)
	if err := x402.Match(offer, accepted); err != nil {
		p.metrics.Payment("mismatch")
		reason := Mismatch
		if accepted.Scheme == upto.Scheme {
			reason = UptoMismatch
		}
		challenge := p.challenge(q, reason, textNoMatch, err)
		if auth, perr := parseAuthorization(accepted, payload.Payload); perr == nil && accepted.Network == p.cfg.Network {
			return payload, none, nil, &mismatch{offer: challenge, accepted: accepted, auth: auth}
		}
		return nil, none, nil, challenge
	}
	auth, err := parseAuthorization(offer, payload.Payload)
	if err != nil {
		p.metrics.Payment("malformed")
		return nil, none, nil, refusal(InvalidPayment, "payment payload: "+err.Error())
	}
	return payload, offer, auth, nil
}

// mismatch is read's refusal of a payment made for another offer whose
// authorization could still be read: Admit asks the claims and the chain
// before it sends offer, the quote's 402.
type mismatch struct {
	offer    error
	accepted x402.PaymentRequirements
	auth     authorization
}

func (m *mismatch) Error() string { return m.offer.Error() }
func (m *mismatch) Unwrap() error { return m.offer }

// claim claims pd's authorization for this request, or takes over the claim
// of a request whose lease ended. It returns the claim as it stands and
// whether this request holds it.
func (p *Paywall) claim(ctx context.Context, pd *payment) (store.PaymentClaim, bool, error) {
	_, before := pd.auth.window()
	// The claim outlives the authorization by the network's margin, so that
	// clock skew between us and the chain never reopens a spendable one.
	expires, err := store.ClaimExpiry(p.cfg.Network, p.now(), time.Unix(before.Int64(), 0))
	if err != nil {
		return store.PaymentClaim{}, false, &RefusalError{Reason: Internal, Err: err,
			Message: "the payment could not be recorded; nothing was charged"}
	}
	claim, held, err := p.claims().ClaimPayment(ctx, store.PaymentClaim{
		Key: pd.key, Network: p.cfg.Network, Payer: pd.payer, Amount: pd.auth.value().String(), Owner: p.cfg.Owner,
		ExpiresAt: expires,
	}, p.cfg.ClaimLease)
	if err != nil {
		p.metrics.Payment("store_down")
		return store.PaymentClaim{}, false, &RefusalError{Reason: StoreUnavailable, Err: err,
			Message: "the payment could not be recorded; nothing was charged"}
	}
	return claim, held, nil
}

// lookup is the claim lookup of D0, before verify: a claim on this
// authorization that is pending, or settled with a staged answer, is answered
// here. It returns the claim when it is pending with a staged answer (to
// resolve) or held by a request (to judge: Admit), an error to answer with,
// or neither when the request goes on to verify.
func (p *Paywall) lookup(ctx context.Context, key string) (*store.PaymentClaim, error) {
	c, err := p.payments.Payment(ctx, key)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, nil
	case err != nil:
		return nil, &RefusalError{Reason: StoreUnavailable, Err: err, Message: "the payment could not be looked up; nothing was charged"}
	}
	switch {
	case c.State == store.PaymentPending && c.Staged != nil:
		return &c, nil
	case c.State == store.PaymentPending:
		// Pending with nothing staged (yet): the settlement is still open.
		p.metrics.Payment("replayed")
		return nil, inUse(c)
	case c.State == store.PaymentSettled && c.Staged != nil:
		// Replaying a settled answer needs proof of control (D15): not here.
		p.metrics.Payment("replayed")
		return nil, inUse(c)
	case c.State == store.PaymentHeld:
		return &c, nil
	default:
		return nil, nil
	}
}

// refuse answers a payment refused after the claim lookup: about to expire
// (used false) or refused by verify (used: verify found it spent on chain).
// offer is the quote's 402 for it.
//
// A 402 offer invites an x402 client to pay (again), so it is only sent for
// a payment that nobody holds and the chain has not used (D29). The claim is
// read again first: the lookup's read may predate the claim of a copy of this
// payment that arrived at the same moment and has settled since, which is
// also why verify may find it spent. Any claim on the authorization is the
// refusal of inUse, as for a copy that passed verify; one spent on chain that
// nobody here claims is refused too, never offered.
func (p *Paywall) refuse(ctx context.Context, pd *payment, used bool, offer error) error {
	c, err := p.payments.Payment(ctx, pd.key)
	switch {
	case err == nil:
		p.metrics.Payment("replayed")
		return inUse(c)
	case !errors.Is(err, store.ErrNotFound):
		return p.storeDown(err)
	case used:
		p.metrics.Payment("replayed")
		return alreadyUsed()
	}
	// Refused before verify (its window): no claim is left, but a claim is
	// forgotten after its authorization expired, so the chain says whether
	// this one already paid.
	if _, paid := pd.confirm(ctx); paid {
		p.metrics.Payment("replayed")
		return alreadyUsed()
	}
	return offer
}

// inUse refuses a second presentation of an authorization another request
// holds or already spent. It never reaches the upstream.
func inUse(c store.PaymentClaim) error {
	switch c.State {
	case store.PaymentSettled:
		return alreadyUsed()
	case store.PaymentPending:
		return refusal(SettlementPending, "this payment's settlement is still pending on chain; retry later")
	default:
		// Held: the request that holds it is running, or died and its lease
		// has not ended (D29's operation_in_flight).
		return refusal(OperationInFlight, "this payment authorization is being used by another request; retry later with the same payment")
	}
}

// fresh applies D6's basic window, before the recovery lookup: the
// authorization must not outlive what the 402 promised, nor start later.
// Each refusal carries its own reason: the official one for a validAfter in
// the future, ours for a validBefore too far out (docs/REASONS.md).
func (p *Paywall) fresh(a authorization) *x402.VerifyError {
	now := p.now()
	after, before := a.window()
	r := a.reasons()
	limit := now.Unix() + p.cfg.MaxTimeoutSeconds + int64(exact.FreshnessSlack/time.Second)
	if before.Cmp(big.NewInt(limit)) > 0 {
		return &x402.VerifyError{Reason: r.tooFar, Payer: a.payer().Hex(),
			Message: fmt.Sprintf("%s %s is later than the %ds this 402 allows", r.before, before, p.cfg.MaxTimeoutSeconds)}
	}
	if after.Cmp(bigUnix(now)) > 0 {
		return &x402.VerifyError{Reason: r.notYet, Payer: a.payer().Hex(),
			Message: fmt.Sprintf("%s %s is in the future", r.after, after)}
	}
	return nil
}

// lasts is D6's mid-request margin, on the fresh path only: the authorization
// must still be valid when the upstream and the settlement are done. Too
// close to its validBefore is the official valid_before reason.
func (p *Paywall) lasts(a authorization) *x402.VerifyError {
	_, before := a.window()
	need := p.now().Add(p.cfg.UpstreamTimeout + p.cfg.SettleTimeout).Unix()
	if before.Cmp(big.NewInt(need)) < 0 {
		r := a.reasons()
		return &x402.VerifyError{Reason: r.expiring, Payer: a.payer().Hex(),
			Message: fmt.Sprintf("%s %s expires before this request could finish (needs %d)", r.before, before, need)}
	}
	return nil
}
