package upstreamtest_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/llm4agents/llm4agents/internal/upstream/upstreamtest"
)

// TestServerResponsesWire checks /v1/responses with a plain HTTP client: a
// Response object with usage in input_tokens and output_tokens; a stream of
// events each named by its type, from response.created to the final event
// carrying the whole response and its usage, with no "[DONE]"; a refusal as
// OpenAI's error JSON naming the field.
func TestServerResponsesWire(t *testing.T) {
	srv := upstreamtest.NewServer(t, upstreamtest.Config{APIKey: "sk-test", Models: []string{"demo"}})
	// answer is what do returns: status, headers and body, read and closed.
	type answer struct {
		StatusCode int
		Header     http.Header
	}
	do := func(body string) (answer, []byte) {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL()+"/responses", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer sk-test")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return answer{resp.StatusCode, resp.Header}, b
	}
	type usage struct {
		InputTokens  int64 `json:"input_tokens"`
		OutputTokens int64 `json:"output_tokens"`
		TotalTokens  int64 `json:"total_tokens"`
	}

	resp, b := do(`{"model":"demo","input":"hi","max_output_tokens":200}`)
	var r struct {
		Object string `json:"object"`
		Status string `json:"status"`
		Output []struct {
			Type string `json:"type"`
		} `json:"output"`
		Usage usage `json:"usage"`
	}
	if resp.StatusCode != 200 || json.Unmarshal(b, &r) != nil || r.Object != "response" || r.Status != "completed" || len(r.Output) != 1 ||
		r.Usage.InputTokens == 0 || r.Usage.OutputTokens == 0 || r.Usage.TotalTokens != r.Usage.InputTokens+r.Usage.OutputTokens {
		t.Errorf("response %d %s", resp.StatusCode, b)
	}

	resp, b = do(`{"model":"demo","input":"hi","max_output_tokens":200,"stream":true}`)
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") || strings.Contains(string(b), "[DONE]") {
		t.Fatalf("stream %d %s", resp.StatusCode, b)
	}
	events := strings.Split(strings.TrimSuffix(string(b), "\n\n"), "\n\n")
	var types []string
	for _, ev := range events {
		name, data, ok := strings.Cut(ev, "\n")
		var e struct {
			Type     string `json:"type"`
			Sequence *int   `json:"sequence_number"`
			Response *struct {
				Usage *usage `json:"usage"`
			} `json:"response"`
		}
		if !ok || json.Unmarshal([]byte(strings.TrimPrefix(data, "data: ")), &e) != nil || name != "event: "+e.Type || e.Sequence == nil {
			t.Fatalf("event %q is not one named event with a sequence number", ev)
		}
		types = append(types, e.Type)
		if e.Type == "response.completed" && (e.Response == nil || e.Response.Usage == nil || e.Response.Usage.OutputTokens == 0) {
			t.Errorf("final event without usage: %s", data)
		}
	}
	if len(types) < 6 || types[0] != "response.created" || types[1] != "response.in_progress" || types[len(types)-1] != "response.completed" {
		t.Errorf("events %v", types)
	}

	resp, b = do(`{"model":"demo","input":"hi","tools":[{"type":"web_search"}]}`)
	var eb struct {
		Error struct {
			Type  string `json:"type"`
			Param string `json:"param"`
		} `json:"error"`
	}
	if resp.StatusCode != 400 || json.Unmarshal(b, &eb) != nil || eb.Error.Param != "tools[0].type" || eb.Error.Type != "invalid_request_error" {
		t.Errorf("refusal %d %s", resp.StatusCode, b)
	}
}
