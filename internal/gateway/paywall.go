package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"time"

	"github.com/llm4agents/llm4agents/internal/chat"
	"github.com/llm4agents/llm4agents/internal/crashpoint"
	"github.com/llm4agents/llm4agents/internal/pricing"
	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/x402"
	"github.com/llm4agents/llm4agents/x402/evm/exact"
)

func bigU(v uint64) *big.Int { return new(big.Int).SetUint64(v) }

// quote is the price of one request and the offer that asks for it.
type quote struct {
	model        *Model
	promptTokens int64
	outputBound  int64
	amount       *big.Int
	offer        x402.PaymentRequirements
	resource     *x402.ResourceInfo
	// op is the operation id of the answer (recovery.go), "" without a
	// recovery record; it is part of the cost annotation.
	op string
}

// price computes the quote of a parsed request (MISSION P1, DECISIONS D13).
func (s *Server) price(r *http.Request, req *chat.Request) (*quote, error) {
	m, ok := s.models[req.Model]
	if !ok {
		return nil, modelNotFound(req.Model)
	}
	if c := req.OutputCap(); c > m.MaxOutputTokens {
		return nil, &apiError{Status: http.StatusBadRequest, Type: "invalid_request_error", Code: "max_tokens_too_large",
			Message: fmt.Sprintf("max_tokens %d is above this model's cap of %d", c, m.MaxOutputTokens)}
	}
	prompt, err := s.promptTokens(m, req)
	if err != nil {
		return nil, &apiError{Status: http.StatusBadRequest, Type: "invalid_request_error", Code: "invalid_request", Message: "the messages could not be tokenized", Err: err}
	}
	q := &quote{model: m, promptTokens: prompt, outputBound: pricing.OutputBound(req, m.MaxOutputTokens)}
	q.amount = pricing.Quote(q.promptTokens, q.outputBound, m.Price, s.cfg.Decimals)
	q.offer = x402.PaymentRequirements{
		Scheme: exact.Scheme, Network: s.cfg.Network, Amount: q.amount.String(), Asset: s.cfg.Asset,
		PayTo: s.cfg.PayTo, MaxTimeoutSeconds: s.cfg.MaxTimeoutSeconds, Extra: s.extra,
	}
	mime := "application/json"
	if req.Stream {
		mime = "text/event-stream"
	}
	q.resource = &x402.ResourceInfo{
		URL: s.cfg.PublicURL + r.URL.Path,
		Description: fmt.Sprintf("chat completion with %s: %d prompt tokens, up to %d output tokens", m.ID,
			q.promptTokens, q.outputBound),
		MimeType: mime,
	}
	return q, nil
}

func (s *Server) promptTokens(m *Model, req *chat.Request) (int64, error) {
	if m.Encoding != "" {
		return s.counter.PromptTokensWith(req, m.Encoding)
	}
	return s.counter.PromptTokens(req)
}

func (s *Server) display(amount *big.Int) string {
	return pricing.FormatAmount(amount, s.cfg.Decimals) + " " + s.cfg.AssetSymbol
}

// challenge is the 402 that asks for payment (DECISIONS D10): PAYMENT-REQUIRED is
// authoritative; the body is an OpenAI error for the SDKs.
func (s *Server) challenge(q *quote, reason string, detail error) error {
	pr := x402.PaymentRequired{X402Version: x402.Version, Error: reason, Resource: q.resource, Accepts: []x402.PaymentRequirements{q.offer}}
	if s.recoveries != nil {
		// x402-v2 §7.1: retries of one purchase carry one id (D14).
		pr.Extensions = map[string]json.RawMessage{x402.ExtensionPaymentID: x402.PaymentIDDeclaration(q.model.PaymentIDRequired)}
	}
	return s.paymentRequired(q, pr, "request", detail)
}

// paymentRequired is the 402 of pr, the offer of q for what ("request", "top-up"):
// PAYMENT-REQUIRED with pr, never cached, and an OpenAI error body naming the
// price and pr's reason.
func (s *Server) paymentRequired(q *quote, pr x402.PaymentRequired, what string, detail error) error {
	hv, err := x402.EncodeHeader(pr)
	if err != nil {
		return fmt.Errorf("encode challenge: %w", err)
	}
	h := http.Header{}
	h.Set(x402.HeaderPaymentRequired, hv)
	h.Set("Cache-Control", "no-store")
	h.Set("X-Should-Retry", "false")
	msg := fmt.Sprintf("payment required: %s for this %s", s.display(q.amount), what)
	if pr.Error != "Payment required" {
		msg += " (" + pr.Error + ")"
	}
	return &apiError{Status: http.StatusPaymentRequired, Type: "payment_required", Code: "payment_required", Message: msg, Header: h, Err: detail}
}

