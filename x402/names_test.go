package x402_test

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/llm4agents/llm4agents/x402"
)

// attacker is an address that appears only in the hidden twin of a member:
// a decoder that reads the twin pays it.
const attacker = "0x00000000000000000000000000000000DeaDBeef"

// twin402 is capture402 with the accepts member replaced by body.
func twin402(body string) string {
	return `{"x402Version":2,"resource":{"url":"http://127.0.0.1:4021/paid"},` + body + `}`
}

var evilAccepts = `[` + strings.Replace(captureAccepts0, "0x70997970C51812dc3A010C7d01b50e0d17dc79C8", attacker, 1) + `]`

// TestDecodeRefusesCaseTwins: the official decoder is case-sensitive, Go's
// folds case, so a member that matches a field only case-insensitively would
// be read two ways. Every such document is refused, whichever member comes
// first, at every depth the protocol decodes into a struct.
func TestDecodeRefusesCaseTwins(t *testing.T) {
	good := `"accepts":[` + captureAccepts0 + `]`
	required := []struct{ name, json string }{
		{"Accepts after accepts", twin402(good + `,"Accepts":` + evilAccepts)},
		{"Accepts before accepts", twin402(`"Accepts":` + evilAccepts + `,` + good)},
		{"ACCEPTS alone", `{"x402Version":2,"resource":{"url":"u"},"ACCEPTS":` + evilAccepts + `}`},
		{"long s (U+017F) folds to s", twin402(good + `,"accept\u017f":` + evilAccepts)},
		{"escaped upper-case A", twin402(good + `,"\u0041ccepts":` + evilAccepts)},
		{"X402VERSION twin", `{"X402VERSION":1,` + twin402(good)[1:]},
		{"resource URL twin", `{"x402Version":2,"resource":{"url":"u","URL":"v"},` + good + `}`},
		{"payTo twin in accepts[0]", twin402(`"accepts":[` + strings.Replace(captureAccepts0, `"maxTimeoutSeconds"`, `"PAYTO":"`+attacker+`","maxTimeoutSeconds"`, 1) + `]`)},
		{"network with a Kelvin sign (U+212A)", twin402(`"accepts":[` + strings.Replace(captureAccepts0, `"network"`, `"networ\u212a"`, 1) + `]`)},
		{"Amount only", twin402(`"accepts":[` + strings.Replace(captureAccepts0, `"amount"`, `"Amount"`, 1) + `]`)},
		{"Extensions twin", twin402(good + `,"extensions":{},"Extensions":{"x":{}}`)},
	}
	for _, tc := range required {
		t.Run("PaymentRequired/"+tc.name, func(t *testing.T) {
			if !json.Valid([]byte(tc.json)) {
				t.Fatalf("fixture is not JSON: %s", tc.json)
			}
			pr, err := x402.DecodePaymentRequired(b64(tc.json))
			checkTwinRefused(t, err)
			if pr != nil {
				t.Errorf("decoded %+v", pr)
			}
		})
	}

	payloads := []struct{ name, json string }{
		{"Accepted twin", `{"x402Version":2,"accepted":` + captureAccepts0 + `,"Accepted":{"payTo":"` + attacker + `"},"payload":{"signature":"0x00"}}`},
		{"accepted.payTo twin", `{"x402Version":2,"accepted":` + strings.Replace(captureAccepts0, `"maxTimeoutSeconds"`, `"Payto":"`+attacker+`","maxTimeoutSeconds"`, 1) + `,"payload":{"signature":"0x00"}}`},
		{"PAYLOAD alone", `{"x402Version":2,"accepted":` + captureAccepts0 + `,"PAYLOAD":{"signature":"0x00"}}`},
		{"Resource twin", `{"x402Version":2,"resource":{"url":"a"},"Resource":{"url":"b"},"accepted":` + captureAccepts0 + `,"payload":{}}`},
	}
	for _, tc := range payloads {
		t.Run("PaymentPayload/"+tc.name, func(t *testing.T) {
			_, err := x402.DecodePaymentPayload(b64(tc.json))
			checkTwinRefused(t, err)
			_, err = x402.ParsePaymentPayload([]byte(tc.json))
			checkTwinRefused(t, err)
		})
	}

	settles := []struct{ name, json string }{
		{"Success after success", `{"success":false,"errorReason":"insufficient_funds","transaction":"","network":"eip155:1337","Success":true}`},
		{"Transaction twin", `{"success":true,"transaction":"0xabab","Transaction":"0xcdcd","network":"eip155:1337"}`},
		{"errorreason", `{"success":false,"errorreason":"x","transaction":"","network":"eip155:1337"}`},
	}
	for _, tc := range settles {
		t.Run("SettleResponse/"+tc.name, func(t *testing.T) {
			_, err := x402.DecodeSettleResponse(b64(tc.json))
			checkTwinRefused(t, err)
		})
	}

	t.Run("DecodeHeader", func(t *testing.T) {
		var v struct {
			Success bool `json:"success"`
			Inner   struct {
				PayTo string `json:"payTo"`
			} `json:"inner"`
		}
		err := x402.DecodeHeader(b64(`{"success":true,"inner":{"payTo":"a","payto":"b"}}`), &v)
		checkTwinRefused(t, err)
	})
}

