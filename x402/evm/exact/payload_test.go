package exact_test

import (
	"context"
	"encoding/json"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/google/go-cmp/cmp"

	"github.com/llm4agents/llm4agents/internal/testchain"
	"github.com/llm4agents/llm4agents/x402"
	"github.com/llm4agents/llm4agents/x402/evm/exact"
)

// bigComparer compares *big.Int by value.
var bigComparer = cmp.Comparer(func(a, b *big.Int) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Cmp(b) == 0
})

func TestParseAddress(t *testing.T) {
	const checksummed = "0x70997970C51812dc3A010C7d01b50e0d17dc79C8"
	want := common.HexToAddress(checksummed)
	tests := []struct {
		name string
		in   string
		ok   bool
	}{
		{"checksummed", checksummed, true},
		{"lowercase", strings.ToLower(checksummed), true},
		{"uppercase body", "0x" + strings.ToUpper(checksummed[2:]), true},
		{"bad checksum", "0x70997970c51812dc3A010C7d01b50e0d17dc79C8", false},
		{"one letter flipped", "0x70997970C51812dc3A010C7d01b50e0d17dc79c8", false},
		{"no prefix", checksummed[2:], false},
		{"no prefix, 42 chars", "00" + checksummed[2:], false},
		{"short", checksummed[:41], false},
		{"long", checksummed + "0", false},
		{"32-byte word", "0x000000000000000000000000" + checksummed[2:], false},
		{"non-hex", "0x70997970C51812dc3A010C7d01b50e0d17dc79CZ", false},
		{"hex with spaces", " 0x70997970C51812dc3A010C7d01b50e0d17dc79C", false},
		{"trailing newline", strings.ToLower(checksummed)[:41] + "\n", false},
		{"empty", "", false},
		{"prefix only", "0x", false},
		{"unicode digits", "0x７0997970c51812dc3a010c7d01b50e0d17dc79c", false},
		{"NUL", "0x70997970c51812dc3a010c7d01b50e0d17dc79c\x00", false},
		{"ENS name", "vitalik.eth", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := exact.ParseAddress(tc.in)
			if tc.ok {
				if err != nil || got != want {
					t.Errorf("ParseAddress(%q) = %s, %v; want %s", tc.in, got.Hex(), err, want.Hex())
				}
				return
			}
			if err == nil {
				t.Errorf("ParseAddress(%q) = %s; want an error", tc.in, got.Hex())
			}
		})
	}
	if a, err := exact.ParseAddress("0x0000000000000000000000000000000000000000"); err != nil || a != (common.Address{}) {
		t.Errorf("ParseAddress(zero) = %s, %v", a.Hex(), err)
	}
}

// TestParseAddressChecksum checks EIP-55 on many addresses: the checksummed form
// parses, and flipping the case of any one letter is refused.
func TestParseAddressChecksum(t *testing.T) {
	for i := range 500 {
		a := common.BytesToAddress(crypto.Keccak256([]byte{byte(i), byte(i >> 8)}))
		s := a.Hex()
		if got, err := exact.ParseAddress(s); err != nil || got != a {
			t.Fatalf("ParseAddress(%s) = %s, %v", s, got.Hex(), err)
		}
		for j := 2; j < len(s); j++ {
			b := []byte(s)
			switch {
			case b[j] >= 'a' && b[j] <= 'f':
				b[j] -= 'a' - 'A'
			case b[j] >= 'A' && b[j] <= 'F':
				b[j] += 'a' - 'A'
			default:
				continue
			}
			flipped := string(b)
			_, err := exact.ParseAddress(flipped)
			body := flipped[2:]
			uniform := body == strings.ToLower(body) || body == strings.ToUpper(body)
			if uniform != (err == nil) {
				t.Fatalf("ParseAddress(%s) error = %v; uniform case %v", flipped, err, uniform)
			}
		}
	}
}

