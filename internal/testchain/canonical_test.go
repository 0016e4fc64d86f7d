package testchain

import (
	"bytes"
	"context"
	"math/big"
	"testing"

	"github.com/ethereum/go-ethereum/common"

	"github.com/llm4agents/llm4agents/contracts"
)

// codeReader is what both chains' clients offer to read code.
type codeReader interface {
	CodeAt(ctx context.Context, addr common.Address, block *big.Int) ([]byte, error)
}

// checkCanonical fails the test unless Permit2 and the upto proxy sit at their
// canonical addresses (want true) or nothing does (want false).
func checkCanonical(t *testing.T, c codeReader, want bool) {
	t.Helper()
	for addr, code := range contracts.CanonicalCode() {
		got, err := c.CodeAt(t.Context(), addr, nil)
		if err != nil {
			t.Fatal(err)
		}
		if want && !bytes.Equal(got, code) || !want && len(got) != 0 {
			t.Errorf("code at %s: %d bytes, want ours: %t", addr, len(got), want)
		}
	}
}

// TestCanonicalContracts: every chain the package starts has Permit2 and the
// upto proxy at their canonical addresses, without moving the deployer's
// nonce, except a bare anvil.
func TestCanonicalContracts(t *testing.T) {
	t.Run("simulated", func(t *testing.T) {
		s := NewSimulated(t)
		checkCanonical(t, s.Client, true)
		// The token is still dev account 0's first contract.
		if want := common.HexToAddress("0x5FbDB2315678afecb367f032d93F642f64180aa3"); s.Token != want {
			t.Errorf("token at %s, want %s", s.Token, want)
		}
	})
	t.Run("anvil", func(t *testing.T) {
		a := StartAnvil(t)
		checkCanonical(t, a.Client, true)
		nonce, err := a.Client.NonceAt(t.Context(), DevAddress(0), nil)
		if err != nil || nonce != 0 {
			t.Errorf("dev account 0's nonce = %d, %v; want 0", nonce, err)
		}
	})
	t.Run("bare anvil", func(t *testing.T) {
		checkCanonical(t, StartAnvil(t, WithBareChain()).Client, false)
	})
}
