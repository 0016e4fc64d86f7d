package chain

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/ethereum/go-ethereum/ethclient"
	"github.com/ethereum/go-ethereum/ethclient/simulated"
	"github.com/ethereum/go-ethereum/params"
	"github.com/google/go-cmp/cmp"

	"github.com/llm4agents/llm4agents/internal/testchain"
)

var (
	_ Backend = (*ethclient.Client)(nil)
	_ Backend = (simulated.Client)(nil)
)

// payee receives the test transfers; it is not the sender's account.
var payee = testchain.DevAddress(9)

// testConfig polls fast and never replaces within a test unless a test says so.
func testConfig() SenderConfig {
	return SenderConfig{
		MaxFeePerGas: big.NewInt(100 * params.GWei),
		PollInterval: 20 * time.Millisecond,
		RPCTimeout:   5 * time.Second,
	}
}

// newTestSender returns a Sender for dev key i and the buffer its logs go to
// (besides the test's output). Read the buffer only once no Sender call runs.
func newTestSender(tb testing.TB, backend Backend, i int, cfg SenderConfig) (*Sender, *bytes.Buffer) {
	tb.Helper()
	logs := new(bytes.Buffer)
	h := slog.NewTextHandler(io.MultiWriter(logs, tb.Output()), &slog.HandlerOptions{Level: slog.LevelDebug})
	s, err := NewSender(backend, testchain.DevKey(i), big.NewInt(1337), cfg, slog.New(h))
	if err != nil {
		tb.Fatal(err)
	}
	return s, logs
}

func testContext(tb testing.TB, d time.Duration) context.Context {
	tb.Helper()
	ctx, cancel := context.WithTimeout(tb.Context(), d)
	tb.Cleanup(cancel)
	return ctx
}

// waitAll waits for txs in parallel, mining a block every 50ms meanwhile when
// a is not nil, and returns the receipts in the order of txs.
func waitAll(tb testing.TB, s *Sender, a *testchain.Anvil, txs []*types.Transaction) []*types.Receipt {
	tb.Helper()
	ctx := testContext(tb, 30*time.Second)
	receipts := make([]*types.Receipt, len(txs))
	errs := make([]error, len(txs))
	var wg sync.WaitGroup
	for i, tx := range txs {
		wg.Go(func() { receipts[i], errs[i] = s.Wait(ctx, tx) })
	}
	if a != nil {
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
	mine:
		for {
			select {
			case <-done:
				break mine
			case <-tick.C:
				if err := a.Mine(ctx, 1); err != nil {
					tb.Errorf("mine: %v", err)
				}
			}
		}
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			tb.Fatalf("wait for tx %d (nonce %d): %v", i, txs[i].Nonce(), err)
		}
		if receipts[i].Status != types.ReceiptStatusSuccessful {
			tb.Fatalf("tx %d (nonce %d) reverted", i, txs[i].Nonce())
		}
	}
	return receipts
}

// minedNonce returns the nonce of the transaction a receipt is for.
func minedNonce(tb testing.TB, c *ethclient.Client, r *types.Receipt) uint64 {
	tb.Helper()
	tx, pending, err := c.TransactionByHash(testContext(tb, 10*time.Second), r.TxHash)
	if err != nil || pending {
		tb.Fatalf("mined tx %s: pending %t, err %v", r.TxHash, pending, err)
	}
	return tx.Nonce()
}

