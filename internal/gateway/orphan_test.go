package gateway_test

import (
	"bytes"
	"context"
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
	"github.com/llm4agents/llm4agents/x402/evm/exact"
)

// Orphaned payments (internal/paywall/orphan.go): a request that dies past the broadcast of
// its settlement. Replica 0 plays the request that dies: its facilitator
// hook blocks, before or after a real settlement, and never lets its handler
// answer within the test (a process killed there, as far as the store and
// the chain can tell). Replica 1 is the replica the buyer retries on; with a
// skew its clocks run a minute ahead, past the dead request's leases.

// leaseSkew is past the claim lease of a rig with skews (upstream 5 s +
// settle 10 s + 10 s), and short of the authorization's validity.
const leaseSkew = time.Minute

// stall makes replica rp's next settle block, before it reaches the
// facilitator (before) or after a successful one (after), and returns a
// channel closed once it blocks and a function that lets it go.
func stall(t *testing.T, rp *replica, before bool) (<-chan struct{}, func()) {
	t.Helper()
	blocked, release := make(chan struct{}), make(chan struct{})
	var once, done sync.Once
	hook := func() {
		once.Do(func() { close(blocked) })
		<-release
	}
	rp.fac.set(func(f *hookFac) {
		if before {
			f.before = hook
		} else {
			f.after = hook
		}
	})
	return blocked, func() { done.Do(func() { close(release) }) }
}

// dying sends a paid request to rp whose settle stalls (stall), waits until it
// blocked, and returns. The request is let go and waited for when the test
// ends, so the server closes.
func dying(t *testing.T, rp *replica, body, payment string, beforeSettle bool) {
	t.Helper()
	blocked, release := stall(t, rp, beforeSettle)
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, rp.srv.URL+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(x402.HeaderPaymentSignature, payment)
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
		}
	}()
	t.Cleanup(func() {
		cancel()
		release()
		<-ended
	})
	select {
	case <-blocked:
	case <-ended:
		t.Fatal("the dying request ended before its settlement stalled")
	case <-time.After(30 * time.Second):
		t.Fatal("the dying request never reached its settlement")
	}
}

// keyOf is the claim key (D4) of a PAYMENT-SIGNATURE on the rig's token.
func (rg *rig) keyOf(t *testing.T, h string) string {
	t.Helper()
	p, err := x402.DecodePaymentPayload(h)
	if err != nil {
		t.Fatal(err)
	}
	auth, err := exact.ParsePayload(p.Payload)
	if err != nil {
		t.Fatal(err)
	}
	return exact.Key(network, rg.chain.Token, auth.Authorization.From, auth.Authorization.Nonce)
}

// settledBy returns the successful PAYMENT-RESPONSE of an answer.
func settledBy(t *testing.T, a answer) *x402.SettleResponse {
	t.Helper()
	sr, err := x402.DecodeSettleResponse(a.Header.Get(x402.HeaderPaymentResponse))
	if err != nil || !sr.Success || sr.Transaction == "" {
		t.Fatalf("PAYMENT-RESPONSE %+v, %v; want a success with its transaction", sr, err)
	}
	return sr
}

// TestOrphanPaidStagedReplayed: the request died after its settlement was
// mined, its answer staged. The retry with the same PAYMENT-SIGNATURE (and
// the same id, when one was sent) gets that answer as a promoted replay, with
// the chain's transaction, whether or not the dead request's lease ended: no
// second settlement, no second upstream call, and the claim recorded settled
// with that transaction. The same payment for another request, and a forged
// signature over the same nonce, get nothing.
func TestOrphanPaidStagedReplayed(t *testing.T) {
	eachRigBackend(t, func(t *testing.T, be rigBackend) { orphanPaidStagedReplayed(t, be) })
}

