package exact_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"math/big"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/google/go-cmp/cmp"

	"github.com/llm4agents/llm4agents/internal/testchain"
	"github.com/llm4agents/llm4agents/x402"
	"github.com/llm4agents/llm4agents/x402/evm/exact"
)

// offer is accepts[0] of the npm 2.27.0 express server's 402 on chain 1337
// (captured on loopback), with payTo in lower case as a server may send it.
var offer = x402.PaymentRequirements{
	Scheme:            "exact",
	Network:           "eip155:1337",
	Amount:            "10000",
	Asset:             "0x5FbDB2315678afecb367f032d93F642f64180aa3",
	PayTo:             "0x70997970c51812dc3a010c7d01b50e0d17dc79c8",
	MaxTimeoutSeconds: 60,
	Extra:             json.RawMessage(`{"name":"USD Coin","version":"2"}`),
}

var signNow = time.Unix(1_800_000_000, 0)

func TestCreatePayload(t *testing.T) {
	signer := exact.NewKeySigner(testchain.DevKey(0))
	opts := exact.SignOptions{Now: func() time.Time { return signNow }}
	p, err := exact.CreatePayload(context.Background(), signer, offer, opts)
	if err != nil {
		t.Fatalf("CreatePayload: %v", err)
	}

	a := p.Authorization
	want := exact.Authorization{
		From:        signer.Address(),
		To:          common.HexToAddress(offer.PayTo),
		Value:       big.NewInt(10000),
		ValidAfter:  big.NewInt(0),
		ValidBefore: big.NewInt(signNow.Unix() + 60),
		Nonce:       a.Nonce, // random; checked below
	}
	if diff := cmp.Diff(want, a, bigComparer); diff != "" {
		t.Errorf("authorization (-want +got):\n%s", diff)
	}
	if a.Nonce == (common.Hash{}) {
		t.Error("nonce is zero")
	}
	if len(p.Signature) != 65 || (p.Signature[64] != 27 && p.Signature[64] != 28) {
		t.Errorf("signature = %x, want 65 bytes with v 27 or 28", p.Signature)
	}

	// The wire form: checksummed addresses, decimal integers, lowercase 32-byte nonce.
	b, err := json.Marshal(p.JSON())
	if err != nil {
		t.Fatal(err)
	}
	var wire struct {
		Signature     string            `json:"signature"`
		Authorization map[string]string `json:"authorization"`
	}
	if err := json.Unmarshal(b, &wire); err != nil {
		t.Fatal(err)
	}
	wantWire := map[string]string{
		"from":        "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266",
		"to":          "0x70997970C51812dc3A010C7d01b50e0d17dc79C8",
		"value":       "10000",
		"validAfter":  "0",
		"validBefore": "1800000060",
		"nonce":       wire.Authorization["nonce"],
	}
	if diff := cmp.Diff(wantWire, wire.Authorization); diff != "" {
		t.Errorf("wire authorization (-want +got):\n%s", diff)
	}
	if !regexp.MustCompile(`^0x[0-9a-f]{64}$`).MatchString(wire.Authorization["nonce"]) {
		t.Errorf("nonce %q is not lowercase 32-byte hex", wire.Authorization["nonce"])
	}
	if !regexp.MustCompile(`^0x[0-9a-f]{130}$`).MatchString(wire.Signature) {
		t.Errorf("signature %q is not lowercase 65-byte hex", wire.Signature)
	}

	// It verifies offline as an EOA payment of the offer.
	pp := &x402.PaymentPayload{X402Version: 2, Accepted: mustJSON(t, offer), Payload: b}
	v := &exact.Verifier{ChainID: big.NewInt(1337), Now: func() time.Time { return signNow }}
	vd, recovered, err := v.Check(pp, offer)
	if err != nil || !recovered || vd.Kind != exact.SignatureEOA {
		t.Errorf("Check = %+v, %v, %v; want recovered EOA", vd, recovered, err)
	}

	// Two payments of the same offer have different random nonces.
	p2, err := exact.CreatePayload(context.Background(), signer, offer, opts)
	if err != nil {
		t.Fatal(err)
	}
	if p2.Authorization.Nonce == a.Nonce {
		t.Errorf("two payloads share nonce %s", a.Nonce.Hex())
	}

	// A fixed nonce makes the payload deterministic (RFC 6979).
	nonce := common.HexToHash("0x1111111111111111111111111111111111111111111111111111111111111111")
	opts.Nonce = &nonce
	p3, err := exact.CreatePayload(context.Background(), signer, offer, opts)
	if err != nil {
		t.Fatal(err)
	}
	p4, _ := exact.CreatePayload(context.Background(), signer, offer, opts)
	if p3.Authorization.Nonce != nonce || !bytes.Equal(p3.Signature, p4.Signature) {
		t.Errorf("fixed nonce: nonce %s, signatures %x and %x", p3.Authorization.Nonce.Hex(), p3.Signature, p4.Signature)
	}
}

