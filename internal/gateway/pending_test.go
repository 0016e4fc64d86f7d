package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"math/big"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/llm4agents/llm4agents/internal/facilitator"
	"github.com/llm4agents/llm4agents/internal/gateway"
	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/x402"
	"github.com/llm4agents/llm4agents/x402/evm/exact"
)

// pendingFac answers settlement_pending, broadcasting nothing, to the first
// `pending` settle calls, and settles for real from then on. Verify, Supported
// and Confirm are the real facilitator's.
type pendingFac struct {
	*facilitator.Facilitator
	mu      sync.Mutex
	pending int
	settles int
}

func (f *pendingFac) Settle(ctx context.Context, p *x402.PaymentPayload, req x402.PaymentRequirements) (*x402.SettleResponse, error) {
	f.mu.Lock()
	f.settles++
	if f.pending > 0 {
		f.pending--
		f.mu.Unlock()
		return &x402.SettleResponse{Success: false, ErrorReason: x402.ReasonSettlementPending, Network: req.Network}, nil
	}
	f.mu.Unlock()
	return f.Facilitator.Settle(ctx, p, req)
}

func (f *pendingFac) calls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.settles
}

func newPendingEnv(t *testing.T, pending int) (*env, *pendingFac) {
	t.Helper()
	var pf *pendingFac
	e := newEnvWith(t, func(f *facilitator.Facilitator) gateway.Facilitator {
		pf = &pendingFac{Facilitator: f, pending: pending}
		return pf
	})
	return e, pf
}

// claimKey is the claim key (D4) of a PAYMENT-SIGNATURE.
func (e *env) claimKey(t *testing.T, h string) string {
	t.Helper()
	p, err := x402.DecodePaymentPayload(h)
	if err != nil {
		t.Fatal(err)
	}
	auth, err := exact.ParsePayload(p.Payload)
	if err != nil {
		t.Fatal(err)
	}
	return exact.Key(network, e.chain.Token, auth.Authorization.From, auth.Authorization.Nonce)
}

// moved returns what payTo received and the buyer spent since before.
func (e *env) moved(t *testing.T, payTo0, buyer0 *big.Int) (received, spent int64) {
	t.Helper()
	received = new(big.Int).Sub(e.chain.BalanceOf(t, e.chain.Addr(payToIdx)), payTo0).Int64()
	spent = new(big.Int).Sub(buyer0, e.chain.BalanceOf(t, e.chain.Addr(buyerIdx))).Int64()
	return received, spent
}

const streamBody = `{"model":"demo","stream":true,"messages":[{"role":"user","content":"Say hello"}],"max_tokens":32}`

