package x402_test

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/llm4agents/llm4agents/x402"
)

func TestEncodeHeaderIsPaddedStdBase64(t *testing.T) {
	// JSON lengths 12, 13 and 14 give no, two and one padding characters. The
	// strings "???" and ">>>" encode to '/' and '+', the characters base64url replaces.
	tests := []struct {
		name    string
		v       any
		padding int
	}{
		{"no padding", map[string]string{"a": "????"}, 0},
		{"two padding", map[string]string{"a": "?????"}, 2},
		{"one padding", map[string]string{"a": "??????"}, 1},
		{"plus and slash", map[string]string{"k": "???>>>"}, -1},
		{"payment payload", paymentPayloadFixture(), -1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := mustHeader(t, tc.v)
			if strings.ContainsAny(h, "-_\r\n ") {
				t.Errorf("header %q contains a character outside standard base64", h)
			}
			if len(h)%4 != 0 {
				t.Errorf("len(header) = %d, not a multiple of 4 (unpadded)", len(h))
			}
			if tc.padding >= 0 {
				if got := len(h) - len(strings.TrimRight(h, "=")); got != tc.padding {
					t.Errorf("padding = %d, want %d (header %q)", got, tc.padding, h)
				}
			}
			b, err := base64.StdEncoding.Strict().DecodeString(h)
			if err != nil {
				t.Fatalf("header is not strict std base64: %v", err)
			}
			if diff := cmp.Diff(string(mustMarshal(t, tc.v)), string(b)); diff != "" {
				t.Errorf("decoded header differs from Marshal (-want +got):\n%s", diff)
			}
		})
	}
}

func TestHeaderRoundTrip(t *testing.T) {
	t.Run("PaymentRequired", func(t *testing.T) {
		want := paymentRequiredFixture()
		got, err := x402.DecodePaymentRequired(mustHeader(t, want))
		if err != nil {
			t.Fatalf("DecodePaymentRequired: %v", err)
		}
		if diff := cmp.Diff(want, got, wireOpts); diff != "" {
			t.Errorf("round trip (-want +got):\n%s", diff)
		}
	})
	t.Run("PaymentPayload", func(t *testing.T) {
		want := paymentPayloadFixture()
		got, err := x402.DecodePaymentPayload(mustHeader(t, want))
		if err != nil {
			t.Fatalf("DecodePaymentPayload: %v", err)
		}
		if diff := cmp.Diff(want, got, wireOpts); diff != "" {
			t.Errorf("round trip (-want +got):\n%s", diff)
		}
	})
	t.Run("PaymentPayload spec example", func(t *testing.T) {
		got, err := x402.DecodePaymentPayload(b64(specPayload))
		if err != nil {
			t.Fatalf("DecodePaymentPayload(spec example): %v", err)
		}
		again, err := x402.DecodePaymentPayload(mustHeader(t, got))
		if err != nil {
			t.Fatalf("DecodePaymentPayload(re-encoded spec example): %v", err)
		}
		if diff := cmp.Diff(got, again, wireOpts); diff != "" {
			t.Errorf("round trip (-first +second):\n%s", diff)
		}
		acc, err := got.AcceptedRequirements()
		if err != nil {
			t.Fatalf("AcceptedRequirements: %v", err)
		}
		if diff := cmp.Diff(specRequirements, acc, wireOpts); diff != "" {
			t.Errorf("AcceptedRequirements (-want +got):\n%s", diff)
		}
		if got.Resource == nil || got.Resource.URL != "https://api.example.com/premium-data" {
			t.Errorf("Resource = %+v, want the spec example's resource", got.Resource)
		}
	})
	for _, tc := range []struct {
		name string
		v    *x402.SettleResponse
	}{
		{"SettleResponse success", settleSuccessFixture()},
		{"SettleResponse failure", settleFailureFixture()},
		{"SettleResponse pending", settlePendingFixture()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := x402.DecodeSettleResponse(mustHeader(t, tc.v))
			if err != nil {
				t.Fatalf("DecodeSettleResponse: %v", err)
			}
			if diff := cmp.Diff(tc.v, got, wireOpts); diff != "" {
				t.Errorf("round trip (-want +got):\n%s", diff)
			}
		})
	}
}

