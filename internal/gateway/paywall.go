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
	hv, err := x402.EncodeHeader(pr)
	if err != nil {
		return fmt.Errorf("encode challenge: %w", err)
	}
	h := http.Header{}
	h.Set(x402.HeaderPaymentRequired, hv)
	h.Set("Cache-Control", "no-store")
	h.Set("X-Should-Retry", "false")
	msg := fmt.Sprintf("payment required: %s for this request", s.display(q.amount))
	if reason != "Payment required" {
		msg += " (" + reason + ")"
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
	// request is what the request's fingerprint (DECISIONS D14) is computed
	// from, lazily: only staging and recovery need it.
	request     [3]string // method, path, model
	body        []byte
	fingerprint string
	// rkey is the recovery record key (D14), "" when recovery is off; rec is
	// the record this request holds, once begun; replay is a promoted record
	// the lookup found with proof of control, to be served instead of
	// anything else (recovery.go).
	rkey   string
	rec    *store.Recovery
	replay *store.Recovery
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
// never upstream. request is the method, path and model of the request, body
// its bytes: the fingerprint's input.
func (s *Server) admit(ctx context.Context, r *http.Request, q *quote, request [3]string, body []byte) (*paid, error) {
	hv := r.Header.Get(x402.HeaderPaymentSignature)
	if hv == "" {
		if r.Header.Get(x402.HeaderLegacyPayment) != "" {
			return nil, s.challenge(q, "x402 v1 X-PAYMENT is not accepted; pay with PAYMENT-SIGNATURE (v2)", nil)
		}
		s.metrics.payment("challenged")
		return nil, s.challenge(q, "Payment required", nil)
	}
	p, err := x402.DecodePaymentPayload(hv)
	if err != nil {
		s.metrics.payment("malformed")
		return nil, &apiError{Status: http.StatusBadRequest, Type: "invalid_request_error", Code: "invalid_payment",
			Message: "PAYMENT-SIGNATURE is malformed: " + err.Error()}
	}
	accepted, err := p.AcceptedRequirements()
	if err != nil {
		s.metrics.payment("malformed")
		return nil, &apiError{Status: http.StatusBadRequest, Type: "invalid_request_error", Code: "invalid_payment", Message: err.Error()}
	}
	if err := x402.Match(q.offer, accepted); err != nil {
		// Paid for another route, model, price or network: the quote of this very
		// request is what counts.
		s.metrics.payment("mismatch")
		return nil, s.challenge(q, "No matching payment requirements", err)
	}
	auth, err := exact.ParsePayload(p.Payload)
	if err != nil {
		s.metrics.payment("malformed")
		return nil, &apiError{Status: http.StatusBadRequest, Type: "invalid_request_error", Code: "invalid_payment", Message: "payment payload: " + err.Error()}
	}
	var id string // a secret (D14): never logged, kept only hashed in the record key
	if s.recoveries != nil {
		if id, err = x402.PaymentIDFromPayload(p, q.model.PaymentIDRequired); err != nil {
			s.metrics.payment("malformed")
			return nil, paymentIDError(err)
		}
	}
	if err := s.fresh(auth); err != nil {
		s.metrics.payment("stale")
		return nil, s.challenge(q, string(x402.ReasonEVMValidBefore), err)
	}
	a := &auth.Authorization
	pd := &paid{payload: p, auth: auth, key: exact.Key(s.cfg.Network, s.asset, a.From, a.Nonce), payer: a.From.Hex(),
		request: request, body: body}
	// The recovery lookups come before verify (D0): a settled authorization no
	// longer verifies, and a replay needs no new payment.
	if s.recoveries != nil {
		pd.rkey = recordKey(s.cfg.Network, pd.payer, id, pd.key)
		if err := s.recoveryLookup(ctx, q, pd); err != nil || pd.replay != nil {
			return pd, err
		}
	}
	staged, err := s.lookup(ctx, pd.key)
	if err != nil {
		return nil, err
	}
	if staged != nil {
		pd.claim, pd.recover = *staged, true
		return pd, nil
	}
	// Only the fresh path calls the upstream: only it needs the authorization
	// to outlive the request (D6); a replay or recovery above does not.
	if err := s.lasts(auth); err != nil {
		s.metrics.payment("stale")
		return nil, s.challenge(q, string(x402.ReasonEVMValidBefore), err)
	}
	vr, err := s.fac.Verify(ctx, p, q.offer)
	if err != nil {
		return nil, &apiError{Status: http.StatusBadGateway, Type: "server_error", Code: "facilitator_unavailable",
			Message: "the payment could not be verified right now; nothing was charged", Err: err}
	}
	if !vr.IsValid {
		s.metrics.payment("invalid")
		return nil, s.challenge(q, string(vr.InvalidReason), errors.New(vr.InvalidMessage))
	}
	// The claim outlives the authorization by the network's margin, so that
	// clock skew between us and the chain never reopens a spendable one.
	expires, err := store.ClaimExpiry(s.cfg.Network, s.now(), time.Unix(a.ValidBefore.Int64(), 0))
	if err != nil {
		return nil, &apiError{Status: http.StatusInternalServerError, Type: "server_error", Code: "internal_error",
			Message: "the payment could not be recorded; nothing was charged", Err: err}
	}
	claim, held, err := s.claims().ClaimPayment(ctx, store.PaymentClaim{
		Key: pd.key, Network: s.cfg.Network, Payer: pd.payer, Amount: a.Value.String(), Owner: s.cfg.Owner,
		ExpiresAt: expires,
	}, s.cfg.ClaimLease)
	if err != nil {
		return nil, &apiError{Status: http.StatusServiceUnavailable, Type: "server_error", Code: "store_unavailable",
			Message: "the payment could not be recorded; nothing was charged", Err: err}
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

// inUse refuses a second presentation of an authorization another request holds
// or already spent. It never reaches the upstream.
func (s *Server) inUse(c store.PaymentClaim) error {
	h := http.Header{}
	h.Set("X-Should-Retry", "false")
	switch c.State {
	case store.PaymentSettled:
		return &apiError{Status: http.StatusConflict, Type: "invalid_request_error", Code: "payment_already_used",
			Message: "this payment authorization was already spent on an earlier request; sign a new one", Header: h}
	case store.PaymentPending:
		h.Set("Retry-After", "5")
		return &apiError{Status: http.StatusConflict, Type: "invalid_request_error", Code: "settlement_pending",
			Message: "this payment's settlement is still pending on chain; retry later", Header: h}
	default:
		h.Set("Retry-After", "2")
		return &apiError{Status: http.StatusConflict, Type: "invalid_request_error", Code: "payment_in_use",
			Message: "this payment authorization is being used by another request", Header: h}
	}
}

// fresh applies D6's basic window, before the recovery lookup: the
// authorization must not outlive what the 402 promised, nor start later.
func (s *Server) fresh(p *exact.Payload) error {
	now := s.now()
	vb := p.Authorization.ValidBefore
	limit := now.Unix() + s.cfg.MaxTimeoutSeconds + int64(exact.FreshnessSlack/time.Second)
	if vb.Cmp(big.NewInt(limit)) > 0 {
		return fmt.Errorf("validBefore %s is later than the %ds this 402 allows", vb, s.cfg.MaxTimeoutSeconds)
	}
	if p.Authorization.ValidAfter.Cmp(big.NewInt(now.Unix())) > 0 {
		return fmt.Errorf("validAfter %s is in the future", p.Authorization.ValidAfter)
	}
	return nil
}

// lasts is D6's mid-request margin, on the fresh path only: the authorization
// must still be valid when the upstream and the settlement are done.
func (s *Server) lasts(p *exact.Payload) error {
	vb := p.Authorization.ValidBefore
	need := s.now().Add(s.cfg.UpstreamTimeout + s.cfg.SettleTimeout).Unix()
	if vb.Cmp(big.NewInt(need)) < 0 {
		return fmt.Errorf("validBefore %s expires before this request could finish (needs %d)", vb, need)
	}
	return nil
}

// release gives the authorization back after an upstream failure: nothing was
// settled, so the buyer may present it again.
func (s *Server) release(pd *paid) {
	s.abandonRecovery(pd)
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

// settle settles a claimed payment after the upstream answered, within the
// settle deadline, and records the outcome on the claim. It returns the settle
// response and whether the buyer paid.
func (s *Server) settle(pd *paid, q *quote) (*x402.SettleResponse, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.SettleTimeout+5*time.Second)
	defer cancel()
	start := s.now()
	sr, err := s.fac.Settle(ctx, pd.payload, q.offer)
	s.metrics.settleLatency(s.now().Sub(start))
	if err != nil {
		s.log.Error("settle", "key", pd.key, "err", err)
		sr = &x402.SettleResponse{Success: false, ErrorReason: x402.ReasonUnexpectedSettleError, Network: s.cfg.Network, Payer: pd.payer}
	}
	switch {
	case sr.Success:
		s.record(ctx, pd, store.PaymentSettled, sr.Transaction)
		s.metrics.payment("settled")
		return sr, true
	case sr.ErrorReason == x402.ReasonSettlementPending:
		s.record(ctx, pd, store.PaymentPending, sr.Transaction)
		s.metrics.payment("pending")
		return sr, false
	case sr.ErrorReason == x402.ReasonEVMNonceAlreadyUsed:
		// Ambiguous: resolved from the chain by the claim holder (D1).
		if c, ok := s.fac.(confirmer); ok {
			tx, yes, cerr := c.Confirm(ctx, pd.payload, q.offer)
			if cerr == nil && yes {
				s.record(ctx, pd, store.PaymentSettled, tx)
				s.metrics.payment("settled")
				return &x402.SettleResponse{Success: true, Transaction: tx, Network: s.cfg.Network, Payer: pd.payer}, true
			}
		}
		s.record(ctx, pd, store.PaymentSettled, sr.Transaction) // spent: never usable again
		s.metrics.payment("failed")
		return sr, false
	default:
		// Not spent on chain (insufficient funds, a node error): the authorization
		// may be presented again once fixed.
		s.release(pd)
		s.metrics.payment("failed")
		return sr, false
	}
}

func (s *Server) record(ctx context.Context, pd *paid, state store.PaymentState, tx string) {
	if err := s.claims().UpdatePayment(ctx, pd.key, pd.claim.Fence, state, tx); err != nil {
		s.log.Error("record payment", "key", pd.key, "state", state, "err", err)
	}
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
