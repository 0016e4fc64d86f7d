package pricing

import (
	"strings"
	"testing"
)

// FuzzParseAmount checks that ParseAmount never panics, accepts only plain
// ASCII decimals (white space around them aside) within uint256, reads an
// integer as atomic units, and that what it accepts survives FormatAmount and
// back. It holds the CLI's seeds too: the CLI reads its money flags with
// ParseAmount.
func FuzzParseAmount(f *testing.F) {
	for _, s := range []string{"0.05", "12", "12.5", "50000", "0", "0.000001", "1.00", "", "-1", "1e3", "1e6", "0.0000001",
		"١", ".5", "1.", "00.10", " 0.10 ", strings.Repeat("9", 80)} {
		f.Add(s, uint8(6))
	}
	f.Add("115792089237316195423570985008687907853269984665640564039457584007913129639935", uint8(0))
	f.Add("1", uint8(255))
	f.Add("1.5", uint8(0))
	f.Add("1.5", uint8(77))
	f.Fuzz(func(t *testing.T, s string, decimals uint8) {
		n, err := ParseAmount(s, decimals)
		if err != nil {
			if n != nil {
				t.Fatalf("ParseAmount(%q, %d) returned %s with error %v", s, decimals, n, err)
			}
			return
		}
		plain := strings.TrimSpace(s)
		if plain == "" || strings.Trim(plain, "0123456789.") != "" || strings.Count(plain, ".") > 1 {
			t.Fatalf("ParseAmount accepted %q", s)
		}
		if n.Sign() < 0 || n.Cmp(maxUint256) > 0 {
			t.Fatalf("ParseAmount(%q, %d) = %s, out of uint256", s, decimals, n)
		}
		if !strings.Contains(plain, ".") && n.String() != strings.TrimLeft(plain, "0") && n.Sign() != 0 {
			t.Fatalf("ParseAmount(%q, %d) = %s, want the integer as atomic units", s, decimals, n)
		}
		back, err := ParseAmount(FormatAmount(n, decimals), decimals)
		if err != nil || back.Cmp(n) != 0 {
			t.Fatalf("round trip of ParseAmount(%q, %d) = %s: %q reads as %v, %v", s, decimals, n, FormatAmount(n, decimals), back, err)
		}
	})
}
