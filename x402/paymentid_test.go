package x402_test

import (
	"encoding/json"
	"errors"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/llm4agents/llm4agents/x402"
)

// tsPaymentID is the id pattern of the TS payment-identifier schema.
var tsPaymentID = regexp.MustCompile(`^[a-zA-Z0-9_-]{16,128}$`)

func TestNewPaymentID(t *testing.T) {
	seen := map[string]bool{}
	shape := regexp.MustCompile(`^pay_[0-9a-f]{32}$`)
	for range 1000 {
		id := x402.NewPaymentID()
		if !shape.MatchString(id) {
			t.Fatalf("NewPaymentID() = %q, want pay_ + 32 hex", id)
		}
		if err := x402.ValidPaymentID(id); err != nil {
			t.Fatalf("ValidPaymentID(%q) = %v", id, err)
		}
		if seen[id] {
			t.Fatalf("NewPaymentID() repeated %q", id)
		}
		seen[id] = true
	}
}

func TestValidPaymentID(t *testing.T) {
	tests := []struct {
		id string
		ok bool
	}{
		{"pay_7d5d747be160e280504c099d984bcfe0", true},
		{"abcdefghijklmnop", true}, // 16, the minimum
		{strings.Repeat("A", 128), true},
		{"a-b_c-d_e-f_g-h_", true},
		{"", false},
		{"abcdefghijklmno", false}, // 15
		{strings.Repeat("A", 129), false},
		{strings.Repeat("A", 1<<20), false},
		{"pay_7d5d747be160e280504c099d984bcfé", false}, // non-ASCII
		{"pay_7d5d747be160e28\u00000504c099d98", false},
		{"pay_7d5d747be160e280 504c099d984bcfe0", false},
		{"pay_7d5d747be160e280.504c099d984bcfe0", false},
		{"pay_7d5d747be160e280\n504c099d984bcfe0", false},
		{"ｐａｙ＿７ｄ５ｄ７４７ｂｅ１６０ｅ", false},                // fullwidth letters
		{"pay_\xff\xfe7d5d747be160e280504c", false}, // not UTF-8
	}
	for _, tc := range tests {
		err := x402.ValidPaymentID(tc.id)
		if (err == nil) != tc.ok {
			t.Errorf("ValidPaymentID(%.40q) = %v, want ok=%v", tc.id, err, tc.ok)
		}
		if err != nil && !errors.Is(err, x402.ErrPaymentIDFormat) {
			t.Errorf("ValidPaymentID(%.40q) = %v, want ErrPaymentIDFormat", tc.id, err)
		}
		if ok := tsPaymentID.MatchString(tc.id); ok != tc.ok {
			t.Errorf("the TS pattern says %v for %.40q, the table %v", ok, tc.id, tc.ok)
		}
	}
	// The texts are the official TS package's: servers answer
	// them verbatim.
	if got := x402.ErrPaymentIDFormat.Error(); got != "Invalid payment ID format. ID must be 16-128 characters and contain only alphanumeric characters, hyphens, and underscores." {
		t.Errorf("ErrPaymentIDFormat = %q", got)
	}
	if got := x402.ErrPaymentIDRequired.Error(); got != "Server requires a payment identifier but none was provided" {
		t.Errorf("ErrPaymentIDRequired = %q", got)
	}
}

func TestPaymentIDDeclaration(t *testing.T) {
	for _, required := range []bool{false, true} {
		raw := x402.PaymentIDDeclaration(required)
		var got struct {
			Info   map[string]any `json:"info"`
			Schema struct {
				Type       string   `json:"type"`
				Required   []string `json:"required"`
				Properties struct {
					ID struct {
						MinLength int    `json:"minLength"`
						MaxLength int    `json:"maxLength"`
						Pattern   string `json:"pattern"`
					} `json:"id"`
				} `json:"properties"`
			} `json:"schema"`
		}
		if err := json.Unmarshal(raw, &got); err != nil {
			t.Fatalf("declaration %s: %v", raw, err)
		}
		if diff := cmp.Diff(map[string]any{"required": required}, got.Info); diff != "" {
			t.Errorf("info (-want +got):\n%s", diff)
		}
		id := got.Schema.Properties.ID
		if got.Schema.Type != "object" || id.MinLength != 16 || id.MaxLength != 128 || id.Pattern != "^[a-zA-Z0-9_-]+$" ||
			len(got.Schema.Required) != 1 || got.Schema.Required[0] != "required" {
			t.Errorf("schema = %+v", got.Schema)
		}
		declared, req := x402.PaymentIDDeclared(map[string]json.RawMessage{x402.ExtensionPaymentID: raw})
		if !declared || req != required {
			t.Errorf("PaymentIDDeclared(own declaration %v) = %v, %v", required, declared, req)
		}
	}
}