// header-level refusals every decoder shares.
func headerRefusals() []refusal {
	padded := b64(`{"x402Version":2}`) // 17 bytes: one '='
	std := b64(`{"k":"???>>>"}`)       // contains '/' and '+'
	return []refusal{
		{"empty", "", x402.ErrHeaderEmpty},
		{"whitespace", " \t  ", x402.ErrHeaderEmpty},
		{"oversize garbage", strings.Repeat("A", x402.MaxHeaderBytes+4), x402.ErrHeaderTooLarge},
		{"oversize valid", b64(`{"x402Version":2,"pad":"` + strings.Repeat("x", x402.MaxHeaderBytes) + `"}`), x402.ErrHeaderTooLarge},
		{"base64url alphabet", strings.NewReplacer("+", "-", "/", "_").Replace(std), x402.ErrHeaderBase64URL},
		{"base64url unpadded", base64.RawURLEncoding.EncodeToString([]byte(`{"k":"???>>>"}`)), x402.ErrHeaderBase64URL},
		{"unpadded std", strings.TrimRight(padded, "="), x402.ErrHeaderBase64},
		{"truncated", padded[:len(padded)-3], x402.ErrHeaderBase64},
		{"garbage", "not base64 at all!", x402.ErrHeaderBase64},
		{"percent", "%7B%7D", x402.ErrHeaderBase64},
		{"space inside", padded[:8] + " " + padded[8:], x402.ErrHeaderBase64},
		{"newline inside", padded[:8] + "\n" + padded[8:], x402.ErrHeaderBase64},
		{"CRLF inside", padded[:8] + "\r\n" + padded[8:], x402.ErrHeaderBase64},
		{"padding in the middle", "eyJ4=" + padded, x402.ErrHeaderBase64},
		{"non-zero padding bits", "YR==", x402.ErrHeaderBase64},
		{"base64 of non-JSON", b64("hello, world"), x402.ErrHeaderJSON},
		{"base64 of empty", b64("   "), x402.ErrHeaderJSON},
		{"JSON array", b64(`[{"x402Version":2}]`), x402.ErrHeaderJSON},
		{"JSON null", b64("null"), x402.ErrHeaderJSON},
		{"JSON string", b64(`"x402Version"`), x402.ErrHeaderJSON},
		{"JSON number", b64("2"), x402.ErrHeaderJSON},
		{"unterminated object", b64(`{"x402Version":2,`), x402.ErrHeaderJSON},
		{"trailing garbage", b64(`{"x402Version":2} x`), x402.ErrHeaderJSON},
		{"two objects", b64(`{"x402Version":2}{}`), x402.ErrHeaderJSON},
	}
}

type refusal struct {
	name  string
	value string
	want  error
}

// versionRefusals returns a body, one per bad x402Version, built by replacing
// VERSION in tmpl.
func versionRefusals(tmpl string) []refusal {
	var out []refusal
	for _, v := range []struct{ name, json string }{
		{"x402Version 1", `"x402Version":1,`},
		{"x402Version 3", `"x402Version":3,`},
		{"x402Version string", `"x402Version":"2",`},
		{"x402Version 2.0", `"x402Version":2.0,`},
		{"x402Version 2e0", `"x402Version":2e0,`},
		{"x402Version -2", `"x402Version":-2,`},
		{"x402Version null", `"x402Version":null,`},
		{"x402Version object", `"x402Version":{"v":2},`},
		{"x402Version missing", ``},
	} {
		out = append(out, refusal{v.name, b64(strings.Replace(tmpl, "VERSION", v.json, 1)), x402.ErrVersion})
	}
	return out
}

func checkRefusals(t *testing.T, cases []refusal, decode func(string) (any, error)) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := decode(tc.value)
			if !errors.Is(err, tc.want) {
				t.Fatalf("error = %v, want errors.Is %v (value %+v)", err, tc.want, got)
			}
			// The message is logged and answered with 400: it must render.
			if msg := fmt.Sprint(err); strings.Contains(msg, "PANIC") || msg == "" {
				t.Errorf("error message %q does not render", msg)
			}
		})
	}
}

const payloadTmpl = `{VERSION"accepted":` + captureAccepts0 + `,"payload":{"signature":"0x00"}}`

