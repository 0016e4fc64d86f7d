package upto_test

import (
	"encoding/json"
	"math/big"
	"strings"
	"testing"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/google/go-cmp/cmp"

	"github.com/llm4agents/llm4agents/x402/evm/upto"
)

// bigComparer compares *big.Int by value.
var bigComparer = cmp.Comparer(func(a, b *big.Int) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Cmp(b) == 0
})

// A valid payload as the official client writes it (viem's checksummed
// addresses, a decimal nonce), and its parts for editing.
const (
	vFrom        = "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266"
	vToken       = "0x5FbDB2315678afecb367f032d93F642f64180aa3"
	vPayTo       = "0x70997970C51812dc3A010C7d01b50e0d17dc79C8"
	vFacilitator = "0x90F79bf6EB2c4f870365E785982E1f101E93b906"
	vNonce       = "7719472615821079694904732333912527190217998977709370935963838933860875309329" // 0x1111…11
	vSig         = "0x1df2d0d45a73c5cb8c690fb941b12cf321e9f1ab096afbba60ba51438f5a223e0e3cd3f6fb2fdb406848a6e3a9bdb41a76ae779f1cd81bd716dfcc9abf195a261b"
	validPayload = `{"signature":"` + vSig + `","permit2Authorization":{"from":"` + vFrom + `","permitted":{"token":"` + vToken +
		`","amount":"5000000"},"spender":"0x4020A4f3b7b90ccA423B9fabCc0CE57C6C240002","nonce":"` + vNonce +
		`","deadline":"1900000000","witness":{"to":"` + vPayTo + `","facilitator":"` + vFacilitator + `","validAfter":"0"}}}`
)

// hostilePayloads are payloads ParsePayload must refuse; FuzzParsePayload
// seeds its corpus with them.
func hostilePayloads() []struct{ name, in string } {
	r := func(old, new string) string { return strings.Replace(validPayload, old, new, 1) }
	longSig := "0x" + strings.Repeat("ab", 8<<10)
	return []struct{ name, in string }{
		{"not JSON", `{`},
		{"null", `null`},
		{"array", `[]`},
		{"string", `"x"`},
		{"empty object", `{}`},
		{"trailing data", validPayload + `{}`},
		{"trailing NUL", validPayload + "\x00"},
		{"signature missing", r(`"signature":"`+vSig+`",`, ``)},
		{"signature number", r(`"`+vSig+`"`, `1`)},
		{"signature null", r(`"`+vSig+`"`, `null`)},
		{"signature without 0x", r(vSig, vSig[2:])},
		{"signature 0X", r(vSig, "0X"+vSig[2:])},
		{"signature odd length", r(vSig, vSig+"a")},
		{"signature non-hex", r(vSig, "0xzz"+vSig[4:])},
		{"signature over 8 KiB", r(vSig, longSig+"ab")},
		{"permit2Authorization missing", `{"signature":"` + vSig + `"}`},
		{"permit2Authorization null", `{"signature":"` + vSig + `","permit2Authorization":null}`},
		{"permit2Authorization array", `{"signature":"` + vSig + `","permit2Authorization":[]}`},
		{"EIP-3009 authorization", `{"signature":"` + vSig + `","authorization":{"from":"` + vFrom + `"}}`},
		{"unknown key", r(`{"signature"`, `{"x":1,"signature"`)},
		{"unknown nested key", r(`"validAfter":"0"`, `"validAfter":"0","validBefore":"1"`)},
		{"duplicate key", r(`"spender":`, `"spender":"0x4020A4f3b7b90ccA423B9fabCc0CE57C6C240002","spender":`)},
		{"duplicate nested key", r(`"amount":"5000000"`, `"amount":"1","amount":"5000000"`)},
		{"key case", r(`"nonce"`, `"Nonce"`)},
		{"from missing", r(`"from":"`+vFrom+`",`, ``)},
		{"witness.facilitator missing", r(`"facilitator":"`+vFacilitator+`",`, ``)},
		{"permitted empty", r(`{"token":"`+vToken+`","amount":"5000000"}`, `{}`)},
		{"from bad checksum", r(vFrom, "0xf39fd6e51aad88F6F4ce6aB8827279cffFb92266")},
		{"from short", r(vFrom, vFrom[:41])},
		{"from no prefix", r(vFrom, "00"+vFrom[2:])},
		{"token 32-byte word", r(vToken, "0x000000000000000000000000"+vToken[2:])},
		{"facilitator ENS name", r(vFacilitator, "facilitator.eth")},
		{"amount number", r(`"5000000"`, `5000000`)},
		{"amount empty", r(`"5000000"`, `""`)},
		{"amount negative", r(`"5000000"`, `"-5000000"`)},
		{"amount leading zero", r(`"5000000"`, `"05000000"`)},
		{"amount plus", r(`"5000000"`, `"+5000000"`)},
		{"amount hex", r(`"5000000"`, `"0x4c4b40"`)},
		{"amount float", r(`"5000000"`, `"5e6"`)},
		{"amount space", r(`"5000000"`, `" 5000000"`)},
		{"amount 2^256", r(`"5000000"`, `"115792089237316195423570985008687907853269984665640564039457584007913129639936"`)},
		{"deadline null", r(`"1900000000"`, `null`)},
		{"validAfter negative", r(`"validAfter":"0"`, `"validAfter":"-1"`)},
		{"nonce number", r(`"`+vNonce+`"`, vNonce)},
		{"nonce empty", r(vNonce, ``)},
		{"nonce leading zero", r(vNonce, "0"+vNonce)},
		{"nonce 2^256", r(vNonce, "115792089237316195423570985008687907853269984665640564039457584007913129639936")},
		{"nonce hex prefix only", r(vNonce, "0x")},
		{"nonce hex 33 bytes", r(vNonce, "0x01"+strings.Repeat("11", 32))},
		{"nonce hex 0X", r(vNonce, "0X11")},
		{"nonce hex non-hex", r(vNonce, "0x1g")},
		{"nonce hex signed", r(vNonce, "-0x11")},
	}
}