func TestSendConcurrent(t *testing.T) {
	// With mining off, the broadcasts reach the pool out of order and wait for
	// each other; with automine, anvil mines each as its predecessors arrive.
	for _, mining := range []bool{true, false} {
		t.Run(fmt.Sprintf("automine %t", mining), func(t *testing.T) {
			var opts []testchain.AnvilOption
			if !mining {
				opts = append(opts, testchain.WithNoMining())
			}
			a := testchain.StartAnvil(t, opts...)
			s, _ := newTestSender(t, a.Client, 0, testConfig())
			ctx := testContext(t, 60*time.Second)

			const n = 64
			txs := make([]*types.Transaction, n)
			errs := make([]error, n)
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() { txs[i], errs[i] = s.Send(ctx, payee, nil) })
			}
			wg.Wait()
			if err := errors.Join(errs...); err != nil {
				t.Fatal(err)
			}
			want := make([]uint64, n)
			for i := range want {
				want[i] = uint64(i)
			}
			if diff := cmp.Diff(want, nonces(txs)); diff != "" {
				t.Fatalf("nonces sent (-want +got):\n%s", diff)
			}

			var miner *testchain.Anvil
			if !mining {
				miner = a
			}
			receipts := waitAll(t, s, miner, txs)
			var got []uint64
			for i, r := range receipts {
				// A receipt may be for a replacement of the transaction sent:
				// with automine, anvil can hold a transaction that arrived
				// while the block below it was mined as not executable, and
				// Wait then replaces it (Sender.unshelve). It is for its nonce.
				n := minedNonce(t, a.Client, r)
				if n != txs[i].Nonce() {
					t.Errorf("receipt %d is for %s at nonce %d, want nonce %d", i, r.TxHash, n, txs[i].Nonce())
				}
				got = append(got, n)
			}
			slices.Sort(got)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("mined nonces (-want +got):\n%s", diff)
			}
			if nonce, err := a.Client.NonceAt(ctx, s.Address(), nil); err != nil || nonce != n {
				t.Errorf("account nonce = %d, %v; want %d", nonce, err, n)
			}
		})
	}
}

func TestWaitPendingThenMined(t *testing.T) {
	a := testchain.StartAnvil(t, testchain.WithNoMining())
	s, _ := newTestSender(t, a.Client, 0, testConfig())
	ctx := testContext(t, 30*time.Second)

	tx, err := s.Send(ctx, payee, nil)
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = s.Wait(short, tx)
	if elapsed := time.Since(start); elapsed > 2*time.Second {
		t.Errorf("Wait took %s with a 300ms deadline", elapsed)
	}
	var perr *PendingError
	if !errors.As(err, &perr) || !errors.Is(err, ErrPending) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait = %v, want a *PendingError wrapping ErrPending and the deadline", err)
	}
	if diff := cmp.Diff(PendingError{Hash: tx.Hash(), Nonce: 0}, *perr, cmp.FilterPath(
		func(p cmp.Path) bool { return p.Last().String() == ".Err" }, cmp.Ignore())); diff != "" {
		t.Errorf("PendingError (-want +got):\n%s", diff)
	}

	if err := a.Mine(ctx, 1); err != nil {
		t.Fatal(err)
	}
	r, err := s.Wait(ctx, tx)
	if err != nil {
		t.Fatal(err)
	}
	if r.TxHash != tx.Hash() || r.Status != types.ReceiptStatusSuccessful {
		t.Errorf("receipt for %s status %d, want %s status 1", r.TxHash, r.Status, tx.Hash())
	}
}