func TestParseUint256(t *testing.T) {
	max := new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 256), big.NewInt(1))
	tests := []struct {
		name string
		in   string
		want *big.Int // nil: refused
	}{
		{"zero", "0", big.NewInt(0)},
		{"one", "1", big.NewInt(1)},
		{"amount", "10000", big.NewInt(10000)},
		{"2^64", "18446744073709551616", new(big.Int).Lsh(big.NewInt(1), 64)},
		{"max uint256", max.String(), max},
		{"2^256", new(big.Int).Add(max, big.NewInt(1)).String(), nil},
		{"78 nines", strings.Repeat("9", 78), nil},
		{"79 digits", "1" + strings.Repeat("0", 78), nil},
		{"1000 digits", "1" + strings.Repeat("0", 999), nil},
		{"double zero", "00", nil},
		{"leading zero", "010000", nil},
		{"plus", "+1", nil},
		{"minus", "-1", nil},
		{"minus zero", "-0", nil},
		{"leading space", " 1", nil},
		{"trailing space", "1 ", nil},
		{"trailing newline", "1\n", nil},
		{"exponent", "1e4", nil},
		{"fraction", "1.0", nil},
		{"hex", "0x10", nil},
		{"underscore", "1_000", nil},
		{"empty", "", nil},
		{"fullwidth digit", "１", nil},
		{"arabic-indic digit", "١", nil},
		{"NUL", "1\x00", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := exact.ParseUint256(tc.in)
			if tc.want == nil {
				if err == nil {
					t.Errorf("ParseUint256(%q) = %s; want an error", tc.in, got)
				}
				return
			}
			if err != nil || got.Cmp(tc.want) != 0 {
				t.Errorf("ParseUint256(%q) = %v, %v; want %s", tc.in, got, err, tc.want)
			}
		})
	}
}

func TestChainID(t *testing.T) {
	tests := []struct {
		in   string
		want string // "": refused
	}{
		{"eip155:1", "1"},
		{"eip155:1337", "1337"},
		{"eip155:8453", "8453"},
		{"eip155:84532", "84532"},
		{"eip155:18446744073709551615", "18446744073709551615"},
		{"eip155:0", ""},
		{"eip155:01", ""},
		{"eip155:-1", ""},
		{"eip155:+1", ""},
		{"eip155:0x2105", ""},
		{"eip155:1e3", ""},
		{"eip155:", ""},
		{"eip155", ""},
		{"eip155:1 ", ""},
		{" eip155:1", ""},
		{"eip155:1:2", ""},
		{"eip155:123456789012345678901", ""},
		{"EIP155:1", ""},
		{"eip-155:1", ""},
		{"base", ""},
		{"base-sepolia", ""},
		{"solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp", ""},
		{"", ""},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := exact.ChainID(tc.in)
			if tc.want == "" {
				if err == nil {
					t.Errorf("ChainID(%q) = %s; want an error", tc.in, got)
				}
				return
			}
			if err != nil || got.String() != tc.want {
				t.Errorf("ChainID(%q) = %v, %v; want %s", tc.in, got, err, tc.want)
			}
		})
	}
}