// settleRefusal is the 402 after a failed settlement: PAYMENT-RESPONSE and no
// PAYMENT-REQUIRED, as the official server answers (D10).
func settleRefusal(sr *x402.SettleResponse, msg string) error {
	hv, err := x402.EncodeHeader(sr)
	if err != nil {
		return fmt.Errorf("encode settle response: %w", err)
	}
	h := http.Header{}
	h.Set(x402.HeaderPaymentResponse, hv)
	h.Set("Cache-Control", "no-store")
	h.Set("X-Should-Retry", "false")
	code := string(sr.ErrorReason)
	if code == "" {
		code = "settlement_failed"
	}
	return &apiError{Status: http.StatusPaymentRequired, Type: "payment_required", Code: code, Message: msg, Header: h}
}

// paid is a payment that passed every check before the upstream: verified and
// claimed by this request.
type paid struct {
	payload *x402.PaymentPayload
	auth    *exact.Payload
	key     string
	payer   string
	claim   store.PaymentClaim
	// recover: the claim is not this request's but a pending one with a staged
	// answer (D3), found by the recovery lookup; resolveStaged answers it.
	recover bool
	// orphan: the claim is held by another request (alive or dead) whose
	// answer is staged in the recovery record found; resumeOrphan answers it
	// (orphan.go).
	orphan bool
	// prepaid is the settlement of an authorization that a dead request
	// settled on chain before it could answer or stage anything: this request
	// took its claim over and calls the upstream without settling again
	// (orphan.go). nil on every other path.
	prepaid *x402.SettleResponse
	// request is what the request's fingerprint (DECISIONS D14) is computed
	// from, lazily: only staging and recovery need it.
	request     [3]string // method, path, model
	body        []byte
	fingerprint string
	// rkey is the recovery record key (D14), "" when recovery is off; rec is
	// the record this request holds, once begun; replay is a promoted record
	// the lookup found with proof of control, to be served instead of
	// anything else; found is the record the lookup read, if any (recovery.go).
	rkey   string
	rec    *store.Recovery
	replay *store.Recovery
	found  *store.Recovery
}

// fp returns the request's fingerprint, computed on first use.
func (pd *paid) fp() string {
	if pd.fingerprint == "" {
		pd.fingerprint = fingerprint(pd.request[0], pd.request[1], pd.request[2], pd.body)
	}
	return pd.fingerprint
}

