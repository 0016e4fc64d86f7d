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

	"github.com/google/go-cmp/cmp"

	"github.com/llm4agents/llm4agents/client"
	"github.com/llm4agents/llm4agents/x402"
)

// uptoOffer returns an upto requirement for at most amount atomic units of
// token, naming facilitator as the one allowed to settle, as the official
// @x402/evm 2.27 upto server offers it, changed by the options.
func uptoOffer(amount int64, opts ...func(*x402.PaymentRequirements)) x402.PaymentRequirements {
	r := offer(amount, withScheme("upto"), withExtra(`{"facilitatorAddress":"`+facilitator+`"}`))
	for _, o := range opts {
		o(&r)
	}
	return r
}

// charges records what a Transport reports through OnCharge.
type charges struct {
	mu  sync.Mutex
	got []client.Charge
}

func (c *charges) add(_ context.Context, ch client.Charge) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.got = append(c.got, ch)
}

func (c *charges) all() []client.Charge {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]client.Charge(nil), c.got...)
}

func amountText(n *big.Int) string {
	if n == nil {
		return "<nil>"
	}
	return n.String()
}

// TestTransportPaysUpto: an upto offer is signed as a Permit2 permit for its
// maximum, held at the maximum while open, and counted at the amount the
// settlement reports once paid; a reported amount that cannot be right counts
// the maximum and is reported as an error.
func TestTransportPaysUpto(t *testing.T) {
	tests := []struct {
		name    string
		accepts []x402.PaymentRequirements
		mode    client.UptoMode
		after   afterPay
		amount  *string // the PAYMENT-RESPONSE's amount; nil: none
		// want
		wantPaid    []int
		wantSpent   int64
		wantHeld    int64
		wantOutcome client.Outcome
		wantCounted *int64 // Charge.Amount; nil: none
		wantErr     error  // in Charge.Err
	}{
		{
			name:    "charged less than the maximum",
			accepts: []x402.PaymentRequirements{uptoOffer(price)}, amount: new("3000"),
			wantPaid: []int{0}, wantSpent: 3000, wantOutcome: client.OutcomePaid, wantCounted: new(int64(3000)),
		},
		{
			name:    "charged the maximum",
			accepts: []x402.PaymentRequirements{uptoOffer(price)}, amount: new("10000"),
			wantPaid: []int{0}, wantSpent: price, wantOutcome: client.OutcomePaid, wantCounted: new(int64(price)),
		},
		{
			name:    "charged nothing",
			accepts: []x402.PaymentRequirements{uptoOffer(price)}, amount: new("0"),
			wantPaid: []int{0}, wantSpent: 0, wantOutcome: client.OutcomePaid, wantCounted: new(int64(0)),
		},
		{
			name:     "success without an amount counts the maximum",
			accepts:  []x402.PaymentRequirements{uptoOffer(price)},
			wantPaid: []int{0}, wantSpent: price, wantOutcome: client.OutcomePaid, wantCounted: new(int64(price)),
		},
		{
			name:    "served without PAYMENT-RESPONSE counts the maximum",
			accepts: []x402.PaymentRequirements{uptoOffer(price)}, after: paidNoSettleHeader, amount: new("1"),
			wantPaid: []int{0}, wantSpent: price, wantOutcome: client.OutcomePaid, wantCounted: new(int64(price)),
		},
		{
			name:    "undecodable PAYMENT-RESPONSE counts the maximum",
			accepts: []x402.PaymentRequirements{uptoOffer(price)}, after: paidGarbageSettle,
			wantPaid: []int{0}, wantSpent: price, wantOutcome: client.OutcomePaid, wantCounted: new(int64(price)), wantErr: x402.ErrHeaderBase64,
		},
		{
			name:    "amount above the maximum",
			accepts: []x402.PaymentRequirements{uptoOffer(price)}, amount: new("10001"),
			wantPaid: []int{0}, wantSpent: price, wantOutcome: client.OutcomePaid, wantCounted: new(int64(price)), wantErr: client.ErrSettledAmount,
		},
		{
			name:    "amount far above the maximum",
			accepts: []x402.PaymentRequirements{uptoOffer(price)}, amount: new("115792089237316195423570985008687907853269984665640564039457584007913129639935"),
			wantPaid: []int{0}, wantSpent: price, wantOutcome: client.OutcomePaid, wantCounted: new(int64(price)), wantErr: client.ErrSettledAmount,
		},
		{
			name:    "negative amount",
			accepts: []x402.PaymentRequirements{uptoOffer(price)}, amount: new("-5000"),
			wantPaid: []int{0}, wantSpent: price, wantOutcome: client.OutcomePaid, wantCounted: new(int64(price)), wantErr: client.ErrSettledAmount,
		},
		{
			name:    "garbage amount",
			accepts: []x402.PaymentRequirements{uptoOffer(price)}, amount: new("a lot"),
			wantPaid: []int{0}, wantSpent: price, wantOutcome: client.OutcomePaid, wantCounted: new(int64(price)), wantErr: client.ErrSettledAmount,
		},
		{
			name:    "decimal amount",
			accepts: []x402.PaymentRequirements{uptoOffer(price)}, amount: new("0.003"),
			wantPaid: []int{0}, wantSpent: price, wantOutcome: client.OutcomePaid, wantCounted: new(int64(price)), wantErr: client.ErrSettledAmount,
		},
		{
			name:    "hex amount",
			accepts: []x402.PaymentRequirements{uptoOffer(price)}, amount: new("0x10"),
			wantPaid: []int{0}, wantSpent: price, wantOutcome: client.OutcomePaid, wantCounted: new(int64(price)), wantErr: client.ErrSettledAmount,
		},
		{
			name:    "settlement refused releases the maximum",
			accepts: []x402.PaymentRequirements{uptoOffer(price)}, after: paidSettleFailed,
			wantPaid: []int{0}, wantOutcome: client.OutcomeNotPaid,
		},
		{
			name:    "settlement pending keeps the maximum held",
			accepts: []x402.PaymentRequirements{uptoOffer(price)}, after: paidSettlePending, amount: new("1"),
			wantPaid: []int{0}, wantHeld: price, wantOutcome: client.OutcomeUnknown,
		},
		{
			name:    "prefers upto offered after exact",
			accepts: []x402.PaymentRequirements{offer(price), uptoOffer(price)}, amount: new("2500"),
			wantPaid: []int{1}, wantSpent: 2500, wantOutcome: client.OutcomePaid, wantCounted: new(int64(2500)),
		},
		{
			name:    "prefers upto offered before exact",
			accepts: []x402.PaymentRequirements{uptoOffer(price), offer(price)}, amount: new("2500"),
			wantPaid: []int{0}, wantSpent: 2500, wantOutcome: client.OutcomePaid, wantCounted: new(int64(2500)),
		},
		{
			name: "prefers upto to an upfront exact",
			accepts: []x402.PaymentRequirements{
				offer(price, withExtra(`{"name":"USD Coin","version":"2","paymentFlow":"upfront"}`)), uptoOffer(price),
			}, amount: new("1"),
			wantPaid: []int{1}, wantSpent: 1, wantOutcome: client.OutcomePaid, wantCounted: new(int64(1)),
		},
		{
			name:    "as offered pays exact first",
			accepts: []x402.PaymentRequirements{offer(price), uptoOffer(price)}, mode: client.UptoAsOffered, amount: new("2500"),
			wantPaid: []int{0}, wantSpent: price, wantOutcome: client.OutcomePaid, wantCounted: new(int64(price)),
		},
		{
			name:    "as offered pays upto first",
			accepts: []x402.PaymentRequirements{uptoOffer(price), offer(price)}, mode: client.UptoAsOffered, amount: new("2500"),
			wantPaid: []int{0}, wantSpent: 2500, wantOutcome: client.OutcomePaid, wantCounted: new(int64(2500)),
		},
		{
			name:    "refused upto pays exact",
			accepts: []x402.PaymentRequirements{uptoOffer(price), offer(price)}, mode: client.UptoRefuse, amount: new("2500"),
			wantPaid: []int{1}, wantSpent: price, wantOutcome: client.OutcomePaid, wantCounted: new(int64(price)),
		},
		{
			name:    "exact ignores an amount in its PAYMENT-RESPONSE",
			accepts: []x402.PaymentRequirements{offer(price)}, amount: new("1"),
			wantPaid: []int{0}, wantSpent: price, wantOutcome: client.OutcomePaid, wantCounted: new(int64(price)),
		},
		{
			name:    "upto over the per-request maximum pays exact",
			accepts: []x402.PaymentRequirements{uptoOffer(price + 1), offer(price)}, amount: new("1"),
			wantPaid: []int{1}, wantSpent: price, wantOutcome: client.OutcomePaid, wantCounted: new(int64(price)),
		},
		{
			name:    "upto without a facilitator pays exact",
			accepts: []x402.PaymentRequirements{uptoOffer(price, withExtra(`{}`)), offer(price)}, amount: new("1"),
			wantPaid: []int{1}, wantSpent: price, wantOutcome: client.OutcomePaid, wantCounted: new(int64(price)),
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := newServer(t, tc.accepts...)
			srv.setAfter(tc.after, tc.amount)
			pol := policy(10)
			pol.Upto = tc.mode
			tr, logs := newTransport(t, pol, srv)
			var got charges
			tr.OnCharge = got.add

			rep, err := send(t, tr, srv.URL("/paid"), request{})
			if err != nil {
				t.Fatalf("request: %v", err)
			}
			checkErrorClean(t, err, srv)
			_, paid := srv.snapshot()
			if diff := cmp.Diff(tc.wantPaid, paid); diff != "" {
				t.Errorf("payments received (-want +got):\n%s", diff)
			}
			if tr.Spent().Int64() != tc.wantSpent {
				t.Errorf("Spent() = %s, want %d", tr.Spent(), tc.wantSpent)
			}
			checkLedger(t, tr, tc.wantSpent, 10*price-tc.wantSpent-tc.wantHeld)

			chs := got.all()
			if len(chs) != 1 {
				t.Fatalf("OnCharge called %d times, want 1", len(chs))
			}
			ch := chs[0]
			paidOpt := tc.accepts[tc.wantPaid[0]]
			if ch.Requirements.Scheme != paidOpt.Scheme || ch.Maximum.String() != paidOpt.Amount {
				t.Errorf("Charge = %s of at most %s, want %s of %s", ch.Requirements.Scheme, amountText(ch.Maximum), paidOpt.Scheme, paidOpt.Amount)
			}
			if ch.Outcome != tc.wantOutcome {
				t.Errorf("Charge.Outcome = %v, want %v", ch.Outcome, tc.wantOutcome)
			}
			switch {
			case tc.wantCounted == nil && ch.Amount != nil:
				t.Errorf("Charge.Amount = %s, want none", ch.Amount)
			case tc.wantCounted != nil && (ch.Amount == nil || ch.Amount.Int64() != *tc.wantCounted):
				t.Errorf("Charge.Amount = %s, want %d", amountText(ch.Amount), *tc.wantCounted)
			}
			if !errors.Is(ch.Err, tc.wantErr) || (tc.wantErr == nil) != (ch.Err == nil) {
				t.Errorf("Charge.Err = %v, want %v", ch.Err, tc.wantErr)
			}
			if errors.Is(tc.wantErr, client.ErrSettledAmount) && !strings.Contains(logs.String(), "settlement amount not taken") {
				t.Error("a settlement amount not taken is not logged")
			}
			_ = rep
		})
	}
}

