package receiptlog_test

import (
	"context"
	"errors"
	"math/big"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/accounts/abi/bind"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/mod/sumdb/note"

	"github.com/llm4agents/llm4agents/contracts"
	"github.com/llm4agents/llm4agents/internal/chain"
	"github.com/llm4agents/llm4agents/internal/receiptlog"
	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/internal/testchain"
	"github.com/llm4agents/llm4agents/x402/receipt"
)

// Roles of the simulated chain's dev accounts here.
const (
	anchorSignerIdx = 3 // the facilitator's signer, which anchors
	otherSignerIdx  = 4 // another replica's signer
)

const (
	anchorNetwork = "eip155:1337"
	// anchorEvery is long: the tests move the anchorer's clock instead.
	anchorEvery = time.Hour
	// past is how far the tests move the clock to make an anchor due: a
	// period, and a margin for the store's clock, which stamps SentAt and
	// runs ahead of the test clock by the test's own run time.
	past = anchorEvery + time.Minute
)

// anchorChain is a simulated chain with the anchor contract deployed.
type anchorChain struct {
	sim      *testchain.Simulated
	contract common.Address
}

func newAnchorChain(t *testing.T) *anchorChain {
	t.Helper()
	sim := testchain.NewSimulated(t)
	addr, _ := sim.DeployReceiptLogAnchor(t)
	sim.StartAutoCommit(t, 10*time.Millisecond)
	return &anchorChain{sim: sim, contract: addr}
}

