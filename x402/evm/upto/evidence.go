package upto

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"math/big"
	"strings"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
)

// Key is a permit's on-chain replay identity: network, Permit2's address,
// owner and nonce, lower-case hex, in the shape of exact.Key (whose second
// part is the contract holding the nonce, there the token).
//
// The token is deliberately not part of it. Permit2 keeps one nonce space per
// owner across every token and spender: once an owner's nonce is used, no
// other permit of that owner with that nonce can ever settle, whatever its
// token, amount or proxy (the exact scheme's Permit2 variant included). One
// key per Permit2 nonce makes such permits contend for one claim, which is
// what the chain will do anyway. The signature is not part of it either, so
// every re-encoding of one permit has the same key.
func Key(network string, owner common.Address, nonce *big.Int) string {
	var n [32]byte
	nonce.FillBytes(n[:])
	return fmt.Sprintf("%s/%x/%x/%x", network, Permit2Address[:], owner[:], n[:])
}

// ParseKey splits a Key back into its network, owner and nonce. It accepts
// exactly what Key writes: a network without "/", Permit2's address, then 20
// and 32 bytes of lower-case hex.
func ParseKey(key string) (network string, owner common.Address, nonce *big.Int, err error) {
	parts := strings.Split(key, "/")
	if len(parts) != 4 || parts[0] == "" {
		return "", common.Address{}, nil, fmt.Errorf("permit key: want network/permit2/owner/nonce, got %d parts", len(parts))
	}
	var raw [3][]byte
	for i, want := range [3]int{common.AddressLength, common.AddressLength, common.HashLength} {
		h := parts[i+1]
		if len(h) != 2*want || strings.ToLower(h) != h {
			return "", common.Address{}, nil, fmt.Errorf("permit key: part %d is not %d bytes of lower-case hex", i+2, want)
		}
		if raw[i], err = hex.DecodeString(h); err != nil {
			return "", common.Address{}, nil, fmt.Errorf("permit key: part %d: %w", i+2, err)
		}
	}
	if common.BytesToAddress(raw[0]) != Permit2Address {
		return "", common.Address{}, nil, fmt.Errorf("permit key: part 2 is not Permit2's address")
	}
	return parts[0], common.BytesToAddress(raw[1]), new(big.Int).SetBytes(raw[2]), nil
}

// Key returns the replay identity of a verified payment.
func (v *Verified) Key() string {
	return Key(v.Network, v.Payload.Authorization.From, v.Payload.Authorization.Nonce)
}

// PaysPermit reports whether the logs of one transaction receipt pay amount
// under permit a: among token's own logs, a Transfer(a.From, a.Witness.To,
// amount). Permit2 emits no event of its own for a signature transfer, so the
// token's Transfer is the only evidence; the caller holds the receipt of its
// own settle transaction, whose only transfer out of the owner that is.
func PaysPermit(logs []*types.Log, token common.Address, a *Authorization, amount *big.Int) bool {
	for _, l := range logs {
		if l.Address == token && !l.Removed && isTransfer(l, a.From, a.Witness.To, amount) {
			return true
		}
	}
	return false
}

// PaidAmount returns what the logs of one transaction receipt pay under
// permit a, the charge its settle chose: the amount of token's
// Transfer(a.From, a.Witness.To), at most the permitted amount. It reports
// false when there is no such transfer.
func PaidAmount(logs []*types.Log, token common.Address, a *Authorization) (*big.Int, bool) {
	for _, l := range logs {
		if l.Address != token || l.Removed || len(l.Topics) != 3 || l.Topics[0] != TopicTransfer || len(l.Data) != 32 {
			continue
		}
		if common.BytesToAddress(l.Topics[1][:]) != a.From || common.BytesToAddress(l.Topics[2][:]) != a.Witness.To {
			continue
		}
		v := new(big.Int).SetBytes(l.Data)
		if a.Permitted.Amount == nil || v.Cmp(a.Permitted.Amount) <= 0 {
			return v, true
		}
	}
	return nil, false
}

func isTransfer(l *types.Log, from, to common.Address, value *big.Int) bool {
	return len(l.Topics) == 3 && l.Topics[0] == TopicTransfer &&
		common.BytesToAddress(l.Topics[1][:]) == from && common.BytesToAddress(l.Topics[2][:]) == to &&
		len(l.Data) == 32 && new(big.Int).SetBytes(l.Data).Cmp(value) == 0
}

