package x402_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/llm4agents/llm4agents/x402"
)

func TestMatch(t *testing.T) {
	offer := captureRequirements
	with := func(f func(*x402.PaymentRequirements)) x402.PaymentRequirements {
		r := captureRequirements
		f(&r)
		return r
	}
	extra := func(s string) func(*x402.PaymentRequirements) {
		return func(r *x402.PaymentRequirements) {
			if s == "" {
				r.Extra = nil
				return
			}
			r.Extra = json.RawMessage(s)
		}
	}
	tests := []struct {
		name     string
		offer    x402.PaymentRequirements
		accepted x402.PaymentRequirements
		wantErr  string // a word the error names; empty for a match
	}{
		{"equal", offer, offer, ""},
		{"zero values", x402.PaymentRequirements{}, x402.PaymentRequirements{}, ""},

		{"scheme differs", offer, with(func(r *x402.PaymentRequirements) { r.Scheme = "upto" }), "scheme"},
		{"scheme case differs", offer, with(func(r *x402.PaymentRequirements) { r.Scheme = "Exact" }), "scheme"},
		{"network differs", offer, with(func(r *x402.PaymentRequirements) { r.Network = "eip155:8453" }), "network"},
		{"network case differs", offer, with(func(r *x402.PaymentRequirements) { r.Network = "EIP155:1337" }), "network"},
		{"amount one unit more", offer, with(func(r *x402.PaymentRequirements) { r.Amount = "10001" }), "amount"},
		{"amount one unit less", offer, with(func(r *x402.PaymentRequirements) { r.Amount = "9999" }), "amount"},
		{"amount other spelling", offer, with(func(r *x402.PaymentRequirements) { r.Amount = "010000" }), "amount"},
		{"amount empty", offer, with(func(r *x402.PaymentRequirements) { r.Amount = "" }), "amount"},
		{"asset differs", offer, with(func(r *x402.PaymentRequirements) { r.Asset = "0x5FbDB2315678afecb367f032d93F642f64180aa4" }), "asset"},
		{"payTo differs", offer, with(func(r *x402.PaymentRequirements) { r.PayTo = "0x70997970C51812dc3A010C7d01b50e0d17dc79C9" }), "payTo"},
		{"maxTimeoutSeconds more", offer, with(func(r *x402.PaymentRequirements) { r.MaxTimeoutSeconds = 61 }), "maxTimeoutSeconds"},
		{"maxTimeoutSeconds zero", offer, with(func(r *x402.PaymentRequirements) { r.MaxTimeoutSeconds = 0 }), "maxTimeoutSeconds"},

		{"asset lower case", offer, with(func(r *x402.PaymentRequirements) { r.Asset = strings.ToLower(r.Asset) }), ""},
		{"asset upper case", offer, with(func(r *x402.PaymentRequirements) { r.Asset = "0x" + strings.ToUpper(r.Asset[2:]) }), ""},
		{"payTo lower case", offer, with(func(r *x402.PaymentRequirements) { r.PayTo = strings.ToLower(r.PayTo) }), ""},
		{"payTo upper case", offer, with(func(r *x402.PaymentRequirements) { r.PayTo = "0x" + strings.ToUpper(r.PayTo[2:]) }), ""},

		{"extra {} vs missing", with(extra(`{}`)), with(extra("")), ""},
		{"extra {} vs {}", with(extra(`{}`)), with(extra(`{}`)), ""},
		{"extra {} vs null", with(extra(`{}`)), with(extra(`null`)), ""},
		{"extra {} vs keys", with(extra(`{}`)), with(extra(`{"name":"USD Coin"}`)), ""},
		{"extra missing vs keys", with(extra("")), offer, ""},
		{"extra null vs keys", with(extra(`null`)), offer, ""},
		{"extra key added", offer, with(extra(`{"name":"USD Coin","version":"2","assetTransferMethod":"eip3009"}`)), ""},
		{"extra key order", offer, with(extra(`{"version":"2","name":"USD Coin"}`)), ""},
		{"extra whitespace", offer, with(extra(" {\n\t\"name\" : \"USD Coin\" , \"version\":\"2\" } ")), ""},
		{"extra duplicate key, last wins", offer, with(extra(`{"name":"x","name":"USD Coin","version":"2"}`)), ""},
		{"extra missing", offer, with(extra("")), "extra"},
		{"extra null", offer, with(extra(`null`)), "extra"},
		{"extra empty", offer, with(extra(`{}`)), "extra"},
		{"extra missing key", offer, with(extra(`{"name":"USD Coin"}`)), "version"},
		{"extra key renamed", offer, with(extra(`{"name":"USD Coin","Version":"2"}`)), "version"},
		{"extra value differs", offer, with(extra(`{"name":"USD Coin","version":"1"}`)), "version"},
		{"extra value case differs", offer, with(extra(`{"name":"usd coin","version":"2"}`)), "name"},
		{"extra value type differs", offer, with(extra(`{"name":"USD Coin","version":2}`)), "version"},
		{"extra value null", offer, with(extra(`{"name":null,"version":"2"}`)), "name"},

		{"nested semantically equal", with(extra(`{"a":{"x":1,"y":[1,"2",{"z":true}]},"n":10}`)),
			with(extra(`{"n":1e1,"a":{"y":[1.0,"2",{"z":true}],"x":1}}`)), ""},
		{"nested null kept", with(extra(`{"a":null}`)), with(extra(`{"a":null}`)), ""},
		{"nested null vs missing", with(extra(`{"a":null}`)), with(extra(`{}`)), "a"},
		{"nested value differs", with(extra(`{"a":{"x":1}}`)), with(extra(`{"a":{"x":2}}`)), "a"},
		{"nested key added", with(extra(`{"a":{"x":1}}`)), with(extra(`{"a":{"x":1,"y":2}}`)), "a"},
		{"nested array order", with(extra(`{"a":[1,2]}`)), with(extra(`{"a":[2,1]}`)), "a"},
		{"nested array longer", with(extra(`{"a":[1]}`)), with(extra(`{"a":[1,1]}`)), "a"},
		{"nested object vs array", with(extra(`{"a":{}}`)), with(extra(`{"a":[]}`)), "a"},

		{"offer extra array", with(extra(`[]`)), with(extra(`[]`)), "extra"},
		{"offer extra string", with(extra(`"USD Coin"`)), with(extra(`"USD Coin"`)), "extra"},
		{"offer extra number", with(extra(`2`)), offer, "extra"},
		{"offer extra true", with(extra(`true`)), offer, "extra"},
		{"accepted extra array", offer, with(extra(`[{"name":"USD Coin","version":"2"}]`)), "extra"},
		{"accepted extra string", with(extra(`{}`)), with(extra(`"x"`)), "extra"},
		{"accepted extra number", offer, with(extra(`2`)), "extra"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := x402.Match(tc.offer, tc.accepted)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("Match = %v, want a match", err)
			case tc.wantErr != "" && err == nil:
				t.Errorf("Match = nil, want an error naming %q", tc.wantErr)
			case tc.wantErr != "" && !strings.Contains(err.Error(), tc.wantErr):
				t.Errorf("Match = %q, want an error naming %q", err, tc.wantErr)
			}
		})
	}
}