func TestWaitRecoversDropped(t *testing.T) {
	tests := []struct {
		name    string
		baseFee int64 // if not 0, the base fee after the drop: above the tx's max fee
		wantLog string
	}{
		{name: "re-broadcast", wantLog: "re-broadcasting"},
		{name: "base fee rose", baseFee: 10 * params.GWei, wantLog: "replaced stuck transaction"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := testchain.StartAnvil(t, testchain.WithNoMining())
			cfg := testConfig()
			cfg.ReplaceAfter = 100 * time.Millisecond
			s, logs := newTestSender(t, a.Client, 0, cfg)
			ctx := testContext(t, 30*time.Second)

			tx, err := s.Send(ctx, payee, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := a.DropTransaction(ctx, tx.Hash()); err != nil {
				t.Fatal(err)
			}
			if tc.baseFee != 0 {
				if err := a.SetNextBaseFee(ctx, big.NewInt(tc.baseFee)); err != nil {
					t.Fatal(err)
				}
				if err := a.Mine(ctx, 1); err != nil {
					t.Fatal(err)
				}
			}
			r := waitAll(t, s, a, []*types.Transaction{tx})[0]
			if got := minedNonce(t, a.Client, r); got != tx.Nonce() {
				t.Errorf("mined nonce %d, want %d", got, tx.Nonce())
			}
			if !strings.Contains(logs.String(), tc.wantLog) {
				t.Errorf("logs lack %q", tc.wantLog)
			}

			// The nonce was not skipped: the next transaction takes the one after it.
			if err := a.SetAutomine(ctx, true); err != nil {
				t.Fatal(err)
			}
			next, err := s.Send(ctx, payee, nil)
			if err != nil {
				t.Fatal(err)
			}
			if next.Nonce() != tx.Nonce()+1 {
				t.Errorf("next nonce %d, want %d", next.Nonce(), tx.Nonce()+1)
			}
			waitAll(t, s, nil, []*types.Transaction{next})
		})
	}
}