// TestTransportRefusesUpto: upto offers the Transport must not pay, with
// the reason each gives.
func TestTransportRefusesUpto(t *testing.T) {
	tests := []struct {
		name      string
		accepts   []x402.PaymentRequirements
		mode      client.UptoMode
		budget    int64
		want      []client.RefusalError
		wantLabel string // in the first option's label
	}{
		{name: "refused by the policy", accepts: []x402.PaymentRequirements{uptoOffer(price)}, mode: client.UptoRefuse,
			want: []client.RefusalError{client.RefusedUpto}, wantLabel: "refused by the policy"},
		{name: "no extra", accepts: []x402.PaymentRequirements{uptoOffer(price, withExtra(``))},
			want: []client.RefusalError{client.RefusedOffer}, wantLabel: "facilitator"},
		{name: "extra null", accepts: []x402.PaymentRequirements{uptoOffer(price, withExtra(`null`))},
			want: []client.RefusalError{client.RefusedOffer}, wantLabel: "facilitator"},
		{name: "no facilitatorAddress", accepts: []x402.PaymentRequirements{uptoOffer(price, withExtra(`{"name":"USD Coin","version":"2"}`))},
			want: []client.RefusalError{client.RefusedOffer}, wantLabel: "extra.facilitatorAddress is required"},
		{name: "facilitatorAddress in another case of key", accepts: []x402.PaymentRequirements{uptoOffer(price, withExtra(`{"FacilitatorAddress":"`+facilitator+`"}`))},
			want: []client.RefusalError{client.RefusedOffer}, wantLabel: "facilitatorAddress"},
		{name: "facilitatorAddress not an address", accepts: []x402.PaymentRequirements{uptoOffer(price, withExtra(`{"facilitatorAddress":"the facilitator"}`))},
			want: []client.RefusalError{client.RefusedOffer}, wantLabel: "facilitatorAddress"},
		{name: "facilitatorAddress too short", accepts: []x402.PaymentRequirements{uptoOffer(price, withExtra(`{"facilitatorAddress":"0xa0Ee7A142d267C1f36714E4a8F75612F20a797"}`))},
			want: []client.RefusalError{client.RefusedOffer}, wantLabel: "facilitatorAddress"},
		{name: "facilitatorAddress a number", accepts: []x402.PaymentRequirements{uptoOffer(price, withExtra(`{"facilitatorAddress":42}`))},
			want: []client.RefusalError{client.RefusedOffer}, wantLabel: "not a string"},
		{name: "facilitatorAddress zero", accepts: []x402.PaymentRequirements{uptoOffer(price, withExtra(`{"facilitatorAddress":"0x0000000000000000000000000000000000000000"}`))},
			want: []client.RefusalError{client.RefusedOffer}, wantLabel: "zero address"},
		{name: "extra not an object", accepts: []x402.PaymentRequirements{uptoOffer(price, withExtra(`["`+facilitator+`"]`))},
			want: []client.RefusalError{client.RefusedOffer}, wantLabel: "extra"},
		{name: "upfront flow", accepts: []x402.PaymentRequirements{uptoOffer(price, withExtra(`{"facilitatorAddress":"`+facilitator+`","paymentFlow":"upfront"}`))},
			want: []client.RefusalError{client.RefusedPaymentFlow}, wantLabel: "not supported by the upto scheme"},
		{name: "maximum over the per-request maximum", accepts: []x402.PaymentRequirements{uptoOffer(price + 1)},
			want: []client.RefusalError{client.RefusedOverMaximum}},
		{name: "maximum over the budget", accepts: []x402.PaymentRequirements{uptoOffer(price)}, budget: price - 1,
			want: []client.RefusalError{client.RefusedOverBudget}},
		{name: "negative maximum", accepts: []x402.PaymentRequirements{uptoOffer(-1)},
			want: []client.RefusalError{client.RefusedOffer}},
		{name: "permit valid too long", accepts: []x402.PaymentRequirements{uptoOffer(price, func(r *x402.PaymentRequirements) { r.MaxTimeoutSeconds = 1 << 40 })},
			want: []client.RefusalError{client.RefusedOffer}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := newServer(t, tc.accepts...)
			pol := policy(10)
			pol.Upto = tc.mode
			if tc.budget != 0 {
				pol.Budget = big.NewInt(tc.budget)
			}
			tr, _ := newTransport(t, pol, srv)
			_, err := send(t, tr, srv.URL("/paid"), request{})
			var npe *client.NoPayableOptionError
			if !errors.As(err, &npe) {
				t.Fatalf("error = %v, want a *NoPayableOptionError", err)
			}
			var got []client.RefusalError
			for _, o := range npe.Options {
				got = append(got, o.RefusalError)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("refusals (-want +got):\n%s", diff)
			}
			if !strings.Contains(npe.Options[0].Label, tc.wantLabel) || !strings.Contains(err.Error(), tc.wantLabel) {
				t.Errorf("label %q (error %q) does not say %q", npe.Options[0].Label, err, tc.wantLabel)
			}
			if requests, paid := srv.snapshot(); len(requests) != 1 || len(paid) != 0 {
				t.Errorf("server saw %d requests and %d payments, want 1 and 0", len(requests), len(paid))
			}
			checkLedger(t, tr, 0, pol.Budget.Int64())
		})
	}
}

