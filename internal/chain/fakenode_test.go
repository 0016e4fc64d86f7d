package chain

import (
	"context"
	"encoding/json"
	"errors"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/ethclient"
	"github.com/ethereum/go-ethereum/params"
)

// fakeNode is a JSON-RPC server for faults a real node will not produce on
// demand: garbage, hangs, absurd values and refusals. It answers like a healthy
// idle node unless a test overrides a method.
type fakeNode struct {
	*httptest.Server

	mu      sync.Mutex
	methods map[string]fakeMethod
	sent    []*types.Transaction // decoded eth_sendRawTransaction arguments
}

// fakeMethod answers one JSON-RPC method. Returning a rawReply writes that body
// as is; returning hang blocks until the client gives up; any other error
// becomes a JSON-RPC error object.
type fakeMethod func(f *fakeNode, params []json.RawMessage) (any, error)

type rawReply string

func (r rawReply) Error() string { return string(r) }

var errHang = errors.New("hang")

func newFakeNode(tb testing.TB, overrides map[string]fakeMethod) *fakeNode {
	tb.Helper()
	f := &fakeNode{methods: map[string]fakeMethod{
		"eth_chainId":               constant("0x539"),
		"eth_getTransactionCount":   constant("0x0"),
		"eth_maxPriorityFeePerGas":  constant(hexutil.EncodeBig(big.NewInt(params.GWei))),
		"eth_getBlockByNumber":      constant(fakeHeader(big.NewInt(params.GWei))),
		"eth_estimateGas":           constant("0x5208"),
		"eth_getTransactionReceipt": constant(nil),
		"eth_getTransactionByHash":  constant(nil),
		"eth_getBalance":            constant("0x1"),
	}}
	f.methods["eth_sendRawTransaction"] = (*fakeNode).sendRaw
	for name, m := range overrides {
		f.methods[name] = m
	}
	f.Server = httptest.NewServer(http.HandlerFunc(f.serve))
	tb.Cleanup(f.Close)
	return f
}

func constant(v any) fakeMethod {
	return func(*fakeNode, []json.RawMessage) (any, error) { return v, nil }
}

func fail(msg string) fakeMethod {
	return func(*fakeNode, []json.RawMessage) (any, error) { return nil, errors.New(msg) }
}

