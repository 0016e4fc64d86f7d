package contracts

import (
	"fmt"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
)

// AnchorCalldata returns the calldata of ReceiptLogAnchor.anchor(size, root),
// for a sender that signs its own transactions (the facilitator's
// chain.Sender) rather than a bind.TransactOpts.
func AnchorCalldata(size uint64, root [32]byte) ([]byte, error) {
	a, err := ReceiptLogAnchorMetaData.GetAbi()
	if err != nil {
		return nil, fmt.Errorf("receipt log anchor ABI: %w", err)
	}
	data, err := a.Pack("anchor", size, root)
	if err != nil {
		return nil, fmt.Errorf("pack anchor(%d, %x): %w", size, root, err)
	}
	return data, nil
}

// AnchoredEvents returns the Anchored events that the ReceiptLogAnchor at
// contract emitted in r, decoded with the contract's ABI, in log order. Logs
// of other contracts are passed over; a log of contract that has the event's
// topic but does not decode is an error.
func AnchoredEvents(r *types.Receipt, contract common.Address) ([]ReceiptLogAnchorAnchored, error) {
	f, err := NewReceiptLogAnchorFilterer(contract, nil)
	if err != nil {
		return nil, err
	}
	a, err := ReceiptLogAnchorMetaData.GetAbi()
	if err != nil {
		return nil, fmt.Errorf("receipt log anchor ABI: %w", err)
	}
	topic := a.Events["Anchored"].ID
	var out []ReceiptLogAnchorAnchored
	for _, l := range r.Logs {
		if l.Address != contract || len(l.Topics) == 0 || l.Topics[0] != topic {
			continue
		}
		ev, err := f.ParseAnchored(*l)
		if err != nil {
			return nil, fmt.Errorf("log %d of %s: %w", l.Index, r.TxHash.Hex(), err)
		}
		out = append(out, *ev)
	}
	return out, nil
}