// TestTransportUptoBudget: the budget holds an upto payment's maximum while it
// is open, and frees what the settlement did not charge once paid.
func TestTransportUptoBudget(t *testing.T) {
	srv := newServer(t, uptoOffer(price))
	pol := policy(1)
	pol.Budget = big.NewInt(price + 5000)
	tr, _ := newTransport(t, pol, srv)

	// Open: a pending settlement keeps the maximum held, so a second call of
	// the same maximum does not fit.
	srv.setAfter(paidSettlePending, nil)
	tr.Retry.MaxAttempts = 1
	rep, err := send(t, tr, srv.URL("/a"), request{})
	if err != nil {
		t.Fatalf("pending call: %v", err)
	}
	if rep.resp.StatusCode != 402 {
		t.Fatalf("pending call answered %d", rep.resp.StatusCode)
	}
	checkLedger(t, tr, 0, 5000)
	if _, err := send(t, tr, srv.URL("/b"), request{}); !errors.As(err, new(*client.NoPayableOptionError)) {
		t.Fatalf("second call while the first is open: error = %v, want over budget", err)
	}

	// The retry of the first call settles for 3000: the rest of its maximum
	// is free again, enough for a second call.
	three := "3000"
	srv.setAfter(paidOK, &three)
	if _, err := send(t, tr, srv.URL("/a"), request{}); err != nil {
		t.Fatalf("retry: %v", err)
	}
	checkLedger(t, tr, 3000, price+2000)
	if _, err := send(t, tr, srv.URL("/c"), request{}); err != nil {
		t.Fatalf("call after the settlement: %v", err)
	}
	checkLedger(t, tr, 6000, price-1000)
	if _, paid := srv.snapshot(); len(paid) != 2 {
		t.Errorf("server received %d distinct permits, want 2 (the retry resends the first)", len(paid))
	}
}