func TestParsePayload(t *testing.T) {
	want := &upto.Payload{
		Authorization: upto.Authorization{
			From:      common.HexToAddress(vFrom),
			Permitted: upto.TokenPermissions{Token: common.HexToAddress(vToken), Amount: big.NewInt(5_000_000)},
			Spender:   upto.ProxyAddress,
			Nonce:     common.HexToHash("0x1111111111111111111111111111111111111111111111111111111111111111").Big(),
			Deadline:  big.NewInt(1_900_000_000),
			Witness: upto.Witness{
				To:          common.HexToAddress(vPayTo),
				Facilitator: common.HexToAddress(vFacilitator),
				ValidAfter:  big.NewInt(0),
			},
		},
		Signature: hexutil.MustDecode(vSig),
	}
	got, err := upto.ParsePayload(json.RawMessage(validPayload))
	if err != nil {
		t.Fatalf("ParsePayload(valid): %v", err)
	}
	if diff := cmp.Diff(want, got, bigComparer); diff != "" {
		t.Errorf("ParsePayload (-want +got):\n%s", diff)
	}
	// JSON is the wire form the official client sends, key order included.
	b, err := json.Marshal(got.JSON())
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != validPayload {
		t.Errorf("JSON() = %s\nwant     %s", b, validPayload)
	}

	for _, tc := range hostilePayloads() {
		t.Run(tc.name, func(t *testing.T) {
			p, err := upto.ParsePayload(json.RawMessage(tc.in))
			if err == nil {
				t.Fatalf("ParsePayload(%.200s) = %+v; want an error", tc.in, p)
			}
			// Errors describe the fault, never echo a signature.
			if strings.Contains(err.Error(), vSig[2:20]) {
				t.Errorf("error %q quotes the signature", err)
			}
		})
	}

	accepted := []struct {
		name, in string
		check    func(*upto.Payload) bool
	}{
		{"whitespace", strings.ReplaceAll(strings.ReplaceAll(validPayload, ",", " ,\n\t"), ":", " : "), nil},
		{"lowercase addresses", strings.NewReplacer(vFrom, strings.ToLower(vFrom), vToken, strings.ToLower(vToken),
			vPayTo, strings.ToLower(vPayTo), vFacilitator, strings.ToLower(vFacilitator)).Replace(validPayload), nil},
		// JSON.parse reads an escaped key as the key it spells; so do we.
		{"escaped key", strings.Replace(validPayload, `"nonce"`, `"non\u0063e"`, 1), nil},
		{"escaped value", strings.Replace(validPayload, `"deadline":"1900000000"`, `"deadline":"\u0031900000000"`, 1), nil},
		{"empty signature", strings.Replace(validPayload, vSig, "", 1), func(p *upto.Payload) bool { return p.Signature == nil }},
		{"0x signature", strings.Replace(validPayload, vSig, "0x", 1), func(p *upto.Payload) bool { return p.Signature == nil }},
		{"8 KiB signature", strings.Replace(validPayload, vSig, "0x"+strings.Repeat("ab", 8<<10), 1), func(p *upto.Payload) bool { return len(p.Signature) == 8<<10 }},
		{"hex nonce, as the spec's example", strings.Replace(validPayload, vNonce, "0x"+strings.Repeat("11", 32), 1),
			func(p *upto.Payload) bool { return p.Authorization.Nonce.Cmp(want.Authorization.Nonce) == 0 }},
		{"short hex nonce", strings.Replace(validPayload, vNonce, "0x0Ab", 1), func(p *upto.Payload) bool { return p.Authorization.Nonce.Int64() == 0xab }},
		{"max uint256 amount", strings.Replace(validPayload, `"5000000"`, `"115792089237316195423570985008687907853269984665640564039457584007913129639935"`, 1),
			func(p *upto.Payload) bool { return p.Authorization.Permitted.Amount.BitLen() == 256 }},
	}
	for _, tc := range accepted {
		t.Run("accepts "+tc.name, func(t *testing.T) {
			p, err := upto.ParsePayload(json.RawMessage(tc.in))
			if err != nil {
				t.Fatalf("ParsePayload: %v", err)
			}
			if tc.check != nil && !tc.check(p) {
				t.Errorf("ParsePayload = %+v", p)
			}
		})
	}
}

