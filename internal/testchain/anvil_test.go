package testchain

import (
	"context"
	"errors"
	"math/big"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/ethclient"
	"github.com/ethereum/go-ethereum/params"
	"github.com/google/go-cmp/cmp"
)

func TestStartAnvilDevAccounts(t *testing.T) {
	a := StartAnvil(t)
	ctx := anvilContext(t)

	id, err := a.Client.ChainID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if id.Cmp(a.ChainID) != 0 || id.Int64() != 1337 {
		t.Errorf("chain id = %s, want %s = 1337", id, a.ChainID)
	}

	var accounts []common.Address
	if err := a.RPC.CallContext(ctx, &accounts, "eth_accounts"); err != nil {
		t.Fatal(err)
	}
	var want []common.Address
	for i := range NumDevKeys {
		want = append(want, DevAddress(i))
	}
	if diff := cmp.Diff(want, accounts); diff != "" {
		t.Errorf("eth_accounts (-DevAddress +anvil):\n%s", diff)
	}
	tenThousandETH := new(big.Int).Mul(big.NewInt(10_000), big.NewInt(params.Ether))
	for i := range NumDevKeys {
		bal, err := a.Client.BalanceAt(ctx, DevAddress(i), nil)
		if err != nil {
			t.Fatal(err)
		}
		if bal.Cmp(tenThousandETH) != 0 {
			t.Errorf("balance of dev account %d = %s, want %s", i, bal, tenThousandETH)
		}
	}
}

func TestAnvilMining(t *testing.T) {
	a := StartAnvil(t, WithNoMining())
	ctx := anvilContext(t)

	tx := anvilTransfer(t, a, 0)
	if _, err := a.Client.TransactionReceipt(ctx, tx.Hash()); !errors.Is(err, ethereum.NotFound) {
		t.Fatalf("receipt before Mine: err = %v, want not found", err)
	}
	if err := a.Mine(ctx, 2); err != nil {
		t.Fatal(err)
	}
	r, err := a.Client.TransactionReceipt(ctx, tx.Hash())
	if err != nil {
		t.Fatalf("receipt after Mine: %v", err)
	}
	if r.BlockNumber.Uint64() != 1 {
		t.Errorf("mined in block %s, want 1", r.BlockNumber)
	}
	if n, err := a.Client.BlockNumber(ctx); err != nil || n != 2 {
		t.Errorf("block number = %d, %v; want 2 after Mine(2)", n, err)
	}

	if err := a.SetAutomine(ctx, true); err != nil {
		t.Fatal(err)
	}
	// Automine mines right after the node accepted the transaction, not before
	// eth_sendRawTransaction returns: poll briefly.
	tx = anvilTransfer(t, a, 1)
	for {
		_, err := a.Client.TransactionReceipt(ctx, tx.Hash())
		if err == nil {
			break
		}
		if !errors.Is(err, ethereum.NotFound) {
			t.Fatalf("receipt with automine on: %v", err) // also when ctx ends
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := a.Mine(ctx, 0); err == nil {
		t.Error("Mine(0) succeeded, want an error")
	}
}

func TestAnvilDropTransaction(t *testing.T) {
	a := StartAnvil(t, WithNoMining())
	ctx := anvilContext(t)

	tx := anvilTransfer(t, a, 0)
	if err := a.DropTransaction(ctx, tx.Hash()); err != nil {
		t.Fatal(err)
	}
	if _, _, err := a.Client.TransactionByHash(ctx, tx.Hash()); !errors.Is(err, ethereum.NotFound) {
		t.Errorf("dropped transaction: err = %v, want not found", err)
	}
	if err := a.DropTransaction(ctx, tx.Hash()); err == nil {
		t.Error("dropping it again succeeded, want an error")
	}
	if err := a.Mine(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if n, err := a.Client.NonceAt(ctx, DevAddress(0), nil); err != nil || n != 0 {
		t.Errorf("nonce after mining = %d, %v; want 0 (nothing mined)", n, err)
	}
}

func TestAnvilSetters(t *testing.T) {
	a := StartAnvil(t, WithNoMining())
	ctx := anvilContext(t)

	addr := common.HexToAddress("0x00000000000000000000000000000000000000aa")
	wei := big.NewInt(123_456_789)
	if err := a.SetBalance(ctx, addr, wei); err != nil {
		t.Fatal(err)
	}
	if got, err := a.Client.BalanceAt(ctx, addr, nil); err != nil || got.Cmp(wei) != 0 {
		t.Errorf("balance = %v, %v; want %s", got, err, wei)
	}

	baseFee := big.NewInt(7 * params.GWei)
	if err := a.SetNextBaseFee(ctx, baseFee); err != nil {
		t.Fatal(err)
	}
	if err := a.Mine(ctx, 1); err != nil {
		t.Fatal(err)
	}
	head, err := a.Client.HeaderByNumber(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if head.BaseFee.Cmp(baseFee) != 0 {
		t.Errorf("base fee = %s, want %s", head.BaseFee, baseFee)
	}
}

func TestAnvilClose(t *testing.T) {
	a := StartAnvil(t)
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if a.cmd.ProcessState == nil {
		t.Error("process not reaped after Close")
	}

	// Nothing answers on the port any more.
	c, err := ethclient.Dial(a.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if id, err := c.ChainID(ctx); err == nil {
		t.Errorf("chain id %s from a closed anvil", id)
	}
}

func TestStartAnvilMissingBinary(t *testing.T) {
	// Outside the module there is no interop/node_modules: StartAnvil skips.
	t.Setenv(requireToolsEnv, "")
	t.Chdir(t.TempDir())
	var ran bool
	t.Run("start", func(t *testing.T) {
		StartAnvil(t)
		ran = true
	})
	if ran {
		t.Error("StartAnvil returned without a binary, want a skip")
	}
}

// anvilTransfer sends 1 wei from dev account 0 to dev account 1 with the given
// nonce.
func anvilTransfer(tb testing.TB, a *Anvil, nonce uint64) *types.Transaction {
	tb.Helper()
	to := DevAddress(1)
	tx, err := types.SignNewTx(DevKey(0), types.LatestSignerForChainID(a.ChainID), &types.DynamicFeeTx{
		ChainID:   a.ChainID,
		Nonce:     nonce,
		GasTipCap: big.NewInt(params.GWei),
		GasFeeCap: big.NewInt(10 * params.GWei),
		Gas:       params.TxGas,
		To:        &to,
		Value:     big.NewInt(1),
	})
	if err != nil {
		tb.Fatal(err)
	}
	if err := a.Client.SendTransaction(anvilContext(tb), tx); err != nil {
		tb.Fatal(err)
	}
	return tx
}

func anvilContext(tb testing.TB) context.Context {
	tb.Helper()
	ctx, cancel := context.WithTimeout(tb.Context(), 30*time.Second)
	tb.Cleanup(cancel)
	return ctx
}
