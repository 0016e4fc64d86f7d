package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"math/big"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llm4agents/llm4agents/client"
	"github.com/llm4agents/llm4agents/x402"
)

// sends returns the paid requests the server saw, checking that they all carry
// one payment header, one id (want, or none when want is "") and the body.
func sameSends(tb testing.TB, srv *server, body string) []seen {
	tb.Helper()
	paid := srv.paidRequests()
	for i, r := range paid {
		if r.Payment != paid[0].Payment || r.ID != paid[0].ID || r.Nonce != paid[0].Nonce {
			tb.Errorf("paid request %d carries another payment than the first", i)
		}
		if r.Body != body {
			tb.Errorf("paid request %d body %q, want %q", i, r.Body, body)
		}
	}
	return paid
}

// TestTransportRetries: the Transport retries a paid request on a transport
// error, settlement_pending and 409 with Retry-After, with the same payment and
// body, within its bounds (D26).
func TestTransportRetries(t *testing.T) {
	tests := []struct {
		name      string
		script    []afterPay
		retry     client.RetryPolicy // zero: newTransport's fast defaults
		margin    time.Duration
		noGetBody bool
		wantCode  int // 0: an error
		wantSends int
		wantSpent int64
		wantHeld  int64
	}{
		{name: "connection lost, then paid", script: []afterPay{paidHangUp, paidOK}, wantCode: 200, wantSends: 2, wantSpent: price},
		{name: "buffered body replayed", script: []afterPay{paidHangUp, paidHangUp, paidOK}, noGetBody: true, wantCode: 200, wantSends: 3, wantSpent: price},
		{name: "settlement pending, then paid", script: []afterPay{paidSettlePending, paidSettlePending, paidOK}, wantCode: 200, wantSends: 3, wantSpent: price},
		{name: "in use, then paid", script: []afterPay{paidInUse, paidOK}, wantCode: 200, wantSends: 2, wantSpent: price},
		{name: "409 without Retry-After is final", script: []afterPay{paidConflict, paidOK}, wantCode: 409, wantSends: 1, wantHeld: price},
		{name: "402 again is final", script: []afterPay{paid402Again, paidOK}, wantCode: 402, wantSends: 1},
		{name: "settlement failed is final", script: []afterPay{paidSettleFailed, paidOK}, wantCode: 402, wantSends: 1},
		{name: "handler failure is final", script: []afterPay{paidHandler500, paidOK}, wantCode: 500, wantSends: 1},
		{
			name:   "attempts bounded",
			script: []afterPay{paidHangUp, paidHangUp, paidHangUp, paidHangUp, paidOK},
			retry:  client.RetryPolicy{MaxAttempts: 3, MaxWait: time.Millisecond, Backoff: time.Millisecond},
			// the answer never came: the payment may have settled
			wantSends: 3, wantHeld: price,
		},
		{
			name:     "pending bounded",
			script:   []afterPay{paidSettlePending, paidSettlePending, paidSettlePending, paidOK},
			retry:    client.RetryPolicy{MaxAttempts: 2, MaxWait: time.Millisecond, Backoff: time.Millisecond},
			wantCode: 402, wantSends: 2, wantHeld: price,
		},
		{
			name:   "time bounded",
			script: []afterPay{paidInUse, paidInUse, paidInUse, paidInUse, paidOK},
			retry:  client.RetryPolicy{MaxAttempts: 10, MaxElapsed: 150 * time.Millisecond, MaxWait: 100 * time.Millisecond},
			// waits of 100 ms: the second send fits in 150 ms, the third does not
			wantCode: 409, wantSends: 2, wantHeld: price,
		},
		{
			name:     "disabled",
			script:   []afterPay{paidSettlePending, paidOK},
			retry:    client.RetryPolicy{MaxAttempts: 1},
			wantCode: 402, wantSends: 1, wantHeld: price,
		},
		{
			name:     "no retry once the authorization is about to expire",
			script:   []afterPay{paidSettlePending, paidOK},
			margin:   60 * time.Second, // maxTimeoutSeconds: every retry would be too late
			wantCode: 402, wantSends: 1, wantHeld: price,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := newServer(t, offer(price))
			srv.extensions = declared
			srv.script = tc.script
			tr, _ := newTransport(t, policy(10), srv)
			if tc.retry != (client.RetryPolicy{}) {
				tr.Retry = tc.retry
			}
			tr.ReuseMargin = tc.margin

			rep, err := send(t, tr, srv.URL("/v1/chat/completions"), request{method: http.MethodPost, body: chatBody, noGetBod: tc.noGetBody})
			checkErrorClean(t, err, srv)
			switch {
			case tc.wantCode == 0 && err == nil:
				t.Fatalf("answered %d, want an error", rep.resp.StatusCode)
			case tc.wantCode != 0 && err != nil:
				t.Fatalf("request: %v", err)
			case tc.wantCode != 0 && rep.resp.StatusCode != tc.wantCode:
				t.Errorf("status %d, want %d", rep.resp.StatusCode, tc.wantCode)
			}
			paid := sameSends(t, srv, chatBody)
			if len(paid) != tc.wantSends {
				t.Errorf("%d sends of the payment, want %d", len(paid), tc.wantSends)
			}
			if len(paid) > 0 && x402.ValidPaymentID(paid[0].ID) != nil {
				t.Errorf("payment id %q is not valid", paid[0].ID)
			}
			checkLedger(t, tr, tc.wantSpent, 10*price-tc.wantSpent-tc.wantHeld)
		})
	}
}