// TestTransportUptoJournal: an upto permit is recorded in the journal before it
// is sent, with its deadline, and a retry of the call, by a new Transport on
// the same FileJournal, sends the same permit again instead of a second one.
func TestTransportUptoJournal(t *testing.T) {
	srv := newServer(t, uptoOffer(price))
	dir := t.TempDir() + "/journal"
	j1, err := client.NewFileJournal(dir)
	if err != nil {
		t.Fatal(err)
	}
	tr1, _ := newTransport(t, policy(10), srv)
	tr1.Journal = j1
	tr1.Retry.MaxAttempts = 1
	srv.setAfter(paidHangUp, nil)
	if _, err := send(t, tr1, srv.URL("/paid"), request{}); err == nil {
		t.Fatal("call whose answer is lost succeeded")
	}
	checkLedger(t, tr1, 0, 9*price)

	j2, err := client.NewFileJournal(dir)
	if err != nil {
		t.Fatal(err)
	}
	tr2, _ := newTransport(t, policy(10), srv)
	tr2.Journal = j2
	var got charges
	tr2.OnCharge = got.add
	amount := "1234"
	srv.setAfter(paidOK, &amount)
	if _, err := send(t, tr2, srv.URL("/paid"), request{}); err != nil {
		t.Fatalf("retry after a restart: %v", err)
	}
	checkLedger(t, tr2, 1234, 10*price-1234)
	// net/http itself may resend a GET whose connection closed; every send
	// carries the one permit.
	paidReqs := srv.paidRequests()
	for _, r := range paidReqs {
		if r.Payment != paidReqs[0].Payment {
			t.Error("the retry did not resend the recorded permit")
		}
	}
	if _, paid := srv.snapshot(); len(paid) != 1 {
		t.Errorf("server received %d distinct permits, want 1", len(paid))
	}
	if chs := got.all(); len(chs) != 1 || chs[0].Amount == nil || chs[0].Amount.Int64() != 1234 {
		t.Errorf("charges = %+v, want one of 1234", chs)
	}
}