// admit runs the payment steps of D0 before the upstream: decode, match (D7),
// freshness (D6), recovery lookup (D14), verify, claim, begin the recovery
// record. A nil *paid with a nil error never happens; a *paid with replay set
// must be answered by serveRecorded, one with recover set by resolveStaged,
// one with orphan set by resumeOrphan, never upstream; one with prepaid set
// goes upstream but is never settled again (orphan.go). request is the
// method, path and model of the request, body its bytes: the fingerprint's
// input.
func (s *Server) admit(ctx context.Context, r *http.Request, q *quote, request [3]string, body []byte) (*paid, error) {
	p, auth, err := s.readPayment(r, q, s.challenge)
	if err != nil {
		return nil, err
	}
	var id string // a secret (D14): never logged, kept only hashed in the record key
	if s.recoveries != nil {
		if id, err = x402.PaymentIDFromPayload(p, q.model.PaymentIDRequired); err != nil {
			s.metrics.payment("malformed")
			return nil, paymentIDError(err)
		}
	}
	a := &auth.Authorization
	pd := &paid{payload: p, auth: auth, key: exact.Key(s.cfg.Network, s.asset, a.From, a.Nonce), payer: a.From.Hex(),
		request: request, body: body}
	if verr := s.fresh(auth); verr != nil {
		// Through refuse: a replica whose clock or max_timeout_seconds
		// differs from the one that took the payment must not offer it
		// again while it is held or spent.
		s.metrics.payment("stale")
		return nil, s.refuse(ctx, pd, q, false, func() error { return s.challenge(q, string(verr.Reason), verr) })
	}
	// The recovery lookups come before verify (D0): a settled authorization no
	// longer verifies, and a replay needs no new payment.
	if s.recoveries != nil {
		pd.rkey = recordKey(s.cfg.Network, pd.payer, id, pd.key)
		if err := s.recoveryLookup(ctx, q, pd); err != nil || pd.replay != nil {
			return pd, err
		}
	}
	c, err := s.lookup(ctx, pd.key)
	if err != nil {
		return nil, err
	}
	switch {
	case c == nil:
	case c.State == store.PaymentPending:
		pd.claim, pd.recover = *c, true
		return pd, nil
	case pd.stagedHere():
		// The claim's holder staged this very request's answer, then died or
		// is still settling: resumeOrphan finds out which from the chain.
		pd.claim, pd.orphan = *c, true
		return pd, nil
	}
	// Only the fresh path calls the upstream: only it needs the authorization
	// to outlive the request (D6); a replay or recovery above does not.
	if verr := s.lasts(auth); verr != nil {
		s.metrics.payment("stale")
		return nil, s.refuse(ctx, pd, q, false, func() error { return s.challenge(q, string(verr.Reason), verr) })
	}
	vr, err := s.fac.Verify(ctx, p, q.offer)
	if err != nil {
		return nil, &apiError{Status: http.StatusBadGateway, Type: "server_error", Code: "facilitator_unavailable",
			Message: "the payment could not be verified right now; nothing was charged", Err: err}
	}
	if !vr.IsValid {
		used := vr.InvalidReason == x402.ReasonEVMNonceAlreadyUsed
		if used && (c == nil || !isTopUpClaim(*c)) {
			// Spent on chain with nothing staged for this request: paid by a
			// request that died past its broadcast, or by one recording its
			// settlement right now (adoptPaid tells them apart). A top-up's
			// claim is never adopted: its payment buys credit, and only a
			// top-up retry may credit it (topup.go).
			if err := s.adoptPaid(ctx, q, pd); err != nil || pd.prepaid != nil {
				return pd, err
			}
		}
		s.metrics.payment("invalid")
		return nil, s.refuse(ctx, pd, q, used, func() error {
			return s.challenge(q, string(vr.InvalidReason), errors.New(vr.InvalidMessage))
		})
	}
	claim, held, err := s.claimPayment(ctx, pd)
	if err != nil {
		return nil, err
	}
	if !held {
		s.metrics.payment("replayed")
		return nil, s.inUse(claim)
	}
	crashpoint.Hit(crashpoint.AfterClaim)
	pd.claim = claim
	// The recovery record is a second claim on the authorization: the
	// test-only claim switch (claimoff_on.go) turns it off too.
	if s.recoveries != nil && !claimSwitchedOff() {
		if err := s.beginRecovery(ctx, q, pd); err != nil {
			return nil, err
		}
	}
	return pd, nil
}

// claimPayment claims pd's authorization for this request, or takes over
// the claim of a request whose lease ended. It returns the claim as it stands
// and whether this request holds it; an error is the answer to send.
func (s *Server) claimPayment(ctx context.Context, pd *paid) (store.PaymentClaim, bool, error) {
	a := &pd.auth.Authorization
	// The claim outlives the authorization by the network's margin, so that
	// clock skew between us and the chain never reopens a spendable one.
	expires, err := store.ClaimExpiry(s.cfg.Network, s.now(), time.Unix(a.ValidBefore.Int64(), 0))
	if err != nil {
		return store.PaymentClaim{}, false, &apiError{Status: http.StatusInternalServerError, Type: "server_error", Code: "internal_error",
			Message: "the payment could not be recorded; nothing was charged", Err: err}
	}
	claim, held, err := s.claims().ClaimPayment(ctx, store.PaymentClaim{
		Key: pd.key, Network: s.cfg.Network, Payer: pd.payer, Amount: a.Value.String(), Owner: s.cfg.Owner,
		ExpiresAt: expires,
	}, s.cfg.ClaimLease)
	if err != nil {
		s.metrics.payment("store_down")
		return store.PaymentClaim{}, false, &apiError{Status: http.StatusServiceUnavailable, Type: "server_error", Code: "store_unavailable",
			Message: "the payment could not be recorded; nothing was charged", Err: err}
	}
	return claim, held, nil
}

