package gateway

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"strings"
	"time"

	"github.com/ethereum/go-ethereum/common"

	"github.com/llm4agents/llm4agents/internal/chat"
	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/x402"
	"github.com/llm4agents/llm4agents/x402/evm/exact"
)

// Recovery of paid answers whose response was lost (MISSION R1-R5, DECISIONS
// D0, D14, D15).
//
// Every paid request that reaches the upstream begins a recovery record under
// its record key (D14: the payment-identifier and the payer when the buyer sent
// an id, else the authorization's identity) with a server-generated operation
// id, which travels in the X-Llm4agents-Operation header and in
// x_llm4agents.operation_id. The handler only stages the upstream's answer;
// the after-settle step promotes it by operation id with the settlement's
// transaction, and nothing else ever makes it replayable. A failed settlement
// abandons the record. A pending one (D3) leaves it staged: it is promoted by
// the retry that resolves the pending claim, or by the first lookup that finds
// the claim settled.
//
// The lookup runs at D0's place, after freshness and before verify. A promoted
// record is replayed only with proof of control (D15): the same
// PAYMENT-SIGNATURE that paid, before its validBefore, or a fresh
// authorization from the same payer for the same amount, verified by the
// facilitator and never settled. The replay is rendered from the recorded
// answer and settlement exactly as the live answer was, so its bytes are the
// same, and marked X-Llm4agents-Replay: promoted. Each replay takes one unit of
// the record's budget; a spent or expired record is a new purchase.

const (
	// operationHeader carries a paid answer's operation id.
	operationHeader = "X-Llm4agents-Operation"
	// DefaultRecoveryTTL is how long a promoted answer may be replayed.
	DefaultRecoveryTTL = time.Hour
	// DefaultRecoveryReplays is how many replays a promoted answer allows.
	DefaultRecoveryReplays = 10
)

// newOperationID returns a fresh operation id: "op_" and 128 random bits.
func newOperationID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return "op_" + hex.EncodeToString(b[:])
}

// fingerprint is DECISIONS D14's request fingerprint:
// x402.Fingerprint, which the buyer computes too, so the two never disagree.
func fingerprint(method, path, model string, body []byte) string {
	return x402.Fingerprint(method, path, model, body)
}

// recordKey is the record key of D14. A payment-identifier is a secret: the key
// holds a hash of it with the network and the payer, never the id.
func recordKey(network, payer, id, claimKey string) string {
	if id == "" {
		return "auth:" + claimKey
	}
	sum := sha256.Sum256([]byte("llm4agents/recovery/v1\x00" + network + "\x00" + strings.ToLower(payer) + "\x00" + id))
	return "pid:" + hex.EncodeToString(sum[:])
}

