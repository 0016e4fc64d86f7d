package x402_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/llm4agents/llm4agents/x402"
)

// The seed corpora live in testdata/fuzz/<FuzzName>/ and hold the spec examples
// (the x402 v2 spec's PaymentPayload, an npm 2.27 capture) and hostile inputs. Run a target with
//
//	go test -run='^$' -fuzz=FuzzDecodePaymentPayload -fuzztime=30s ./x402/
//
// and commit any crasher it writes there once it is fixed.

// codecErrors are the sentinels a header decoder may return; a caller answers each
// with 400, so no other error may escape.
var codecErrors = []error{
	x402.ErrHeaderEmpty, x402.ErrHeaderTooLarge, x402.ErrHeaderBase64URL, x402.ErrHeaderBase64,
	x402.ErrHeaderJSON, x402.ErrVersion, x402.ErrMissingAccepted, x402.ErrMissingPayload,
}

func checkCodecError(t *testing.T, err error) {
	t.Helper()
	for _, want := range codecErrors {
		if errors.Is(err, want) {
			_ = err.Error() // must not panic
			return
		}
	}
	t.Fatalf("error %v (%T) wraps no codec sentinel", err, err)
}

// reheader returns the header for b, or false when re-encoding outgrew the cap
// (escaping can expand a string sixfold), which is not a codec fault.
func reheader(b []byte) (string, bool) {
	h := base64.StdEncoding.EncodeToString(b)
	return h, len(h) <= x402.MaxHeaderBytes
}

func FuzzDecodePaymentPayload(f *testing.F) {
	f.Add(b64(specPayload))
	f.Add(base64.StdEncoding.EncodeToString(compactJSON([]byte(specPayload))))
	f.Fuzz(func(t *testing.T, h string) {
		p, err := x402.DecodePaymentPayload(h)
		if err != nil {
			checkCodecError(t, err)
			return
		}
		b, err := x402.Marshal(p)
		if err != nil {
			t.Fatalf("Marshal of a decoded payload: %v", err)
		}
		again, err := x402.ParsePaymentPayload(b)
		if err != nil {
			t.Fatalf("re-encoded payload refused: %v\n%s", err, b)
		}
		if diff := cmp.Diff(p, again, wireOpts); diff != "" {
			t.Fatalf("round trip changed the payload (-first +second):\n%s", diff)
		}
		if b2 := mustMarshal(t, again); !bytes.Equal(b, b2) {
			t.Fatalf("encoding is not stable:\n%s\n%s", b, b2)
		}
		if h2, ok := reheader(b); ok {
			viaHeader, err := x402.DecodePaymentPayload(h2)
			if err != nil {
				t.Fatalf("re-encoded header refused: %v", err)
			}
			if diff := cmp.Diff(p, viaHeader, wireOpts); diff != "" {
				t.Fatalf("header round trip changed the payload (-first +second):\n%s", diff)
			}
		}
		// The scheme reads accepted next; it must not panic, and a decoded
		// requirement matches itself unless its extra is not an object.
		if acc, err := p.AcceptedRequirements(); err == nil && extraIsObject(acc.Extra) {
			if err := x402.Match(acc, acc); err != nil {
				t.Fatalf("accepted does not match itself: %v", err)
			}
		}
	})
}

func FuzzDecodePaymentRequired(f *testing.F) {
	f.Add(b64(capture402))
	f.Fuzz(func(t *testing.T, h string) {
		p, err := x402.DecodePaymentRequired(h)
		if err != nil {
			checkCodecError(t, err)
			return
		}
		if len(p.Accepts) == 0 {
			t.Fatal("decoded a PaymentRequired without accepts")
		}
		// Each echo is the received entry and decodes to the same requirement.
		for i := range p.Accepts {
			raw, err := p.RawAccepted(i)
			if err != nil {
				t.Fatalf("RawAccepted(%d): %v", i, err)
			}
			var r x402.PaymentRequirements
			if err := json.Unmarshal(raw, &r); err != nil {
				t.Fatalf("RawAccepted(%d) does not decode: %v", i, err)
			}
			if diff := cmp.Diff(p.Accepts[i], r, wireOpts); diff != "" {
				t.Fatalf("RawAccepted(%d) decodes differently (-accepts +raw):\n%s", i, diff)
			}
		}
		b, err := x402.Marshal(p)
		if err != nil {
			t.Fatalf("Marshal of a decoded PaymentRequired: %v", err)
		}
		var again x402.PaymentRequired
		if err := json.Unmarshal(b, &again); err != nil {
			t.Fatalf("re-encoded PaymentRequired does not decode: %v\n%s", err, b)
		}
		if diff := cmp.Diff(p, &again, wireOpts); diff != "" {
			t.Fatalf("round trip changed the value (-first +second):\n%s", diff)
		}
		if b2 := mustMarshal(t, &again); !bytes.Equal(b, b2) {
			t.Fatalf("encoding is not stable:\n%s\n%s", b, b2)
		}
		if h2, ok := reheader(b); ok {
			viaHeader, err := x402.DecodePaymentRequired(h2)
			if err != nil {
				t.Fatalf("re-encoded header refused: %v", err)
			}
			if diff := cmp.Diff(p, viaHeader, wireOpts); diff != "" {
				t.Fatalf("header round trip changed the value (-first +second):\n%s", diff)
			}
		}
	})
}

