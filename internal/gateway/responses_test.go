package gateway_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/llm4agents/llm4agents/client"
	"github.com/llm4agents/llm4agents/x402"
)

// response is the part of a Response the tests read.
type response struct {
	ID     string `json:"id"`
	Object string `json:"object"`
	Status string `json:"status"`
	Model  string `json:"model"`
	Output []struct {
		Type    string `json:"type"`
		Role    string `json:"role"`
		Content []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
	} `json:"output"`
	Usage *struct {
		InputTokens  int64 `json:"input_tokens"`
		OutputTokens int64 `json:"output_tokens"`
		TotalTokens  int64 `json:"total_tokens"`
	} `json:"usage"`
	X struct {
		Charged     string `json:"charged"`
		Transaction string `json:"transaction"`
	} `json:"x_llm4agents"`
}

func (r *response) text() string {
	var b strings.Builder
	for _, it := range r.Output {
		for _, c := range it.Content {
			b.WriteString(c.Text)
		}
	}
	return b.String()
}

// postResponses posts body to /v1/responses with c.
func (e *env) postResponses(t *testing.T, c *http.Client, body string, hdr http.Header) *http.Response {
	t.Helper()
	return postJSON(t, c, e.srv.URL+"/v1/responses", body, hdr)
}

// TestResponsesPaid: POST /v1/responses is quoted, paid once with x402 and
// answered as a Response object, its usage and charge included; the upstream
// gets the chat completion that carries it.
func TestResponsesPaid(t *testing.T) {
	e := newEnv(t)
	body := `{"model":"demo","instructions":"Be brief.","input":"Say hello","max_output_tokens":32}`
	resp := e.postResponses(t, http.DefaultClient, body, nil)
	b := readAll(t, resp)
	if resp.StatusCode != http.StatusPaymentRequired || resp.Header.Get(x402.HeaderPaymentRequired) == "" {
		t.Fatalf("unpaid: %d %s", resp.StatusCode, b)
	}
	if e.up.Calls() != 0 {
		t.Fatal("the upstream was called for an unpaid request")
	}
	c, tr := e.payer(buyerIdx)
	resp = e.postResponses(t, c, body, nil)
	b = readAll(t, resp)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("paid: %d %s", resp.StatusCode, b)
	}
	sr, err := client.SettleResponse(resp)
	if err != nil || !sr.Success {
		t.Fatalf("settle response %+v, %v", sr, err)
	}
	var out response
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	if out.Object != "response" || (out.Status != "completed" && out.Status != "incomplete") || out.Model != "demo" || !strings.HasPrefix(out.ID, "resp_") ||
		out.text() == "" || out.Usage == nil || out.Usage.OutputTokens == 0 || out.X.Charged != "10000" || out.X.Transaction != sr.Transaction {
		t.Errorf("response %s", b)
	}
	if got := e.chain.BalanceOf(t, e.chain.Addr(payToIdx)); got.Int64() != 10000 || tr.Spent().Int64() != 10000 {
		t.Errorf("payTo received %s, buyer spent %s; want 10000 once", got, tr.Spent())
	}
	up := e.up.LastRequest().Body
	if !bytes.Contains(up, []byte(`"role":"system"`)) || !bytes.Contains(up, []byte(`"max_completion_tokens":32`)) ||
		!bytes.Contains(up, []byte(`"model":"demo-upstream"`)) {
		t.Errorf("the upstream got %s", up)
	}
}

// TestResponsesStream: a paid streamed Responses call is the Responses event
// stream, from response.created to response.completed with usage and the
// charge, paid once.
func TestResponsesStream(t *testing.T) {
	e := newEnv(t)
	body := `{"model":"demo","input":[{"role":"user","content":[{"type":"input_text","text":"Stream a short answer."}]}],"max_output_tokens":32,"stream":true}`
	c, tr := e.payer(buyerIdx)
	resp := e.postResponses(t, c, body, nil)
	b := readAll(t, resp)
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("paid stream: %d %s", resp.StatusCode, b)
	}
	var types []string
	var deltas strings.Builder
	var final response
	for _, data := range sseData(t, b) {
		var ev struct {
			Type     string          `json:"type"`
			Delta    string          `json:"delta"`
			Response json.RawMessage `json:"response"`
		}
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			t.Fatalf("event %s: %v", data, err)
		}
		types = append(types, ev.Type)
		if ev.Type == "response.output_text.delta" {
			deltas.WriteString(ev.Delta)
		}
		if ev.Type == "response.completed" || ev.Type == "response.incomplete" {
			if err := json.Unmarshal(ev.Response, &final); err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(types) < 8 || types[0] != "response.created" || types[1] != "response.in_progress" || !strings.HasPrefix(types[len(types)-1], "response.") {
		t.Fatalf("events %v", types)
	}
	if deltas.Len() == 0 || final.text() != deltas.String() || final.Usage == nil || final.X.Charged != "10000" {
		t.Errorf("deltas %q, final %+v", deltas.String(), final)
	}
	if tr.Spent().Int64() != 10000 {
		t.Errorf("buyer spent %s, want 10000", tr.Spent())
	}
}

