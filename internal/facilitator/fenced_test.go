package facilitator_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"math/big"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/params"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/llm4agents/llm4agents/internal/chain"
	"github.com/llm4agents/llm4agents/internal/facilitator"
	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/internal/testchain"
	"github.com/llm4agents/llm4agents/x402"
	"github.com/llm4agents/llm4agents/x402/evm/exact"
)

// replicaOpts tunes newReplicaOn.
type replicaOpts struct {
	// node is what the replica's Sender talks to; sim's client when nil.
	node chain.Backend
	// backend is what the facilitator reads the chain from; sim's client
	// when nil.
	backend       facilitator.Backend
	settleTimeout time.Duration // default 300 ms
	claimLease    time.Duration // the facilitator's default when zero
	schemes       []string      // exact alone when nil
}

// newReplicaOn starts a facilitator signing with dev key signer on st and
// sim, as newReplica does, with its Sender on o.node.
func newReplicaOn(t *testing.T, sim *testchain.Simulated, st store.Settlements, signer int, o replicaOpts) *replica {
	t.Helper()
	if o.node == nil {
		o.node = sim.Client
	}
	if o.backend == nil {
		o.backend = sim.Client
	}
	if o.settleTimeout == 0 {
		o.settleTimeout = 300 * time.Millisecond
	}
	logs := new(syncBuffer)
	log := slog.New(slog.NewTextHandler(io.MultiWriter(logs, t.Output()), &slog.HandlerOptions{Level: slog.LevelDebug}))
	sender, err := chain.NewSender(o.node, sim.Keys[signer], sim.ChainID,
		chain.SenderConfig{MaxFeePerGas: big.NewInt(1e12), PollInterval: 10 * time.Millisecond}, log)
	if err != nil {
		t.Fatal(err)
	}
	fac, err := facilitator.New(facilitator.Config{
		Network:       network,
		Assets:        []facilitator.Asset{{Address: sim.Token, Name: "USD Coin", Version: "2"}},
		SettleTimeout: o.settleTimeout,
		ClaimLease:    o.claimLease,
		Schemes:       o.schemes,
	}, o.backend, sender, st, log)
	if err != nil {
		t.Fatal(err)
	}
	return &replica{fac: fac, sender: sender, logs: logs}
}

// sendHook is a node whose first SendTransaction first runs fn: what other
// replicas do between a Sender's record-before-send and its send.
type sendHook struct {
	chain.Backend
	once sync.Once
	fn   func(tx *types.Transaction)
}

func (h *sendHook) SendTransaction(ctx context.Context, tx *types.Transaction) error {
	h.once.Do(func() { h.fn(tx) })
	return h.Backend.SendTransaction(ctx, tx)
}

// recordHook is a store whose first RecordBroadcast first runs fn: what
// other replicas do between a claim and its record-before-send.
type recordHook struct {
	settleStore
	once sync.Once
	fn   func()
}

func (h *recordHook) RecordBroadcast(ctx context.Context, key string, fence int64, txHash, rawTx string) error {
	h.once.Do(h.fn)
	return h.settleStore.RecordBroadcast(ctx, key, fence, txHash, rawTx)
}