// TestTransportRetryWaits: Retry-After is honoured up to MaxWait, and a caller
// that goes away stops the wait at once.
func TestTransportRetryWaits(t *testing.T) {
	t.Run("capped", func(t *testing.T) {
		srv := newServer(t, offer(price))
		srv.script = []afterPay{paidInUse, paidOK} // Retry-After: 2
		tr, _ := newTransport(t, policy(10), srv)
		tr.Retry = client.RetryPolicy{MaxWait: 20 * time.Millisecond}
		start := time.Now()
		rep, err := send(t, tr, srv.URL("/paid"), request{})
		if err != nil || rep.resp.StatusCode != 200 {
			t.Fatalf("%v", err)
		}
		if d := time.Since(start); d < 20*time.Millisecond || d > time.Second {
			t.Errorf("took %v, want the 20ms cap rather than Retry-After's 2s", d)
		}
	})
	t.Run("honoured", func(t *testing.T) {
		srv := newServer(t, offer(price))
		srv.script = []afterPay{paidInUse, paidOK}
		tr, _ := newTransport(t, policy(10), srv)
		tr.Retry = client.RetryPolicy{}
		start := time.Now()
		if _, err := send(t, tr, srv.URL("/paid"), request{}); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d < 2*time.Second {
			t.Errorf("took %v, want Retry-After's 2s", d)
		}
	})
	t.Run("cancelled", func(t *testing.T) {
		srv := newServer(t, offer(price))
		srv.after = paidInUse
		tr, _ := newTransport(t, policy(10), srv)
		tr.Retry = client.RetryPolicy{MaxWait: time.Minute}
		ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL("/paid"), nil)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		resp, err := (&http.Client{Transport: tr}).Do(req)
		if err == nil {
			_ = resp.Body.Close()
			t.Fatal("no error")
		}
		if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 5*time.Second {
			t.Errorf("error %v after %v, want the context's at once", err, time.Since(start))
		}
		checkErrorClean(t, err, srv)
		checkLedger(t, tr, 0, 9*price) // in use elsewhere: maybe paid
	})
}

