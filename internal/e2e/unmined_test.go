package e2e

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/core/types"

	"github.com/llm4agents/llm4agents/internal/crashpoint"
	"github.com/llm4agents/llm4agents/internal/proctest"
	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/internal/testchain"
	"github.com/llm4agents/llm4agents/internal/upstream/upstreamtest"
)

// TestCrashAfterBroadcastUnmined is the after-broadcast crash (D21) on a
// chain that does not mine at once (anvil with automine off, D22): the
// replica dies with its settlement transaction in the pool, unmined. The
// facilitator writes each transaction into the settlement record before it
// sends it, so the record the crash leaves is in StateBroadcast, naming the
// transaction and holding its signed bytes; the restarted replica's
// reconciler must keep it past the claim's lease (a claimed record without a
// transaction would be released there, and the transaction, once mined,
// would pay with no record left), and resolve it to settled once it mines:
// one settlement on chain, recorded with its transaction.
//
// In the "dropped" case the node also forgets the transaction after the
// crash (anvil_dropTransaction): the restarted replica sends the very bytes
// the record holds again, so the payment still lands, once.
//
// Each case takes about one claim lease (22 s) plus the settle timeout.
func TestCrashAfterBroadcastUnmined(t *testing.T) {
	skipShort(t)
	bin := proctest.BuildBinary(t)
	cases := []struct {
		name string
		drop bool
	}{
		{"in-pool", false},
		{"dropped", true},
	}
	concurrently(t, len(cases), func(i int) string { return cases[i].name }, func(t *testing.T, i int) {
		unminedAfterCrash(t, bin, i, cases[i].drop)
	})
}

