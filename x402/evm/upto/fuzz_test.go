package upto_test

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"

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
