package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/llm4agents/llm4agents/client"
	"github.com/llm4agents/llm4agents/x402"
)

const chatBody = `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi <b>&</b>"}],"stream":false}`

// request is what a test sends through the Transport.
type request struct {
	method   string
	path     string
	body     string
	noGetBod bool // hide the body's type so http.NewRequest sets no GetBody
	header   map[string]string
}

// reply is a response to a request sent through the Transport, its body read
// and closed.
type reply struct {
	resp *http.Response
	body string
}

// send makes r through an http.Client using tr.
func send(tb testing.TB, tr http.RoundTripper, url string, r request) (reply, error) {
	tb.Helper()
	var body io.Reader
	if r.body != "" {
		body = strings.NewReader(r.body)
		if r.noGetBod {
			body = io.MultiReader(body)
		}
	}
	method := r.method
	if method == "" {
		method = http.MethodGet
	}
	req, err := http.NewRequestWithContext(tb.Context(), method, url, body)
	if err != nil {
		tb.Fatal(err)
	}
	if r.noGetBod && req.GetBody != nil {
		tb.Fatal("request has GetBody")
	}
	for k, v := range r.header {
		req.Header.Set(k, v)
	}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return reply{}, err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		tb.Fatalf("read response: %v", err)
	}
	return reply{resp, string(b)}, nil
}

