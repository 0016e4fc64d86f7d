// Package chain holds thin go-ethereum helpers for the facilitator's
// transactions: a Sender that signs and broadcasts EIP-1559 transactions from one
// account for many concurrent callers, manages its nonces, and waits for
// receipts while re-broadcasting dropped transactions and replacing stuck ones.
//
// Concurrent Sends take nonces and sign under a short lock, then broadcast
// concurrently, so throughput is not bounded by the node's round trip. A nonce
// the node refuses is handed to the next Send, or filled by a Wait with a
// 0-value transfer to the account itself, so no gap blocks later nonces.
//
// It talks to a node through Backend, the part of *ethclient.Client it needs,
// so the in-process simulated backend serves as well as a real node.
package chain

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"strings"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/rpc"
)

// Backend is the part of a node client that Sender uses. *ethclient.Client and
// simulated.Client satisfy it.
type Backend interface {
	PendingNonceAt(ctx context.Context, account common.Address) (uint64, error)
	NonceAt(ctx context.Context, account common.Address, blockNumber *big.Int) (uint64, error)
	BalanceAt(ctx context.Context, account common.Address, blockNumber *big.Int) (*big.Int, error)
	HeaderByNumber(ctx context.Context, number *big.Int) (*types.Header, error)
	SuggestGasTipCap(ctx context.Context) (*big.Int, error)
	EstimateGas(ctx context.Context, call ethereum.CallMsg) (uint64, error)
	CallContract(ctx context.Context, call ethereum.CallMsg, blockNumber *big.Int) ([]byte, error)
	SendTransaction(ctx context.Context, tx *types.Transaction) error
	TransactionByHash(ctx context.Context, hash common.Hash) (tx *types.Transaction, isPending bool, err error)
	TransactionReceipt(ctx context.Context, txHash common.Hash) (*types.Receipt, error)
}

var (
	// ErrPending means a transaction's outcome is not known yet: it was broadcast
	// (or may have been) but no receipt was seen before the context ended. The
	// error is a *PendingError, which names the transaction to wait for later.
	ErrPending = errors.New("transaction pending")

	// ErrNonceConsumed means the account's nonce moved past the transaction's
	// nonce but none of the transactions the Sender broadcast for that nonce has
	// a receipt: another transaction, signed elsewhere with the same key, took it.
	ErrNonceConsumed = errors.New("nonce consumed by another transaction")

	// ErrFeeAboveCap means the network's current fees (base fee plus tip) exceed
	// SenderConfig.MaxFeePerGas. Nothing was broadcast.
	ErrFeeAboveCap = errors.New("fee above max fee per gas")
)

// PendingError is returned when a transaction may still be mined: Wait's
// context ended before a receipt appeared, or Send could not tell whether the
// node received the transaction. errors.Is(err, ErrPending) holds for it.
type PendingError struct {
	// Hash is the transaction most recently broadcast for Nonce; an earlier
	// version may still be the one that gets mined.
	Hash  common.Hash
	Nonce uint64
	// Err says why the outcome is unknown: the context's error, or the transport
	// error of the broadcast.
	Err error
}

func (e *PendingError) Error() string {
	return fmt.Sprintf("tx %s nonce %d pending: %v", e.Hash, e.Nonce, e.Err)
}

// Unwrap returns ErrPending and the cause.
func (e *PendingError) Unwrap() []error { return []error{ErrPending, e.Err} }

// nodeAnswered reports whether err is an answer from the node (a JSON-RPC error
// object), after which the node definitely did not take a transaction, as
// opposed to a transport failure or timeout, after which it may have.
func nodeAnswered(err error) bool {
	var rpcErr rpc.Error
	return errors.As(err, &rpcErr)
}

// The txpool's rejections are only available as message text over JSON-RPC.
// The spellings are geth's (core.ErrNonceTooLow, txpool.ErrAlreadyKnown,
// txpool.ErrReplaceUnderpriced) and anvil's.

// isNonceTooLow reports a nonce the account already used.
func isNonceTooLow(err error) bool {
	return containsAny(err, "nonce too low")
}

// isAlreadyKnown reports that the node already holds this exact transaction.
func isAlreadyKnown(err error) bool {
	return containsAny(err, "already known", "already imported", "known transaction")
}

// isReplaceUnderpriced reports that the pool holds another transaction with the
// same nonce and the new one does not pay enough more to replace it.
func isReplaceUnderpriced(err error) bool {
	return containsAny(err, "replacement transaction underpriced")
}

func containsAny(err error, subs ...string) bool {
	msg := strings.ToLower(err.Error())
	for _, s := range subs {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}