// TestCreatePayloadVector signs the local-chain vector of TestVectors through
// CreatePayload.
func TestCreatePayloadVector(t *testing.T) {
	nonce := common.HexToHash("0x1111111111111111111111111111111111111111111111111111111111111111")
	req := offer
	req.MaxTimeoutSeconds = 3600
	// validBefore = now + maxTimeoutSeconds = 1900000000, the vector's.
	p, err := exact.CreatePayload(context.Background(), exact.NewKeySigner(testchain.DevKey(0)), req,
		exact.SignOptions{Now: func() time.Time { return time.Unix(1_900_000_000-3600, 0) }, Nonce: &nonce})
	if err != nil {
		t.Fatal(err)
	}
	const want = "0x7cb5821558d6cf39e8e6282ce098a9c63ee53a89fa4289d5338fd2927313bc5d5445ee5a5b8e34579a11e9fb4894a561d868478e1841cb85f8d93bb16c0b1d7e1c"
	if got := p.JSON().Signature; got != want {
		t.Errorf("signature = %s\nwant        %s", got, want)
	}
}

func TestCreatePayloadRefuses(t *testing.T) {
	signer := exact.NewKeySigner(testchain.DevKey(0))
	tests := []struct {
		name string
		edit func(r *x402.PaymentRequirements)
	}{
		{"scheme upto", func(r *x402.PaymentRequirements) { r.Scheme = "upto" }},
		{"extra missing", func(r *x402.PaymentRequirements) { r.Extra = nil }},
		{"extra empty", func(r *x402.PaymentRequirements) { r.Extra = json.RawMessage(`{}`) }},
		{"extra.name missing", func(r *x402.PaymentRequirements) { r.Extra = json.RawMessage(`{"version":"2"}`) }},
		{"extra.version missing", func(r *x402.PaymentRequirements) { r.Extra = json.RawMessage(`{"name":"USD Coin"}`) }},
		{"permit2", func(r *x402.PaymentRequirements) {
			r.Extra = json.RawMessage(`{"name":"USD Coin","version":"2","assetTransferMethod":"permit2"}`)
		}},
		{"network v1 name", func(r *x402.PaymentRequirements) { r.Network = "base-sepolia" }},
		{"network chain 0", func(r *x402.PaymentRequirements) { r.Network = "eip155:0" }},
		{"network solana", func(r *x402.PaymentRequirements) { r.Network = "solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp" }},
		{"asset bad", func(r *x402.PaymentRequirements) { r.Asset = "USDC" }},
		{"asset bad checksum", func(r *x402.PaymentRequirements) { r.Asset = "0x5fbDB2315678afecb367f032d93F642f64180aa3" }},
		{"payTo bad", func(r *x402.PaymentRequirements) { r.PayTo = "0x1234" }},
		{"amount empty", func(r *x402.PaymentRequirements) { r.Amount = "" }},
		{"amount negative", func(r *x402.PaymentRequirements) { r.Amount = "-1" }},
		{"amount leading zero", func(r *x402.PaymentRequirements) { r.Amount = "010000" }},
		{"amount decimal point", func(r *x402.PaymentRequirements) { r.Amount = "0.01" }},
		{"amount over uint256", func(r *x402.PaymentRequirements) { r.Amount = "1" + strings.Repeat("0", 78) }},
		{"maxTimeoutSeconds zero", func(r *x402.PaymentRequirements) { r.MaxTimeoutSeconds = 0 }},
		{"maxTimeoutSeconds negative", func(r *x402.PaymentRequirements) { r.MaxTimeoutSeconds = -60 }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req := offer
			tc.edit(&req)
			if p, err := exact.CreatePayload(context.Background(), signer, req, exact.SignOptions{}); err == nil {
				t.Errorf("CreatePayload = %+v; want an error", p)
			}
		})
	}
}