func TestTransportPays(t *testing.T) {
	upfront := withExtra(`{"name":"USD Coin","version":"2","paymentFlow":"upfront"}`)
	tests := []struct {
		name      string
		accepts   []x402.PaymentRequirements
		after     afterPay
		free      bool
		req       request
		wantCode  int
		wantBody  string
		wantPaid  []int // accepts indexes the server was paid with
		wantSpent int64
		// wantSettle is the decoded PAYMENT-RESPONSE's success, or nil when
		// SettleResponse must fail with wantSettleErr.
		wantSettle    *bool
		wantSettleErr error
	}{
		{
			name:     "get",
			accepts:  []x402.PaymentRequirements{offer(price)},
			wantCode: 200, wantBody: "paid", wantPaid: []int{0}, wantSpent: price, wantSettle: new(true),
		},
		{
			name:     "post replayed through GetBody",
			accepts:  []x402.PaymentRequirements{offer(price)},
			req:      request{method: http.MethodPost, path: "/v1/chat/completions", body: chatBody},
			wantCode: 200, wantBody: "paid", wantPaid: []int{0}, wantSpent: price, wantSettle: new(true),
		},
		{
			name:     "post replayed from a buffer",
			accepts:  []x402.PaymentRequirements{offer(price)},
			req:      request{method: http.MethodPost, path: "/v1/chat/completions", body: chatBody, noGetBod: true},
			wantCode: 200, wantBody: "paid", wantPaid: []int{0}, wantSpent: price, wantSettle: new(true),
		},
		{
			name:     "cheaper than the maximum",
			accepts:  []x402.PaymentRequirements{offer(1)},
			wantCode: 200, wantBody: "paid", wantPaid: []int{0}, wantSpent: 1, wantSettle: new(true),
		},
		{
			name: "skips what it may not pay",
			accepts: []x402.PaymentRequirements{
				offer(price, withScheme(client.SchemeNeverminedERC4337)),
				offer(price, withScheme("voucher")),
				offer(price + 1),
				offer(price, withAsset("0x036CbD53842c5426634e7929541eC2318f3dCF7e")),
				offer(price, withExtra(`{"name":"USD Coin","version":"2","paymentFlow":"escrow-v9"}`)),
				offer(price),
			},
			wantCode: 200, wantBody: "paid", wantPaid: []int{5}, wantSpent: price, wantSettle: new(true),
		},
		{
			name:     "prefers the authorization flow to upfront",
			accepts:  []x402.PaymentRequirements{offer(price, upfront), offer(price, withExtra(`{"name":"USD Coin","version":"2","paymentFlow":"authorization"}`))},
			wantCode: 200, wantBody: "paid", wantPaid: []int{1}, wantSpent: price, wantSettle: new(true),
		},
		{
			name:     "pays upfront when it is all there is",
			accepts:  []x402.PaymentRequirements{offer(price, upfront)},
			wantCode: 200, wantBody: "paid", wantPaid: []int{0}, wantSpent: price, wantSettle: new(true),
		},
		{
			name:     "paid without PAYMENT-RESPONSE",
			accepts:  []x402.PaymentRequirements{offer(price)},
			after:    paidNoSettleHeader,
			wantCode: 201, wantBody: "paid", wantPaid: []int{0}, wantSpent: price, wantSettleErr: client.ErrNoSettleResponse,
		},
		{
			name:     "PAYMENT-RESPONSE that does not decode",
			accepts:  []x402.PaymentRequirements{offer(price)},
			after:    paidGarbageSettle,
			wantCode: 200, wantBody: "paid", wantPaid: []int{0}, wantSpent: price, wantSettleErr: x402.ErrHeaderBase64,
		},
		{
			name:     "free resource",
			free:     true,
			wantCode: 200, wantBody: "free", wantSettleErr: client.ErrNoSettleResponse,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := newServer(t, tc.accepts...)
			srv.after, srv.free = tc.after, tc.free
			tr, _ := newTransport(t, policy(10), srv)
			if tc.req.path == "" {
				tc.req.path = "/paid"
			}

			rep, err := send(t, tr, srv.URL(tc.req.path), tc.req)
			if err != nil {
				t.Fatalf("request: %v", err)
			}
			if rep.resp.StatusCode != tc.wantCode || rep.body != tc.wantBody {
				t.Errorf("response = %d %q, want %d %q", rep.resp.StatusCode, rep.body, tc.wantCode, tc.wantBody)
			}
			if rep.resp.Request.Header.Get(x402.HeaderPaymentSignature) != "" {
				t.Error("resp.Request carries the payment header")
			}

			sr, err := client.SettleResponse(rep.resp)
			switch {
			case tc.wantSettle != nil && err != nil:
				t.Errorf("SettleResponse: %v", err)
			case tc.wantSettle != nil && sr.Success != *tc.wantSettle:
				t.Errorf("SettleResponse success = %v, want %v", sr.Success, *tc.wantSettle)
			case tc.wantSettle == nil && !errors.Is(err, tc.wantSettleErr):
				t.Errorf("SettleResponse error = %v, want %v", err, tc.wantSettleErr)
			}

			requests, paid := srv.snapshot()
			if diff := cmp.Diff(tc.wantPaid, paid); diff != "" {
				t.Errorf("payments received (-want +got):\n%s", diff)
			}
			wantRequests := 2
			if len(tc.wantPaid) == 0 {
				wantRequests = 1
			}
			if len(requests) != wantRequests {
				t.Fatalf("server saw %d requests, want %d", len(requests), wantRequests)
			}
			for i, r := range requests {
				method := tc.req.method
				if method == "" {
					method = http.MethodGet
				}
				if r.Method != method || r.Path != tc.req.path || r.Body != tc.req.body {
					t.Errorf("request %d = %s %s %q, want %s %s %q", i, r.Method, r.Path, r.Body, method, tc.req.path, tc.req.body)
				}
				if hasPayment := r.Payment != ""; hasPayment != (i == 1) {
					t.Errorf("request %d has payment header: %v", i, hasPayment)
				}
			}
			checkLedger(t, tr, tc.wantSpent, 10*price-tc.wantSpent)
		})
	}
}

func checkLedger(tb testing.TB, tr *client.Transport, spent, remaining int64) {
	tb.Helper()
	if got := tr.Spent(); got.Cmp(big.NewInt(spent)) != 0 {
		tb.Errorf("Spent() = %s, want %d", got, spent)
	}
	if got := tr.Remaining(); got.Cmp(big.NewInt(remaining)) != 0 {
		tb.Errorf("Remaining() = %s, want %d", got, remaining)
	}
}

