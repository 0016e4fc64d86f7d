package responses

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/llm4agents/llm4agents/internal/chat"
)

// TestParseForwardPasses: what the translation refuses but can be priced
// is passed through, priced from a chat body that counts every input.
func TestParseForwardPasses(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		translated bool
		counts     []string // in the pricing body
	}{
		{name: "translatable", body: `{"model":"m","input":"hi","max_output_tokens":9}`, translated: true, counts: []string{`"hi"`}},
		{name: "include", body: `{"model":"m","input":"hi","include":["reasoning.encrypted_content"]}`, counts: []string{`"hi"`}},
		{name: "custom tool", body: `{"model":"m","input":"hi","tools":[{"type":"custom","name":"sql","description":"runs sql"}]}`, counts: []string{"runs sql"}},
		{name: "reasoning item", body: `{"model":"m","input":[{"type":"reasoning","id":"rs_1","summary":[],"encrypted_content":"gAAAAB-secret"},{"role":"user","content":"go on"}]}`,
			counts: []string{"gAAAAB-secret", "go on"}},
		{name: "truncation auto", body: `{"model":"m","input":"hi","truncation":"auto","top_logprobs":2,"max_tool_calls":3}`, counts: []string{`"hi"`}},
		{name: "refusal part", body: `{"model":"m","input":[{"role":"assistant","content":[{"type":"refusal","refusal":"no way"}]},{"role":"user","content":"please"}]}`,
			counts: []string{"no way", "please"}},
		{name: "computer screenshot", body: `{"model":"m","tools":[{"type":"computer_use_preview","display_width":1,"display_height":1,"environment":"browser"}],` +
			`"input":[{"type":"computer_call_output","call_id":"c","output":{"type":"computer_screenshot","image_url":"data:image/png;base64,AAAA"}}]}`,
			counts: []string{`"image_url":{"url":"data:image/png;base64,AAAA"}`, `computer_call_output`}},
		{name: "flex tier", body: `{"model":"m","input":"hi","service_tier":"flex","include":[]}`, translated: true, counts: []string{`"hi"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := ParseForward([]byte(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			tr, terr := ParseRequest([]byte(tc.body))
			if (terr == nil) != tc.translated {
				t.Fatalf("translation error %v, want translated %v", terr, tc.translated)
			}
			if tc.translated && string(f.Chat()) != string(tr.Chat()) {
				t.Errorf("priced by %s, the translation is %s", f.Chat(), tr.Chat())
			}
			c, err := chat.ParseRequest(f.Chat())
			if err != nil {
				t.Fatalf("pricing body %s: %v", f.Chat(), err)
			}
			if c.Model != "m" {
				t.Errorf("model %q", c.Model)
			}
			for _, s := range tc.counts {
				if !strings.Contains(string(f.Chat()), s) && !strings.Contains(string(f.Chat()), strings.ReplaceAll(s, `"`, `\"`)) {
					t.Errorf("the pricing body %s does not count %s", f.Chat(), s)
				}
			}
		})
	}
}