// proofHash identifies an authorization with its signature: re-presenting the
// same PAYMENT-SIGNATURE is proof of control only if it matches (the nonce of
// a settled authorization is public on chain; its signature is not required
// to be).
func proofHash(auth *exact.Payload) string {
	b, err := json.Marshal(auth.JSON())
	if err != nil {
		return "" // unreachable: strings only
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// paymentIDError is the 400 for a payment-identifier fault; the text is the
// official TS package's.
func paymentIDError(err error) error {
	return &apiError{Status: http.StatusBadRequest, Type: "invalid_request_error", Code: "invalid_payment_identifier",
		Message: err.Error() + "; nothing was charged"}
}

func idempotencyConflict() error {
	return &apiError{Status: http.StatusConflict, Type: "invalid_request_error", Code: "idempotency_conflict",
		Message: "this payment identifier or authorization was used for a different request; use a new one for a new request",
		Header:  http.Header{"X-Should-Retry": {"false"}}}
}

func operationInFlight() error {
	return &apiError{Status: http.StatusConflict, Type: "invalid_request_error", Code: "operation_in_flight",
		Message: "a request with this payment identifier is still running; retry later to receive its answer",
		Header:  http.Header{"X-Should-Retry": {"false"}, "Retry-After": {"2"}}}
}

func recoveryPending() error {
	return &apiError{Status: http.StatusConflict, Type: "invalid_request_error", Code: "settlement_pending",
		Message: "this request's settlement is still pending on chain; retry later",
		Header:  http.Header{"X-Should-Retry": {"false"}, "Retry-After": {"5"}}}
}

// stagedElsewhere answers a request whose record is staged under another
// payment, c being that payment's claim (zero when absent): 409
// operation_in_flight while the request that staged it still holds the claim
// (it is settling), 409 settlement_pending once its settlement is pending.
func (s *Server) stagedElsewhere(c store.PaymentClaim) error {
	if c.State == store.PaymentHeld {
		s.metrics.payment("in_flight")
		return operationInFlight()
	}
	return recoveryPending()
}

// storeDown is storeUnavailable, counted.
func (s *Server) storeDown(err error) error {
	s.metrics.payment("store_down")
	return storeUnavailable(err)
}

func storeUnavailable(err error) error {
	return &apiError{Status: http.StatusServiceUnavailable, Type: "server_error", Code: "store_unavailable",
		Message: "the payment could not be looked up; nothing was charged", Err: err}
}

// recoveryLookup is D0's recovery lookup. It sets pd.replay when a promoted
// record is to be replayed, returns an error to answer with, or neither when
// the request goes on (to the D3 claim lookup and verify). It fails closed: a
// store error is a 503, never a replay and never a free answer.
func (s *Server) recoveryLookup(ctx context.Context, q *quote, pd *paid) error {
	rec, err := s.recoveries.Recovery(ctx, pd.rkey)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil
	case err != nil:
		return s.storeDown(err)
	}
	if rec.Fingerprint != pd.fp() {
		s.metrics.payment("conflict")
		return idempotencyConflict()
	}
	pd.found = &rec
	switch rec.State {
	case store.RecoveryInFlight:
		// The fresh path's BeginRecovery decides: a twin gets 409, a dead
		// holder's record is taken over.
		return nil
	case store.RecoveryStaged:
		if pd.key == rec.PaymentKey {
			return nil // the same payment: the D3 claim lookup resolves it
		}
		c, err := s.payments.Payment(ctx, rec.PaymentKey)
		switch {
		case err == nil && c.State == store.PaymentSettled && c.TxHash != "":
			// Settled since (the reconciler): promote now, after settlement,
			// by operation id.
			if rec, err = s.recoveries.PromoteRecovery(ctx, rec.OperationID, rec.Fingerprint,
				store.SettlementRef{Network: s.cfg.Network, TxHash: c.TxHash}, s.cfg.RecoveryTTL, s.cfg.RecoveryReplays); err != nil {
				return s.storeDown(err)
			}
		case err == nil, !errors.Is(err, store.ErrNotFound):
			if err != nil {
				return s.storeDown(err)
			}
			return s.stagedElsewhere(c)
		default:
			// The claim is gone: released (the payment never settled), or
			// expired past its authorization's validBefore, when the chain
			// has the last word. A payment it shows made is promoted, as
			// the reconciler would have, and replayed with proof below; the
			// buyer's new authorization never buys the same answer twice.
			tx, paid, err := s.paidByKey(ctx, rec.PaymentKey, rec.Amount)
			if err != nil {
				// Not known: dropping the record now could sell its paid
				// answer a second time. The buyer retries.
				return s.recoveryFailed(err)
			}
			if !paid {
				// Nothing may be replayed from this record.
				if err := s.recoveries.AbandonRecovery(ctx, rec.Key, rec.Fence); err != nil && !errors.Is(err, store.ErrNotFound) {
					return s.storeDown(err)
				}
				return nil
			}
			if rec, err = s.recoveries.PromoteRecovery(ctx, rec.OperationID, rec.Fingerprint,
				store.SettlementRef{Network: s.cfg.Network, TxHash: tx}, s.cfg.RecoveryTTL, s.cfg.RecoveryReplays); err != nil {
				return s.storeDown(err)
			}
		}
	case store.RecoveryPromoted:
	}
	if err := s.proveControl(ctx, q, pd, &rec); err != nil {
		s.metrics.payment("unproven")
		return err
	}
	r, took, err := s.recoveries.TakeReplay(ctx, rec.Key, rec.OperationID)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil // expired in between: a new purchase
	case err != nil:
		return s.storeDown(err)
	case !took:
		return nil // the budget is spent: a new purchase
	}
	pd.replay = &r
	return nil
}

// authConfirmer is an optional facilitator extra: it tells from the chain
// whether an authorization known only by its parts paid (DECISIONS D5).
type authConfirmer interface {
	ConfirmAuthorization(ctx context.Context, network string, asset common.Address, a exact.Authorization) (tx string, paid bool, err error)
}