func TestParseExtra(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want *exact.Extra // nil: refused
	}{
		{"name and version", `{"name":"USD Coin","version":"2"}`, &exact.Extra{Name: "USD Coin", Version: "2"}},
		{"eip3009 method", `{"name":"USDC","version":"2","assetTransferMethod":"eip3009"}`, &exact.Extra{Name: "USDC", Version: "2", AssetTransferMethod: "eip3009"}},
		{"other keys", `{"name":"USDC","version":"2","decimals":6,"nonce":"abc"}`, &exact.Extra{Name: "USDC", Version: "2"}},
		{"unicode name", `{"name":"Ünïcødé ✓","version":"1.0"}`, &exact.Extra{Name: "Ünïcødé ✓", Version: "1.0"}},
		{"missing", ``, nil},
		{"null", `null`, nil},
		{"empty object", `{}`, nil},
		{"name only", `{"name":"USDC"}`, nil},
		{"version only", `{"version":"2"}`, nil},
		{"empty name", `{"name":"","version":"2"}`, nil},
		{"empty version", `{"name":"USDC","version":""}`, nil},
		{"null name", `{"name":null,"version":"2"}`, nil},
		{"numeric version", `{"name":"USDC","version":2}`, nil},
		{"array", `[]`, nil},
		{"string", `"USDC"`, nil},
		{"truncated", `{"name":"USDC","version":"2"`, nil},
		{"permit2", `{"name":"USDC","version":"2","assetTransferMethod":"permit2"}`, nil},
		{"erc7710", `{"name":"USDC","version":"2","assetTransferMethod":"erc7710"}`, nil},
		{"method case", `{"name":"USDC","version":"2","assetTransferMethod":"EIP3009"}`, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var raw json.RawMessage
			if tc.in != "" {
				raw = json.RawMessage(tc.in)
			}
			got, err := exact.ParseExtra(raw)
			if tc.want == nil {
				if err == nil {
					t.Errorf("ParseExtra(%s) = %+v; want an error", tc.in, got)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseExtra(%s): %v", tc.in, err)
			}
			if diff := cmp.Diff(*tc.want, got); diff != "" {
				t.Errorf("ParseExtra(%s) (-want +got):\n%s", tc.in, diff)
			}
		})
	}
}

func TestParsePayload(t *testing.T) {
	const (
		from  = "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266"
		to    = "0x70997970C51812dc3A010C7d01b50e0d17dc79C8"
		nonce = "0x1111111111111111111111111111111111111111111111111111111111111111"
		sig   = "0x7cb5821558d6cf39e8e6282ce098a9c63ee53a89fa4289d5338fd2927313bc5d5445ee5a5b8e34579a11e9fb4894a561d868478e1841cb85f8d93bb16c0b1d7e1c"
	)
	valid := `{"signature":"` + sig + `","authorization":{"from":"` + from + `","to":"` + to + `","value":"10000","validAfter":"0","validBefore":"1900000000","nonce":"` + nonce + `"}}`
	want := &exact.Payload{
		Authorization: exact.Authorization{
			From:        common.HexToAddress(from),
			To:          common.HexToAddress(to),
			Value:       big.NewInt(10000),
			ValidAfter:  big.NewInt(0),
			ValidBefore: big.NewInt(1900000000),
			Nonce:       common.HexToHash(nonce),
		},
		Signature: hexutil.MustDecode(sig),
	}
	got, err := exact.ParsePayload(json.RawMessage(valid))
	if err != nil {
		t.Fatalf("ParsePayload(valid): %v", err)
	}
	if diff := cmp.Diff(want, got, bigComparer); diff != "" {
		t.Errorf("ParsePayload (-want +got):\n%s", diff)
	}
	// JSON is the wire form the official client sends: it parses back to the same
	// value and re-encodes to the same text.
	b, err := json.Marshal(got.JSON())
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != valid {
		t.Errorf("JSON() = %s\nwant     %s", b, valid)
	}

	longSig := "0x" + strings.Repeat("ab", 8<<10)
	hostile := []struct{ name, in string }{
		{"not JSON", `{`},
		{"null", `null`},
		{"array", `[]`},
		{"string", `"x"`},
		{"empty object", `{}`},
		{"trailing data", valid + `{}`},
		{"signature number", strings.Replace(valid, `"`+sig+`"`, `1`, 1)},
		{"signature without 0x", strings.Replace(valid, sig, sig[2:], 1)},
		{"signature 0X", strings.Replace(valid, sig, "0X"+sig[2:], 1)},
		{"signature over 8 KiB", strings.Replace(valid, sig, longSig+"ab", 1)},
		{"authorization null", `{"signature":"` + sig + `","authorization":null}`},
		{"authorization array", `{"signature":"` + sig + `","authorization":[]}`},
		{"nonce 0X", strings.Replace(valid, nonce, "0X"+nonce[2:], 1)},
		{"nonce decimal", strings.Replace(valid, `"`+nonce+`"`, `"12345"`, 1)},
		{"nonce non-hex", strings.Replace(valid, nonce, "0x"+strings.Repeat("zz", 32), 1)},
		{"value empty", strings.Replace(valid, `"value":"10000"`, `"value":""`, 1)},
		{"value null", strings.Replace(valid, `"value":"10000"`, `"value":null`, 1)},
		{"from missing", strings.Replace(valid, `"from":"`+from+`",`, ``, 1)},
		{"unknown key", strings.Replace(valid, `{"signature"`, `{"x":1,"signature"`, 1)},
		{"permit2", `{"signature":"` + sig + `","permit2Authorization":{"from":"` + from + `"}}`},
		{"permit2 beside authorization", strings.Replace(valid, `{"signature"`, `{"permit2Authorization":null,"signature"`, 1)},
	}
	for _, tc := range hostile {
		t.Run(tc.name, func(t *testing.T) {
			if p, err := exact.ParsePayload(json.RawMessage(tc.in)); err == nil {
				t.Errorf("ParsePayload(%.200s) = %+v; want an error", tc.in, p)
			}
		})
	}
	// A signature of exactly 8 KiB is the largest accepted.
	if p, err := exact.ParsePayload(json.RawMessage(strings.Replace(valid, sig, longSig, 1))); err != nil || len(p.Signature) != 8<<10 {
		t.Errorf("ParsePayload(8 KiB signature) = %v", err)
	}
}

