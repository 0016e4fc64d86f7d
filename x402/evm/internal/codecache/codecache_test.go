package codecache

import (
	"context"
	"errors"
	"math/big"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
)

// node serves code per account and counts its reads.
type node struct {
	code  map[common.Address][]byte
	err   error
	reads int
}

func (n *node) CodeAt(_ context.Context, a common.Address, _ *big.Int) ([]byte, error) {
	n.reads++
	if n.err != nil {
		return nil, n.err
	}
	return n.code[a], nil
}

var (
	eoa    = common.HexToAddress("0x00000000000000000000000000000000000000e0")
	wallet = common.HexToAddress("0x00000000000000000000000000000000000000c0")
)

// TestCodeAt: an account without code is read once per TTL; an account with
// code, an account that gains code once the entry expires, a failed read and
// a clock that went back are read every time.
func TestCodeAt(t *testing.T) {
	start := time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name string
		// steps are offsets from start at which the account is looked up.
		steps   []time.Duration
		account common.Address
		failing bool
		reads   int
	}{
		{name: "no code, within the TTL", account: eoa, steps: []time.Duration{0, time.Second, TTL - time.Nanosecond}, reads: 1},
		{name: "no code, at the TTL", account: eoa, steps: []time.Duration{0, TTL}, reads: 2},
		{name: "no code, clock went back", account: eoa, steps: []time.Duration{time.Minute, 0}, reads: 2},
		{name: "code is never remembered", account: wallet, steps: []time.Duration{0, time.Millisecond, 2 * time.Millisecond}, reads: 3},
		{name: "a failed read is not remembered", account: eoa, failing: true, steps: []time.Duration{0, time.Millisecond}, reads: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := &node{code: map[common.Address][]byte{wallet: {0x60}}}
			if tc.failing {
				n.err = errors.New("node down")
			}
			var now time.Time
			c := &Cache{Now: func() time.Time { return now }}
			for _, d := range tc.steps {
				now = start.Add(d)
				code, err := c.CodeAt(t.Context(), n, tc.account)
				switch {
				case tc.failing && err == nil:
					t.Fatal("a failed read gave no error")
				case !tc.failing && err != nil:
					t.Fatal(err)
				case tc.account == wallet && len(code) == 0:
					t.Fatal("the wallet's code was lost")
				case tc.account == eoa && len(code) != 0:
					t.Fatalf("code %x for an account without code", code)
				}
			}
			if n.reads != tc.reads {
				t.Errorf("%d reads, want %d", n.reads, tc.reads)
			}
		})
	}
}

// TestCodeAtGainsCode: an account seen with code after its entry expired is
// forgotten, so it is read again at once if it loses its code.
func TestCodeAtGainsCode(t *testing.T) {
	n := &node{code: map[common.Address][]byte{}}
	now := time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC)
	c := &Cache{Now: func() time.Time { return now }}
	if _, err := c.CodeAt(t.Context(), n, eoa); err != nil {
		t.Fatal(err)
	}
	n.code[eoa] = []byte{0xef, 0x01, 0x00} // an EIP-7702 delegation
	now = now.Add(TTL)
	if code, err := c.CodeAt(t.Context(), n, eoa); err != nil || len(code) == 0 {
		t.Fatalf("code %x, %v after the TTL; want the delegation", code, err)
	}
	if code, _ := c.CodeAt(t.Context(), n, eoa); len(code) == 0 {
		t.Fatal("an account with code answered from the cache")
	}
	if n.reads != 3 {
		t.Errorf("%d reads, want 3", n.reads)
	}
}

// TestCodeAtBounded: the cache never holds more than maxEntries accounts.
func TestCodeAtBounded(t *testing.T) {
	n := &node{}
	c := &Cache{}
	for i := range maxEntries + 10 {
		a := common.BigToAddress(big.NewInt(int64(i + 1)))
		if _, err := c.CodeAt(t.Context(), n, a); err != nil {
			t.Fatal(err)
		}
	}
	if got := len(c.noCode); got > maxEntries {
		t.Errorf("%d entries, over %d", got, maxEntries)
	}
}