// TestTransportRefuses covers 402s the Transport must not pay: nothing is
// signed, the server sees only the first request, and RoundTrip fails.
func TestTransportRefuses(t *testing.T) {
	garbage := "%%% not base64 %%%"
	v1 := "eyJ4NDAyVmVyc2lvbiI6MSwiYWNjZXB0cyI6W119" // {"x402Version":1,"accepts":[]}
	empty := ""
	solana := "solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp"
	tests := []struct {
		name     string
		accepts  []x402.PaymentRequirements
		required *string // PAYMENT-REQUIRED instead of the accepts
		policy   *client.Policy
		noSigner bool
		header   map[string]string
		wantErr  error
		// wantRefusals, when set, expects a *NoPayableOptionError with these.
		wantRefusals []client.RefusalError
	}{
		{name: "over the per-request maximum", accepts: []x402.PaymentRequirements{offer(price + 1)}, wantRefusals: []client.RefusalError{client.RefusedOverMaximum}},
		{name: "over the budget", accepts: []x402.PaymentRequirements{offer(price)}, policy: &client.Policy{
			MaxPerRequest: big.NewInt(price), Budget: big.NewInt(price - 1), Assets: policy(1).Assets,
		}, wantRefusals: []client.RefusalError{client.RefusedOverBudget}},
		{name: "unknown asset", accepts: []x402.PaymentRequirements{offer(price, withAsset("0x036CbD53842c5426634e7929541eC2318f3dCF7e"))}, wantRefusals: []client.RefusalError{client.RefusedAsset}},
		{name: "network the policy does not allow", accepts: []x402.PaymentRequirements{offer(price, withNetwork("eip155:8453"))}, wantRefusals: []client.RefusalError{client.RefusedNetwork}},
		{name: "chain the signer cannot serve", accepts: []x402.PaymentRequirements{offer(price, withNetwork(solana))}, wantRefusals: []client.RefusalError{client.RefusedNetwork}},
		{name: "malformed chain id", accepts: []x402.PaymentRequirements{offer(price, withNetwork("eip155:0x539"))}, wantRefusals: []client.RefusalError{client.RefusedNetwork}},
		{name: "nvm:erc4337 only", accepts: []x402.PaymentRequirements{offer(price, withScheme(client.SchemeNeverminedERC4337))}, wantRefusals: []client.RefusalError{client.RefusedNevermined}},
		{name: "nevermined schemes only", accepts: []x402.PaymentRequirements{
			offer(price, withScheme(client.SchemeNeverminedCardDelegation)), offer(1, withScheme(client.SchemeNeverminedERC4337)),
		}, wantRefusals: []client.RefusalError{client.RefusedNevermined, client.RefusedNevermined}},
		{name: "unknown scheme only", accepts: []x402.PaymentRequirements{offer(price, withScheme("voucher"))}, wantRefusals: []client.RefusalError{client.RefusedForeignScheme}},
		{name: "unknown payment flow", accepts: []x402.PaymentRequirements{offer(price, withExtra(`{"name":"USD Coin","version":"2","paymentFlow":"layaway"}`))}, wantRefusals: []client.RefusalError{client.RefusedPaymentFlow}},
		{name: "escrow flow", accepts: []x402.PaymentRequirements{offer(price, withExtra(`{"name":"USD Coin","version":"2","paymentFlow":"escrow"}`))}, wantRefusals: []client.RefusalError{client.RefusedPaymentFlow}},
		{name: "permit2", accepts: []x402.PaymentRequirements{offer(price, withExtra(`{"name":"USD Coin","version":"2","assetTransferMethod":"permit2"}`))}, wantRefusals: []client.RefusalError{client.RefusedOffer}},
		{name: "no EIP-712 domain", accepts: []x402.PaymentRequirements{offer(price, withExtra(`{}`))}, wantRefusals: []client.RefusalError{client.RefusedOffer}},
		{name: "authorization valid too long", accepts: []x402.PaymentRequirements{offer(price, func(r *x402.PaymentRequirements) { r.MaxTimeoutSeconds = 1 << 40 })}, wantRefusals: []client.RefusalError{client.RefusedOffer}},
		{name: "402 without PAYMENT-REQUIRED", required: &empty, wantErr: client.ErrNoPaymentRequired},
		{name: "garbage PAYMENT-REQUIRED", required: &garbage, wantErr: client.ErrBadPaymentRequired},
		{name: "version 1 PAYMENT-REQUIRED", required: &v1, wantErr: client.ErrBadPaymentRequired},
		{name: "payment already attempted", accepts: []x402.PaymentRequirements{offer(price)}, header: map[string]string{"PAYMENT-SIGNATURE": "made-by-the-caller"}, wantErr: client.ErrPaymentAlreadyAttempted},
		{name: "v1 payment already attempted", accepts: []x402.PaymentRequirements{offer(price)}, header: map[string]string{"X-PAYMENT": "made-by-the-caller"}, wantErr: client.ErrPaymentAlreadyAttempted},
		{name: "empty policy", accepts: []x402.PaymentRequirements{offer(price)}, policy: &client.Policy{}, wantErr: client.ErrInvalidPolicy},
		{name: "policy with a bad asset", accepts: []x402.PaymentRequirements{offer(price)}, policy: &client.Policy{
			MaxPerRequest: big.NewInt(1), Budget: big.NewInt(1), Assets: []client.Asset{{Network: network, Address: "USDC"}},
		}, wantErr: client.ErrInvalidPolicy},
		{name: "no signer", accepts: []x402.PaymentRequirements{offer(price)}, noSigner: true, wantErr: client.ErrNoSigner},
		{name: "recipient not allowed", accepts: []x402.PaymentRequirements{offer(price)}, policy: withPolicy(func(p *client.Policy) {
			p.PayTo = []string{"0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC"}
		}), wantRefusals: []client.RefusalError{client.RefusedPayTo}},
		{name: "origin not allowed", accepts: []x402.PaymentRequirements{offer(price), offer(1)}, policy: withPolicy(func(p *client.Policy) {
			p.Origins = []string{"https://api.example.com"}
		}), wantRefusals: []client.RefusalError{client.RefusedOrigin, client.RefusedOrigin}},
		{name: "policy with a bad recipient", accepts: []x402.PaymentRequirements{offer(price)}, policy: withPolicy(func(p *client.Policy) {
			p.PayTo = []string{"bob"}
		}), wantErr: client.ErrInvalidPolicy},
		{name: "policy with a bad origin", accepts: []x402.PaymentRequirements{offer(price)}, policy: withPolicy(func(p *client.Policy) {
			p.Origins = []string{"api.example.com/path"}
		}), wantErr: client.ErrInvalidPolicy},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := newServer(t, tc.accepts...)
			srv.required = tc.required
			pol := policy(10)
			if tc.policy != nil {
				pol = *tc.policy
			}
			tr, _ := newTransport(t, pol, srv)
			if tc.noSigner {
				tr.Signer = nil
			}

			rep, err := send(t, tr, srv.URL("/paid"), request{header: tc.header})
			if err == nil {
				t.Fatalf("request succeeded with status %d, want an error", rep.resp.StatusCode)
			}
			checkErrorClean(t, err, srv)
			if tc.wantRefusals != nil {
				var npe *client.NoPayableOptionError
				if !errors.As(err, &npe) {
					t.Fatalf("error = %v, want a *NoPayableOptionError", err)
				}
				var got []client.RefusalError
				for _, o := range npe.Options {
					got = append(got, o.RefusalError)
				}
				if diff := cmp.Diff(tc.wantRefusals, got); diff != "" {
					t.Errorf("refusals (-want +got):\n%s", diff)
				}
			} else if !errors.Is(err, tc.wantErr) {
				t.Errorf("error = %v, want %v", err, tc.wantErr)
			}

			requests, paid := srv.snapshot()
			if len(requests) != 1 || len(paid) != 0 {
				t.Errorf("server saw %d requests and %d payments, want 1 and 0", len(requests), len(paid))
			}
			for _, r := range requests {
				if r.Payment != tc.header["PAYMENT-SIGNATURE"] || r.Legacy != tc.header["X-PAYMENT"] {
					t.Errorf("request carried payment headers %q, %q the caller did not set", r.Payment, r.Legacy)
				}
			}
			if pol.Budget != nil {
				checkLedger(t, tr, 0, pol.Budget.Int64())
			}
		})
	}
}

