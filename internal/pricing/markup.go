package pricing

import (
	"errors"
	"math/big"
)

// MaxMarkup is the largest markup WithMarkup takes, in basis points: 1000%.
const MaxMarkup = 100_000

// ErrPriceTooLarge is a marked-up price past the uint64 maximum.
var ErrPriceTooLarge = errors.New("pricing: the marked-up price is more than 2^64-1 atomic units per million tokens")

// WithMarkup is the price of selling at cost p plus bps basis points (2000:
// cost + 20%), each per-million price rounded up to the atomic unit, so the
// seller never sells below cost + markup. bps above MaxMarkup, or a result
// past the uint64 maximum, is an error.
func WithMarkup(p Price, bps uint64) (Price, error) {
	if bps > MaxMarkup {
		return Price{}, errors.New("pricing: a markup is at most 100000 basis points (1000%)")
	}
	up := func(v uint64) (uint64, error) {
		n := new(big.Int).SetUint64(v)
		n.Mul(n, new(big.Int).SetUint64(10_000+bps))
		n.Add(n, big.NewInt(9_999)) // round up
		n.Quo(n, big.NewInt(10_000))
		if !n.IsUint64() {
			return 0, ErrPriceTooLarge
		}
		return n.Uint64(), nil
	}
	in, err := up(p.Input)
	if err != nil {
		return Price{}, err
	}
	out, err := up(p.Output)
	if err != nil {
		return Price{}, err
	}
	return Price{Input: in, Output: out}, nil
}
