package gateway_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llm4agents/llm4agents/internal/facilitator"
	"github.com/llm4agents/llm4agents/internal/gateway"
	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/x402"
	"github.com/llm4agents/llm4agents/x402/evm/exact"
)

// A payment is never offered a second time (D29). A copy
// of a payment another request holds is a 409, and a settle answer lost on
// the way back from a remote facilitator keeps the claim pending, so that
// the buyer's retry gets the answer it paid for.

// slowAnswerFac settles for real at once and, on its first call only,
// answers after late: a remote facilitator whose answer is lost on the way
// back (its one success went to a caller that was still waiting), or comes
// after the gateway stopped waiting for it.
type slowAnswerFac struct {
	*facilitator.Facilitator
	late  time.Duration
	calls atomic.Int32
}

func (f *slowAnswerFac) Settle(ctx context.Context, p *x402.PaymentPayload, req x402.PaymentRequirements) (*x402.SettleResponse, error) {
	sr, err := f.Facilitator.Settle(context.WithoutCancel(ctx), p, req)
	if f.calls.Add(1) == 1 {
		time.Sleep(f.late)
	}
	return sr, err
}

// remote serves fac over HTTP as `llm4agents facilitator` does and returns
// the client a gateway in remote mode uses.
func remote(t *testing.T, fac facilitator.API) *facilitator.Client {
	t.Helper()
	srv := httptest.NewServer(facilitator.NewHandler(fac, discard()))
	t.Cleanup(srv.Close)
	return facilitator.NewClient(srv.URL, nil)
}

// chainConfirming is a remote facilitator's client with a chain confirmer,
// as serve wires one when the gateway has a node. The confirmer is set once
// the chain exists.
type chainConfirming struct {
	*facilitator.Client
	chain *facilitator.ChainConfirmer
}

func (c *chainConfirming) Confirm(ctx context.Context, p *x402.PaymentPayload, req x402.PaymentRequirements) (string, bool, error) {
	return c.chain.Confirm(ctx, p, req)
}

// TestRemoteSettleTimeoutKeepsClaim: the remote facilitator settles but its
// answer comes after the gateway's settle timeout, and the gateway has no
// node to ask. The first answer is a 409 that asks for a retry of the same
// payment, never a 402 offer, and the claim stays pending. The retry cannot
// be served: our facilitator gave its one success (D5) to the lost answer
// and now says the authorization is used, which without a node the gateway
// cannot check, so it withholds the answer. Never a second charge, never a
// second upstream call, never an offer (docs/CONFIG.md, "A remote
// facilitator and lost answers": set a node).
func TestRemoteSettleTimeoutKeepsClaim(t *testing.T) {
	slow := &slowAnswerFac{late: 1500 * time.Millisecond}
	e := newEnvSettle(t, 300*time.Millisecond, func(f *facilitator.Facilitator) gateway.Facilitator {
		slow.Facilitator = f
		return remote(t, slow)
	})
	h := e.signedHeader(t, chatBody, buyerIdx)
	payTo0, buyer0 := e.chain.BalanceOf(t, e.chain.Addr(payToIdx)), e.chain.BalanceOf(t, e.chain.Addr(buyerIdx))
	pay := http.Header{x402.HeaderPaymentSignature: {h}}

	resp := e.post(t, http.DefaultClient, chatBody, pay)
	body := readAll(t, resp)
	if resp.StatusCode != http.StatusConflict || errorCode(t, body) != "settlement_pending" || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("first answer %d %s; want 409 settlement_pending with Retry-After", resp.StatusCode, body)
	}
	if resp.Header.Get(x402.HeaderPaymentRequired) != "" {
		t.Fatal("the lost answer came with a PAYMENT-REQUIRED offer: the buyer would pay twice")
	}
	c, err := e.db.Payment(t.Context(), e.claimKey(t, h))
	if err != nil || c.State != store.PaymentPending {
		t.Fatalf("claim = %+v, %v; want pending", c, err)
	}

	time.Sleep(slow.late) // the remote's first answer is gone
	for range 2 {
		resp = e.post(t, http.DefaultClient, chatBody, pay)
		body = readAll(t, resp)
		if resp.StatusCode == http.StatusOK || resp.Header.Get(x402.HeaderPaymentRequired) != "" {
			t.Fatalf("retry %d %.300s; want a refusal without an offer", resp.StatusCode, body)
		}
	}
	if received, spent := e.moved(t, payTo0, buyer0); received != 10000 || spent != 10000 || e.up.Calls() != 1 {
		t.Errorf("received %d, spent %d, upstream %d; want one transfer of 10000 and one upstream call", received, spent, e.up.Calls())
	}
	if c, err := e.db.Payment(t.Context(), e.claimKey(t, h)); err != nil || c.State != store.PaymentPending {
		t.Errorf("claim = %+v, %v; want still pending", c, err)
	}
}

