package e2e

import (
	"bytes"
	"fmt"
	"maps"
	"math/big"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llm4agents/llm4agents/internal/crashpoint"
	"github.com/llm4agents/llm4agents/internal/proctest"
	"github.com/llm4agents/llm4agents/internal/testchain"
	"github.com/llm4agents/llm4agents/internal/upstream/upstreamtest"
	"github.com/llm4agents/llm4agents/x402"
)

const (
	numReplicas = 3
	// copies is how many times each trial sends one PAYMENT-SIGNATURE, at
	// once, spread over the replicas.
	copies = 32
	// defaultTrials is the trial count of a default run; LLM4AGENTS_E2E_TRIALS
	// overrides it.
	defaultTrials = 200
	// controlTrials bounds the control run: one trial that shows the double
	// spend is enough, a few make it certain.
	controlTrials = 10
	// noClaimTag builds the binary whose claim can be switched off.
	noClaimTag = "l4a_unsafe_noclaim"
	noClaimEnv = "LLM4AGENTS_UNSAFE_NO_CLAIM=1"
)

// TestReplicasOneAuthorizationOnce checks exactly-once with real processes:
// three replicas on one store, each settling with its own key (D20), receive
// the same PAYMENT-SIGNATURE 32 times at once; exactly one copy gets a fresh
// 200 with a completion, the upstream is called once, and one transfer reaches
// the chain. Every other copy is refused with a 402 or a 409 and an error code.
// A replay (X-Llm4agents-Replay) is counted on its own and adds no upstream
// call and no transfer: when the settlement outlives its deadline the paying
// copy is answered settlement_pending (D3), and the trial retries it, as a
// buyer would, until the staged answer is replayed; that replay is then the
// trial's answer. Copies that arrive once the answer is promoted may be replays
// too (D15: the same PAYMENT-SIGNATURE proves control): counted, never a second
// fresh 200.
//
// The replicas run the default build with LLM4AGENTS_UNSAFE_NO_CLAIM=1 in
// their environment on purpose: only the l4a_unsafe_noclaim build reads it,
// and this run proves the default build ignores it.
func TestReplicasOneAuthorizationOnce(t *testing.T) {
	skipShort(t)
	trials := envInt(t, "LLM4AGENTS_E2E_TRIALS", defaultTrials)
	bin := proctest.BuildBinary(t)
	// The backends run side by side: PostgreSQL's trials wait on its commits
	// more than on the CPU.
	concurrently(t, len(storeVariants), func(i int) string { return storeVariants[i].name }, func(t *testing.T, i int) {
		v := storeVariants[i]
		r := runReplicas(t, bin, v, trials, false)
		r.log(t, v.name)
		for _, tr := range r.bad {
			t.Errorf("trial %d: %s", tr.n, tr.problem)
		}
		if r.upstreamCalls != r.trials || r.transfers != r.trials || r.answered != r.trials {
			t.Errorf("%d trials: %d answered (%d fresh 200s, %d replays), %d upstream calls, %d transfers; want %d of each",
				r.trials, r.answered, r.fresh, r.replays, r.upstreamCalls, r.transfers, r.trials)
		}
		if want := new(big.Int).Mul(r.amount, big.NewInt(int64(r.trials))); r.received.Cmp(want) != 0 {
			t.Errorf("payTo received %s, want %s (%d x %s)", r.received, want, r.trials, r.amount)
		}
	})
}