func orphanPaidStagedReplayed(t *testing.T, be rigBackend) {
	for _, tc := range []struct {
		name string
		id   string
		skew time.Duration
	}{
		{"no id, lease running", "", 0},
		{"no id, lease over", "", leaseSkew},
		{"id, lease over", testID, leaseSkew},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rg := newRig(t, rigOpts{backend: be, replicas: 2, skews: []time.Duration{0, tc.skew}})
			dead, rp := rg.r(0), rg.r(1)
			h := rg.pay(t, chatBody, buyerIdx, tc.id, nil)
			key := rg.keyOf(t, h)
			dying(t, dead, chatBody, h, false)
			if got := rg.received(t); got != 10000 {
				t.Fatalf("payTo received %d once the dead request settled, want 10000", got)
			}
			if r, err := rg.recordOf(t, rp, buyerIdx, tc.id, key); err != nil || r.State != store.RecoveryStaged {
				t.Fatalf("record the dead request left = %+v, %v; want staged", r, err)
			}

			// Hostile first: nothing of the staged answer without the proof.
			p, _ := x402.DecodePaymentPayload(h)
			pl, err := exact.ParsePayload(p.Payload)
			if err != nil {
				t.Fatal(err)
			}
			nonce := pl.Authorization.Nonce.Hex()
			// A forged signature over the spent authorization: with an id, the
			// 402 that asks for a fresh one as proof; without, nothing could
			// prove control, and the authorization is spent (never an offer).
			if tc.id == "" {
				rp.refused(t, chatBody, rg.forge(t, chatBody, buyerIdx, attacker, tc.id, &nonce), http.StatusConflict, "payment_already_used")
			} else {
				rp.refused(t, chatBody, rg.forge(t, chatBody, buyerIdx, attacker, tc.id, &nonce), http.StatusPaymentRequired, "payment_not_proven")
			}
			rp.refused(t, otherBody, h, http.StatusConflict, "")

			a, b := rp.do(t, chatBody, h)
			if a.StatusCode != http.StatusOK || a.Header.Get("X-Llm4agents-Replay") != "promoted" || !bytes.Contains(b, []byte(`"content"`)) {
				t.Fatalf("retry: %d replay=%q %s", a.StatusCode, a.Header.Get("X-Llm4agents-Replay"), b)
			}
			sr := settledBy(t, a)
			if !bytes.Contains(b, []byte(sr.Transaction)) {
				t.Errorf("the replay's annotation does not name %s: %s", sr.Transaction, b)
			}
			if rg.up.Calls() != 1 || rp.fac.calls() != 0 || rg.received(t) != 10000 {
				t.Errorf("upstream calls %d, settles on the retry's replica %d, received %d; want 1, 0, 10000",
					rg.up.Calls(), rp.fac.calls(), rg.received(t))
			}
			if c, err := rp.db.Payment(t.Context(), key); err != nil || c.State != store.PaymentSettled || !strings.EqualFold(c.TxHash, sr.Transaction) {
				t.Errorf("claim after the retry = %+v, %v; want settled with %s", c, err, sr.Transaction)
			}
			// Again: the same bytes, still nothing new.
			if again := rp.replayed(t, chatBody, h); !bytes.Equal(again, b) {
				t.Errorf("second replay differs:\n%s\n%s", again, b)
			}
			if rg.up.Calls() != 1 || rg.received(t) != 10000 {
				t.Errorf("after the second replay: upstream %d, received %d", rg.up.Calls(), rg.received(t))
			}
		})
	}
}

// TestOrphanUnpaidStaged: the request died with its answer staged and
// nothing on chain (between staging and broadcast). While its lease runs,
// the retry is 409 operation_in_flight with Retry-After, never the upstream
// and never a settlement; once it ended, the retry takes the claim over and
// settles the staged answer, served with X-Llm4agents-Replay: staged: one
// transfer, one upstream call. The dead request, let go, settles nothing more.
func TestOrphanUnpaidStaged(t *testing.T) {
	eachRigBackend(t, func(t *testing.T, be rigBackend) { orphanUnpaidStaged(t, be) })
}