// paidByKey tells from the chain whether the authorization of claim key
// paid amount to our payTo, and returns the transaction. An error means the
// chain could not tell: the facilitator cannot read it (a remote one without
// a node), or the read failed. A key of another network or asset, as a
// configuration change leaves behind, never paid this gateway.
func (s *Server) paidByKey(ctx context.Context, key, amount string) (string, bool, error) {
	network, asset, from, nonce, err := exact.ParseKey(key)
	value, vok := new(big.Int).SetString(amount, 10)
	if err != nil || !vok {
		return "", false, fmt.Errorf("recorded payment %q of %q: %w", key, amount, errors.Join(err, errors.New("unreadable")))
	}
	if network != s.cfg.Network || asset != s.asset {
		return "", false, nil
	}
	c, ok := s.fac.(authConfirmer)
	if !ok {
		return "", false, errors.New("the facilitator cannot read the chain")
	}
	tx, paid, err := c.ConfirmAuthorization(ctx, network, asset, exact.Authorization{From: from, To: s.payTo, Value: value, Nonce: nonce})
	if err != nil {
		return "", false, fmt.Errorf("confirm a recorded payment from the chain: %w", err)
	}
	return tx, paid && tx != "", nil
}

// proveControl is D15: the same PAYMENT-SIGNATURE that paid, before its
// validBefore, or a fresh authorization from the same payer for the same
// amount, verified and never settled. Anything else is the normal 402.
//
// The authorization that paid is spent: without a payment identifier (the
// record is keyed by that authorization) no fresh authorization could prove
// anything, so a failed proof is 409 payment_already_used, never a 402 that
// would invite the buyer to pay for the same call again (D29).
func (s *Server) proveControl(ctx context.Context, q *quote, pd *paid, rec *store.Recovery) error {
	a := &pd.auth.Authorization
	if pd.key == rec.PaymentKey {
		noID := strings.HasPrefix(pd.rkey, "auth:")
		switch {
		case proofHash(pd.auth) != rec.ProofHash && noID:
			return alreadyUsed()
		case proofHash(pd.auth) != rec.ProofHash:
			return s.challenge(q, "payment does not prove control of this payment identifier", nil)
		case a.ValidBefore.Cmp(big.NewInt(s.now().Unix())) <= 0 && noID:
			return alreadyUsed()
		case a.ValidBefore.Cmp(big.NewInt(s.now().Unix())) <= 0:
			return s.challenge(q, string(x402.ReasonEVMValidBefore), errors.New("the paying authorization expired"))
		}
		return nil
	}
	if !strings.EqualFold(pd.payer, rec.Payer) || a.Value.String() != rec.Amount {
		return s.challenge(q, "payment does not prove control of this payment identifier", nil)
	}
	vr, err := s.fac.Verify(ctx, pd.payload, q.offer)
	if err != nil {
		return &apiError{Status: http.StatusBadGateway, Type: "server_error", Code: "facilitator_unavailable",
			Message: "the payment could not be verified right now; nothing was charged", Err: err}
	}
	if !vr.IsValid {
		return s.challenge(q, string(vr.InvalidReason), errors.New(vr.InvalidMessage))
	}
	return nil
}

// beginRecovery begins pd's record before the upstream is called. On any
// failure the payment claim is released and nothing is charged.
func (s *Server) beginRecovery(ctx context.Context, q *quote, pd *paid) error {
	if err := s.openRecovery(ctx, q, pd); err != nil {
		s.release(pd)
		return err
	}
	return nil
}

// openRecovery begins pd's record, and leaves pd's claim as it is whatever
// happens.
func (s *Server) openRecovery(ctx context.Context, q *quote, pd *paid) error {
	a := &pd.auth.Authorization
	expires := s.now().Add(s.cfg.RecoveryTTL)
	if pd.claim.ExpiresAt.After(expires) {
		expires = pd.claim.ExpiresAt // a pending settlement may resolve until then
	}
	rec, held, err := s.recoveries.BeginRecovery(ctx, store.Recovery{
		Key: pd.rkey, Payer: pd.payer, Fingerprint: pd.fp(), OperationID: newOperationID(),
		PaymentKey: pd.key, ProofHash: proofHash(pd.auth), ProofUntil: time.Unix(a.ValidBefore.Int64(), 0),
		Amount: a.Value.String(), Owner: s.cfg.Owner, ExpiresAt: expires,
	}, s.cfg.ClaimLease)
	if err != nil {
		return s.storeDown(err)
	}
	if !held {
		switch {
		case rec.Fingerprint != pd.fp():
			s.metrics.payment("conflict")
			return idempotencyConflict()
		case rec.State == store.RecoveryStaged && rec.PaymentKey != pd.key:
			c, err := s.payments.Payment(ctx, rec.PaymentKey)
			if err != nil && !errors.Is(err, store.ErrNotFound) {
				return s.storeDown(err)
			}
			return s.stagedElsewhere(c)
		default:
			s.metrics.payment("in_flight")
			return operationInFlight()
		}
	}
	pd.rec = &rec
	q.op = rec.OperationID
	return nil
}

