package x402_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/llm4agents/llm4agents/x402"
)

var update = flag.Bool("update", false, "rewrite the golden wire bodies in testdata/")

const (
	payer1337 = "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266"
	tx1337    = "0xabababababababababababababababababababababababababababababababab"
)

func paymentRequiredFixture() *x402.PaymentRequired {
	second := captureRequirements
	second.Amount = "25000"
	second.Extra = json.RawMessage(`{}`)
	return &x402.PaymentRequired{
		X402Version: 2,
		Error:       "Payment required",
		Resource: &x402.ResourceInfo{
			URL:         "http://127.0.0.1:4021/v1/chat/completions",
			Description: `Chat <gpt-4o-mini> & "tools"`,
			MimeType:    "application/json",
		},
		Accepts: []x402.PaymentRequirements{captureRequirements, second},
		Extensions: map[string]json.RawMessage{
			"payment-identifier": json.RawMessage(`{"info":{"required":false},"schema":{"type":"object"}}`),
		},
	}
}

func paymentPayloadFixture() *x402.PaymentPayload {
	return &x402.PaymentPayload{
		X402Version: 2,
		Resource: &x402.ResourceInfo{
			URL:         "https://api.example.com/premium-data",
			Description: "Access to premium market data",
			MimeType:    "application/json",
		},
		Accepted:   json.RawMessage(`{"scheme":"exact","network":"eip155:84532","amount":"10000","asset":"0x036CbD53842c5426634e7929541eC2318f3dCF7e","payTo":"0x209693Bc6afc0C5328bA36FaF03C514EF312287C","maxTimeoutSeconds":60,"extra":{"name":"USDC","version":"2"}}`),
		Payload:    json.RawMessage(`{"signature":"0x2d6a7588d6acca505cbf0d9a4a227e0c52c6c34008c8e8986a1283259764173608a2ce6496642e377d6da8dbbf5836e9bd15092f9ecab05ded3d6293af148b571c","authorization":{"from":"0x857b06519E91e3A54538791bDbb0E22373e36b66","to":"0x209693Bc6afc0C5328bA36FaF03C514EF312287C","value":"10000","validAfter":"1740672089","validBefore":"1740672154","nonce":"0xf3746613c2d920b5fdabc0856f2aeb2d4f88ee6037b8cc5d04a71a4462f13480"}}`),
		Extensions: json.RawMessage(`{}`),
	}
}

func settleSuccessFixture() *x402.SettleResponse {
	return &x402.SettleResponse{Success: true, Payer: payer1337, Transaction: tx1337, Network: "eip155:1337"}
}

func settleFailureFixture() *x402.SettleResponse {
	return &x402.SettleResponse{
		ErrorReason:  x402.ReasonEVMNonceAlreadyUsed,
		ErrorMessage: "authorization already used",
		Payer:        payer1337,
		Network:      "eip155:1337",
	}
}

func settlePendingFixture() *x402.SettleResponse {
	return &x402.SettleResponse{
		ErrorReason: x402.ReasonSettlementPending,
		Payer:       payer1337,
		Transaction: tx1337,
		Network:     "eip155:1337",
	}
}