func orphanUnpaidStaged(t *testing.T, be rigBackend) {
	for _, over := range []bool{false, true} {
		name := map[bool]string{false: "lease running", true: "lease over"}[over]
		t.Run(name, func(t *testing.T) {
			skew := time.Duration(0)
			if over {
				skew = leaseSkew
			}
			rg := newRig(t, rigOpts{backend: be, replicas: 2, skews: []time.Duration{0, skew}})
			dead, rp := rg.r(0), rg.r(1)
			h := rg.pay(t, chatBody, buyerIdx, "", nil)
			dying(t, dead, chatBody, h, true)
			if !over {
				a := rp.refused(t, chatBody, h, http.StatusConflict, "operation_in_flight")
				if a.Header.Get("Retry-After") == "" {
					t.Error("409 operation_in_flight without Retry-After")
				}
				if rg.up.Calls() != 1 || rp.fac.calls() != 0 || rg.received(t) != 0 {
					t.Errorf("upstream %d, settles %d, received %d; want 1, 0, 0", rg.up.Calls(), rp.fac.calls(), rg.received(t))
				}
				return
			}
			a, b := rp.do(t, chatBody, h)
			if a.StatusCode != http.StatusOK || a.Header.Get("X-Llm4agents-Replay") != "staged" || !bytes.Contains(b, []byte(`"content"`)) {
				t.Fatalf("retry: %d replay=%q %s", a.StatusCode, a.Header.Get("X-Llm4agents-Replay"), b)
			}
			sr := settledBy(t, a)
			if rg.up.Calls() != 1 || rp.fac.calls() != 1 || rg.received(t) != 10000 {
				t.Errorf("upstream %d, settles %d, received %d; want 1, 1, 10000", rg.up.Calls(), rp.fac.calls(), rg.received(t))
			}
			if c, err := rp.db.Payment(t.Context(), rg.keyOf(t, h)); err != nil || c.State != store.PaymentSettled || !strings.EqualFold(c.TxHash, sr.Transaction) {
				t.Errorf("claim = %+v, %v", c, err)
			}
			rp.replayed(t, chatBody, h)
		})
	}
}

// TestOrphanStreamPaidNothingStaged: a stream died past its broadcast, before
// its end, so nothing was staged. Once its lease ended, the retry takes the
// claim over and calls the upstream again, serving the answer as paid by the
// transaction the chain shows, never settling again: the buyer pays once and
// gets one answer (the dead call is the operator's loss). While the lease
// runs it is 409 operation_in_flight.
func TestOrphanStreamPaidNothingStaged(t *testing.T) {
	eachRigBackend(t, orphanStreamPaidNothingStaged)
}

func orphanStreamPaidNothingStaged(t *testing.T, be rigBackend) {
	rg := newRig(t, rigOpts{backend: be, replicas: 3, skews: []time.Duration{0, 0, leaseSkew}})
	dead, early, late := rg.r(0), rg.r(1), rg.r(2)
	h := rg.pay(t, streamBody, buyerIdx, "", nil)
	dying(t, dead, streamBody, h, false)
	if rg.received(t) != 10000 {
		t.Fatalf("payTo received %d, want 10000", rg.received(t))
	}
	early.refused(t, streamBody, h, http.StatusConflict, "operation_in_flight")

	a, b := late.do(t, streamBody, h)
	if a.StatusCode != http.StatusOK || a.Header.Get("X-Llm4agents-Replay") != "" || !strings.HasSuffix(strings.TrimSpace(string(b)), "data: [DONE]") {
		t.Fatalf("retry: %d replay=%q %s", a.StatusCode, a.Header.Get("X-Llm4agents-Replay"), b)
	}
	sr := settledBy(t, a)
	if rg.up.Calls() != 2 || late.fac.calls()+early.fac.calls() != 0 || rg.received(t) != 10000 {
		t.Errorf("upstream %d, settles %d, received %d; want 2, 0, 10000", rg.up.Calls(), late.fac.calls()+early.fac.calls(), rg.received(t))
	}
	if c, err := late.db.Payment(t.Context(), rg.keyOf(t, h)); err != nil || c.State != store.PaymentSettled || !strings.EqualFold(c.TxHash, sr.Transaction) {
		t.Errorf("claim = %+v, %v", c, err)
	}
	// Recorded and promoted like any paid stream: a replay, no third call.
	late.replayed(t, streamBody, h)
	if rg.up.Calls() != 2 || rg.received(t) != 10000 {
		t.Errorf("after the replay: upstream %d, received %d", rg.up.Calls(), rg.received(t))
	}
}

