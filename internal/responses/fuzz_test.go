package responses

import (
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