// TestNoPayableOptionError checks the typed error lists every option with its
// label; the Nevermined schemes are labelled, never paid.
func TestNoPayableOptionError(t *testing.T) {
	srv := newServer(t,
		offer(price, withScheme(client.SchemeNeverminedERC4337)),
		offer(price, withScheme(client.SchemeNeverminedCardDelegation)),
		offer(price, withScheme("voucher")),
		offer(2*price),
	)
	tr, _ := newTransport(t, policy(10), srv)
	_, err := send(t, tr, srv.URL("/paid?api_key=hidden"), request{})
	var npe *client.NoPayableOptionError
	if !errors.As(err, &npe) {
		t.Fatalf("error = %v, want a *NoPayableOptionError", err)
	}
	type row struct {
		Index        int
		Scheme       string
		RefusalError client.RefusalError
		Label        string
	}
	var got []row
	for _, o := range npe.Options {
		got = append(got, row{o.Index, o.Requirements.Scheme, o.RefusalError, o.Label})
	}
	want := []row{
		{0, "nvm:erc4337", client.RefusedNevermined, "requires a Nevermined account"},
		{1, "nvm:card-delegation", client.RefusedNevermined, "requires a Nevermined account"},
		{2, "voucher", client.RefusedForeignScheme, `foreign scheme "voucher", never paid`},
		{3, "exact", client.RefusedOverMaximum, "amount 20000 is over the per-request maximum 10000"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("options (-want +got):\n%s", diff)
	}
	if npe.Resource != srv.URL("/paid") {
		t.Errorf("Resource = %q, want %q (no query)", npe.Resource, srv.URL("/paid"))
	}
	// The *url.Error around it is net/http's and shows the whole URL; ours does
	// not show the query.
	msg := npe.Error()
	for _, s := range []string{"[0] nvm:erc4337 on eip155:1337, 10000 of " + token + ": requires a Nevermined account", "[2] voucher", "[3] exact"} {
		if !strings.Contains(msg, s) {
			t.Errorf("error %q lacks %q", msg, s)
		}
	}
	if strings.Contains(msg, "hidden") {
		t.Errorf("error %q shows the query", msg)
	}
}

// TestTransportAfterPayment covers answers to the paid request other than
// success: the answer is returned as it is, nothing is paid twice, and the
// budget is released unless the payment may still settle.
func TestTransportAfterPayment(t *testing.T) {
	tests := []struct {
		name          string
		after         afterPay
		wantCode      int
		wantErr       bool // the paid request fails (no answer)
		wantRemaining int64
		wantSettle    x402.Reason // errorReason of PAYMENT-RESPONSE, or "none"
		wantSends     int         // paid requests, all with the one payment
	}{
		{name: "402 again", after: paid402Again, wantCode: 402, wantRemaining: 10 * price, wantSettle: "none", wantSends: 1},
		{name: "settlement failed", after: paidSettleFailed, wantCode: 402, wantRemaining: 10 * price, wantSettle: x402.ReasonInsufficientFunds, wantSends: 1},
		{name: "settlement pending", after: paidSettlePending, wantCode: 402, wantRemaining: 9 * price, wantSettle: x402.ReasonSettlementPending, wantSends: client.DefaultMaxAttempts},
		{name: "handler failed", after: paidHandler500, wantCode: 500, wantRemaining: 10 * price, wantSettle: "none", wantSends: 1},
		{name: "conflict without Retry-After", after: paidConflict, wantCode: 409, wantRemaining: 9 * price, wantSettle: "none", wantSends: 1},
		{name: "in use with Retry-After", after: paidInUse, wantCode: 409, wantRemaining: 9 * price, wantSettle: "none", wantSends: client.DefaultMaxAttempts},
		{name: "connection lost", after: paidHangUp, wantErr: true, wantRemaining: 9 * price},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := newServer(t, offer(price))
			srv.after = tc.after
			tr, _ := newTransport(t, policy(10), srv)

			rep, err := send(t, tr, srv.URL("/paid"), request{method: http.MethodPost, body: chatBody})
			checkErrorClean(t, err, srv)
			switch {
			case tc.wantErr && err == nil:
				t.Fatalf("request answered %d, want an error", rep.resp.StatusCode)
			case !tc.wantErr && err != nil:
				t.Fatalf("request: %v", err)
			case !tc.wantErr:
				if rep.resp.StatusCode != tc.wantCode {
					t.Errorf("status = %d, want %d", rep.resp.StatusCode, tc.wantCode)
				}
				sr, err := client.SettleResponse(rep.resp)
				switch {
				case tc.wantSettle == "none" && !errors.Is(err, client.ErrNoSettleResponse):
					t.Errorf("SettleResponse = %+v, %v; want ErrNoSettleResponse", sr, err)
				case tc.wantSettle != "none" && (err != nil || sr.Success || sr.ErrorReason != tc.wantSettle):
					t.Errorf("SettleResponse = %+v, %v; want a failure %q", sr, err, tc.wantSettle)
				}
			}

			requests, paid := srv.snapshot()
			signed := map[string]int{}
			for _, r := range requests {
				if r.Payment != "" {
					signed[r.Payment]++
				}
			}
			// A retry, ours or net/http's after a dropped connection, sends the
			// same header: one payment, never two.
			if len(paid) != 1 || len(signed) != 1 {
				t.Errorf("server saw %d distinct payments in %d distinct headers, want 1 in 1", len(paid), len(signed))
			}
			for _, n := range signed {
				if tc.wantSends != 0 && n != tc.wantSends {
					t.Errorf("the payment was sent %d times, want %d", n, tc.wantSends)
				}
			}
			checkLedger(t, tr, 0, tc.wantRemaining)
		})
	}
}