// TestRemoteSettleTimeoutConfirmedFromChain: the same lost answer, with a
// gateway that has a node: it reads the payment from the chain and serves
// the first request.
func TestRemoteSettleTimeoutConfirmedFromChain(t *testing.T) {
	// The settle timeout leaves the transfer time to be mined, even on a
	// loaded machine, before the gateway stops waiting and asks the chain.
	slow := &slowAnswerFac{late: 3 * time.Second}
	fac := &chainConfirming{}
	e := newEnvSettle(t, 2*time.Second, func(f *facilitator.Facilitator) gateway.Facilitator {
		slow.Facilitator = f
		fac.Client = remote(t, slow)
		return fac
	})
	fac.chain = facilitator.NewChainConfirmer(e.chain.Client, 0)
	h := e.signedHeader(t, chatBody, buyerIdx)
	payTo0, buyer0 := e.chain.BalanceOf(t, e.chain.Addr(payToIdx)), e.chain.BalanceOf(t, e.chain.Addr(buyerIdx))

	resp := e.post(t, http.DefaultClient, chatBody, http.Header{x402.HeaderPaymentSignature: {h}})
	body := readAll(t, resp)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d %.300s; want 200: the chain shows the payment", resp.StatusCode, body)
	}
	if sr, err := x402.DecodeSettleResponse(resp.Header.Get(x402.HeaderPaymentResponse)); err != nil || !sr.Success || sr.Transaction == "" {
		t.Errorf("PAYMENT-RESPONSE = %+v, %v; want success naming the transaction", sr, err)
	}
	if received, spent := e.moved(t, payTo0, buyer0); received != 10000 || spent != 10000 || e.up.Calls() != 1 {
		t.Errorf("received %d, spent %d, upstream %d; want one transfer of 10000 and one upstream call", received, spent, e.up.Calls())
	}
}

// heldFac settles for real and then holds its answer until released, as a
// request does that settled and has not recorded it yet.
type heldFac struct {
	*facilitator.Facilitator
	settled chan struct{} // closed once the first settlement is on chain
	release chan struct{}
	once    sync.Once
}

func (f *heldFac) Settle(ctx context.Context, p *x402.PaymentPayload, req x402.PaymentRequirements) (*x402.SettleResponse, error) {
	sr, err := f.Facilitator.Settle(ctx, p, req)
	f.once.Do(func() { close(f.settled) })
	<-f.release
	return sr, err
}

