package exact_test

import (
	"context"
	"math/big"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"

	"github.com/llm4agents/llm4agents/internal/testchain"
	"github.com/llm4agents/llm4agents/x402"
	"github.com/llm4agents/llm4agents/x402/evm/exact"
)

// benchHeader returns a realistic PAYMENT-SIGNATURE header value (about 1.2 KB, as
// the npm 2.27 client sends for the express server's 402 on chain 1337), the requirements it pays
// and the time it is valid at.
func benchHeader(b *testing.B) (string, x402.PaymentRequirements, time.Time) {
	b.Helper()
	now := time.Unix(1_800_000_000, 0)
	req := offer
	req.PayTo = "0x70997970C51812dc3A010C7d01b50e0d17dc79C8"
	pr := &x402.PaymentRequired{
		X402Version: 2,
		Resource:    &x402.ResourceInfo{URL: "http://127.0.0.1:4021/paid", Description: "demo", MimeType: "application/json"},
		Accepts:     []x402.PaymentRequirements{req},
	}
	p, err := exact.NewPaymentPayload(context.Background(), exact.NewKeySigner(testchain.DevKey(1)), pr, 0,
		exact.SignOptions{Now: func() time.Time { return now }})
	if err != nil {
		b.Fatal(err)
	}
	h, err := x402.EncodeHeader(p)
	if err != nil {
		b.Fatal(err)
	}
	return h, req, now
}

// BenchmarkCheck is verification without RPC: decode the PAYMENT-SIGNATURE header,
// then every offline check, the EIP-712 hash and ECDSA recovery.
func BenchmarkCheck(b *testing.B) {
	h, req, now := benchHeader(b)
	v := &exact.Verifier{ChainID: big.NewInt(1337), Now: func() time.Time { return now }}
	b.SetBytes(int64(len(h)))
	b.ReportAllocs()
	for b.Loop() {
		p, err := x402.DecodePaymentPayload(h)
		if err != nil {
			b.Fatal(err)
		}
		if _, ok, err := v.Check(p, req); err != nil || !ok {
			b.Fatalf("Check = %v, %v", ok, err)
		}
	}
}

// The parts of BenchmarkCheck, to see where the time and allocations go.

func BenchmarkDecodeHeader(b *testing.B) {
	h, _, _ := benchHeader(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := x402.DecodePaymentPayload(h); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCheckDecoded(b *testing.B) {
	h, req, now := benchHeader(b)
	p, err := x402.DecodePaymentPayload(h)
	if err != nil {
		b.Fatal(err)
	}
	v := &exact.Verifier{ChainID: big.NewInt(1337), Now: func() time.Time { return now }}
	b.ReportAllocs()
	for b.Loop() {
		if _, ok, err := v.Check(p, req); err != nil || !ok {
			b.Fatalf("Check = %v, %v", ok, err)
		}
	}
}

func BenchmarkParsePayload(b *testing.B) {
	h, _, _ := benchHeader(b)
	p, err := x402.DecodePaymentPayload(h)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := exact.ParsePayload(p.Payload); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDigest(b *testing.B) {
	d := exact.Domain{Name: "USD Coin", Version: "2", ChainID: big.NewInt(1337), VerifyingContract: common.HexToAddress(offer.Asset)}
	a := &exact.Authorization{
		From: common.HexToAddress("0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266"), To: common.HexToAddress(offer.PayTo),
		Value: big.NewInt(10000), ValidAfter: big.NewInt(0), ValidBefore: big.NewInt(1900000000),
	}
	b.ReportAllocs()
	for b.Loop() {
		exact.Digest(d, a)
	}
}
