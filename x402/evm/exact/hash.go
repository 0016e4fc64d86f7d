package exact

import (
	"math/big"
	"sync"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"
)

// hasher is a Keccak state with a scratch buffer. Verification hashes five
// times per payment; a fresh state per hash, and callers' stack buffers escaping
// into the state's Write, were most of its allocations.
type hasher struct {
	state   crypto.KeccakState
	scratch []byte
}

var keccakPool = sync.Pool{New: func() any { return &hasher{state: crypto.NewKeccakState(), scratch: make([]byte, 0, 256)} }}

// keccak256 returns the Keccak-256 of b. b does not escape.
func keccak256(b []byte) (h common.Hash) {
	k := keccakPool.Get().(*hasher)
	k.scratch = append(k.scratch[:0], b...)
	k.state.Reset()
	_, _ = k.state.Write(k.scratch)
	_, _ = k.state.Read(h[:])
	keccakPool.Put(k)
	return h
}

// cmpInt64 compares x with y without allocating for x that fits in an int64.
func cmpInt64(x *big.Int, y int64) int {
	if x.IsInt64() {
		switch v := x.Int64(); {
		case v < y:
			return -1
		case v > y:
			return 1
		default:
			return 0
		}
	}
	return x.Cmp(big.NewInt(y))
}

// reqCache remembers what verification parses out of requirements. A resource
// server sends the same few offers again and again, so addresses, domains and
// chain ids are parsed once. It is bounded: it starts over when full.
type reqCache struct {
	mu     sync.RWMutex
	addrs  map[string]common.Address
	extras map[string]Extra
	chains map[string]*big.Int
}

const reqCacheMax = 1024

func (c *reqCache) address(s string) (common.Address, error) {
	c.mu.RLock()
	a, ok := c.addrs[s]
	c.mu.RUnlock()
	if ok {
		return a, nil
	}
	a, err := ParseAddress(s)
	if err != nil {
		return a, err
	}
	c.mu.Lock()
	if c.addrs == nil || len(c.addrs) >= reqCacheMax {
		c.addrs = make(map[string]common.Address)
	}
	c.addrs[s] = a
	c.mu.Unlock()
	return a, nil
}

func (c *reqCache) extra(raw []byte) (Extra, error) {
	c.mu.RLock()
	e, ok := c.extras[string(raw)]
	c.mu.RUnlock()
	if ok {
		return e, nil
	}
	e, err := ParseExtra(raw)
	if err != nil {
		return e, err
	}
	c.mu.Lock()
	if c.extras == nil || len(c.extras) >= reqCacheMax {
		c.extras = make(map[string]Extra)
	}
	c.extras[string(raw)] = e
	c.mu.Unlock()
	return e, nil
}

// chainID returns a shared *big.Int: callers must not modify it.
func (c *reqCache) chainID(network string) (*big.Int, error) {
	c.mu.RLock()
	id, ok := c.chains[network]
	c.mu.RUnlock()
	if ok {
		return id, nil
	}
	id, err := ChainID(network)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	if c.chains == nil || len(c.chains) >= reqCacheMax {
		c.chains = make(map[string]*big.Int)
	}
	c.chains[network] = id
	c.mu.Unlock()
	return id, nil
}
