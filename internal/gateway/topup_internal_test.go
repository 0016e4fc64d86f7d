package gateway

import (
	"encoding/json"
	"math/big"
	"strings"
	"testing"
)

// FuzzParseTopUp: the top-up parser never panics; what it accepts is a JSON
// object whose only member is "amount", a string, which encoding/json reads
// the same; and an accepted amount is a decimal number within the bounds.
func FuzzParseTopUp(f *testing.F) {
	for _, s := range []string{
		`{"amount":"100000"}`, `{}`, `{"amount":100000}`, `{"amount":"1","amount":"2"}`, `{"Amount":"1"}`,
		`{"amount":"-1"}`, `{"amount":"0100"}`, `{"amount":"1e6"}`, `{"amount":"100000"} {}`, `[]`, ``, `{"amount":"\u0031"}`,
	} {
		f.Add([]byte(s))
	}
	s := &Server{cfg: Config{Decimals: 6, AssetSymbol: "USDC", Credits: &Credits{TopUpMin: big.NewInt(10_000), TopUpMax: big.NewInt(5_000_000)}}}
	f.Fuzz(func(t *testing.T, body []byte) {
		text, err := parseTopUp(body)
		if err != nil {
			return
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(body, &m); err != nil || len(m) != 1 {
			t.Fatalf("accepted %q, which is not a one-member object (%v)", body, err)
		}
		var v string
		if err := json.Unmarshal(m["amount"], &v); err != nil || v != text {
			t.Fatalf("accepted %q as %q; encoding/json reads %q (%v)", body, text, v, err)
		}
		a, err := s.topUpAmount(text)
		if err != nil {
			return
		}
		if strings.Trim(text, "0123456789") != "" || a.String() != text || a.Cmp(big.NewInt(10_000)) < 0 || a.Cmp(big.NewInt(5_000_000)) > 0 {
			t.Fatalf("accepted amount %q as %s", text, a)
		}
	})
}
