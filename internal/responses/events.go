package responses

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/llm4agents/llm4agents/internal/chat"
)

// Event is what the gateway reads of one event of a Responses stream an
// upstream wrote: its type, the text it adds to the answer, and on the final
// event the response's usage.
type Event struct {
	Type string
	// Delta is the text a delta event adds: output text, a refusal, a
	// function call's arguments, a custom tool's input, reasoning text.
	Delta string
	// Usage is the usage of the response a final event carries, nil when
	// it has none.
	Usage *chat.Usage
}

// contentDeltas are the delta events whose text the buyer pays for as
// output.
var contentDeltas = map[string]bool{
	"response.output_text.delta":             true,
	"response.refusal.delta":                 true,
	"response.function_call_arguments.delta": true,
	"response.custom_tool_call_input.delta":  true,
	"response.reasoning_summary_text.delta":  true,
	"response.reasoning_text.delta":          true,
}

// Final reports whether e ends the stream: response.completed,
// response.incomplete or response.failed, each carrying the whole response.
func (e Event) Final() bool {
	switch e.Type {
	case "response.completed", "response.incomplete", "response.failed":
		return true
	}
	return false
}

// HasContent reports whether e carries content the buyer pays for (D2): a
// non-empty delta of output, or an output item done (a call without
// arguments has no delta). response.created and the like do not.
func (e Event) HasContent() bool {
	return (contentDeltas[e.Type] && e.Delta != "") || e.Type == "response.output_item.done"
}

// ReadEvent reads the data of one Responses stream event. An event that is
// not a JSON object with a type is an error.
func ReadEvent(data []byte) (Event, error) {
	var ev struct {
		Type     string          `json:"type"`
		Delta    json.RawMessage `json:"delta"`
		Response *struct {
			Usage json.RawMessage `json:"usage"`
		} `json:"response"`
	}
	if t := bytes.TrimSpace(data); len(t) == 0 || t[0] != '{' {
		return Event{}, errors.New("responses: the event is not a JSON object")
	}
	if err := json.Unmarshal(data, &ev); err != nil {
		return Event{}, fmt.Errorf("responses: the event is not JSON: %w", err)
	}
	if ev.Type == "" {
		return Event{}, errors.New("responses: the event has no type")
	}
	out := Event{Type: ev.Type}
	if len(ev.Delta) > 0 && ev.Delta[0] == '"' {
		_ = json.Unmarshal(ev.Delta, &out.Delta)
	}
	if out.Final() && ev.Response != nil {
		u, err := usageOf(ev.Response.Usage)
		if err != nil {
			return Event{}, err
		}
		out.Usage = u
	}
	return out, nil
}

// ResponseUsage reads the usage of a Response object, nil when it has none.
// A body that is not a Response object (object "response" with an output
// array) is an error, as is a usage with negative counts.
func ResponseUsage(body []byte) (*chat.Usage, error) {
	var r struct {
		Object string          `json:"object"`
		Output json.RawMessage `json:"output"`
		Usage  json.RawMessage `json:"usage"`
	}
	if t := bytes.TrimSpace(body); len(t) == 0 || t[0] != '{' {
		return nil, errors.New("responses: the answer is not a JSON object")
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("responses: the answer is not JSON: %w", err)
	}
	if t := bytes.TrimSpace(r.Output); r.Object != "response" || len(t) == 0 || t[0] != '[' {
		return nil, errors.New("responses: the answer is not a Response object (object \"response\" with an output array)")
	}
	return usageOf(r.Usage)
}

// usageOf turns a Responses usage into the chat usage the gateway prices:
// input tokens as prompt tokens, output tokens (reasoning included) as
// completion tokens. The details keep their names in both APIs
// (cached_tokens, reasoning_tokens) and are carried over.
func usageOf(raw json.RawMessage) (*chat.Usage, error) {
	if !present(raw) {
		return nil, nil
	}
	var u struct {
		InputTokens         *int64          `json:"input_tokens"`
		OutputTokens        *int64          `json:"output_tokens"`
		TotalTokens         int64           `json:"total_tokens"`
		InputTokensDetails  json.RawMessage `json:"input_tokens_details"`
		OutputTokensDetails json.RawMessage `json:"output_tokens_details"`
	}
	if err := json.Unmarshal(raw, &u); err != nil {
		return nil, fmt.Errorf("responses: the usage is not a Responses usage: %w", err)
	}
	if u.InputTokens == nil || u.OutputTokens == nil {
		return nil, errors.New("responses: the usage has no input_tokens or output_tokens")
	}
	if *u.InputTokens < 0 || *u.OutputTokens < 0 || u.TotalTokens < 0 {
		return nil, fmt.Errorf("responses: the usage has negative token counts: %d input, %d output", *u.InputTokens, *u.OutputTokens)
	}
	out := &chat.Usage{PromptTokens: *u.InputTokens, CompletionTokens: *u.OutputTokens, TotalTokens: u.TotalTokens}
	if out.TotalTokens == 0 {
		out.TotalTokens = out.PromptTokens + out.CompletionTokens
	}
	if present(u.InputTokensDetails) {
		out.PromptTokensDetails = u.InputTokensDetails
	}
	if present(u.OutputTokensDetails) {
		out.CompletionTokensDetails = u.OutputTokensDetails
	}
	return out, nil
}

// OutputText is the output of a Response object the buyer pays for, to
// count when the upstream reported no usage: the text of its messages
// and refusals, and the name and arguments (or input) of its calls.
func OutputText(body []byte) string {
	var r struct {
		Output []struct {
			Content []struct {
				Text    string `json:"text"`
				Refusal string `json:"refusal"`
			} `json:"content"`
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
			Input     string `json:"input"`
			Summary   []struct {
				Text string `json:"text"`
			} `json:"summary"`
		} `json:"output"`
	}
	if json.Unmarshal(body, &r) != nil {
		return ""
	}
	var b bytes.Buffer
	for _, it := range r.Output {
		for _, c := range it.Content {
			b.WriteString(c.Text)
			b.WriteString(c.Refusal)
		}
		for _, s := range it.Summary {
			b.WriteString(s.Text)
		}
		b.WriteString(it.Name)
		b.WriteString(it.Arguments)
		b.WriteString(it.Input)
	}
	return b.String()
}
