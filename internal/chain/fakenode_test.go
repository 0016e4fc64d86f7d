package chain

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"maps"
	"math/big"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/ethclient"
	"github.com/ethereum/go-ethereum/params"
	"github.com/ethereum/go-ethereum/rpc"
	"github.com/google/go-cmp/cmp"

	"github.com/llm4agents/llm4agents/internal/testchain"
)

// fakeNode is a JSON-RPC server for faults a real node will not produce on
// demand: garbage, hangs, absurd values and refusals. It answers like a healthy
// idle node unless a test overrides a method, or, in front of anvil (see
// newProxyNode), passes on every call a test does not override.
type fakeNode struct {
	*httptest.Server

	upstream *rpc.Client // nil: answer from methods only

	mu      sync.Mutex
	methods map[string]fakeMethod
	sent    []*types.Transaction // decoded eth_sendRawTransaction arguments
}

// fakeMethod answers one JSON-RPC method. Returning a rawReplyError writes that body
// as is; returning hang blocks until the client gives up; any other error
// becomes a JSON-RPC error object.
type fakeMethod func(f *fakeNode, params []json.RawMessage) (any, error)

type rawReplyError string

func (r rawReplyError) Error() string { return string(r) }

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
	maps.Copy(f.methods, overrides)
	f.Server = httptest.NewServer(http.HandlerFunc(f.serve))
	tb.Cleanup(f.Close)
	return f
}

// newProxyNode returns a fakeNode in front of a: the overrides answer their
// methods (and may call forward), anvil answers every other.
func newProxyNode(tb testing.TB, a *testchain.Anvil, overrides map[string]fakeMethod) *fakeNode {
	tb.Helper()
	f := &fakeNode{upstream: a.RPC, methods: overrides}
	f.Server = httptest.NewServer(http.HandlerFunc(f.serve))
	tb.Cleanup(f.Close)
	return f
}

// forward passes a call on to the upstream node and returns its answer.
func (f *fakeNode) forward(method string, params []json.RawMessage) (any, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	args := make([]any, len(params))
	for i, p := range params {
		args[i] = p
	}
	var result json.RawMessage
	if err := f.upstream.CallContext(ctx, &result, method, args...); err != nil {
		return nil, err
	}
	return result, nil
}