// waitNonceTooLow waits until the node refuses tx, mined, for its nonce: the
// simulated pool drops mined transactions a moment after the block, and until
// then calls them "already known".
func waitNonceTooLow(t *testing.T, sim *testchain.Simulated, tx *types.Transaction) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := sim.Client.SendTransaction(context.Background(), tx)
		if err != nil && strings.Contains(err.Error(), "nonce too low") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the node still answers %v for the mined %s", err, tx.Hash().Hex())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func nonceAt(t *testing.T, sim *testchain.Simulated, addr common.Address) uint64 {
	t.Helper()
	n, err := sim.Client.NonceAt(context.Background(), addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestResentByReplicaIsNotSentAgain is the sequence the replica test found
// (1 trial in 200 on Redis). Replica A records its transaction and,
// before A's own send reaches the node, replica B finds the record's
// transaction unknown to the node and sends the very same bytes, which are
// mined. A's send is then refused ("nonce too low": the nonce is used, by
// A's own transaction) and A's Sender signs the call again under the next
// nonce. That second transaction must never leave: the first one paid. A's
// settle call answers the one success, whether or not B's reconciler has
// recorded the settlement by then (in which case A's record-before-send of
// the second transaction is fenced), and A's account sends one transaction.
func TestResentByReplicaIsNotSentAgain(t *testing.T) {
	cases := []struct {
		name string
		// settled: B's reconciler records the settlement before A's send,
		// so the record is final when A would record its second transaction.
		settled bool
	}{
		{name: "record still broadcast"},
		{name: "record settled by the other replica", settled: true},
	}
	// Each case has a database of its own: a record another case settled on
	// its own chain is not on this one, which the reorg check would find.
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			eachBackend(t, func(t *testing.T, open storeOpener) {
				sim := testchain.NewSimulated(t) // no auto-commit: the test mines
				ctx := context.Background()
				e := &env{chain: sim}
				req := e.requirements("10000")
				p := e.pay(t, 1, req)
				key := keyOf(t, sim, p)
				payTo := sim.Addr(payToIdx)
				paidBefore := sim.BalanceOf(t, payTo)

				b := newReplicaOn(t, sim, open(t), otherSignerIdx, replicaOpts{})
				var first common.Hash
				node := &sendHook{Backend: sim.Client, fn: func(tx *types.Transaction) {
					first = tx.Hash()
					if _, err := b.fac.Reconcile(ctx); err != nil {
						t.Errorf("B's reconcile while A's transaction is recorded, not sent: %v", err)
					}
					if !strings.Contains(b.logs.String(), "sent again") {
						t.Errorf("B did not send A's recorded transaction:\n%s", b.logs.String())
					}
					sim.Commit()
					waitNonceTooLow(t, sim, tx)
					if tc.settled {
						if n, err := b.fac.Reconcile(ctx); err != nil || n != 1 {
							t.Errorf("B's reconcile after the mining = %d, %v; want the record settled", n, err)
						}
						reg := prometheus.NewRegistry()
						if err := b.fac.RegisterMetrics(reg); err != nil {
							t.Fatal(err)
						}
						if got := counters(t, reg, "llm4agents_facilitator_reconciled_total"); got["resolved"] != 1 {
							t.Errorf("reconciled counters %v, want resolved 1", got)
						}
					}
				}}
				// A's settle budget holds B's two reconciles (the hook): room
				// for them on a loaded machine.
				a := newReplicaOn(t, sim, open(t), signerIdx, replicaOpts{node: node, settleTimeout: 2 * time.Second})
				nonce := nonceAt(t, sim, a.sender.Address())

				resp, err := a.fac.Settle(ctx, p, req)
				if err != nil || !resp.Success || !strings.EqualFold(resp.Transaction, first.Hex()) {
					t.Errorf("A's settle = %+v, %v; want the one success with its first transaction %s", resp, err, first.Hex())
				}
				sim.Commit() // anything A sent after all is mined now, and counted below
				if got := pendingNonce(t, sim, a.sender.Address()); got != nonce+1 {
					t.Errorf("A's account sent %d transactions, want 1 (its first, mined by B's re-send)", got-nonce)
				}
				if _, err := b.fac.Reconcile(ctx); err != nil {
					t.Errorf("reconcile at the end: %v", err)
				}
				got, err := open(t).Settlement(ctx, key)
				if err != nil || got.State != store.StateSettled || !strings.EqualFold(got.TxHash, first.Hex()) || !got.SuccessReported {
					t.Errorf("record = %q (tx %s, success reported %t), %v; want settled with %s, success reported",
						got.State, got.TxHash, got.SuccessReported, err, first.Hex())
				}
				if paid := new(big.Int).Sub(sim.BalanceOf(t, payTo), paidBefore); paid.Cmp(big.NewInt(10000)) != 0 {
					t.Errorf("payTo received %s, want 10000", paid)
				}
			})
		})
	}
}