// TestCopyWhileHolderRecords (item 1): a copy of a payment arrives after the
// winning transaction is mined and before its request recorded it. Verify
// finds the nonce used; whether or not the chain can show the payment yet,
// the claim is another request's: the copy gets 409 operation_in_flight
// with Retry-After (D29), never a 402 offer, and the holder serves its answer. One
// transfer, one upstream call.
func TestCopyWhileHolderRecords(t *testing.T) {
	for _, tc := range []struct {
		name string
		hide bool // the gateway cannot read the chain (a lagging node, a remote facilitator)
		code string
	}{
		{"chain shows it", false, "operation_in_flight"},
		{"chain cannot tell yet", true, "operation_in_flight"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			held := &heldFac{settled: make(chan struct{}), release: make(chan struct{})}
			// A store that keeps no recovery records: the copy meets the
			// claim, not the holder's staged answer.
			e := newEnvStore(t, 10*time.Second, func(f *facilitator.Facilitator) gateway.Facilitator {
				held.Facilitator = f
				if tc.hide {
					return struct{ gateway.Facilitator }{held} // no Confirm
				}
				return held
			}, nil, func(p store.Payments) store.Payments { return struct{ store.Payments }{p} })
			h := e.signedHeader(t, chatBody, buyerIdx)
			payTo0, buyer0 := e.chain.BalanceOf(t, e.chain.Addr(payToIdx)), e.chain.BalanceOf(t, e.chain.Addr(buyerIdx))
			pay := http.Header{x402.HeaderPaymentSignature: {h}}

			first := make(chan int, 1)
			go func() {
				resp := e.post(t, http.DefaultClient, chatBody, pay)
				readAll(t, resp)
				first <- resp.StatusCode
			}()
			select {
			case <-held.settled:
			case <-time.After(20 * time.Second):
				t.Fatal("the first request never settled")
			}
			resp := e.post(t, http.DefaultClient, chatBody, pay)
			body := readAll(t, resp)
			close(held.release)
			if resp.StatusCode != http.StatusConflict || errorCode(t, body) != tc.code || resp.Header.Get("Retry-After") == "" {
				t.Errorf("copy: %d %s; want 409 %s with Retry-After", resp.StatusCode, body, tc.code)
			}
			if resp.Header.Get(x402.HeaderPaymentRequired) != "" {
				t.Error("the copy came with a PAYMENT-REQUIRED offer: the buyer would pay twice")
			}
			if code := <-first; code != http.StatusOK {
				t.Errorf("the holder got %d, want 200", code)
			}
			if received, spent := e.moved(t, payTo0, buyer0); received != 10000 || spent != 10000 || e.up.Calls() != 1 {
				t.Errorf("received %d, spent %d, upstream %d; want one transfer of 10000 and one upstream call", received, spent, e.up.Calls())
			}
		})
	}
}

// TestTopUpHeldByDeadRequestCredited (item 3): the request of a top-up
// settled it and never came back (its replica died past the broadcast; here
// it hangs), its claim still under lease. The buyer's retry with the same
// payment is credited from the chain at once, as a chat retry is answered,
// not after the lease; and once.
func TestTopUpHeldByDeadRequestCredited(t *testing.T) {
	held := &heldFac{settled: make(chan struct{}), release: make(chan struct{})}
	e := newTopUpEnv(t, func(f *facilitator.Facilitator) gateway.Facilitator { held.Facilitator = f; return held }, nil)
	t.Cleanup(func() { close(held.release) }) // before the server closes
	h := e.topUpSigned(t, "1000000", buyerIdx, nil)

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.srv.URL+"/v1/credits/topup", strings.NewReader(topUpBody("1000000")))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(x402.HeaderPaymentSignature, h)
	go func() {
		if resp, err := http.DefaultClient.Do(req); err == nil {
			_ = resp.Body.Close() // the first buyer is gone; its answer does not count
		}
	}()
	select {
	case <-held.settled:
	case <-time.After(20 * time.Second):
		t.Fatal("the first top-up never settled")
	}
	cancel()

	start := time.Now()
	resp, b := e.topUp(t, "1000000", h)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("retry: %d %s; want the credit at once", resp.StatusCode, b)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("the retry took %v", d)
	}
	if avail, _ := e.credit(t, buyerIdx); avail != 1_000_000 || e.credits(t, buyerIdx) != 1 {
		t.Errorf("after the retry: %d available, %d credits; want 1000000 once", avail, e.credits(t, buyerIdx))
	}
	if resp, b := e.topUp(t, "1000000", h); resp.StatusCode != http.StatusOK {
		t.Errorf("a later copy: %d %s", resp.StatusCode, b)
	}
	if avail, _ := e.credit(t, buyerIdx); avail != 1_000_000 || e.credits(t, buyerIdx) != 1 {
		t.Errorf("after a later copy: %d available, %d credits; want 1000000 once", avail, e.credits(t, buyerIdx))
	}
}

