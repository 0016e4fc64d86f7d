package store

import (
	"math"
	"testing"
	"time"
)

func TestCeilMillis(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want int64
	}{
		{time.Nanosecond, 1},
		{time.Millisecond, 1},
		{time.Millisecond + 1, 2},
		{time.Minute, 60_000},
		{math.MaxInt64, math.MaxInt64/int64(time.Millisecond) + 1},
	} {
		if got := CeilMillis(tc.d); got != tc.want {
			t.Errorf("CeilMillis(%d) = %d, want %d", tc.d, got, tc.want)
		}
	}
}

func TestCeilUnixMilli(t *testing.T) {
	ms := time.UnixMilli(1_772_600_767_008)
	for _, tc := range []struct {
		t    time.Time
		want int64
	}{
		{ms, 1_772_600_767_008},
		{ms.Add(time.Nanosecond), 1_772_600_767_009},
		{ms.Add(-time.Nanosecond), 1_772_600_767_008},
		{time.UnixMilli(-5).Add(-time.Nanosecond), -5},
	} {
		if got := CeilUnixMilli(tc.t); got != tc.want {
			t.Errorf("CeilUnixMilli(%v) = %d, want %d", tc.t, got, tc.want)
		}
	}
}
