package x402_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/llm4agents/llm4agents/x402"
)

// capture402 is the decoded PAYMENT-REQUIRED header of the npm 2.27.0 express server,
// byte for byte as captured on the wire on loopback. Never regenerate it.
const capture402 = `{"x402Version":2,"error":"Payment required","resource":{"url":"http://127.0.0.1:4021/paid","description":"demo","mimeType":"application/json"},"accepts":[{"scheme":"exact","network":"eip155:1337","amount":"10000","asset":"0x5FbDB2315678afecb367f032d93F642f64180aa3","payTo":"0x70997970C51812dc3A010C7d01b50e0d17dc79C8","maxTimeoutSeconds":60,"extra":{"name":"USD Coin","version":"2"}}]}`

// captureAccepts0 is accepts[0] of capture402, as a client must echo it.
const captureAccepts0 = `{"scheme":"exact","network":"eip155:1337","amount":"10000","asset":"0x5FbDB2315678afecb367f032d93F642f64180aa3","payTo":"0x70997970C51812dc3A010C7d01b50e0d17dc79C8","maxTimeoutSeconds":60,"extra":{"name":"USD Coin","version":"2"}}`

// specPayload is the PaymentPayload example of the x402 v2 spec
// (github.com/x402-foundation/x402 specs/x402-specification-v2.md), whitespace
// included. Its signature is real: it recovers to the payer on Base Sepolia USDC's
// EIP-712 domain.
const specPayload = `{
  "x402Version": 2,
  "resource": { "url": "https://api.example.com/premium-data", "description": "Access to premium market data", "mimeType": "application/json" },
  "accepted": {
    "scheme": "exact", "network": "eip155:84532", "amount": "10000",
    "asset": "0x036CbD53842c5426634e7929541eC2318f3dCF7e",
    "payTo": "0x209693Bc6afc0C5328bA36FaF03C514EF312287C",
    "maxTimeoutSeconds": 60, "extra": { "name": "USDC", "version": "2" }
  },
  "payload": {
    "signature": "0x2d6a7588d6acca505cbf0d9a4a227e0c52c6c34008c8e8986a1283259764173608a2ce6496642e377d6da8dbbf5836e9bd15092f9ecab05ded3d6293af148b571c",
    "authorization": {
      "from": "0x857b06519E91e3A54538791bDbb0E22373e36b66",
      "to": "0x209693Bc6afc0C5328bA36FaF03C514EF312287C",
      "value": "10000",
      "validAfter": "1740672089",
      "validBefore": "1740672154",
      "nonce": "0xf3746613c2d920b5fdabc0856f2aeb2d4f88ee6037b8cc5d04a71a4462f13480"
    }
  },
  "extensions": {}
}`

// specRequirements is the requirement echoed in specPayload, as a value.
var specRequirements = x402.PaymentRequirements{
	Scheme:            "exact",
	Network:           "eip155:84532",
	Amount:            "10000",
	Asset:             "0x036CbD53842c5426634e7929541eC2318f3dCF7e",
	PayTo:             "0x209693Bc6afc0C5328bA36FaF03C514EF312287C",
	MaxTimeoutSeconds: 60,
	Extra:             json.RawMessage(`{"name":"USDC","version":"2"}`),
}

// captureRequirements is accepts[0] of capture402, as a value.
var captureRequirements = x402.PaymentRequirements{
	Scheme:            "exact",
	Network:           "eip155:1337",
	Amount:            "10000",
	Asset:             "0x5FbDB2315678afecb367f032d93F642f64180aa3",
	PayTo:             "0x70997970C51812dc3A010C7d01b50e0d17dc79C8",
	MaxTimeoutSeconds: 60,
	Extra:             json.RawMessage(`{"name":"USD Coin","version":"2"}`),
}

// b64 is the header encoding of raw JSON text.
func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

// wireOpts compare decoded values by meaning: raw JSON by its compact form, empty and
// nil collections alike, and the received bytes PaymentRequired keeps ignored.
var wireOpts = cmp.Options{
	cmp.Comparer(func(a, b json.RawMessage) bool { return bytes.Equal(compactJSON(a), compactJSON(b)) }),
	cmp.FilterPath(func(p cmp.Path) bool { return p.Last().Type() != reflect.TypeFor[json.RawMessage]() }, cmpopts.EquateEmpty()),
	cmpopts.IgnoreUnexported(x402.PaymentRequired{}),
}

// compactJSON returns b without insignificant whitespace, or b itself when it is not
// valid JSON.
func compactJSON(b []byte) []byte {
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		return b
	}
	return buf.Bytes()
}

// mustMarshal is x402.Marshal for values that cannot fail.
func mustMarshal(tb testing.TB, v any) []byte {
	tb.Helper()
	b, err := x402.Marshal(v)
	if err != nil {
		tb.Fatalf("Marshal(%T): %v", v, err)
	}
	return b
}

// mustHeader is x402.EncodeHeader for values that cannot fail.
func mustHeader(tb testing.TB, v any) string {
	tb.Helper()
	h, err := x402.EncodeHeader(v)
	if err != nil {
		tb.Fatalf("EncodeHeader(%T): %v", v, err)
	}
	return h
}
