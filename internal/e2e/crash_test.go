package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/llm4agents/llm4agents/internal/crashpoint"
	"github.com/llm4agents/llm4agents/internal/facilitator"
	"github.com/llm4agents/llm4agents/internal/proctest"
	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/internal/testchain"
	"github.com/llm4agents/llm4agents/internal/upstream/upstreamtest"
	"github.com/llm4agents/llm4agents/x402"
)

// settlementLease is how long the facilitator's claim on a settlement blocks
// the reconciler after its holder died: `serve` leaves
// facilitator.Config.ClaimLease at its default.
const settlementLease = facilitator.DefaultClaimLease

// crashCases are the crash points of DECISIONS D21, each on a non-streaming
// request, and after-upstream on a stream too (its point is after the first
// content chunk). upstreamBefore is how many upstream calls the crashed
// request made.
var crashCases = []struct {
	name           string
	point          crashpoint.Point
	body           string
	upstreamBefore int64
}{
	{"after-claim", crashpoint.AfterClaim, chatBody, 0},
	{"after-upstream", crashpoint.AfterUpstream, chatBody, 1},
	{"after-upstream-stream", crashpoint.AfterUpstream, streamBody, 1},
	{"after-broadcast", crashpoint.AfterBroadcast, chatBody, 1},
	{"after-receipt", crashpoint.AfterReceipt, chatBody, 1},
	{"after-record", crashpoint.AfterRecord, chatBody, 1},
}

// TestCrashPoints kills a replica at each crash point (LLM4AGENTS_CRASHPOINT,
// DECISIONS D21) while it serves a paid request, restarts it without the
// crash point on the same store and key, and lets the buyer retry the same
// PAYMENT-SIGNATURE until it gets a final answer. Whatever the buyer ends up
// with, the money must be right: at most one settlement of the authorization
// on chain, paying payTo the quoted amount; a 200 only with that settlement;
// the facilitator's record settled with the mined transaction when there is
// one and never settled without one (the reconciler resolves what the crash
// left, at start and periodically); no claim left in force past its lease.
//
// The buyer's outcome is logged, not asserted: until staged answers are
// promoted (issue 5), a crash after the broadcast leaves the buyer paid and
// unanswered (a 402 on retry), which this test reports.
func TestCrashPoints(t *testing.T) {
	skipShort(t)
	bin := proctest.BuildBinary(t)
	// The cases mostly wait for leases: they run at once, whatever -parallel
	// says (it is sized for CPU-bound tests).
	concurrently(t, len(storeVariants), func(i int) string { return storeVariants[i].name }, func(t *testing.T, i int) {
		v := storeVariants[i]
		c := startChain(t)
		report := make([]string, len(crashCases))
		concurrently(t, len(crashCases), func(i int) string { return crashCases[i].name }, func(t *testing.T, i int) {
			tc := crashCases[i]
			report[i] = fmt.Sprintf("  %-22s %s", tc.name, crashAndRecover(t, bin, c, v, i, tc.point, tc.body, tc.upstreamBefore))
		})
		t.Logf("buyer outcomes on %s:\n%s", v.name, strings.Join(report, "\n"))
	})
}