// TestFencedRecordResolves: replica A's claim is taken over (its lease ran
// out while it was signing) and replica B settles the authorization, so A's
// record-before-send is fenced. A's Settle re-reads the record and answers
// from it instead of failing: a settlement B recorded goes through the one
// success mark (D5), which B already took, and a settlement B only
// broadcast is settlement_pending with B's transaction (D3). Nothing A
// signed reaches the node.
func TestFencedRecordResolves(t *testing.T) {
	cases := []struct {
		name string
		// mined: B's transaction is mined within B's settle timeout.
		mined      bool
		wantReason x402.Reason
	}{
		{name: "settled by the other holder", mined: true, wantReason: x402.ReasonEVMNonceAlreadyUsed},
		{name: "broadcast by the other holder", wantReason: x402.ReasonSettlementPending},
	}
	eachBackend(t, func(t *testing.T, open storeOpener) {
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				sim := testchain.NewSimulated(t)
				if tc.mined {
					sim.StartAutoCommit(t, 20*time.Millisecond)
				}
				ctx := context.Background()
				e := &env{chain: sim}
				req := e.requirements("10000")
				p := e.pay(t, 2, req)
				key := keyOf(t, sim, p)

				// B waits long enough for a mined transaction, briefly for one
				// that is not.
				bTimeout := 300 * time.Millisecond
				if tc.mined {
					bTimeout = 5 * time.Second
				}
				b := newReplicaOn(t, sim, open(t), otherSignerIdx, replicaOpts{settleTimeout: bTimeout})
				var bResp *x402.SettleResponse
				st := &recordHook{settleStore: open(t), fn: func() {
					time.Sleep(20 * time.Millisecond) // A's lease runs out
					var err error
					bResp, err = b.fac.Settle(ctx, p, req)
					if err != nil {
						t.Errorf("B's settle, taking over A's claim: %v", err)
					}
				}}
				// A's settle budget holds all of B's settle (the hook): room for
				// it on a loaded machine.
				a := newReplicaOn(t, sim, st, signerIdx, replicaOpts{claimLease: time.Millisecond, settleTimeout: time.Second})
				nonce := pendingNonce(t, sim, a.sender.Address())

				resp, err := a.fac.Settle(ctx, p, req)
				if err != nil {
					t.Fatalf("A's settle with its record-before-send fenced: %v; want an answer from the record", err)
				}
				if bResp == nil {
					t.Fatal("B never settled: A's record-before-send was not reached")
				}
				if resp.Success || resp.ErrorReason != tc.wantReason || !strings.EqualFold(resp.Transaction, bResp.Transaction) {
					t.Errorf("A's settle = %+v; want %s with B's transaction %s (B answered %+v)", resp, tc.wantReason, bResp.Transaction, bResp)
				}
				if got := pendingNonce(t, sim, a.sender.Address()); got != nonce {
					t.Errorf("A's pending nonce moved from %d to %d: the fenced signer's transaction reached the node", nonce, got)
				}

				if !tc.mined {
					sim.Commit()
					again, err := b.fac.Settle(ctx, p, req)
					if err != nil || !again.Success || again.Transaction != bResp.Transaction {
						t.Errorf("B's settle once mined = %+v, %v; want the one success with %s", again, err, bResp.Transaction)
					}
				}
				rec, err := open(t).Settlement(ctx, key)
				if err != nil || rec.State != store.StateSettled || !strings.EqualFold(rec.TxHash, bResp.Transaction) {
					t.Errorf("record = %q (tx %s), %v; want settled with B's %s", rec.State, rec.TxHash, err, bResp.Transaction)
				}
			})
		}
	})
}

// TestSettleReclaimsAbandoned: a settle call finds a record whose
// transaction can never be mined (another transaction of its signer used
// the nonce, the authorization stayed unused). It gives the record back and,
// in the same call, claims the authorization again and settles it, rather
// than failing and leaving the buyer to retry. At the replica that signed the
// dead transaction and at another.
func TestSettleReclaimsAbandoned(t *testing.T) {
	cases := []struct {
		name   string
		signer int // of the replica that settles
	}{
		{name: "at the signing replica", signer: signerIdx},
		{name: "at another replica", signer: otherSignerIdx},
	}
	eachBackend(t, func(t *testing.T, open storeOpener) {
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				sim := testchain.NewSimulated(t)
				sim.StartAutoCommit(t, 20*time.Millisecond)
				db := open(t)
				ctx := context.Background()
				e := &env{chain: sim}
				req := e.requirements("10000")
				p := e.pay(t, 3, req)
				key := keyOf(t, sim, p)
				dead := deadRecord(t, sim, db, p, req)

				r := newReplicaOn(t, sim, db, tc.signer, replicaOpts{settleTimeout: 5 * time.Second})
				resp, err := r.fac.Settle(ctx, p, req)
				if err != nil || !resp.Success {
					t.Fatalf("settle of the dead record = %+v, %v; want success in the same call", resp, err)
				}
				rec, err := db.Settlement(ctx, key)
				if err != nil || rec.State != store.StateSettled || !strings.EqualFold(rec.TxHash, resp.Transaction) {
					t.Errorf("record = %q (tx %s), %v; want settled with %s", rec.State, rec.TxHash, err, resp.Transaction)
				}
				if decodeRaw(t, rec.RawTx).Hash() == dead.Hash() {
					t.Errorf("record still names the dead transaction %s", dead.Hash().Hex())
				}
			})
		}
	})
}

