package x402

import (
	"net/http"
	"strings"
	"testing"
)

// TestFingerprint: D14's canonical form, with the body's key order,
// whitespace and HTML characters not mattering, and everything else
// mattering.
func TestFingerprint(t *testing.T) {
	const body = `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi <b>&</b>"}],"max_tokens":10,"temperature":0.70}`
	base := Fingerprint("POST", "/v1/chat/completions", "gpt-4o-mini", []byte(body))
	same := []string{
		"{ \"messages\" : [ {\"content\":\"hi <b>&</b>\", \"role\":\"user\"} ],\n\t\"temperature\":0.70, \"max_tokens\":10, \"model\":\"gpt-4o-mini\" }",
		`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi \u003cb\u003e\u0026\u003c/b\u003e"}],"max_tokens":10,"temperature":0.70}`,
	}
	for _, b := range same {
		if got := Fingerprint("POST", "/v1/chat/completions", "gpt-4o-mini", []byte(b)); got != base {
			t.Errorf("Fingerprint(%s) differs", b)
		}
	}
	differ := map[string]string{
		"method": Fingerprint("PUT", "/v1/chat/completions", "gpt-4o-mini", []byte(body)),
		"path":   Fingerprint("POST", "/v1/completions", "gpt-4o-mini", []byte(body)),
		"model":  Fingerprint("POST", "/v1/chat/completions", "gpt-4o", []byte(body)),
		"number as written": Fingerprint("POST", "/v1/chat/completions", "gpt-4o-mini",
			[]byte(strings.Replace(body, "0.70", "0.7", 1))),
		"array order": Fingerprint("POST", "/v1/chat/completions", "gpt-4o-mini",
			[]byte(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi <b>&</b>"},{"role":"user","content":"x"}],"max_tokens":10,"temperature":0.70}`)),
		"trailing bytes make it raw": Fingerprint("POST", "/v1/chat/completions", "gpt-4o-mini", []byte(body+"x")),
	}
	for name, got := range differ {
		if got == base {
			t.Errorf("%s: same fingerprint", name)
		}
	}
	// A raw body never collides with a JSON body whose value is its hash.
	raw := []byte("not json")
	rawFP := Fingerprint("POST", "/p", "", raw)
	if rawFP == Fingerprint("POST", "/p", "", []byte(`"not json"`)) || rawFP == Fingerprint("POST", "/p", "", nil) {
		t.Error("raw body collides")
	}
	if len(base) != 64 {
		t.Errorf("fingerprint %q is not hex SHA-256", base)
	}
}

// BenchmarkFingerprint measures the request fingerprint of a chat body.
func BenchmarkFingerprint(b *testing.B) {
	body := []byte(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Say hello in five words."}],"max_tokens":64,"temperature":0.7}`)
	b.ReportAllocs()
	for b.Loop() {
		_ = Fingerprint(http.MethodPost, "/v1/chat/completions", "gpt-4o-mini", body)
	}
}
