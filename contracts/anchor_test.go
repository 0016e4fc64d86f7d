package contracts_test

import (
	"bytes"
	"context"
	"math"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/accounts/abi/bind"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/google/go-cmp/cmp"

	"github.com/llm4agents/llm4agents/contracts"
	"github.com/llm4agents/llm4agents/internal/testchain"
	"github.com/llm4agents/llm4agents/x402/receipt"
)

// TestReceiptLogAnchor: on the simulated chain, each anchor call, through
// the binding or as AnchorCalldata's raw calldata, emits one Anchored event
// carrying its sender, the size and the root it was given; the contract's
// ABI (AnchoredEvents) and the buyer's decoder (receipt.ParseAnchored) read
// the same event; and the deployed code is ReceiptLogAnchorRuntimeBin.
func TestReceiptLogAnchor(t *testing.T) {
	s := testchain.NewSimulated(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	addr, anchor := s.DeployReceiptLogAnchor(t)
	code, err := s.Client.CodeAt(ctx, addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(code, common.FromHex(contracts.ReceiptLogAnchorRuntimeBin)) {
		t.Errorf("code at %s (%d bytes) differs from ReceiptLogAnchorRuntimeBin", addr, len(code))
	}
	abi, err := contracts.ReceiptLogAnchorMetaData.GetAbi()
	if err != nil {
		t.Fatal(err)
	}
	raw := bind.NewBoundContract(addr, *abi, s.Client, s.Client, s.Client)

	for _, tc := range []struct {
		name string
		from int
		size uint64
		root [32]byte
		raw  bool // sent as AnchorCalldata's bytes, not through the binding
	}{
		{"binding", 3, 1, [32]byte{0xaa, 31: 0x01}, false},
		{"calldata", 3, 1 << 40, [32]byte{0x01, 15: 0x80, 31: 0xff}, true},
		{"largest size, another sender", 6, math.MaxUint64, [32]byte{0xff, 0xff}, true},
		{"zero root", 4, 7, [32]byte{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var tx *types.Transaction
			var err error
			if tc.raw {
				data, cerr := contracts.AnchorCalldata(tc.size, tc.root)
				if cerr != nil {
					t.Fatal(cerr)
				}
				tx, err = raw.RawTransact(s.Transactor(t, tc.from), data)
			} else {
				tx, err = anchor.Anchor(s.Transactor(t, tc.from), tc.size, tc.root)
			}
			if err != nil {
				t.Fatal(err)
			}
			r := s.Mine(t, tx)
			if r.Status != types.ReceiptStatusSuccessful {
				t.Fatal("anchor reverted")
			}
			want := receipt.Anchored{Contract: addr, By: s.Addr(tc.from), Size: tc.size, Root: tc.root}
			evs, err := contracts.AnchoredEvents(r, addr)
			if err != nil || len(evs) != 1 {
				t.Fatalf("AnchoredEvents = %d events, %v; want 1", len(evs), err)
			}
			ev := evs[0]
			got := receipt.Anchored{Contract: ev.Raw.Address, By: ev.By, Size: ev.Size, Root: ev.Root}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("AnchoredEvents (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff([]receipt.Anchored{want}, receipt.AnchoredEvents(r)); diff != "" {
				t.Errorf("receipt.AnchoredEvents (-want +got):\n%s", diff)
			}
			// At another address, the same logs are not that contract's.
			if evs, err := contracts.AnchoredEvents(r, s.Addr(tc.from)); err != nil || len(evs) != 0 {
				t.Errorf("AnchoredEvents at another address = %v, %v; want none", evs, err)
			}
		})
	}
	// The contract keeps no state and takes no value: a payment reverts.
	opts := s.Transactor(t, 3)
	opts.Value = common.Big1
	if _, err := anchor.Anchor(opts, 1, [32]byte{}); err == nil {
		t.Error("an anchor call with value was accepted")
	}
}
