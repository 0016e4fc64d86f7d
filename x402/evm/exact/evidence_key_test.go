package exact

import (
	"strings"
	"testing"

	"github.com/ethereum/go-ethereum/common"
)

// TestParseKey: ParseKey reads back what Key writes, and nothing else.
func TestParseKey(t *testing.T) {
	token := common.HexToAddress("0x5FbDB2315678afecb367f032d93F642f64180aa3")
	from := common.HexToAddress("0x70997970C51812dc3A010C7d01b50e0d17dc79C8")
	nonce := common.HexToHash("0x" + strings.Repeat("ab", 32))
	key := Key("eip155:8453", token, from, nonce)
	network, gotToken, gotFrom, gotNonce, err := ParseKey(key)
	if err != nil || network != "eip155:8453" || gotToken != token || gotFrom != from || gotNonce != nonce {
		t.Fatalf("ParseKey(%q) = %s %s %s %s, %v", key, network, gotToken, gotFrom, gotNonce, err)
	}
	for _, bad := range []string{
		"",
		"eip155:8453",
		strings.Replace(key, "eip155:8453", "", 1),
		key + "/00",
		strings.ToUpper(key),
		key[:len(key)-2],
		key[:len(key)-1] + "g",
		strings.Replace(key, "/", "//", 1),
	} {
		if _, _, _, _, err := ParseKey(bad); err == nil {
			t.Errorf("ParseKey(%q) took it", bad)
		}
	}
}

// FuzzParseKey: ParseKey never panics, and what it takes, Key writes back
// byte for byte.
func FuzzParseKey(f *testing.F) {
	f.Add(Key("eip155:8453", common.Address{1}, common.Address{2}, common.Hash{3}))
	f.Add("a/b/c/d")
	f.Fuzz(func(t *testing.T, key string) {
		network, token, from, nonce, err := ParseKey(key)
		if err == nil && Key(network, token, from, nonce) != key {
			t.Fatalf("ParseKey(%q) took it, but Key writes %q", key, Key(network, token, from, nonce))
		}
	})
}
