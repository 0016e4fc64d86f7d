package upto_test

import (
	"context"
	"encoding/json"
	"errors"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/google/go-cmp/cmp"

	"github.com/llm4agents/llm4agents/internal/testchain"
	"github.com/llm4agents/llm4agents/x402"
	"github.com/llm4agents/llm4agents/x402/evm/exact"
	"github.com/llm4agents/llm4agents/x402/evm/upto"
)

// offer is an upto requirement on chain 1337 as a resource server sends it:
// payTo in lower case, the facilitator's address copied from /supported.
var offer = x402.PaymentRequirements{
	Scheme:            upto.Scheme,
	Network:           "eip155:1337",
	Amount:            "5000000",
	Asset:             vToken,
	PayTo:             strings.ToLower(vPayTo),
	MaxTimeoutSeconds: 60,
	Extra:             json.RawMessage(`{"facilitatorAddress":"` + vFacilitator + `"}`),
}

var signNow = time.Unix(1_800_000_000, 0)

func TestCreatePayload(t *testing.T) {
	signer := exact.NewKeySigner(testchain.DevKey(0))
	p, err := upto.CreatePayload(context.Background(), signer, offer, upto.SignOptions{Now: func() time.Time { return signNow }})
	if err != nil {
		t.Fatalf("CreatePayload: %v", err)
	}
	a := p.Authorization
	want := upto.Authorization{
		From:      signer.Address(),
		Permitted: upto.TokenPermissions{Token: common.HexToAddress(vToken), Amount: big.NewInt(5_000_000)},
		Spender:   upto.ProxyAddress,
		Nonce:     a.Nonce, // random; checked below
		Deadline:  big.NewInt(signNow.Unix() + 60),
		Witness:   upto.Witness{To: common.HexToAddress(vPayTo), Facilitator: common.HexToAddress(vFacilitator), ValidAfter: big.NewInt(0)},
	}
	if diff := cmp.Diff(want, a, bigComparer); diff != "" {
		t.Errorf("authorization (-want +got):\n%s", diff)
	}
	if a.Nonce.Sign() == 0 || a.Nonce.BitLen() > 256 {
		t.Errorf("nonce = %s, want a random uint256", a.Nonce)
	}
	if len(p.Signature) != 65 || (p.Signature[64] != 27 && p.Signature[64] != 28) {
		t.Errorf("signature = %x, want 65 bytes with v 27 or 28", p.Signature)
	}

	// Round trip: the signature recovers to the signer under the digest a
	// facilitator computes, through the wire form.
	body, err := json.Marshal(p.JSON())
	if err != nil {
		t.Fatal(err)
	}
	v := &upto.Verifier{ChainID: big.NewInt(1337), Facilitators: []common.Address{common.HexToAddress(vFacilitator)},
		Now: func() time.Time { return signNow.Add(time.Second) }}
	accepted, _ := json.Marshal(offer)
	vd, recovered, err := v.Check(&x402.PaymentPayload{X402Version: 2, Accepted: accepted, Payload: body}, offer)
	if err != nil || !recovered {
		t.Fatalf("Check of a fresh payload: recovered %v, %v", recovered, err)
	}
	if vd.Digest != upto.Digest(big.NewInt(1337), &a) {
		t.Errorf("digest differs between signer and verifier")
	}

	// Two payloads never share a nonce.
	p2, err := upto.CreatePayload(context.Background(), signer, offer, upto.SignOptions{Now: func() time.Time { return signNow }})
	if err != nil {
		t.Fatal(err)
	}
	if p2.Authorization.Nonce.Cmp(a.Nonce) == 0 {
		t.Error("two payloads have the same nonce")
	}
}

// TestCreatePayloadVector: with a fixed nonce and time, the signature is
// viem's for the same message (vectors_test.go).
func TestCreatePayloadVector(t *testing.T) {
	req := offer
	req.MaxTimeoutSeconds = 60 // deadline 1_900_000_000 from 1_899_999_940
	nonce := common.HexToHash("0x1111111111111111111111111111111111111111111111111111111111111111").Big()
	now := time.Unix(1_899_999_940, 0)
	p, err := upto.CreatePayload(context.Background(), exact.NewKeySigner(testchain.DevKey(0)), req,
		upto.SignOptions{Now: func() time.Time { return now }, Nonce: nonce})
	if err != nil {
		t.Fatal(err)
	}
	body, err := json.Marshal(p.JSON())
	if err != nil {
		t.Fatal(err)
	}
	if string(body) != validPayload {
		t.Errorf("payload = %s\nwant      %s", body, validPayload)
	}
}

