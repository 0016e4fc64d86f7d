// Package codecache remembers, for a short while, that an account had no
// code, so that verifying and then settling a payment, or a buyer's next
// payments, do not each ask the node for the payer's code again.
//
// Only "no code" is remembered, and only where a stale answer is safe: the
// verifiers use the payer's code to choose between ecrecover and EIP-1271,
// and every verification is followed by a simulation (eth_call, or the
// sender's run before it sends) of the transfer itself, in which the token
// or Permit2 runs its own check against the chain as it is. An account that gained code within
// the window (an EIP-7702 delegation, a wallet deployed at a counterfactual
// address) can so only be refused, never paid for on a check that no longer
// holds; a refusal lasts at most TTL.
package codecache

import (
	"context"
	"math/big"
	"sync"
	"time"

	"github.com/ethereum/go-ethereum/common"
)

// TTL is how long an account seen without code is taken to still have none.
const TTL = 30 * time.Second

// maxEntries bounds the accounts remembered; when full, the cache starts
// over (a read from the node is the worst a reset costs).
const maxEntries = 1 << 16

// Reader is what the cache needs from a node.
type Reader interface {
	CodeAt(ctx context.Context, account common.Address, blockNumber *big.Int) ([]byte, error)
}

// Cache is safe for concurrent use. The zero value is ready, using time.Now.
type Cache struct {
	// Now defaults to time.Now.
	Now func() time.Time

	mu     sync.Mutex
	noCode map[common.Address]time.Time // account -> when it was seen without code
}

func (c *Cache) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}

// CodeAt returns the account's code at the latest block, or nil without a
// read when the account was seen without code less than TTL ago.
func (c *Cache) CodeAt(ctx context.Context, r Reader, account common.Address) ([]byte, error) {
	now := c.now()
	c.mu.Lock()
	seen, ok := c.noCode[account]
	c.mu.Unlock()
	if ok && now.Sub(seen) < TTL && !now.Before(seen) {
		return nil, nil
	}
	code, err := r.CodeAt(ctx, account, nil)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case len(code) > 0:
		delete(c.noCode, account)
	case c.noCode == nil || len(c.noCode) >= maxEntries:
		c.noCode = map[common.Address]time.Time{account: now}
	default:
		c.noCode[account] = now
	}
	return code, nil
}