// TestTransportPaymentID: a payment carries a payment-identifier id exactly
// when the 402 declares the extension, echoing the declaration; the official
// clients do the same.
func TestTransportPaymentID(t *testing.T) {
	withBazaar := map[string]json.RawMessage{
		"bazaar":                json.RawMessage(`{"info":{"input":{"type":"http"}},"schema":{}}`),
		x402.ExtensionPaymentID: json.RawMessage(`{"info":{"required":true,"hint":"keep"},"schema":{"type":"object"}}`),
	}
	tests := []struct {
		name    string
		ext     map[string]json.RawMessage
		wantID  bool
		wantExt []string // keys of the payload's extensions; nil: no extensions member
	}{
		{name: "not declared", wantExt: nil},
		{name: "declared optional", ext: declared, wantID: true, wantExt: []string{x402.ExtensionPaymentID}},
		{name: "declared required, with others", ext: withBazaar, wantID: true, wantExt: []string{"bazaar", x402.ExtensionPaymentID}},
		{name: "malformed declaration", ext: map[string]json.RawMessage{x402.ExtensionPaymentID: json.RawMessage(`{"info":{"required":"yes"}}`)}, wantExt: []string{x402.ExtensionPaymentID}},
		{name: "other extension only", ext: map[string]json.RawMessage{"bazaar": json.RawMessage(`{}`)}, wantExt: []string{"bazaar"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := newServer(t, offer(price))
			srv.extensions = tc.ext
			tr, _ := newTransport(t, policy(10), srv)
			if _, err := send(t, tr, srv.URL("/paid"), request{}); err != nil {
				t.Fatal(err)
			}
			paid := srv.paidRequests()
			if len(paid) != 1 {
				t.Fatalf("%d paid requests", len(paid))
			}
			if (paid[0].ID != "") != tc.wantID {
				t.Errorf("id sent: %v, want %v", paid[0].ID != "", tc.wantID)
			}
			if tc.wantID && !strings.HasPrefix(paid[0].ID, x402.PaymentIDPrefix) {
				t.Errorf("id %q lacks the pay_ prefix", paid[0].ID)
			}
			p, err := x402.DecodePaymentPayload(paid[0].Payment)
			if err != nil {
				t.Fatal(err)
			}
			var ext map[string]json.RawMessage
			if p.Extensions != nil {
				if err := json.Unmarshal(p.Extensions, &ext); err != nil {
					t.Fatal(err)
				}
			}
			if len(ext) != len(tc.wantExt) || (tc.wantExt == nil) != (p.Extensions == nil) {
				t.Errorf("payload extensions %s, want keys %v", p.Extensions, tc.wantExt)
			}
			for _, k := range tc.wantExt {
				if _, ok := ext[k]; !ok {
					t.Errorf("payload extensions %s lack %s", p.Extensions, k)
				}
			}
			if tc.ext["bazaar"] != nil && string(ext["bazaar"]) != string(tc.ext["bazaar"]) {
				t.Errorf("bazaar echo %s, want %s", ext["bazaar"], tc.ext["bazaar"])
			}
			if tc.name == "declared required, with others" {
				var got struct {
					Info struct {
						Required bool   `json:"required"`
						Hint     string `json:"hint"`
						ID       string `json:"id"`
					} `json:"info"`
					Schema map[string]any `json:"schema"`
				}
				if err := json.Unmarshal(ext[x402.ExtensionPaymentID], &got); err != nil {
					t.Fatal(err)
				}
				if !got.Info.Required || got.Info.Hint != "keep" || got.Info.ID != paid[0].ID || got.Schema["type"] != "object" {
					t.Errorf("echo %s does not keep the declaration and add the id", ext[x402.ExtensionPaymentID])
				}
			}
		})
	}
}