func TestFindMatch(t *testing.T) {
	a := captureRequirements
	b := captureRequirements
	b.Amount = "25000"
	c := captureRequirements
	c.Network = "eip155:84532"
	c.Extra = json.RawMessage(`{}`)
	bad := captureRequirements
	bad.Extra = json.RawMessage(`[]`)
	offers := []x402.PaymentRequirements{a, b, c}

	withExtra := func(r x402.PaymentRequirements, extra string) x402.PaymentRequirements {
		if extra == "" {
			r.Extra = nil
		} else {
			r.Extra = json.RawMessage(extra)
		}
		return r
	}
	tests := []struct {
		name     string
		offers   []x402.PaymentRequirements
		accepted x402.PaymentRequirements
		want     int
	}{
		{"first", offers, a, 0},
		{"second", offers, b, 1},
		{"third, extra missing", offers, withExtra(c, ""), 2},
		{"first, extra key added", offers, withExtra(a, `{"name":"USD Coin","version":"2","k":1}`), 0},
		{"first, address case", offers, func() x402.PaymentRequirements { r := a; r.PayTo = strings.ToLower(r.PayTo); return r }(), 0},
		{"none: amount", offers, func() x402.PaymentRequirements { r := a; r.Amount = "1"; return r }(), -1},
		{"none: extra missing key", offers, withExtra(a, `{"name":"USD Coin"}`), -1},
		{"duplicates: the first wins", []x402.PaymentRequirements{b, a, a}, a, 1},
		{"a bad offer is skipped", []x402.PaymentRequirements{bad, a}, a, 1},
		{"no offers", nil, a, -1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := x402.FindMatch(tc.offers, tc.accepted); got != tc.want {
				t.Errorf("FindMatch = %d, want %d", got, tc.want)
			}
		})
	}
}