// refuse answers a payment refused after the claim lookup: about to expire
// (used false) or refused by verify (used: verify found it spent on chain).
// challenge builds the route's 402.
//
// A 402 offer invites an x402 client to pay (again), so it is only sent for
// a payment that nobody holds and the chain has not used (DECISIONS D29).
// The claim is read again first: the lookup's read may predate the claim of
// a copy of this payment that arrived at the same moment and has settled
// since, which is also why verify may find it spent. Any claim on the
// authorization is the 409 of inUse, as for a copy that passed verify; one
// spent on chain that nobody here claims is a 409 too, never an offer.
func (s *Server) refuse(ctx context.Context, pd *paid, q *quote, used bool, challenge func() error) error {
	c, err := s.payments.Payment(ctx, pd.key)
	switch {
	case err == nil:
		s.metrics.payment("replayed")
		return s.inUse(c)
	case !errors.Is(err, store.ErrNotFound):
		return s.storeDown(err)
	case used:
		s.metrics.payment("replayed")
		return alreadyUsed()
	}
	// Refused before verify (its window): no claim is left, but a claim is
	// forgotten after its authorization expired, so the chain says whether
	// this one already paid.
	if _, paid := s.confirm(ctx, pd, q); paid {
		s.metrics.payment("replayed")
		return alreadyUsed()
	}
	return challenge()
}

// alreadyUsed refuses an authorization the chain shows spent.
func alreadyUsed() error {
	return &apiError{Status: http.StatusConflict, Type: "invalid_request_error", Code: "payment_already_used",
		Message: "this payment authorization was already spent on an earlier request; sign a new one",
		Header:  http.Header{"X-Should-Retry": {"false"}}}
}

// inUse refuses a second presentation of an authorization another request holds
// or already spent. It never reaches the upstream.
func (s *Server) inUse(c store.PaymentClaim) error {
	h := http.Header{}
	h.Set("X-Should-Retry", "false")
	switch c.State {
	case store.PaymentSettled:
		return alreadyUsed()
	case store.PaymentPending:
		h.Set("Retry-After", "5")
		return &apiError{Status: http.StatusConflict, Type: "invalid_request_error", Code: "settlement_pending",
			Message: "this payment's settlement is still pending on chain; retry later", Header: h}
	default:
		// Held: the request that holds it is running, or died and its lease
		// has not ended (DECISIONS D29's operation_in_flight).
		h.Set("Retry-After", "2")
		return &apiError{Status: http.StatusConflict, Type: "invalid_request_error", Code: "operation_in_flight",
			Message: "this payment authorization is being used by another request; retry later with the same payment", Header: h}
	}
}

// fresh applies D6's basic window, before the recovery lookup: the
// authorization must not outlive what the 402 promised, nor start later.
// Each refusal carries its own reason: the official one for a validAfter in
// the future, ours for a validBefore too far out (docs/REASONS.md).
func (s *Server) fresh(p *exact.Payload) *x402.VerifyError {
	now := s.now()
	vb := p.Authorization.ValidBefore
	limit := now.Unix() + s.cfg.MaxTimeoutSeconds + int64(exact.FreshnessSlack/time.Second)
	if vb.Cmp(big.NewInt(limit)) > 0 {
		return &x402.VerifyError{Reason: x402.ReasonEVMValidBeforeTooFar, Payer: p.Authorization.From.Hex(),
			Message: fmt.Sprintf("validBefore %s is later than the %ds this 402 allows", vb, s.cfg.MaxTimeoutSeconds)}
	}
	if p.Authorization.ValidAfter.Cmp(big.NewInt(now.Unix())) > 0 {
		return &x402.VerifyError{Reason: x402.ReasonEVMValidAfter, Payer: p.Authorization.From.Hex(),
			Message: fmt.Sprintf("validAfter %s is in the future", p.Authorization.ValidAfter)}
	}
	return nil
}