// TestPendingSettlementStaged (D3, D14): a settlement answered pending stages
// the answer; re-presenting the same PAYMENT-SIGNATURE receives it once mined,
// with no second upstream call and one transfer; a third presentation is 409.
func TestPendingSettlementStaged(t *testing.T) {
	for _, tc := range []struct {
		name   string
		body   string
		ctype  string
		verify func(t *testing.T, staged, served []byte, tx string)
	}{
		{"json", chatBody, "application/json", checkJSONReplay},
		{"stream", streamBody, "text/event-stream", checkSSEReplay},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, pf := newPendingEnv(t, 1)
			h := e.signedHeader(t, tc.body, buyerIdx)
			key := e.claimKey(t, h)
			payTo0 := e.chain.BalanceOf(t, e.chain.Addr(payToIdx))
			buyer0 := e.chain.BalanceOf(t, e.chain.Addr(buyerIdx))
			hdr := http.Header{x402.HeaderPaymentSignature: {h}}

			// 1. Pending: 402 settlement_pending, the answer staged.
			resp := e.post(t, http.DefaultClient, tc.body, hdr)
			b := readAll(t, resp)
			if resp.StatusCode != http.StatusPaymentRequired || errorCode(t, b) != "settlement_pending" {
				t.Fatalf("first: %d %s", resp.StatusCode, b)
			}
			sr, err := x402.DecodeSettleResponse(resp.Header.Get(x402.HeaderPaymentResponse))
			if err != nil || sr.Success || sr.ErrorReason != x402.ReasonSettlementPending {
				t.Fatalf("first PAYMENT-RESPONSE %+v, %v", sr, err)
			}
			if resp.Header.Get(x402.HeaderPaymentRequired) != "" {
				t.Error("a pending settlement's 402 carries PAYMENT-REQUIRED")
			}
			c, err := e.db.Payment(t.Context(), key)
			if err != nil {
				t.Fatal(err)
			}
			if c.State != store.PaymentPending || c.Staged == nil || c.Staged.Status != 200 || c.Staged.ContentType != tc.ctype || len(c.Staged.Body) == 0 {
				t.Fatalf("claim after pending = %+v (staged %+v)", c, c.Staged)
			}
			staged := c.Staged.Body
			if e.up.Calls() != 1 {
				t.Fatalf("upstream calls = %d", e.up.Calls())
			}
			if rcv, spent := e.moved(t, payTo0, buyer0); rcv != 0 || spent != 0 {
				t.Fatalf("moved %d/%d before the settlement", rcv, spent)
			}

			if c.Staged.Fingerprint == "" {
				t.Errorf("staged answer has no request fingerprint")
			}

			// 1b. The same payment for another request at the same price (D14):
			// a conflict, never the staged answer, never the upstream.
			other := strings.Replace(tc.body, `"content":"`, `"content":"other `, 1)
			resp = e.post(t, http.DefaultClient, other, hdr)
			if b := readAll(t, resp); resp.StatusCode != http.StatusConflict || errorCode(t, b) != "idempotency_conflict" {
				t.Errorf("other request, same payment: %d %s", resp.StatusCode, b)
			}
			// The same request re-encoded (key order, whitespace) is the same request.
			var reenc map[string]any
			if err := json.Unmarshal([]byte(tc.body), &reenc); err != nil {
				t.Fatal(err)
			}
			reencoded, _ := json.MarshalIndent(reenc, "", "  ")

			// 2. The same payment again: settled now, the staged answer served.
			resp = e.post(t, http.DefaultClient, string(reencoded), hdr)
			served := readAll(t, resp)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("retry: %d %s", resp.StatusCode, served)
			}
			sr, err = x402.DecodeSettleResponse(resp.Header.Get(x402.HeaderPaymentResponse))
			if err != nil || !sr.Success || sr.Transaction == "" {
				t.Fatalf("retry PAYMENT-RESPONSE %+v, %v", sr, err)
			}
			for h, want := range map[string]string{
				"X-Llm4agents-Replay": "staged", "Content-Type": tc.ctype, "Cache-Control": "private",
				"X-Llm4agents-Charged": "10000", "X-Should-Retry": "false",
			} {
				if got := resp.Header.Get(h); got != want {
					t.Errorf("%s = %q, want %q", h, got, want)
				}
			}
			tc.verify(t, staged, served, sr.Transaction)
			if e.up.Calls() != 1 {
				t.Errorf("upstream calls after the retry = %d, want 1", e.up.Calls())
			}
			if rcv, spent := e.moved(t, payTo0, buyer0); rcv != 10000 || spent != 10000 {
				t.Errorf("payTo received %d, buyer spent %d; want one transfer of 10000", rcv, spent)
			}
			if c, err := e.db.Payment(t.Context(), key); err != nil || c.State != store.PaymentSettled || c.TxHash != sr.Transaction {
				t.Errorf("claim after the retry = %+v, %v", c, err)
			}

			// 3. Once more: the answer was promoted when the retry saw the
			// settlement; the same PAYMENT-SIGNATURE replays it (D15), the
			// same bytes, nothing settled, no upstream call.
			resp = e.post(t, http.DefaultClient, tc.body, hdr)
			b = readAll(t, resp)
			if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Llm4agents-Replay") != "promoted" || !bytes.Equal(b, served) {
				t.Errorf("third: %d %s", resp.StatusCode, b)
			}
			if e.up.Calls() != 1 || pf.calls() != 2 {
				t.Errorf("after the third: upstream calls %d, settles %d; want 1, 2", e.up.Calls(), pf.calls())
			}
			if rcv, _ := e.moved(t, payTo0, buyer0); rcv != 10000 {
				t.Errorf("payTo received %d after the third, want 10000", rcv)
			}
		})
	}
}

