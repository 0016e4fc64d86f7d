package store

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestParseAccount(t *testing.T) {
	const addr = "0x857b06519e91e3a54538791bdbb0e22373e36b66"
	for _, tc := range []struct {
		account, kind, owner string
		ok                   bool
	}{
		{UserAccount(addr), "user", addr, true},
		{HeldAccount(addr), "held", addr, true},
		{AccountDeposits, AccountDeposits, "", true},
		{AccountRevenue, AccountRevenue, "", true},
		{AccountLoss, AccountLoss, "", true},
		{"", "", "", false},
		{"user:", "", "", false},
		{"user:0xABC", "", "", false},
		{"user:" + addr + ":x", "", "", false},
		{"held:" + strings.Repeat("a", 129), "", "", false},
		{"wallet:" + addr, "", "", false},
		{"Revenue", "", "", false},
		{addr, "", "", false},
	} {
		kind, owner, ok := ParseAccount(tc.account)
		if kind != tc.kind || owner != tc.owner || ok != tc.ok {
			t.Errorf("ParseAccount(%q) = %q, %q, %v; want %q, %q, %v", tc.account, kind, owner, ok, tc.kind, tc.owner, tc.ok)
		}
	}
}

func TestPeriodStart(t *testing.T) {
	for _, tc := range []struct {
		t      time.Time
		period time.Duration
		want   time.Time
	}{
		{time.Date(2026, 3, 4, 5, 6, 7, 8, time.UTC), 24 * time.Hour, time.Date(2026, 3, 4, 0, 0, 0, 0, time.UTC)},
		{time.Date(2026, 3, 4, 0, 0, 0, 0, time.UTC), 24 * time.Hour, time.Date(2026, 3, 4, 0, 0, 0, 0, time.UTC)},
		{time.Date(2026, 3, 4, 5, 59, 59, 999_999_999, time.UTC), time.Hour, time.Date(2026, 3, 4, 5, 0, 0, 0, time.UTC)},
		{time.UnixMilli(-1), time.Second, time.UnixMilli(-1000).UTC()},
	} {
		if got := PeriodStart(tc.t, tc.period); !got.Equal(tc.want) {
			t.Errorf("PeriodStart(%v, %v) = %v, want %v", tc.t, tc.period, got, tc.want)
		}
	}
}

func TestInsufficientError(t *testing.T) {
	var err error = &InsufficientError{Limit: LimitKeyTotal, Available: 5, Requested: 9}
	if !errors.Is(err, ErrInsufficient) || errors.Is(err, ErrConflict) {
		t.Errorf("errors.Is on %v is wrong", err)
	}
	if got := err.Error(); got != "insufficient key_total: 5 available, 9 requested" {
		t.Errorf("Error() = %q", got)
	}
}

// FuzzLedgerNames checks that the validators of ids, owners, assets and
// accounts never panic and accept only what the ledger can store and print
// safely: bounded, printable ASCII without spaces.
func FuzzLedgerNames(f *testing.F) {
	for _, s := range []string{"", "user:0xabc", "held:0xabc", "revenue", "eip155:8453/erc20:0xabc", "req-1", "a b", "é", "user:", "\x00", strings.Repeat("x", 200)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for name, ok := range map[string]bool{"id": ValidID(s), "owner": ValidOwner(s), "asset": ValidAsset(s)} {
			if !ok {
				continue
			}
			if len(s) == 0 || len(s) > 128 || strings.ContainsFunc(s, func(r rune) bool { return r <= ' ' || r >= 0x7f }) {
				t.Fatalf("%s %q accepted", name, s)
			}
		}
		if ValidOwner(s) && (strings.ToLower(s) != s || strings.Contains(s, ":")) {
			t.Fatalf("owner %q accepted", s)
		}
		kind, owner, ok := ParseAccount(s)
		if !ok {
			return
		}
		switch kind {
		case "user":
			if s != UserAccount(owner) || !ValidOwner(owner) {
				t.Fatalf("ParseAccount(%q) = %q, %q", s, kind, owner)
			}
		case "held":
			if s != HeldAccount(owner) || !ValidOwner(owner) {
				t.Fatalf("ParseAccount(%q) = %q, %q", s, kind, owner)
			}
		case AccountDeposits, AccountRevenue, AccountLoss:
			if s != kind || owner != "" {
				t.Fatalf("ParseAccount(%q) = %q, %q", s, kind, owner)
			}
		default:
			t.Fatalf("ParseAccount(%q) = unknown kind %q", s, kind)
		}
	})
}
