package gateway

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/x402"
)

// Staged answers (DECISIONS D3, D14). When a settlement answers
// settlement_pending, the answer the buyer paid for is staged with the claim:
// the upstream's JSON body, or the whole SSE text of a stream (every
// "data: ...\n\n" event through [DONE]), as the upstream sent it. A later
// request that re-presents the same authorization (same claim key, D4) is
// looked up before verify (D0) and settles again with the same payload: the
// facilitator resolves the broadcast settlement from the chain and gives its
// one success:true to the first later call that observes it (D5). Once paid,
// the staged answer is served, annotated with the cost like a live one, with
// X-Llm4agents-Replay: staged; the upstream is never called again and nothing
// is charged again.

// replayHeader marks an answer served from a staged response.
const replayHeader = "X-Llm4agents-Replay"

// stage keeps r with pd's claim. A failure is logged: the buyer still gets
// settlement_pending, and the claim stays pending for the reconciler.
func (s *Server) stage(pd *paid, r store.StagedResponse) {
	r.Fingerprint = pd.fp()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.claims().StagePayment(ctx, pd.key, pd.claim.Fence, r); err != nil {
		s.log.Error("stage response", "key", pd.key, "bytes", len(r.Body), "err", err)
	}
}

// lookup is the recovery lookup of D0, before verify: a claim on this
// authorization that is pending, or settled with a staged answer, is answered
// here. It returns the claim when it is pending with a staged answer (to
// resolve) or held by a request (to judge: admit), an error to answer with,
// or neither when the request goes on to verify.
func (s *Server) lookup(ctx context.Context, key string) (*store.PaymentClaim, error) {
	c, err := s.payments.Payment(ctx, key)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, nil
	case err != nil:
		return nil, &apiError{Status: http.StatusServiceUnavailable, Type: "server_error", Code: "store_unavailable",
			Message: "the payment could not be looked up; nothing was charged", Err: err}
	}
	switch {
	case c.State == store.PaymentPending && c.Staged != nil:
		return &c, nil
	case c.State == store.PaymentPending:
		// Pending with nothing staged (yet): the settlement is still open.
		s.metrics.payment("replayed")
		return nil, s.inUse(c)
	case c.State == store.PaymentSettled && c.Staged != nil:
		// Replaying a settled answer needs proof of control (D15): not here.
		s.metrics.payment("replayed")
		return nil, s.inUse(c)
	case c.State == store.PaymentHeld:
		return &c, nil
	default:
		return nil, nil
	}
}

// resolveStaged settles a pending claim's authorization again with the same
// payload and offer, and serves the staged answer once it is paid. Still
// pending -> 409 settlement_pending with Retry-After; failed -> 402 with
// PAYMENT-RESPONSE, the claim left as it is (the reconciler resolves it from
// the chain). The upstream is never called.
func (s *Server) resolveStaged(w http.ResponseWriter, q *quote, pd *paid) error {
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.SettleTimeout+5*time.Second)
	defer cancel()
	start := s.now()
	sr, err := s.settleCall(ctx, pd, q)
	s.metrics.settleLatency(s.now().Sub(start))
	paid := func(tx string) *x402.SettleResponse {
		return &x402.SettleResponse{Success: true, Transaction: tx, Network: s.cfg.Network, Payer: pd.payer}
	}
	switch {
	case err != nil:
		// No verdict (D29): the chain may still tell; otherwise the claim
		// stays pending for the next retry.
		s.log.Warn("settle a pending payment again", "key", pd.key, "err", err)
		tx, yes := s.confirm(ctx, pd, q)
		if !yes {
			return s.inUse(pd.claim)
		}
		sr = paid(tx)
	case sr.Success && sr.Transaction == "":
		// Never recorded settled, nor promoted, without the transaction.
		tx, yes := s.confirm(ctx, pd, q)
		if !yes {
			return s.inUse(pd.claim)
		}
		sr = paid(tx)
	case sr.Success:
	case sr.ErrorReason == x402.ReasonSettlementPending:
		if sr.Transaction != "" && sr.Transaction != pd.claim.TxHash {
			s.record(ctx, pd, store.PaymentPending, sr.Transaction) // a replacement transaction
		}
		return s.inUse(pd.claim)
	case sr.ErrorReason == x402.ReasonEVMNonceAlreadyUsed:
		tx, yes, known := s.confirmKnown(ctx, pd, q)
		switch {
		case yes:
			sr = paid(tx)
		case sr.Transaction == "" || !known:
			// Another call holds the settlement (alive, or dead until its
			// lease ends), or the chain cannot be read now: not known yet.
			// The claim stays pending.
			return s.inUse(pd.claim)
		default:
			// Spent by a transaction that did not pay us: the answer stays
			// withheld, the claim pending, never settled.
			return settleRefusal(sr, s.settleMessage(sr))
		}
	default:
		// A facilitator that keeps no record of its earlier broadcast (the
		// official one, or ours on another store) may answer a failed
		// re-broadcast of an authorization its first one spent: the chain
		// decides before the refusal.
		tx, yes := s.confirm(ctx, pd, q)
		if !yes {
			s.metrics.payment("failed")
			return settleRefusal(sr, s.settleMessage(sr))
		}
		sr = paid(tx)
	}
	s.record(ctx, pd, store.PaymentSettled, sr.Transaction)
	s.metrics.payment("recovered")
	// The after-settle step of the pending request's recovery record.
	q.op = s.promoteStaged(ctx, pd, sr)
	return s.serveStaged(w, q, sr, pd.claim.Staged)
}

// serveStaged writes a staged answer as a paid one: PAYMENT-RESPONSE, the cost
// headers and annotation (added now, with the settling transaction), and the
// replay marker.
func (s *Server) serveStaged(w http.ResponseWriter, q *quote, sr *x402.SettleResponse, st *store.StagedResponse) error {
	body, err := s.render(w.Header(), q, sr, &store.RecordedResponse{Status: st.Status, ContentType: st.ContentType, Body: st.Body})
	if err != nil {
		return err
	}
	w.Header().Set(replayHeader, "staged")
	w.WriteHeader(st.Status)
	_, _ = w.Write(body) // #nosec G705 -- a staged JSON or SSE body, sent with its own content type, not HTML
	return nil
}

// annotateSSE annotates the usage event of a staged SSE text as stream does
// live; every other byte stays as staged.
func (s *Server) annotateSSE(text []byte, q *quote, sr *x402.SettleResponse) []byte {
	out := make([]byte, 0, len(text)+512)
	for len(text) > 0 {
		ev, rest, found := bytes.Cut(text, []byte("\n\n"))
		text = rest
		if data, ok := bytes.CutPrefix(ev, []byte("data: ")); ok && !bytes.Equal(data, []byte("[DONE]")) {
			ev = append([]byte("data: "), s.withCost(data, q, sr)...)
		}
		out = append(out, ev...)
		if found {
			out = append(out, '\n', '\n')
		}
	}
	return out
}

// sseText is the SSE text of a stream as staged: each event as
// "data: <event>\n\n". It stops growing past store.MaxStagedBody.
type sseText struct {
	buf  bytes.Buffer
	over bool
}

func (t *sseText) add(data []byte) {
	if t.over {
		return
	}
	if t.buf.Len()+len(data)+8 > store.MaxStagedBody {
		t.over = true
		return
	}
	t.buf.WriteString("data: ")
	t.buf.Write(data)
	t.buf.WriteString("\n\n")
}
