package upstreamtest_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/llm4agents/llm4agents/internal/chat"
	"github.com/llm4agents/llm4agents/internal/upstream/upstreamtest"
)

func post(tb testing.TB, url, key, body string) *http.Response {
	tb.Helper()
	req, err := http.NewRequestWithContext(tb.Context(), http.MethodPost, url+"/chat/completions", strings.NewReader(body))
	if err != nil {
		tb.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	req.Header.Set("X-Probe", "1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	return resp
}

// TestServerWire checks the fake's wire format with a plain HTTP client: SSE
// framing, [DONE], usage, error JSON, call counting and request recording.
func TestServerWire(t *testing.T) {
	srv := upstreamtest.NewServer(t, upstreamtest.Config{APIKey: "sk-test", Models: []string{"demo"}})
	const body = `{"model":"demo","messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":true}}`

	resp := post(t, srv.URL(), "sk-test", body)
	raw, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("status %d, content type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	events := strings.Split(strings.TrimSuffix(string(raw), "\n\n"), "\n\n")
	if events[len(events)-1] != "data: [DONE]" {
		t.Errorf("last event %q, want data: [DONE]", events[len(events)-1])
	}
	var last chat.Chunk
	if err := json.Unmarshal([]byte(strings.TrimPrefix(events[len(events)-2], "data: ")), &last); err != nil || last.Usage == nil {
		t.Errorf("usage chunk %q: %v", events[len(events)-2], err)
	}
	for _, ev := range events {
		if !strings.HasPrefix(ev, "data: ") || strings.Contains(ev, "\n") {
			t.Errorf("event %q is not one data line", ev)
		}
	}
	got := srv.LastRequest()
	if got.Header.Get("X-Probe") != "1" || !bytes.Equal(got.Body, []byte(body)) {
		t.Errorf("recorded %v %s", got.Header, got.Body)
	}

	checkError := func(key, body string, status int, code string) {
		t.Helper()
		resp := post(t, srv.URL(), key, body)
		defer func() { _ = resp.Body.Close() }()
		var e chat.ErrorBody
		if err := json.NewDecoder(resp.Body).Decode(&e); err != nil || resp.StatusCode != status || e.Error.Code != code {
			t.Errorf("status %d, error %+v (%v), want %d %s", resp.StatusCode, e, err, status, code)
		}
	}
	checkError("sk-other", body, 401, "invalid_api_key")
	checkError("sk-test", strings.Replace(body, `"demo"`, `"gpt-5"`, 1), 404, "model_not_found")
	srv.SetFault(upstreamtest.Fault{Status: 429})
	checkError("sk-test", body, 429, "rate_limit_exceeded")
	if srv.Calls() != 4 {
		t.Errorf("Calls() = %d, want 4", srv.Calls())
	}
}