// sender is a chain.Sender for dev account i, as the facilitator builds it.
func (c *anchorChain) sender(t *testing.T, i int) *chain.Sender {
	t.Helper()
	s, err := chain.NewSender(c.sim.Client, c.sim.Keys[i], c.sim.ChainID,
		chain.SenderConfig{MaxFeePerGas: big.NewInt(1e12), PollInterval: 10 * time.Millisecond}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// settableClock is the anchorer's clock, moved by the test.
type settableClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *settableClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *settableClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// anchoredLog is a log whose checkpoints are anchored by sender at contract.
type anchoredLog struct {
	*receiptlog.Log
	st      logStore
	clock   *settableClock
	metrics *prometheus.Registry
}

func newAnchoredLog(t *testing.T, st logStore, k keyPair, holder string, c *anchorChain, sender receiptlog.AnchorSender, contract common.Address) *anchoredLog {
	t.Helper()
	clock := &settableClock{now: time.Now()}
	l, err := receiptlog.New(receiptlog.Config{Store: st, Key: k.key, VerifierKey: k.vkey, Holder: holder, MaxMergeDelay: 400 * time.Millisecond,
		Anchor: &receiptlog.Anchoring{Network: anchorNetwork, Contract: contract, Every: anchorEvery,
			Sender: sender, Node: c.sim.Client, Store: anchorStore(t, st), Now: clock.Now}})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	if err := l.RegisterMetrics(reg); err != nil {
		t.Fatal(err)
	}
	return &anchoredLog{Log: l, st: st, clock: clock, metrics: reg}
}

// keyPair is a log's checkpoint key: every replica of a test signs as one
// log.
type keyPair struct {
	key  note.Signer
	vkey string
}

func newKeyPair(t *testing.T) keyPair {
	t.Helper()
	key, vkey := newKey(t)
	return keyPair{key, vkey}
}

func anchorStore(t *testing.T, st logStore) store.LogAnchors {
	t.Helper()
	a, ok := st.(store.LogAnchors)
	if !ok {
		t.Fatalf("%T keeps no anchors", st)
	}
	return a
}

// grow appends n receipts and integrates them.
func (l *anchoredLog) grow(t *testing.T, from, n int) receipt.Checkpoint {
	t.Helper()
	appendReceipts(t, l.st, from, n)
	if _, err := l.Integrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	return checkpoint(t, l.Log)
}

func (l *anchoredLog) anchor(t *testing.T) {
	t.Helper()
	if err := l.Anchor(t.Context()); err != nil {
		t.Fatalf("Anchor: %v", err)
	}
}

// records lists the store's anchor records, newest first.
func (l *anchoredLog) records(t *testing.T) []store.LogAnchor {
	t.Helper()
	recs, err := anchorStore(t, l.st).LogAnchors(t.Context(), store.MaxLogAnchors)
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

// outcome is the value of llm4agents_log_anchors_total{outcome}.
func (l *anchoredLog) outcome(t *testing.T, outcome string) float64 {
	t.Helper()
	mfs, err := l.metrics.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "llm4agents_log_anchors_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if m.GetLabel()[0].GetValue() == outcome {
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("no anchors metric with outcome %s", outcome)
	return 0
}

// checkOnChain fails unless a's transaction is mined in a.Block with the
// Anchored event of its sender, size and root, at contract.
func checkOnChain(t *testing.T, c *anchorChain, contract common.Address, a receipt.Anchor) {
	t.Helper()
	r, err := c.sim.Client.TransactionReceipt(t.Context(), a.Transaction)
	if err != nil {
		t.Fatalf("receipt of anchor %s: %v", a.Transaction, err)
	}
	want := []receipt.Anchored{{Contract: contract, By: a.Sender, Size: uint64(a.Size), Root: a.Root}}
	if diff := cmp.Diff(want, receipt.AnchoredEvents(r)); diff != "" || r.BlockNumber.Uint64() != a.Block {
		t.Errorf("anchor %s on chain: block %d, want %d; events (-want +got):\n%s", a.Transaction, r.BlockNumber, a.Block, diff)
	}
}

// TestAnchor: the latest checkpoint is anchored once the log has leaves,
// then only when a period has passed and the log grew; each anchor is on
// chain with its event, recorded, confirmed and listed.
func TestAnchor(t *testing.T) { eachBackend(t, testAnchor) }

func testAnchor(t *testing.T, a, _ logStore) {
	k := newKeyPair(t)
	c := newAnchorChain(t)
	sender := c.sender(t, anchorSignerIdx)
	l := newAnchoredLog(t, a, k, "replica-1", c, sender, c.contract)
	wk := l.WellKnown()
	if wk.Network != anchorNetwork || wk.AnchorContract != c.contract || wk.AnchorSender != sender.Address() || !wk.Anchored() {
		t.Errorf("WellKnown() = %+v, want the anchoring named", wk)
	}
	// An empty log is not anchored.
	l.anchor(t)
	if got, err := l.Anchors(t.Context(), 10); err != nil || len(got) != 0 {
		t.Fatalf("Anchors of an empty log = %v, %v", got, err)
	}

	cp5 := l.grow(t, 0, 5)
	l.anchor(t)
	got, err := l.Anchors(t.Context(), 10)
	if err != nil || len(got) != 1 {
		t.Fatalf("Anchors = %+v, %v; want one", got, err)
	}
	first := got[0]
	if first.Size != 5 || first.Root != cp5.Root || first.Network != anchorNetwork || first.Contract != c.contract ||
		first.Sender != sender.Address() || first.Block == 0 || first.SentAt.IsZero() {
		t.Errorf("anchor = %+v, want size 5 with the checkpoint's root, confirmed", first)
	}
	checkOnChain(t, c, c.contract, first)

	// Not due again within the period, grown or not; due after it only if
	// the log grew.
	l.anchor(t)
	cp8 := l.grow(t, 5, 3)
	l.anchor(t)
	if n := len(l.records(t)); n != 1 {
		t.Fatalf("%d anchors within the period, want 1", n)
	}
	l.clock.Advance(past)
	l.anchor(t)
	got, err = l.Anchors(t.Context(), 10)
	if err != nil || len(got) != 2 || got[0].Size != 8 || got[0].Root != cp8.Root || got[1] != first {
		t.Fatalf("Anchors after the log grew = %+v, %v; want size 8, then the first", got, err)
	}
	checkOnChain(t, c, c.contract, got[0])
	l.clock.Advance(past)
	l.anchor(t)
	if n := len(l.records(t)); n != 2 {
		t.Errorf("%d anchors after a period in which the log did not grow, want 2", n)
	}
	if s, f := l.outcome(t, "sent"), l.outcome(t, "failed"); s != 2 || f != 0 {
		t.Errorf("sent %v, failed %v; want 2 and 0", s, f)
	}
	if _, err := l.Anchors(t.Context(), 0); err == nil {
		t.Error("Anchors(0) accepted")
	}
}

// TestAnchorAfterCrash: a replica killed between recording an anchor and
// seeing it mined leaves a record. If its transaction was mined, the next
// holder confirms it and sends nothing; if it never left, the next holder
// anchors that size again once a period passed, once, however many periods
// pass after.
func TestAnchorAfterCrash(t *testing.T) { eachBackend(t, testAnchorAfterCrash) }

func testAnchorAfterCrash(t *testing.T, a, b logStore) {
	k := newKeyPair(t)
	c := newAnchorChain(t)
	dead := newAnchoredLog(t, a, k, "replica-dead", c, c.sender(t, otherSignerIdx), c.contract)
	cp := dead.grow(t, 0, 4)
	rec := store.LogAnchor{Size: cp.Size, Root: cp.Root, Network: anchorNetwork, Contract: c.contract.Hex(), Sender: c.sim.Addr(otherSignerIdx).Hex()}

	// Killed after the broadcast: its transaction is mined, the record says
	// nothing of it.
	data, err := contracts.AnchorCalldata(uint64(cp.Size), cp.Root)
	if err != nil {
		t.Fatal(err)
	}
	abi, err := contracts.ReceiptLogAnchorMetaData.GetAbi()
	if err != nil {
		t.Fatal(err)
	}
	tx, err := bind.NewBoundContract(c.contract, *abi, c.sim.Client, c.sim.Client, c.sim.Client).RawTransact(c.sim.Transactor(t, otherSignerIdx), data)
	if err != nil {
		t.Fatal(err)
	}
	mined := rec
	mined.TxHash = tx.Hash().Hex()
	if err := anchorStore(t, a).RecordAnchor(t.Context(), mined); err != nil {
		t.Fatal(err)
	}
	c.sim.Mine(t, tx)
	next := newAnchoredLog(t, b, k, "replica-next", c, c.sender(t, anchorSignerIdx), c.contract)
	for range 3 {
		next.anchor(t)
		next.clock.Advance(past)
	}
	recs := next.records(t)
	if len(recs) != 1 || recs[0].TxHash != mined.TxHash || recs[0].Block == 0 {
		t.Fatalf("records = %+v, want the dead replica's anchor alone, confirmed", recs)
	}
	got, _ := next.Anchors(t.Context(), 10)
	checkOnChain(t, c, c.contract, got[0])

	// Killed before the broadcast: the record names a transaction that never
	// left.
	cp = next.grow(t, 4, 2)
	lost := rec
	lost.Size, lost.Root, lost.TxHash = cp.Size, cp.Root, "0x"+common.Bytes2Hex(make([]byte, 31))+"01"
	if err := anchorStore(t, a).RecordAnchor(t.Context(), lost); err != nil {
		t.Fatal(err)
	}
	again := newAnchoredLog(t, b, k, "replica-again", c, c.sender(t, anchorSignerIdx), c.contract)
	again.anchor(t) // within the period of the lost anchor: nothing
	if n := len(again.records(t)); n != 2 {
		t.Fatalf("%d records within the lost anchor's period, want 2", n)
	}
	for range 4 {
		again.clock.Advance(past)
		again.anchor(t)
	}
	recs = again.records(t)
	if len(recs) != 3 || recs[0].Size != cp.Size || recs[0].Block == 0 || recs[1].TxHash != lost.TxHash || recs[1].Block != 0 {
		t.Fatalf("records = %+v, want size %d anchored again once, confirmed, above the lost one", recs, cp.Size)
	}
	if s := again.outcome(t, "sent"); s != 1 {
		t.Errorf("sent %v, want 1", s)
	}
}

// TestAnchorNoEvent: an anchor mined without its event (log.anchor.contract
// names an account without the contract's code) is not confirmed: it is
// counted failed, once.
func TestAnchorNoEvent(t *testing.T) {
	k := newKeyPair(t)
	a, _ := openSQLite(t)
	c := newAnchorChain(t)
	l := newAnchoredLog(t, a, k, "replica-1", c, c.sender(t, anchorSignerIdx), c.sim.Addr(7))
	l.grow(t, 0, 2)
	l.anchor(t)
	l.anchor(t)
	recs := l.records(t)
	if len(recs) != 1 || recs[0].Block != 0 {
		t.Fatalf("records = %+v, want one, not confirmed", recs)
	}
	if f, ok := l.outcome(t, "failed"), l.outcome(t, "confirmed"); f != 1 || ok != 0 {
		t.Errorf("failed %v, confirmed %v; want 1 and 0", f, ok)
	}
}

// slowSender is a chain that does not answer: SendRecorded waits for its
// context.
type slowSender struct {
	receiptlog.AnchorSender
	calls atomic.Int32
}

func (s *slowSender) SendRecorded(ctx context.Context, _ common.Address, _ []byte, _ chain.BeforeBroadcast) (*types.Transaction, error) {
	s.calls.Add(1)
	<-ctx.Done()
	return nil, ctx.Err()
}

// refusingSender is a node that refuses every transaction at once.
type refusingSender struct{ receiptlog.AnchorSender }

func (refusingSender) SendRecorded(context.Context, common.Address, []byte, chain.BeforeBroadcast) (*types.Transaction, error) {
	return nil, errors.New("send tx: connection refused")
}

// TestAnchorChainDown: while the chain does not answer, the log integrates
// as ever; Run stops promptly; a node that refuses fails the round, counted,
// leaving no record.
func TestAnchorChainDown(t *testing.T) {
	k := newKeyPair(t)
	a, _ := openSQLite(t)
	c := newAnchorChain(t)
	slow := &slowSender{AnchorSender: c.sender(t, anchorSignerIdx)}
	l := newAnchoredLog(t, a, k, "replica-1", c, slow, c.contract)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		l.Run(ctx)
	}()
	for i := range 3 {
		appendReceipts(t, a, i*10, 10)
		deadline := time.Now().Add(5 * time.Second)
		for checkpoint(t, l.Log).Size != int64(i*10+10) {
			if time.Now().After(deadline) {
				t.Fatalf("the log did not integrate while the chain hangs: size %d", checkpoint(t, l.Log).Size)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	if n := slow.calls.Load(); n != 1 {
		t.Errorf("%d anchors sent, want 1 hanging", n)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}

	refused := newAnchoredLog(t, a, k, "replica-2", c, refusingSender{c.sender(t, anchorSignerIdx)}, c.contract)
	if err := refused.Anchor(t.Context()); err == nil {
		t.Fatal("Anchor with a node that refuses succeeded")
	}
	if f := refused.outcome(t, "failed"); f != 1 {
		t.Errorf("failed %v, want 1", f)
	}
	if n := len(refused.records(t)); n != 0 {
		t.Errorf("%d records of anchors never signed, want 0", n)
	}
}

// TestAnchorRun: Run anchors on its own, paced by Every.
func TestAnchorRun(t *testing.T) {
	a, _ := openSQLite(t)
	c := newAnchorChain(t)
	key, vkey := newKey(t)
	sender := c.sender(t, anchorSignerIdx)
	l, err := receiptlog.New(receiptlog.Config{Store: a, Key: key, VerifierKey: vkey, Holder: "replica-1", MaxMergeDelay: 400 * time.Millisecond,
		Anchor: &receiptlog.Anchoring{Network: anchorNetwork, Contract: c.contract, Every: 300 * time.Millisecond,
			Sender: sender, Node: c.sim.Client, Store: anchorStore(t, a)}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	wg.Go(func() { l.Run(ctx) })
	defer func() {
		cancel()
		wg.Wait()
	}()
	for i, size := range []int64{3, 7} {
		appendReceipts(t, a, i*10, int(size)-i*3)
		deadline := time.Now().Add(10 * time.Second)
		for {
			got, err := l.Anchors(t.Context(), 1)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) == 1 && got[0].Size == size && got[0].Block > 0 {
				checkOnChain(t, c, c.contract, got[0])
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("no anchor of size %d confirmed: %+v", size, got)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

func TestAnchorNewRefuses(t *testing.T) {
	a, _ := openSQLite(t)
	key, vkey := newKey(t)
	c := newAnchorChain(t)
	ok := receiptlog.Anchoring{Network: anchorNetwork, Contract: c.contract, Every: time.Minute,
		Sender: c.sender(t, anchorSignerIdx), Node: c.sim.Client, Store: anchorStore(t, a)}
	for name, change := range map[string]func(*receiptlog.Anchoring){
		"no network":        func(x *receiptlog.Anchoring) { x.Network = "" },
		"no contract":       func(x *receiptlog.Anchoring) { x.Contract = common.Address{} },
		"no period":         func(x *receiptlog.Anchoring) { x.Every = 0 },
		"a negative period": func(x *receiptlog.Anchoring) { x.Every = -time.Second },
		"no sender":         func(x *receiptlog.Anchoring) { x.Sender = nil },
		"no node":           func(x *receiptlog.Anchoring) { x.Node = nil },
		"no store":          func(x *receiptlog.Anchoring) { x.Store = nil },
	} {
		x := ok
		change(&x)
		if _, err := receiptlog.New(receiptlog.Config{Store: a, Key: key, VerifierKey: vkey, Holder: "h", Anchor: &x}); err == nil {
			t.Errorf("%s: New accepted it", name)
		}
	}
	plain := newLog(t, a, "h", key, vkey)
	if _, err := plain.Anchors(t.Context(), 10); !errors.Is(err, receiptlog.ErrNotAnchored) {
		t.Errorf("Anchors of a log not anchored: %v, want ErrNotAnchored", err)
	}
	if err := plain.Anchor(t.Context()); !errors.Is(err, receiptlog.ErrNotAnchored) {
		t.Errorf("Anchor of a log not anchored: %v, want ErrNotAnchored", err)
	}
	if wk := plain.WellKnown(); wk.Anchored() || wk.Origin != origin {
		t.Errorf("WellKnown() of a log not anchored = %+v", wk)
	}
}