// checkJSONReplay: the served body is the staged one with x_llm4agents added.
func checkJSONReplay(t *testing.T, staged, served []byte, tx string) {
	t.Helper()
	s := bytes.TrimRight(staged, " \t\r\n")
	if !bytes.HasPrefix(served, bytes.TrimSpace(s[:len(s)-1])) {
		t.Errorf("served body is not the staged one:\nstaged %s\nserved %s", staged, served)
	}
	var got struct {
		X struct {
			Charged     string `json:"charged"`
			Transaction string `json:"transaction"`
		} `json:"x_llm4agents"`
	}
	if err := json.Unmarshal(served, &got); err != nil || got.X.Charged != "10000" || got.X.Transaction != tx {
		t.Errorf("served annotation %+v, %v: %s", got.X, err, served)
	}
}

// checkSSEReplay: event for event the staged text, the usage event annotated.
func checkSSEReplay(t *testing.T, staged, served []byte, tx string) {
	t.Helper()
	se, ve := bytes.Split(staged, []byte("\n\n")), bytes.Split(served, []byte("\n\n"))
	if len(se) != len(ve) || len(se) < 4 || string(se[len(se)-2]) != "data: [DONE]" {
		t.Fatalf("events: staged %q, served %q", staged, served)
	}
	annotated := 0
	for i := range se {
		if bytes.Equal(se[i], ve[i]) {
			continue
		}
		annotated++
		if !bytes.HasPrefix(ve[i], bytes.TrimSuffix(se[i], []byte("}"))) || !bytes.Contains(ve[i], []byte(`"transaction":"`+tx+`"`)) ||
			!bytes.Contains(se[i], []byte(`"usage"`)) {
			t.Errorf("event %d: staged %s, served %s", i, se[i], ve[i])
		}
	}
	if annotated != 1 {
		t.Errorf("%d events annotated, want the usage event alone", annotated)
	}
}

// TestPendingSettlementStillPending: a retry while the settlement is still
// pending is 409 with Retry-After, without the upstream; a later one is served.
func TestPendingSettlementStillPending(t *testing.T) {
	e, pf := newPendingEnv(t, 2)
	h := e.signedHeader(t, chatBody, buyerIdx)
	hdr := http.Header{x402.HeaderPaymentSignature: {h}}
	payTo0 := e.chain.BalanceOf(t, e.chain.Addr(payToIdx))
	buyer0 := e.chain.BalanceOf(t, e.chain.Addr(buyerIdx))

	resp := e.post(t, http.DefaultClient, chatBody, hdr)
	if b := readAll(t, resp); resp.StatusCode != http.StatusPaymentRequired || errorCode(t, b) != "settlement_pending" {
		t.Fatalf("first: %d %s", resp.StatusCode, b)
	}
	resp = e.post(t, http.DefaultClient, chatBody, hdr)
	b := readAll(t, resp)
	if resp.StatusCode != http.StatusConflict || errorCode(t, b) != "settlement_pending" || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("retry while pending: %d %s (Retry-After %q)", resp.StatusCode, b, resp.Header.Get("Retry-After"))
	}
	if e.up.Calls() != 1 || pf.calls() != 2 {
		t.Fatalf("upstream calls %d, settles %d; want 1, 2", e.up.Calls(), pf.calls())
	}
	if c, err := e.db.Payment(t.Context(), e.claimKey(t, h)); err != nil || c.State != store.PaymentPending || c.Staged == nil {
		t.Fatalf("claim while pending = %+v, %v", c, err)
	}
	resp = e.post(t, http.DefaultClient, chatBody, hdr)
	b = readAll(t, resp)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Llm4agents-Replay") != "staged" {
		t.Fatalf("retry once mined: %d %s", resp.StatusCode, b)
	}
	if e.up.Calls() != 1 {
		t.Errorf("upstream calls = %d, want 1", e.up.Calls())
	}
	if rcv, spent := e.moved(t, payTo0, buyer0); rcv != 10000 || spent != 10000 {
		t.Errorf("payTo received %d, buyer spent %d; want one transfer of 10000", rcv, spent)
	}
}