// lasts is D6's mid-request margin, on the fresh path only: the authorization
// must still be valid when the upstream and the settlement are done. Too
// close to its validBefore is the official valid_before reason.
func (s *Server) lasts(p *exact.Payload) *x402.VerifyError {
	vb := p.Authorization.ValidBefore
	need := s.now().Add(s.cfg.UpstreamTimeout + s.cfg.SettleTimeout).Unix()
	if vb.Cmp(big.NewInt(need)) < 0 {
		return &x402.VerifyError{Reason: x402.ReasonEVMValidBefore, Payer: p.Authorization.From.Hex(),
			Message: fmt.Sprintf("validBefore %s expires before this request could finish (needs %d)", vb, need)}
	}
	return nil
}

// release gives the authorization back after an upstream failure: nothing was
// settled, so the buyer may present it again.
func (s *Server) release(pd *paid) {
	s.abandonRecovery(pd)
	if pd.prepaid != nil {
		// Spent on chain already: the claim must keep the authorization from
		// ever reaching the upstream as a new payment. It stays held until its
		// lease ends, when a retry takes it over again (orphan.go).
		s.log.Warn("kept a paid claim after its upstream failed", "key", pd.key)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.claims().ReleasePayment(ctx, pd.key, pd.claim.Fence); err != nil {
		s.log.Warn("release payment claim", "key", pd.key, "err", err)
	}
}

// confirmer is an optional facilitator extra: it tells from the chain whether an
// authorization was paid (DECISIONS D1, D5), for a settle answer that is
// ambiguous.
type confirmer interface {
	Confirm(ctx context.Context, p *x402.PaymentPayload, req x402.PaymentRequirements) (tx string, paid bool, err error)
}

// settleOutcome is how a settlement ended for the request that ran it.
type settleOutcome int

const (
	// settledPaid: paid on chain; the claim is settled with the transaction.
	settledPaid settleOutcome = iota
	// settledPending: broadcast, not mined within the deadline (D3); the
	// claim is pending and the answer is to be staged with it.
	settledPending
	// settledUnknown: the facilitator answered nonce_already_used (another
	// call holds the settlement, or a transaction we cannot see yet) and the
	// chain does not show this authorization paid. The claim stays pending
	// with whatever transaction is known, never settled without one; the
	// answer is staged and the buyer told to retry.
	settledUnknown
	// settledFailed: not paid; the claim was released (or never settles) and
	// the answer is withheld.
	settledFailed
)

// settle settles a claimed payment after the upstream answered, within the
// settle deadline, and records the outcome on the claim. A payment a dead
// request already settled (pd.prepaid) is only recorded.
func (s *Server) settle(pd *paid, q *quote) (*x402.SettleResponse, settleOutcome) {
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.SettleTimeout+5*time.Second)
	defer cancel()
	if pd.prepaid != nil {
		s.record(ctx, pd, store.PaymentSettled, pd.prepaid.Transaction)
		s.metrics.payment("recovered")
		return pd.prepaid, settledPaid
	}
	start := s.now()
	sr, err := s.settleCall(ctx, pd, q)
	s.metrics.settleLatency(s.now().Sub(start))
	if err != nil {
		s.log.Error("settle", "key", pd.key, "err", err)
		// An error is no verdict: another replica may have settled this very
		// authorization meanwhile. The claim holder asks the chain (D1).
		if tx, ok := s.confirm(ctx, pd, q); ok {
			s.record(ctx, pd, store.PaymentSettled, tx)
			s.metrics.payment("settled")
			return &x402.SettleResponse{Success: true, Transaction: tx, Network: s.cfg.Network, Payer: pd.payer}, settledPaid
		}
		// Not seen paid (yet): a timeout or a lost answer may hide a
		// broadcast that mines later, above all behind a remote
		// facilitator. The claim stays pending, the answer is staged, and a
		// retry with the same payment settles again (a facilitator's settle
		// of one authorization resumes its record, D5) or reads the chain:
		// never released, so the payment can never buy a second answer, nor
		// be refused as unpaid once it mines (D29).
		s.record(ctx, pd, store.PaymentPending, pd.claim.TxHash)
		s.metrics.payment("unresolved")
		return &x402.SettleResponse{Success: false, ErrorReason: x402.ReasonUnexpectedSettleError, Network: s.cfg.Network, Payer: pd.payer}, settledUnknown
	}
	switch {
	case sr.Success:
		tx := sr.Transaction
		if tx == "" {
			// A success that names no transaction: the answer is served (the
			// facilitator says paid) but, without a settlement reference,
			// never promoted (R3); the claim takes the chain's transaction,
			// or stays pending without one.
			tx, _ = s.confirm(ctx, pd, q)
		}
		s.record(ctx, pd, store.PaymentSettled, tx)
		s.metrics.payment("settled")
		return sr, settledPaid
	case sr.ErrorReason == x402.ReasonSettlementPending:
		s.record(ctx, pd, store.PaymentPending, sr.Transaction)
		s.metrics.payment("pending")
		return sr, settledPending
	case sr.ErrorReason == x402.ReasonEVMNonceAlreadyUsed:
		// Ambiguous: resolved from the chain by the claim holder (D1).
		if tx, ok := s.confirm(ctx, pd, q); ok {
			s.record(ctx, pd, store.PaymentSettled, tx)
			s.metrics.payment("settled")
			return &x402.SettleResponse{Success: true, Transaction: tx, Network: s.cfg.Network, Payer: pd.payer}, settledPaid
		}
		// Spent, or about to be, but not seen paid to us: pending, so that
		// neither a retry nor a takeover reaches the upstream again, and
		// never settled without the transaction that paid.
		tx := sr.Transaction
		if tx == "" {
			tx = pd.claim.TxHash
		}
		s.record(ctx, pd, store.PaymentPending, tx)
		s.metrics.payment("unresolved")
		return sr, settledUnknown
	case sr.Transaction != "":
		// A failure that names a transaction: something was broadcast, and
		// may still mine (some facilitators answer a receipt timeout so).
		// The chain decides; until it does, the claim stays pending with
		// that transaction, never released for a second use.
		if tx, ok := s.confirm(ctx, pd, q); ok {
			s.record(ctx, pd, store.PaymentSettled, tx)
			s.metrics.payment("settled")
			return &x402.SettleResponse{Success: true, Transaction: tx, Network: s.cfg.Network, Payer: pd.payer}, settledPaid
		}
		s.record(ctx, pd, store.PaymentPending, sr.Transaction)
		s.metrics.payment("unresolved")
		return sr, settledUnknown
	default:
		// Not spent on chain (insufficient funds, a node error), nothing
		// broadcast: the authorization may be presented again once fixed.
		s.release(pd)
		s.metrics.payment("failed")
		return sr, settledFailed
	}
}