// stageRecovery stages the upstream's answer under pd's record. A failure
// abandons the record: the buyer still gets the live answer, but no replay.
func (s *Server) stageRecovery(pd *paid, resp store.RecordedResponse) {
	if pd.rec == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.recoveries.StageRecovery(ctx, pd.rec.Key, pd.rec.Fence, resp); err != nil {
		s.log.Error("stage recovery", "record", pd.rec.Key, "bytes", len(resp.Body), "err", err)
		s.abandonRecovery(pd)
	}
}

// promoteRecovery is the after-settle step: it promotes pd's staged record,
// by its operation id, with the settlement's transaction.
func (s *Server) promoteRecovery(pd *paid, sr *x402.SettleResponse) {
	if pd.rec == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ref := store.SettlementRef{Network: s.cfg.Network, TxHash: sr.Transaction}
	if _, err := s.recoveries.PromoteRecovery(ctx, pd.rec.OperationID, pd.fp(), ref, s.cfg.RecoveryTTL, s.cfg.RecoveryReplays); err != nil {
		s.log.Error("promote recovery", "record", pd.rec.Key, "err", err)
		s.abandonRecovery(pd)
	}
}

// abandonRecovery drops pd's record: its payment did not settle (seed 002
// scenario 1), so a retry meets the paywall again.
func (s *Server) abandonRecovery(pd *paid) {
	if pd.rec == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.recoveries.AbandonRecovery(ctx, pd.rec.Key, pd.rec.Fence); err != nil && !errors.Is(err, store.ErrNotFound) {
		s.log.Error("abandon recovery", "record", pd.rec.Key, "err", err)
	}
	pd.rec = nil
}

// promoteStaged promotes the record of a pending payment that its retry just
// saw settle (D3), and returns its operation id, or "".
func (s *Server) promoteStaged(ctx context.Context, pd *paid, sr *x402.SettleResponse) string {
	if s.recoveries == nil {
		return ""
	}
	rec, err := s.recoveries.Recovery(ctx, pd.rkey)
	if err != nil || rec.PaymentKey != pd.key || rec.State == store.RecoveryInFlight {
		return ""
	}
	ref := store.SettlementRef{Network: s.cfg.Network, TxHash: sr.Transaction}
	if _, err := s.recoveries.PromoteRecovery(ctx, rec.OperationID, pd.fp(), ref, s.cfg.RecoveryTTL, s.cfg.RecoveryReplays); err != nil {
		s.log.Error("promote a pending payment's recovery", "record", rec.Key, "err", err)
		return ""
	}
	return rec.OperationID
}

// serveRecorded replays a promoted record: rendered from the recorded answer
// and settlement as the live answer was, marked X-Llm4agents-Replay: promoted.
// The upstream is not called and nothing is settled.
func (s *Server) serveRecorded(w http.ResponseWriter, q *quote, rec *store.Recovery) error {
	if rec.Response == nil {
		return errors.New("promoted record without a response") // the schema forbids it
	}
	q.op = rec.OperationID
	sr := &x402.SettleResponse{Success: true, Transaction: rec.Settlement.TxHash, Network: rec.Settlement.Network, Payer: rec.Payer}
	body, err := s.render(w.Header(), q, sr, rec.Response)
	if err != nil {
		return err
	}
	s.metrics.payment("replayed_promoted")
	w.Header().Set(replayHeader, "promoted")
	w.WriteHeader(rec.Response.Status)
	_, _ = w.Write(body) // #nosec G705 -- a recorded JSON or SSE body, sent with its own content type, not HTML
	return nil
}

// render sets the headers of a paid answer and returns its body: the upstream's
// JSON annotated with the cost, or its SSE text with the usage event annotated,
// exactly as the live answer was written.
func (s *Server) render(h http.Header, q *quote, sr *x402.SettleResponse, r *store.RecordedResponse) ([]byte, error) {
	if err := paidHeaders(h, sr); err != nil {
		return nil, err
	}
	if q.op != "" {
		h.Set(operationHeader, q.op)
	}
	h.Set("Content-Type", r.ContentType)
	if r.ContentType == "text/event-stream" {
		setCostHeaders(h, s.cost(q, sr, nil))
		h.Set("X-Accel-Buffering", "no")
		return s.annotateSSE(r.Body, q, sr), nil
	}
	var u struct {
		Usage *chat.Usage `json:"usage"`
	}
	if json.Unmarshal(r.Body, &u) != nil {
		u.Usage = nil // no usage: the annotation says so
	}
	ci := s.cost(q, sr, u.Usage)
	setCostHeaders(h, ci)
	if r.Status != http.StatusOK {
		return r.Body, nil
	}
	return annotate(r.Body, ci), nil
}