// TestCreatePayloadHugeTimeout: a hostile 402 with maxTimeoutSeconds near MaxInt64
// makes now + maxTimeoutSeconds overflow; CreatePayload then signs a negative
// validBefore (FillBytes hashes its absolute value) and sends "-922…", which no
// facilitator parses. It should refuse instead.
func TestCreatePayloadHugeTimeout(t *testing.T) {
	req := offer
	req.MaxTimeoutSeconds = math.MaxInt64
	p, err := exact.CreatePayload(context.Background(), exact.NewKeySigner(testchain.DevKey(0)), req, exact.SignOptions{})
	if err != nil {
		return // refusing is right
	}
	if p.Authorization.ValidBefore.Sign() < 0 {
		t.Errorf("validBefore = %s, negative", p.Authorization.ValidBefore)
	}
}

// failingSigner is a Signer whose key is unavailable.
type failingSigner struct{ err error }

func (failingSigner) Address() common.Address { return common.HexToAddress("0x01") }
func (s failingSigner) SignDigest(context.Context, common.Hash) ([]byte, error) {
	return nil, s.err
}

func TestCreatePayloadSignerError(t *testing.T) {
	errHSM := errors.New("hsm unavailable")
	_, err := exact.CreatePayload(context.Background(), failingSigner{errHSM}, offer, exact.SignOptions{})
	if !errors.Is(err, errHSM) {
		t.Errorf("CreatePayload error = %v, want %v", err, errHSM)
	}
}

func TestKeySignerString(t *testing.T) {
	s := exact.NewKeySigner(testchain.DevKey(0))
	if got, want := s.String(), "KeySigner(0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266)"; got != want {
		t.Errorf("String = %q, want %q", got, want)
	}
}

// required402 is a PAYMENT-REQUIRED body as a server may format it: whitespace,
// key order of its own, an empty object inside extra, and extensions.
const required402 = `{
  "x402Version": 2,
  "error": "Payment required",
  "resource": {"url": "http://127.0.0.1:4021/paid", "description": "demo", "mimeType": "application/json"},
  "accepts": [
    {"scheme":"exact","network":"eip155:1337","amount":"20000","asset":"0x5FbDB2315678afecb367f032d93F642f64180aa3","payTo":"0x70997970C51812dc3A010C7d01b50e0d17dc79C8","maxTimeoutSeconds":60,"extra":{}},
    { "payTo" : "0x70997970c51812dc3a010c7d01b50e0d17dc79c8",
      "scheme": "exact", "network": "eip155:1337", "amount": "10000",
      "asset": "0x5FbDB2315678afecb367f032d93F642f64180aa3",
      "maxTimeoutSeconds": 60,
      "extra": { "version": "2", "name": "USD Coin", "meta": {}, "tags": [] } }
  ],
  "extensions": {
    "bazaar": {"info": {"input": {"type": "http"}}, "schema": {}},
    "payment-identifier": {"info": {"required": false}}
  }
}`

