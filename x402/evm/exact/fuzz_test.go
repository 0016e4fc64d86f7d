package exact_test

import (
	"context"
	"encoding/json"
	"errors"
	"math/big"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/google/go-cmp/cmp"

	"github.com/llm4agents/llm4agents/internal/testchain"
	"github.com/llm4agents/llm4agents/x402"
	"github.com/llm4agents/llm4agents/x402/evm/exact"
)

// FuzzParsePayload: ParsePayload never panics, and what it accepts re-encodes
// through JSON() into a wire form that parses back to the same value. The seed
// corpus is in testdata/fuzz/FuzzParsePayload.
func FuzzParsePayload(f *testing.F) {
	f.Add([]byte(`{"signature":"0x7cb5821558d6cf39e8e6282ce098a9c63ee53a89fa4289d5338fd2927313bc5d5445ee5a5b8e34579a11e9fb4894a561d868478e1841cb85f8d93bb16c0b1d7e1c","authorization":{"from":"0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266","to":"0x70997970C51812dc3A010C7d01b50e0d17dc79C8","value":"10000","validAfter":"0","validBefore":"1900000000","nonce":"0x1111111111111111111111111111111111111111111111111111111111111111"}}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		p, err := exact.ParsePayload(raw)
		if err != nil {
			if p != nil {
				t.Fatalf("ParsePayload returned %+v with error %v", p, err)
			}
			return
		}
		w := p.JSON()
		p2, err := w.Parse()
		if err != nil {
			t.Fatalf("Parse(JSON()) of %s: %v", raw, err)
		}
		if diff := cmp.Diff(p, p2, bigComparer); diff != "" {
			t.Fatalf("Parse(JSON()) differs (-first +second):\n%s", diff)
		}
		b, err := json.Marshal(w)
		if err != nil {
			t.Fatalf("marshal %+v: %v", w, err)
		}
		p3, err := exact.ParsePayload(b)
		if err != nil {
			t.Fatalf("ParsePayload(%s): %v", b, err)
		}
		if diff := cmp.Diff(p, p3, bigComparer); diff != "" {
			t.Fatalf("ParsePayload(marshal(JSON())) differs (-first +second):\n%s", diff)
		}
	})
}

// FuzzCheck feeds mutations of a valid payment's accepted and payload JSON to
// Verifier.Check: it never panics, fails only with a *x402.VerifyError, and what it
// passes pays the offer within the time window.
func FuzzCheck(f *testing.F) {
	now := time.Unix(1_800_000_000, 0)
	nonce := common.HexToHash("0x1111111111111111111111111111111111111111111111111111111111111111")
	pr := &x402.PaymentRequired{X402Version: 2, Accepts: []x402.PaymentRequirements{offer}}
	p, err := exact.NewPaymentPayload(context.Background(), exact.NewKeySigner(testchain.DevKey(0)), pr, 0,
		exact.SignOptions{Now: func() time.Time { return now }, Nonce: &nonce})
	if err != nil {
		f.Fatal(err)
	}
	f.Add([]byte(p.Accepted), []byte(p.Payload))
	f.Add([]byte(p.Accepted), []byte(`{"signature":"0x","authorization":{}}`))
	f.Add([]byte(`{"scheme":"exact","network":"eip155:1337","amount":"10000","asset":"0x5fbdb2315678afecb367f032d93f642f64180aa3","payTo":"0x70997970C51812dc3A010C7d01b50e0d17dc79C8","maxTimeoutSeconds":60,"extra":{"name":"USD Coin","version":"2","x":[]}}`), []byte(p.Payload))

	v := &exact.Verifier{ChainID: big.NewInt(1337), Now: func() time.Time { return now }}
	payTo := common.HexToAddress(offer.PayTo)
	f.Fuzz(func(t *testing.T, accepted, payload []byte) {
		pp := &x402.PaymentPayload{X402Version: 2, Accepted: accepted, Payload: payload}
		vd, recovered, err := v.Check(pp, offer)
		if err != nil {
			var ve *x402.VerifyError
			if !errors.As(err, &ve) || ve.Reason == "" {
				t.Fatalf("Check error %v is not a *x402.VerifyError with a reason", err)
			}
			if vd != nil || recovered {
				t.Fatalf("Check returned %+v, %v with error %v", vd, recovered, err)
			}
			return
		}
		a := vd.Payload.Authorization
		if a.To != payTo || a.Value.Cmp(big.NewInt(10000)) != 0 {
			t.Fatalf("Check passed a payment of %s to %s", a.Value, a.To.Hex())
		}
		if a.ValidAfter.Cmp(big.NewInt(now.Unix())) > 0 || a.ValidBefore.Cmp(big.NewInt(now.Unix()+6)) < 0 ||
			a.ValidBefore.Cmp(big.NewInt(now.Unix()+60+30)) > 0 {
			t.Fatalf("Check passed a window [%s, %s] outside now %d", a.ValidAfter, a.ValidBefore, now.Unix())
		}
		if !recovered {
			return
		}
		if vd.Kind != exact.SignatureEOA || len(vd.Signature) != 65 || vd.Signature[64] < 27 {
			t.Fatalf("recovered with kind %v, signature %x", vd.Kind, vd.Signature)
		}
		sig := append([]byte(nil), vd.Signature...)
		sig[64] -= 27
		pub, err := crypto.SigToPub(vd.Digest[:], sig)
		if err != nil || crypto.PubkeyToAddress(*pub) != a.From {
			t.Fatalf("recovered signature does not recover to from %s (%v)", a.From.Hex(), err)
		}
	})
}

// FuzzVerifyWallet sends arbitrary signature bytes for a payer that has code, so
// that Verify parses them as an ERC-6492 wrapper and packs an isValidSignature
// call. The node is a stub: it never panics, and it fails only with a verdict.
func FuzzVerifyWallet(f *testing.F) {
	now := time.Unix(1_800_000_000, 0)
	nonce := common.HexToHash("0x1111111111111111111111111111111111111111111111111111111111111111")
	p, err := exact.CreatePayload(context.Background(), exact.NewKeySigner(testchain.DevKey(0)), offer,
		exact.SignOptions{Now: func() time.Time { return now }, Nonce: &nonce})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(p.Signature, true)
	f.Add(append(append([]byte{}, p.Signature...), eip6492Magic...), true)
	f.Add(wrap6492(f, common.HexToAddress("0xfac7"), []byte{1, 2}, p.Signature), false)
	f.Add(eip6492Magic, true)

	magic := common.LeftPadBytes(nil, 32)
	copy(magic, []byte{0x16, 0x26, 0xba, 0x7e})
	accepted := mustJSON(f, offer)
	f.Fuzz(func(t *testing.T, sig []byte, valid bool) {
		if len(sig) > 8<<10 {
			return
		}
		pl := *p
		pl.Signature = sig
		body, err := json.Marshal(pl.JSON())
		if err != nil {
			t.Fatal(err)
		}
		chain := &faultyChain{
			codeAt: func(context.Context, common.Address) ([]byte, error) { return []byte{0x60, 0x00}, nil },
			call: func(_ context.Context, msg ethereum.CallMsg) ([]byte, error) {
				if valid {
					return magic, nil
				}
				return make([]byte, 32), nil
			},
		}
		v := &exact.Verifier{Chain: chain, ChainID: big.NewInt(1337), Now: func() time.Time { return now }}
		vd, err := v.Verify(context.Background(), &x402.PaymentPayload{X402Version: 2, Accepted: accepted, Payload: body}, offer)
		if err != nil {
			if _, ok := errors.AsType[*x402.VerifyError](err); !ok {
				t.Fatalf("Verify error %v is not a verdict", err)
			}
			return
		}
		if vd.Kind != exact.SignatureContract || !valid {
			t.Fatalf("Verify passed kind %v with a wallet answering valid=%v", vd.Kind, valid)
		}
		if _, err := exact.TransferCalldata(vd); err != nil {
			t.Fatalf("TransferCalldata: %v", err)
		}
	})
}