// dial returns a client of f, closed when the test ends.
func (f *fakeNode) dial(tb testing.TB) *ethclient.Client {
	tb.Helper()
	c, err := ethclient.Dial(f.URL)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(c.Close)
	return c
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
	switch {
	case m == nil && f.upstream != nil:
		m = func(f *fakeNode, params []json.RawMessage) (any, error) { return f.forward(req.Method, params) }
	case m == nil:
		m = fail("method not found: " + req.Method)
	}
	result, err := m(f, req.Params)
	var raw rawReplyError
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
			methods: map[string]fakeMethod{"eth_estimateGas": func(*fakeNode, []json.RawMessage) (any, error) { return nil, rawReplyError("<html>502</html>") }},
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
		"eth_getTransactionReceipt": func(*fakeNode, []json.RawMessage) (any, error) { return nil, rawReplyError("{{{") },
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

// awaitBroadcasts receives n broadcasts from arrived, failing the test if they
// do not come within a few seconds.
func awaitBroadcasts(tb testing.TB, arrived <-chan *types.Transaction, n int) []*types.Transaction {
	tb.Helper()
	timeout := time.After(5 * time.Second)
	var txs []*types.Transaction
	for len(txs) < n {
		select {
		case tx := <-arrived:
			txs = append(txs, tx)
		case <-timeout:
			tb.Fatalf("%d of %d broadcasts arrived", len(txs), n)
		}
	}
	return txs
}

// gate returns a channel that blocks handlers until open is called, and
// opens it when the test ends, before the node (registered earlier) closes.
func gate(tb testing.TB) (c chan struct{}, open func()) {
	c = make(chan struct{})
	var once sync.Once
	open = func() { once.Do(func() { close(c) }) }
	tb.Cleanup(open)
	return c, open
}

func nonces(txs []*types.Transaction) []uint64 {
	ns := make([]uint64, len(txs))
	for i, tx := range txs {
		ns[i] = tx.Nonce()
	}
	slices.Sort(ns)
	return ns
}

func seq(from, to uint64) []uint64 {
	var ns []uint64
	for n := from; n < to; n++ {
		ns = append(ns, n)
	}
	return ns
}

const refusal = "insufficient funds for gas * price + value"

func TestSendRefusedNonceReused(t *testing.T) {
	const (
		burst   = 32
		refused = 5 // the nonce the node refuses, once
		later   = 8 // Sends after the refusal, while the burst is still being broadcast
	)
	a := testchain.StartAnvil(t)
	arrived := make(chan *types.Transaction, 2*(burst+later))
	var refuseOnce sync.Once
	var refuseNow, release <-chan struct{}
	node := newProxyNode(t, a, map[string]fakeMethod{
		"eth_sendRawTransaction": func(f *fakeNode, params []json.RawMessage) (any, error) {
			tx, err := decodeRawTx(params)
			if err != nil {
				return nil, err
			}
			select {
			case arrived <- tx:
			default:
				// Nobody counts broadcasts past the test's first 2 x (burst +
				// later), and a handler must never block on it: rebroadcasts
				// under load would hold the node (and its Close) forever.
			}
			refuse := false
			if tx.Nonce() == refused {
				refuseOnce.Do(func() { refuse = true })
			}
			if refuse {
				<-refuseNow
				return nil, errors.New(refusal)
			}
			<-release
			return f.forward("eth_sendRawTransaction", params)
		},
	})
	refuseNow, refuse := gate(t)
	release, open := gate(t)
	s, _ := newTestSender(t, node.dial(t), 0, testConfig())
	ctx := testContext(t, 30*time.Second)

	type result struct {
		tx  *types.Transaction
		err error
	}
	results := make(chan result, burst+later)
	var wg sync.WaitGroup
	send := func(n int) {
		for range n {
			wg.Go(func() {
				tx, err := s.Send(ctx, payee, nil)
				results <- result{tx, err}
			})
		}
	}
	send(burst)
	awaitBroadcasts(t, arrived, burst)
	refuse()
	// Every other broadcast is held, so the refused Send returns first.
	if r := <-results; r.tx != nil || r.err == nil || !strings.Contains(r.err.Error(), refusal) {
		open()
		t.Fatalf("first Send to return = %v, %v; want the refusal", r.tx, r.err)
	}
	send(later)
	if diff := cmp.Diff(append([]uint64{refused}, seq(burst, burst+later-1)...), nonces(awaitBroadcasts(t, arrived, later))); diff != "" {
		t.Errorf("nonces sent after the refusal (-want +got):\n%s", diff)
	}
	open()
	wg.Wait()
	close(results)

	var txs []*types.Transaction
	for r := range results {
		if r.err != nil {
			t.Fatalf("Send: %v", r.err)
		}
		txs = append(txs, r.tx)
	}
	if diff := cmp.Diff(seq(0, burst+later-1), nonces(txs)); diff != "" {
		t.Fatalf("nonces of the sent transactions (-want +got):\n%s", diff)
	}
	waitAll(t, s, nil, txs)
	if n, err := a.Client.NonceAt(ctx, s.Address(), nil); err != nil || n != burst+later-1 {
		t.Errorf("account nonce = %d, %v; want %d", n, err, burst+later-1)
	}
}

func TestWaitFillsRefusedNonce(t *testing.T) {
	a := testchain.StartAnvil(t)
	oneAccepted := make(chan struct{})
	var refuseOnce, acceptOnce sync.Once
	var mu sync.Mutex
	var sent []*types.Transaction // what anvil accepted
	node := newProxyNode(t, a, map[string]fakeMethod{
		"eth_sendRawTransaction": func(f *fakeNode, params []json.RawMessage) (any, error) {
			tx, err := decodeRawTx(params)
			if err != nil {
				return nil, err
			}
			refuse := false
			if tx.Nonce() == 0 {
				refuseOnce.Do(func() { refuse = true })
			}
			if refuse {
				// Refuse nonce 0 once nonce 1 waits in the pool behind it.
				select {
				case <-oneAccepted:
				case <-time.After(5 * time.Second):
				}
				return nil, errors.New(refusal)
			}
			res, err := f.forward("eth_sendRawTransaction", params)
			if err == nil {
				mu.Lock()
				sent = append(sent, tx)
				mu.Unlock()
			}
			if tx.Nonce() == 1 {
				acceptOnce.Do(func() { close(oneAccepted) })
			}
			return res, err
		},
	})
	s, logs := newTestSender(t, node.dial(t), 0, testConfig())
	ctx := testContext(t, 30*time.Second)

	txs := make([]*types.Transaction, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i := range txs {
		wg.Go(func() { txs[i], errs[i] = s.Send(ctx, payee, nil) })
	}
	wg.Wait()
	if txs[0] == nil {
		txs, errs = []*types.Transaction{txs[1], txs[0]}, []error{errs[1], errs[0]}
	}
	if txs[0] == nil || errs[0] != nil || txs[0].Nonce() != 1 || txs[1] != nil || errs[1] == nil {
		t.Fatalf("Sends = %v, %v; want one with nonce 1 and one refused", txs, errs)
	}

	// No Send takes nonce 0 again: waiting for nonce 1 fills it.
	r := waitAll(t, s, nil, txs[:1])[0]
	if r.TxHash != txs[0].Hash() {
		t.Errorf("receipt for %s, want %s", r.TxHash, txs[0].Hash())
	}
	mu.Lock()
	i := slices.IndexFunc(sent, func(tx *types.Transaction) bool { return tx.Nonce() == 0 })
	mu.Unlock()
	if i < 0 {
		t.Fatal("no transaction with nonce 0 accepted")
	}
	filler := sent[i]
	if to := filler.To(); to == nil || *to != s.Address() || filler.Value().Sign() != 0 || filler.Gas() != params.TxGas || len(filler.Data()) != 0 {
		t.Errorf("gap filler to %v value %s gas %d data %x; want a 0-value transfer to %s with gas %d",
			to, filler.Value(), filler.Gas(), filler.Data(), s.Address(), params.TxGas)
	}
	if fr, err := a.Client.TransactionReceipt(ctx, filler.Hash()); err != nil || fr.Status != types.ReceiptStatusSuccessful {
		t.Errorf("receipt of the gap filler: %v, %v", fr, err)
	}
	if !strings.Contains(logs.String(), "filled nonce gap") {
		t.Error(`logs lack "filled nonce gap"`)
	}
	next, err := s.Send(ctx, payee, nil)
	if err != nil || next.Nonce() != 2 {
		t.Fatalf("next Send = %v, %v; want nonce 2", next, err)
	}
}

func TestSendConcurrentResync(t *testing.T) {
	const (
		burst   = 32
		foreign = 3 // the nonces another sender with the same key takes
	)
	a := testchain.StartAnvil(t)
	arrived := make(chan *types.Transaction, 2*burst)
	var mu sync.Mutex
	calls := make(map[uint64][]byte) // nonce -> the calls (first data byte) broadcast under it
	var low, high <-chan struct{}
	node := newProxyNode(t, a, map[string]fakeMethod{
		"eth_sendRawTransaction": func(f *fakeNode, params []json.RawMessage) (any, error) {
			tx, err := decodeRawTx(params)
			if err != nil {
				return nil, err
			}
			mu.Lock()
			if call := tx.Data()[0]; !bytes.Contains(calls[tx.Nonce()], []byte{call}) {
				calls[tx.Nonce()] = append(calls[tx.Nonce()], call)
			}
			mu.Unlock()
			select {
			case arrived <- tx:
			default: // past what the test counts: never block the node (see TestSendRefusedNonceReused)
			}
			if tx.Nonce() < foreign {
				<-low
			} else {
				<-high
			}
			return f.forward("eth_sendRawTransaction", params)
		},
	})
	low, openLow := gate(t)
	high, openHigh := gate(t)
	s, _ := newTestSender(t, node.dial(t), 0, testConfig())
	ctx := testContext(t, 30*time.Second)

	txs := make([]*types.Transaction, burst)
	errs := make([]error, burst)
	var wg sync.WaitGroup
	for i := range burst {
		wg.Go(func() { txs[i], errs[i] = s.Send(ctx, payee, []byte{byte(i)}) })
	}
	awaitBroadcasts(t, arrived, burst)
	// Another sender with the key takes the lowest nonces while every broadcast
	// is in flight.
	for n := range uint64(foreign) {
		if err := a.Client.SendTransaction(ctx, signTransfer(t, testchain.DevKey(0), n)); err != nil {
			t.Fatal(err)
		}
	}
	openLow()
	// The node refuses nonces 0 to 2 as too low. Their Sends resync while the
	// node's pending nonce is 3 and the rest of the burst is still in flight,
	// and must not take those nonces.
	retries := awaitBroadcasts(t, arrived, foreign)
	openHigh()
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(seq(burst, burst+foreign), nonces(retries)); diff != "" {
		t.Errorf("nonces of the retries (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(seq(foreign, burst+foreign), nonces(txs)); diff != "" {
		t.Errorf("nonces of the sent transactions (-want +got):\n%s", diff)
	}
	mu.Lock()
	for n, cs := range calls {
		if len(cs) != 1 {
			t.Errorf("nonce %d broadcast for calls %v, want one", n, cs)
		}
	}
	mu.Unlock()
	// Anvil's automine mines a block per transaction it receives; when 35
	// arrive at once out of nonce order, one promoted from its queue can be
	// left in the pool until the next block (about 1 run in 40). Every nonce
	// was broadcast once (checked above): one more block mines what is ready.
	if err := a.Mine(ctx, 1); err != nil {
		t.Fatal(err)
	}
	waitAll(t, s, nil, txs)
	if n, err := a.Client.NonceAt(ctx, s.Address(), nil); err != nil || n != burst+foreign {
		t.Errorf("account nonce = %d, %v; want %d", n, err, burst+foreign)
	}
}

// TestWaitUnshelvesHeldTransaction is anvil's automine holding the account's
// next transaction without mining it or counting it in the pending nonce (a
// transaction that arrived while the block with the nonce below was being
// mined): the proxy keeps the bytes it shelves from anvil and calls them
// already known. Only a new version under the nonce gets such a transaction
// looked at again; one the node counts pending is only waiting for a block.
func TestWaitUnshelvesHeldTransaction(t *testing.T) {
	tests := []struct {
		name       string
		shelveAll  bool // every version, not only the first: the node's pending nonce lags its pool
		counted    bool // the node counts the shelved transaction in the pending nonce
		wantMined  bool
		wantHashes int // versions broadcast under the nonce
	}{
		{name: "held and not counted", wantMined: true, wantHashes: 2},
		{name: "counted pending", counted: true, wantHashes: 1},
		{name: "every version held", shelveAll: true, wantHashes: 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := testchain.StartAnvil(t)
			var mu sync.Mutex
			shelved := map[common.Hash]*types.Transaction{}
			var hashes []common.Hash // distinct versions broadcast, in order
			node := newProxyNode(t, a, map[string]fakeMethod{
				"eth_sendRawTransaction": func(f *fakeNode, params []json.RawMessage) (any, error) {
					tx, err := decodeRawTx(params)
					if err != nil {
						return nil, err
					}
					mu.Lock()
					defer mu.Unlock()
					if shelved[tx.Hash()] != nil {
						return nil, errors.New("already known")
					}
					hashes = append(hashes, tx.Hash())
					if len(hashes) == 1 || tc.shelveAll {
						shelved[tx.Hash()] = tx
						return tx.Hash(), nil
					}
					return f.forward("eth_sendRawTransaction", params)
				},
				"eth_getTransactionByHash": func(f *fakeNode, params []json.RawMessage) (any, error) {
					var h common.Hash
					if len(params) != 1 || json.Unmarshal(params[0], &h) != nil {
						return nil, errors.New("invalid params")
					}
					mu.Lock()
					tx := shelved[h]
					mu.Unlock()
					if tx == nil {
						return f.forward("eth_getTransactionByHash", params)
					}
					return tx, nil // no block: pending
				},
				"eth_getTransactionCount": func(f *fakeNode, params []json.RawMessage) (any, error) {
					if tc.counted && len(params) == 2 && string(params[1]) == `"pending"` {
						mu.Lock()
						defer mu.Unlock()
						return hexutil.Uint64(len(shelved)), nil
					}
					return f.forward("eth_getTransactionCount", params)
				},
			})
			s, logs := newTestSender(t, node.dial(t), 0, testConfig()) // nudges after 100 ms, replaces after 30 s
			ctx := testContext(t, 30*time.Second)

			tx, err := s.Send(ctx, payee, nil)
			if err != nil {
				t.Fatal(err)
			}
			wait, cancel := context.WithTimeout(ctx, 3*time.Second)
			defer cancel()
			r, err := s.Wait(wait, tx)
			mu.Lock()
			if len(hashes) != tc.wantHashes {
				t.Errorf("%d versions broadcast under nonce %d, want %d", len(hashes), tx.Nonce(), tc.wantHashes)
			}
			last := hashes[len(hashes)-1]
			mu.Unlock()
			if !tc.wantMined {
				var perr *PendingError
				if !errors.As(err, &perr) || perr.Hash != last {
					t.Fatalf("Wait = %v, %v; want pending on %s", r, err, last)
				}
				return
			}
			if err != nil {
				t.Fatalf("Wait: %v", err)
			}
			if r.TxHash != last || r.TxHash == tx.Hash() {
				t.Errorf("mined %s, want the replacement %s of %s", r.TxHash, last, tx.Hash())
			}
			if !strings.Contains(logs.String(), "without counting it pending") {
				t.Errorf("logs lack the replacement's reason:\n%s", logs)
			}
		})
	}
}