// TestResponsesBadInput: what chat completions cannot carry is refused with
// a 400 naming the field, before any quote; nothing is charged.
func TestResponsesBadInput(t *testing.T) {
	e := newEnv(t)
	for name, body := range map[string]string{
		"built-in tool":        `{"model":"demo","input":"hi","tools":[{"type":"web_search"}]}`,
		"previous response":    `{"model":"demo","input":"hi","previous_response_id":"resp_1"}`,
		"unknown field":        `{"model":"demo","input":"hi","temprature":1}`,
		"no input":             `{"model":"demo"}`,
		"file input":           `{"model":"demo","input":[{"role":"user","content":[{"type":"input_file","file_id":"f"}]}]}`,
		"unknown model":        `{"model":"nope","input":"hi"}`,
		"not JSON":             `{"model":`,
		"output over the cap":  `{"model":"demo","input":"hi","max_output_tokens":100000}`,
		"negative output":      `{"model":"demo","input":"hi","max_output_tokens":-1}`,
		"background":           `{"model":"demo","input":"hi","background":true}`,
		"reasoning item input": `{"model":"demo","input":[{"type":"reasoning","id":"rs_1","summary":[]}]}`,
	} {
		t.Run(name, func(t *testing.T) {
			c, tr := e.payer(buyerIdx)
			resp := e.postResponses(t, c, body, nil)
			b := readAll(t, resp)
			if resp.StatusCode < 400 || resp.StatusCode >= 500 || resp.StatusCode == http.StatusPaymentRequired {
				t.Fatalf("status %d: %s", resp.StatusCode, b)
			}
			if tr.Spent().Sign() != 0 {
				t.Errorf("spent %s on a refused request", tr.Spent())
			}
		})
	}
	if e.up.Calls() != 0 {
		t.Errorf("the upstream was called %d times", e.up.Calls())
	}
}

// TestResponsesCredits: a Responses call with an API key is held, charged
// and receipted as a chat call is, streamed or not.
func TestResponsesCredits(t *testing.T) {
	eachCreditBackend(t, func(t *testing.T, b creditBackend) {
		e := newCreditEnv(t, creditOpts{backend: b})
		e.topUp(t, alice, 1_000_000)
		secret, _ := e.newKey(t, alice, nil)
		resp := e.do(t, t.Context(), http.MethodPost, "/v1/responses", secret, `{"model":"demo","input":"Say hello","max_output_tokens":32}`, nil)
		body := readAll(t, resp)
		if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Llm4agents-Receipt") == "" {
			t.Fatalf("status %d: %s", resp.StatusCode, body)
		}
		var out response
		if err := json.Unmarshal(body, &out); err != nil || out.Object != "response" || out.text() == "" || out.X.Charged == "" {
			t.Fatalf("response %s (%v)", body, err)
		}
		resp = e.do(t, t.Context(), http.MethodPost, "/v1/responses", secret, `{"model":"demo","input":"Stream","max_output_tokens":16,"stream":true}`, nil)
		body = readAll(t, resp)
		if resp.StatusCode != http.StatusOK || !bytes.Contains(body, []byte(`"x_llm4agents":{"charged":`)) || !bytes.Contains(body, []byte(`"receipt":`)) {
			t.Fatalf("stream: %d %s", resp.StatusCode, body)
		}
		e.sync(t)
		if bal := e.balance(t, alice); bal.Available.Int64() >= 1_000_000 || bal.Held.Sign() != 0 {
			t.Errorf("balance %s held %s after two charged calls", bal.Available, bal.Held)
		}
	})
}
