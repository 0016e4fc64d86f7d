package gateway

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/x402"
)

// Orphaned payments: a request that died (a crash, a kill) past the
// broadcast of its settlement leaves its payment claim held, its lease
// running out, and its recovery record staged with the answer it got from the
// upstream (the handler stages before it settles). The buyer paid once and
// has no answer; re-presenting the same PAYMENT-SIGNATURE (and the same
// payment-identifier, when one was sent) must give it that answer, without a
// second settlement and without a second upstream call.
//
// A retry that finds such a claim asks the chain (the facilitator's Confirm,
// DECISIONS D1, D5) whether the authorization paid the offer:
//
//   - paid, with the answer staged: the record is promoted by its operation
//     id with the chain's transaction (the R3 rules of recovery.go: only after
//     settlement, only with a settlement reference, fingerprint checked) and
//     replayed (X-Llm4agents-Replay: promoted); the claim is recorded settled
//     with that transaction.
//   - not paid, with the answer staged: a live holder is still settling (409
//     operation_in_flight with Retry-After); a dead one's claim is taken over
//     once its lease ended, and the staged answer is settled now with the
//     same payload, as a pending one is (staged.go): the facilitator resumes
//     its own record and never broadcasts twice (D5).
//   - paid, nothing staged (a stream dies past its broadcast before its end):
//     once the dead holder's lease ended, the claim is taken over and the
//     upstream called again, the answer served as paid by the transaction the
//     chain shows and never settled again. The buyer pays once and gets one
//     answer; the dead request's upstream call is the operator's loss.
//   - not paid, nothing staged (a crash before the upstream answered): the
//     normal path, 409 operation_in_flight until the lease ends, then a fresh
//     purchase with the same authorization, settled once.

// stagedHere reports whether the recovery record the lookup found holds this
// request's answer (the fingerprint was checked by the lookup), staged under
// this very authorization.
func (pd *paid) stagedHere() bool {
	r := pd.found
	return r != nil && r.State == store.RecoveryStaged && r.PaymentKey == pd.key && r.Response != nil
}

// resumeOrphan answers a request whose answer another request staged under
// the same authorization and whose claim that request still holds, alive or
// dead.
func (s *Server) resumeOrphan(w http.ResponseWriter, q *quote, pd *paid) error {
	// The work below may settle: it outlives the client, as settle does.
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.SettleTimeout+5*time.Second)
	defer cancel()
	rec := pd.found
	if err := s.proveControl(ctx, q, pd, rec); err != nil {
		s.metrics.payment("unproven")
		return err
	}
	if tx, ok := s.confirm(ctx, pd, q); ok {
		return s.replayOrphan(ctx, w, q, pd, tx)
	}
	claim, held, err := s.claimPayment(ctx, pd)
	if err != nil {
		return err
	}
	if !held {
		if claim.State == store.PaymentHeld {
			// Its holder is alive, settling: it answers its own client, and
			// a retry once it recorded the outcome gets the replay.
			s.metrics.payment("in_flight")
			return operationInFlight()
		}
		s.metrics.payment("replayed")
		return s.inUse(claim) // it moved on while we looked
	}
	// The holder died before the chain showed its payment: settle its staged
	// answer now, under the claim taken over.
	pd.claim, pd.rec = claim, rec
	q.op = rec.OperationID
	staged := store.StagedResponse{Status: rec.Response.Status, ContentType: rec.Response.ContentType, Body: rec.Response.Body}
	sr, out := s.settle(pd, q)
	switch out {
	case settledPaid:
		s.promoteRecovery(pd, sr)
		return s.serveStaged(w, q, sr, &staged)
	case settledPending, settledUnknown:
		s.stage(pd, staged) // a retry resolves it as D3 says
		return s.unsettled(sr, out)
	default:
		return s.unsettled(sr, out) // settle released the claim and abandoned the record
	}
}