// hostileExtensions are payment-identifier values of every wrong shape.
var hostileExtensions = []string{
	`null`, `true`, `1`, `"payment-identifier"`, `[]`, `[{"info":{"required":true}}]`,
	`{}`, `{"info":null}`, `{"info":"required"}`, `{"info":[]}`, `{"info":{}}`,
	`{"info":{"required":"true"}}`, `{"info":{"required":1}}`, `{"info":{"required":null}}`,
	`{"info":{"required":{"nested":{"deeper":[1,2,3]}}}}`, `{"Info":{"required":true}}`,
}

func TestPaymentIDDeclared(t *testing.T) {
	tests := []struct {
		name               string
		ext                map[string]json.RawMessage
		declared, required bool
	}{
		{name: "nil"},
		{name: "other extensions", ext: map[string]json.RawMessage{"bazaar": json.RawMessage(`{"info":{}}`)}},
		{name: "optional", ext: map[string]json.RawMessage{"payment-identifier": json.RawMessage(`{"info":{"required":false}}`)}, declared: true},
		{name: "required", ext: map[string]json.RawMessage{"payment-identifier": json.RawMessage(`{"info":{"required":true},"schema":{}}`)}, declared: true, required: true},
		{name: "extra info fields", ext: map[string]json.RawMessage{"payment-identifier": json.RawMessage(` {"info":{"required":true,"hint":"x"}} `)}, declared: true, required: true},
	}
	for _, h := range hostileExtensions {
		tests = append(tests, struct {
			name               string
			ext                map[string]json.RawMessage
			declared, required bool
		}{name: "hostile " + h, ext: map[string]json.RawMessage{"payment-identifier": json.RawMessage(h)}})
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			declared, required := x402.PaymentIDDeclared(tc.ext)
			if declared != tc.declared || required != tc.required {
				t.Errorf("PaymentIDDeclared = %v, %v; want %v, %v", declared, required, tc.declared, tc.required)
			}
		})
	}
}

func TestAppendPaymentID(t *testing.T) {
	const id = "pay_7d5d747be160e280504c099d984bcfe0"
	bazaar := json.RawMessage(`{"info":{"input":{"type":"http"}},"schema":{}}`)
	in := map[string]json.RawMessage{
		"bazaar":             bazaar,
		"payment-identifier": json.RawMessage(`{"info":{"required":false,"note":"<&>"},"schema":{"type":"object"}}`),
	}
	before := map[string]string{"bazaar": string(in["bazaar"]), "payment-identifier": string(in["payment-identifier"])}
	out, err := x402.AppendPaymentID(in, id)
	if err != nil {
		t.Fatal(err)
	}
	if string(in["payment-identifier"]) != before["payment-identifier"] || string(in["bazaar"]) != before["bazaar"] {
		t.Error("AppendPaymentID modified its input")
	}
	if string(out["bazaar"]) != string(bazaar) {
		t.Errorf("bazaar = %s, want it untouched", out["bazaar"])
	}
	want := `{"info":{"id":"pay_7d5d747be160e280504c099d984bcfe0","note":"<&>","required":false},"schema":{"type":"object"}}`
	if got := string(out["payment-identifier"]); got != want {
		t.Errorf("payment-identifier = %s\nwant %s", got, want)
	}

	// Read back through a payload, as a server does.
	ext, err := x402.Marshal(out)
	if err != nil {
		t.Fatal(err)
	}
	got, err := x402.PaymentIDFromPayload(&x402.PaymentPayload{Extensions: ext}, true)
	if err != nil || got != id {
		t.Errorf("PaymentIDFromPayload = %q, %v; want %q", got, err, id)
	}

	t.Run("not declared", func(t *testing.T) {
		for _, ext := range []map[string]json.RawMessage{nil, {"bazaar": bazaar}, {"payment-identifier": json.RawMessage(`{"info":{}}`)}} {
			out, err := x402.AppendPaymentID(ext, id)
			if err != nil {
				t.Fatal(err)
			}
			if len(out) != len(ext) || (len(ext) > 0 && string(out["payment-identifier"]) != string(ext["payment-identifier"])) {
				t.Errorf("AppendPaymentID(%v) = %v, want a copy without an id", ext, out)
			}
		}
	})
	t.Run("invalid id", func(t *testing.T) {
		for _, bad := range []string{"", "short", strings.Repeat("x", 129), "pay_7d5d747be160e280504c099d984bcfé"} {
			if _, err := x402.AppendPaymentID(in, bad); !errors.Is(err, x402.ErrPaymentIDFormat) {
				t.Errorf("AppendPaymentID(%q) = %v, want ErrPaymentIDFormat", bad, err)
			}
		}
	})
	t.Run("replaces a stale id", func(t *testing.T) {
		in := map[string]json.RawMessage{"payment-identifier": json.RawMessage(`{"info":{"required":true,"id":"pay_00000000000000000000000000000000"}}`)}
		out, err := x402.AppendPaymentID(in, id)
		if err != nil {
			t.Fatal(err)
		}
		if want := `{"info":{"id":"` + id + `","required":true}}`; string(out["payment-identifier"]) != want {
			t.Errorf("got %s, want %s", out["payment-identifier"], want)
		}
	})
}

