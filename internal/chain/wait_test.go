package chain

import (
	"context"
	"math/big"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/params"
	"github.com/google/go-cmp/cmp"
)

// clockNode is an in-memory Backend for Wait's timing, for a synctest
// bubble (no sockets, so the bubble's clock moves only when every goroutine
// waits). It serves the receipt of a transaction once lag has passed since
// its broadcast, and notes when receipts and the account's nonce were asked
// for, as offsets from the first broadcast.
type clockNode struct {
	lag time.Duration

	mu       sync.Mutex
	sentAt   time.Time // first broadcast; zero until then
	sent     map[common.Hash]*types.Transaction
	receipts []time.Duration // receipt lookups
	nonces   []time.Duration // NonceAt calls
}

func newClockNode(lag time.Duration) *clockNode {
	return &clockNode{lag: lag, sent: map[common.Hash]*types.Transaction{}}
}

func (n *clockNode) since() time.Duration { return time.Since(n.sentAt) }

func (n *clockNode) mined() bool { return !n.sentAt.IsZero() && n.since() >= n.lag }

func (n *clockNode) PendingNonceAt(context.Context, common.Address) (uint64, error) { return 0, nil }

func (n *clockNode) NonceAt(context.Context, common.Address, *big.Int) (uint64, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.nonces = append(n.nonces, n.since())
	if n.mined() {
		return 1, nil
	}
	return 0, nil
}

func (n *clockNode) BalanceAt(context.Context, common.Address, *big.Int) (*big.Int, error) {
	return big.NewInt(params.Ether), nil
}

func (n *clockNode) HeaderByNumber(context.Context, *big.Int) (*types.Header, error) {
	return &types.Header{Number: big.NewInt(1), BaseFee: big.NewInt(params.GWei)}, nil
}

func (n *clockNode) SuggestGasTipCap(context.Context) (*big.Int, error) {
	return big.NewInt(params.GWei), nil
}

func (n *clockNode) EstimateGas(context.Context, ethereum.CallMsg) (uint64, error) {
	return params.TxGas, nil
}

func (n *clockNode) CallContract(context.Context, ethereum.CallMsg, *big.Int) ([]byte, error) {
	return nil, nil
}

func (n *clockNode) SendTransaction(_ context.Context, tx *types.Transaction) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.sentAt.IsZero() {
		n.sentAt = time.Now()
	}
	n.sent[tx.Hash()] = tx
	return nil
}

func (n *clockNode) TransactionByHash(_ context.Context, h common.Hash) (*types.Transaction, bool, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	tx := n.sent[h]
	if tx == nil {
		return nil, false, ethereum.NotFound
	}
	return tx, !n.mined(), nil
}

func (n *clockNode) TransactionReceipt(_ context.Context, h common.Hash) (*types.Receipt, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.receipts = append(n.receipts, n.since())
	if n.sent[h] == nil || !n.mined() {
		return nil, ethereum.NotFound
	}
	return &types.Receipt{TxHash: h, Status: types.ReceiptStatusSuccessful, BlockNumber: big.NewInt(1)}, nil
}

var _ Backend = (*clockNode)(nil)

// TestWaitTiming: Wait looks for the receipt right after the broadcast and
// returns at once when it is there; otherwise it looks again for the receipt
// alone 5ms, 10ms, 20ms... after the start while below PollInterval (a node
// that mines on arrival serves it a moment late), then polls every
// PollInterval, reading the account's nonce only on those full polls (not
// at the first look, right after the broadcast).
func TestWaitTiming(t *testing.T) {
	ms := func(ds ...int) []time.Duration {
		var out []time.Duration
		for _, d := range ds {
			out = append(out, time.Duration(d)*time.Millisecond)
		}
		return out
	}
	for _, tc := range []struct {
		name     string
		poll     time.Duration
		lag      time.Duration // from the broadcast to the receipt
		receipts []time.Duration
		nonces   []time.Duration
	}{
		{name: "mined on arrival", poll: time.Second, lag: 0, receipts: ms(0), nonces: ms()},
		{name: "receipt 3ms late", poll: time.Second, lag: 3 * time.Millisecond, receipts: ms(0, 5), nonces: ms()},
		{name: "receipt 30ms late", poll: 250 * time.Millisecond, lag: 30 * time.Millisecond, receipts: ms(0, 5, 10, 20, 40), nonces: ms()},
		{name: "block at 400ms, poll 100ms", poll: 100 * time.Millisecond, lag: 400 * time.Millisecond,
			receipts: ms(0, 5, 10, 20, 40, 80, 100, 200, 300, 400), nonces: ms(100, 200, 300)},
		{name: "block at 400ms, poll 250ms", poll: 250 * time.Millisecond, lag: 400 * time.Millisecond,
			receipts: ms(0, 5, 10, 20, 40, 80, 160, 250, 500), nonces: ms(250)},
		{name: "block at 1.2s, poll 1s", poll: time.Second, lag: 1200 * time.Millisecond,
			receipts: ms(0, 5, 10, 20, 40, 80, 160, 320, 640, 1000, 2000), nonces: ms(1000)},
		{name: "poll below the first recheck", poll: 4 * time.Millisecond, lag: 10 * time.Millisecond,
			receipts: ms(0, 4, 8, 12), nonces: ms(4, 8)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				node := newClockNode(tc.lag)
				cfg := testConfig()
				cfg.PollInterval = tc.poll
				s, _ := newTestSender(t, node, 0, cfg)
				tx, err := s.Send(t.Context(), payee, nil)
				if err != nil {
					t.Fatal(err)
				}
				start := time.Now()
				r, err := s.Wait(t.Context(), tx)
				if err != nil {
					t.Fatal(err)
				}
				took := time.Since(start)
				if r.TxHash != tx.Hash() {
					t.Errorf("receipt of %s, want %s", r.TxHash, tx.Hash())
				}
				node.mu.Lock()
				defer node.mu.Unlock()
				if d := cmp.Diff(tc.receipts, node.receipts); d != "" {
					t.Errorf("receipt lookups (-want +got):\n%s", d)
				}
				if d := cmp.Diff(tc.nonces, node.nonces); d != "" {
					t.Errorf("nonce reads (-want +got):\n%s", d)
				}
				if want := tc.receipts[len(tc.receipts)-1]; took != want {
					t.Errorf("Wait took %s, want %s", took, want)
				}
			})
		})
	}
}

// TestWaitDefaultPollInterval: a Sender without a PollInterval polls every
// 250ms.
func TestWaitDefaultPollInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		node := newClockNode(time.Second)
		cfg := testConfig()
		cfg.PollInterval = 0
		s, _ := newTestSender(t, node, 0, cfg)
		tx, err := s.Send(t.Context(), payee, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Wait(t.Context(), tx); err != nil {
			t.Fatal(err)
		}
		node.mu.Lock()
		defer node.mu.Unlock()
		want := []time.Duration{250 * time.Millisecond, 500 * time.Millisecond, 750 * time.Millisecond}
		if d := cmp.Diff(want, node.nonces); d != "" {
			t.Errorf("nonce reads (-want +got):\n%s", d)
		}
	})
}
