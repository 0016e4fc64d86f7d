package gateway_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"math/big"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/llm4agents/llm4agents/client"
	"github.com/llm4agents/llm4agents/internal/chat"
	"github.com/llm4agents/llm4agents/internal/facilitator"
	"github.com/llm4agents/llm4agents/internal/gateway"
	"github.com/llm4agents/llm4agents/internal/pricing"
	"github.com/llm4agents/llm4agents/internal/responses"
	"github.com/llm4agents/llm4agents/internal/upstream"
	"github.com/llm4agents/llm4agents/internal/upstream/upstreamtest"
	"github.com/llm4agents/llm4agents/x402"
	"github.com/llm4agents/llm4agents/x402/evm/exact"
)

// speaksResponses configures the env's model as served by an upstream that
// speaks the Responses API.
func speaksResponses(t *testing.T, more ...func(*gateway.Config)) func(*gateway.Config) {
	return func(cfg *gateway.Config) {
		rp, err := upstream.WithResponses(cfg.Models[0].Provider)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Models[0].Provider = rp
		for _, m := range more {
			m(cfg)
		}
	}
}

// forwarded is the part of a passed-through Response the tests read.
type forwarded struct {
	response
	Usage struct {
		InputTokens  int64 `json:"input_tokens"`
		OutputTokens int64 `json:"output_tokens"`
	} `json:"usage"`
	X xCost `json:"x_llm4agents"`
}

// upstreamGot is the body the fake upstream last received, as JSON.
func upstreamGot(t *testing.T, up *upstreamtest.Server) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(up.LastRequest().Body, &m); err != nil {
		t.Fatalf("upstream body %s: %v", up.LastRequest().Body, err)
	}
	return m
}

