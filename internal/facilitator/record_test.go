package facilitator_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/ethereum/go-ethereum/params"

	"github.com/llm4agents/llm4agents/internal/chain"
	"github.com/llm4agents/llm4agents/internal/facilitator"
	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/internal/store/sqlite"
	"github.com/llm4agents/llm4agents/internal/testchain"
	"github.com/llm4agents/llm4agents/x402"
	"github.com/llm4agents/llm4agents/x402/evm/exact"
)

// otherSignerIdx signs for a second replica (D20).
const otherSignerIdx = 6

// replica is one facilitator process on a shared store and chain.
type replica struct {
	fac    *facilitator.Facilitator
	sender *chain.Sender
	logs   *syncBuffer
}

// syncBuffer is a log sink safe for the Sender's concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// newReplica starts a facilitator signing with dev key signer on st and sim,
// with a short settle timeout, reading the chain through backend (sim's
// client when nil).
func newReplica(t *testing.T, sim *testchain.Simulated, st store.Settlements, backend facilitator.Backend, signer int) *replica {
	return newReplicaTimeout(t, sim, st, backend, signer, 300*time.Millisecond)
}

func newReplicaTimeout(t *testing.T, sim *testchain.Simulated, st store.Settlements, backend facilitator.Backend, signer int, settleTimeout time.Duration) *replica {
	t.Helper()
	if backend == nil {
		backend = sim.Client
	}
	logs := new(syncBuffer)
	log := slog.New(slog.NewTextHandler(io.MultiWriter(logs, t.Output()), &slog.HandlerOptions{Level: slog.LevelDebug}))
	sender, err := chain.NewSender(sim.Client, sim.Keys[signer], sim.ChainID,
		chain.SenderConfig{MaxFeePerGas: big.NewInt(1e12), PollInterval: 10 * time.Millisecond}, log)
	if err != nil {
		t.Fatal(err)
	}
	fac, err := facilitator.New(facilitator.Config{
		Network:       network,
		Assets:        []facilitator.Asset{{Address: sim.Token, Name: "USD Coin", Version: "2"}},
		SettleTimeout: settleTimeout,
	}, backend, sender, st, log)
	if err != nil {
		t.Fatal(err)
	}
	return &replica{fac: fac, sender: sender, logs: logs}
}

func openStore(t *testing.T) *sqlite.DB {
	t.Helper()
	db, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "fac.db"), discard())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// recordSpy is the store with RecordBroadcast watched: it checks that the
// node does not know a transaction when it is recorded, and can fail.
type recordSpy struct {
	*sqlite.DB
	t    *testing.T
	node interface {
		TransactionByHash(ctx context.Context, hash common.Hash) (*types.Transaction, bool, error)
	}

	mu       sync.Mutex
	recorded []string
	fail     error
}

func (s *recordSpy) RecordBroadcast(ctx context.Context, key string, fence int64, txHash, rawTx string) error {
	s.mu.Lock()
	fail := s.fail
	s.mu.Unlock()
	if fail != nil {
		return fail
	}
	if _, _, err := s.node.TransactionByHash(ctx, common.HexToHash(txHash)); !errors.Is(err, ethereum.NotFound) {
		s.t.Errorf("RecordBroadcast(%s): the node knows the transaction already (err %v)", txHash, err)
	}
	s.mu.Lock()
	s.recorded = append(s.recorded, txHash)
	s.mu.Unlock()
	return s.DB.RecordBroadcast(ctx, key, fence, txHash, rawTx)
}

func (s *recordSpy) setFail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fail = err
}