// TestParseForwardRefuses: what cannot be priced is refused by name.
func TestParseForwardRefuses(t *testing.T) {
	for _, tc := range []struct{ name, body, param, msg string }{
		{"previous response", `{"model":"m","input":"hi","previous_response_id":"resp_1"}`, "previous_response_id", "cannot count"},
		{"conversation", `{"model":"m","input":"hi","conversation":"conv_1"}`, "conversation", "cannot count"},
		{"stored prompt", `{"model":"m","input":"hi","prompt":{"id":"pmpt_1"}}`, "prompt", "stored prompt"},
		{"background", `{"model":"m","input":"hi","background":true}`, "background", "waits"},
		{"web search", `{"model":"m","input":"hi","tools":[{"type":"web_search"}]}`, "tools[0].type", "bills them per call"},
		{"mcp", `{"model":"m","input":"hi","tools":[{"type":"function","name":"f"},{"type":"mcp","server_label":"x"}]}`, "tools[1].type", "bills them per call"},
		{"file id image", `{"model":"m","input":[{"role":"user","content":[{"type":"input_image","file_id":"file-1"}]}]}`, "input[0]", "file_id"},
		{"input file", `{"model":"m","input":[{"role":"user","content":[{"type":"input_file","file_data":"JVBERi0="}]}]}`, "input[0].content[0].type", "cannot be counted"},
		{"item reference", `{"model":"m","input":[{"type":"item_reference","id":"msg_1"}]}`, "input[0].type", "stored with the upstream"},
		{"hosted tool item", `{"model":"m","input":[{"type":"web_search_call","id":"ws_1","status":"completed"}]}`, "input[0].type", "not supported"},
		{"priority tier", `{"model":"m","input":"hi","service_tier":"priority"}`, "service_tier", "default tier"},
		{"unknown key", `{"model":"m","input":"hi","frobnicate":1}`, "frobnicate", "knows"},
		{"no model", `{"input":"hi"}`, "model", "required"},
		{"zero output", `{"model":"m","input":"hi","max_output_tokens":0}`, "max_output_tokens", "positive"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseForward([]byte(tc.body))
			re, ok := errors.AsType[*Error](err)
			if !ok {
				t.Fatalf("error %v, want an *Error", err)
			}
			if re.Param != tc.param || !strings.Contains(re.Message, tc.msg) {
				t.Errorf("error %q at %q, want %q at %q", re.Message, re.Param, tc.msg, tc.param)
			}
		})
	}
}

// TestForwardUpstream: the upstream gets the buyer's body with the model
// renamed, and max_output_tokens and store false set only when absent.
func TestForwardUpstream(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		want       map[string]any
	}{
		{"injected", `{"model":"m","input":"hi","include":["x"],"store":false}`,
			map[string]any{"model": "up-m", "input": "hi", "include": []any{"x"}, "store": false, "max_output_tokens": float64(500)}},
		{"kept", `{"model":"m","input":"hi","max_output_tokens":7,"stream":true}`,
			map[string]any{"model": "up-m", "input": "hi", "max_output_tokens": float64(7), "stream": true, "store": false}},
		{"store kept", `{"model":"m","input":"hi","max_output_tokens":7,"store":true}`,
			map[string]any{"model": "up-m", "input": "hi", "max_output_tokens": float64(7), "store": true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := ParseForward([]byte(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			b, err := f.Upstream("up-m", 500)
			if err != nil {
				t.Fatal(err)
			}
			var got map[string]any
			if err := json.Unmarshal(b, &got); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("upstream body (-want +got):\n%s", diff)
			}
		})
	}
}

// TestReadEvent: the gateway's reading of Responses events.
func TestReadEvent(t *testing.T) {
	ev, err := ReadEvent([]byte(`{"type":"response.completed","sequence_number":9,"response":{"object":"response","output":[],` +
		`"usage":{"input_tokens":12,"input_tokens_details":{"cached_tokens":2},"output_tokens":30,"output_tokens_details":{"reasoning_tokens":10},"total_tokens":42}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if !ev.Final() || ev.HasContent() || ev.Usage == nil || ev.Usage.PromptTokens != 12 || ev.Usage.CompletionTokens != 30 || ev.Usage.TotalTokens != 42 ||
		string(ev.Usage.PromptTokensDetails) != `{"cached_tokens":2}` {
		t.Errorf("final event %+v", ev)
	}
	ev, err = ReadEvent([]byte(`{"type":"response.output_text.delta","delta":"hi"}`))
	if err != nil || !ev.HasContent() || ev.Delta != "hi" || ev.Final() {
		t.Errorf("delta %+v %v", ev, err)
	}
	for _, bad := range []string{`[]`, `{"delta":"x"}`, `{"type":"response.completed","response":{"usage":{"input_tokens":-1,"output_tokens":1}}}`, `{"type":`} {
		if _, err := ReadEvent([]byte(bad)); err == nil {
			t.Errorf("ReadEvent(%s) accepted", bad)
		}
	}
}
