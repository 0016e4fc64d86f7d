package e2e

import (
	"context"
	"fmt"
	"math/big"
	"net/http"
	"path"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/crypto"

	"github.com/llm4agents/llm4agents/internal/credits"
	"github.com/llm4agents/llm4agents/internal/ledger"
	"github.com/llm4agents/llm4agents/internal/proctest"
	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/internal/store/postgres"
	"github.com/llm4agents/llm4agents/internal/store/sqlite"
	"github.com/llm4agents/llm4agents/internal/testchain"
	"github.com/llm4agents/llm4agents/internal/upstream/upstreamtest"
)

const (
	// capRequests is how many credit-paid requests the cap test sends at
	// once, spread over the replicas.
	capRequests = 200
	// keyCap is the key's total cap: $1.00 in 6-decimal USDC.
	keyCap = 1_000_000
	// accountFunds is the owner's balance: ten times the cap, so that the
	// key's cap, not the balance, is what binds.
	accountFunds = 10 * keyCap
	// readThenWriteTag builds the binary whose reservation can be switched to
	// read-then-write; readThenWriteEnv switches it.
	readThenWriteTag = "l4a_unsafe_readthenwrite"
	readThenWriteEnv = "LLM4AGENTS_UNSAFE_READ_THEN_WRITE=1"
	// creditBody asks the model of creditsConfig, priced so that each call
	// holds about 1.6 cents (its prompt and 16 output tokens at $625 per
	// million): the $1.00 cap admits some 60 of the 200 calls.
	creditBody = `{"model":"pricey","messages":[{"role":"user","content":"Say hello"}],"max_tokens":16}`
	// receiptKeyIdx is the dev key the replicas sign receipts with.
	receiptKeyIdx = 0
)

// TestCreditsCapAcrossReplicas checks a key's cap with real processes: three
// replicas on one store (a PostgreSQL database, or a SQLite file the three
// processes share) take 200 concurrent credit-paid calls
// through one API key whose total cap is $1.00; the key never spends more
// than $1.00 in total, and every refused call makes no upstream call. The
// reservation is one conditional write in the shared store, so no replica
// can admit a call on a cap another replica has just used up.
//
// The replicas run the default build with the read-then-write switch set in
// their environment on purpose: only the l4a_unsafe_readthenwrite build reads
// it, and this run proves the default build ignores it.
func TestCreditsCapAcrossReplicas(t *testing.T) {
	skipShort(t)
	bin := proctest.BuildBinary(t)
	for _, durability := range []string{"leased", "per_call"} {
		t.Run(durability, func(t *testing.T) {
			for _, cs := range creditStores {
				t.Run(cs.name, func(t *testing.T) {
					dsn, st := cs.open(t)
					testCreditsCap(t, bin, durability, dsn, st)
				})
			}
		})
	}
}

// testCreditsCap is TestCreditsCapAcrossReplicas with credits.durability
// set: leased (every replica charges against leases in memory; the store
// checks every lease against the cap) or per_call.
func testCreditsCap(t *testing.T, bin, durability, dsn string, st creditStore) {
	trials := envInt(t, "LLM4AGENTS_CAP_TRIALS", 3)
	runs := runCapTrials(t, bin, durability, dsn, st, trials)
	var over, answered, spent int64
	for i, r := range runs {
		if r.spent > keyCap {
			over++
		}
		answered += int64(r.answered)
		spent = max(spent, r.spent)
		if i > 0 {
			checkCapRun(t, r)
		}
	}
	t.Logf("SUMMARY %s on %s: %d trials of %d calls on %d replicas, %d over the cap, %d calls answered, the most spent in a trial %d of %d",
		durability, path.Base(t.Name()), trials, capRequests, numReplicas, over, answered, spent, keyCap)
	r := runs[0]
	t.Logf("default build, %s, first trial: %s", durability, r)
	checkCapRun(t, r)
}

// checkCapRun fails the test unless r kept the cap and makes a point.
func checkCapRun(t *testing.T, r capRun) {
	t.Helper()
	if r.spent > keyCap {
		t.Errorf("the key spent %d atomic units, above its cap of %d: %s", r.spent, keyCap, r)
	}
	if r.upstreamCalls != int64(r.answered) {
		t.Errorf("%d upstream calls for %d answers: a refused call reached the upstream", r.upstreamCalls, r.answered)
	}
	if r.answered == 0 || r.refused == 0 {
		t.Errorf("%d answered and %d refused: the test must both admit and refuse calls to mean anything", r.answered, r.refused)
	}
	if r.other > 0 {
		t.Errorf("%d answers were neither a 200 nor a 402 with the numbers: %s", r.other, r.sample)
	}
}