func TestSettledAmount(t *testing.T) {
	up := uptoOffer(price)
	tests := []struct {
		name    string
		req     x402.PaymentRequirements
		sr      *x402.SettleResponse
		want    string
		wantErr error
		anyErr  bool
	}{
		{name: "upto charged less", req: up, sr: &x402.SettleResponse{Success: true, Amount: "42"}, want: "42"},
		{name: "upto charged zero", req: up, sr: &x402.SettleResponse{Success: true, Amount: "0"}, want: "0"},
		{name: "upto charged the maximum", req: up, sr: &x402.SettleResponse{Success: true, Amount: "10000"}, want: "10000"},
		{name: "upto without a response", req: up, want: "10000"},
		{name: "upto without an amount", req: up, sr: &x402.SettleResponse{Success: true}, want: "10000"},
		{name: "upto failed settlement", req: up, sr: &x402.SettleResponse{Success: false, Amount: "1"}, want: "10000"},
		{name: "upto above the maximum", req: up, sr: &x402.SettleResponse{Success: true, Amount: "10001"}, want: "10000", wantErr: client.ErrSettledAmount},
		{name: "upto negative", req: up, sr: &x402.SettleResponse{Success: true, Amount: "-1"}, want: "10000", wantErr: client.ErrSettledAmount},
		{name: "upto leading zero", req: up, sr: &x402.SettleResponse{Success: true, Amount: "01"}, want: "10000", wantErr: client.ErrSettledAmount},
		{name: "upto plus sign", req: up, sr: &x402.SettleResponse{Success: true, Amount: "+1"}, want: "10000", wantErr: client.ErrSettledAmount},
		{name: "upto exponent", req: up, sr: &x402.SettleResponse{Success: true, Amount: "1e3"}, want: "10000", wantErr: client.ErrSettledAmount},
		{name: "upto spaces", req: up, sr: &x402.SettleResponse{Success: true, Amount: " 1"}, want: "10000", wantErr: client.ErrSettledAmount},
		{name: "upto money string", req: up, sr: &x402.SettleResponse{Success: true, Amount: "$0.01"}, want: "10000", wantErr: client.ErrSettledAmount},
		{name: "upto above uint256", req: up, sr: &x402.SettleResponse{Success: true, Amount: "1" + strings.Repeat("0", 80)}, want: "10000", wantErr: client.ErrSettledAmount},
		{name: "exact ignores the amount", req: offer(price), sr: &x402.SettleResponse{Success: true, Amount: "1"}, want: "10000"},
		{name: "option without an amount", req: uptoOffer(price, func(r *x402.PaymentRequirements) { r.Amount = "lots" }), anyErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := client.SettledAmount(tc.req, tc.sr)
			switch {
			case tc.anyErr:
				if err == nil || got != nil {
					t.Errorf("SettledAmount = %s, %v; want nil and an error", amountText(got), err)
				}
				return
			case !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil):
				t.Errorf("error = %v, want %v", err, tc.wantErr)
			}
			if amountText(got) != tc.want {
				t.Errorf("SettledAmount = %s, want %s", amountText(got), tc.want)
			}
			if err != nil && len(err.Error()) > 200 {
				t.Errorf("error repeats too much of the server's amount: %d bytes", len(err.Error()))
			}
		})
	}
}