func TestNewPaymentPayload(t *testing.T) {
	var pr x402.PaymentRequired
	if err := json.Unmarshal([]byte(required402), &pr); err != nil {
		t.Fatal(err)
	}
	signer := exact.NewKeySigner(testchain.DevKey(0))
	opts := exact.SignOptions{Now: func() time.Time { return signNow }}

	p, err := exact.NewPaymentPayload(context.Background(), signer, &pr, 1, opts)
	if err != nil {
		t.Fatalf("NewPaymentPayload: %v", err)
	}
	if p.X402Version != 2 {
		t.Errorf("x402Version = %d", p.X402Version)
	}
	// accepts[1] exactly as the server sent it, whitespace and key order included.
	start := strings.Index(required402, `{ "payTo"`)
	end := strings.Index(required402, `"tags": [] } }`) + len(`"tags": [] } }`)
	if want := required402[start:end]; string(p.Accepted) != want {
		t.Errorf("accepted = %s\nwant       %s", p.Accepted, want)
	}
	if diff := cmp.Diff(pr.Resource, p.Resource); diff != "" {
		t.Errorf("resource (-want +got):\n%s", diff)
	}
	var gotExt, wantExt map[string]any
	if err := json.Unmarshal(p.Extensions, &gotExt); err != nil {
		t.Fatalf("extensions %s: %v", p.Extensions, err)
	}
	if err := json.Unmarshal([]byte(`{"bazaar":{"info":{"input":{"type":"http"}},"schema":{}},"payment-identifier":{"info":{"required":false}}}`), &wantExt); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(wantExt, gotExt); diff != "" {
		t.Errorf("extensions (-want +got):\n%s", diff)
	}

	// Through the header and back, it verifies against the requirement it echoes.
	h, err := x402.EncodeHeader(p)
	if err != nil {
		t.Fatal(err)
	}
	back, err := x402.DecodePaymentPayload(h)
	if err != nil {
		t.Fatalf("DecodePaymentPayload: %v", err)
	}
	// The header carries it compacted, key order and empty containers kept, as
	// JSON.stringify does.
	var compact bytes.Buffer
	if err := json.Compact(&compact, p.Accepted); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(back.Accepted, compact.Bytes()) {
		t.Errorf("accepted after the header round trip = %s\nwant %s", back.Accepted, compact.Bytes())
	}
	v := &exact.Verifier{ChainID: big.NewInt(1337), Now: func() time.Time { return signNow }}
	if _, recovered, err := v.Check(back, pr.Accepts[1]); err != nil || !recovered {
		t.Errorf("Check = %v, %v; want a recovered signature", recovered, err)
	}

	// accepts[0] has "extra":{} and so no EIP-712 domain: the client refuses it.
	if _, err := exact.NewPaymentPayload(context.Background(), signer, &pr, 0, opts); err == nil {
		t.Error("NewPaymentPayload of an offer without extra.name succeeded")
	}
	for _, i := range []int{-1, 2} {
		if _, err := exact.NewPaymentPayload(context.Background(), signer, &pr, i, opts); err == nil {
			t.Errorf("NewPaymentPayload(index %d) succeeded", i)
		}
	}
}

// TestNewPaymentPayloadInMemory pays a PaymentRequired built in memory: accepted is
// the canonical encoding of the requirement, and no extensions are sent.
func TestNewPaymentPayloadInMemory(t *testing.T) {
	pr := &x402.PaymentRequired{X402Version: 2, Resource: &x402.ResourceInfo{URL: "https://x"}, Accepts: []x402.PaymentRequirements{offer}}
	p, err := exact.NewPaymentPayload(context.Background(), exact.NewKeySigner(testchain.DevKey(0)), pr, 0, exact.SignOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if want := mustJSON(t, offer); !bytes.Equal(p.Accepted, want) {
		t.Errorf("accepted = %s\nwant       %s", p.Accepted, want)
	}
	if p.Extensions != nil {
		t.Errorf("extensions = %s, want none", p.Extensions)
	}
	b := mustJSON(t, p)
	if bytes.Contains(b, []byte(`"extensions"`)) {
		t.Errorf("payload JSON %s has extensions", b)
	}
}