// TestResponsesPassThrough: on an upstream that speaks the Responses API, a
// request the translation refuses (include) is passed through, paid once
// with x402 exact: the upstream gets the buyer's body with the model renamed
// and the output bound injected, and the buyer gets the upstream's Response
// with the charge in it.
func TestResponsesPassThrough(t *testing.T) {
	e := newEnvConfig(t, 10*time.Second, nil, speaksResponses(t))
	body := `{"model":"demo","input":"Say hello","include":["reasoning.encrypted_content"],"store":false}`
	resp := e.postResponses(t, http.DefaultClient, body, nil)
	b := readAll(t, resp)
	if resp.StatusCode != http.StatusPaymentRequired || e.up.Calls() != 0 {
		t.Fatalf("unpaid: %d %s (upstream called %d times)", resp.StatusCode, b, e.up.Calls())
	}
	pr, err := x402.DecodePaymentRequired(resp.Header.Get(x402.HeaderPaymentRequired))
	if err != nil || pr.Accepts[0].Amount != "60000" {
		t.Fatalf("quote %+v (%v): want the prompt and the model's cap of 256 output tokens, 60000", pr, err)
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
	var out forwarded
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	if out.Object != "response" || out.Model != "demo-upstream" || out.text() == "" || out.Usage.OutputTokens == 0 ||
		out.X.Charged != "60000" || out.X.Transaction != sr.Transaction {
		t.Errorf("response %s", b)
	}
	if tr.Spent().Int64() != 60000 {
		t.Errorf("buyer spent %s, want 60000 once", tr.Spent())
	}
	got := upstreamGot(t, e.up)
	if got["model"] != "demo-upstream" || got["max_output_tokens"] != float64(256) || got["input"] != "Say hello" || got["store"] != false ||
		got["include"] == nil || got["messages"] != nil {
		t.Errorf("the upstream got %v: want the Responses body, model renamed, max_output_tokens 256", got)
	}
}

// TestResponsesPassThroughStream: a passed-through stream settles after its
// first content and before its first byte (D2), and is the upstream's
// Responses events, each named, the final one carrying the charge; no
// "[DONE]".
func TestResponsesPassThroughStream(t *testing.T) {
	e := newEnvConfig(t, 10*time.Second, nil, speaksResponses(t))
	body := `{"model":"demo","input":"Stream a short answer.","max_output_tokens":32,"stream":true,"truncation":"auto"}`
	c, tr := e.payer(buyerIdx)
	resp := e.postResponses(t, c, body, nil)
	b := readAll(t, resp)
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("paid stream: %d %s", resp.StatusCode, b)
	}
	if bytes.Contains(b, []byte("[DONE]")) {
		t.Error("a Responses stream ends with [DONE]")
	}
	var final forwarded
	var types []string
	var deltas strings.Builder
	for block := range strings.SplitSeq(strings.TrimSpace(string(b)), "\n\n") {
		name, data, ok := strings.Cut(block, "\n")
		if !ok || !strings.HasPrefix(name, "event: ") || !strings.HasPrefix(data, "data: ") {
			t.Fatalf("event %q is not named", block)
		}
		var ev struct {
			Type     string          `json:"type"`
			Delta    string          `json:"delta"`
			Response json.RawMessage `json:"response"`
		}
		if err := json.Unmarshal([]byte(strings.TrimPrefix(data, "data: ")), &ev); err != nil || "event: "+ev.Type != name {
			t.Fatalf("event %q: %v", block, err)
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
	if len(types) < 6 || types[0] != "response.created" || !strings.HasPrefix(types[len(types)-1], "response.") {
		t.Fatalf("events %v", types)
	}
	if deltas.Len() == 0 || final.text() != deltas.String() || final.Usage.OutputTokens == 0 || final.X.Charged != "10000" || final.X.Transaction == "" {
		t.Errorf("deltas %q, final %+v", deltas.String(), final)
	}
	if tr.Spent().Int64() != 10000 {
		t.Errorf("buyer spent %s, want 10000", tr.Spent())
	}
	if got := upstreamGot(t, e.up); got["truncation"] != "auto" || got["stream"] != true || got["max_output_tokens"] != float64(32) {
		t.Errorf("the upstream got %v", got)
	}
}

// TestResponsesPassThroughRefusals: a field the translation refuses is
// refused by name on a chat-only upstream and passed on one that speaks the
// Responses API; what cannot be priced is refused on both; nothing is
// charged for a refusal.
func TestResponsesPassThroughRefusals(t *testing.T) {
	chatOnly := newEnv(t)
	speaks := newEnvConfig(t, 10*time.Second, nil, speaksResponses(t))
	for _, tc := range []struct {
		name, body     string
		chatParam      string // refused on chat-only with this param; "" passes
		responsesParam string // refused on a Responses upstream; "" passes
	}{
		{"include", `{"model":"demo","input":"hi","include":["reasoning.encrypted_content"],"max_output_tokens":16}`, "include", ""},
		{"custom tool", `{"model":"demo","input":"hi","tools":[{"type":"custom","name":"sql"}],"max_output_tokens":16}`, "tools[0].type", ""},
		{"hosted tool", `{"model":"demo","input":"hi","tools":[{"type":"web_search"}]}`, "tools[0].type", "tools[0].type"},
		{"previous response", `{"model":"demo","input":"hi","previous_response_id":"resp_1"}`, "previous_response_id", "previous_response_id"},
		{"file by id", `{"model":"demo","input":[{"role":"user","content":[{"type":"input_image","file_id":"file-1"}]}]}`, "input[0].content[0]", "input[0]"},
		{"priority tier", `{"model":"demo","input":"hi","service_tier":"priority"}`, "", "service_tier"},
	} {
		for _, side := range []struct {
			name  string
			e     *env
			param string
		}{{"chat only", chatOnly, tc.chatParam}, {"responses", speaks, tc.responsesParam}} {
			t.Run(tc.name+"/"+side.name, func(t *testing.T) {
				calls := side.e.up.Calls()
				c, tr := side.e.payer(buyerIdx)
				resp := side.e.postResponses(t, c, tc.body, nil)
				b := readAll(t, resp)
				if side.param == "" {
					if resp.StatusCode != http.StatusOK {
						t.Fatalf("status %d: %s", resp.StatusCode, b)
					}
					return
				}
				var eb struct {
					Error struct {
						Param   string `json:"param"`
						Message string `json:"message"`
					} `json:"error"`
				}
				if resp.StatusCode != http.StatusBadRequest || json.Unmarshal(b, &eb) != nil || eb.Error.Param != side.param {
					t.Fatalf("status %d: %s; want a 400 naming %s", resp.StatusCode, b, side.param)
				}
				if blamed := strings.Contains(eb.Error.Message, "speaks only chat completions"); blamed != (side.e == chatOnly && tc.responsesParam == "") {
					t.Errorf("message %q: it should blame the chat-only upstream exactly when a Responses upstream takes the request", eb.Error.Message)
				}
				if tr.Spent().Sign() != 0 || side.e.up.Calls() != calls {
					t.Errorf("spent %s, upstream called %d times for a refusal", tr.Spent(), side.e.up.Calls()-calls)
				}
			})
		}
	}
	t.Run("output over the cap", func(t *testing.T) {
		resp := speaks.postResponses(t, http.DefaultClient, `{"model":"demo","input":"hi","max_output_tokens":257,"include":[]}`, nil)
		if b := readAll(t, resp); resp.StatusCode != http.StatusBadRequest || !bytes.Contains(b, []byte("max_tokens_too_large")) {
			t.Errorf("status %d: %s", resp.StatusCode, b)
		}
	})
}

// TestResponsesPassThroughUpstreamFails: an upstream that fails, or answers
// the wrong shape, before the first byte charges nothing.
func TestResponsesPassThroughUpstreamFails(t *testing.T) {
	e := newEnvConfig(t, 10*time.Second, nil, speaksResponses(t))
	payTo := e.chain.Addr(payToIdx)
	for _, tc := range []struct {
		name   string
		fault  upstreamtest.Fault
		stream bool
	}{
		{"a chat completion", upstreamtest.Fault{Status: 200, Body: `{"id":"chatcmpl-1","object":"chat.completion","choices":[{"message":{"content":"hi"}}]}`}, false},
		{"a 500", upstreamtest.Fault{Status: 500}, false},
		{"cut body", upstreamtest.Fault{Drop: true}, false},
		{"stream dropped", upstreamtest.Fault{Drop: true}, true},
		{"stream of garbage", upstreamtest.Fault{Garbage: true}, true},
		{"stream cut before content", upstreamtest.Fault{DropAfter: 2}, true},
		{"stream answered with JSON", upstreamtest.Fault{Status: 200, Body: `{"object":"response","output":[]}`}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e.up.SetFault(tc.fault)
			defer e.up.SetFault(upstreamtest.Fault{})
			before := e.chain.BalanceOf(t, payTo)
			body := `{"model":"demo","input":"hi","max_output_tokens":16}`
			if tc.stream {
				body = `{"model":"demo","input":"hi","max_output_tokens":16,"stream":true}`
			}
			c, tr := e.payer(buyerIdx)
			resp := e.postResponses(t, c, body, nil)
			b := readAll(t, resp)
			if resp.StatusCode < 500 {
				t.Fatalf("status %d: %s; want a 5xx", resp.StatusCode, b)
			}
			if tr.Spent().Sign() != 0 || e.chain.BalanceOf(t, payTo).Cmp(before) != 0 {
				t.Errorf("charged %s for a failed upstream", tr.Spent())
			}
		})
	}
}

// quote402Responses posts a Responses body unpaid and returns the 402's
// PaymentRequired.
func (e *env) quote402Responses(t *testing.T, body string) *x402.PaymentRequired {
	t.Helper()
	resp := e.postResponses(t, http.DefaultClient, body, nil)
	b := readAll(t, resp)
	if resp.StatusCode != http.StatusPaymentRequired {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	pr, err := x402.DecodePaymentRequired(resp.Header.Get(x402.HeaderPaymentRequired))
	if err != nil {
		t.Fatal(err)
	}
	return pr
}

// TestResponsesPassThroughUpto: with upto, the charge is the upstream's
// usage (input_tokens, output_tokens) at the model's price, streamed or not;
// a replay names the same charge.
func TestResponsesPassThroughUpto(t *testing.T) {
	e := newEnvConfig(t, 10*time.Second, nil, speaksResponses(t, withUpto(0, false)))
	e.chain.ApprovePermit2(t, buyerIdx)
	charge := func(in, out int64) string {
		return pricing.Charge(big.NewInt(in*1+out*200), big.NewInt(0), big.NewInt(60000)).String()
	}

	body := `{"model":"demo","input":"Say hello","include":[]}`
	hdr := e.signUpto(t, buyerIdx, e.quote402Responses(t, body))
	resp := e.postResponses(t, http.DefaultClient, body, hdr)
	b := readAll(t, resp)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	var out forwarded
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	want := charge(out.Usage.InputTokens, out.Usage.OutputTokens)
	sr, err := x402.DecodeSettleResponse(resp.Header.Get(x402.HeaderPaymentResponse))
	if err != nil || !sr.Success || sr.Amount != want || out.X.Charged != want || out.X.Maximum != "60000" || want == "60000" {
		t.Fatalf("charged %+v, settled %+v (%v); want %s from usage %+v", out.X, sr, err, want, out.Usage)
	}
	again := e.postResponses(t, http.DefaultClient, body, hdr)
	ab := readAll(t, again)
	var replayed forwarded
	if again.StatusCode != http.StatusOK || again.Header.Get("X-Llm4agents-Replay") == "" || json.Unmarshal(ab, &replayed) != nil ||
		replayed.X.Charged != want || replayed.text() != out.text() {
		t.Errorf("replay %d %q: %s", again.StatusCode, again.Header.Get("X-Llm4agents-Replay"), ab)
	}

	body = `{"model":"demo","input":"Stream it","stream":true,"max_output_tokens":128}`
	hdr = e.signUpto(t, buyerIdx, e.quote402Responses(t, body))
	resp = e.postResponses(t, http.DefaultClient, body, hdr)
	b = readAll(t, resp)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("stream: %d %s", resp.StatusCode, b)
	}
	data := sseData(t, b)
	var final struct {
		Type     string    `json:"type"`
		Response forwarded `json:"response"`
	}
	if len(data) == 0 || json.Unmarshal([]byte(data[len(data)-1]), &final) != nil || !strings.HasPrefix(final.Type, "response.") {
		t.Fatalf("stream %s", b)
	}
	u := final.Response.Usage
	if want := charge(u.InputTokens, u.OutputTokens); final.Response.X.Charged != want || u.OutputTokens == 0 || final.Response.X.Transaction == "" {
		t.Errorf("stream charged %+v, want %s from usage %+v", final.Response.X, want, u)
	}
}

// TestResponsesPassThroughCredits: a passed-through call with an API key is
// held, charged the upstream's usage and receipted, streamed or not.
func TestResponsesPassThroughCredits(t *testing.T) {
	eachCreditBackend(t, func(t *testing.T, b creditBackend) {
		e := newCreditEnv(t, creditOpts{backend: b, provider: func(up gateway.Provider) gateway.Provider {
			rp, err := upstream.WithResponses(up)
			if err != nil {
				t.Fatal(err)
			}
			return rp
		}})
		e.topUp(t, alice, 1_000_000)
		secret, _ := e.newKey(t, alice, nil)
		resp := e.do(t, t.Context(), http.MethodPost, "/v1/responses", secret, `{"model":"demo","input":"Say hello","include":[]}`, nil)
		body := readAll(t, resp)
		if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Llm4agents-Receipt") == "" {
			t.Fatalf("status %d: %s", resp.StatusCode, body)
		}
		var out forwarded
		if err := json.Unmarshal(body, &out); err != nil || out.Object != "response" || out.text() == "" || out.X.Charged == "" {
			t.Fatalf("response %s (%v)", body, err)
		}
		if got := e.up.LastRequest().Body; !bytes.Contains(got, []byte(`"input":"Say hello"`)) {
			t.Errorf("the upstream got %s, not the Responses body", got)
		}
		paid := pricing.Cost(chat.Usage{PromptTokens: out.Usage.InputTokens, CompletionTokens: out.Usage.OutputTokens}, price)
		if out.X.Charged != paid.String() {
			t.Errorf("charged %s, want the usage's cost %s", out.X.Charged, paid)
		}
		resp = e.do(t, t.Context(), http.MethodPost, "/v1/responses", secret, `{"model":"demo","input":"Stream","max_output_tokens":16,"stream":true,"truncation":"auto"}`, nil)
		body = readAll(t, resp)
		if resp.StatusCode != http.StatusOK || !bytes.Contains(body, []byte("event: response.")) || !bytes.Contains(body, []byte(`"x_llm4agents":{"charged":`)) ||
			!bytes.Contains(body, []byte(`"receipt":`)) {
			t.Fatalf("stream: %d %s", resp.StatusCode, body)
		}
		e.sync(t)
		if bal := e.balance(t, alice); bal.Available.Int64() >= 1_000_000 || bal.Held.Sign() != 0 {
			t.Errorf("balance %s held %s after two charged calls", bal.Available, bal.Held)
		}
	})
}