func TestPaymentIDFromPayload(t *testing.T) {
	const id = "pay_7d5d747be160e280504c099d984bcfe0"
	tests := []struct {
		name     string
		ext      string
		required bool
		want     string
		wantErr  error
	}{
		{name: "no extensions", want: ""},
		{name: "no extensions, required", required: true, wantErr: x402.ErrPaymentIDRequired},
		{name: "null extensions", ext: `null`, want: ""},
		{name: "empty extensions", ext: `{}`, want: ""},
		{name: "empty extensions, required", ext: `{}`, required: true, wantErr: x402.ErrPaymentIDRequired},
		{name: "other extension", ext: `{"bazaar":{}}`, want: ""},
		{name: "declared, no id", ext: `{"payment-identifier":{"info":{"required":false}}}`, want: ""},
		{name: "declared, no id, required", ext: `{"payment-identifier":{"info":{"required":true}}}`, required: true, wantErr: x402.ErrPaymentIDRequired},
		{name: "id", ext: `{"payment-identifier":{"info":{"required":false,"id":"` + id + `"}}}`, want: id},
		{name: "id, required", ext: `{"payment-identifier":{"info":{"required":true,"id":"` + id + `"}}}`, required: true, want: id},
		{name: "escaped id", ext: `{"payment-identifier":{"info":{"required":false,"id":"\u0070ay_7d5d747be160e280504c099d984bcfe0"}}}`, want: id},
		{name: "short id", ext: `{"payment-identifier":{"info":{"required":false,"id":"pay_1"}}}`, wantErr: x402.ErrPaymentIDFormat},
		{name: "long id", ext: `{"payment-identifier":{"info":{"required":false,"id":"` + strings.Repeat("a", 129) + `"}}}`, wantErr: x402.ErrPaymentIDFormat},
		{name: "non-ASCII id", ext: `{"payment-identifier":{"info":{"required":false,"id":"pay_7d5d747be160e280504c099d984bcfé"}}}`, wantErr: x402.ErrPaymentIDFormat},
		{name: "escaped NUL in id", ext: `{"payment-identifier":{"info":{"required":false,"id":"pay_7d5d747be160e28\u0000504c099d984bcfe"}}}`, wantErr: x402.ErrPaymentIDFormat},
		{name: "empty id", ext: `{"payment-identifier":{"info":{"required":false,"id":""}}}`, wantErr: x402.ErrPaymentIDFormat},
		{name: "numeric id", ext: `{"payment-identifier":{"info":{"required":false,"id":1234567890123456789}}}`, wantErr: x402.ErrPaymentIDMalformed},
		{name: "null id", ext: `{"payment-identifier":{"info":{"required":false,"id":null}}}`, wantErr: x402.ErrPaymentIDMalformed},
		{name: "object id", ext: `{"payment-identifier":{"info":{"required":false,"id":{"id":"` + id + `"}}}}`, wantErr: x402.ErrPaymentIDMalformed},
		{name: "array id", ext: `{"payment-identifier":{"info":{"required":false,"id":["` + id + `"]}}}`, wantErr: x402.ErrPaymentIDMalformed},
		{name: "extensions is an array", ext: `[{"payment-identifier":{}}]`, wantErr: x402.ErrPaymentIDMalformed},
		{name: "extensions is a string", ext: `"payment-identifier"`, wantErr: x402.ErrPaymentIDMalformed},
		{name: "id without required", ext: `{"payment-identifier":{"info":{"id":"` + id + `"}}}`, wantErr: x402.ErrPaymentIDMalformed},
	}
	for _, h := range hostileExtensions {
		tests = append(tests, struct {
			name     string
			ext      string
			required bool
			want     string
			wantErr  error
		}{name: "hostile " + h, ext: `{"payment-identifier":` + h + `}`, wantErr: x402.ErrPaymentIDMalformed})
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := x402.PaymentIDFromPayload(&x402.PaymentPayload{Extensions: json.RawMessage(tc.ext)}, tc.required)
			if got != tc.want || !errors.Is(err, tc.wantErr) || (err == nil) != (tc.wantErr == nil) {
				t.Errorf("PaymentIDFromPayload = %q, %v; want %q, %v", got, err, tc.want, tc.wantErr)
			}
			if err != nil && got != "" {
				t.Errorf("an error with an id %q", got)
			}
		})
	}
}

