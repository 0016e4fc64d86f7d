package store

import (
	"testing"
	"time"
)

func TestClaimExpiry(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	validBefore := now.Add(5 * time.Minute)
	for _, tc := range []struct {
		name    string
		network string
		expiry  time.Time
		want    time.Time
		wantErr bool
	}{
		{name: "evm: validBefore plus margin", network: "eip155:8453", expiry: validBefore, want: validBefore.Add(10 * time.Minute)},
		{name: "evm: a day-long authorization is kept past its end", network: "eip155:1", expiry: now.Add(24 * time.Hour), want: now.Add(24*time.Hour + 10*time.Minute)},
		{name: "evm: no readable expiry", network: "eip155:8453", want: now.Add(25 * time.Hour)},
		{name: "sui: up to three days", network: "sui:mainnet", want: now.Add(72 * time.Hour)},
		{name: "solana: minutes", network: "solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp", want: now.Add(10 * time.Minute)},
		{name: "unknown namespace", network: "cosmos:hub", wantErr: true},
		{name: "no namespace", network: "eip155", wantErr: true},
		{name: "empty", network: "", wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ClaimExpiry(tc.network, now, tc.expiry)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("ClaimExpiry(%q) = %v, want an error", tc.network, got)
				}
				return
			}
			if err != nil || !got.Equal(tc.want) {
				t.Fatalf("ClaimExpiry(%q) = %v, %v; want %v", tc.network, got, err, tc.want)
			}
		})
	}
}