func checkTwinRefused(t *testing.T, err error) {
	t.Helper()
	if !errors.Is(err, x402.ErrHeaderJSON) {
		t.Fatalf("error = %v, want ErrHeaderJSON", err)
	}
	if !strings.Contains(err.Error(), "only in case") {
		t.Errorf("error %q does not say why", err)
	}
	if strings.Contains(err.Error(), attacker) || strings.Contains(err.Error(), "\u212a") {
		t.Errorf("error %q quotes the input", err)
	}
}

// TestDecodeKeepsExactNames: what the protocol leaves free is not refused:
// unknown members, extension names and extra's members in any case, and a
// member repeated under its exact name (both decoders keep the last).
func TestDecodeKeepsExactNames(t *testing.T) {
	tests := []struct{ name, json string }{
		{"capture", capture402},
		{"unknown member", twin402(`"accepts":[` + captureAccepts0 + `],"acceptz":1`)},
		{"extension names in any case", twin402(`"accepts":[` + captureAccepts0 + `],"extensions":{"Payment-Identifier":{"info":{}},"payment-identifier":{"info":{}}}`)},
		{"extra members in any case", twin402(`"accepts":[` + strings.Replace(captureAccepts0, `"name":"USD Coin"`, `"name":"USD Coin","Name":"x","PAYTO":"y"`, 1) + `]`)},
		{"exact duplicate", twin402(`"accepts":[` + captureAccepts0 + `],"error":"a","error":"b"`)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := x402.DecodePaymentRequired(b64(tc.json)); err != nil {
				t.Fatalf("DecodePaymentRequired: %v", err)
			}
		})
	}
	if _, err := x402.DecodePaymentPayload(b64(specPayload)); err != nil {
		t.Errorf("spec payload: %v", err)
	}
}

// requiredFields are PaymentRequired's member names at each position, written
// out here as the TypeScript types name them, independently of the Go types.
var requiredFields = map[string][]string{
	"":         {"x402Version", "error", "resource", "accepts", "extensions"},
	"resource": {"url", "description", "mimeType", "serviceName", "tags", "iconUrl"},
	"accepts":  {"scheme", "network", "amount", "asset", "payTo", "maxTimeoutSeconds", "extra"},
}

// caseSensitiveReadable reports whether no member of doc at a position the
// TypeScript decoder reads differs from a field name there only in case, so
// that a case-sensitive and a case-folding decoder read the same document.
func caseSensitiveReadable(doc map[string]any) bool {
	check := func(obj map[string]any, pos string) bool {
		for k := range obj {
			for _, f := range requiredFields[pos] {
				if k != f && strings.EqualFold(k, f) {
					return false
				}
			}
		}
		return true
	}
	if !check(doc, "") {
		return false
	}
	if r, ok := doc["resource"].(map[string]any); ok && !check(r, "resource") {
		return false
	}
	accepts, _ := doc["accepts"].([]any)
	for _, a := range accepts {
		if o, ok := a.(map[string]any); ok && !check(o, "accepts") {
			return false
		}
	}
	return true
}

// FuzzDecodeCaseTwins checks DecodePaymentRequired against an independent
// oracle: whatever it accepts, a case-sensitive reader reads the same way.
func FuzzDecodeCaseTwins(f *testing.F) {
	f.Add(capture402)
	f.Add(twin402(`"accepts":[` + captureAccepts0 + `],"Accepts":` + evilAccepts))
	f.Add(twin402(`"accepts":[` + strings.Replace(captureAccepts0, `"payTo"`, `"payto"`, 1) + `]`))
	f.Add(twin402(`"accepts":[` + captureAccepts0 + `],"accept\u017f":[]`))
	f.Add(`{"x402Version":2,"resource":{"url":"u","Url":"v"},"accepts":[` + captureAccepts0 + `]}`)
	f.Fuzz(func(t *testing.T, doc string) {
		h := base64.StdEncoding.EncodeToString([]byte(doc))
		if len(h) > x402.MaxHeaderBytes {
			return
		}
		pr, err := x402.DecodePaymentRequired(h)
		if err != nil {
			checkCodecError(t, err)
			return
		}
		var tree map[string]any
		if err := json.Unmarshal([]byte(doc), &tree); err != nil {
			t.Fatalf("accepted a document encoding/json refuses: %v", err)
		}
		if !caseSensitiveReadable(tree) {
			t.Fatalf("accepted a document a case-sensitive decoder reads otherwise: %s", doc)
		}
		if len(pr.Accepts) == 0 {
			t.Fatal("accepted a challenge without accepts")
		}
	})
}