// TestReplicasControlClaimOff is the control of
// TestReplicasOneAuthorizationOnce: the same replicas built with -tags
// l4a_unsafe_noclaim and run with LLM4AGENTS_UNSAFE_NO_CLAIM=1, so the
// gateway's claim always succeeds. The concurrent copies of one authorization
// must then reach the upstream more than once (the double spend the claim
// exists for): if they do not, this harness cannot see what the claim prevents,
// and the test fails. The facilitator's own settlement claim is untouched, so
// the chain still sees at most one transfer per authorization.
func TestReplicasControlClaimOff(t *testing.T) {
	skipShort(t)
	trials := min(envInt(t, "LLM4AGENTS_E2E_TRIALS", defaultTrials), controlTrials)
	v := storeVariants[0] // the claim is off: the backend does not matter
	r := runReplicas(t, proctest.BuildBinary(t, noClaimTag), v, trials, true)
	r.log(t, "control, claim off")
	for _, tr := range r.bad {
		t.Errorf("trial %d: %s", tr.n, tr.problem)
	}
	if r.doubleSpent == 0 {
		t.Errorf("no trial of %d reached the upstream more than once or answered more than one fresh 200: the control does not show the double spend", trials)
	}
	if r.transfers > trials {
		t.Errorf("%d transfers for %d authorizations: the facilitator settled one twice", r.transfers, trials)
	}
}

// replicaRun is the tally of a run of trials.
type replicaRun struct {
	trials        int // run; fewer than asked when the run stopped early
	amount        *big.Int
	answered      int // trials whose buyer got the completion, fresh or replayed
	fresh         int // fresh 200s
	replays       int // 200s marked as replays
	recovered     int // of which after a settlement_pending answer and a retry
	upstreamCalls int
	transfers     int      // Transfer events to payTo during the run
	received      *big.Int // payTo's balance increase
	doubleSpent   int      // trials with more than one upstream call or fresh 200
	outcomes      map[string]int
	bad           []badTrial
	elapsed       time.Duration
}

type badTrial struct {
	n       int
	problem string
}

func (r *replicaRun) log(t *testing.T, label string) {
	t.Helper()
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(r.outcomes)) {
		parts = append(parts, fmt.Sprintf("%q: %d", k, r.outcomes[k]))
	}
	// One line, for scripts/soak-replicas.
	t.Logf("SUMMARY %s: %d trials x %d copies over %d replicas in %s (%.1f trials/s): %d fresh 200s, %d replays (%d after settlement_pending), %d upstream calls, %d transfers, %d trials double spent, %d bad trials; answers {%s}",
		label, r.trials, copies, numReplicas, r.elapsed.Round(time.Millisecond), float64(r.trials)/r.elapsed.Seconds(),
		r.fresh, r.replays, r.recovered, r.upstreamCalls, r.transfers, r.doubleSpent, len(r.bad), strings.Join(parts, ", "))
}