func TestCreatePayloadRefuses(t *testing.T) {
	signer := exact.NewKeySigner(testchain.DevKey(0))
	tests := []struct {
		name string
		edit func(r *x402.PaymentRequirements)
	}{
		{"exact scheme", func(r *x402.PaymentRequirements) { r.Scheme = "exact" }},
		{"no extra", func(r *x402.PaymentRequirements) { r.Extra = nil }},
		{"no facilitatorAddress", func(r *x402.PaymentRequirements) { r.Extra = json.RawMessage(`{"name":"USD Coin","version":"2"}`) }},
		{"bad facilitatorAddress", func(r *x402.PaymentRequirements) { r.Extra = json.RawMessage(`{"facilitatorAddress":"0x1"}`) }},
		{"solana network", func(r *x402.PaymentRequirements) { r.Network = "solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp" }},
		{"bad asset", func(r *x402.PaymentRequirements) { r.Asset = "USDC" }},
		{"bad payTo", func(r *x402.PaymentRequirements) { r.PayTo = "0x1234" }},
		{"negative amount", func(r *x402.PaymentRequirements) { r.Amount = "-1" }},
		{"decimal amount", func(r *x402.PaymentRequirements) { r.Amount = "0.5" }},
		{"zero timeout", func(r *x402.PaymentRequirements) { r.MaxTimeoutSeconds = 0 }},
		{"timeout over a day", func(r *x402.PaymentRequirements) { r.MaxTimeoutSeconds = exact.MaxSignedTimeout + 1 }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req := offer
			tc.edit(&req)
			if p, err := upto.CreatePayload(context.Background(), signer, req, upto.SignOptions{}); err == nil {
				t.Errorf("CreatePayload = %+v; want an error", p)
			}
		})
	}
	huge := new(big.Int).Lsh(big.NewInt(1), 256)
	if _, err := upto.CreatePayload(context.Background(), signer, offer, upto.SignOptions{Nonce: huge}); err == nil {
		t.Error("CreatePayload with a 257-bit nonce: want an error")
	}
}

type failingSigner struct{ exact.Signer }

func (failingSigner) SignDigest(context.Context, common.Hash) ([]byte, error) {
	return nil, errors.New("hardware wallet unplugged")
}

func TestCreatePayloadSignerError(t *testing.T) {
	s := failingSigner{exact.NewKeySigner(testchain.DevKey(0))}
	if _, err := upto.CreatePayload(context.Background(), s, offer, upto.SignOptions{}); err == nil || !strings.Contains(err.Error(), "unplugged") {
		t.Errorf("CreatePayload with a failing signer: %v", err)
	}
}

func TestNewPaymentPayload(t *testing.T) {
	raw := `{"x402Version":2,"error":"Payment required","resource":{"url":"https://api.example.com/v1/chat"},` +
		`"accepts":[{"scheme":"exact","network":"eip155:1337","amount":"10000","asset":"` + vToken + `","payTo":"` + vPayTo + `","maxTimeoutSeconds":60,"extra":{"name":"USD Coin","version":"2"}},` +
		`{"scheme":"upto","network":"eip155:1337","amount":"5000000","asset":"` + vToken + `","payTo":"` + vPayTo + `","maxTimeoutSeconds":60,"extra":{"facilitatorAddress":"` + vFacilitator + `", "paymentFlow":"authorization"}}],` +
		`"extensions":{"bazaar":{"info":{},"schema":{}}}}`
	var pr x402.PaymentRequired
	if err := json.Unmarshal([]byte(raw), &pr); err != nil {
		t.Fatal(err)
	}
	signer := exact.NewKeySigner(testchain.DevKey(0))
	p, err := upto.NewPaymentPayload(context.Background(), signer, &pr, 1, upto.SignOptions{Now: func() time.Time { return signNow }})
	if err != nil {
		t.Fatalf("NewPaymentPayload: %v", err)
	}
	if p.X402Version != 2 || p.Resource == nil || p.Resource.URL != "https://api.example.com/v1/chat" {
		t.Errorf("payload header fields: %+v", p)
	}
	// accepted is accepts[1] verbatim, the odd space in extra included.
	if !strings.Contains(string(p.Accepted), `"facilitatorAddress":"`+vFacilitator+`", "paymentFlow"`) {
		t.Errorf("accepted = %s, want accepts[1] verbatim", p.Accepted)
	}
	if !strings.Contains(string(p.Extensions), `"bazaar"`) {
		t.Errorf("extensions = %s, want the server's echoed", p.Extensions)
	}
	pl, err := upto.ParsePayload(p.Payload)
	if err != nil {
		t.Fatalf("ParsePayload: %v", err)
	}
	if pl.Authorization.From != signer.Address() || hexutil.Encode(pl.Signature) == "0x" {
		t.Errorf("payload %+v", pl)
	}
	if _, err := upto.NewPaymentPayload(context.Background(), signer, &pr, 0, upto.SignOptions{}); err == nil {
		t.Error("NewPaymentPayload for the exact entry: want an error")
	}
	if _, err := upto.NewPaymentPayload(context.Background(), signer, &pr, 2, upto.SignOptions{}); err == nil {
		t.Error("NewPaymentPayload for a missing entry: want an error")
	}
}