// TestTransactionRecordedBeforeSend: the settlement record names the
// transaction, with its bytes, before the node sees it; when that write
// fails, nothing is sent and the authorization stays free for a retry.
func TestTransactionRecordedBeforeSend(t *testing.T) {
	sim := testchain.NewSimulated(t)
	sim.StartAutoCommit(t, 20*time.Millisecond)
	spy := &recordSpy{DB: openStore(t), t: t, node: sim.Client}
	r := newReplicaTimeout(t, sim, spy, nil, signerIdx, 5*time.Second)
	ctx := context.Background()
	e := &env{chain: sim}
	req := e.requirements("10000")

	// The store refuses the record: no transaction may leave.
	p := e.pay(t, 1, req)
	spy.setFail(errors.New("store down"))
	before := pendingNonce(t, sim, r.sender.Address())
	if resp, err := r.fac.Settle(ctx, p, req); err == nil {
		t.Fatalf("settle with the record refused = %+v; want an error (no verdict)", resp)
	}
	if after := pendingNonce(t, sim, r.sender.Address()); after != before {
		t.Fatalf("the signer's pending nonce moved from %d to %d: a transaction left unrecorded", before, after)
	}
	key := keyOf(t, sim, p)
	if _, err := spy.Settlement(ctx, key); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("record after the refused send: %v, want ErrNotFound (released)", err)
	}

	// With the store back, the same authorization settles, recorded first.
	spy.setFail(nil)
	resp, err := r.fac.Settle(ctx, p, req)
	if err != nil || !resp.Success {
		t.Fatalf("settle = %+v, %v", resp, err)
	}
	spy.mu.Lock()
	recorded := spy.recorded
	spy.mu.Unlock()
	if len(recorded) != 1 || !strings.EqualFold(recorded[0], resp.Transaction) {
		t.Errorf("recorded %v before sending, want exactly the settlement %s", recorded, resp.Transaction)
	}
	rec, err := spy.Settlement(ctx, key)
	if err != nil || rec.State != store.StateSettled || decodeRaw(t, rec.RawTx).Hash().Hex() != resp.Transaction {
		t.Errorf("record is %q with tx %s, %v; want settled with the raw transaction of %s", rec.State, rec.TxHash, err, resp.Transaction)
	}
}

// TestReconcileLeavesSuccessToSettle: a settlement answered pending and then
// mined is recorded by the reconciler, which answers nobody, so the one
// success:true (D5) goes to the settle call that comes back for it.
func TestReconcileLeavesSuccessToSettle(t *testing.T) {
	sim := testchain.NewSimulated(t) // no auto-commit: blocks come from Commit
	db := openStore(t)
	r := newReplica(t, sim, db, nil, signerIdx)
	ctx := context.Background()
	e := &env{chain: sim}
	req := e.requirements("10000")
	p := e.pay(t, 2, req)

	first, err := r.fac.Settle(ctx, p, req)
	if err != nil || first.ErrorReason != x402.ReasonSettlementPending {
		t.Fatalf("settle before mining = %+v, %v; want settlement_pending", first, err)
	}
	sim.Commit()
	if _, err := r.fac.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	rec, err := db.Settlement(ctx, keyOf(t, sim, p))
	if err != nil || rec.State != store.StateSettled || rec.SuccessReported {
		t.Fatalf("record after reconcile is %q (success reported %t), %v; want settled, success not reported", rec.State, rec.SuccessReported, err)
	}
	again, err := r.fac.Settle(ctx, p, req)
	if err != nil || !again.Success || again.Transaction != rec.TxHash {
		t.Errorf("settle after reconcile = %+v, %v; want the one success:true with %s", again, err, rec.TxHash)
	}
}