func unminedAfterCrash(t *testing.T, bin string, signer int, drop bool) {
	v := storeVariants[0] // SQLite: the record's life does not depend on the backend's suite-tested semantics
	c := startChain(t)
	up := upstreamtest.NewServer(t, upstreamtest.Config{})
	dsn := v.fresh(t)
	cfg := replicaConfig(c, dsn, up.URL())
	hc := newHTTPClient(t)
	crashing := proctest.Start(t, bin, proctest.Options{
		Name: "replica armed at after-broadcast", ConfigYAML: cfg,
		Env: []string{signerEnv(signer), crashpoint.EnvVar + "=" + string(crashpoint.AfterBroadcast)},
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
	select {
	case <-crashing.Exited:
	case <-time.After(callTimeout):
		t.Fatalf("the armed replica still runs %s after the request", callTimeout)
	}
	if code := crashing.Wait(); code != crashpoint.ExitCode {
		t.Fatalf("the replica exited with %d, want %d (the crash point)", code, crashpoint.ExitCode)
	}

	// What the crash left: the record names the transaction in the pool.
	rec := openRecords(t, v, dsn)
	s, err := readSettlement(t.Context(), rec, pay.key)
	if err != nil {
		t.Fatalf("settlement record after the crash: %v", err)
	}
	if s.State != store.StateBroadcast || s.TxHash == "" || s.RawTx == "" {
		t.Fatalf("settlement record after the crash is %q with tx %q and raw tx of %d chars; want broadcast with both",
			s.State, s.TxHash, len(s.RawTx))
	}
	sent := decodeRaw(t, s.RawTx)
	if sent.Hash().Hex() != s.TxHash {
		t.Fatalf("the record's raw transaction is %s, it names %s", sent.Hash().Hex(), s.TxHash)
	}
	if !inPool(t, c, sent.Hash()) {
		t.Fatalf("the recorded transaction %s is not in the pool", s.TxHash)
	}
	if drop {
		ctx, cancel := context.WithTimeout(t.Context(), chainTimeout)
		err := c.anvil.DropTransaction(ctx, sent.Hash())
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if inPool(t, c, sent.Hash()) {
			t.Fatalf("%s still in the pool after anvil_dropTransaction", s.TxHash)
		}
	}

	restarted := proctest.Start(t, bin, proctest.Options{Name: "restarted replica", ConfigYAML: cfg, Env: []string{signerEnv(signer), crashpoint.EnvVar + "="}})

	// Past the claim's lease and a few reconciler rounds, the record is still
	// there, still unresolved, and (dropped or not) a version of it is in the
	// pool: the restarted replica kept it alive and never released it.
	select {
	case <-t.Context().Done():
		return
	case <-time.After(time.Until(crashed.Add(claimLease + 3*reconcileInterval))):
	}
	// The replica may be replacing the transaction with a fee bump right now
	// (it records the new version first, then sends it): look a few times.
	for try := 1; ; try++ {
		s, err = readSettlement(t.Context(), rec, pay.key)
		if err != nil || s.State != store.StateBroadcast {
			t.Fatalf("past the lease, the settlement record is %q (tx %q), err %v; want still broadcast", s.State, s.TxHash, err)
		}
		if inPool(t, c, common.HexToHash(s.TxHash)) {
			break
		}
		if try == 10 {
			t.Errorf("past the lease, the recorded transaction %s is not in the pool", s.TxHash)
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if got := c.settlements(t, pay.from, pay.nonce); len(got) != 0 {
		t.Fatalf("%d settlements on chain before mining", len(got))
	}

	ctx, cancel := context.WithTimeout(t.Context(), chainTimeout)
	err = c.anvil.SetAutomine(ctx, true)
	if err == nil {
		err = c.anvil.Mine(ctx, 1)
	}
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	onChain := c.settlements(t, pay.from, pay.nonce)
	if len(onChain) != 1 {
		t.Fatalf("%d settlements on chain after mining, want 1", len(onChain))
	}
	if got, want := onChain[0].sender, testchain.DevAddress(firstSignerIdx+signer); got != want {
		t.Errorf("settlement sent by %s, want this replica's signer %s", got.Hex(), want.Hex())
	}
	if onChain[0].to != testchain.DevAddress(payToIdx) || onChain[0].amount == nil || onChain[0].amount.Cmp(b.amount) != 0 {
		t.Errorf("settlement paid %s to %s, want %s to payTo", onChain[0].amount, onChain[0].to.Hex(), b.amount)
	}
	state := checkSettlementRecord(t, rec, pay.key, onChain, time.Now().Add(settleTimeout+10*reconcileInterval+15*time.Second))
	if state != "settled" {
		t.Errorf("settlement record %s after mining, want settled", state)
	}

	// The buyer comes back with the same authorization: whatever it gets,
	// the chain keeps one settlement.
	final, attempts := retryUntilFinal(t, hc, restarted.URL, chatBody, pay.header, time.Now().Add(claimLease+callTimeout))
	if final.status == http.StatusOK && (final.settled == nil || !strings.EqualFold(final.settled.Transaction, onChain[0].tx.Hex())) {
		t.Errorf("the 200's PAYMENT-RESPONSE %+v does not name the settlement %s", final.settled, onChain[0].tx.Hex())
	}
	if n := len(c.settlements(t, pay.from, pay.nonce)); n != 1 {
		t.Errorf("%d settlements on chain after the buyer's retries, want 1", n)
	}
	t.Logf("buyer got %s after %d retries; upstream called %d times; settlement record %s; payment claim %s",
		final.outcome(), attempts, up.Calls(), state, checkPaymentClaim(t, rec, pay.key, onChain))
}

func decodeRaw(t *testing.T, raw string) *types.Transaction {
	t.Helper()
	b, err := hexutil.Decode(raw)
	if err != nil {
		t.Fatalf("raw transaction: %v", err)
	}
	tx := new(types.Transaction)
	if err := tx.UnmarshalBinary(b); err != nil {
		t.Fatalf("raw transaction: %v", err)
	}
	return tx
}

// inPool reports whether the node holds hash as a pending transaction.
func inPool(t *testing.T, c *chainEnv, hash common.Hash) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), chainTimeout)
	defer cancel()
	_, pending, err := c.anvil.Client.TransactionByHash(ctx, hash)
	return err == nil && pending
}