// TestResponsesPassThroughClientGone: a client that leaves before the first
// content of a passed-through stream (the upstream sent response.created
// and stalls) is charged nothing, and its authorization buys the answer
// later (D2).
func TestResponsesPassThroughClientGone(t *testing.T) {
	e := newEnvConfig(t, 10*time.Second, nil, speaksResponses(t))
	body := `{"model":"demo","input":"Say hello","max_output_tokens":32,"stream":true,"include":[]}`
	p, err := exact.NewPaymentPayload(t.Context(), exact.NewKeySigner(e.chain.Keys[buyerIdx]), e.quote402Responses(t, body), 0, exact.SignOptions{})
	if err != nil {
		t.Fatal(err)
	}
	h := encodeHeader(t, p)
	e.up.SetFault(upstreamtest.Fault{StallAfter: 2})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go func() {
		defer cancel()
		for deadline := time.Now().Add(30 * time.Second); e.up.Calls() == 0 && time.Now().Before(deadline); {
			time.Sleep(5 * time.Millisecond)
		}
		time.Sleep(100 * time.Millisecond) // the two events are read
	}()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, e.srv.URL+"/v1/responses", strings.NewReader(body))
	req.Header.Set(x402.HeaderPaymentSignature, h)
	if resp, err := http.DefaultClient.Do(req); err == nil {
		_ = resp.Body.Close()
		t.Fatalf("request finished with %d; want the client to give up", resp.StatusCode)
	}
	select {
	case <-e.up.ClientGone():
	case <-time.After(5 * time.Second):
		t.Error("the upstream request was not cancelled")
	}
	time.Sleep(200 * time.Millisecond)
	if got := e.chain.BalanceOf(t, e.chain.Addr(payToIdx)); got.Sign() != 0 {
		t.Errorf("charged %s for a client that left before the first content", got)
	}
	e.up.SetFault(upstreamtest.Fault{})
	resp := e.postResponses(t, http.DefaultClient, body, http.Header{x402.HeaderPaymentSignature: {h}})
	if b := readAll(t, resp); resp.StatusCode != http.StatusOK || !bytes.Contains(b, []byte("event: response.completed")) && !bytes.Contains(b, []byte("event: response.incomplete")) {
		t.Errorf("same payment after the client left: %d %s", resp.StatusCode, b)
	}
}

