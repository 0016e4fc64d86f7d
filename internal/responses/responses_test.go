package responses

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// chatOf parses r's chat body into a generic map.
func chatOf(t *testing.T, r *Request) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.Chat(), &m); err != nil {
		t.Fatalf("chat body %s: %v", r.Chat(), err)
	}
	return m
}

func TestParseRequestTranslates(t *testing.T) {
	tests := []struct {
		name string
		body string
		want string // the chat body, as JSON
	}{
		{
			name: "string input",
			body: `{"model":"m","input":"hi"}`,
			want: `{"model":"m","messages":[{"role":"user","content":"hi"}]}`,
		},
		{
			name: "instructions, bounds and sampling",
			body: `{"model":"m","instructions":"Be brief.","input":"hi","max_output_tokens":64,"temperature":0.5,"top_p":0.9,"user":"u1","store":true,"metadata":{"k":"v"},"truncation":"disabled","service_tier":"auto"}`,
			want: `{"model":"m","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"hi"}],"max_completion_tokens":64,"temperature":0.5,"top_p":0.9,"user":"u1"}`,
		},
		{
			name: "stream asks for usage",
			body: `{"model":"m","input":"hi","stream":true}`,
			want: `{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":true}}`,
		},
		{
			name: "message items, developer role, parts and images",
			body: `{"model":"m","input":[{"role":"developer","content":"rules"},{"type":"message","role":"user","content":[{"type":"input_text","text":"look"},{"type":"input_image","image_url":"https://x/y.png","detail":"low"}]},{"role":"assistant","content":[{"type":"output_text","text":"a cat","annotations":[]}]}]}`,
			want: `{"model":"m","messages":[{"role":"system","content":"rules"},{"role":"user","content":[{"type":"text","text":"look"},{"type":"image_url","image_url":{"url":"https://x/y.png","detail":"low"}}]},{"role":"assistant","content":"a cat"}]}`,
		},
		{
			name: "function tools, calls and outputs",
			body: `{"model":"m","tools":[{"type":"function","name":"get","description":"d","parameters":{"type":"object"},"strict":true}],"tool_choice":{"type":"function","name":"get"},"parallel_tool_calls":false,"input":[{"role":"user","content":"weather?"},{"type":"function_call","call_id":"c1","name":"get","arguments":"{\"a\":1}"},{"type":"function_call","call_id":"c2","name":"get","arguments":"{}"},{"type":"function_call_output","call_id":"c1","output":"sunny"},{"type":"function_call_output","call_id":"c2","output":[{"type":"input_text","text":"rain"}]}]}`,
			want: `{"model":"m","parallel_tool_calls":false,"tool_choice":{"type":"function","function":{"name":"get"}},"tools":[{"type":"function","function":{"name":"get","description":"d","parameters":{"type":"object"},"strict":true}}],"messages":[{"role":"user","content":"weather?"},{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"get","arguments":"{\"a\":1}"}},{"id":"c2","type":"function","function":{"name":"get","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c1","content":"sunny"},{"role":"tool","tool_call_id":"c2","content":"rain"}]}`,
		},
		{
			name: "structured output and reasoning",
			body: `{"model":"m","input":"hi","text":{"format":{"type":"json_schema","name":"s","schema":{"type":"object"},"strict":true}},"reasoning":{"effort":"low"}}`,
			want: `{"model":"m","messages":[{"role":"user","content":"hi"}],"response_format":{"type":"json_schema","json_schema":{"name":"s","schema":{"type":"object"},"strict":true}},"reasoning_effort":"low"}`,
		},
		{
			name: "plain text format adds nothing",
			body: `{"model":"m","input":"hi","text":{"format":{"type":"text"}},"tool_choice":"auto"}`,
			want: `{"model":"m","messages":[{"role":"user","content":"hi"}],"tool_choice":"auto"}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := ParseRequest([]byte(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			var want map[string]any
			if err := json.Unmarshal([]byte(tt.want), &want); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, chatOf(t, r)); diff != "" {
				t.Errorf("chat body (-want +got):\n%s", diff)
			}
		})
	}
}

// TestParseRequestRefuses: what chat cannot carry, and malformed or hostile
// input, is a 400 naming the field.
func TestParseRequestRefuses(t *testing.T) {
	tests := []struct{ name, body, param string }{
		{"not JSON", `{"model":`, ""},
		{"two objects", `{"model":"m","input":"a"} {}`, ""},
		{"array body", `[]`, ""},
		{"no model", `{"input":"hi"}`, "model"},
		{"empty model", `{"model":"","input":"hi"}`, "model"},
		{"model not a string", `{"model":7,"input":"hi"}`, "model"},
		{"no input", `{"model":"m"}`, "input"},
		{"null input", `{"model":"m","input":null}`, "input"},
		{"empty input", `{"model":"m","input":[]}`, "input"},
		{"input a number", `{"model":"m","input":3}`, "input"},
		{"unknown field", `{"model":"m","input":"hi","temprature":1}`, "temprature"},
		{"previous response", `{"model":"m","input":"hi","previous_response_id":"resp_1"}`, "previous_response_id"},
		{"conversation", `{"model":"m","input":"hi","conversation":"conv_1"}`, "conversation"},
		{"background", `{"model":"m","input":"hi","background":true}`, "background"},
		{"stored prompt", `{"model":"m","input":"hi","prompt":{"id":"p"}}`, "prompt"},
		{"include", `{"model":"m","input":"hi","include":["reasoning.encrypted_content"]}`, "include"},
		{"auto truncation", `{"model":"m","input":"hi","truncation":"auto"}`, "truncation"},
		{"zero output", `{"model":"m","input":"hi","max_output_tokens":0}`, "max_output_tokens"},
		{"fractional output", `{"model":"m","input":"hi","max_output_tokens":1.5}`, "max_output_tokens"},
		{"built-in tool", `{"model":"m","input":"hi","tools":[{"type":"web_search_preview"}]}`, "tools[0].type"},
		{"tool without name", `{"model":"m","input":"hi","tools":[{"type":"function"}]}`, "tools[0].name"},
		{"tool not an object", `{"model":"m","input":"hi","tools":[1]}`, "tools[0]"},
		{"too many tools", `{"model":"m","input":"hi","tools":[` + strings.Repeat(`{"type":"function","name":"f"},`, 128) + `{"type":"function","name":"f"}]}`, "tools"},
		{"hosted tool choice", `{"model":"m","input":"hi","tool_choice":{"type":"file_search"}}`, "tool_choice"},
		{"bad tool choice mode", `{"model":"m","input":"hi","tool_choice":"sometimes"}`, "tool_choice"},
		{"reasoning item", `{"model":"m","input":[{"type":"reasoning","id":"rs","summary":[]}]}`, "input[0].type"},
		{"item reference", `{"model":"m","input":[{"type":"item_reference","id":"msg_1"}]}`, "input[0].type"},
		{"bad role", `{"model":"m","input":[{"role":"tool","content":"x"}]}`, "input[0].role"},
		{"message without content", `{"model":"m","input":[{"role":"user"}]}`, "input[0].content"},
		{"file part", `{"model":"m","input":[{"role":"user","content":[{"type":"input_file","file_id":"f"}]}]}`, "input[0].content[0].type"},
		{"image by file id", `{"model":"m","input":[{"role":"user","content":[{"type":"input_image","file_id":"f"}]}]}`, "input[0].content[0]"},
		{"text part without text", `{"model":"m","input":[{"role":"user","content":[{"type":"input_text"}]}]}`, "input[0].content[0].text"},
		{"call without id", `{"model":"m","input":[{"type":"function_call","name":"f","arguments":"{}"}]}`, "input[0]"},
		{"output without call", `{"model":"m","input":[{"type":"function_call_output","output":"x"}]}`, "input[0].call_id"},
		{"output with an image", `{"model":"m","input":[{"type":"function_call_output","call_id":"c","output":[{"type":"input_image","image_url":"u"}]}]}`, "input[0].output"},
		{"schema without name", `{"model":"m","input":"hi","text":{"format":{"type":"json_schema","schema":{}}}}`, "text.format"},
		{"unknown format", `{"model":"m","input":"hi","text":{"format":{"type":"yaml"}}}`, "text.format.type"},
		{"long hostile type is clipped", `{"model":"m","input":[{"type":"` + strings.Repeat("x", 5000) + `"}]}`, "input[0].type"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseRequest([]byte(tt.body))
			var re *Error
			if !errors.As(err, &re) {
				t.Fatalf("ParseRequest() = %v, want an *Error", err)
			}
			if tt.param != "" && re.Param != tt.param {
				t.Errorf("param %q, want %q (%v)", re.Param, tt.param, err)
			}
			if len(re.Error()) > 400 {
				t.Errorf("error of %d bytes: the client's input is not clipped", len(re.Error()))
			}
		})
	}
}

func TestParseRequestTooManyItems(t *testing.T) {
	body := `{"model":"m","input":[` + strings.Repeat(`{"role":"user","content":"a"},`, MaxItems) + `{"role":"user","content":"a"}]}`
	var re *Error
	if _, err := ParseRequest([]byte(body)); !errors.As(err, &re) || re.Param != "input" {
		t.Fatalf("%d items: %v", MaxItems+1, err)
	}
}

func TestCompletion(t *testing.T) {
	r, err := ParseRequest([]byte(`{"model":"pub","input":"hi","metadata":{"a":"b"},"tools":[{"type":"function","name":"f"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	chat := `{"id":"chatcmpl-1","object":"chat.completion","created":1700000000,"model":"upstream-name","choices":[{"index":0,"message":{"role":"assistant","content":"hello","tool_calls":[{"id":"call_1","type":"function","function":{"name":"f","arguments":"{}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":5,"completion_tokens":7,"total_tokens":12,"prompt_tokens_details":{"cached_tokens":2},"completion_tokens_details":{"reasoning_tokens":3}},"x_llm4agents":{"charged":"10"}}`
	out, err := r.Completion([]byte(chat))
	if err != nil {
		t.Fatal(err)
	}
	var resp Response
	if err := json.Unmarshal(out, &resp); err != nil {
		t.Fatal(err)
	}
	if resp.Object != "response" || resp.Status != "completed" || resp.Model != "pub" || resp.CreatedAt != 1700000000 ||
		resp.outputText() != "hello" || len(resp.Output) != 2 || resp.Output[1].Type != "function_call" || resp.Output[1].CallID != "call_1" ||
		string(resp.Metadata) != `{"a":"b"}` || len(resp.Tools) != 1 || string(resp.X) != `{"charged":"10"}` {
		t.Errorf("response %s", out)
	}
	want := Usage{InputTokens: 5, InputTokensDetails: inputDetail{2}, OutputTokens: 7, OutputTokensDetails: outputDetail{3}, TotalTokens: 12}
	if resp.Usage == nil || *resp.Usage != want {
		t.Errorf("usage %+v, want %+v", resp.Usage, want)
	}
	// The same chat answer (a replay) gives the same ids.
	again, _ := r.Completion([]byte(chat))
	if string(again) != string(out) {
		t.Error("the same chat answer gave another Response")
	}
	for _, bad := range []string{`nope`, `{"choices":[]}`} {
		if _, err := r.Completion([]byte(bad)); err == nil {
			t.Errorf("Completion(%s) accepted it", bad)
		}
	}
}

// TestStream: a chat stream with text and a tool call becomes the Responses
// events in order, with the whole response at the end.
func TestStream(t *testing.T) {
	r, err := ParseRequest([]byte(`{"model":"pub","input":"hi","stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	st := r.NewStream()
	chunks := []string{
		`{"id":"c","created":1,"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}`,
		`{"id":"c","created":1,"choices":[{"index":0,"delta":{"content":"Hel"}}]}`,
		`{"id":"c","created":1,"choices":[{"index":0,"delta":{"content":"lo"}}]}`,
		`{"id":"c","created":1,"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"f","arguments":"{\"a\""}}]}}]}`,
		`{"id":"c","created":1,"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":":1}"}}]}}]}`,
		`{"id":"c","created":1,"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}`,
		`{"id":"c","created":1,"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7},"x_llm4agents":{"charged":"5"}}`,
		`[DONE]`,
	}
	var types []string
	var last map[string]json.RawMessage
	for _, c := range chunks {
		out, err := st.Event([]byte(c))
		if err != nil {
			t.Fatal(err)
		}
		for ev := range strings.SplitSeq(strings.TrimSpace(string(out)), "\n\n") {
			if ev == "" {
				continue
			}
			lines := strings.SplitN(ev, "\n", 2)
			data := strings.TrimPrefix(lines[1], "data: ")
			if err := json.Unmarshal([]byte(data), &last); err != nil {
				t.Fatalf("event %q: %v", ev, err)
			}
			var typ string
			_ = json.Unmarshal(last["type"], &typ)
			if lines[0] != "event: "+typ {
				t.Errorf("event line %q for type %s", lines[0], typ)
			}
			types = append(types, typ)
		}
	}
	want := []string{
		"response.created", "response.in_progress",
		"response.output_item.added", "response.content_part.added", "response.output_text.delta", "response.output_text.delta",
		"response.output_item.added", "response.function_call_arguments.delta", "response.function_call_arguments.delta",
		"response.output_text.done", "response.content_part.done", "response.output_item.done",
		"response.function_call_arguments.done", "response.output_item.done",
		"response.completed",
	}
	if diff := cmp.Diff(want, types); diff != "" {
		t.Fatalf("events (-want +got):\n%s", diff)
	}
	var resp Response
	if err := json.Unmarshal(last["response"], &resp); err != nil {
		t.Fatal(err)
	}
	if resp.Status != "completed" || resp.outputText() != "Hello" || len(resp.Output) != 2 || resp.Output[1].Arguments != `{"a":1}` ||
		resp.Usage == nil || resp.Usage.TotalTokens != 7 || string(resp.X) != `{"charged":"5"}` {
		t.Errorf("final response %s", last["response"])
	}
	if out, _ := st.Event([]byte(`[DONE]`)); out != nil {
		t.Error("events after the end")
	}
}

// TestStreamBroken: an in-band error of the chat stream ends the Responses
// stream with response.failed, carrying what was delivered.
func TestStreamBroken(t *testing.T) {
	r, err := ParseRequest([]byte(`{"model":"pub","input":"hi","stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	st := r.NewStream()
	var all strings.Builder
	for _, c := range []string{
		`{"id":"c","created":1,"choices":[{"index":0,"delta":{"content":"Hel"}}]}`,
		`{"error":{"message":"the upstream stream broke","type":"upstream_error","code":"upstream_stream_broken"}}`,
		`[DONE]`,
	} {
		out, err := st.Event([]byte(c))
		if err != nil {
			t.Fatal(err)
		}
		all.Write(out)
	}
	s := all.String()
	if !strings.Contains(s, "event: response.failed") || !strings.Contains(s, `"code":"upstream_stream_broken"`) || strings.Contains(s, "response.completed") {
		t.Errorf("stream:\n%s", s)
	}
	if _, err := r.NewStream().Event([]byte("not json")); err == nil {
		t.Error("a chunk that is not JSON was accepted")
	}
}