// TestSpentPaymentNeverOfferedAgain: without a payment identifier the record
// of a paid answer is keyed by the authorization that paid it, so nothing
// but that very PAYMENT-SIGNATURE, before its validBefore, proves control.
// Once it has expired, or with other signature bytes, the same spent
// authorization is 409 payment_already_used: a 402 offer there would invite
// the client to pay for the same call a second time.
func TestSpentPaymentNeverOfferedAgain(t *testing.T) {
	eachRigBackend(t, func(t *testing.T, be rigBackend) {
		rg := newRig(t, rigOpts{backend: be})
		rp := rg.r(0)
		h := rg.pay(t, chatBody, buyerIdx, "", nil)
		rp.paid(t, chatBody, h)
		p, err := x402.DecodePaymentPayload(h)
		if err != nil {
			t.Fatal(err)
		}
		auth, err := exact.ParsePayload(p.Payload)
		if err != nil {
			t.Fatal(err)
		}
		rp.gw.SetNow(func() time.Time { return time.Unix(auth.Authorization.ValidBefore.Int64(), 0).Add(time.Second) })
		a := rp.refused(t, chatBody, h, http.StatusConflict, "payment_already_used")
		if a.Header.Get(x402.HeaderPaymentRequired) != "" {
			t.Error("an expired, spent payment was answered with a PAYMENT-REQUIRED offer")
		}
		if rg.up.Calls() != 1 || rg.settles() != 1 {
			t.Errorf("upstream %d, settles %d; want 1, 1", rg.up.Calls(), rg.settles())
		}
	})
}

// TestExpiredClaimPaidNotSoldAgain: a settlement answered pending mined
// after all, and nobody retried with that payment until its claim was
// forgotten (its authorization's validBefore plus the margin). The buyer's
// retry under the same payment-identifier with a new authorization must not
// buy the same answer again: the chain shows the first payment, so the
// staged answer is promoted and replayed, with the new authorization as
// proof of control and never settled. One transfer, one upstream call.
//
// While the chain cannot be read the retry is refused with 503
// recovery_unavailable: not knowing whether the record's payment mined is
// no reason to sell its answer again.
func TestExpiredClaimPaidNotSoldAgain(t *testing.T) {
	eachRigBackend(t, func(t *testing.T, be rigBackend) {
		// Replica 1's store runs past the first claim's expiry.
		rg := newRig(t, rigOpts{backend: be, replicas: 2, skews: []time.Duration{0, 20 * time.Minute}, storeOnly: true})
		first, later := rg.r(0), rg.r(1)
		first.fac.set(func(f *hookFac) { f.minedPending = true })
		h := rg.pay(t, chatBody, buyerIdx, testID, nil)
		if a, b := first.do(t, chatBody, h); a.StatusCode == http.StatusOK {
			t.Fatalf("a pending settlement was served: %s", b)
		}
		if got := rg.received(t); got != 10000 {
			t.Fatalf("payTo received %d, want the 10000 the pending settlement mined", got)
		}
		if _, err := later.db.Payment(t.Context(), rg.keyOf(t, h)); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("the later store still sees the claim: %v", err)
		}

		// While the chain cannot be read, the record's payment is unknown:
		// never a fresh purchase of the same answer, never a free one; the
		// buyer retries.
		later.fac.set(func(f *hookFac) { f.chainDown = true })
		a, b := later.do(t, chatBody, rg.pay(t, chatBody, buyerIdx, testID, nil))
		if a.StatusCode != http.StatusServiceUnavailable || errorCode(t, b) != "recovery_unavailable" || a.Header.Get("Retry-After") == "" {
			t.Fatalf("retry with the chain unreadable: %d %.300s; want 503 recovery_unavailable with Retry-After", a.StatusCode, b)
		}
		if rg.up.Calls() != 1 || later.fac.calls() != 0 {
			t.Fatalf("upstream %d, later settles %d with the chain unreadable; want 1, 0", rg.up.Calls(), later.fac.calls())
		}
		later.fac.set(func(f *hookFac) { f.chainDown = false })

		a, b = later.do(t, chatBody, rg.pay(t, chatBody, buyerIdx, testID, nil))
		if a.StatusCode != http.StatusOK || a.Header.Get("X-Llm4agents-Replay") != "promoted" {
			t.Fatalf("retry with a new authorization: %d replay=%q %.300s; want the staged answer, promoted", a.StatusCode, a.Header.Get("X-Llm4agents-Replay"), b)
		}
		if rg.up.Calls() != 1 || rg.received(t) != 10000 || later.fac.calls() != 0 {
			t.Errorf("upstream %d, received %d, later settles %d; want 1, 10000, 0", rg.up.Calls(), rg.received(t), later.fac.calls())
		}
	})
}

// failedWithTxFac settles for real and answers a failure that names the
// transaction, as some facilitators answer a receipt that came late.
type failedWithTxFac struct{ *facilitator.Facilitator }