// TestResponsesPassThroughPending (D3, D14): a passed-through answer whose
// settlement is pending is staged; the same payment again gets it once
// mined, annotated as the live answer would have been, with no second
// upstream call; once more, the same bytes replayed.
func TestResponsesPassThroughPending(t *testing.T) {
	for _, tc := range []struct {
		name, body, ctype string
	}{
		{"json", `{"model":"demo","input":"Say hello","max_output_tokens":32,"include":[]}`, "application/json"},
		{"stream", `{"model":"demo","input":"Say hello","max_output_tokens":32,"include":[],"stream":true}`, "text/event-stream"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var pf *pendingFac
			e := newEnvStore(t, 10*time.Second, func(f *facilitator.Facilitator) gateway.Facilitator {
				pf = &pendingFac{Facilitator: f, pending: 1}
				return pf
			}, speaksResponses(t), nil)
			p, err := exact.NewPaymentPayload(t.Context(), exact.NewKeySigner(e.chain.Keys[buyerIdx]), e.quote402Responses(t, tc.body), 0, exact.SignOptions{})
			if err != nil {
				t.Fatal(err)
			}
			hdr := http.Header{x402.HeaderPaymentSignature: {encodeHeader(t, p)}}
			resp := e.postResponses(t, http.DefaultClient, tc.body, hdr)
			if b := readAll(t, resp); resp.StatusCode != http.StatusPaymentRequired || errorCode(t, b) != "settlement_pending" {
				t.Fatalf("first: %d %s", resp.StatusCode, b)
			}
			resp = e.postResponses(t, http.DefaultClient, tc.body, hdr)
			served := readAll(t, resp)
			if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Llm4agents-Replay") != "staged" || resp.Header.Get("Content-Type") != tc.ctype {
				t.Fatalf("retry: %d %v %s", resp.StatusCode, resp.Header, served)
			}
			sr, err := x402.DecodeSettleResponse(resp.Header.Get(x402.HeaderPaymentResponse))
			if err != nil || !sr.Success {
				t.Fatalf("retry PAYMENT-RESPONSE %+v, %v", sr, err)
			}
			var x xCost
			if tc.ctype == "application/json" {
				var out forwarded
				if err := json.Unmarshal(served, &out); err != nil || out.Object != "response" {
					t.Fatalf("served %s (%v)", served, err)
				}
				x = out.X
			} else {
				data := sseData(t, served)
				var final struct {
					Response forwarded `json:"response"`
				}
				if len(data) == 0 || json.Unmarshal([]byte(data[len(data)-1]), &final) != nil || !bytes.Contains(served, []byte("event: response.created\n")) {
					t.Fatalf("served %s", served)
				}
				x = final.Response.X
			}
			if x.Charged != "10000" || x.Transaction != sr.Transaction {
				t.Errorf("served annotation %+v, want 10000 in %s", x, sr.Transaction)
			}
			resp = e.postResponses(t, http.DefaultClient, tc.body, hdr)
			if b := readAll(t, resp); resp.StatusCode != http.StatusOK || resp.Header.Get("X-Llm4agents-Replay") != "promoted" || !bytes.Equal(b, served) {
				t.Errorf("third: %d %q %s", resp.StatusCode, resp.Header.Get("X-Llm4agents-Replay"), b)
			}
			if e.up.Calls() != 1 || pf.calls() != 2 {
				t.Errorf("upstream calls %d, settles %d; want 1, 2", e.up.Calls(), pf.calls())
			}
		})
	}
}