// TestCreditsCapControlReadThenWrite is the control of
// TestCreditsCapAcrossReplicas: with the reservation done as a read and a
// separate write (the test-only build and switch), the same 200 calls
// overspend the cap. If this test fails, the cap test above proves nothing.
func TestCreditsCapControlReadThenWrite(t *testing.T) {
	skipShort(t)
	bin := proctest.BuildBinary(t, readThenWriteTag)
	for _, cs := range creditStores {
		t.Run(cs.name, func(t *testing.T) {
			dsn, st := cs.open(t)
			r := runCapTrials(t, bin, "per_call", dsn, st, 1)[0]
			t.Logf("read-then-write build: %s", r)
			if r.spent <= keyCap {
				t.Errorf("the key spent %d atomic units, within its cap of %d: the control shows no overspend", r.spent, keyCap)
			}
		})
	}
}

// capRun is what one cap test run observed.
type capRun struct {
	answered, refused, other int
	upstreamCalls            int64
	spent                    int64 // by the key, as the ledger says
	sample                   string
}

func (r capRun) String() string {
	return fmt.Sprintf("%d answered, %d refused (402), %d other; %d upstream calls; the key spent %d of a %d cap",
		r.answered, r.refused, r.other, r.upstreamCalls, r.spent, keyCap)
}

// runCapTrials starts three replicas of bin on the fresh store at dsn (st,
// as the test reads it) and runs trials trials on them, each with a key of its own
// (total cap keyCap) taking capRequests concurrent calls spread over the
// replicas. A trial ends once every lease of its key is closed (the leases
// of the test config admit for 200ms), so its spent is the ledger's final
// word. The last trial stops the replicas first, as an operator would.
func runCapTrials(t *testing.T, bin, durability, dsn string, st keyLedger, trials int) []capRun {
	t.Helper()
	c := startChain(t)
	up := upstreamtest.NewServer(t, upstreamtest.Config{})
	asset := ledger.AssetID(network, c.token)
	secret, keyID := fundedKey(t, st, asset)

	cfg := replicaConfig(c, dsn, up.URL()) + creditsConfig + "  durability: " + durability + "\n  lease_window: 200ms\n"
	urls := make([]string, numReplicas)
	procs := make([]*proctest.Process, numReplicas)
	for i := range numReplicas {
		procs[i] = proctest.Start(t, bin, proctest.Options{
			Name:       fmt.Sprintf("replica %d", i),
			ConfigYAML: cfg,
			Env:        []string{signerEnv(i), receiptKeyEnv(), readThenWriteEnv},
		})
		urls[i] = procs[i].URL
	}

	hc := newHTTPClient(t)
	runs := make([]capRun, trials)
	for trial := range trials {
		if trial > 0 {
			secret, keyID = newCapKey(t, st, asset, trial)
		}
		runs[trial] = capTrial(t, hc, urls, up, secret)
		if trial == trials-1 {
			// Stopped as an operator stops them: leased replicas write
			// their last draws and close their leases.
			for _, p := range procs {
				if err := p.Stop(); err != nil {
					t.Error(err)
				}
			}
		}
		var u store.KeyUsage
		deadline := time.Now().Add(10 * time.Second)
		for {
			var err error
			if u, err = st.KeyUsage(t.Context(), keyID, asset, 0); err != nil {
				t.Fatalf("read the key's usage: %v", err)
			}
			if u.Held == 0 || time.Now().After(deadline) {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if u.Held != 0 {
			t.Errorf("trial %d: the key still holds %d after every call ended", trial, u.Held)
		}
		runs[trial].spent = u.Spent
	}
	return runs
}

// capTrial sends capRequests concurrent calls with secret over urls.
func capTrial(t *testing.T, hc *http.Client, urls []string, up *upstreamtest.Server, secret string) capRun {
	t.Helper()
	calls0 := up.Calls()
	var (
		mu  sync.Mutex
		run capRun
		wg  sync.WaitGroup
	)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	for i := range capRequests {
		wg.Go(func() {
			status, body, err := creditCall(ctx, hc, urls[i%len(urls)], secret)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil && status == http.StatusOK && hasCompletion(body):
				run.answered++
			case err == nil && status == http.StatusPaymentRequired && strings.Contains(string(body), "/v1/credits/topup"):
				run.refused++
			default:
				run.other++
				run.sample = fmt.Sprintf("status %d, err %v, body %.300s", status, err, body)
			}
		})
	}
	wg.Wait()
	run.upstreamCalls = up.Calls() - calls0
	return run
}

// newCapKey funds the account of a trial of its own (an owner may hold at
// most store.MaxKeysPerOwner keys) with accountFunds and creates a key on it
// with the cap keyCap.
func newCapKey(t *testing.T, st keyLedger, asset string, trial int) (secret, id string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), chainTimeout)
	defer cancel()
	l, err := ledger.New(st, ledger.Config{Asset: asset}, discard())
	if err != nil {
		t.Fatalf("ledger: %v", err)
	}
	owner := common.BigToAddress(big.NewInt(int64(0xcafe0000 + trial)))
	if _, err := l.TopUp(ctx, fmt.Sprintf("e2e:cap-trial-%d", trial), owner, big.NewInt(accountFunds)); err != nil {
		t.Fatalf("fund trial %d: %v", trial, err)
	}
	secret, id, err = credits.NewKey()
	if err != nil {
		t.Fatalf("new key: %v", err)
	}
	_, err = st.CreateKey(ctx, store.APIKey{
		ID: id, Hash: credits.HashSecret(secret), Owner: strings.ToLower(owner.Hex()), Name: "cap trial",
		TotalCap: keyCap, PeriodCap: store.NoCap,
	})
	if err != nil {
		t.Fatalf("create the key: %v", err)
	}
	return secret, id
}