// confirm asks the chain, through the facilitator when it can tell, whether
// pd's authorization paid q's offer (D1, D5), and returns the transaction.
func (s *Server) confirm(ctx context.Context, pd *paid, q *quote) (string, bool) {
	tx, paid, _ := s.confirmKnown(ctx, pd, q)
	return tx, paid
}

// confirmKnown is confirm that also says whether the chain answered at all:
// known is false when the facilitator cannot read the chain or the read
// failed, so that "not shown paid" is never taken for "not paid".
func (s *Server) confirmKnown(ctx context.Context, pd *paid, q *quote) (tx string, paid, known bool) {
	c, ok := s.fac.(confirmer)
	if !ok {
		return "", false, false
	}
	tx, yes, err := c.Confirm(ctx, pd.payload, q.offer)
	if err != nil {
		s.log.Warn("confirm a payment from the chain", "key", pd.key, "err", err)
		return "", false, false
	}
	return tx, yes && tx != "", true
}

// settleCall asks the facilitator to settle pd within the settle timeout,
// which ends before ctx does (every caller's ctx allows the settle timeout
// plus some seconds): the reads and writes that follow the answer (the
// chain's confirmation, the claim's record, a promotion, a credit) keep
// those seconds. An in-process facilitator ends by this deadline.
//
// An answer that is no verdict (unexpected_settle_error: the facilitator
// could not tell, as ours answers over HTTP when its own call fails) is
// returned as an error, as a timeout or a transport error is: none of them
// says the payment was not made (D29).
func (s *Server) settleCall(ctx context.Context, pd *paid, q *quote) (*x402.SettleResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.SettleTimeout)
	defer cancel()
	sr, err := s.fac.Settle(ctx, pd.payload, q.offer)
	if err == nil && !sr.Success && sr.ErrorReason == x402.ReasonUnexpectedSettleError {
		// The reason only: a third-party facilitator's message is not ours
		// to log.
		return nil, fmt.Errorf("facilitator gave no verdict: %s", truncate(string(sr.ErrorReason), 100))
	}
	return sr, err
}