// FuzzPaymentID: no input panics; whatever PaymentIDFromPayload accepts is a
// valid id, and any error is one of the three typed faults; an id accepted by
// ValidPaymentID survives AppendPaymentID and comes back unchanged.
func FuzzPaymentID(f *testing.F) {
	f.Add(`{"payment-identifier":{"info":{"required":false,"id":"pay_7d5d747be160e280504c099d984bcfe0"}}}`, "pay_7d5d747be160e280504c099d984bcfe0")
	f.Add(`{"payment-identifier":{"info":{"required":true}}}`, "abcdefghijklmnop")
	f.Add(`{"payment-identifier":{"info":{"required":false,"id":1}}}`, "")
	f.Add(`{"payment-identifier":[]}`, "pay_é")
	f.Add(`[]`, strings.Repeat("z", 129))
	for _, h := range hostileExtensions {
		f.Add(`{"payment-identifier":`+h+`}`, "pay_0123456789abcdef")
	}
	f.Fuzz(func(t *testing.T, ext, id string) {
		for _, required := range []bool{false, true} {
			got, err := x402.PaymentIDFromPayload(&x402.PaymentPayload{Extensions: json.RawMessage(ext)}, required)
			switch {
			case err == nil && got != "" && x402.ValidPaymentID(got) != nil:
				t.Fatalf("accepted invalid id %q", got)
			case err == nil && got == "" && required:
				t.Fatal("required id missing without an error")
			case err != nil && !errors.Is(err, x402.ErrPaymentIDFormat) && !errors.Is(err, x402.ErrPaymentIDRequired) && !errors.Is(err, x402.ErrPaymentIDMalformed):
				t.Fatalf("untyped error %v", err)
			}
		}
		var m map[string]json.RawMessage
		if json.Unmarshal([]byte(ext), &m) != nil {
			return
		}
		declared, _ := x402.PaymentIDDeclared(m)
		out, err := x402.AppendPaymentID(m, id)
		if x402.ValidPaymentID(id) != nil {
			if !errors.Is(err, x402.ErrPaymentIDFormat) {
				t.Fatalf("AppendPaymentID(invalid %q) = %v", id, err)
			}
			return
		}
		if err != nil {
			t.Fatalf("AppendPaymentID: %v", err)
		}
		b, err := x402.Marshal(out)
		if err != nil {
			t.Fatal(err)
		}
		got, err := x402.PaymentIDFromPayload(&x402.PaymentPayload{Extensions: b}, false)
		if declared && (err != nil || got != id) {
			t.Fatalf("round trip = %q, %v; want %q", got, err, id)
		}
	})
}