// NonceUsed reads Permit2.nonceBitmap(owner, nonce >> 8) and reports whether
// bit nonce & 255 is set: the nonce was used by a transfer or invalidated by
// the owner. Either way no permit with it can settle any more.
func NonceUsed(ctx context.Context, c ethereum.ContractCaller, owner common.Address, nonce *big.Int) (bool, error) {
	wordPos := new(big.Int).Rsh(nonce, 8)
	word, err := callUint(ctx, c, Permit2Address, "nonceBitmap", owner, wordPos)
	if err != nil {
		return false, fmt.Errorf("read Permit2 nonce bitmap: %w", err)
	}
	bit := uint(new(big.Int).And(nonce, big.NewInt(0xff)).Uint64())
	return word.Bit(int(bit)) == 1, nil
}

// UseChain is what FindUse needs from a node. *ethclient.Client satisfies
// it.
type UseChain interface {
	ethereum.LogFilterer
	TransactionByHash(ctx context.Context, hash common.Hash) (tx *types.Transaction, isPending bool, err error)
}

// UseEvent is where a permit was used on chain.
type UseEvent struct {
	TxHash common.Hash
	Block  uint64
	Amount *big.Int // what the transfer moved: the charge, at most the permit's amount
}

// FindUse looks, from block fromBlock on, for the transaction that used
// owner's Permit2 nonce to pay payTo in token. Permit2 emits no per-use event,
// so it filters the token's Transfer(owner, payTo) logs and decodes each one's
// transaction: a direct call of the upto proxy's settle with this owner and
// nonce is the use. It returns nil when there is none (yet). A settle made
// from inside another contract (a batching wallet, a multicall) is not
// recognized; NonceUsed still tells that the nonce is gone.
func FindUse(ctx context.Context, c UseChain, token, owner, payTo common.Address, nonce *big.Int, fromBlock uint64) (*UseEvent, error) {
	q := ethereum.FilterQuery{
		FromBlock: new(big.Int).SetUint64(fromBlock),
		Addresses: []common.Address{token},
		Topics: [][]common.Hash{
			{TopicTransfer},
			{common.BytesToHash(owner[:])},
			{common.BytesToHash(payTo[:])},
		},
	}
	logs, err := c.FilterLogs(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("filter transfer logs: %w", err)
	}
	seen := make(map[common.Hash]bool)
	for _, l := range logs {
		if l.Removed || len(l.Data) != 32 || seen[l.TxHash] {
			continue
		}
		seen[l.TxHash] = true
		tx, _, err := c.TransactionByHash(ctx, l.TxHash)
		if err != nil {
			return nil, fmt.Errorf("read transaction %s: %w", l.TxHash.Hex(), err)
		}
		if tx.To() == nil || *tx.To() != ProxyAddress {
			continue
		}
		a, err := decodeSettle(tx.Data())
		if err != nil || a.From != owner || a.Nonce.Cmp(nonce) != 0 || a.Permitted.Token != token || a.Witness.To != payTo {
			continue
		}
		return &UseEvent{TxHash: l.TxHash, Block: l.BlockNumber, Amount: new(big.Int).SetBytes(l.Data)}, nil
	}
	return nil, nil
}

// decodeSettle decodes proxy.settle calldata into the permit it carries.
func decodeSettle(data []byte) (*Authorization, error) {
	if len(data) < 4 || !bytes.Equal(data[:4], settleMethod.ID) {
		return nil, fmt.Errorf("not a settle call")
	}
	vals, err := settleMethod.Inputs.Unpack(data[4:])
	if err != nil {
		return nil, fmt.Errorf("decode settle: %w", err)
	}
	var args struct {
		Permit    permitArg
		Amount    *big.Int
		Owner     common.Address
		Witness   witnessArg
		Signature []byte
	}
	if err := settleMethod.Inputs.Copy(&args, vals); err != nil {
		return nil, fmt.Errorf("decode settle: %w", err)
	}
	return &Authorization{
		From:      args.Owner,
		Permitted: TokenPermissions{Token: args.Permit.Permitted.Token, Amount: args.Permit.Permitted.Amount},
		Spender:   ProxyAddress,
		Nonce:     args.Permit.Nonce,
		Deadline:  args.Permit.Deadline,
		Witness:   Witness{To: args.Witness.To, Facilitator: args.Witness.Facilitator, ValidAfter: args.Witness.ValidAfter},
	}, nil
}

// DecodeSettle decodes the calldata of a proxy.settle call into the permit it
// carries (its signature and the charged amount left out): what a recorded
// settlement transaction says when its record does not.
func DecodeSettle(data []byte) (*Authorization, error) { return decodeSettle(data) }
