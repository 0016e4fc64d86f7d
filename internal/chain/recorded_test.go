package chain

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"

	"github.com/llm4agents/llm4agents/internal/testchain"
)

// recorder is a BeforeBroadcast that keeps what it was given and checks that
// the node does not know the transaction yet: it is called before the send.
type recorder struct {
	tb   testing.TB
	node interface {
		TransactionByHash(ctx context.Context, hash common.Hash) (*types.Transaction, bool, error)
	}
	mu   sync.Mutex
	txs  []*types.Transaction
	fail error // returned instead of recording, when set
}

func (r *recorder) before(ctx context.Context, tx *types.Transaction) error {
	if r.fail != nil {
		return r.fail
	}
	if r.node != nil {
		// Only an answer that the node has it fails: a lookup that timed
		// out on a loaded machine says nothing either way.
		switch _, _, err := r.node.TransactionByHash(ctx, tx.Hash()); {
		case err == nil:
			r.tb.Errorf("BeforeBroadcast(%s): the node already knows it", tx.Hash())
		case !errors.Is(err, ethereum.NotFound):
			r.tb.Logf("BeforeBroadcast(%s): the node could not be asked: %v", tx.Hash(), err)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.txs = append(r.txs, tx)
	return nil
}

func (r *recorder) hashes() []common.Hash {
	r.mu.Lock()
	defer r.mu.Unlock()
	var hs []common.Hash
	for _, tx := range r.txs {
		hs = append(hs, tx.Hash())
	}
	return hs
}

// TestSendRecordedBeforeBroadcast: SendRecorded hands the signed transaction
// to BeforeBroadcast before the node sees it, and when BeforeBroadcast fails,
// nothing is sent and the nonce is handed out again.
func TestSendRecordedBeforeBroadcast(t *testing.T) {
	node := newFakeNode(t, nil)
	c := node.dial(t)
	s, _ := newTestSender(t, c, 0, testConfig())
	ctx := testContext(t, 10*time.Second)

	refused := errors.New("store down")
	r := &recorder{tb: t, fail: refused}
	tx, err := s.SendRecorded(ctx, payee, []byte{1}, r.before)
	if tx != nil || !errors.Is(err, refused) {
		t.Fatalf("SendRecorded with a failing BeforeBroadcast = %v, %v; want nil and its error", tx, err)
	}
	if n := len(node.sentNonces()); n != 0 {
		t.Fatalf("the node got %d transactions after BeforeBroadcast failed, want none", n)
	}

	r = &recorder{tb: t, node: c}
	tx, err = s.SendRecorded(ctx, payee, []byte{1}, r.before)
	if err != nil {
		t.Fatal(err)
	}
	if tx.Nonce() != 0 {
		t.Errorf("nonce %d after the refused send, want 0 again", tx.Nonce())
	}
	if got := r.hashes(); len(got) != 1 || got[0] != tx.Hash() {
		t.Errorf("BeforeBroadcast saw %v, want only %s", got, tx.Hash())
	}
	if got := node.sentNonces(); len(got) != 1 || got[0] != 0 {
		t.Errorf("the node got nonces %v, want [0]", got)
	}
}

// TestReplacementRecordedBeforeBroadcast: a fee-bump replacement goes through
// the BeforeBroadcast of its call before the node sees it, also when the call
// is one Wait adopted (signed before a restart), and a replacement whose
// BeforeBroadcast fails is not sent.
func TestReplacementRecordedBeforeBroadcast(t *testing.T) {
	a := testchain.StartAnvil(t, testchain.WithNoMining())
	ctx := testContext(t, 30*time.Second)
	cfg := testConfig()
	cfg.ReplaceAfter = 50 * time.Millisecond

	// The first Sender signs and sends; it is then forgotten, as at a crash.
	first, _ := newTestSender(t, a.Client, 0, cfg)
	tx, err := first.SendRecorded(ctx, payee, nil, (&recorder{tb: t, node: a.Client}).before)
	if err != nil {
		t.Fatal(err)
	}

	// The failing recorder: no replacement may reach the node.
	s, _ := newTestSender(t, a.Client, 0, cfg)
	failing := &recorder{tb: t, fail: errors.New("store down")}
	short, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	_, err = s.WaitRecorded(short, tx, failing.before)
	cancel()
	var perr *PendingError
	if !errors.As(err, &perr) || perr.Hash != tx.Hash() {
		t.Fatalf("WaitRecorded = %v, want pending on %s (no replacement sent)", err, tx.Hash())
	}

	// A restarted Sender adopting it with a working recorder.
	s, logs := newTestSender(t, a.Client, 0, cfg)
	r := &recorder{tb: t, node: a.Client}
	for i := 0; len(r.hashes()) == 0; i++ {
		if i == 50 {
			t.Fatalf("no replacement after %d rounds", i)
		}
		short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		_, err = s.WaitRecorded(short, tx, r.before)
		cancel()
		if !errors.As(err, &perr) {
			t.Fatalf("WaitRecorded = %v, want a *PendingError", err)
		}
	}
	if err := a.Mine(ctx, 1); err != nil {
		t.Fatal(err)
	}
	receipt, err := s.WaitRecorded(ctx, tx, r.before)
	if err != nil {
		t.Fatal(err)
	}
	recorded := r.hashes()
	if receipt.TxHash == tx.Hash() || !containsHash(recorded, receipt.TxHash) {
		t.Errorf("mined %s; recorded replacements %v; want a recorded replacement mined", receipt.TxHash, recorded)
	}
	if !strings.Contains(logs.String(), "replaced stuck transaction") {
		t.Error(`logs lack "replaced stuck transaction"`)
	}
}

func containsHash(hs []common.Hash, h common.Hash) bool { return slices.Contains(hs, h) }

// TestWaitReceiptLagsNonce: anvil in front of which the receipt of our mined
// transaction is not served for several polls after the account's nonce
// moved past it. The transaction is ours and mined (the node says so by
// hash), so Wait must keep waiting for its receipt rather than conclude that
// another transaction used the nonce.
func TestWaitReceiptLagsNonce(t *testing.T) {
	a := testchain.StartAnvil(t)
	const lagging = 8 // receipt lookups answered "not found" after mining
	var mu sync.Mutex
	misses := 0
	node := newProxyNode(t, a, map[string]fakeMethod{
		"eth_getTransactionReceipt": func(f *fakeNode, params []json.RawMessage) (any, error) {
			mu.Lock()
			lag := misses < lagging
			misses++
			mu.Unlock()
			if lag {
				return nil, nil
			}
			return f.forward("eth_getTransactionReceipt", params)
		},
	})
	c := node.dial(t)
	s, _ := newTestSender(t, c, 0, testConfig())
	ctx := testContext(t, 30*time.Second)

	tx, err := s.Send(ctx, payee, nil)
	if err != nil {
		t.Fatal(err)
	}
	r, err := s.Wait(ctx, tx)
	if err != nil {
		t.Fatalf("Wait = %v, want the receipt of our own transaction", err)
	}
	if r.TxHash != tx.Hash() {
		t.Errorf("receipt of %s, want %s", r.TxHash, tx.Hash())
	}
}

// TestWaitAdoptedAfterNonceReuse: a transaction signed before a restart that
// never reached the node, whose nonce the restarted Sender gave to a new
// call, is not taken for a version of that call: waiting for it ends in
// ErrNonceConsumed once the new call is mined, and it is never sent.
func TestWaitAdoptedAfterNonceReuse(t *testing.T) {
	a := testchain.StartAnvil(t)
	ctx := testContext(t, 30*time.Second)
	old := signTransfer(t, testchain.DevKey(0), 0) // signed, never sent
	s, _ := newTestSender(t, a.Client, 0, testConfig())
	tx, err := s.Send(ctx, payee, []byte{1, 2, 3})
	if err != nil {
		t.Fatal(err)
	}
	if tx.Nonce() != old.Nonce() {
		t.Fatalf("new call got nonce %d, want %d", tx.Nonce(), old.Nonce())
	}
	if _, err := s.Wait(ctx, old); !errors.Is(err, ErrNonceConsumed) {
		t.Errorf("Wait(old) = %v, want ErrNonceConsumed", err)
	}
	r, err := s.Wait(ctx, tx)
	if err != nil || r.TxHash != tx.Hash() {
		t.Errorf("Wait(new) = %v, %v; want its own receipt", r, err)
	}
	if _, err := a.Client.TransactionReceipt(ctx, old.Hash()); !errors.Is(err, ethereum.NotFound) {
		t.Errorf("receipt of the old transaction: err = %v, want not found", err)
	}
}

// TestSendOwnTransactionMinedFirst: a replica resuming the record sent this
// transaction's recorded bytes first and they were mined, so the node
// answers our own broadcast "nonce too low". The Sender must take the
// transaction as sent, not sign the call again under the next nonce: that
// second transaction would pay nothing and spend gas (found by the replica
// test on Redis).
func TestSendOwnTransactionMinedFirst(t *testing.T) {
	a := testchain.StartAnvil(t)
	node := newProxyNode(t, a, map[string]fakeMethod{
		"eth_sendRawTransaction": func(f *fakeNode, params []json.RawMessage) (any, error) {
			if _, err := f.forward("eth_sendRawTransaction", params); err != nil { // the other replica's send, mined at once
				return nil, err
			}
			return nil, errors.New("nonce too low: next nonce 1, tx nonce 0")
		},
	})
	c := node.dial(t)
	s, _ := newTestSender(t, c, 0, testConfig())
	ctx := testContext(t, 30*time.Second)

	r := &recorder{tb: t, node: c}
	tx, err := s.SendRecorded(ctx, payee, []byte{1}, r.before)
	if err != nil {
		t.Fatalf("SendRecorded = %v, want the transaction the node already mined", err)
	}
	if got := r.hashes(); len(got) != 1 || got[0] != tx.Hash() {
		t.Errorf("BeforeBroadcast saw %v, want only %s: the call was signed again", got, tx.Hash())
	}
	rc, err := s.WaitRecorded(ctx, tx, r.before)
	if err != nil || rc.TxHash != tx.Hash() {
		t.Fatalf("WaitRecorded = %v, %v; want the receipt of %s", rc, err, tx.Hash())
	}
	n, err := a.Client.NonceAt(ctx, testchain.DevAddress(0), nil)
	if err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Errorf("the account sent %d transactions, want 1", n)
	}
}
