package exact

import (
	"context"
	"encoding/hex"
	"fmt"
	"math/big"
	"strings"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
)

// Key is an authorization's on-chain replay identity: network,
// token, payer and nonce, lower-case hex. Every re-encoding of one authorization
// (address case, v in {0,1,27,28}, high or low s, base64 or JSON layout) has the same
// key, because the signature is not part of it.
func Key(network string, token, from common.Address, nonce common.Hash) string {
	return fmt.Sprintf("%s/%x/%x/%x", network, token[:], from[:], nonce[:])
}

// ParseKey splits a Key back into its network, token, payer and nonce. It
// accepts exactly what Key writes: a network without "/", then 20, 20 and
// 32 bytes of lower-case hex.
func ParseKey(key string) (network string, token, from common.Address, nonce common.Hash, err error) {
	parts := strings.Split(key, "/")
	if len(parts) != 4 || parts[0] == "" {
		return "", common.Address{}, common.Address{}, common.Hash{}, fmt.Errorf("authorization key: want network/token/payer/nonce, got %d parts", len(parts))
	}
	var raw [3][]byte
	for i, want := range [3]int{common.AddressLength, common.AddressLength, common.HashLength} {
		h := parts[i+1]
		if len(h) != 2*want || strings.ToLower(h) != h {
			return "", common.Address{}, common.Address{}, common.Hash{}, fmt.Errorf("authorization key: part %d is not %d bytes of lower-case hex", i+2, want)
		}
		if raw[i], err = hex.DecodeString(h); err != nil {
			return "", common.Address{}, common.Address{}, common.Hash{}, fmt.Errorf("authorization key: part %d: %w", i+2, err)
		}
	}
	return parts[0], common.BytesToAddress(raw[0]), common.BytesToAddress(raw[1]), common.BytesToHash(raw[2]), nil
}

// Key returns the replay identity of a verified payment.
func (v *Verified) Key() string {
	return Key(v.Network, v.Asset, v.Payload.Authorization.From, v.Payload.Authorization.Nonce)
}

// PaysAuthorization reports whether the logs of one transaction receipt pay
// authorization a at token: among the token's own logs,
// AuthorizationUsed(from, nonce) immediately followed by Transfer(from, to, value)
// with exactly the authorization's to and value.
func PaysAuthorization(logs []*types.Log, token common.Address, a *Authorization) bool {
	var own []*types.Log
	for _, l := range logs {
		if l.Address == token && !l.Removed {
			own = append(own, l)
		}
	}
	for i := 0; i+1 < len(own); i++ {
		if isAuthorizationUsed(own[i], a.From, a.Nonce) && isTransfer(own[i+1], a.From, a.To, a.Value) {
			return true
		}
	}
	return false
}

func isAuthorizationUsed(l *types.Log, from common.Address, nonce common.Hash) bool {
	return len(l.Topics) == 3 && l.Topics[0] == TopicAuthorizationUsed &&
		common.BytesToAddress(l.Topics[1][:]) == from && l.Topics[2] == nonce
}

func isTransfer(l *types.Log, from, to common.Address, value *big.Int) bool {
	return len(l.Topics) == 3 && l.Topics[0] == TopicTransfer &&
		common.BytesToAddress(l.Topics[1][:]) == from && common.BytesToAddress(l.Topics[2][:]) == to &&
		len(l.Data) == 32 && new(big.Int).SetBytes(l.Data).Cmp(value) == 0
}

// UseEvent is where an authorization was consumed on chain.
type UseEvent struct {
	TxHash   common.Hash
	Block    uint64
	Canceled bool // AuthorizationCanceled rather than AuthorizationUsed
}

// FindUse looks up the AuthorizationUsed or AuthorizationCanceled event of an
// authorization from block fromBlock on. It returns nil when there is none (yet).
func FindUse(ctx context.Context, f ethereum.LogFilterer, token, from common.Address, nonce common.Hash, fromBlock uint64) (*UseEvent, error) {
	q := ethereum.FilterQuery{
		FromBlock: new(big.Int).SetUint64(fromBlock),
		Addresses: []common.Address{token},
		Topics: [][]common.Hash{
			{TopicAuthorizationUsed, TopicAuthorizationCanceled},
			{common.BytesToHash(from[:])},
			{nonce},
		},
	}
	logs, err := f.FilterLogs(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("filter authorization logs: %w", err)
	}
	for _, l := range logs {
		if l.Removed {
			continue
		}
		return &UseEvent{TxHash: l.TxHash, Block: l.BlockNumber, Canceled: l.Topics[0] == TopicAuthorizationCanceled}, nil
	}
	return nil, nil
}