// TestParsePayloadKeyCase: encoding/json matches keys case-insensitively, so a
// payload with "VALIDBEFORE" or "Signature" is taken as if spelled right, although
// ParsePayload promises to refuse unknown keys and the official facilitators read
// the exact spelling (they would see the field as missing).
func TestParsePayloadKeyCase(t *testing.T) {
	const valid = `{"signature":"0x01","authorization":{"from":"0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266","to":"0x70997970C51812dc3A010C7d01b50e0d17dc79C8","value":"10000","validAfter":"0","validBefore":"1900000000","nonce":"0x1111111111111111111111111111111111111111111111111111111111111111"}}`
	for _, k := range []struct{ old, new string }{
		{`"signature"`, `"Signature"`},
		{`"authorization"`, `"AUTHORIZATION"`},
		{`"validBefore"`, `"validbefore"`},
		{`"nonce"`, `"Nonce"`},
	} {
		in := strings.Replace(valid, k.old, k.new, 1)
		if _, err := exact.ParsePayload(json.RawMessage(in)); err == nil {
			t.Errorf("ParsePayload with key %s accepted; want an error", k.new)
		}
	}
}

// TestKey checks D4: every re-encoding of one authorization has the
// same key, and the key is lower-case hex of (network, token, from, nonce).
func TestKey(t *testing.T) {
	key := testchain.DevKey(0)
	signer := exact.NewKeySigner(key)
	now := time.Unix(1_800_000_000, 0)
	nonce := common.HexToHash("0xABCDEF0000000000000000000000000000000000000000000000000000000001")
	req := x402.PaymentRequirements{
		Scheme:            "exact",
		Network:           "eip155:1337",
		Amount:            "10000",
		Asset:             "0x5FbDB2315678afecb367f032d93F642f64180aa3",
		PayTo:             "0x70997970C51812dc3A010C7d01b50e0d17dc79C8",
		MaxTimeoutSeconds: 60,
		Extra:             json.RawMessage(`{"name":"USD Coin","version":"2"}`),
	}
	pr := &x402.PaymentRequired{X402Version: 2, Resource: &x402.ResourceInfo{URL: "https://x"}, Accepts: []x402.PaymentRequirements{req}}
	p, err := exact.NewPaymentPayload(context.Background(), signer, pr, 0, exact.SignOptions{Now: func() time.Time { return now }, Nonce: &nonce})
	if err != nil {
		t.Fatal(err)
	}
	pl, err := exact.ParsePayload(p.Payload)
	if err != nil {
		t.Fatal(err)
	}
	sig := hexutil.Encode(pl.Signature)
	from := signer.Address().Hex()
	v := &exact.Verifier{ChainID: big.NewInt(1337), Now: func() time.Time { return now }}

	want := "eip155:1337/5fbdb2315678afecb367f032d93f642f64180aa3/f39fd6e51aad88f6f4ce6ab8827279cfffb92266/abcdef0000000000000000000000000000000000000000000000000000000001"
	if got := exact.Key(req.Network, common.HexToAddress(req.Asset), signer.Address(), nonce); got != want {
		t.Fatalf("Key = %s\nwant  %s", got, want)
	}

	withPayload := func(edit func(string) string) func(*x402.PaymentPayload, *x402.PaymentRequirements) {
		return func(p *x402.PaymentPayload, _ *x402.PaymentRequirements) {
			p.Payload = json.RawMessage(edit(string(p.Payload)))
		}
	}
	tests := []struct {
		name      string
		edit      func(p *x402.PaymentPayload, req *x402.PaymentRequirements)
		recovered bool
	}{
		{name: "as signed", edit: func(*x402.PaymentPayload, *x402.PaymentRequirements) {}, recovered: true},
		{name: "v 0 or 1", edit: withPayload(func(s string) string {
			v := hexutil.MustDecode(sig)
			v[64] -= 27
			return strings.Replace(s, sig, hexutil.Encode(v), 1)
		}), recovered: true},
		{name: "high s", edit: withPayload(func(s string) string {
			return strings.Replace(s, sig, hexutil.Encode(highS(hexutil.MustDecode(sig))), 1)
		})},
		{name: "lowercase from", edit: withPayload(func(s string) string {
			return strings.Replace(s, from, strings.ToLower(from), 1)
		}), recovered: true},
		{name: "uppercase nonce", edit: withPayload(func(s string) string {
			return strings.Replace(s, nonce.Hex(), "0x"+strings.ToUpper(nonce.Hex()[2:]), 1)
		}), recovered: true},
		{name: "re-encoded JSON", edit: withPayload(func(s string) string {
			var m map[string]any
			if err := json.Unmarshal([]byte(s), &m); err != nil {
				t.Fatal(err)
			}
			b, err := json.MarshalIndent(map[string]any{"authorization": m["authorization"], "signature": m["signature"]}, "", "\t")
			if err != nil {
				t.Fatal(err)
			}
			return string(b)
		}), recovered: true},
		{name: "lowercase asset in requirements", edit: func(p *x402.PaymentPayload, req *x402.PaymentRequirements) {
			req.Asset = strings.ToLower(req.Asset)
		}, recovered: true},
		{name: "uppercase asset in accepted", edit: func(p *x402.PaymentPayload, req *x402.PaymentRequirements) {
			p.Accepted = json.RawMessage(strings.Replace(string(p.Accepted), req.Asset[2:], strings.ToUpper(req.Asset[2:]), 1))
		}, recovered: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p2 := *p
			r := req
			tc.edit(&p2, &r)
			vd, recovered, err := v.Check(&p2, r)
			if err != nil {
				t.Fatalf("Check: %v", err)
			}
			if recovered != tc.recovered {
				t.Errorf("recovered = %v, want %v", recovered, tc.recovered)
			}
			if got := vd.Key(); got != want {
				t.Errorf("Key = %s\nwant  %s", got, want)
			}
		})
	}

	// A different payer, token, nonce or network is a different key.
	other := common.HexToAddress("0x0000000000000000000000000000000000000001")
	for name, k := range map[string]string{
		"network": exact.Key("eip155:8453", common.HexToAddress(req.Asset), signer.Address(), nonce),
		"token":   exact.Key(req.Network, other, signer.Address(), nonce),
		"from":    exact.Key(req.Network, common.HexToAddress(req.Asset), other, nonce),
		"nonce":   exact.Key(req.Network, common.HexToAddress(req.Asset), signer.Address(), common.Hash{}),
	} {
		if k == want {
			t.Errorf("Key with another %s is the same", name)
		}
	}
}