// clock is a settable clock shared by a Transport and its server.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// TestTransportReusesAcrossCalls: an SDK that retries a call after a lost
// answer goes through RoundTrip again; the Transport sends the payment it
// recorded, while it is valid, and afterwards a fresh authorization with the
// same id: one logical call keeps one payment-identifier (D26).
func TestTransportReusesAcrossCalls(t *testing.T) {
	t.Run("same payment while valid", func(t *testing.T) {
		srv := newServer(t, offer(price))
		srv.extensions = declared
		srv.script = []afterPay{paidHangUp, paidHangUp, paidOK}
		tr, _ := newTransport(t, policy(10), srv)
		tr.Retry.MaxAttempts = 1
		for i := range 2 {
			if _, err := send(t, tr, srv.URL("/v1/chat/completions"), request{method: http.MethodPost, body: chatBody}); err == nil {
				t.Fatalf("call %d succeeded", i)
			}
		}
		// The SDK's third try, with the body's keys in another order and other
		// whitespace: the same request by its fingerprint.
		reordered := `{ "stream": false, "messages": [ {"content": "hi <b>&</b>", "role": "user"} ], "model": "gpt-4o-mini" }`
		rep, err := send(t, tr, srv.URL("/v1/chat/completions"), request{method: http.MethodPost, body: reordered})
		if err != nil || rep.resp.StatusCode != 200 {
			t.Fatalf("third try: %v", err)
		}
		paid := srv.paidRequests()
		if len(paid) != 3 {
			t.Fatalf("%d paid requests, want 3", len(paid))
		}
		for _, r := range paid[1:] {
			if r.Payment != paid[0].Payment || r.ID != paid[0].ID {
				t.Error("a retry carried another payment or id")
			}
		}
		checkLedger(t, tr, price, 9*price)
	})

	t.Run("fresh authorization, same id, once expired", func(t *testing.T) {
		clk := &clock{now: testNow}
		srv := newServer(t, offer(price))
		srv.extensions = declared
		srv.verifier.Now = clk.Now
		srv.script = []afterPay{paidHangUp, paidOK}
		tr, _ := newTransport(t, policy(10), srv)
		tr.Now = clk.Now
		tr.Retry.MaxAttempts = 1
		if _, err := send(t, tr, srv.URL("/paid"), request{method: http.MethodPost, body: chatBody}); err == nil {
			t.Fatal("first call succeeded")
		}
		// 60 s validity, 30 s margin: past 30 s the recorded one is not reused.
		clk.add(30 * time.Second)
		rep, err := send(t, tr, srv.URL("/paid"), request{method: http.MethodPost, body: chatBody})
		if err != nil || rep.resp.StatusCode != 200 {
			t.Fatalf("retry: %v", err)
		}
		paid := srv.paidRequests()
		if len(paid) != 2 || paid[0].Nonce == paid[1].Nonce || paid[0].ID != paid[1].ID || paid[0].ID == "" {
			t.Fatalf("sends %+v: want two authorizations with one id", paid)
		}
		// The first may have been settled before it expired: still held.
		checkLedger(t, tr, price, 8*price)
	})

	t.Run("outstanding authorization for another offer", func(t *testing.T) {
		srv := newServer(t, offer(price))
		srv.script = []afterPay{paidHangUp}
		tr, _ := newTransport(t, policy(10), srv)
		tr.Retry.MaxAttempts = 1
		noReuse(t, tr)
		if _, err := send(t, tr, srv.URL("/paid"), request{}); err == nil {
			t.Fatal("first call succeeded")
		}
		srv.setOffers(offer(price, func(r *x402.PaymentRequirements) { r.PayTo = "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC" }))
		_, err := send(t, tr, srv.URL("/paid"), request{})
		var npe *client.NoPayableOptionError
		if !errors.As(err, &npe) || len(npe.Options) != 1 || npe.Options[0].RefusalError != client.RefusedOutstanding {
			t.Fatalf("error = %v, want every option refused as outstanding", err)
		}
		if n := len(srv.paidRequests()); n != 1 {
			t.Errorf("%d paid requests, want the first alone", n)
		}
	})

	for _, tc := range []struct {
		name   string
		change func(p *client.Policy)
		want   client.RefusalError
	}{
		{"over the new maximum", func(p *client.Policy) { p.MaxPerRequest = big.NewInt(price - 1) }, client.RefusedOverMaximum},
		{"over the new budget", func(p *client.Policy) { p.Budget = big.NewInt(price - 1) }, client.RefusedOverBudget},
	} {
		t.Run("recorded authorization "+tc.name, func(t *testing.T) {
			dir := t.TempDir() + "/j"
			srv := newServer(t, offer(price))
			srv.script = []afterPay{paidHangUp}
			tr, _ := newTransport(t, policy(10), srv)
			tr.Journal = openJournal(t, dir)
			tr.Retry.MaxAttempts = 1
			if _, err := send(t, tr, srv.URL("/paid"), request{method: http.MethodPost, body: chatBody}); err == nil {
				t.Fatal("first call succeeded")
			}
			strict := policy(10)
			tc.change(&strict)
			tr2, _ := newTransport(t, strict, srv)
			tr2.Journal = openJournal(t, dir)
			_, err := send(t, tr2, srv.URL("/paid"), request{method: http.MethodPost, body: chatBody})
			var npe *client.NoPayableOptionError
			if !errors.As(err, &npe) || npe.Options[0].RefusalError != tc.want {
				t.Fatalf("error = %v, want the recorded payment refused as %s", err, tc.want)
			}
			if n := len(srv.paidRequests()); n != 1 {
				t.Errorf("%d paid requests, want the first alone", n)
			}
		})
	}

	t.Run("not paid, then the same payment again", func(t *testing.T) {
		srv := newServer(t, offer(price))
		srv.script = []afterPay{paidSettleFailed, paidOK}
		tr, _ := newTransport(t, policy(10), srv)
		rep, err := send(t, tr, srv.URL("/paid"), request{})
		if err != nil || rep.resp.StatusCode != 402 {
			t.Fatalf("first call: %v", err)
		}
		checkLedger(t, tr, 0, 10*price)
		if rep, err = send(t, tr, srv.URL("/paid"), request{}); err != nil || rep.resp.StatusCode != 200 {
			t.Fatalf("second call: %v", err)
		}
		paid := sameSends(t, srv, "")
		if len(paid) != 2 {
			t.Errorf("%d sends, want 2 of one payment", len(paid))
		}
		checkLedger(t, tr, price, 9*price)
	})
}

