package chain

import (
	"bytes"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/params"

	"github.com/llm4agents/llm4agents/internal/testchain"
)

// rpcCounter counts the calls of the methods it wraps, in front of anvil.
type rpcCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *rpcCounter) count(method string, answer fakeMethod) fakeMethod {
	return func(f *fakeNode, params []json.RawMessage) (any, error) {
		c.mu.Lock()
		c.n[method]++
		c.mu.Unlock()
		if answer != nil {
			return answer(f, params)
		}
		return f.forward(method, params)
	}
}

func (c *rpcCounter) get(method string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[method]
}

// TestSendGasLimit: a call that passes when run once at GasLimit goes out
// under that limit plus the margin, without a gas estimate; one that needs more gas is
// estimated and goes out under its estimate; one that reverts is estimated
// too and fails with the estimate's error, nothing broadcast; and when the
// node does not answer the first run, nothing else is asked of it.
func TestSendGasLimit(t *testing.T) {
	a := testchain.StartAnvil(t)
	ctx := testContext(t, 30*time.Second)
	// A contract whose every call reverts: PUSH1 0 PUSH1 0 REVERT.
	reverter := common.HexToAddress("0x00000000000000000000000000000000000000ee")
	if err := a.RPC.CallContext(ctx, nil, "anvil_setCode", reverter, hexutil.Bytes{0x60, 0x00, 0x60, 0x00, 0xfd}); err != nil {
		t.Fatal(err)
	}
	// 64 non-zero bytes of calldata to an account without code: a transfer's
	// 21,000 gas plus the calldata's floor price (EIP-7623).
	calldata := bytes.Repeat([]byte{0xab}, 64)
	const used = params.TxGas + 64*params.TxTokenPerNonZeroByte*params.TxCostFloorPerToken

	tests := []struct {
		name      string
		key       int // dev key of the sender, one per case so nonces do not meet
		gasLimit  uint64
		to        common.Address
		data      []byte
		hangCall  bool
		wantGas   uint64 // 0: the call fails
		wantErr   string
		estimates int
	}{
		{name: "fits the limit", key: 1, to: payee, data: calldata, wantGas: defaultGasLimit * (100 + defaultGasMarginPercent) / 100},
		{name: "needs more than the limit", key: 2, gasLimit: params.TxGas, to: payee, data: calldata,
			wantGas: used * (100 + defaultGasMarginPercent) / 100, estimates: 1},
		{name: "reverts", key: 3, to: reverter, wantErr: "send tx: estimate gas: execution reverted", estimates: 1},
		{name: "node does not answer", key: 4, to: payee, hangCall: true, wantErr: "send tx: simulate call: "},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			counter := &rpcCounter{n: map[string]int{}}
			var call fakeMethod
			if tc.hangCall {
				call = func(*fakeNode, []json.RawMessage) (any, error) { return nil, errHang }
			}
			node := newProxyNode(t, a, map[string]fakeMethod{
				"eth_call":               counter.count("eth_call", call),
				"eth_estimateGas":        counter.count("eth_estimateGas", nil),
				"eth_sendRawTransaction": counter.count("eth_sendRawTransaction", nil),
			})
			cfg := testConfig()
			cfg.GasLimit = tc.gasLimit
			cfg.RPCTimeout = 500 * time.Millisecond
			s, _ := newTestSender(t, node.dial(t), tc.key, cfg)

			tx, err := s.Send(ctx, tc.to, tc.data)
			if got := counter.get("eth_estimateGas"); got != tc.estimates {
				t.Errorf("eth_estimateGas called %d times, want %d", got, tc.estimates)
			}
			if got := counter.get("eth_call"); got != 1 {
				t.Errorf("eth_call called %d times, want 1", got)
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Send = %v, %v; want an error with %q", tx, err, tc.wantErr)
				}
				if n := counter.get("eth_sendRawTransaction"); n != 0 {
					t.Errorf("%d transactions broadcast, want none", n)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tx.Gas() != tc.wantGas {
				t.Errorf("gas limit %d, want %d", tx.Gas(), tc.wantGas)
			}
			r := waitAll(t, s, nil, []*types.Transaction{tx})[0]
			if r.GasUsed != used {
				t.Errorf("gas used %d, want %d", r.GasUsed, used)
			}
		})
	}
}