func TestDecodePaymentPayloadRefusals(t *testing.T) {
	cases := headerRefusals()
	cases = append(cases, versionRefusals(payloadTmpl)...)
	for _, a := range []struct{ name, json string }{
		{"accepted missing", `{"x402Version":2,"payload":{"signature":"0x00"}}`},
		{"accepted null", `{"x402Version":2,"accepted":null,"payload":{"signature":"0x00"}}`},
		{"accepted string", `{"x402Version":2,"accepted":"exact","payload":{"signature":"0x00"}}`},
		{"accepted array", `{"x402Version":2,"accepted":[` + captureAccepts0 + `],"payload":{"signature":"0x00"}}`},
		{"accepted number", `{"x402Version":2,"accepted":1,"payload":{"signature":"0x00"}}`},
		{"accepted true", `{"x402Version":2,"accepted":true,"payload":{"signature":"0x00"}}`},
	} {
		cases = append(cases, refusal{a.name, b64(a.json), x402.ErrMissingAccepted})
	}
	for _, p := range []struct{ name, json string }{
		{"payload missing", `{"x402Version":2,"accepted":` + captureAccepts0 + `}`},
		{"payload null", `{"x402Version":2,"accepted":` + captureAccepts0 + `,"payload":null}`},
		{"payload string", `{"x402Version":2,"accepted":` + captureAccepts0 + `,"payload":"0x00"}`},
		{"payload array", `{"x402Version":2,"accepted":` + captureAccepts0 + `,"payload":[]}`},
		{"payload number", `{"x402Version":2,"accepted":` + captureAccepts0 + `,"payload":0}`},
	} {
		cases = append(cases, refusal{p.name, b64(p.json), x402.ErrMissingPayload})
	}
	cases = append(cases,
		refusal{"resource not an object", b64(`{"x402Version":2,"resource":"u","accepted":{},"payload":{}}`), x402.ErrHeaderJSON},
		refusal{"x402Version huge", b64(`{"x402Version":2,"accepted":{},"payload":{},"x402Version":99999999999999999999}`), x402.ErrVersion},
	)
	checkRefusals(t, cases, func(s string) (any, error) { return x402.DecodePaymentPayload(s) })

	t.Run("ParsePaymentPayload", func(t *testing.T) {
		var parse []refusal
		for _, tc := range cases {
			switch tc.want {
			case x402.ErrVersion, x402.ErrMissingAccepted, x402.ErrMissingPayload: //nolint:errorlint // tc.want is the table's sentinel, not a returned error
				b, err := base64.StdEncoding.DecodeString(tc.value)
				if err != nil {
					t.Fatalf("%s: %v", tc.name, err)
				}
				parse = append(parse, refusal{tc.name, string(b), tc.want})
			}
		}
		checkRefusals(t, parse, func(s string) (any, error) { return x402.ParsePaymentPayload([]byte(s)) })
	})
}

func TestDecodePaymentRequiredRefusals(t *testing.T) {
	cases := headerRefusals()
	cases = append(cases, versionRefusals(`{VERSION"resource":{"url":"u"},"accepts":[`+captureAccepts0+`]}`)...)
	for _, a := range []struct{ name, json string }{
		{"accepts missing", `{"x402Version":2,"resource":{"url":"u"}}`},
		{"accepts empty", `{"x402Version":2,"resource":{"url":"u"},"accepts":[]}`},
		{"accepts null", `{"x402Version":2,"resource":{"url":"u"},"accepts":null}`},
		{"accepts object", `{"x402Version":2,"resource":{"url":"u"},"accepts":` + captureAccepts0 + `}`},
		{"accepts entry not an object", `{"x402Version":2,"resource":{"url":"u"},"accepts":["exact"]}`},
		{"accepts entry bad maxTimeoutSeconds", `{"x402Version":2,"resource":{"url":"u"},"accepts":[{"scheme":"exact","maxTimeoutSeconds":"60"}]}`},
		{"accepts second entry bad", `{"x402Version":2,"resource":{"url":"u"},"accepts":[` + captureAccepts0 + `,{"amount":10000}]}`},
		{"resource not an object", `{"x402Version":2,"resource":"u","accepts":[` + captureAccepts0 + `]}`},
		{"extensions not an object", `{"x402Version":2,"resource":{"url":"u"},"accepts":[` + captureAccepts0 + `],"extensions":[]}`},
	} {
		cases = append(cases, refusal{a.name, b64(a.json), x402.ErrHeaderJSON})
	}
	checkRefusals(t, cases, func(s string) (any, error) { return x402.DecodePaymentRequired(s) })
}

func TestDecodeSettleResponseRefusals(t *testing.T) {
	cases := headerRefusals()
	for _, a := range []struct{ name, json string }{
		{"empty object", `{}`},
		{"success missing", `{"transaction":"","network":"eip155:1337"}`},
		{"transaction missing", `{"success":false,"errorReason":"insufficient_funds","network":"eip155:1337"}`},
		{"network missing", `{"success":true,"transaction":"0xabab"}`},
		{"success null", `{"success":null,"transaction":"","network":"eip155:1337"}`},
		{"transaction null", `{"success":true,"transaction":null,"network":"eip155:1337"}`},
		{"network null", `{"success":true,"transaction":"0xabab","network":null}`},
		{"success string", `{"success":"true","transaction":"0xabab","network":"eip155:1337"}`},
		{"transaction number", `{"success":true,"transaction":1,"network":"eip155:1337"}`},
		{"errorReason number", `{"success":false,"errorReason":1,"transaction":"","network":"eip155:1337"}`},
	} {
		cases = append(cases, refusal{a.name, b64(a.json), x402.ErrHeaderJSON})
	}
	checkRefusals(t, cases, func(s string) (any, error) { return x402.DecodeSettleResponse(s) })
}