// TestReplicaSettlementIsOurs: replica A signs a settlement and records a fee
// bump of it that never left (A died); the original is mined. Replica B, with
// a signer of its own, resolves the record: the transaction is A's, ours
// (D5), so the record is settled, not failed as a third party's,
// and the buyer's settle call gets the success. B never waits on A's
// transactions as if they were its own.
func TestReplicaSettlementIsOurs(t *testing.T) {
	sim := testchain.NewSimulated(t)
	db := openStore(t)
	a := newReplica(t, sim, db, nil, signerIdx)
	b := newReplica(t, sim, db, nil, otherSignerIdx)
	ctx := context.Background()
	e := &env{chain: sim}
	req := e.requirements("10000")

	// A settlement of A's, pending while B's reconciler looks at it.
	pending := e.pay(t, 3, req)
	resp, err := a.fac.Settle(ctx, pending, req)
	if err != nil || resp.ErrorReason != x402.ReasonSettlementPending {
		t.Fatalf("A's settle = %+v, %v; want settlement_pending", resp, err)
	}
	if _, err := b.fac.Reconcile(ctx); err != nil {
		t.Errorf("B's reconcile while A's transaction is pending: %v", err)
	}
	if strings.Contains(b.logs.String(), "not signed by") {
		t.Errorf("B waited on A's transaction as its own:\n%s", b.logs.String())
	}

	// A's record names a replacement that never left; the original mines.
	p := e.pay(t, 4, req)
	key := keyOf(t, sim, p)
	original, replacement := signSettlement(t, sim, db, signerIdx, p, req)
	if err := sim.Client.SendTransaction(ctx, original); err != nil {
		t.Fatal(err)
	}
	sim.Commit()
	if rec, _ := db.Settlement(ctx, key); rec.TxHash != replacement.Hash().Hex() {
		t.Fatalf("record names %s, want the replacement %s", rec.TxHash, replacement.Hash().Hex())
	}

	if _, err := b.fac.Reconcile(ctx); err != nil {
		t.Fatalf("B's reconcile: %v", err)
	}
	for k, want := range map[string]string{keyOf(t, sim, pending): resp.Transaction, key: original.Hash().Hex()} {
		rec, err := db.Settlement(ctx, k)
		if err != nil || rec.State != store.StateSettled || !strings.EqualFold(rec.TxHash, want) {
			t.Errorf("record %s after B's reconcile = %q (tx %s, reason %q), %v; want settled with A's %s",
				k, rec.State, rec.TxHash, rec.Reason, err, want)
		}
	}
	got, err := b.fac.Settle(ctx, p, req)
	if err != nil || !got.Success || got.Transaction != original.Hash().Hex() {
		t.Errorf("buyer's settle at B = %+v, %v; want success with A's %s", got, err, original.Hash().Hex())
	}
}

// TestReconcileAbandonsDeadTransaction: a record names a transaction whose
// nonce another transaction of the same account used, with the
// authorization still unused: it can never be mined, so the reconciler
// gives the authorization back (it does not sit pending forever), and a
// retry settles it.
func TestReconcileAbandonsDeadTransaction(t *testing.T) {
	sim := testchain.NewSimulated(t)
	sim.StartAutoCommit(t, 20*time.Millisecond)
	db := openStore(t)
	r := newReplica(t, sim, db, nil, signerIdx)
	ctx := context.Background()
	e := &env{chain: sim}
	req := e.requirements("10000")
	p := e.pay(t, 5, req)
	key := keyOf(t, sim, p)
	deadRecord(t, sim, db, p, req) // the account's nonce goes to something else
	if n, err := r.fac.Reconcile(ctx); err != nil || n != 1 {
		t.Fatalf("reconcile = %d, %v; want 1 record given back", n, err)
	}
	if rec, err := db.Settlement(ctx, key); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("record after reconcile is %q (tx %s), %v; want ErrNotFound", rec.State, rec.TxHash, err)
	}
	resp, err := r.fac.Settle(ctx, p, req)
	if err != nil || !resp.Success {
		t.Errorf("settle after the record was given back = %+v, %v; want success", resp, err)
	}
}

// TestVerifyUsedDuringSimulation: the authorization is used (a settlement
// mined) but the node's first answer to authorizationState still says unused,
// as when the settlement lands between that read and the simulation. The
// simulation fails, and verify must answer nonce_already_used (D9), not
// simulation_failed.
func TestVerifyUsedDuringSimulation(t *testing.T) {
	sim := testchain.NewSimulated(t)
	sim.StartAutoCommit(t, 20*time.Millisecond)
	db := openStore(t)
	e := &env{chain: sim}
	req := e.requirements("10000")
	p := e.pay(t, 1, req)
	tx := submitDirectly(t, sim.TokenContract, sim.Transactor(t, 7), p)
	sim.Mine(t, tx)

	stale := &staleState{Backend: sim.Client, stale: 1}
	r := newReplica(t, sim, db, stale, signerIdx)
	v, err := r.fac.Verify(context.Background(), p, req)
	if err != nil {
		t.Fatal(err)
	}
	if v.IsValid || v.InvalidReason != x402.ReasonEVMNonceAlreadyUsed {
		t.Errorf("verify = %+v; want invalid_exact_evm_nonce_already_used", v)
	}
	if stale.calls() < 2 {
		t.Errorf("authorizationState read %d times, want the stale answer and a second read", stale.calls())
	}
}

var authorizationStateSelector = crypto.Keccak256([]byte("authorizationState(address,bytes32)"))[:4]