// crashAndRecover runs one crash case with facilitator signer signer and
// returns a line that says how it went for the buyer.
func crashAndRecover(t *testing.T, bin string, c *chainEnv, v storeVariant, signer int, point crashpoint.Point, body string, upstreamBefore int64) string {
	up := upstreamtest.NewServer(t, upstreamtest.Config{})
	dsn := v.fresh(t)
	cfg := replicaConfig(c, dsn, up.URL())
	hc := newHTTPClient(t)

	crashing := proctest.Start(t, bin, proctest.Options{
		Name: "replica armed at " + string(point), ConfigYAML: cfg,
		Env: []string{signerEnv(signer), crashpoint.EnvVar + "=" + string(point)},
	})
	b := newBuyer(t, hc, crashing.URL, body)
	pay := b.sign(t)
	if a := post(t.Context(), hc, crashing.URL, body, pay.header); a.err == nil {
		t.Errorf("the crashing replica answered %s before dying", a.outcome())
	}
	crashed := time.Now()
	select {
	case <-crashing.Exited:
	case <-time.After(callTimeout):
		t.Fatalf("the replica armed at %s still runs %s after the request", point, callTimeout)
	}
	if code := crashing.Wait(); code != crashpoint.ExitCode {
		t.Fatalf("the replica armed at %s exited with %d, want %d (the crash point)", point, code, crashpoint.ExitCode)
	}
	if want := "crash point " + string(point) + " reached"; !strings.Contains(crashing.Logs(), want) {
		t.Errorf("the replica's output lacks %q", want)
	}
	if n := up.Calls(); n != upstreamBefore {
		t.Errorf("the crashed request called the upstream %d times, want %d", n, upstreamBefore)
	}

	restarted := proctest.Start(t, bin, proctest.Options{Name: "restarted replica", ConfigYAML: cfg, Env: []string{signerEnv(signer), crashpoint.EnvVar + "="}})
	final, attempts := retryUntilFinal(t, hc, restarted.URL, body, pay.header, crashed.Add(claimLease+callTimeout))

	// Money: at most one settlement, of the quoted amount, to payTo.
	payTo := testchain.DevAddress(payToIdx)
	onChain := c.settlements(t, pay.from, pay.nonce)
	if len(onChain) > 1 {
		t.Errorf("the authorization was settled %d times on chain", len(onChain))
	}
	for _, s := range onChain {
		if s.to != payTo || s.amount == nil || s.amount.Cmp(b.amount) != 0 {
			t.Errorf("settlement %s paid %s to %s, want %s to %s", s.tx.Hex(), s.amount, s.to.Hex(), b.amount, payTo.Hex())
		}
		if s.sender != testchain.DevAddress(firstSignerIdx+signer) {
			t.Errorf("settlement %s sent by %s, not by this replica's signer", s.tx.Hex(), s.sender.Hex())
		}
	}
	if final.status == http.StatusOK {
		switch {
		case len(onChain) != 1:
			t.Errorf("the buyer got a 200 with %d settlements on chain", len(onChain))
		case final.settled == nil || !final.settled.Success || final.settled.Transaction != onChain[0].tx.Hex():
			t.Errorf("the 200's PAYMENT-RESPONSE %+v does not name the settlement %s", final.settled, onChain[0].tx.Hex())
		case !hasCompletion(final.body):
			t.Errorf("the 200 carries no completion: %.300s", final.body)
		}
	}

	// Records: they agree with the chain once the reconciler had its chance.
	rec := openRecords(t, v, dsn)
	settlementState := checkSettlementRecord(t, rec, pay.key, onChain, crashed.Add(settlementLease+10*reconcileInterval+15*time.Second))
	claimState := checkPaymentClaim(t, rec, pay.key, onChain)

	outcome := final.outcome()
	if final.err != nil {
		outcome += ": " + final.err.Error()
	}
	paid := "not paid"
	if len(onChain) == 1 {
		paid = "paid once"
	}
	unanswered := ""
	if len(onChain) == 1 && !final.fresh() {
		unanswered = " (paid, unanswered until issue 5)"
	}
	return fmt.Sprintf("buyer got %s after %d retries%s; %s on chain; upstream called %d times; settlement record %s; payment claim %s",
		outcome, attempts, unanswered, paid, up.Calls(), settlementState, claimState)
}

// retryUntilFinal re-presents payment to url as a buyer would: after a
// transport error or a 5xx with a short backoff, after a 409 or a
// settlement_pending 402 when Retry-After says, until another answer or the
// deadline. It returns the last answer and the number of retries.
func retryUntilFinal(t *testing.T, hc *http.Client, url, body, payment string, deadline time.Time) (answer, int) {
	t.Helper()
	backoff := 100 * time.Millisecond
	for n := 0; ; n++ {
		a := post(t.Context(), hc, url, body, payment)
		var wait time.Duration
		switch {
		case a.err != nil || a.status >= 500:
			wait, backoff = backoff, min(2*backoff, 2*time.Second)
		case a.status == http.StatusConflict, a.reason == string(x402.ReasonSettlementPending):
			wait = min(max(a.retryAfter, 500*time.Millisecond), 5*time.Second)
		default:
			return a, n
		}
		if time.Now().Add(wait).After(deadline) {
			t.Errorf("no final answer by the deadline; last: %s (err %v) %.200s", a.outcome(), a.err, a.body)
			return a, n
		}
		select {
		case <-t.Context().Done():
			return a, n
		case <-time.After(wait):
		}
	}
}

