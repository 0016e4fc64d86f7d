package devchain

import (
	"bytes"
	"log/slog"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"

	"github.com/llm4agents/llm4agents/contracts"
)

// TestStartCanonicalContracts: the demo chain has Permit2 and the upto proxy
// at their canonical addresses, the token is still dev account 0's first
// contract, the address the README's examples use, and the receipt log's
// anchor its second.
func TestStartCanonicalContracts(t *testing.T) {
	c, err := Start(t.Context(), 10*time.Millisecond, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Error(err)
		}
	})
	if c.Permit2 != contracts.Permit2Address || c.UptoProxy != contracts.UptoProxyAddress {
		t.Errorf("Permit2 %s, UptoProxy %s; want the canonical addresses", c.Permit2, c.UptoProxy)
	}
	for addr, want := range contracts.CanonicalCode() {
		code, err := c.Client.CodeAt(t.Context(), addr, nil)
		if err != nil || !bytes.Equal(code, want) {
			t.Errorf("code at %s: %d bytes, %v; want ours", addr, len(code), err)
		}
	}
	if want := common.HexToAddress("0x5FbDB2315678afecb367f032d93F642f64180aa3"); c.Token != want {
		t.Errorf("token at %s, want %s", c.Token, want)
	}
	if want := crypto.CreateAddress(Address(0), 1); c.Anchor != want {
		t.Errorf("anchor at %s, want %s", c.Anchor, want)
	}
	code, err := c.Client.CodeAt(t.Context(), c.Anchor, nil)
	if err != nil || !bytes.Equal(code, common.FromHex(contracts.ReceiptLogAnchorRuntimeBin)) {
		t.Errorf("code at the anchor %s: %d bytes, %v; want ReceiptLogAnchor's", c.Anchor, len(code), err)
	}
}
