package client

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/llm4agents/llm4agents/x402"
)

func TestRetryAfter(t *testing.T) {
	now := time.Date(2027, 1, 15, 10, 0, 0, 0, time.UTC)
	tests := []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"", 0, false},
		{"2", 2 * time.Second, true},
		{" 5 ", 5 * time.Second, true},
		{"0", 0, true},
		{"-1", 0, false},
		{"1.5", 0, false},
		{"soon", 0, false},
		{"99999999999999999999", 0, false},
		{"4294967295", 24 * time.Hour, true}, // capped before any arithmetic
		{now.Add(3 * time.Second).Format(http.TimeFormat), 3 * time.Second, true},
		{now.Add(-time.Hour).Format(http.TimeFormat), 0, true},
		{now.Add(1000 * time.Hour).Format(http.TimeFormat), 24 * time.Hour, true},
	}
	for _, tc := range tests {
		got, ok := retryAfter(tc.in, now)
		if got != tc.want || ok != tc.ok {
			t.Errorf("retryAfter(%q) = %v, %v; want %v, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

func TestBackoff(t *testing.T) {
	p := RetryPolicy{Backoff: 100 * time.Millisecond, MaxWait: time.Second}
	var got []time.Duration
	for n := 1; n <= 6; n++ {
		got = append(got, p.backoff(n))
	}
	want := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond, time.Second, time.Second}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("backoff (-want +got):\n%s", diff)
	}
	if d := (RetryPolicy{}).backoff(1000); d != DefaultMaxWait {
		t.Errorf("default backoff(1000) = %v", d)
	}
}

// FuzzDecodeEntry: a journal file's content never panics the decoder, and
// whatever it accepts encodes back to an entry it accepts unchanged.
func FuzzDecodeEntry(f *testing.F) {
	const key = "fp\x00http://127.0.0.1:80\x000xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266\x00abc"
	unsigned := &JournalEntry{Key: key, ID: "pay_0123456789abcdef0123456789abcdef", Method: "POST", Resource: "http://127.0.0.1/p",
		Fingerprint: "abc", Created: time.UnixMilli(1_800_000_000_000)}
	b, err := encodeEntry(unsigned)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	payload := x402.PaymentPayload{X402Version: 2, Accepted: json.RawMessage(`{"scheme":"exact"}`), Payload: json.RawMessage(`{}`),
		Extensions: json.RawMessage(`{"payment-identifier":{"info":{"required":false,"id":"pay_0123456789abcdef0123456789abcdef"}}}`)}
	h, err := x402.EncodeHeader(payload)
	if err != nil {
		f.Fatal(err)
	}
	signed := *unsigned
	signed.Header, signed.ValidBefore, signed.Sends, signed.Outcome = Secret(h), time.Unix(1_800_000_060, 0), 2, OutcomeNotPaid
	signed.Requirements = x402.PaymentRequirements{Scheme: "exact", Network: "eip155:1337", Amount: "1", MaxTimeoutSeconds: 60}
	if b, err = encodeEntry(&signed); err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add([]byte(`{"version":1}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := decodeEntry(b, key, 0)
		if err != nil {
			_ = err.Error()
			return
		}
		again, err := encodeEntry(e)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		e2, err := decodeEntry(again, key, 0)
		if err != nil {
			t.Fatalf("re-decode: %v", err)
		}
		opts := cmp.Options{cmp.Comparer(func(x, y time.Time) bool { return x.Equal(y) })}
		if diff := cmp.Diff(e, e2, opts); diff != "" {
			t.Fatalf("round trip (-first +second):\n%s", diff)
		}
	})
}