// checkSettlementRecord waits until the facilitator's record for key is
// final and checks it against the chain: settled with the mined transaction
// when the chain has a settlement, never settled without one. It returns the
// record's state for the report.
func checkSettlementRecord(t *testing.T, rec records, key string, onChain []settlement, deadline time.Time) string {
	t.Helper()
	for {
		s, err := readSettlement(t.Context(), rec, key)
		switch {
		case err != nil && !errors.Is(err, store.ErrNotFound):
			t.Fatalf("read settlement record: %v", err)
		case errors.Is(err, store.ErrNotFound) && len(onChain) == 0:
			return "absent"
		case errors.Is(err, store.ErrNotFound):
			// A transfer must get its record: wait for the reconciler.
		case s.State == store.StateSettled:
			if len(onChain) != 1 {
				t.Errorf("settlement record settled (tx %s) with %d settlements on chain", s.TxHash, len(onChain))
			} else if !strings.EqualFold(s.TxHash, onChain[0].tx.Hex()) {
				t.Errorf("settlement record settled with tx %s, the chain's is %s", s.TxHash, onChain[0].tx.Hex())
			}
			return "settled"
		case s.State == store.StateFailed:
			if len(onChain) > 0 {
				t.Errorf("settlement record failed (%s) though the chain settled it in %s", s.Reason, onChain[0].tx.Hex())
			}
			return "failed (" + s.Reason + ")"
		}
		// Absent with a transfer on chain, claimed or broadcast: the
		// reconciler has not resolved it yet.
		if time.Now().After(deadline) {
			t.Errorf("settlement record still unresolved (%v, state %q, tx %q) by the deadline, with %d settlements on chain", err, s.State, s.TxHash, len(onChain))
			return "unresolved (" + string(s.State) + ")"
		}
		select {
		case <-t.Context().Done():
			return "unresolved"
		case <-time.After(reconcileInterval):
		}
	}
}

func readSettlement(ctx context.Context, rec records, key string) (store.Settlement, error) {
	ctx, cancel := context.WithTimeout(ctx, store.DefaultTimeout)
	defer cancel()
	return rec.Settlement(ctx, key)
}

// checkPaymentClaim checks the gateway's claim on the authorization: settled
// only with the chain's transaction, and, when still held, not in force past
// its lease: once the lease ran out, a new claim takes it over.
func checkPaymentClaim(t *testing.T, rec records, key string, onChain []settlement) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), claimLease+time.Minute)
	defer cancel()
	pc, err := rec.Payment(ctx, key)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return "absent"
	case err != nil:
		t.Fatalf("read payment claim: %v", err)
	}
	switch pc.State {
	case store.PaymentSettled:
		if len(onChain) != 1 || !strings.EqualFold(pc.TxHash, onChain[0].tx.Hex()) {
			t.Errorf("payment claim settled with tx %q; %d settlements on chain", pc.TxHash, len(onChain))
		}
		return "settled"
	case store.PaymentPending:
		return "pending (tx " + pc.TxHash + ")"
	case store.PaymentHeld:
		if wait := time.Until(pc.LeaseUntil); wait > 0 {
			if wait > claimLease {
				t.Errorf("payment claim held %s more, past its %s lease", wait, claimLease)
				return "held past its lease"
			}
			select {
			case <-ctx.Done():
				t.Fatal("gave up waiting for the claim's lease")
			case <-time.After(wait + 100*time.Millisecond):
			}
		}
		probe := pc
		probe.Owner = "e2e lease probe"
		_, held, err := rec.ClaimPayment(ctx, probe, time.Second)
		if err != nil {
			t.Fatalf("probe the expired claim: %v", err)
		}
		if !held {
			t.Errorf("payment claim held by %s past its lease (until %s): a new claim could not take it over", pc.Owner, pc.LeaseUntil.Format(time.RFC3339Nano))
			return "held, stuck"
		}
		return "held by the dead replica, lease expired (taken over by a probe)"
	}
	return string(pc.State)
}