func TestPolicyUptoMode(t *testing.T) {
	srv := newServer(t, uptoOffer(price))
	pol := policy(10)
	pol.Upto = client.UptoMode(7)
	tr, _ := newTransport(t, pol, srv)
	if _, err := send(t, tr, srv.URL("/paid"), request{}); !errors.Is(err, client.ErrInvalidPolicy) {
		t.Errorf("error = %v, want ErrInvalidPolicy", err)
	}
	for m, want := range map[client.UptoMode]string{client.UptoPrefer: "prefer", client.UptoAsOffered: "as-offered", client.UptoRefuse: "refuse"} {
		if m.String() != want {
			t.Errorf("%d.String() = %q, want %q", int(m), m.String(), want)
		}
	}
}

// TestTransportUptoConcurrentBudget: concurrent upto calls never hold more
// than the budget between them, and what stays spent is the sum of the
// charges of those paid.
func TestTransportUptoConcurrentBudget(t *testing.T) {
	srv := newServer(t, uptoOffer(price))
	charge := "1000"
	srv.setAfter(paidOK, &charge)
	pol := policy(3)
	tr, _ := newTransport(t, pol, srv)
	const calls = 12
	errs := make(chan error, calls)
	var wg sync.WaitGroup
	for i := range calls {
		wg.Go(func() {
			_, err := send(t, tr, srv.URL(fmt.Sprintf("/paid/%d", i)), request{})
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	paid := 0
	for err := range errs {
		switch {
		case err == nil:
			paid++
		case errors.As(err, new(*client.NoPayableOptionError)):
		default:
			t.Errorf("call: %v", err)
		}
	}
	if paid < 3 {
		t.Errorf("%d calls paid, want at least the 3 the budget holds at once", paid)
	}
	checkLedger(t, tr, int64(paid)*1000, 3*price-int64(paid)*1000)
	if _, got := srv.snapshot(); len(got) != paid {
		t.Errorf("server received %d permits, want %d", len(got), paid)
	}
}

// FuzzSettledAmount: whatever a server reports, what is counted is a uint256
// at most the maximum, and it is the reported amount exactly when there is no
// error.
func FuzzSettledAmount(f *testing.F) {
	for _, s := range []string{"", "0", "1", "10000", "10001", "-1", "01", "1e3", "0x10", " 1", "$0.01", strings.Repeat("9", 80)} {
		f.Add(s, true)
	}
	f.Fuzz(func(t *testing.T, amount string, success bool) {
		req := uptoOffer(price)
		got, err := client.SettledAmount(req, &x402.SettleResponse{Success: success, Amount: amount})
		if got == nil || got.Sign() < 0 || got.Cmp(big.NewInt(price)) > 0 {
			t.Fatalf("SettledAmount(%q) = %v, %v", amount, got, err)
		}
		reported := err == nil && success && amount != ""
		if reported && got.String() != amount {
			t.Fatalf("SettledAmount(%q) = %s without an error", amount, got)
		}
		if err != nil && got.Int64() != price {
			t.Fatalf("SettledAmount(%q) = %s with error %v, want the maximum", amount, got, err)
		}
	})
}

// TestTransportUptoStreamCharge: an upto stream answered before its
// settlement (no amount in PAYMENT-RESPONSE) holds its maximum until the body
// ends, then counts the charge its last chunk names; a charge that cannot be
// right, or none, counts the maximum.
func TestTransportUptoStreamCharge(t *testing.T) {
	tests := []struct {
		name      string
		charged   *string
		readFirst bool
		wantSpent int64
		wantErr   error
	}{
		{"the charge named", new("3000"), true, 3000, nil},
		{"a charge above the maximum", new("20000"), true, price, client.ErrSettledAmount},
		{"a charge that is no number", new("-1"), true, price, client.ErrSettledAmount},
		{"no charge named", nil, true, price, nil},
		{"the body closed unread", new("3000"), false, price, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := newServer(t, uptoOffer(price))
			srv.setAfter(paidUptoStream, tc.charged)
			pol := policy(2)
			tr, _ := newTransport(t, pol, srv)
			var got charges
			tr.OnCharge = got.add
			req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL("/stream"), nil)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			// Open: the maximum is held, nothing counted yet.
			checkLedger(t, tr, 0, price)
			if n := len(got.all()); n != 0 {
				t.Errorf("%d charges reported before the stream ended", n)
			}
			if tc.readFirst {
				if _, err := io.Copy(io.Discard, resp.Body); err != nil {
					t.Fatal(err)
				}
			}
			if err := resp.Body.Close(); err != nil {
				t.Fatal(err)
			}
			checkLedger(t, tr, tc.wantSpent, 2*price-tc.wantSpent)
			all := got.all()
			if len(all) != 1 || all[0].Amount == nil || all[0].Amount.Int64() != tc.wantSpent || !errors.Is(all[0].Err, tc.wantErr) {
				t.Fatalf("charges = %+v, want one of %d (err %v)", all, tc.wantSpent, tc.wantErr)
			}
		})
	}
}