// TestGoldenWireBodies pins the exact bytes Marshal sends for each wire type. Run
// `go test ./x402/ -run TestGoldenWireBodies -update` after an intended change and
// review the diff.
func TestGoldenWireBodies(t *testing.T) {
	tests := []struct {
		file string
		v    any // a pointer, so the golden can be decoded back into its type
	}{
		{"payment_required.json", paymentRequiredFixture()},
		{"payment_payload.json", paymentPayloadFixture()},
		{"settle_response_success.json", settleSuccessFixture()},
		{"settle_response_failure.json", settleFailureFixture()},
		{"settle_response_pending.json", settlePendingFixture()},
		{"verify_response_valid.json", &x402.VerifyResponse{IsValid: true, Payer: payer1337}},
		{"verify_response_invalid.json", (&x402.VerifyError{Reason: x402.ReasonEVMSignature, Payer: payer1337, Message: "signer is not from"}).Response()},
		{"supported_response.json", &x402.SupportedResponse{
			Kinds: []x402.SupportedKind{
				{X402Version: 2, Scheme: "exact", Network: "eip155:1337"},
				{X402Version: 2, Scheme: "exact", Network: "eip155:84532"},
			},
			Extensions: []string{"payment-identifier"},
			Signers:    map[string][]string{"eip155:*": {"0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC"}},
		}},
		{"supported_response_empty.json", &x402.SupportedResponse{}},
		{"facilitator_request.json", &x402.FacilitatorRequest{
			X402Version:         2,
			PaymentPayload:      *paymentPayloadFixture(),
			PaymentRequirements: specRequirements,
		}},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			got := mustMarshal(t, tc.v)
			path := filepath.Join("testdata", tc.file)
			if *update {
				if err := os.MkdirAll("testdata", 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if diff := cmp.Diff(string(want), string(got)); diff != "" {
				t.Errorf("Marshal differs from %s (-want +got):\n%s", path, diff)
			}
			back := reflect.New(reflect.TypeOf(tc.v).Elem()).Interface()
			if err := json.Unmarshal(want, back); err != nil {
				t.Fatalf("golden does not decode into %T: %v", tc.v, err)
			}
			if diff := cmp.Diff(tc.v, back, wireOpts); diff != "" {
				t.Errorf("golden decodes to a different value (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCaptureByteCompatibility(t *testing.T) {
	html := strings.Replace(capture402, `"description":"demo"`, `"description":"Chat <gpt-4o-mini> & \"tools\" <\/script>"`, 1)
	htmlWant := strings.Replace(html, `<\/script>`, `</script>`, 1) // JSON.stringify does not escape '/'
	tests := []struct {
		name string
		in   string
		want string
	}{
		{"402 capture", capture402, capture402},
		{"HTML characters", html, htmlWant},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var p x402.PaymentRequired
			if err := json.Unmarshal([]byte(tc.in), &p); err != nil {
				t.Fatalf("Unmarshal: %v", err)
			}
			got := mustMarshal(t, &p)
			if diff := cmp.Diff(tc.want, string(got)); diff != "" {
				t.Errorf("Marshal (-want +got):\n%s", diff)
			}
			if bytes.Contains(got, []byte(`\u00`)) {
				t.Errorf("Marshal escaped HTML characters: %s", got)
			}

			// The header codec adds nothing but base64.
			dec, err := x402.DecodePaymentRequired(b64(tc.in))
			if err != nil {
				t.Fatalf("DecodePaymentRequired: %v", err)
			}
			if got, want := mustHeader(t, dec), b64(tc.want); got != want {
				t.Errorf("EncodeHeader = %s, want %s", got, want)
			}
			raw, err := dec.RawAccepted(0)
			if err != nil {
				t.Fatalf("RawAccepted(0): %v", err)
			}
			if diff := cmp.Diff(captureAccepts0, string(raw)); diff != "" {
				t.Errorf("RawAccepted(0) (-want +got):\n%s", diff)
			}
		})
	}

	t.Run("built in memory", func(t *testing.T) {
		p := &x402.PaymentRequired{
			X402Version: x402.Version,
			Error:       "Payment required",
			Resource:    &x402.ResourceInfo{URL: "http://127.0.0.1:4021/paid", Description: "demo", MimeType: "application/json"},
			Accepts:     []x402.PaymentRequirements{captureRequirements},
		}
		if diff := cmp.Diff(capture402, string(mustMarshal(t, p))); diff != "" {
			t.Errorf("Marshal (-want +got):\n%s", diff)
		}
		raw, err := p.RawAccepted(0)
		if err != nil {
			t.Fatalf("RawAccepted(0): %v", err)
		}
		if diff := cmp.Diff(captureAccepts0, string(raw)); diff != "" {
			t.Errorf("RawAccepted(0) of an in-memory value (-want +got):\n%s", diff)
		}
	})

	t.Run("paid PAYMENT-RESPONSE key order", func(t *testing.T) {
		// As npm 2.27 sends it: success, payer, transaction, network, in the TS parser's order.
		want := `{"success":true,"payer":"` + payer1337 + `","transaction":"` + tx1337 + `","network":"eip155:1337"}`
		if diff := cmp.Diff(want, string(mustMarshal(t, settleSuccessFixture()))); diff != "" {
			t.Errorf("Marshal (-want +got):\n%s", diff)
		}
	})
}

func TestRawAccepted(t *testing.T) {
	odd := "{ \"network\" : \"eip155:1337\",\n\t\"scheme\":\"exact\" ,\"payTo\":\"0x70997970C51812dc3A010C7d01b50e0d17dc79C8\", \"amount\":\"10000\",\"asset\":\"0x5FbDB2315678afecb367f032d93F642f64180aa3\",\"maxTimeoutSeconds\":60 , \"extra\" : { } ,\"unknownKey\":[1, 2]}"
	body := `{"x402Version":2,"resource":{"url":"u"},"accepts":[` + odd + " ,\n " + captureAccepts0 + `]}`

	p, err := x402.DecodePaymentRequired(b64(body))
	if err != nil {
		t.Fatalf("DecodePaymentRequired: %v", err)
	}
	for i, want := range []string{odd, captureAccepts0} {
		got, err := p.RawAccepted(i)
		if err != nil {
			t.Fatalf("RawAccepted(%d): %v", i, err)
		}
		if diff := cmp.Diff(want, string(got)); diff != "" {
			t.Errorf("RawAccepted(%d) is not the received bytes (-want +got):\n%s", i, diff)
		}
	}
	wantOdd := captureRequirements
	wantOdd.Extra = json.RawMessage(`{}`)
	if diff := cmp.Diff([]x402.PaymentRequirements{wantOdd, captureRequirements}, p.Accepts, wireOpts); diff != "" {
		t.Errorf("Accepts (-want +got):\n%s", diff)
	}

	for _, i := range []int{-1, 2, 100} {
		if raw, err := p.RawAccepted(i); err == nil {
			t.Errorf("RawAccepted(%d) = %s, want an error", i, raw)
		}
	}
	var empty x402.PaymentRequired
	if raw, err := empty.RawAccepted(0); err == nil {
		t.Errorf("RawAccepted(0) of an empty value = %s, want an error", raw)
	}

	// Decoding again into the same value forgets the earlier bytes.
	if err := json.Unmarshal([]byte(capture402), p); err != nil {
		t.Fatalf("Unmarshal: %v", err)
	}
	if got, _ := p.RawAccepted(0); string(got) != captureAccepts0 {
		t.Errorf("RawAccepted(0) after a second Unmarshal = %s, want %s", got, captureAccepts0)
	}
	if _, err := p.RawAccepted(1); err == nil {
		t.Errorf("RawAccepted(1) after a second Unmarshal with one entry: want an error")
	}
}

func TestEmptyExtraSurvives(t *testing.T) {
	const req = `{"scheme":"exact","network":"eip155:1337","amount":"1","asset":"0xa","payTo":"0xb","maxTimeoutSeconds":60,"extra":{}}`

	t.Run("PaymentRequirements", func(t *testing.T) {
		var r x402.PaymentRequirements
		if err := json.Unmarshal([]byte(req), &r); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(req, string(mustMarshal(t, r))); diff != "" {
			t.Errorf("round trip (-want +got):\n%s", diff)
		}
	})

	t.Run("PaymentRequired echo", func(t *testing.T) {
		pr, err := x402.DecodePaymentRequired(b64(`{"x402Version":2,"resource":{"url":"u"},"accepts":[` + req + `]}`))
		if err != nil {
			t.Fatal(err)
		}
		raw, err := pr.RawAccepted(0)
		if err != nil {
			t.Fatal(err)
		}
		h := mustHeader(t, &x402.PaymentPayload{X402Version: 2, Resource: pr.Resource, Accepted: raw, Payload: json.RawMessage(`{"signature":"0x00"}`)})
		b, _ := base64.StdEncoding.DecodeString(h)
		if !bytes.Contains(b, []byte(`"accepted":`+req)) {
			t.Errorf("payload does not echo accepts[0] verbatim: %s", b)
		}
		pp, err := x402.DecodePaymentPayload(h)
		if err != nil {
			t.Fatal(err)
		}
		acc, err := pp.AcceptedRequirements()
		if err != nil {
			t.Fatal(err)
		}
		if string(acc.Extra) != "{}" {
			t.Errorf("accepted extra = %q, want {}", acc.Extra)
		}
		if err := x402.Match(pr.Accepts[0], acc); err != nil {
			t.Errorf("Match(offer, echo) = %v, want nil", err)
		}
	})

	t.Run("built in memory", func(t *testing.T) {
		r := x402.PaymentRequirements{Scheme: "exact", Network: "eip155:1337", Amount: "1", Asset: "0xa", PayTo: "0xb", MaxTimeoutSeconds: 60, Extra: json.RawMessage(`{}`)}
		if diff := cmp.Diff(req, string(mustMarshal(t, r))); diff != "" {
			t.Errorf("Marshal (-want +got):\n%s", diff)
		}
		r.Extra = nil
		if got := string(mustMarshal(t, r)); strings.Contains(got, "extra") {
			t.Errorf("Marshal with nil Extra = %s, want no extra key", got)
		}
	})
}

func TestSettleResponseMarshal(t *testing.T) {
	tests := []struct {
		name string
		v    x402.SettleResponse
		want string
	}{
		{"zero value", x402.SettleResponse{}, `{"success":false,"transaction":"","network":""}`},
		{"failure without transaction", x402.SettleResponse{ErrorReason: x402.ReasonInsufficientFunds, Network: "eip155:1337"},
			`{"success":false,"errorReason":"insufficient_funds","transaction":"","network":"eip155:1337"}`},
		{"failure", *settleFailureFixture(),
			`{"success":false,"errorReason":"invalid_exact_evm_nonce_already_used","errorMessage":"authorization already used","payer":"` + payer1337 + `","transaction":"","network":"eip155:1337"}`},
		{"pending carries the hash", *settlePendingFixture(),
			`{"success":false,"errorReason":"settlement_pending","payer":"` + payer1337 + `","transaction":"` + tx1337 + `","network":"eip155:1337"}`},
		{"all fields", x402.SettleResponse{Success: true, Payer: "p", Transaction: "t", Network: "n", Amount: "5", Extensions: json.RawMessage(`{}`), Extra: json.RawMessage(`{"a":1}`)},
			`{"success":true,"payer":"p","transaction":"t","network":"n","amount":"5","extensions":{},"extra":{"a":1}}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, string(mustMarshal(t, tc.v))); diff != "" {
				t.Errorf("Marshal (-want +got):\n%s", diff)
			}
			// What we send, our own client accepts.
			if _, err := x402.DecodeSettleResponse(b64(tc.want)); err != nil {
				t.Errorf("DecodeSettleResponse of our own answer: %v", err)
			}
		})
	}
}

func TestSupportedResponseMarshal(t *testing.T) {
	tests := []struct {
		name string
		v    any
		want string
	}{
		{"zero value", x402.SupportedResponse{}, `{"kinds":[],"extensions":[],"signers":{}}`},
		{"pointer", &x402.SupportedResponse{}, `{"kinds":[],"extensions":[],"signers":{}}`},
		{"empty non-nil", x402.SupportedResponse{Kinds: []x402.SupportedKind{}, Extensions: []string{}, Signers: map[string][]string{}},
			`{"kinds":[],"extensions":[],"signers":{}}`},
		{"kinds only", x402.SupportedResponse{Kinds: []x402.SupportedKind{{X402Version: 2, Scheme: "exact", Network: "eip155:1337"}}},
			`{"kinds":[{"x402Version":2,"scheme":"exact","network":"eip155:1337"}],"extensions":[],"signers":{}}`},
		{"kind extra kept", x402.SupportedResponse{Kinds: []x402.SupportedKind{{X402Version: 2, Scheme: "upto", Network: "eip155:1337", Extra: json.RawMessage(`{"facilitatorAddress":"0x1"}`)}}},
			`{"kinds":[{"x402Version":2,"scheme":"upto","network":"eip155:1337","extra":{"facilitatorAddress":"0x1"}}],"extensions":[],"signers":{}}`},
		{"nested in a struct", struct {
			S x402.SupportedResponse `json:"s"`
		}{}, `{"s":{"kinds":[],"extensions":[],"signers":{}}}`},
		{"no HTML escaping", x402.SupportedResponse{Extensions: []string{"<a&b>"}}, `{"kinds":[],"extensions":["<a&b>"],"signers":{}}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, string(mustMarshal(t, tc.v))); diff != "" {
				t.Errorf("x402.Marshal (-want +got):\n%s", diff)
			}
		})
	}

	t.Run("encoding/json", func(t *testing.T) {
		got, err := json.Marshal(x402.SupportedResponse{})
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(`{"kinds":[],"extensions":[],"signers":{}}`, string(got)); diff != "" {
			t.Errorf("json.Marshal (-want +got):\n%s", diff)
		}
	})

	t.Run("decoded without the optional keys", func(t *testing.T) {
		var s x402.SupportedResponse
		if err := json.Unmarshal([]byte(`{"kinds":[{"x402Version":2,"scheme":"exact","network":"eip155:1337"}]}`), &s); err != nil {
			t.Fatal(err)
		}
		want := `{"kinds":[{"x402Version":2,"scheme":"exact","network":"eip155:1337"}],"extensions":[],"signers":{}}`
		if diff := cmp.Diff(want, string(mustMarshal(t, s))); diff != "" {
			t.Errorf("re-encoded (-want +got):\n%s", diff)
		}
	})
}

func TestVerifyResponseMarshal(t *testing.T) {
	tests := []struct {
		name string
		v    *x402.VerifyResponse
		want string
	}{
		{"valid", &x402.VerifyResponse{IsValid: true, Payer: payer1337}, `{"isValid":true,"payer":"` + payer1337 + `"}`},
		{"zero value", &x402.VerifyResponse{}, `{"isValid":false}`},
		{"invalid", (&x402.VerifyError{Reason: x402.ReasonInsufficientFunds, Payer: payer1337}).Response(),
			`{"isValid":false,"invalidReason":"insufficient_funds","payer":"` + payer1337 + `"}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, string(mustMarshal(t, tc.v))); diff != "" {
				t.Errorf("Marshal (-want +got):\n%s", diff)
			}
		})
	}
}

func TestMarshalNoTrailingNewline(t *testing.T) {
	b := mustMarshal(t, map[string]string{"a": "<&>"})
	if diff := cmp.Diff(`{"a":"<&>"}`, string(b)); diff != "" {
		t.Errorf("Marshal (-want +got):\n%s", diff)
	}
	if _, err := x402.Marshal(make(chan int)); err == nil {
		t.Errorf("Marshal(chan) = nil error, want one")
	}
	if _, err := x402.EncodeHeader(make(chan int)); err == nil {
		t.Errorf("EncodeHeader(chan) = nil error, want one")
	}
}

func TestPaymentRequiredUnmarshalError(t *testing.T) {
	body := `{"x402Version":2,"resource":{"url":"u"},"accepts":[` + captureAccepts0 + `,{"scheme":"exact","maxTimeoutSeconds":"60"}]}`
	var p x402.PaymentRequired
	err := json.Unmarshal([]byte(body), &p)
	if err == nil {
		t.Fatal("Unmarshal = nil error, want one")
	}
	// Error() is called directly by loggers (slog does not recover panics).
	if msg := err.Error(); !strings.Contains(msg, "accepts[1]") || !strings.Contains(msg, "maxTimeoutSeconds") {
		t.Errorf("error %q does not name accepts[1].maxTimeoutSeconds", msg)
	}
	if _, ok := errors.AsType[*json.UnmarshalTypeError](err); !ok {
		t.Errorf("error %v does not wrap the *json.UnmarshalTypeError", err)
	}
}