// TestCrashAfterBroadcastUnmined is the after-broadcast crash on a chain that
// does not mine at once (anvil with automine off, DECISIONS D22): the
// settlement transaction is still in the pool when the replica dies, and is
// mined only after the restarted replica's reconciler has looked at the
// record the crash left (claimed, no transaction hash) once its lease ran
// out. The money and the records must still come right: one settlement,
// recorded as settled with its transaction.
//
// It fails today, so it runs only with LLM4AGENTS_E2E_KNOWN_GAPS=1 (and takes
// two settlement leases, about 5 minutes): the reconciler releases the
// claimed record because the authorization is still unused on chain, and
// once the transaction mines no record is left to resolve; meanwhile the
// gateway, told nonce_already_used by the facilitator whose claim is still
// in force, records its payment claim settled with no transaction and calls
// the upstream a second time.
func TestCrashAfterBroadcastUnmined(t *testing.T) {
	skipShort(t)
	if os.Getenv("LLM4AGENTS_E2E_KNOWN_GAPS") != "1" {
		t.Skip("a known gap (see the comment); set LLM4AGENTS_E2E_KNOWN_GAPS=1 to run it")
	}
	bin := proctest.BuildBinary(t)
	v := storeVariants[0]
	c := startChain(t)
	up := upstreamtest.NewServer(t, upstreamtest.Config{})
	dsn := v.fresh(t)
	cfg := replicaConfig(c, dsn, up.URL())
	hc := newHTTPClient(t)
	crashing := proctest.Start(t, bin, proctest.Options{
		Name: "replica armed at after-broadcast", ConfigYAML: cfg,
		Env: []string{signerEnv(0), crashpoint.EnvVar + "=" + string(crashpoint.AfterBroadcast)},
	})
	b := newBuyer(t, hc, crashing.URL, chatBody)
	pay := b.sign(t)
	if err := c.anvil.SetAutomine(t.Context(), false); err != nil {
		t.Fatal(err)
	}
	if a := post(t.Context(), hc, crashing.URL, chatBody, pay.header); a.err == nil {
		t.Errorf("the crashing replica answered %s before dying", a.outcome())
	}
	crashed := time.Now()
	if code := crashing.Wait(); code != crashpoint.ExitCode {
		t.Fatalf("the replica exited with %d, want %d", code, crashpoint.ExitCode)
	}
	restarted := proctest.Start(t, bin, proctest.Options{Name: "restarted replica", ConfigYAML: cfg, Env: []string{signerEnv(0), crashpoint.EnvVar + "="}})
	final, attempts := retryUntilFinal(t, hc, restarted.URL, chatBody, pay.header, crashed.Add(claimLease+callTimeout))
	t.Logf("before mining, the buyer got %s after %d retries", final.outcome(), attempts)

	// Past the settlement's lease the reconciler has decided about the record.
	rec := openRecords(t, v, dsn)
	time.Sleep(time.Until(crashed.Add(settlementLease + 3*reconcileInterval)))
	s, err := readSettlement(t.Context(), rec, pay.key)
	t.Logf("before mining, the settlement record is %q (tx %q), err %v", s.State, s.TxHash, err)

	if err := c.anvil.SetAutomine(t.Context(), true); err != nil {
		t.Fatal(err)
	}
	if err := c.anvil.Mine(t.Context(), 1); err != nil {
		t.Fatal(err)
	}
	onChain := c.settlements(t, pay.from, pay.nonce)
	if len(onChain) != 1 {
		t.Fatalf("%d settlements on chain after mining the crashed replica's transaction, want 1", len(onChain))
	}
	final, _ = retryUntilFinal(t, hc, restarted.URL, chatBody, pay.header, time.Now().Add(claimLease+callTimeout))
	state := checkSettlementRecord(t, rec, pay.key, onChain, time.Now().Add(10*reconcileInterval+15*time.Second))
	claim := checkPaymentClaim(t, rec, pay.key, onChain)
	t.Logf("after mining: buyer got %s; upstream called %d times; settlement record %s; payment claim %s", final.outcome(), up.Calls(), state, claim)
}