// staleState answers the first stale authorizationState calls with "unused",
// as a node a block behind would, and passes everything else on.
type staleState struct {
	facilitator.Backend
	stale int

	mu sync.Mutex
	n  int
}

func (s *staleState) calls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n
}

func (s *staleState) CallContract(ctx context.Context, msg ethereum.CallMsg, block *big.Int) ([]byte, error) {
	if bytes.HasPrefix(msg.Data, authorizationStateSelector) {
		s.mu.Lock()
		s.n++
		lie := s.n <= s.stale
		s.mu.Unlock()
		if lie {
			return make([]byte, 32), nil // false
		}
	}
	return s.Backend.CallContract(ctx, msg, block)
}

// keyOf is the settlement key of p (D4).
func keyOf(t *testing.T, sim *testchain.Simulated, p *x402.PaymentPayload) string {
	t.Helper()
	return tokenKeyOf(t, sim.Token, p)
}

// tokenKeyOf is the settlement key of p, a payment in token.
func tokenKeyOf(t *testing.T, token common.Address, p *x402.PaymentPayload) string {
	t.Helper()
	pl, err := exact.ParsePayload(p.Payload)
	if err != nil {
		t.Fatal(err)
	}
	return exact.Key(network, token, pl.Authorization.From, pl.Authorization.Nonce)
}

// signSettlement claims p's record as a replica signing with dev key signer
// would, signs its transfer at the signer's next nonce and a fee bump of it,
// and records the bump (as if sent, though neither is). It returns both.
func signSettlement(t *testing.T, sim *testchain.Simulated, db store.Settlements, signer int, p *x402.PaymentPayload, req x402.PaymentRequirements) (original, replacement *types.Transaction) {
	t.Helper()
	ctx := context.Background()
	vd, _, err := (&exact.Verifier{ChainID: sim.ChainID}).Check(p, req)
	if err != nil {
		t.Fatal(err)
	}
	data, err := exact.TransferCalldata(vd)
	if err != nil {
		t.Fatal(err)
	}
	from := sim.Addr(signer)
	nonce := pendingNonce(t, sim, from)
	head, err := sim.Client.HeaderByNumber(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	tip := big.NewInt(params.GWei)
	feeCap := new(big.Int).Add(new(big.Int).Lsh(head.BaseFee, 1), tip)
	sign := func(mult int64) *types.Transaction {
		tx, err := types.SignNewTx(sim.Keys[signer], types.LatestSignerForChainID(sim.ChainID), &types.DynamicFeeTx{
			ChainID: sim.ChainID, Nonce: nonce, Gas: 200_000, To: &vd.Asset, Data: data,
			GasTipCap: new(big.Int).Mul(tip, big.NewInt(mult)), GasFeeCap: new(big.Int).Mul(feeCap, big.NewInt(mult)),
		})
		if err != nil {
			t.Fatal(err)
		}
		return tx
	}
	original, replacement = sign(1), sign(2)
	a := vd.Payload.Authorization
	rec, won, err := db.ClaimSettlement(ctx, store.Settlement{
		Key: vd.Key(), Network: network, Asset: vd.Asset.Hex(), Payer: a.From.Hex(), PayTo: a.To.Hex(),
		Amount: a.Value.String(), Owner: fmt.Sprintf("replica-%d", signer),
	}, time.Minute)
	if err != nil || !won {
		t.Fatalf("claim = %q, %v, %v", rec.State, won, err)
	}
	raw, err := replacement.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	if err := db.RecordBroadcast(ctx, rec.Key, rec.Fence, replacement.Hash().Hex(), hexutil.Encode(raw)); err != nil {
		t.Fatal(err)
	}
	return original, replacement
}

func pendingNonce(t *testing.T, sim *testchain.Simulated, addr common.Address) uint64 {
	t.Helper()
	n, err := sim.Client.PendingNonceAt(context.Background(), addr)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func decodeRaw(t *testing.T, raw string) *types.Transaction {
	t.Helper()
	b, err := hexutil.Decode(raw)
	if err != nil {
		t.Fatalf("raw transaction %q: %v", raw, err)
	}
	tx := new(types.Transaction)
	if err := tx.UnmarshalBinary(b); err != nil {
		t.Fatalf("raw transaction: %v", err)
	}
	return tx
}
