package x402

import (
	"errors"
	"testing"
)

// TestOnlyExactNames checks the walk's fast path on documents it must send
// to the walk (a case twin of a field name, spelled plainly, with an
// escape or a non-ASCII letter, as a member or as a value) and on those it
// may pass.
func TestOnlyExactNames(t *testing.T) {
	sh := shapeFor(paymentRequiredTyp)
	tests := []struct {
		name string
		doc  string
		fast bool
	}{
		{"exact names", `{"x402Version":2,"accepts":[{"scheme":"exact","payTo":"0x1"}],"resource":{"url":"u"}}`, true},
		{"an unknown member", `{"x402Version":2,"accepts":[],"extra":{"anything":"AcCePtS-like but longer"}}`, true},
		{"an escaped quote before a name", `{"error":"say \"hi\"","accepts":[]}`, true},
		{"a member in another case", `{"x402Version":2,"Accepts":[]}`, false},
		{"a nested member in another case", `{"accepts":[{"payto":"0x1"}]}`, false},
		{"a value that folds to a name", `{"error":"ACCEPTS"}`, false},
		{"a \\u escape", `{"\u0061ccepts":[]}`, false},
		{"a long s", "{\"accept\u017f\":[]}", false},
		{"a Kelvin sign", "{\"resource\":{\"\u212aind\":1}}", false},
		{"an unterminated string", `{"accepts`, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := onlyExactNames([]byte(tc.doc), sh); got != tc.fast {
				t.Errorf("onlyExactNames(%s) = %t, want %t", tc.doc, got, tc.fast)
			}
		})
	}
}

// FuzzOnlyExactNames checks the fast path against the walk: a document it
// lets skip the walk is one the walk finds no case twin in, for each of
// the shapes the header decoders check.
func FuzzOnlyExactNames(f *testing.F) {
	for _, doc := range []string{
		`{"x402Version":2,"accepts":[{"scheme":"exact","payTo":"0x1","amount":"1"}],"resource":{"url":"u"}}`,
		`{"x402Version":2,"Accepts":[]}`,
		`{"payload":{"signature":"0x","authorization":{"from":"0x1"}},"accepted":{"payTo":"0x2"}}`,
		`{"success":true,"transaction":"0x1","network":"eip155:1","payer":"0x2"}`,
		`{"a":"\"accepts\"","accepts":[]}`,
	} {
		f.Add(doc)
	}
	shapes := []*shape{shapeFor(paymentRequiredTyp), shapeFor(paymentPayloadTyp), shapeFor(settleResponseTyp)}
	f.Fuzz(func(t *testing.T, doc string) {
		for _, sh := range shapes {
			if onlyExactNames([]byte(doc), sh) && errors.Is(walkNames([]byte(doc), sh), errFieldName) {
				t.Fatalf("the fast path passed a document the walk refuses: %q", doc)
			}
		}
	})
}