// TestSettledForAnotherAuthorization: the payer signed two authorizations
// with one nonce (one key, D4) for different amounts, and the record was
// settled, success not yet reported, by a transfer of the second. A settle
// call for the first must not take the success mark for a payment never
// made: it answers nonce_already_used with that transaction, and sends
// nothing. Whether it finds the record settled, or its claim is taken over
// and settled while it signs (its record-before-send fenced).
func TestSettledForAnotherAuthorization(t *testing.T) {
	cases := []struct {
		name   string
		fenced bool // the record is settled while A signs, not before A looks
	}{
		{name: "record found settled"},
		{name: "record-before-send fenced", fenced: true},
	}
	eachBackend(t, func(t *testing.T, open storeOpener) {
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				sim := testchain.NewSimulated(t)
				ctx := context.Background()
				e := &env{chain: sim}
				req := e.requirements("10000")
				p := e.pay(t, 4, req)
				pl, err := exact.ParsePayload(p.Payload)
				if err != nil {
					t.Fatal(err)
				}
				other := payWithNonce(t, sim, 4, e.requirements("5000"), pl.Authorization.Nonce)
				key := keyOf(t, sim, p)
				if k := keyOf(t, sim, other); k != key {
					t.Fatalf("the two authorizations have keys %s and %s, want one", key, k)
				}

				db := open(t)
				var otherTx *types.Transaction
				settleOther := func() {
					otherTx = submitDirectly(t, sim.TokenContract, sim.Transactor(t, 7), other)
					sim.Mine(t, otherTx)
					rec, held, err := db.ClaimSettlement(ctx, store.Settlement{
						Key: key, Network: network, Asset: sim.Token.Hex(), Payer: pl.Authorization.From.Hex(),
						PayTo: pl.Authorization.To.Hex(), Amount: "5000", Owner: "someone else",
					}, time.Minute)
					if err != nil || !held {
						t.Fatalf("claim (or take over A's claim) = %v, %v", held, err)
					}
					raw, err := otherTx.MarshalBinary()
					if err != nil {
						t.Fatal(err)
					}
					if err := db.RecordBroadcast(ctx, key, rec.Fence, otherTx.Hash().Hex(), hexutil.Encode(raw)); err != nil {
						t.Fatal(err)
					}
					if err := db.UpdateSettlement(ctx, key, rec.Fence, store.StateSettled, otherTx.Hash().Hex(), ""); err != nil {
						t.Fatal(err)
					}
				}
				st := &recordHook{settleStore: open(t), fn: func() {
					if tc.fenced {
						time.Sleep(20 * time.Millisecond) // A's lease runs out
						settleOther()
					}
				}}
				if !tc.fenced {
					settleOther()
				}
				// A's settle budget holds all of B's settle (the hook): room for
				// it on a loaded machine.
				a := newReplicaOn(t, sim, st, signerIdx, replicaOpts{claimLease: time.Millisecond, settleTimeout: time.Second})
				nonce := pendingNonce(t, sim, a.sender.Address())

				resp, err := a.fac.Settle(ctx, p, req)
				if err != nil {
					t.Fatalf("A's settle: %v; want an answer from the record", err)
				}
				if resp.Success || resp.ErrorReason != x402.ReasonEVMNonceAlreadyUsed || !strings.EqualFold(resp.Transaction, otherTx.Hash().Hex()) {
					t.Errorf("A's settle = %+v; want %s with the other authorization's %s", resp, x402.ReasonEVMNonceAlreadyUsed, otherTx.Hash().Hex())
				}
				if got := pendingNonce(t, sim, a.sender.Address()); got != nonce {
					t.Errorf("A's pending nonce moved from %d to %d: A's transaction reached the node", nonce, got)
				}
				if rec, err := db.Settlement(ctx, key); err != nil || rec.SuccessReported {
					t.Errorf("record success reported = %t, %v; want not reported (nobody was paid what A asked)", rec.SuccessReported, err)
				}
			})
		}
	})
}