// TestResponsesPassThroughCreditsNoUsage: a passed-through stream whose
// final event reports no usage is charged its delivered output, counted,
// and the prompt: not nothing, not the hold.
func TestResponsesPassThroughCreditsNoUsage(t *testing.T) {
	eachCreditBackend(t, func(t *testing.T, b creditBackend) {
		e := newCreditEnv(t, creditOpts{backend: b, provider: func(up gateway.Provider) gateway.Provider {
			rp, err := upstream.WithResponses(up)
			if err != nil {
				t.Fatal(err)
			}
			return rp
		}})
		e.topUp(t, alice, 1_000_000)
		secret, _ := e.newKey(t, alice, nil)
		e.up.SetFault(upstreamtest.Fault{NoUsage: true})
		resp := e.do(t, t.Context(), http.MethodPost, "/v1/responses", secret, `{"model":"demo","input":"Stream","stream":true,"include":[]}`, nil)
		body := readAll(t, resp)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("stream: %d %s", resp.StatusCode, body)
		}
		data := sseData(t, body)
		var final struct {
			Response struct {
				Usage json.RawMessage `json:"usage"`
				X     struct {
					Charged string     `json:"charged"`
					Usage   chat.Usage `json:"usage"`
				} `json:"x_llm4agents"`
			} `json:"response"`
		}
		if len(data) == 0 || json.Unmarshal([]byte(data[len(data)-1]), &final) != nil || string(final.Response.Usage) != "null" {
			t.Fatalf("stream %s", body)
		}
		u := final.Response.X.Usage
		hold := pricing.Cost(chat.Usage{PromptTokens: u.PromptTokens, CompletionTokens: 256}, price)
		if u.PromptTokens == 0 || u.CompletionTokens == 0 || u.CompletionTokens >= 256 ||
			final.Response.X.Charged != pricing.Cost(u, price).String() || final.Response.X.Charged == hold.String() {
			t.Errorf("charged %s for %+v; want the counted delivery, below the hold %s", final.Response.X.Charged, u, hold)
		}
	})
}