// TestTransportBodyNotReplayable: a body without GetBody that is too large to
// buffer is sent once, in full, and a 402 then fails without payment.
func TestTransportBodyNotReplayable(t *testing.T) {
	srv := newServer(t, offer(price))
	tr, _ := newTransport(t, policy(10), srv)
	tr.MaxReplayBody = 16
	_, err := send(t, tr, srv.URL("/paid"), request{method: http.MethodPost, body: chatBody, noGetBod: true})
	if !errors.Is(err, client.ErrBodyNotReplayable) {
		t.Fatalf("error = %v, want ErrBodyNotReplayable", err)
	}
	requests, paid := srv.snapshot()
	if len(requests) != 1 || requests[0].Body != chatBody || len(paid) != 0 {
		t.Errorf("server saw %+v and %d payments, want the full body once and none", requests, len(paid))
	}
	checkLedger(t, tr, 0, 10*price)
}

// TestTransportRedirect checks that a payment or sign-in header never reaches
// an origin other than the one it was made for when an http.Client follows
// redirects.
func TestTransportRedirect(t *testing.T) {
	t.Run("paid answer redirects to another origin", func(t *testing.T) {
		other := newServer(t)
		other.free = true
		srv := newServer(t, offer(price))
		srv.after, srv.redirectTo = paidRedirect, other.URL("/landing")
		tr, _ := newTransport(t, policy(10), srv, other)

		rep, err := send(t, tr, srv.URL("/paid"), request{method: http.MethodPost, body: chatBody})
		if err != nil {
			t.Fatal(err)
		}
		if rep.resp.StatusCode != 200 || rep.body != "free" {
			t.Errorf("response = %d %q, want 200 from the other origin", rep.resp.StatusCode, rep.body)
		}
		requests, _ := other.snapshot()
		if len(requests) != 1 || requests[0].Payment != "" || requests[0].Body != chatBody {
			t.Errorf("other origin saw %+v, want one request with the body and no payment", requests)
		}
		checkLedger(t, tr, price, 9*price)
	})

	t.Run("headers set by the caller", func(t *testing.T) {
		secret := map[string]string{"PAYMENT-SIGNATURE": "caller-payment", "SIGN-IN-WITH-X": "caller-siwx", "X-PAYMENT": "caller-v1"}
		a, b := newServer(t), newServer(t)
		a.free, b.free = true, true
		// a/start -> a/same -> b/next -> b/again -> a/back
		a.routes = map[string]string{"/start": a.URL("/same"), "/same": b.URL("/next")}
		b.routes = map[string]string{"/next": b.URL("/again"), "/again": a.URL("/back")}
		tr, _ := newTransport(t, policy(10), a, b)

		rep, err := send(t, tr, a.URL("/start"), request{header: secret})
		if err != nil {
			t.Fatal(err)
		}
		if rep.resp.StatusCode != 200 {
			t.Errorf("status = %d, want 200", rep.resp.StatusCode)
		}
		ra, _ := a.snapshot()
		rb, _ := b.snapshot()
		type hop struct{ Path, Payment, SignIn, Legacy string }
		var got []hop
		for _, r := range append(ra, rb...) {
			got = append(got, hop{r.Path, r.Payment, r.SignIn, r.Legacy})
		}
		want := []hop{
			{"/start", "caller-payment", "caller-siwx", "caller-v1"},
			{"/same", "caller-payment", "caller-siwx", "caller-v1"},
			{"/back", "caller-payment", "caller-siwx", "caller-v1"},
			{"/next", "", "", ""},
			{"/again", "", "", ""},
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("headers per hop (-want +got):\n%s", diff)
		}
	})
}