// payWithNonce signs req as dev account i with the authorization nonce n.
func payWithNonce(t *testing.T, sim *testchain.Simulated, i int, req x402.PaymentRequirements, n common.Hash) *x402.PaymentPayload {
	t.Helper()
	pr := &x402.PaymentRequired{X402Version: 2, Resource: &x402.ResourceInfo{URL: "http://127.0.0.1/paid"}, Accepts: []x402.PaymentRequirements{req}}
	p, err := exact.NewPaymentPayload(context.Background(), exact.NewKeySigner(sim.Keys[i]), pr, 0, exact.SignOptions{Nonce: &n})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestFencedRecordFailed: replica A's claim is taken over while A signs,
// and the other holder records a verdict (the record failed, say its
// transfer did not pay), so A's record-before-send is fenced. A answers the
// recorded reason, as a call that finds the record failed does, instead of
// an error that is no verdict; and sends nothing.
func TestFencedRecordFailed(t *testing.T) {
	const reason = x402.ReasonEVMTransferEventMismatch
	eachBackend(t, func(t *testing.T, open storeOpener) {
		sim := testchain.NewSimulated(t)
		ctx := context.Background()
		e := &env{chain: sim}
		req := e.requirements("10000")
		p := e.pay(t, 5, req)
		key := keyOf(t, sim, p)
		pl, err := exact.ParsePayload(p.Payload)
		if err != nil {
			t.Fatal(err)
		}

		db := open(t)
		st := &recordHook{settleStore: open(t), fn: func() {
			time.Sleep(20 * time.Millisecond) // A's lease runs out
			rec, held, err := db.ClaimSettlement(ctx, store.Settlement{
				Key: key, Network: network, Asset: sim.Token.Hex(), Payer: pl.Authorization.From.Hex(),
				PayTo: pl.Authorization.To.Hex(), Amount: "10000", Owner: "someone else",
			}, time.Minute)
			if err != nil || !held {
				t.Errorf("take over A's claim = %v, %v", held, err)
				return
			}
			if err := db.UpdateSettlement(ctx, key, rec.Fence, store.StateFailed, "", string(reason)); err != nil {
				t.Errorf("record the other holder's verdict: %v", err)
			}
		}}
		// A's settle budget (two settle timeouts) holds the hook's takeover
		// and the re-read of the record after it, on a loaded machine too:
		// past it the re-read has no time left, and the answer is an error
		// (no verdict) rather than the recorded reason.
		a := newReplicaOn(t, sim, st, signerIdx, replicaOpts{claimLease: time.Millisecond, settleTimeout: 2 * time.Second})
		nonce := pendingNonce(t, sim, a.sender.Address())

		resp, err := a.fac.Settle(ctx, p, req)
		if err != nil {
			t.Fatalf("A's settle with its record-before-send fenced by a failed record: %v; want the recorded reason", err)
		}
		if resp.Success || resp.ErrorReason != reason || resp.Transaction != "" || resp.Network != network || resp.Payer != pl.Authorization.From.Hex() {
			t.Errorf("A's settle = %+v; want %s, no transaction, payer %s", resp, reason, pl.Authorization.From.Hex())
		}
		if got := pendingNonce(t, sim, a.sender.Address()); got != nonce {
			t.Errorf("A's pending nonce moved from %d to %d: the fenced signer's transaction reached the node", nonce, got)
		}
	})
}

// slowNonce is a node whose first NonceAt takes delay: a slow read on the
// way to finding a record dead.
type slowNonce struct {
	facilitator.Backend
	delay time.Duration
	once  sync.Once
}

func (s *slowNonce) NonceAt(ctx context.Context, account common.Address, block *big.Int) (uint64, error) {
	s.once.Do(func() { time.Sleep(s.delay) })
	return s.Backend.NonceAt(ctx, account, block)
}

// slowMark is a store whose success mark, when its caller's deadline is
// near, commits only once that deadline passed: the reply of a write that
// reached the database arrives too late for a caller that bounded it.
type slowMark struct {
	settleStore
}

func (s *slowMark) MarkSuccessReported(ctx context.Context, key string) (bool, error) {
	if d, ok := ctx.Deadline(); ok && time.Until(d) < store.DefaultTimeout/2 {
		time.Sleep(time.Until(d) + 10*time.Millisecond)
	}
	won, err := s.settleStore.MarkSuccessReported(context.WithoutCancel(ctx), key)
	if err == nil {
		err = ctx.Err()
	}
	return won, err
}

// deadRecord records a settlement of p by the signing replica whose
// transaction can never be mined: another transaction of its signer took the
// nonce, and the authorization stayed unused.
func deadRecord(t *testing.T, sim *testchain.Simulated, db store.Settlements, p *x402.PaymentPayload, req x402.PaymentRequirements) *types.Transaction {
	t.Helper()
	dead, _ := signSettlement(t, sim, db, signerIdx, p, req)
	filler, err := types.SignNewTx(sim.Keys[signerIdx], types.LatestSignerForChainID(sim.ChainID), &types.DynamicFeeTx{
		ChainID: sim.ChainID, Nonce: dead.Nonce(), GasTipCap: dead.GasTipCap(), GasFeeCap: dead.GasFeeCap(),
		Gas: params.TxGas, To: &common.Address{1},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := sim.Client.SendTransaction(context.Background(), filler); err != nil {
		t.Fatal(err)
	}
	sim.Mine(t, filler)
	return dead
}

// TestSettleRetryBounded: a settle call that finds its record dead, slowly
// (a node read takes 1.5 settle timeouts), re-settles within what remains of
// two settle timeouts from its start, not a full settle timeout more: its
// new transaction, not mined, is answered settlement_pending (D3) once the
// budget is spent. The next settle call, once it is mined, gets the success.
func TestSettleRetryBounded(t *testing.T) {
	// The retry has half a settle timeout left after the slow read: with a
	// one-second timeout, that half second ran out on a loaded 2-core CI
	// machine before the nonce read and the send were done.
	const settleTimeout = 2 * time.Second
	eachBackend(t, func(t *testing.T, open storeOpener) {
		sim := testchain.NewSimulated(t) // no auto-commit: the retry's transaction waits
		db := open(t)
		ctx := context.Background()
		e := &env{chain: sim}
		req := e.requirements("10000")
		p := e.pay(t, 1, req)
		dead := deadRecord(t, sim, db, p, req)

		slow := &slowNonce{Backend: sim.Client, delay: settleTimeout * 3 / 2}
		r := newReplicaOn(t, sim, db, otherSignerIdx, replicaOpts{backend: slow, settleTimeout: settleTimeout})
		start := time.Now()
		resp, err := r.fac.Settle(ctx, p, req)
		elapsed := time.Since(start)
		if err != nil || resp.Success || resp.ErrorReason != x402.ReasonSettlementPending || resp.Transaction == "" || strings.EqualFold(resp.Transaction, dead.Hash().Hex()) {
			t.Fatalf("settle of the dead record = %+v, %v; want %s with a new transaction", resp, err, x402.ReasonSettlementPending)
		}
		if limit := 2*settleTimeout + settleTimeout/4; elapsed > limit {
			t.Errorf("settle took %s, want at most %s (two settle timeouts and a little)", elapsed, limit)
		}

		sim.Commit()
		again, err := r.fac.Settle(ctx, p, req)
		if err != nil || !again.Success || again.Transaction != resp.Transaction {
			t.Errorf("settle once mined = %+v, %v; want the one success with %s", again, err, resp.Transaction)
		}
	})
}

// TestRetrySuccessMarkOutlivesBudget: the retry of a dead record settles
// within its budget, and the success mark's reply comes after the budget
// ran out. The mark is a write: it runs to its end, and the call answers the
// one success it took (D5) rather than an error that would leave the
// success reported to nobody, ever.
func TestRetrySuccessMarkOutlivesBudget(t *testing.T) {
	const settleTimeout = time.Second
	eachBackend(t, func(t *testing.T, open storeOpener) {
		sim := testchain.NewSimulated(t)
		sim.StartAutoCommit(t, 20*time.Millisecond)
		db := open(t)
		ctx := context.Background()
		e := &env{chain: sim}
		req := e.requirements("10000")
		p := e.pay(t, 2, req)
		key := keyOf(t, sim, p)
		deadRecord(t, sim, db, p, req)

		r := newReplicaOn(t, sim, &slowMark{settleStore: db}, otherSignerIdx, replicaOpts{settleTimeout: settleTimeout})
		resp, err := r.fac.Settle(ctx, p, req)
		if err != nil || !resp.Success {
			t.Errorf("settle of the dead record = %+v, %v; want the success it marked", resp, err)
		}
		if rec, err := db.Settlement(ctx, key); err != nil || rec.State != store.StateSettled || !rec.SuccessReported {
			t.Errorf("record = %q (success reported %t), %v; want settled, success reported", rec.State, rec.SuccessReported, err)
		}
	})
}

// TestTakeoverRecordsSentAuthorization: a claim for one authorization was
// abandoned before anything was sent (its holder died), and a settle call
// for another authorization with the same nonce (the payer signed two, for
// other amounts) takes it over and pays it. The record must then describe
// the authorization that was paid, not the abandoned one: the reconciler
// rebuilds the transfer it looks for from the record, and after a crash
// would otherwise judge the payment as not made.
func TestTakeoverRecordsSentAuthorization(t *testing.T) {
	eachBackend(t, func(t *testing.T, open storeOpener) {
		sim := testchain.NewSimulated(t)
		sim.StartAutoCommit(t, 20*time.Millisecond)
		ctx := context.Background()
		e := &env{chain: sim}
		req := e.requirements("10000")
		p := e.pay(t, 5, req)
		pl, err := exact.ParsePayload(p.Payload)
		if err != nil {
			t.Fatal(err)
		}
		db := open(t)
		key := keyOf(t, sim, p)
		if _, held, err := db.ClaimSettlement(ctx, store.Settlement{
			Key: key, Network: network, Asset: sim.Token.Hex(), Payer: pl.Authorization.From.Hex(),
			PayTo: "0x00000000000000000000000000000000000000d1", Amount: "5000", Owner: "dead",
		}, time.Millisecond); err != nil || !held {
			t.Fatalf("the abandoned claim = %v, %v", held, err)
		}
		time.Sleep(5 * time.Millisecond) // its lease runs out

		r := newReplicaOn(t, sim, db, signerIdx, replicaOpts{settleTimeout: 5 * time.Second})
		resp, err := r.fac.Settle(ctx, p, req)
		if err != nil || !resp.Success {
			t.Fatalf("settle over the abandoned claim = %+v, %v; want success", resp, err)
		}
		rec, err := db.Settlement(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if rec.Amount != "10000" || !strings.EqualFold(rec.PayTo, pl.Authorization.To.Hex()) {
			t.Errorf("record amount %s, pay to %s; want the paid authorization's 10000 to %s", rec.Amount, rec.PayTo, pl.Authorization.To.Hex())
		}
	})
}

// hangingReads is a chain whose contract calls never answer until their
// context ends: a node that accepts requests and stops responding.
type hangingReads struct{ facilitator.Backend }

func (h hangingReads) CallContract(ctx context.Context, _ ethereum.CallMsg, _ *big.Int) ([]byte, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// TestSettleBoundedWhenNodeHangs: the chain reads a settle call makes before
// its claim (authorizationState among them) get no answer. The call ends,
// with an error and nothing broadcast, within its budget of two settle
// timeouts, or by its caller's deadline when that comes first (the gateway
// in the same process must get the answer while it can record it), instead
// of holding the caller forever.
func TestSettleBoundedWhenNodeHangs(t *testing.T) {
	cases := []struct {
		name           string
		settleTimeout  time.Duration
		callerDeadline time.Duration // 0: none
		within         time.Duration
	}{
		{name: "its own budget", settleTimeout: 200 * time.Millisecond, within: 3 * time.Second},
		{name: "the caller's deadline", settleTimeout: 5 * time.Second, callerDeadline: 200 * time.Millisecond, within: 3 * time.Second},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			sim := testchain.NewSimulated(t)
			ctx := context.Background()
			if tc.callerDeadline > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tc.callerDeadline)
				defer cancel()
			}
			e := &env{chain: sim}
			req := e.requirements("10000")
			p := e.pay(t, 6, req)
			r := newReplicaOn(t, sim, freshSQLite(t)(t), signerIdx, replicaOpts{backend: hangingReads{sim.Client}, settleTimeout: tc.settleTimeout})
			nonce := pendingNonce(t, sim, r.sender.Address())
			start := time.Now()
			resp, err := r.fac.Settle(ctx, p, req)
			took := time.Since(start)
			if err == nil {
				t.Fatalf("settle with a hanging node answered %+v, want an error", resp)
			}
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("settle with a hanging node = %v, want an error ending in its deadline", err)
			}
			if took > tc.within {
				t.Errorf("settle with a hanging node took %s, want under %s", took, tc.within)
			}
			if got := pendingNonce(t, sim, r.sender.Address()); got != nonce {
				t.Errorf("pending nonce moved from %d to %d: something was broadcast", nonce, got)
			}
		})
	}
}