func TestWaitReplacesStuck(t *testing.T) {
	a := testchain.StartAnvil(t, testchain.WithNoMining())
	ctx := testContext(t, 30*time.Second)

	// Let the cap allow two bumps of 12.5% (x1.266) but not a third (x1.424).
	tip, err := a.Client.SuggestGasTipCap(ctx)
	if err != nil {
		t.Fatal(err)
	}
	head, err := a.Client.HeaderByNumber(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	firstFeeCap := new(big.Int).Add(new(big.Int).Lsh(head.BaseFee, 1), tip)
	cfg := testConfig()
	cfg.ReplaceAfter = 50 * time.Millisecond
	cfg.MaxFeePerGas = new(big.Int).Div(new(big.Int).Mul(firstFeeCap, big.NewInt(13)), big.NewInt(10))
	s, logs := newTestSender(t, a.Client, 0, cfg)

	first, err := s.Send(ctx, payee, nil)
	if err != nil {
		t.Fatal(err)
	}
	if first.GasFeeCap().Cmp(firstFeeCap) != 0 {
		t.Fatalf("first max fee %s, want 2 * base fee + tip = %s", first.GasFeeCap(), firstFeeCap)
	}
	// Wait in short rounds, as a caller reporting settlement_pending would,
	// until the Sender has bumped the fees up to the cap.
	var perr *PendingError
	for i := 0; !strings.Contains(logs.String(), "stuck transaction not replaced"); i++ {
		if i == 50 {
			t.Fatalf("fees not bumped up to the cap after %d rounds", i)
		}
		short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		_, err = s.Wait(short, first)
		cancel()
		if !errors.As(err, &perr) {
			t.Fatalf("Wait = %v, want a *PendingError", err)
		}
	}
	if perr.Hash == first.Hash() {
		t.Errorf("PendingError names the first tx, want its replacement")
	}

	if err := a.Mine(ctx, 1); err != nil {
		t.Fatal(err)
	}
	r, err := s.Wait(ctx, first)
	if err != nil {
		t.Fatal(err)
	}
	if r.TxHash != perr.Hash {
		t.Errorf("mined %s, want the latest replacement %s", r.TxHash, perr.Hash)
	}
	mined, _, err := a.Client.TransactionByHash(ctx, r.TxHash)
	if err != nil {
		t.Fatal(err)
	}
	if mined.Nonce() != first.Nonce() || mined.GasTipCap().Cmp(first.GasTipCap()) <= 0 ||
		mined.GasFeeCap().Cmp(first.GasFeeCap()) <= 0 || mined.GasFeeCap().Cmp(cfg.MaxFeePerGas) > 0 {
		t.Errorf("mined nonce %d tip %s max fee %s; want nonce %d, tip > %s, %s < max fee <= %s",
			mined.Nonce(), mined.GasTipCap(), mined.GasFeeCap(),
			first.Nonce(), first.GasTipCap(), first.GasFeeCap(), cfg.MaxFeePerGas)
	}
	block, err := a.Client.BlockByNumber(ctx, r.BlockNumber)
	if err != nil {
		t.Fatal(err)
	}
	firstPrice := min(first.GasFeeCap().Uint64(), block.BaseFee().Uint64()+first.GasTipCap().Uint64())
	if r.EffectiveGasPrice.Uint64() <= firstPrice {
		t.Errorf("effective gas price %s, want more than the first tx's %d", r.EffectiveGasPrice, firstPrice)
	}
	if n := len(block.Transactions()); n != 1 {
		t.Errorf("block has %d transactions, want 1", n)
	}
	if _, err := a.Client.TransactionReceipt(ctx, first.Hash()); !errors.Is(err, ethereum.NotFound) {
		t.Errorf("receipt of the replaced tx: err = %v, want not found", err)
	}
	if nonce, err := a.Client.NonceAt(ctx, s.Address(), nil); err != nil || nonce != first.Nonce()+1 {
		t.Errorf("account nonce = %d, %v; want %d", nonce, err, first.Nonce()+1)
	}

	got := logs.String()
	for _, want := range []string{"replaced stuck transaction", "stuck transaction not replaced", "component=chain"} {
		if !strings.Contains(got, want) {
			t.Errorf("logs lack %q", want)
		}
	}
	raw, err := mined.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	key := hexutil.Encode(crypto.FromECDSA(testchain.DevKey(0)))[2:]
	for _, secret := range []string{key, hexutil.Encode(raw)[2:]} {
		if strings.Contains(strings.ToLower(got), secret) {
			t.Errorf("logs contain a key or a raw transaction")
		}
	}
}

func TestNonceGapRefilled(t *testing.T) {
	a := testchain.StartAnvil(t, testchain.WithNoMining())
	cfg := testConfig()
	cfg.ReplaceAfter = 100 * time.Millisecond
	s, _ := newTestSender(t, a.Client, 0, cfg)
	ctx := testContext(t, 30*time.Second)

	var txs []*types.Transaction
	for range 3 {
		tx, err := s.Send(ctx, payee, nil)
		if err != nil {
			t.Fatal(err)
		}
		txs = append(txs, tx)
	}
	// Anvil drops the transactions that depend on the middle one as well.
	if err := a.DropTransaction(ctx, txs[1].Hash()); err != nil {
		t.Fatal(err)
	}
	if err := a.Mine(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if nonce, err := a.Client.NonceAt(ctx, s.Address(), nil); err != nil || nonce != 1 {
		t.Fatalf("nonce after the gap = %d, %v; want 1", nonce, err)
	}

	receipts := waitAll(t, s, a, txs)
	for i, r := range receipts {
		if got := minedNonce(t, a.Client, r); got != uint64(i) {
			t.Errorf("tx %d mined with nonce %d", i, got)
		}
	}
	if nonce, err := a.Client.NonceAt(ctx, s.Address(), nil); err != nil || nonce != 3 {
		t.Errorf("account nonce = %d, %v; want 3", nonce, err)
	}
}

func TestWaitFillsOrphanedNonce(t *testing.T) {
	a := testchain.StartAnvil(t, testchain.WithNoMining())
	cfg := testConfig()
	cfg.ReplaceAfter = 100 * time.Millisecond
	s, logs := newTestSender(t, a.Client, 0, cfg)
	ctx := testContext(t, 30*time.Second)

	// Another sender with the key holds nonce 0 in the pool, so the Sender
	// starts at 1; then the node drops the other's transaction (and with it
	// the Sender's, which depends on it).
	other := signTransfer(t, testchain.DevKey(0), 0)
	if err := a.Client.SendTransaction(ctx, other); err != nil {
		t.Fatal(err)
	}
	tx, err := s.Send(ctx, payee, nil)
	if err != nil {
		t.Fatal(err)
	}
	if tx.Nonce() != 1 {
		t.Fatalf("nonce %d, want 1", tx.Nonce())
	}
	if err := a.DropTransaction(ctx, other.Hash()); err != nil {
		t.Fatal(err)
	}

	waitAll(t, s, a, []*types.Transaction{tx})
	block, err := a.Client.BlockByNumber(ctx, big.NewInt(1))
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(block.Transactions(), func(tx *types.Transaction) bool { return tx.Nonce() == 0 })
	if i < 0 {
		t.Fatal("nonce 0 not in the first block")
	}
	if filler := block.Transactions()[i]; filler.Hash() == other.Hash() || *filler.To() != s.Address() || filler.Value().Sign() != 0 {
		t.Errorf("nonce 0 mined as %s to %s value %s, want a 0-value transfer to %s", filler.Hash(), filler.To(), filler.Value(), s.Address())
	}
	if !strings.Contains(logs.String(), "filled nonce gap") {
		t.Error(`logs lack "filled nonce gap"`)
	}
}

func TestWaitNonceConsumed(t *testing.T) {
	a := testchain.StartAnvil(t, testchain.WithNoMining())
	s, _ := newTestSender(t, a.Client, 0, testConfig())
	ctx := testContext(t, 30*time.Second)

	tx, err := s.Send(ctx, payee, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Someone else with the same key replaces it in the pool.
	other, err := types.SignNewTx(testchain.DevKey(0), types.LatestSignerForChainID(a.ChainID), &types.DynamicFeeTx{
		ChainID:   a.ChainID,
		Nonce:     tx.Nonce(),
		GasTipCap: new(big.Int).Mul(tx.GasTipCap(), big.NewInt(2)),
		GasFeeCap: new(big.Int).Mul(tx.GasFeeCap(), big.NewInt(2)),
		Gas:       params.TxGas,
		To:        &payee,
		Value:     big.NewInt(1),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Client.SendTransaction(ctx, other); err != nil {
		t.Fatal(err)
	}
	if err := a.Mine(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Wait(ctx, tx); !errors.Is(err, ErrNonceConsumed) {
		t.Errorf("Wait = %v, want ErrNonceConsumed", err)
	}
}

func TestSendFeeCap(t *testing.T) {
	a := testchain.StartAnvil(t)
	ctx := testContext(t, 30*time.Second)
	add := func(xs ...*big.Int) *big.Int {
		sum := new(big.Int)
		for _, x := range xs {
			sum.Add(sum, x)
		}
		return sum
	}
	one, minusOne := big.NewInt(1), big.NewInt(-1)

	// Fees are functions of the base fee and the tip, read right before Send:
	// the base fee moves with every block the subtests mine.
	tests := []struct {
		name       string
		cap        func(base, tip *big.Int) *big.Int
		wantFeeCap func(base, tip *big.Int) *big.Int // nil: refused with ErrFeeAboveCap
	}{
		{
			name: "below base fee",
			cap:  func(base, _ *big.Int) *big.Int { return add(base, minusOne) },
		},
		{
			name: "below base fee plus tip",
			cap:  func(base, tip *big.Int) *big.Int { return add(base, tip, minusOne) },
		},
		{
			name:       "exactly base fee plus tip",
			cap:        func(base, tip *big.Int) *big.Int { return add(base, tip) },
			wantFeeCap: func(base, tip *big.Int) *big.Int { return add(base, tip) },
		},
		{
			name:       "below twice base fee plus tip",
			cap:        func(base, tip *big.Int) *big.Int { return add(base, base, tip, minusOne) },
			wantFeeCap: func(base, tip *big.Int) *big.Int { return add(base, base, tip, minusOne) },
		},
		{
			name:       "above twice base fee plus tip",
			cap:        func(base, tip *big.Int) *big.Int { return add(base, base, tip, one) },
			wantFeeCap: func(base, tip *big.Int) *big.Int { return add(base, base, tip) },
		},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tip, err := a.Client.SuggestGasTipCap(ctx)
			if err != nil {
				t.Fatal(err)
			}
			head, err := a.Client.HeaderByNumber(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			cfg := testConfig()
			cfg.MaxFeePerGas = tc.cap(head.BaseFee, tip)
			s, _ := newTestSender(t, a.Client, i, cfg)

			tx, err := s.Send(ctx, payee, nil)
			if tc.wantFeeCap == nil {
				if !errors.Is(err, ErrFeeAboveCap) || tx != nil {
					t.Fatalf("Send = %v, %v; want ErrFeeAboveCap", tx, err)
				}
				if !strings.HasPrefix(err.Error(), "send tx: ") {
					t.Errorf("error %q lacks the send tx prefix", err)
				}
				if n, err := a.Client.PendingNonceAt(ctx, s.Address()); err != nil || n != 0 {
					t.Errorf("pending nonce = %d, %v; want 0: nothing broadcast", n, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if want := tc.wantFeeCap(head.BaseFee, tip); tx.GasFeeCap().Cmp(want) != 0 {
				t.Errorf("max fee %s, want %s", tx.GasFeeCap(), want)
			}
			waitAll(t, s, nil, []*types.Transaction{tx})
		})
	}
}

func TestNodeDown(t *testing.T) {
	stopped := testchain.StartAnvil(t)
	if err := stopped.Close(); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		url  string
	}{
		{"stopped anvil", stopped.URL},
		{"closed port", closedPortURL(t)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ethclient.Dial(tc.url)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Close)
			cfg := testConfig()
			cfg.RPCTimeout = time.Second
			s, _ := newTestSender(t, c, 0, cfg)
			ctx := testContext(t, 10*time.Second)

			start := time.Now()
			tx, err := s.Send(ctx, payee, nil)
			if tx != nil || err == nil || !strings.HasPrefix(err.Error(), "send tx: ") {
				t.Errorf("Send = %v, %v; want no tx and a send tx error", tx, err)
			}
			if _, err := s.Balance(ctx); err == nil {
				t.Error("Balance succeeded")
			}

			signed := signTransfer(t, testchain.DevKey(0), 0)
			short, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			_, err = s.Wait(short, signed)
			var perr *PendingError
			if !errors.As(err, &perr) || perr.Hash != signed.Hash() || !strings.Contains(err.Error(), "last node error") {
				t.Errorf("Wait = %v, want a *PendingError for %s with the node's error", err, signed.Hash())
			}
			if elapsed := time.Since(start); elapsed > 5*time.Second {
				t.Errorf("took %s against a dead node", elapsed)
			}
		})
	}
}

func TestWaitRejectsForeignTransaction(t *testing.T) {
	a := testchain.StartAnvil(t)
	s, _ := newTestSender(t, a.Client, 0, testConfig())
	ctx := testContext(t, 10*time.Second)
	for _, tx := range []*types.Transaction{nil, signTransfer(t, testchain.DevKey(1), 0)} {
		if _, err := s.Wait(ctx, tx); err == nil || errors.Is(err, ErrPending) {
			t.Errorf("Wait(%v) = %v, want an error", tx, err)
		}
	}
}

func TestSenderSimulated(t *testing.T) {
	sim := testchain.NewSimulated(t)
	sim.StartAutoCommit(t, 10*time.Millisecond)
	s, _ := newTestSender(t, sim.Client, 8, testConfig())
	ctx := testContext(t, 30*time.Second)

	var txs []*types.Transaction
	for range 3 {
		tx, err := s.Send(ctx, payee, nil)
		if err != nil {
			t.Fatal(err)
		}
		txs = append(txs, tx)
	}
	receipts := waitAll(t, s, nil, txs)
	for i, r := range receipts {
		if r.TxHash != txs[i].Hash() {
			t.Errorf("receipt %d for %s, want %s", i, r.TxHash, txs[i].Hash())
		}
	}
	bal, err := s.Balance(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if tenThousand := new(big.Int).Mul(big.NewInt(10_000), big.NewInt(params.Ether)); bal.Cmp(tenThousand) >= 0 {
		t.Errorf("balance %s after paying gas, want less than %s", bal, tenThousand)
	}
}

// TestWaitForgetsSettled checks that the Sender forgets what it sent once
// it is keepSettled nonces below what was mined, also when every Wait finds
// its receipt at the first look (an automining node), and so never polls
// the account's nonce: a long-running gateway on such a chain must not keep
// every transaction it ever sent.
func TestWaitForgetsSettled(t *testing.T) {
	a := testchain.StartAnvil(t)
	s, _ := newTestSender(t, a.Client, 0, testConfig())
	ctx := testContext(t, 120*time.Second)
	const n = keepSettled + 64
	for i := range n {
		tx, err := s.Send(ctx, payee, nil)
		if err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
		if _, err := s.Wait(ctx, tx); err != nil {
			t.Fatalf("wait %d: %v", i, err)
		}
	}
	s.mu.Lock()
	kept := len(s.flights)
	s.mu.Unlock()
	if kept > keepSettled+1 {
		t.Errorf("after %d transactions mined, the Sender remembers %d, want at most %d", n, kept, keepSettled+1)
	}
}

func TestNewSenderValidates(t *testing.T) {
	backend := ethclient.NewClient(nil)
	key := testchain.DevKey(0)
	good := testConfig()
	tests := []struct {
		name    string
		backend Backend
		key     *ecdsa.PrivateKey
		chainID *big.Int
		edit    func(*SenderConfig)
	}{
		{"nil backend", nil, key, big.NewInt(1), nil},
		{"nil key", backend, nil, big.NewInt(1), nil},
		{"nil chain id", backend, key, nil, nil},
		{"zero chain id", backend, key, new(big.Int), nil},
		{"no max fee", backend, key, big.NewInt(1), func(c *SenderConfig) { c.MaxFeePerGas = nil }},
		{"zero max fee", backend, key, big.NewInt(1), func(c *SenderConfig) { c.MaxFeePerGas = new(big.Int) }},
		{"bump below 10%", backend, key, big.NewInt(1), func(c *SenderConfig) { c.FeeBumpPercent = 9.9 }},
		{"negative bump", backend, key, big.NewInt(1), func(c *SenderConfig) { c.FeeBumpPercent = -20 }},
		{"huge gas margin", backend, key, big.NewInt(1), func(c *SenderConfig) { c.GasMarginPercent = 500 }},
		{"gas limit below a transfer's", backend, key, big.NewInt(1), func(c *SenderConfig) { c.GasLimit = params.TxGas - 1 }},
		{"gas limit above a transaction's cap", backend, key, big.NewInt(1), func(c *SenderConfig) { c.GasLimit = 1<<23 + 1 }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := good
			if tc.edit != nil {
				tc.edit(&cfg)
			}
			if s, err := NewSender(tc.backend, tc.key, tc.chainID, cfg, nil); err == nil {
				t.Errorf("NewSender = %v, want an error", s)
			}
		})
	}
	if _, err := NewSender(backend, key, big.NewInt(1), good, nil); err != nil {
		t.Errorf("NewSender with a valid config: %v", err)
	}
}

func TestRaise(t *testing.T) {
	tests := []struct {
		x, bp, want int64
	}{
		{0, 1250, 1},                         // always up by at least 1
		{1, 1250, 2},                         // rounded up
		{1_000_000_000, 1250, 1_125_000_000}, // 12.5%
		{1_000_000_000, 1000, 1_100_000_000}, // geth's minimum
		{3, 1000, 4},                         // 3.3 rounds up
		{100, 0, 101},
	}
	for _, tc := range tests {
		if got := raise(big.NewInt(tc.x), uint64(tc.bp)); got.Int64() != tc.want {
			t.Errorf("raise(%d, %d bp) = %s, want %d", tc.x, tc.bp, got, tc.want)
		}
	}
}

// signTransfer signs a 1-wei transfer to payee with key and nonce, without
// sending it.
func signTransfer(tb testing.TB, key *ecdsa.PrivateKey, nonce uint64) *types.Transaction {
	tb.Helper()
	tx, err := types.SignNewTx(key, types.LatestSignerForChainID(big.NewInt(1337)), &types.DynamicFeeTx{
		ChainID:   big.NewInt(1337),
		Nonce:     nonce,
		GasTipCap: big.NewInt(params.GWei),
		GasFeeCap: big.NewInt(3 * params.GWei),
		Gas:       params.TxGas,
		To:        &payee,
		Value:     big.NewInt(1),
	})
	if err != nil {
		tb.Fatal(err)
	}
	return tx
}

// closedPortURL returns an HTTP URL on a loopback port nothing listens on.
func closedPortURL(tb testing.TB) string {
	tb.Helper()
	srv := newFakeNode(tb, nil)
	srv.Close()
	return srv.URL
}

// BenchmarkConcurrentSend measures Send under the facilitator's load: 32
// goroutines sending from one account to an anvil that mines every
// transaction as it arrives, directly and through a proxy that adds a remote
// node's round trip to every call. ns/op is the wall time per Send, so it
// falls as broadcasts overlap.
func BenchmarkConcurrentSend(b *testing.B) {
	b.Run("anvil", func(b *testing.B) { benchmarkConcurrentSend(b, 0) })
	b.Run("rtt=50ms", func(b *testing.B) { benchmarkConcurrentSend(b, 50*time.Millisecond) })
}

func benchmarkConcurrentSend(b *testing.B, rtt time.Duration) {
	const workers = 32
	a := testchain.StartAnvil(b)
	var backend Backend = a.Client
	if rtt > 0 {
		slow := make(map[string]fakeMethod)
		for _, m := range []string{"eth_estimateGas", "eth_maxPriorityFeePerGas", "eth_getBlockByNumber",
			"eth_getTransactionCount", "eth_sendRawTransaction"} {
			slow[m] = func(f *fakeNode, params []json.RawMessage) (any, error) {
				time.Sleep(rtt)
				return f.forward(m, params)
			}
		}
		backend = newProxyNode(b, a, slow).dial(b)
	}
	s, err := NewSender(backend, testchain.DevKey(0), a.ChainID, testConfig(), nil)
	if err != nil {
		b.Fatal(err)
	}
	ctx := testContext(b, 10*time.Minute)
	if _, err := s.Send(ctx, payee, nil); err != nil { // sync the nonce outside the timing
		b.Fatal(err)
	}

	var (
		mu   sync.Mutex
		last *types.Transaction // the highest nonce sent
		errs = make(chan error, workers)
		left = int64(b.N)
		wg   sync.WaitGroup
	)
	b.ResetTimer()
	for range workers {
		wg.Go(func() {
			for {
				mu.Lock()
				left--
				more := left >= 0
				mu.Unlock()
				if !more {
					return
				}
				tx, err := s.Send(ctx, payee, nil)
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				if last == nil || tx.Nonce() > last.Nonce() {
					last = tx
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	if _, err := s.Wait(ctx, last); err != nil {
		b.Fatal(err)
	}
	if n, err := a.Client.NonceAt(ctx, s.Address(), nil); err != nil || n != uint64(b.N)+1 {
		b.Fatalf("account nonce = %d, %v; want %d", n, err, b.N+1)
	}
}