// TestTransportConcurrentBudget: concurrent calls never commit more than the
// budget between them; identical requests in flight together are distinct
// calls, each with its own journal entry.
func TestTransportConcurrentBudget(t *testing.T) {
	journals(t, func(t *testing.T, newJournal func(func() time.Time) client.Journal) {
		testConcurrentBudget(t, newJournal(nil))
	})
}

func testConcurrentBudget(t *testing.T, j client.Journal) {
	const calls, affordable = 32, 10
	srv := newServer(t, offer(price))
	srv.extensions = declared
	tr, _ := newTransport(t, policy(affordable), srv)
	tr.Journal = j

	start := make(chan struct{})
	errs := make(chan error, calls)
	var wg sync.WaitGroup
	for range calls {
		wg.Go(func() {
			<-start
			rep, err := send(t, tr, srv.URL("/paid"), request{method: http.MethodPost, body: chatBody})
			if err == nil && (rep.resp.StatusCode != 200 || rep.body != "paid") {
				err = fmt.Errorf("answer %d %q", rep.resp.StatusCode, rep.body)
			}
			errs <- err
		})
	}
	close(start)
	wg.Wait()
	close(errs)

	ok, refused := 0, 0
	for err := range errs {
		var npe *client.NoPayableOptionError
		switch {
		case err == nil:
			ok++
		case errors.As(err, &npe) && len(npe.Options) == 1 && npe.Options[0].RefusalError == client.RefusedOverBudget:
			refused++
		default:
			t.Errorf("call failed: %v", err)
		}
	}
	if ok != affordable || refused != calls-affordable {
		t.Errorf("%d paid and %d refused, want %d and %d", ok, refused, affordable, calls-affordable)
	}
	if _, paid := srv.snapshot(); len(paid) != affordable {
		t.Errorf("server received %d payments, want %d", len(paid), affordable)
	}
	ids := map[string]bool{}
	for _, r := range srv.paidRequests() {
		ids[r.ID] = true
	}
	if len(ids) != affordable {
		t.Errorf("%d distinct payment ids, want %d", len(ids), affordable)
	}
	checkLedger(t, tr, affordable*price, 0)
}

