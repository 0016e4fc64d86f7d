package gateway_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llm4agents/llm4agents/internal/facilitator"
	"github.com/llm4agents/llm4agents/internal/gateway"
	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/x402"
)

// lostSettleFac settles for real and then answers the gateway with an error,
// as when another replica's settlement of the same authorization raced this
// one, or the facilitator's answer was lost on the way.
type lostSettleFac struct{ *facilitator.Facilitator }

func (f *lostSettleFac) Settle(ctx context.Context, p *x402.PaymentPayload, req x402.PaymentRequirements) (*x402.SettleResponse, error) {
	if _, err := f.Facilitator.Settle(ctx, p, req); err != nil {
		return nil, err
	}
	return nil, errors.New("the facilitator's answer was lost")
}

// TestSettleErrorResolvedFromChain: an error from settle is no verdict (D1).
// The claim holder asks the chain, which shows the payment, and serves the
// answer it was paid for: never a 402 for a payment that went through.
func TestSettleErrorResolvedFromChain(t *testing.T) {
	e := newEnvWith(t, func(f *facilitator.Facilitator) gateway.Facilitator { return &lostSettleFac{Facilitator: f} })
	c, _ := e.payer(buyerIdx)
	resp := e.post(t, c, chatBody, nil)
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d, body %.300s; want 200: the chain shows the payment", resp.StatusCode, body)
	}
	sr, err := x402.DecodeSettleResponse(resp.Header.Get(x402.HeaderPaymentResponse))
	if err != nil || !sr.Success || sr.Transaction == "" {
		t.Errorf("PAYMENT-RESPONSE = %+v, %v; want success with the chain's transaction", sr, err)
	}
	if n := e.up.Calls(); n != 1 {
		t.Errorf("%d upstream calls, want 1", n)
	}
}

// lateAnswerFac settles for real but answers only after the whole of the
// gateway's settle work should have ended (its deadline for the facilitator,
// plus the 5 s the gateway keeps for what follows), as a facilitator that
// does not honour its deadline would.
type lateAnswerFac struct{ *facilitator.Facilitator }

func (f *lateAnswerFac) Settle(ctx context.Context, p *x402.PaymentPayload, req x402.PaymentRequirements) (*x402.SettleResponse, error) {
	sr, err := f.Facilitator.Settle(context.WithoutCancel(ctx), p, req)
	<-ctx.Done()
	time.Sleep(5*time.Second + 100*time.Millisecond)
	return sr, err
}

// TestLateSettleRecorded: the facilitator's success arrives after the
// gateway's settle deadline. The claim must still be recorded settled:
// left held, it would be taken over once its lease ended, and the same
// payment would buy a second answer.
func TestLateSettleRecorded(t *testing.T) {
	e := newEnvSettle(t, 100*time.Millisecond, func(f *facilitator.Facilitator) gateway.Facilitator { return &lateAnswerFac{Facilitator: f} })
	h := e.signedHeader(t, chatBody, buyerIdx)
	resp := e.post(t, http.DefaultClient, chatBody, http.Header{x402.HeaderPaymentSignature: {h}})
	body := readAll(t, resp)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d, body %.300s; want 200", resp.StatusCode, body)
	}
	sr, err := x402.DecodeSettleResponse(resp.Header.Get(x402.HeaderPaymentResponse))
	if err != nil || !sr.Success {
		t.Fatalf("PAYMENT-RESPONSE = %+v, %v; want success", sr, err)
	}
	c, err := e.db.Payment(t.Context(), e.claimKey(t, h))
	if err != nil || c.State != store.PaymentSettled || !strings.EqualFold(c.TxHash, sr.Transaction) {
		t.Errorf("claim = %s with %s, %v; want settled with %s", c.State, c.TxHash, err, sr.Transaction)
	}
}

// deadlineFac records how long its caller gave each settle.
type deadlineFac struct {
	*facilitator.Facilitator
	mu   sync.Mutex
	left []time.Duration
}

func (f *deadlineFac) Settle(ctx context.Context, p *x402.PaymentPayload, req x402.PaymentRequirements) (*x402.SettleResponse, error) {
	if d, ok := ctx.Deadline(); ok {
		f.mu.Lock()
		f.left = append(f.left, time.Until(d))
		f.mu.Unlock()
	}
	return f.Facilitator.Settle(ctx, p, req)
}

// TestSettleLeavesTimeAfter: the facilitator is given the settle timeout,
// not the whole of the gateway's settle work, so that confirming, recording
// and crediting after its answer still have their seconds.
func TestSettleLeavesTimeAfter(t *testing.T) {
	fac := &deadlineFac{}
	e := newEnvSettle(t, 2*time.Second, func(f *facilitator.Facilitator) gateway.Facilitator { fac.Facilitator = f; return fac })
	h := e.signedHeader(t, chatBody, buyerIdx)
	resp := e.post(t, http.DefaultClient, chatBody, http.Header{x402.HeaderPaymentSignature: {h}})
	if body := readAll(t, resp); resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d, body %.300s; want 200", resp.StatusCode, body)
	}
	fac.mu.Lock()
	defer fac.mu.Unlock()
	if len(fac.left) != 1 || fac.left[0] > 2*time.Second {
		t.Errorf("the facilitator was given %v; want one settle with at most the 2 s settle timeout", fac.left)
	}
}
