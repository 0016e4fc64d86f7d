package pricing

import (
	"errors"
	"math"
	"testing"
)

func TestWithMarkup(t *testing.T) {
	tests := []struct {
		name string
		p    Price
		bps  uint64
		want Price
		err  bool
	}{
		{name: "none", p: Price{Input: 150_000, Output: 600_000}, bps: 0, want: Price{Input: 150_000, Output: 600_000}},
		{name: "20%", p: Price{Input: 150_000, Output: 600_000}, bps: 2000, want: Price{Input: 180_000, Output: 720_000}},
		{name: "rounds up, never below cost + markup", p: Price{Input: 1, Output: 3}, bps: 1, want: Price{Input: 2, Output: 4}},
		{name: "exact stays exact", p: Price{Input: 10_000, Output: 0}, bps: 1, want: Price{Input: 10_001, Output: 0}},
		{name: "1000%", p: Price{Input: 7, Output: 9}, bps: MaxMarkup, want: Price{Input: 77, Output: 99}},
		{name: "free stays free", p: Price{}, bps: 5000, want: Price{}},
		{name: "above the maximum markup", p: Price{Input: 1}, bps: MaxMarkup + 1, err: true},
		{name: "past uint64", p: Price{Input: math.MaxUint64}, bps: 1, err: true},
		{name: "uint64 maximum without markup", p: Price{Input: math.MaxUint64}, bps: 0, want: Price{Input: math.MaxUint64}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := WithMarkup(tt.p, tt.bps)
			if tt.err {
				if err == nil {
					t.Fatalf("WithMarkup() = %+v, want an error", got)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("WithMarkup() = %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
	if _, err := WithMarkup(Price{Output: math.MaxUint64/2 + 1}, 10_000); !errors.Is(err, ErrPriceTooLarge) {
		t.Errorf("doubling past uint64: %v, want ErrPriceTooLarge", err)
	}
}
