package gateway

import (
	"encoding/json"
	"math/big"
	"strings"
	"testing"

	"github.com/ethereum/go-ethereum/common"

	"github.com/llm4agents/llm4agents/x402/evm/exact"
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

// FuzzParseClaimKey: the sweep's parser of claim keys (read back from the
// store) never panics, and accepts exactly the keys exact.Key writes for the
// sweep's network and token: what it returns writes the same key again.
func FuzzParseClaimKey(f *testing.F) {
	const network = "eip155:84532"
	token := common.HexToAddress("0x036CbD53842c5426634e7929541eC2318f3dCF7e")
	from := common.HexToAddress("0x00000000000000000000000000000000000000aa")
	nonce := common.HexToHash("0x01")
	good := exact.Key(network, token, from, nonce)
	for _, s := range []string{
		good, strings.ToUpper(good), good + "/", "eip155:8453" + strings.TrimPrefix(good, network), network + "//" + "00",
		network + "/" + strings.Repeat("0", 40) + "/" + strings.Repeat("0", 40) + "/" + strings.Repeat("0", 64), "", "/", "\x00",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, key string) {
		gotFrom, gotNonce, err := parseClaimKey(key, network, token)
		if err != nil {
			if strings.Contains(err.Error(), "\n") && !strings.Contains(key, "\n") {
				t.Errorf("error text grew a line break: %q", err)
			}
			return
		}
		if again := exact.Key(network, token, gotFrom, gotNonce); again != key {
			t.Errorf("accepted %q, which writes back as %q", key, again)
		}
		if gotFrom == (common.Address{}) {
			t.Errorf("accepted the zero payer in %q", key)
		}
	})
}