// TestNonceIsDecimalOnTheWire: a hex nonce is accepted, and written back in
// decimal, as the official implementations write it.
func TestNonceIsDecimalOnTheWire(t *testing.T) {
	p, err := upto.ParsePayload(json.RawMessage(strings.Replace(validPayload, vNonce, "0x"+strings.Repeat("11", 32), 1)))
	if err != nil {
		t.Fatal(err)
	}
	if got := p.JSON().Authorization.Nonce; got != vNonce {
		t.Errorf("nonce on the wire = %q, want %q", got, vNonce)
	}
}

func TestParseNonce(t *testing.T) {
	max := "115792089237316195423570985008687907853269984665640564039457584007913129639935"
	tests := []struct {
		in   string
		want string // decimal; "" when refused
	}{
		{"0", "0"},
		{"1", "1"},
		{max, max},
		{"0x0", "0"},
		{"0x00", "0"},
		{"0xff", "255"},
		{"0xFF", "255"},
		{"0x" + strings.Repeat("f", 64), max},
		{"0x" + strings.Repeat("0", 64), "0"},
		{"", ""},
		{"00", ""},
		{"-1", ""},
		{"1.0", ""},
		{"0x", ""},
		{"0x" + strings.Repeat("0", 65), ""},
		{"0X1", ""},
		{"x1", ""},
		{"0x-1", ""},
		{"0x 1", ""},
		{"１", ""},
	}
	for _, tc := range tests {
		got, err := upto.ParseNonce(tc.in)
		switch {
		case tc.want == "" && err == nil:
			t.Errorf("ParseNonce(%q) = %s; want an error", tc.in, got)
		case tc.want != "" && (err != nil || got.String() != tc.want):
			t.Errorf("ParseNonce(%q) = %v, %v; want %s", tc.in, got, err, tc.want)
		}
	}
}

func TestParseExtra(t *testing.T) {
	fac := common.HexToAddress(vFacilitator)
	tests := []struct {
		name string
		in   string
		want *upto.Extra // nil: refused
	}{
		{"facilitator only", `{"facilitatorAddress":"` + vFacilitator + `"}`, &upto.Extra{FacilitatorAddress: fac}},
		{"lowercase", `{"facilitatorAddress":"` + strings.ToLower(vFacilitator) + `"}`, &upto.Extra{FacilitatorAddress: fac}},
		{"with EIP-2612 domain", `{"facilitatorAddress":"` + vFacilitator + `","name":"USD Coin","version":"2"}`,
			&upto.Extra{FacilitatorAddress: fac, Name: "USD Coin", Version: "2"}},
		{"other keys", `{"facilitatorAddress":"` + vFacilitator + `","paymentFlow":"authorization","x":[1]}`, &upto.Extra{FacilitatorAddress: fac}},
		{"missing", ``, nil},
		{"null", `null`, nil},
		{"empty object", `{}`, nil},
		{"name and version only", `{"name":"USD Coin","version":"2"}`, nil},
		{"key case", `{"FacilitatorAddress":"` + vFacilitator + `"}`, nil},
		{"empty address", `{"facilitatorAddress":""}`, nil},
		{"null address", `{"facilitatorAddress":null}`, nil},
		{"numeric address", `{"facilitatorAddress":1}`, nil},
		{"bad checksum", `{"facilitatorAddress":"0x90f79bf6EB2c4f870365E785982E1f101E93b906"}`, nil},
		{"numeric version", `{"facilitatorAddress":"` + vFacilitator + `","version":2}`, nil},
		{"null name", `{"facilitatorAddress":"` + vFacilitator + `","name":null}`, nil},
		{"array", `[]`, nil},
		{"truncated", `{"facilitatorAddress":"` + vFacilitator + `"`, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var raw json.RawMessage
			if tc.in != "" {
				raw = json.RawMessage(tc.in)
			}
			got, err := upto.ParseExtra(raw)
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