// noReuse makes tr's connections single-use, so that net/http never resends a
// request itself (it does for idempotent ones, Idempotency-Key included, when a
// reused connection drops): the test sees the Transport's sends alone.
func noReuse(tb testing.TB, tr *client.Transport) {
	base := &http.Transport{DisableKeepAlives: true}
	tb.Cleanup(base.CloseIdleConnections)
	tr.Base = base
}

// TestTransportIdempotencyKey: an Idempotency-Key names the call instead of
// the fingerprint (D26).
func TestTransportIdempotencyKey(t *testing.T) {
	post := func(key, body string) request {
		return request{method: http.MethodPost, body: body, header: map[string]string{"Idempotency-Key": key}}
	}
	t.Run("reused for another request", func(t *testing.T) {
		srv := newServer(t, offer(price))
		srv.script = []afterPay{paidHangUp}
		tr, _ := newTransport(t, policy(10), srv)
		tr.Retry.MaxAttempts = 1
		noReuse(t, tr)
		if _, err := send(t, tr, srv.URL("/paid"), post("k1", chatBody)); err == nil {
			t.Fatal("first call succeeded")
		}
		_, err := send(t, tr, srv.URL("/paid"), post("k1", strings.Replace(chatBody, "hi", "bye", 1)))
		if !errors.Is(err, client.ErrIdempotencyKeyReused) {
			t.Fatalf("error = %v, want ErrIdempotencyKeyReused", err)
		}
		if n := len(srv.paidRequests()); n != 1 {
			t.Errorf("%d paid requests, want 1", n)
		}
	})
	t.Run("same key, same request", func(t *testing.T) {
		srv := newServer(t, offer(price))
		srv.script = []afterPay{paidHangUp, paidOK}
		tr, _ := newTransport(t, policy(10), srv)
		tr.Retry.MaxAttempts = 1
		noReuse(t, tr)
		if _, err := send(t, tr, srv.URL("/paid"), post("k1", chatBody)); err == nil {
			t.Fatal("first call succeeded")
		}
		if _, err := send(t, tr, srv.URL("/paid"), post("k1", chatBody)); err != nil {
			t.Fatal(err)
		}
		if paid := sameSends(t, srv, chatBody); len(paid) != 2 {
			t.Errorf("%d sends, want 2 of one payment", len(paid))
		}
	})
	t.Run("a key of any bytes survives the file journal", func(t *testing.T) {
		dir := t.TempDir() + "/j"
		srv := newServer(t, offer(price))
		srv.script = []afterPay{paidHangUp, paidOK}
		tr, _ := newTransport(t, policy(10), srv)
		tr.Journal, tr.Retry.MaxAttempts = openJournal(t, dir), 1
		noReuse(t, tr)
		key := "k\xff\xfe\x80 \"quoted\"\t"
		if _, err := send(t, tr, srv.URL("/paid"), post(key, chatBody)); err == nil {
			t.Fatal("first call succeeded")
		}
		tr2, _ := newTransport(t, policy(10), srv)
		tr2.Journal = openJournal(t, dir)
		if _, err := send(t, tr2, srv.URL("/paid"), post(key, chatBody)); err != nil {
			t.Fatal(err)
		}
		if paid := sameSends(t, srv, chatBody); len(paid) != 2 {
			t.Errorf("%d sends, want 2 of one payment", len(paid))
		}
	})
	t.Run("other key, same request", func(t *testing.T) {
		srv := newServer(t, offer(price))
		srv.script = []afterPay{paidHangUp, paidOK}
		tr, _ := newTransport(t, policy(10), srv)
		tr.Retry.MaxAttempts = 1
		noReuse(t, tr)
		if _, err := send(t, tr, srv.URL("/paid"), post("k1", chatBody)); err == nil {
			t.Fatal("first call succeeded")
		}
		if _, err := send(t, tr, srv.URL("/paid"), post("k2", chatBody)); err != nil {
			t.Fatal(err)
		}
		if _, nonces := srv.snapshot(); len(nonces) != 2 {
			t.Errorf("%d payments, want 2: another key is another call", len(nonces))
		}
	})
	t.Run("concurrent calls with one key wait for each other", func(t *testing.T) {
		srv := newServer(t, offer(price))
		tr, _ := newTransport(t, policy(10), srv)
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				if _, err := send(t, tr, srv.URL("/paid"), post("k1", chatBody)); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		// Each completed before the next began, so each is its own call.
		if _, nonces := srv.snapshot(); len(nonces) != 4 {
			t.Errorf("%d payments, want 4", len(nonces))
		}
		checkLedger(t, tr, 4*price, 6*price)
	})
}
