package facilitator_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"

	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/internal/testchain"
	"github.com/llm4agents/llm4agents/x402"
	"github.com/llm4agents/llm4agents/x402/evm/exact"
)

// otherNetwork is a second chain whose facilitator shares the store.
const otherNetwork = "eip155:999"

// plantOther writes n records of otherNetwork in state (claimed or settled)
// with keys prefix-0000 on, as that chain's facilitator would, from a few
// goroutines at once; a worker reports its error, only the test goroutine
// fails the test.
func plantOther(t *testing.T, st store.Settlements, prefix string, n int, state store.SettlementState) {
	t.Helper()
	errs := make(chan error, n)
	var wg sync.WaitGroup
	next := make(chan int)
	for range 8 {
		wg.Go(func() {
			for i := range next {
				errs <- plantOne(t.Context(), st, fmt.Sprintf("%s-%04d", prefix, i), state)
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

func plantOne(ctx context.Context, st store.Settlements, key string, state store.SettlementState) error {
	rec, ok, err := st.ClaimSettlement(ctx, store.Settlement{
		Key: key, Network: otherNetwork, Asset: "0x01", Payer: "0x02", PayTo: "0x03", Amount: "1", Owner: "other",
	}, time.Hour)
	switch {
	case err != nil:
		return err
	case !ok:
		return fmt.Errorf("claim of %s not won", key)
	case state == store.StateSettled:
		return st.UpdateSettlement(ctx, key, rec.Fence, store.StateSettled, "0x"+strings.Repeat("ab", 32), "")
	}
	return nil
}

// TestReconcileOwnNetwork: with a facilitator per chain on one store, the
// reconciler of one chain finds its records however many another chain
// left there. 150 claims stuck since before ours (that chain's node down)
// do not hide our settlement answered pending, which must be resolved
// from the chain, and a full page of that chain's settlements, newer than
// ours, does not hide ours from the reorg check. The other chain's records
// are left alone.
func TestReconcileOwnNetwork(t *testing.T) {
	eachBackend(t, func(t *testing.T, open storeOpener) {
		st := open(t)
		e := newReorgEnv(t, st)
		ctx := t.Context()
		plantOther(t, st, "stuck", 150, store.StateClaimed)

		req := e.requirements()
		p := (&env{chain: e.sim}).pay(t, 3, req)
		parent := e.head(t)
		pending, err := e.fac.Settle(ctx, p, req)
		if err != nil || pending.ErrorReason != x402.ReasonSettlementPending {
			t.Fatalf("settle before the block = %+v, %v; want settlement_pending", pending, err)
		}
		e.sim.Commit()
		reconcile(t, e.fac)
		settled := e.record(t, p)
		if settled.State != store.StateSettled || settled.TxHash != pending.Transaction {
			t.Fatalf("our record after reconcile is %q with %s; want settled with %s", settled.State, settled.TxHash, pending.Transaction)
		}

		// A page of the other chain's settlements, all newer than ours;
		// then a reorg in which the payer spends everything ahead of our
		// transaction, which reverts.
		time.Sleep(2 * time.Millisecond)
		plantOther(t, st, "busy", store.MaxRecentPage, store.StateSettled)
		e.reorg(t, parent, e.spendAll(t, 3, parent))
		reconcile(t, e.fac)
		wantReorg(t, e.record(t, p), settled, store.ReorgLost, 1, "")
		wantCounts(t, e.reg, 1, 0, 1)

		others, err := st.UnresolvedSettlements(ctx, otherNetwork, 1000)
		if err != nil || len(others) != 150 {
			t.Errorf("the other chain's unresolved records = %d, %v; want its 150, untouched", len(others), err)
		}
	})
}

// leakyStore lists every network's records whatever network it is asked
// for, as a store with a broken network filter would.
type leakyStore struct{ store.Settlements }

func (s leakyStore) UnresolvedSettlements(ctx context.Context, _ string, limit int) ([]store.Settlement, error) {
	return s.Settlements.UnresolvedSettlements(ctx, store.AllNetworks, limit)
}

func (s leakyStore) RecentSettlements(ctx context.Context, _ string, since time.Time, limit int) ([]store.Settlement, error) {
	return s.Settlements.RecentSettlements(ctx, store.AllNetworks, since, limit)
}

// TestReconcileRefusesOtherNetwork: a record of another chain that the
// store lists anyway is reported and left alone. Read against this chain,
// its authorization would look unused and its claim, lease over, would be
// given back while that chain may still mine its transaction.
func TestReconcileRefusesOtherNetwork(t *testing.T) {
	sim := testchain.NewSimulated(t)
	db := openStore(t)
	r := newReplica(t, sim, leakyStore{db}, nil, signerIdx)
	ctx := t.Context()
	key := exact.Key(otherNetwork, sim.Token, sim.Addr(2), common.HexToHash("0x01"))
	if _, ok, err := db.ClaimSettlement(ctx, store.Settlement{
		Key: key, Network: otherNetwork, Asset: sim.Token.Hex(), Payer: sim.Addr(2).Hex(), PayTo: sim.Addr(payToIdx).Hex(), Amount: "1", Owner: "other",
	}, time.Millisecond); err != nil || !ok {
		t.Fatalf("ClaimSettlement() = %v, %v", ok, err)
	}
	time.Sleep(5 * time.Millisecond) // the other chain's lease is over

	n, err := r.fac.Reconcile(ctx)
	if err == nil || !strings.Contains(err.Error(), otherNetwork) || n != 0 {
		t.Errorf("Reconcile() = %d, %v; want 0 and an error naming %s", n, err, otherNetwork)
	}
	if rec, err := db.Settlement(ctx, key); err != nil || rec.State != store.StateClaimed {
		t.Errorf("the other chain's record after reconcile = %+v, %v; want it claimed, as it was", rec, err)
	}
}