func TestDecodeHeaderRefusals(t *testing.T) {
	checkRefusals(t, headerRefusals(), func(s string) (any, error) {
		var m map[string]any
		err := x402.DecodeHeader(s, &m)
		return m, err
	})
	t.Run("wrong shape", func(t *testing.T) {
		var v struct{ Success bool }
		err := x402.DecodeHeader(b64(`{"success":"yes"}`), &v)
		if !errors.Is(err, x402.ErrHeaderJSON) {
			t.Errorf("error = %v, want ErrHeaderJSON", err)
		}
	})
}

func TestDecodeHeaderAccepts(t *testing.T) {
	tests := []struct {
		name  string
		value string
	}{
		{"surrounding spaces", "  " + b64(`{"success":true}`) + " \t"},
		{"JSON whitespace", b64(" \n{\"success\":true}\n ")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var v struct {
				Success bool `json:"success"`
			}
			if err := x402.DecodeHeader(tc.value, &v); err != nil {
				t.Fatalf("DecodeHeader: %v", err)
			}
			if !v.Success {
				t.Errorf("success = false, want true")
			}
		})
	}
}

func TestDecodeHeaderSizeBoundary(t *testing.T) {
	// MaxHeaderBytes of base64 is exactly 3/4 as many bytes of JSON.
	build := func(jsonLen int) string {
		head := `{"x402Version":2,"accepted":{},"payload":{"f":"`
		tail := `"}}`
		return b64(head + strings.Repeat("x", jsonLen-len(head)-len(tail)) + tail)
	}
	atLimit := build(x402.MaxHeaderBytes / 4 * 3)
	if len(atLimit) != x402.MaxHeaderBytes {
		t.Fatalf("fixture is %d bytes, want %d", len(atLimit), x402.MaxHeaderBytes)
	}
	if _, err := x402.DecodePaymentPayload(atLimit); err != nil {
		t.Errorf("header of exactly MaxHeaderBytes: %v, want accepted", err)
	}
	over := build(x402.MaxHeaderBytes/4*3 + 1)
	if _, err := x402.DecodePaymentPayload(over); !errors.Is(err, x402.ErrHeaderTooLarge) {
		t.Errorf("header of %d bytes: %v, want ErrHeaderTooLarge", len(over), err)
	}
}

func TestAcceptedRequirements(t *testing.T) {
	tests := []struct {
		name     string
		accepted string
		want     x402.PaymentRequirements
		wantErr  error
	}{
		{"capture", captureAccepts0, captureRequirements, nil},
		{"empty extra kept", `{"scheme":"exact","extra":{}}`, x402.PaymentRequirements{Scheme: "exact", Extra: json.RawMessage(`{}`)}, nil},
		{"missing", ``, x402.PaymentRequirements{}, x402.ErrMissingAccepted},
		{"wrong type", `{"maxTimeoutSeconds":"60"}`, x402.PaymentRequirements{}, x402.ErrMissingAccepted},
		{"not an object", `"exact"`, x402.PaymentRequirements{}, x402.ErrMissingAccepted},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := x402.PaymentPayload{X402Version: 2, Accepted: json.RawMessage(tc.accepted)}
			got, err := p.AcceptedRequirements()
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("error = %v, want %v", err, tc.wantErr)
			}
			if err != nil {
				return
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("AcceptedRequirements (-want +got):\n%s", diff)
			}
			if tc.name == "empty extra kept" && string(got.Extra) != "{}" {
				t.Errorf("Extra = %q, want {}", got.Extra)
			}
		})
	}
}

// benchHeader is a realistic PAYMENT-SIGNATURE: the spec's example payload with a resource
// description and a payment-identifier extension, about 1.5 KiB once encoded.
func benchHeader(tb testing.TB) string {
	tb.Helper()
	p := paymentPayloadFixture()
	p.Resource.Description = "Chat completion with gpt-4o-mini, up to 4096 output tokens, billed per request"
	p.Extensions = json.RawMessage(`{"payment-identifier":{"info":{"required":false,"id":"pay_7d2f5c1e9a8b4c3d2e1f0a9b8c7d6e5f"},"schema":{"type":"object","properties":{"id":{"type":"string","minLength":16,"maxLength":128}}}}}`)
	return mustHeader(tb, p)
}

func BenchmarkDecodePaymentPayload(b *testing.B) {
	h := benchHeader(b)
	if n := len(h); n < 1400 || n > 1700 {
		b.Fatalf("bench header is %d bytes, want about 1.5 KiB", n)
	}
	b.SetBytes(int64(len(h)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := x402.DecodePaymentPayload(h); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEncodeHeaderPaymentPayload(b *testing.B) {
	p := paymentPayloadFixture()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := x402.EncodeHeader(p); err != nil {
			b.Fatal(err)
		}
	}
}