func (f *failedWithTxFac) Settle(ctx context.Context, p *x402.PaymentPayload, req x402.PaymentRequirements) (*x402.SettleResponse, error) {
	sr, err := f.Facilitator.Settle(ctx, p, req)
	if err != nil || !sr.Success {
		return sr, err
	}
	return &x402.SettleResponse{Success: false, ErrorReason: "settle_exact_node_failure", Transaction: sr.Transaction, Network: req.Network}, nil
}

// TestFailureNamingTxKeepsClaim: a settle failure that names a transaction
// is no proof that nothing was paid. With the chain readable the payment is
// found and the answer served; without, the claim stays pending with that
// transaction (409 with Retry-After, never released for a second use, never
// a 402 offer).
func TestFailureNamingTxKeepsClaim(t *testing.T) {
	for _, tc := range []struct {
		name  string
		chain bool
	}{{"chain readable", true}, {"chain unreadable", false}} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnvWith(t, func(f *facilitator.Facilitator) gateway.Facilitator {
				if tc.chain {
					return &failedWithTxFac{f}
				}
				return struct{ gateway.Facilitator }{&failedWithTxFac{f}} // no Confirm
			})
			h := e.signedHeader(t, chatBody, buyerIdx)
			resp := e.post(t, http.DefaultClient, chatBody, http.Header{x402.HeaderPaymentSignature: {h}})
			body := readAll(t, resp)
			c, err := e.db.Payment(t.Context(), e.claimKey(t, h))
			switch {
			case tc.chain && resp.StatusCode != http.StatusOK:
				t.Errorf("%d %s; want 200: the chain shows the payment", resp.StatusCode, body)
			case !tc.chain && (resp.StatusCode != http.StatusConflict || resp.Header.Get(x402.HeaderPaymentRequired) != ""):
				t.Errorf("%d %s; want 409 without an offer", resp.StatusCode, body)
			case !tc.chain && (err != nil || c.State != store.PaymentPending || c.TxHash == ""):
				t.Errorf("claim = %+v, %v; want pending with the transaction", c, err)
			}
		})
	}
}

// TestExpiredClaimSpentNeverOffered: a payment without an identifier, paid
// and served, presented again after its claim was forgotten (its
// validBefore plus the margin): the chain shows it spent, so the answer is
// 409 payment_already_used, never a 402 offer.
func TestExpiredClaimSpentNeverOffered(t *testing.T) {
	eachRigBackend(t, func(t *testing.T, be rigBackend) {
		// Without recovery records: the claim is all the gateway has.
		rg := newRig(t, rigOpts{backend: be, replicas: 2, skews: []time.Duration{0, 20 * time.Minute}, noRecovery: true})
		h := rg.pay(t, chatBody, buyerIdx, "", nil)
		if a, b := rg.r(0).do(t, chatBody, h); a.StatusCode != http.StatusOK {
			t.Fatalf("paid: %d %s", a.StatusCode, b)
		}
		a := rg.r(1).refused(t, chatBody, h, http.StatusConflict, "payment_already_used")
		if a.Header.Get(x402.HeaderPaymentRequired) != "" {
			t.Error("a spent payment whose claim was forgotten got a PAYMENT-REQUIRED offer")
		}
		if rg.up.Calls() != 1 || rg.received(t) != 10000 {
			t.Errorf("upstream %d, received %d; want 1, 10000", rg.up.Calls(), rg.received(t))
		}
	})
}

// TestSkewedReplicaNeverOffersSpentPayment: a replica whose clock runs
// behind finds a payment's validBefore too far out; the payment is spent by
// another replica, so the answer is 409 payment_already_used, never a 402
// offer.
func TestSkewedReplicaNeverOffersSpentPayment(t *testing.T) {
	eachRigBackend(t, func(t *testing.T, be rigBackend) {
		rg := newRig(t, rigOpts{backend: be, replicas: 2, skews: []time.Duration{0, -10 * time.Minute}, noRecovery: true})
		h := rg.pay(t, chatBody, buyerIdx, "", nil)
		if a, b := rg.r(0).do(t, chatBody, h); a.StatusCode != http.StatusOK {
			t.Fatalf("paid: %d %s", a.StatusCode, b)
		}
		a := rg.r(1).refused(t, chatBody, h, http.StatusConflict, "payment_already_used")
		if a.Header.Get(x402.HeaderPaymentRequired) != "" {
			t.Error("a spent payment got a PAYMENT-REQUIRED offer from a replica whose clock is behind")
		}
	})
}