// TestTransportSecretsNotLogged: the payment header, the signature and the key
// never appear in the log, at debug level, while the log does say what was paid.
func TestTransportSecretsNotLogged(t *testing.T) {
	srv := newServer(t, offer(price))
	tr, logs := newTransport(t, policy(10), srv)
	if _, err := send(t, tr, srv.URL("/paid"), request{method: http.MethodPost, body: chatBody}); err != nil {
		t.Fatal(err)
	}
	srv.after = paid402Again
	if _, err := send(t, tr, srv.URL("/paid"), request{}); err != nil {
		t.Fatal(err)
	}
	out := logs.String()
	for _, want := range []string{`"msg":"paying"`, `"msg":"payment outcome"`, `"outcome":"paid"`, `"outcome":"not_paid"`, `"amount":"10000"`, `"component":"x402-client"`} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %s:\n%s", want, out)
		}
	}
	secrets := srv.secrets()
	if len(secrets) != 4 {
		t.Fatalf("server recorded %d secrets, want 2 headers and 2 signatures", len(secrets))
	}
	for _, s := range secrets {
		if strings.Contains(out, s) {
			t.Errorf("log contains %.40s...", s)
		}
	}
	// newTransport's cleanup checks the same for every other test.
}

// TestSecretFormatting: a JournalEntry printed or logged whole does not show the
// payment header.
func TestSecretFormatting(t *testing.T) {
	e := client.JournalEntry{Method: "POST", Header: client.Secret("eyJzZWNyZXQiOnRydWV9")}
	for _, s := range []string{fmt.Sprint(e), fmt.Sprintf("%+v", e), fmt.Sprintf("%#v", e), fmt.Sprint(e.Header)} {
		if strings.Contains(s, "eyJzZWNyZXQiOnRydWV9") {
			t.Errorf("formatted entry shows the secret: %s", s)
		}
	}
	if e.Header.Reveal() != "eyJzZWNyZXQiOnRydWV9" {
		t.Error("Reveal does not return the value")
	}
}