// record writes the claim's state. A claim is settled only with the
// transaction that paid: a settled claim without one could never be checked
// against the chain, so the request guarantees it and this refuses it.
func (s *Server) record(ctx context.Context, pd *paid, state store.PaymentState, tx string) {
	if state == store.PaymentSettled && tx == "" {
		s.log.Error("refused to record a payment settled without a transaction; kept pending", "key", pd.key)
		state = store.PaymentPending
	}
	// The settle that came before may have used up ctx: the outcome must
	// still be written, or the claim would stay held and, once its lease
	// ended, the payment could be presented again for a second answer.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), store.DefaultTimeout)
	defer cancel()
	if err := s.claims().UpdatePayment(ctx, pd.key, pd.claim.Fence, state, tx); err != nil {
		s.log.Error("record payment", "key", pd.key, "state", state, "err", err)
	}
}

// unsettled answers a settlement that did not pay (now): D3's 402 with
// PAYMENT-RESPONSE for a pending one, 409 with Retry-After for one that is
// unresolved, the 402 refusal otherwise.
func (s *Server) unsettled(sr *x402.SettleResponse, out settleOutcome) error {
	if out == settledUnknown {
		return settlementUnresolved()
	}
	return settleRefusal(sr, s.settleMessage(sr))
}

// settlementUnresolved is the 409 of a settlement whose outcome the chain
// does not show yet: the answer is kept with the claim, and a retry with the
// same payment receives it once the settlement is seen paid.
func settlementUnresolved() error {
	return &apiError{Status: http.StatusConflict, Type: "invalid_request_error", Code: "settlement_pending",
		Message: "this payment's settlement is not confirmed on chain yet; retry the same request with the same payment to receive the answer",
		Header:  http.Header{"X-Should-Retry": {"false"}, "Retry-After": {"5"}}}
}

// paidHeaders are set on every paid answer.
func paidHeaders(h http.Header, sr *x402.SettleResponse) error {
	hv, err := x402.EncodeHeader(sr)
	if err != nil {
		return err
	}
	h.Set(x402.HeaderPaymentResponse, hv)
	h.Set("Cache-Control", "private")
	h.Set("X-Should-Retry", "false")
	return nil
}

// readPayment runs the first payment steps of D0 that every paid route
// shares: a PAYMENT-SIGNATURE present (v1's X-PAYMENT refused), decoded,
// matching this request's own quote (D7: paid for another route, model,
// price or network does not count), with an exact payload. Refusals before
// the match are 400s; a missing payment or a mismatch is the route's 402,
// built by challenge.
func (s *Server) readPayment(r *http.Request, q *quote, challenge func(q *quote, reason string, detail error) error) (*x402.PaymentPayload, *exact.Payload, error) {
	hv := r.Header.Get(x402.HeaderPaymentSignature)
	if hv == "" {
		if r.Header.Get(x402.HeaderLegacyPayment) != "" {
			return nil, nil, challenge(q, "x402 v1 X-PAYMENT is not accepted; pay with PAYMENT-SIGNATURE (v2)", nil)
		}
		s.metrics.payment("challenged")
		return nil, nil, challenge(q, "Payment required", nil)
	}
	p, err := x402.DecodePaymentPayload(hv)
	if err != nil {
		s.metrics.payment("malformed")
		return nil, nil, &apiError{Status: http.StatusBadRequest, Type: "invalid_request_error", Code: "invalid_payment",
			Message: "PAYMENT-SIGNATURE is malformed: " + err.Error()}
	}
	accepted, err := p.AcceptedRequirements()
	if err != nil {
		s.metrics.payment("malformed")
		return nil, nil, &apiError{Status: http.StatusBadRequest, Type: "invalid_request_error", Code: "invalid_payment", Message: err.Error()}
	}
	if err := x402.Match(q.offer, accepted); err != nil {
		s.metrics.payment("mismatch")
		return nil, nil, challenge(q, "No matching payment requirements", err)
	}
	auth, err := exact.ParsePayload(p.Payload)
	if err != nil {
		s.metrics.payment("malformed")
		return nil, nil, &apiError{Status: http.StatusBadRequest, Type: "invalid_request_error", Code: "invalid_payment", Message: "payment payload: " + err.Error()}
	}
	return p, auth, nil
}