func (f *fakeNode) serve(w http.ResponseWriter, r *http.Request) {
	var req struct {
		ID     json.RawMessage   `json:"id"`
		Method string            `json:"method"`
		Params []json.RawMessage `json:"params"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	m := f.methods[req.Method]
	f.mu.Unlock()
	if m == nil {
		m = fail("method not found: " + req.Method)
	}
	result, err := m(f, req.Params)
	var raw rawReply
	switch {
	case errors.As(err, &raw):
		_, _ = w.Write([]byte(raw))
		return
	case errors.Is(err, errHang):
		<-r.Context().Done()
		return
	}
	resp := map[string]any{"jsonrpc": "2.0", "id": req.ID}
	if err != nil {
		resp["error"] = map[string]any{"code": -32000, "message": err.Error()}
	} else {
		resp["result"] = result
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(resp)
}

// sendRaw accepts a raw transaction like a node would, and records it.
func (f *fakeNode) sendRaw(params []json.RawMessage) (any, error) {
	tx, err := decodeRawTx(params)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.sent = append(f.sent, tx)
	f.mu.Unlock()
	return tx.Hash(), nil
}

func decodeRawTx(params []json.RawMessage) (*types.Transaction, error) {
	var raw hexutil.Bytes
	if len(params) != 1 || json.Unmarshal(params[0], &raw) != nil {
		return nil, errors.New("invalid params")
	}
	tx := new(types.Transaction)
	if err := tx.UnmarshalBinary(raw); err != nil {
		return nil, err
	}
	return tx, nil
}

func (f *fakeNode) sentNonces() []uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	var ns []uint64
	for _, tx := range f.sent {
		ns = append(ns, tx.Nonce())
	}
	return ns
}

// fakeHeader is a latest block header with the given base fee (nil: a
// pre-London block).
func fakeHeader(baseFee *big.Int) *types.Header {
	return &types.Header{Number: big.NewInt(1), Difficulty: new(big.Int), GasLimit: 30_000_000, BaseFee: baseFee}
}

func TestSendHostileNode(t *testing.T) {
	tests := []struct {
		name    string
		methods map[string]fakeMethod
		wantErr string // in Send's error
		isCap   bool   // errors.Is(err, ErrFeeAboveCap)
	}{
		{
			name:    "garbage body",
			methods: map[string]fakeMethod{"eth_estimateGas": func(*fakeNode, []json.RawMessage) (any, error) { return nil, rawReply("<html>502</html>") }},
			wantErr: "send tx: ",
		},
		{
			name:    "hangs",
			methods: map[string]fakeMethod{"eth_estimateGas": func(*fakeNode, []json.RawMessage) (any, error) { return nil, errHang }},
			wantErr: "context deadline exceeded",
		},
		{
			name:    "call reverts",
			methods: map[string]fakeMethod{"eth_estimateGas": fail("execution reverted: FiatTokenV2: authorization is used or canceled")},
			wantErr: "send tx: estimate gas: execution reverted: FiatTokenV2: authorization is used or canceled",
		},
		{
			name:    "zero gas estimate",
			methods: map[string]fakeMethod{"eth_estimateGas": constant("0x0")},
			wantErr: "send tx: estimate gas: implausible estimate 0",
		},
		{
			name:    "absurd gas estimate",
			methods: map[string]fakeMethod{"eth_estimateGas": constant("0xffffffffffffffff")},
			wantErr: "implausible estimate",
		},
		{
			name:    "pre-London block",
			methods: map[string]fakeMethod{"eth_getBlockByNumber": constant(fakeHeader(nil))},
			wantErr: "no base fee",
		},
		{
			name:    "no latest block",
			methods: map[string]fakeMethod{"eth_getBlockByNumber": constant(nil)},
			wantErr: "send tx: latest header: not found",
		},
		{
			name:    "wrong type",
			methods: map[string]fakeMethod{"eth_maxPriorityFeePerGas": constant(map[string]int{"x": 1})},
			wantErr: "send tx: suggest tip: ",
		},
		{
			name:    "absurd tip",
			methods: map[string]fakeMethod{"eth_maxPriorityFeePerGas": constant(hexutil.EncodeBig(new(big.Int).Lsh(big.NewInt(1), 200)))},
			wantErr: "send tx: fee above max fee per gas",
			isCap:   true,
		},
		{
			name:    "pending nonce garbage",
			methods: map[string]fakeMethod{"eth_getTransactionCount": constant("zz")},
			wantErr: "send tx: pending nonce: ",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			node := newFakeNode(t, tc.methods)
			c, err := ethclient.Dial(node.URL)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Close)
			cfg := testConfig()
			cfg.RPCTimeout = time.Second
			s, _ := newTestSender(t, c, 0, cfg)

			start := time.Now()
			tx, err := s.Send(testContext(t, 10*time.Second), payee, nil)
			if tx != nil || err == nil || !strings.HasPrefix(err.Error(), "send tx: ") || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("Send = %v, %v; want a send tx error containing %q", tx, err, tc.wantErr)
			}
			if errors.Is(err, ErrFeeAboveCap) != tc.isCap {
				t.Errorf("errors.Is(%v, ErrFeeAboveCap) = %t, want %t", err, !tc.isCap, tc.isCap)
			}
			if elapsed := time.Since(start); elapsed > 3*time.Second {
				t.Errorf("Send took %s", elapsed)
			}
			if n := node.sentNonces(); len(n) != 0 {
				t.Errorf("broadcast nonces %v, want none", n)
			}
		})
	}
}

func TestSendRefusedKeepsNonce(t *testing.T) {
	var refused sync.Once
	node := newFakeNode(t, map[string]fakeMethod{
		"eth_sendRawTransaction": func(f *fakeNode, params []json.RawMessage) (any, error) {
			var err error
			refused.Do(func() { err = errors.New("insufficient funds for gas * price + value") })
			if err != nil {
				return nil, err
			}
			return f.sendRaw(params)
		},
	})
	c, err := ethclient.Dial(node.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	s, _ := newTestSender(t, c, 0, testConfig())
	ctx := testContext(t, 10*time.Second)

	if _, err := s.Send(ctx, payee, nil); err == nil || !strings.Contains(err.Error(), "insufficient funds") {
		t.Fatalf("Send = %v, want the node's refusal", err)
	}
	tx, err := s.Send(ctx, payee, nil)
	if err != nil {
		t.Fatal(err)
	}
	if tx.Nonce() != 0 {
		t.Errorf("nonce after a refused broadcast = %d, want 0 again", tx.Nonce())
	}
}

func TestSendResyncsOnNonceTooLow(t *testing.T) {
	var mu sync.Mutex
	pending := uint64(0)
	node := newFakeNode(t, map[string]fakeMethod{
		"eth_getTransactionCount": func(*fakeNode, []json.RawMessage) (any, error) {
			mu.Lock()
			defer mu.Unlock()
			return hexutil.Uint64(pending), nil
		},
		"eth_sendRawTransaction": func(f *fakeNode, params []json.RawMessage) (any, error) {
			tx, err := decodeRawTx(params)
			if err != nil {
				return nil, err
			}
			mu.Lock()
			defer mu.Unlock()
			if tx.Nonce() < pending {
				return nil, errors.New("nonce too low: next nonce 5, tx nonce 0")
			}
			pending = tx.Nonce() + 1
			return f.sendRaw(params)
		},
	})
	c, err := ethclient.Dial(node.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	s, _ := newTestSender(t, c, 0, testConfig())
	ctx := testContext(t, 10*time.Second)

	if _, err := s.Send(ctx, payee, nil); err != nil { // nonce 0, synced
		t.Fatal(err)
	}
	mu.Lock()
	pending = 5 // another process used the key
	mu.Unlock()
	tx, err := s.Send(ctx, payee, nil)
	if err != nil {
		t.Fatal(err)
	}
	if tx.Nonce() != 5 {
		t.Errorf("nonce after resync = %d, want 5", tx.Nonce())
	}
}

func TestSendBroadcastUnknown(t *testing.T) {
	node := newFakeNode(t, map[string]fakeMethod{
		"eth_sendRawTransaction": func(*fakeNode, []json.RawMessage) (any, error) { return nil, errHang },
	})
	c, err := ethclient.Dial(node.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	cfg := testConfig()
	cfg.RPCTimeout = time.Second
	s, _ := newTestSender(t, c, 0, cfg)
	ctx := testContext(t, 10*time.Second)

	tx, err := s.Send(ctx, payee, nil)
	var perr *PendingError
	if tx == nil || !errors.As(err, &perr) || perr.Hash != tx.Hash() {
		t.Fatalf("Send = %v, %v; want the tx and a *PendingError naming it", tx, err)
	}
	// The nonce stays taken: the node may hold the transaction.
	tx2, err := s.Send(ctx, payee, nil)
	if tx2 == nil || tx2.Nonce() != tx.Nonce()+1 {
		t.Errorf("next Send = %v, %v; want nonce %d", tx2, err, tx.Nonce()+1)
	}
}

func TestWaitHostileReceipts(t *testing.T) {
	node := newFakeNode(t, map[string]fakeMethod{
		"eth_getTransactionReceipt": func(*fakeNode, []json.RawMessage) (any, error) { return nil, rawReply("{{{") },
	})
	c, err := ethclient.Dial(node.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	s, _ := newTestSender(t, c, 0, testConfig())
	tx := signTransfer(t, s.key, 0)

	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	_, err = s.Wait(ctx, tx)
	var perr *PendingError
	if !errors.As(err, &perr) || !strings.Contains(err.Error(), "last node error") {
		t.Errorf("Wait = %v, want a *PendingError with the node's error", err)
	}
}