// creditsConfig follows replicaConfig, whose last section is the model list:
// it adds a model priced per token high enough for the cap to bind, and turns
// credits on; the receipt key comes from LLM4AGENTS_RECEIPT_KEY
// (receiptKeyEnv).
const creditsConfig = `  - id: pricey
    upstream: fake
    price: { input: "625000000", output: "625000000" }
    max_output_tokens: 64
credits:
  enabled: true
  receipt_key_env: LLM4AGENTS_RECEIPT_KEY
`

func receiptKeyEnv() string {
	return "LLM4AGENTS_RECEIPT_KEY=" + hexutil.Encode(crypto.FromECDSA(testchain.DevKey(receiptKeyIdx)))
}

// fundedKey credits the buyer's account with accountFunds and creates an API
// key with a total cap of keyCap on it, straight in the store: the test is
// about the reservation, and top-ups and sign-in have tests of their own.
func fundedKey(t *testing.T, st keyLedger, asset string) (secret, id string) {
	t.Helper()
	return fundedKeyWith(t, st, asset, accountFunds, keyCap)
}

// fundedKeyWith is fundedKey with the account's funds and the key's total
// cap given, and the key changed by mods before it is stored.
func fundedKeyWith(t *testing.T, st keyLedger, asset string, funds, capAmount int64, mods ...func(*store.APIKey)) (secret, id string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), chainTimeout)
	defer cancel()
	l, err := ledger.New(st, ledger.Config{Asset: asset}, discard())
	if err != nil {
		t.Fatalf("ledger: %v", err)
	}
	payer := testchain.DevAddress(payerIdx)
	if _, err := l.TopUp(ctx, "e2e:cap-test-funds", payer, big.NewInt(funds)); err != nil {
		t.Fatalf("fund the account: %v", err)
	}
	secret, id, err = credits.NewKey()
	if err != nil {
		t.Fatalf("new key: %v", err)
	}
	k := store.APIKey{
		ID: id, Hash: credits.HashSecret(secret), Owner: strings.ToLower(payer.Hex()), Name: "cap test",
		TotalCap: capAmount, PeriodCap: store.NoCap,
	}
	for _, mod := range mods {
		mod(&k)
	}
	_, err = st.CreateKey(ctx, k)
	if err != nil {
		t.Fatalf("create the key: %v", err)
	}
	return secret, id
}

// keyLedger is what fundedKeyWith needs of a store: its ledger and its keys.
type keyLedger interface {
	store.Ledger
	CreateKey(ctx context.Context, k store.APIKey) (store.APIKey, error)
}

// creditStore is a store the credit replicas share, as the tests read and
// write it beside them: the ledger, keys and receipts, and the clock it
// judges holds by.
type creditStore interface {
	keyLedger
	Receipt(ctx context.Context, requestID string) (store.StoredReceipt, error)
	RevokeKey(ctx context.Context, owner, id string) (store.APIKey, error)
	setNow(now func() time.Time)
}

type creditPostgres struct{ *postgres.DB }

func (s creditPostgres) setNow(now func() time.Time) { s.Now = now }

type creditSQLite struct{ *sqlite.DB }

func (s creditSQLite) setNow(now func() time.Time) { s.Now = now }

// creditStores are the stores that hold a credit ledger, each opened fresh
// for a test: its DSN for the replicas' config, and the test's own handle.
var creditStores = []struct {
	name string
	open func(t *testing.T) (dsn string, st creditStore)
}{
	{"postgres", func(t *testing.T) (string, creditStore) {
		dsn := freshPostgres(t)
		return dsn, creditPostgres{openPostgres(t, dsn)}
	}},
	{"sqlite", func(t *testing.T) (string, creditStore) {
		dsn := freshSQLite(t)
		// Opened as another process would open the replicas' file.
		return dsn, creditSQLite{openClosed(t, "SQLite", func(ctx context.Context) (*sqlite.DB, error) {
			return sqlite.Open(ctx, strings.TrimPrefix(dsn, "sqlite://"), discard())
		})}
	}},
}

func openPostgres(t *testing.T, dsn string) *postgres.DB {
	t.Helper()
	return openClosed(t, "PostgreSQL", func(ctx context.Context) (*postgres.DB, error) { return postgres.Open(ctx, dsn, discard()) })
}

// creditCall sends one credit-paid chat completion with the API key.
func creditCall(ctx context.Context, hc *http.Client, gatewayURL, key string) (int, []byte, error) {
	status, body, _, err := leasedCreditCall(ctx, hc, gatewayURL, key)
	return status, body, err
}
