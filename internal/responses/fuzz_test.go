package responses

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/llm4agents/llm4agents/internal/chat"
)

// FuzzParseRequest: whatever the body, ParseRequest returns a request or an
// *Error, never panics; a request it accepts becomes a chat body the chat
// parser accepts, for the same model and stream mode.
func FuzzParseRequest(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","input":"hi"}`,
		`{"model":"m","input":[{"role":"user","content":[{"type":"input_text","text":"a"}]}],"stream":true}`,
		`{"model":"m","input":[{"type":"function_call","call_id":"c","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c","output":"x"}],"tools":[{"type":"function","name":"f"}]}`,
		`{"model":"m","instructions":"i","input":"x","text":{"format":{"type":"json_schema","name":"n","schema":{}}}}`,
		`{"model":"m","input":[{"role":"assistant","content":[{"type":"output_text","text":"t"}]}]}`,
		`{"model":"m","input":"x","tool_choice":{"type":"function","name":"f"},"max_output_tokens":5}`,
		`{"model":"m","input":[]}`, `[]`, `{}`, `null`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := ParseRequest(body)
		if err != nil {
			if _, ok := errors.AsType[*Error](err); !ok {
				t.Fatalf("error %T %v is not an *Error", err, err)
			}
			return
		}
		c, err := chat.ParseRequest(r.Chat())
		if err != nil {
			t.Fatalf("the chat body %s of %s is refused: %v", r.Chat(), body, err)
		}
		if c.Model != r.Model || c.Stream != r.Stream || (r.Stream && !c.IncludeUsage) {
			t.Fatalf("chat body %s does not carry %s", r.Chat(), body)
		}
	})
}

// FuzzParseForward: whatever the body, ParseForward returns a request or an
// *Error, never panics; a request it accepts has a pricing body the chat
// parser accepts for the same model and stream mode, bounded by
// max_output_tokens as the request is, and an upstream body that names the
// upstream model and bounds its output.
func FuzzParseForward(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","input":"hi"}`,
		`{"model":"m","input":"hi","include":["reasoning.encrypted_content"],"stream":true,"max_output_tokens":5}`,
		`{"model":"m","input":[{"type":"reasoning","id":"rs","summary":[],"encrypted_content":"x"},{"role":"developer","content":[{"type":"input_text","text":"a"}]}]}`,
		`{"model":"m","input":[{"type":"custom_tool_call","call_id":"c","name":"n","input":"i"},{"type":"custom_tool_call_output","call_id":"c","output":"o"}],"tools":[{"type":"custom","name":"n"}]}`,
		`{"model":"m","input":[{"type":"computer_call_output","call_id":"c","output":{"type":"computer_screenshot","image_url":"data:x"}}]}`,
		`{"model":"m","input":[{"role":"user","content":[{"type":"input_image","file_id":"f"}]}]}`,
		`{"model":"m","input":"x","tools":[{"type":"web_search"}]}`,
		`{"model":"m","input":[]}`, `[]`, `{}`, `null`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := ParseForward(body)
		if err != nil {
			if _, ok := errors.AsType[*Error](err); !ok {
				t.Fatalf("error %T %v is not an *Error", err, err)
			}
			return
		}
		c, err := chat.ParseRequest(r.Chat())
		if err != nil {
			t.Fatalf("the pricing body %s of %s is refused: %v", r.Chat(), body, err)
		}
		if c.Model != r.Model || c.Stream != r.Stream || (r.MaxOutputTokens != nil && c.OutputCap() != *r.MaxOutputTokens) {
			t.Fatalf("pricing body %s does not carry %s", r.Chat(), body)
		}
		up, err := r.Upstream("up", 77)
		if err != nil {
			t.Fatal(err)
		}
		var u struct {
			Model           string `json:"model"`
			MaxOutputTokens int64  `json:"max_output_tokens"`
		}
		if err := json.Unmarshal(up, &u); err != nil || u.Model != "up" || u.MaxOutputTokens <= 0 {
			t.Fatalf("upstream body %s of %s: %v", up, body, err)
		}
	})
}

// FuzzReadEvent: whatever an upstream streams, ReadEvent returns an event
// with a type or an error, never panics; a final event's usage has no
// negative count, and only a final event carries one.
func FuzzReadEvent(f *testing.F) {
	for _, s := range []string{
		`{"type":"response.output_text.delta","delta":"hi","sequence_number":3}`,
		`{"type":"response.completed","response":{"object":"response","output":[],"usage":{"input_tokens":1,"output_tokens":2,"total_tokens":3}}}`,
		`{"type":"response.incomplete","response":{"usage":null}}`,
		`{"type":"response.failed","response":{"usage":{"input_tokens":-1,"output_tokens":2}}}`,
		`{"type":"error","code":"x","message":"y"}`,
		`{"type":""}`, `[DONE]`, `{}`, `null`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		ev, err := ReadEvent(data)
		if err != nil {
			return
		}
		if ev.Type == "" {
			t.Fatalf("event without a type from %s", data)
		}
		if ev.Usage != nil && (!ev.Final() || ev.Usage.PromptTokens < 0 || ev.Usage.CompletionTokens < 0 || ev.Usage.TotalTokens < 0) {
			t.Fatalf("usage %+v of a %s event from %s", ev.Usage, ev.Type, data)
		}
	})
}
