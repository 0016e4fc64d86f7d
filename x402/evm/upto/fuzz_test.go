package upto_test

import (
	"context"
	"encoding/json"
	"errors"
	"math/big"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/google/go-cmp/cmp"

	"github.com/llm4agents/llm4agents/internal/testchain"
	"github.com/llm4agents/llm4agents/x402"
	"github.com/llm4agents/llm4agents/x402/evm/exact"
	"github.com/llm4agents/llm4agents/x402/evm/upto"
)

// FuzzParsePayload: ParsePayload never panics, and what it accepts re-encodes
// through JSON() into a wire form that parses back to the same value. The
// seed corpus is the valid payload and every hostile payload of
// TestParsePayload.
func FuzzParsePayload(f *testing.F) {
	f.Add([]byte(validPayload))
	for _, tc := range hostilePayloads() {
		f.Add([]byte(tc.in))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		p, err := upto.ParsePayload(raw)
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
		p3, err := upto.ParsePayload(b)
		if err != nil {
			t.Fatalf("ParsePayload(%s): %v", b, err)
		}
		if diff := cmp.Diff(p, p3, bigComparer); diff != "" {
			t.Fatalf("ParsePayload(marshal(JSON())) differs (-first +second):\n%s", diff)
		}
	})
}

// FuzzCheck feeds mutations of a valid payment's accepted and payload JSON, and
// of the settle-time charge, to Verifier.Check and CheckSettle: they never
// panic, fail only with a *x402.VerifyError, and what they pass pays the offer's
// recipient through the upto proxy, names our facilitator, lies within the
// time window and charges at most the permit's amount.
func FuzzCheck(f *testing.F) {
	now := time.Unix(1_800_000_000, 0)
	pr := &x402.PaymentRequired{X402Version: 2, Accepts: []x402.PaymentRequirements{offer}}
	p, err := upto.NewPaymentPayload(context.Background(), exact.NewKeySigner(testchain.DevKey(0)), pr, 0,
		upto.SignOptions{Now: func() time.Time { return now }, Nonce: big.NewInt(7)})
	if err != nil {
		f.Fatal(err)
	}
	f.Add([]byte(p.Accepted), []byte(p.Payload), "5000000")
	f.Add([]byte(p.Accepted), []byte(p.Payload), "1")
	f.Add([]byte(p.Accepted), []byte(p.Payload), "5000001")
	f.Add([]byte(p.Accepted), []byte(validPayload), "0")
	f.Add([]byte(`{"scheme":"upto","network":"eip155:1337","amount":"5000000","asset":"`+vToken+`","payTo":"`+vPayTo+`","maxTimeoutSeconds":60,"extra":{"facilitatorAddress":"`+vFacilitator+`","x":[]}}`), []byte(p.Payload), "")

	v := &upto.Verifier{ChainID: big.NewInt(1337), Facilitators: []common.Address{facilitator}, Now: func() time.Time { return now }}
	payTo := common.HexToAddress(vPayTo)
	f.Fuzz(func(t *testing.T, accepted, payload []byte, charge string) {
		pp := &x402.PaymentPayload{X402Version: 2, Accepted: accepted, Payload: payload}
		for _, settle := range []bool{false, true} {
			var vd *upto.Verified
			var recovered bool
			var err error
			if settle {
				req := offer
				req.Amount = charge
				vd, recovered, err = v.CheckSettle(pp, req)
			} else {
				vd, recovered, err = v.Check(pp, offer)
			}
			if err != nil {
				if _, ok := errors.AsType[*x402.VerifyError](err); !ok {
					t.Fatalf("error %v is not a *x402.VerifyError", err)
				}
				if vd != nil || recovered {
					t.Fatalf("returned %+v, %v with error %v", vd, recovered, err)
				}
				continue
			}
			a := vd.Payload.Authorization
			if a.Witness.To != payTo || a.Spender != upto.ProxyAddress || a.Witness.Facilitator != facilitator ||
				a.Permitted.Amount.Cmp(big.NewInt(5_000_000)) != 0 || a.Permitted.Token != common.HexToAddress(vToken) {
				t.Fatalf("passed a permit %+v", a)
			}
			if a.Witness.ValidAfter.Cmp(big.NewInt(now.Unix())) > 0 || a.Deadline.Cmp(big.NewInt(now.Unix()+6)) < 0 ||
				a.Deadline.Cmp(big.NewInt(now.Unix()+60+30)) > 0 {
				t.Fatalf("passed a window [%s, %s] outside now %d", a.Witness.ValidAfter, a.Deadline, now.Unix())
			}
			if vd.Amount.Sign() < 0 || vd.Amount.Cmp(a.Permitted.Amount) > 0 || (settle && vd.Amount.String() != charge) {
				t.Fatalf("amount %s (settle %v, charge %q)", vd.Amount, settle, charge)
			}
			if recovered {
				if _, err := upto.SettleCalldata(&a, vd.Payload.Signature, vd.Amount); err != nil {
					t.Fatalf("SettleCalldata: %v", err)
				}
			}
		}
	})
}