// TestUnresolvedSettlementNeverSettledWithoutTx (the nonce_already_used bug):
// another settle call holds the facilitator's record of the authorization, so
// the facilitator answers nonce_already_used with no transaction, and the
// chain shows nothing paid. The claim must stay pending, never settled
// without a transaction; the buyer gets 409 settlement_pending with
// Retry-After, the answer staged. Once that other call is gone, the retry
// settles and receives the staged answer: one transfer, one upstream call.
func TestUnresolvedSettlementNeverSettledWithoutTx(t *testing.T) {
	for _, body := range []string{chatBody, streamBody} {
		t.Run(map[bool]string{false: "json", true: "stream"}[body == streamBody], func(t *testing.T) {
			e := newEnvWith(t, func(f *facilitator.Facilitator) gateway.Facilitator { return f })
			h := e.signedHeader(t, body, buyerIdx)
			key := e.claimKey(t, h)
			p, _ := x402.DecodePaymentPayload(h)
			pl, err := exact.ParsePayload(p.Payload)
			if err != nil {
				t.Fatal(err)
			}
			a := pl.Authorization
			other, held, err := e.db.ClaimSettlement(t.Context(), store.Settlement{
				Key: key, Network: network, Asset: e.chain.Token.Hex(), Payer: a.From.Hex(), PayTo: a.To.Hex(),
				Amount: a.Value.String(), Owner: "another settle call",
			}, time.Hour)
			if err != nil || !held {
				t.Fatalf("claim the settlement as another call: %v, %v", held, err)
			}
			hdr := http.Header{x402.HeaderPaymentSignature: {h}}

			resp := e.post(t, http.DefaultClient, body, hdr)
			b := readAll(t, resp)
			if resp.StatusCode != http.StatusConflict || errorCode(t, b) != "settlement_pending" || resp.Header.Get("Retry-After") == "" {
				t.Fatalf("first: %d %s (Retry-After %q)", resp.StatusCode, b, resp.Header.Get("Retry-After"))
			}
			c, err := e.db.Payment(t.Context(), key)
			if err != nil || c.State != store.PaymentPending || c.TxHash != "" || c.Staged == nil {
				t.Fatalf("claim after nonce_already_used = %+v, %v; want pending, no transaction, the answer staged", c, err)
			}
			// Still in flight elsewhere: still pending, still nothing.
			resp = e.post(t, http.DefaultClient, body, hdr)
			if b := readAll(t, resp); resp.StatusCode != http.StatusConflict || errorCode(t, b) != "settlement_pending" {
				t.Fatalf("retry while in flight: %d %s", resp.StatusCode, b)
			}
			if c, err := e.db.Payment(t.Context(), key); err != nil || c.State != store.PaymentPending {
				t.Fatalf("claim after the retry = %+v, %v", c, err)
			}
			if e.up.Calls() != 1 {
				t.Fatalf("upstream calls = %d, want 1", e.up.Calls())
			}

			if err := e.db.ReleaseSettlement(t.Context(), key, other.Fence); err != nil {
				t.Fatal(err)
			}
			resp = e.post(t, http.DefaultClient, body, hdr)
			b = readAll(t, resp)
			if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Llm4agents-Replay") != "staged" {
				t.Fatalf("retry once free: %d %s", resp.StatusCode, b)
			}
			sr, err := x402.DecodeSettleResponse(resp.Header.Get(x402.HeaderPaymentResponse))
			if err != nil || !sr.Success || sr.Transaction == "" {
				t.Fatalf("PAYMENT-RESPONSE %+v, %v", sr, err)
			}
			if c, err := e.db.Payment(t.Context(), key); err != nil || c.State != store.PaymentSettled || c.TxHash != sr.Transaction {
				t.Errorf("claim = %+v, %v; want settled with %s", c, err, sr.Transaction)
			}
			if e.up.Calls() != 1 {
				t.Errorf("upstream calls = %d, want 1", e.up.Calls())
			}
			if got := e.chain.BalanceOf(t, e.chain.Addr(payToIdx)).Int64(); got != 10000 {
				t.Errorf("payTo received %d, want 10000", got)
			}
		})
	}
}