// replayOrphan serves the staged answer of a payment the chain shows made by
// transaction tx: the claim is recorded settled, the record promoted and
// replayed.
func (s *Server) replayOrphan(ctx context.Context, w http.ResponseWriter, q *quote, pd *paid, tx string) error {
	// The claim's fence is the one the lookup read: the write is a fact from
	// the chain, the one its holder, if alive, writes too (the same values
	// again are a no-op); a holder that moved on in between fences it out.
	if err := s.claims().UpdatePayment(ctx, pd.key, pd.claim.Fence, store.PaymentSettled, tx); err != nil && !errors.Is(err, store.ErrFenced) {
		s.log.Warn("record an orphaned payment settled", "key", pd.key, "err", err)
	}
	rec := pd.found
	ref := store.SettlementRef{Network: s.cfg.Network, TxHash: tx}
	if _, err := s.recoveries.PromoteRecovery(ctx, rec.OperationID, pd.fp(), ref, s.cfg.RecoveryTTL, s.cfg.RecoveryReplays); err != nil {
		return s.recoveryFailed(err)
	}
	r, took, err := s.recoveries.TakeReplay(ctx, rec.Key, rec.OperationID)
	switch {
	case err != nil:
		return s.recoveryFailed(err)
	case !took:
		// Promoted just now with a full budget, spent by concurrent copies
		// of this payment (each of which got the answer): the same refusal
		// as any copy past the budget, never a store failure.
		s.metrics.payment("replayed")
		return replayBudgetSpent()
	}
	return s.serveRecorded(w, q, &r)
}

// adoptPaid handles an authorization that verify found spent with nothing
// staged for this request. When the chain shows it paid the offer and no
// live request holds its claim (its holder's lease ended, or nobody here
// claimed it: a claim a store lost, a transfer the payer sent
// themselves), this request takes the claim and sets pd.prepaid: the
// upstream is called and the answer served as paid, never settled again.
// A live holder gets the 409 of a payment in flight. When the chain does not
// show it paid, it returns nil with pd.prepaid unset, and admit refuses the
// payment without an offer (refuse).
func (s *Server) adoptPaid(ctx context.Context, q *quote, pd *paid) error {
	tx, ok := s.confirm(ctx, pd, q)
	if !ok {
		return nil
	}
	if r := pd.found; r != nil && r.State == store.RecoveryInFlight && r.LeaseUntil.After(s.now()) {
		// The dead request's record outlives its claim by a moment: taking
		// the claim over now would only lock the buyer out for another lease.
		s.metrics.payment("in_flight")
		return operationInFlight()
	}
	claim, held, err := s.claimPayment(ctx, pd)
	if err != nil {
		return err
	}
	if !held {
		if claim.State == store.PaymentHeld {
			s.metrics.payment("in_flight")
			return operationInFlight()
		}
		s.metrics.payment("replayed")
		return s.inUse(claim)
	}
	pd.claim = claim
	if s.recoveries != nil && !claimSwitchedOff() {
		// On failure the claim stays held under this request's lease: the
		// authorization is spent, so it must never be released; a retry
		// takes it over again once the lease ends.
		if err := s.openRecovery(ctx, q, pd); err != nil {
			return err
		}
	}
	pd.prepaid = &x402.SettleResponse{Success: true, Transaction: tx, Network: s.cfg.Network, Payer: pd.payer}
	return nil
}

// replayBudgetSpent refuses a copy of a payment whose recorded answer was
// replayed as many times as allowed (limits.recovery_replays). Nothing is
// charged and nothing is served.
func replayBudgetSpent() error {
	return &apiError{Status: http.StatusConflict, Type: "invalid_request_error", Code: "replay_budget_spent",
		Message: "the answer to this payment was already replayed as many times as allowed; nothing was charged",
		Header:  http.Header{"X-Should-Retry": {"false"}}}
}

// recoveryFailed is the answer when a paid answer could not be recovered
// now (the store failed): never a free answer, and the buyer is told to
// retry with the same payment.
func (s *Server) recoveryFailed(err error) error {
	s.metrics.payment("store_down")
	return &apiError{Status: http.StatusServiceUnavailable, Type: "server_error", Code: "recovery_unavailable",
		Message: "the answer to this paid request could not be recovered right now; retry with the same payment",
		Header:  http.Header{"X-Should-Retry": {"false"}, "Retry-After": {"2"}}, Err: err}
}
