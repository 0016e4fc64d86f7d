package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/http"
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

// settlementLease bounds how long the facilitator's claim on a settlement
// blocks the reconciler after its holder died. `serve` gives the facilitator
// the config's claim_lease (claimLease here); the facilitator's default, the
// longer of the two, is kept as a generous deadline for a loaded machine.
const settlementLease = facilitator.DefaultClaimLease

// crashCases are the crash points of D21, each on a non-streaming
// request, and after-upstream and after-broadcast on a stream too (a
// stream's after-upstream point is after the first content chunk).
// upstreamBefore is how many upstream calls the crashed request made;
// replay says whether the buyer's retry gets the crashed request's staged
// answer (200 with X-Llm4agents-Replay) or a fresh one (200, a new upstream
// call): a crash past the broadcast of a non-streaming request leaves its
// answer staged, a crash before it, or a stream's past it, leaves none.
var crashCases = []struct {
	name           string
	point          crashpoint.Point
	body           string
	upstreamBefore int64
	replay         bool
}{
	{"after-claim", crashpoint.AfterClaim, chatBody, 0, false},
	{"after-upstream", crashpoint.AfterUpstream, chatBody, 1, false},
	{"after-upstream-stream", crashpoint.AfterUpstream, streamBody, 1, false},
	{"after-broadcast", crashpoint.AfterBroadcast, chatBody, 1, true},
	{"after-broadcast-stream", crashpoint.AfterBroadcast, streamBody, 1, false},
	{"after-receipt", crashpoint.AfterReceipt, chatBody, 1, true},
	{"after-record", crashpoint.AfterRecord, chatBody, 1, true},
}

// TestCrashPoints kills a replica at each crash point (LLM4AGENTS_CRASHPOINT,
// D21) while it serves a paid request, restarts it without the
// crash point on the same store and key, and lets the buyer retry the same
// PAYMENT-SIGNATURE until it gets a final answer. Whatever the buyer ends up
// with, the money must be right: at most one settlement of the authorization
// on chain, paying payTo the quoted amount; a 200 only with that settlement;
// the facilitator's record settled with the mined transaction when there is
// one and never settled without one (the reconciler resolves what the crash
// left, at start and periodically); no claim left in force past its lease.
//
// And the buyer gets its answer, paying once: a 200 with the one settlement
// at every crash point. Where the crashed request had staged its answer (past
// the broadcast of a non-streaming request) the 200 is that answer, replayed
// (X-Llm4agents-Replay) with no second upstream call; elsewhere it is a fresh
// answer, one more upstream call, served once the dead request's claim lease
// ended (before that: 409 with Retry-After).
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
			report[i] = fmt.Sprintf("  %-22s %s", tc.name, crashAndRecover(t, bin, c, v, i, tc.point, tc.body, tc.upstreamBefore, tc.replay))
		})
		t.Logf("buyer outcomes on %s:\n%s", v.name, strings.Join(report, "\n"))
	})
}

// crashAndRecover runs one crash case with facilitator signer signer and
// returns a line that says how it went for the buyer. replay: the buyer's
// final answer must be the crashed request's, replayed.
func crashAndRecover(t *testing.T, bin string, c *chainEnv, v storeVariant, signer int, point crashpoint.Point, body string, upstreamBefore int64, replay bool) string {
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
	// A store without recovery records (store.Recoveries) stages nothing
	// but a pending settlement's answer: there, every answer is fresh.
	rec := openRecords(t, v, dsn)
	if _, ok := rec.(store.Recoveries); !ok {
		replay = false
	}
	// The buyer: paid once, answered once.
	switch {
	case final.status != http.StatusOK:
		t.Errorf("the buyer's final answer is %s (%.200s), want a 200", final.outcome(), final.body)
	case len(onChain) != 1:
		t.Errorf("the buyer got a 200 with %d settlements on chain", len(onChain))
	case final.settled == nil || !final.settled.Success || final.settled.Transaction != onChain[0].tx.Hex():
		t.Errorf("the 200's PAYMENT-RESPONSE %+v does not name the settlement %s", final.settled, onChain[0].tx.Hex())
	case !hasCompletion(final.body):
		t.Errorf("the 200 carries no completion: %.300s", final.body)
	case replay && final.replay == "":
		t.Errorf("the 200 is a fresh answer; want the crashed request's staged answer, replayed")
	case !replay && final.replay != "":
		t.Errorf("the 200 is a replay (%s) though the crashed request staged nothing", final.replay)
	}
	// The upstream: the staged answer is never asked for again; an answer
	// that was never staged is asked for once more.
	wantCalls := upstreamBefore
	if !replay {
		wantCalls++
	}
	if n := up.Calls(); n != wantCalls {
		t.Errorf("the upstream was called %d times in all, want %d", n, wantCalls)
	}

	// Records: they agree with the chain once the reconciler had its chance.
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
	return fmt.Sprintf("buyer got %s after %d retries; %s on chain; upstream called %d times; settlement record %s; payment claim %s",
		outcome, attempts, paid, up.Calls(), settlementState, claimState)
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