func FuzzDecodeSettleResponse(f *testing.F) {
	f.Add(b64(`{"success":true,"payer":"` + payer1337 + `","transaction":"` + tx1337 + `","network":"eip155:1337"}`))
	f.Fuzz(func(t *testing.T, h string) {
		s, err := x402.DecodeSettleResponse(h)
		if err != nil {
			checkCodecError(t, err)
			return
		}
		if x402.ParseReason(string(s.ErrorReason)) != s.ErrorReason {
			t.Fatalf("errorReason %q is not canonical", s.ErrorReason)
		}
		b, err := x402.Marshal(s)
		if err != nil {
			t.Fatalf("Marshal of a decoded settle response: %v", err)
		}
		h2, ok := reheader(b)
		if !ok {
			return
		}
		again, err := x402.DecodeSettleResponse(h2)
		if err != nil {
			t.Fatalf("our own encoding is refused: %v\n%s", err, b)
		}
		if diff := cmp.Diff(s, again, wireOpts); diff != "" {
			t.Fatalf("round trip changed the value (-first +second):\n%s", diff)
		}
	})
}

func FuzzMatch(f *testing.F) {
	f.Add(captureAccepts0, captureAccepts0)
	f.Fuzz(func(t *testing.T, offerJSON, acceptedJSON string) {
		var offer, accepted x402.PaymentRequirements
		if json.Unmarshal([]byte(offerJSON), &offer) != nil || json.Unmarshal([]byte(acceptedJSON), &accepted) != nil {
			return
		}
		err := x402.Match(offer, accepted)
		_ = x402.Match(accepted, offer)
		matched := err == nil

		if extraIsObject(offer.Extra) {
			if err := x402.Match(offer, offer); err != nil {
				t.Fatalf("offer does not match itself: %v", err)
			}
		}

		want := -1
		if matched {
			want = 0
		} else if x402.Match(accepted, accepted) == nil {
			want = 1
		}
		if got := x402.FindMatch([]x402.PaymentRequirements{offer, accepted}, accepted); got != want {
			t.Fatalf("FindMatch = %d, want %d", got, want)
		}

		// Addresses compare ignoring case.
		swapped := accepted
		swapped.Asset = swapASCIICase(accepted.Asset)
		swapped.PayTo = swapASCIICase(accepted.PayTo)
		if got := x402.Match(offer, swapped) == nil; got != matched {
			t.Fatalf("changing the case of asset/payTo changed Match from %v to %v", matched, got)
		}

		// Whitespace in extra does not matter.
		if len(accepted.Extra) > 0 {
			spaced := accepted
			var buf bytes.Buffer
			if json.Indent(&buf, accepted.Extra, " ", "\t") == nil {
				spaced.Extra = buf.Bytes()
				if got := x402.Match(offer, spaced) == nil; got != matched {
					t.Fatalf("indenting accepted extra changed Match from %v to %v", matched, got)
				}
			}
		}

		// A decoded and re-encoded echo matches as the original did.
		var reparsed x402.PaymentRequirements
		if err := json.Unmarshal(mustMarshal(t, accepted), &reparsed); err != nil {
			t.Fatalf("re-encoded requirement does not decode: %v", err)
		}
		if got := x402.Match(offer, reparsed) == nil; got != matched {
			t.Fatalf("re-encoding accepted changed Match from %v to %v", matched, got)
		}

		if !matched {
			return
		}
		// One more unit, or a different timeout, never matches.
		more := accepted
		more.Amount += "0"
		if x402.Match(offer, more) == nil {
			t.Fatalf("amount %q matched the offered %q", more.Amount, offer.Amount)
		}
		longer := accepted
		longer.MaxTimeoutSeconds++
		if x402.Match(offer, longer) == nil {
			t.Fatal("a longer maxTimeoutSeconds matched")
		}
		// The client may add a key to extra.
		if added, ok := addExtraKey(accepted.Extra, offer.Extra); ok {
			plus := accepted
			plus.Extra = added
			if err := x402.Match(offer, plus); err != nil {
				t.Fatalf("adding a key to accepted extra broke the match: %v\n%s", err, added)
			}
		}
	})
}

// extraIsObject reports whether extra is absent, null or a JSON object Match can
// read.
func extraIsObject(extra json.RawMessage) bool {
	if len(extra) == 0 {
		return true
	}
	var m map[string]any
	return json.Unmarshal(extra, &m) == nil
}

// addExtraKey returns accepted with a key the offer lacks added, or false when
// accepted is not an object.
func addExtraKey(accepted, offer json.RawMessage) (json.RawMessage, bool) {
	m := map[string]json.RawMessage{}
	if len(accepted) > 0 {
		if json.Unmarshal(accepted, &m) != nil {
			return nil, false
		}
		if m == nil { // null
			m = map[string]json.RawMessage{}
		}
	}
	var o map[string]json.RawMessage
	_ = json.Unmarshal(offer, &o)
	key := "fuzzAddedKey"
	for _, taken := o[key]; taken; _, taken = o[key] {
		key += "_"
	}
	m[key] = json.RawMessage(`{"added":[1,"two",null]}`)
	b, err := json.Marshal(m)
	if err != nil {
		return nil, false
	}
	return b, true
}

// swapASCIICase swaps the case of ASCII letters only, so the result is equal to s
// under strings.EqualFold whatever else s holds.
func swapASCIICase(s string) string {
	b := []byte(s)
	for i, c := range b {
		switch {
		case 'a' <= c && c <= 'z':
			b[i] = c - 'a' + 'A'
		case 'A' <= c && c <= 'Z':
			b[i] = c - 'A' + 'a'
		}
	}
	return string(b)
}
