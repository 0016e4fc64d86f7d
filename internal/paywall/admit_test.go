package paywall_test

import (
	"encoding/base64"
	"errors"
	"log/slog"
	"math/big"
	"path/filepath"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"

	"github.com/llm4agents/llm4agents/internal/paywall"
	"github.com/llm4agents/llm4agents/internal/store/sqlite"
	"github.com/llm4agents/llm4agents/x402"
)

type countMetrics map[string]int

func (m countMetrics) Payment(outcome string)    { m[outcome]++ }
func (countMetrics) SettleLatency(time.Duration) {}

// TestAdmitRefusesBeforeTheFacilitator: a request without a usable payment is
// refused with its own reason before anything reaches the facilitator or the
// store's claims (the facilitator here is nil: any call would panic). Only a
// missing or v1 payment is offered the quote; a request's offer declares the
// payment-identifier when answers are recorded, a top-up's never does.
func TestAdmitRefusesBeforeTheFacilitator(t *testing.T) {
	db, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "pw.db"), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	m := countMetrics{}
	pw := paywall.New(paywall.Config{Network: "eip155:1337", Asset: "0x0000000000000000000000000000000000000001",
		PayTo: "0x0000000000000000000000000000000000000002", AssetAddress: common.HexToAddress("0x01"),
		PayToAddress: common.HexToAddress("0x02"), MaxTimeoutSeconds: 300, SettleTimeout: time.Second,
		UpstreamTimeout: time.Second, ClaimLease: time.Minute, RecoveryTTL: time.Hour, RecoveryReplays: 1}, nil, db, m, slog.New(slog.DiscardHandler))
	amount := big.NewInt(10000)
	for _, tc := range []struct {
		name    string
		what    string
		in      paywall.Presented
		reason  paywall.Reason
		offer   bool
		idDecl  bool
		outcome string
	}{
		{"none", paywall.WhatRequest, paywall.Presented{}, paywall.PaymentRequired, true, true, "challenged"},
		{"none, top-up", paywall.WhatTopUp, paywall.Presented{}, paywall.PaymentRequired, true, false, "challenged"},
		{"v1", paywall.WhatRequest, paywall.Presented{LegacyV1: true}, paywall.V1NotAccepted, true, true, ""},
		{"not base64", paywall.WhatRequest, paywall.Presented{Signature: "%%%"}, paywall.InvalidPayment, false, false, "malformed"},
		{"not an object", paywall.WhatRequest, paywall.Presented{Signature: base64.StdEncoding.EncodeToString([]byte("[1]"))}, paywall.InvalidPayment, false, false, "malformed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := &paywall.Quote{Amount: amount, Offer: pw.Offer(amount), What: tc.what}
			before := m[tc.outcome]
			var err error
			if tc.what == paywall.WhatTopUp {
				_, err = pw.AdmitTopUp(t.Context(), q, tc.in, paywall.Request{})
			} else {
				_, err = pw.Admit(t.Context(), q, tc.in, paywall.Request{})
			}
			rf, ok := errors.AsType[*paywall.RefusalError](err)
			if !ok || rf.Reason != tc.reason {
				t.Fatalf("got %v, want a refusal %s", err, tc.reason)
			}
			if (rf.Required != nil) != tc.offer {
				t.Fatalf("offer %v, want one: %t", rf.Required, tc.offer)
			}
			if tc.offer {
				_, declared := rf.Required.Extensions[x402.ExtensionPaymentID]
				if declared != tc.idDecl || rf.Required.Accepts[0].Amount != "10000" || rf.What != tc.what {
					t.Errorf("offer %+v: id declared %t, want %t", rf.Required, declared, tc.idDecl)
				}
			}
			if tc.outcome != "" && m[tc.outcome] != before+1 {
				t.Errorf("outcome %q counted %d times, want once", tc.outcome, m[tc.outcome]-before)
			}
		})
	}
}