// recordingJournal records the calls a Transport makes.
type recordingJournal struct {
	mu    sync.Mutex
	calls []string
	fail  string // method that fails
}

func (j *recordingJournal) note(call string, e *client.JournalEntry) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.calls = append(j.calls, fmt.Sprintf("%s header=%v", call, e.Header.Reveal() != ""))
	if strings.HasPrefix(call, j.fail) && j.fail != "" {
		return errors.New("journal unavailable")
	}
	return nil
}

func (j *recordingJournal) Begin(_ context.Context, e *client.JournalEntry) error {
	return j.note("begin", e)
}

func (j *recordingJournal) Signed(_ context.Context, e *client.JournalEntry) error {
	return j.note("signed", e)
}

func (j *recordingJournal) Finish(_ context.Context, e *client.JournalEntry, o client.Outcome) error {
	return j.note("finish "+o.String(), e)
}

// TestTransportJournal: the journal sees a payment before signing, after
// signing and with its outcome; a journal that cannot record stops the payment.
func TestTransportJournal(t *testing.T) {
	tests := []struct {
		fail      string
		wantCalls []string
		wantPaid  int
	}{
		{wantCalls: []string{"begin header=false", "signed header=true", "finish paid header=true"}, wantPaid: 1},
		{fail: "begin", wantCalls: []string{"begin header=false"}},
		// The journal could not record the signed payment: nothing is sent,
		// and Finish releases the entry as it was before signing.
		{fail: "signed", wantCalls: []string{"begin header=false", "signed header=true", "finish unknown header=false"}},
	}
	for _, tc := range tests {
		t.Run("fail "+tc.fail, func(t *testing.T) {
			srv := newServer(t, offer(price))
			tr, _ := newTransport(t, policy(10), srv)
			j := &recordingJournal{fail: tc.fail}
			tr.Journal = j
			_, err := send(t, tr, srv.URL("/paid"), request{})
			if (err != nil) != (tc.fail != "") {
				t.Errorf("error = %v", err)
			}
			checkErrorClean(t, err, srv)
			if diff := cmp.Diff(tc.wantCalls, j.calls); diff != "" {
				t.Errorf("journal calls (-want +got):\n%s", diff)
			}
			if _, paid := srv.snapshot(); len(paid) != tc.wantPaid {
				t.Errorf("server received %d payments, want %d", len(paid), tc.wantPaid)
			}
			checkLedger(t, tr, int64(tc.wantPaid)*price, 10*price-int64(tc.wantPaid)*price)
		})
	}
}

// withPolicy is policy(10) changed by edit.
func withPolicy(edit func(*client.Policy)) *client.Policy {
	p := policy(10)
	edit(&p)
	return &p
}

// TestTransportAllowLists: a recipient and an origin on the policy's lists are
// paid, whatever the case of the address and with the default port implied.
func TestTransportAllowLists(t *testing.T) {
	srv := newServer(t, offer(price))
	pol := withPolicy(func(p *client.Policy) {
		p.PayTo = []string{strings.ToLower(payTo)}
		p.Origins = []string{"https://api.example.com", strings.TrimSuffix(srv.URL("/"), "/")}
	})
	tr, _ := newTransport(t, *pol, srv)
	rep, err := send(t, tr, srv.URL("/paid"), request{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d, want 200", rep.resp.StatusCode)
	}
	if _, paid := srv.snapshot(); len(paid) != 1 {
		t.Errorf("payments = %d, want 1", len(paid))
	}
}