// TestResponsesPassThroughCreditClientLeaves: a credit-paid passed-through
// stream whose client leaves mid-way is charged the prompt and the output
// it was sent, counted (D16), with a receipt.
func TestResponsesPassThroughCreditClientLeaves(t *testing.T) {
	eachCreditBackend(t, func(t *testing.T, b creditBackend) {
		body := `{"model":"demo","input":"Say hello","max_output_tokens":200,"stream":true}`
		e := newCreditEnv(t, creditOpts{backend: b, provider: func(up gateway.Provider) gateway.Provider {
			rp, err := upstream.WithResponses(up)
			if err != nil {
				t.Fatal(err)
			}
			return rp
		}})
		// created, in_progress, output_item.added, content_part.added and
		// three deltas.
		e.up.SetFault(upstreamtest.Fault{StallAfter: 7})
		e.topUp(t, alice, 1_000_000)
		secret, _ := e.newKey(t, alice, nil)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		resp := e.do(t, ctx, http.MethodPost, "/v1/responses", secret, body, nil)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d: %s", resp.StatusCode, readAll(t, resp))
		}
		id := resp.Header.Get(gateway.HeaderRequestID)
		var delivered strings.Builder
		rd := bufio.NewReader(resp.Body)
		for deltas := 0; deltas < 3; {
			line, err := rd.ReadString('\n')
			if err != nil {
				t.Fatalf("stream ended after %q: %v", delivered.String(), err)
			}
			if d, ok := strings.CutPrefix(strings.TrimRight(line, "\n"), "data: "); ok {
				var ev struct {
					Type  string `json:"type"`
					Delta string `json:"delta"`
				}
				if json.Unmarshal([]byte(d), &ev) == nil && ev.Type == "response.output_text.delta" {
					delivered.WriteString(ev.Delta)
					deltas++
				}
			}
		}
		cancel()
		_ = resp.Body.Close()
		waitFor(t, "the receipt of the cut stream", func() bool {
			_, err := e.db.Receipt(t.Context(), id)
			return err == nil
		})
		tr, err := responses.ParseRequest([]byte(body))
		if err != nil {
			t.Fatal(err)
		}
		u := chat.Usage{PromptTokens: promptTokensOf(t, string(tr.Chat())), CompletionTokens: countTokens(t, delivered.String())}
		cost := pricing.Cost(u, price).Int64()
		e.sync(t)
		if bal := e.balance(t, alice); bal.Held.Sign() != 0 || bal.Available.Int64() != 1_000_000-cost {
			t.Errorf("balance %v held %v, want %d charged for %+v", bal.Available, bal.Held, cost, u)
		}
	})
}