// runReplicas starts numReplicas `serve` processes of bin on a fresh store of
// variant v, and runs trials trials against them. A trial with an answer
// that is neither paid nor a clear refusal, or (unless control) that is not
// exactly once, is recorded in bad; the run stops after five of them.
func runReplicas(t *testing.T, bin string, v storeVariant, trials int, control bool) *replicaRun {
	t.Helper()
	c := startChain(t)
	up := upstreamtest.NewServer(t, upstreamtest.Config{})
	dsn := v.fresh(t)
	cfg := replicaConfig(c, dsn, up.URL())
	urls := make([]string, numReplicas)
	for i := range numReplicas {
		// The claim switch is set for every build: the l4a_unsafe_noclaim one
		// honours it (the control), the default one must ignore it. No
		// crash point is armed, whatever the test's own environment says.
		urls[i] = proctest.Start(t, bin, proctest.Options{
			Name:       fmt.Sprintf("replica %d", i),
			ConfigYAML: cfg,
			Env:        []string{signerEnv(i), noClaimEnv, crashpoint.EnvVar + "="},
		}).URL
	}
	hc := newHTTPClient(t)
	b := newBuyer(t, hc, urls[0], chatBody)
	payTo := testchain.DevAddress(payToIdx)

	r := &replicaRun{amount: b.amount, outcomes: map[string]int{}}
	startBlock := c.head(t) + 1
	startBalance := c.balance(t, payTo)
	start := time.Now()
	for n := range trials {
		p := b.sign(t)
		calls0, bal0 := up.Calls(), c.balance(t, payTo)
		answers := sendCopies(t, hc, urls, p)
		calls := int(up.Calls() - calls0)
		got := new(big.Int).Sub(c.balance(t, payTo), bal0)

		fresh, replays, pending := 0, 0, -1
		var problems []string
		for i, a := range answers {
			r.outcomes[a.outcome()]++
			switch {
			case a.fresh():
				fresh++
			case a.status == http.StatusOK && a.replay != "" && hasCompletion(a.body):
				replays++
			case (a.status == http.StatusPaymentRequired || a.status == http.StatusConflict) && a.code != "":
				// A clear refusal.
				if a.reason == string(x402.ReasonSettlementPending) {
					pending = i
				}
			default:
				problems = append(problems, fmt.Sprintf("copy %d (replica %d): %s, err %v, body %.200s", i, i%numReplicas, a.outcome(), a.err, a.body))
			}
		}
		if fresh+replays == 0 && pending >= 0 {
			// The settlement outlived its deadline (D3): the buyer
			// retries the same payment and receives the staged answer.
			a, _ := retryUntilFinal(t, hc, urls[pending%numReplicas], chatBody, p.header, time.Now().Add(time.Minute))
			r.outcomes["after settlement_pending, retried: "+a.outcome()]++
			if a.status == http.StatusOK && a.replay != "" && hasCompletion(a.body) {
				replays++
				r.recovered++
			}
			calls = int(up.Calls() - calls0)
			got = new(big.Int).Sub(c.balance(t, payTo), bal0)
		}
		r.fresh += fresh
		r.replays += replays
		r.upstreamCalls += calls
		if calls > 1 || fresh > 1 {
			r.doubleSpent++
		}
		if fresh == 1 || fresh == 0 && replays > 0 {
			r.answered++
		}
		if !control {
			if fresh > 1 || fresh == 0 && replays == 0 {
				problems = append(problems, fmt.Sprintf("%d fresh 200s and %d replays, want one fresh 200, or replays after settlement_pending", fresh, replays))
			}
			if calls != 1 {
				problems = append(problems, fmt.Sprintf("%d upstream calls, want 1", calls))
			}
			if got.Cmp(b.amount) != 0 {
				problems = append(problems, fmt.Sprintf("payTo received %s, want %s", got, b.amount))
			}
		}
		r.trials++
		if len(problems) > 0 {
			r.bad = append(r.bad, badTrial{n: n, problem: strings.Join(problems, "; ")})
			if len(r.bad) >= 5 {
				t.Errorf("stopping after %d bad trials", len(r.bad))
				break
			}
		}
	}
	r.elapsed = time.Since(start)
	r.transfers = c.transfersTo(t, payTo, startBlock)
	r.received = new(big.Int).Sub(c.balance(t, payTo), startBalance)
	return r
}

// sendCopies sends copies requests with one PAYMENT-SIGNATURE at once, copy i
// to replica i mod len(urls), and returns the answers by copy.
func sendCopies(t *testing.T, hc *http.Client, urls []string, p payment) []answer {
	t.Helper()
	answers := make([]answer, copies)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range copies {
		wg.Go(func() {
			<-start
			answers[i] = post(t.Context(), hc, urls[i%len(urls)], chatBody, p.header)
		})
	}
	close(start)
	wg.Wait()
	return answers
}

// TestDefaultBuildHasNoClaimSwitch: the switch that turns the claim off is
// not even in the default binary (its variable name is not in it), so no
// environment or config can reach it; the l4a_unsafe_noclaim build has it,
// which shows the check looks in the right place.
func TestDefaultBuildHasNoClaimSwitch(t *testing.T) {
	skipShort(t)
	name := []byte(strings.TrimSuffix(noClaimEnv, "=1"))
	for _, tc := range []struct {
		tags []string
		want bool
	}{
		{nil, false},
		{[]string{noClaimTag}, true},
	} {
		b, err := os.ReadFile(proctest.BuildBinary(t, tc.tags...))
		if err != nil {
			t.Fatal(err)
		}
		if got := bytes.Contains(b, name); got != tc.want {
			t.Errorf("build with tags %q contains %s: %t, want %t", tc.tags, name, got, tc.want)
		}
	}
}
