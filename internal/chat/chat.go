// Package chat holds the OpenAI chat-completions wire types the gateway reads and
// rewrites: the request (kept as raw JSON so fields we do not know pass through
// untouched), usage, streamed chunks, and the OpenAI-style error body.
//
// Only the fields that move the price or the routing are decoded: model,
// messages, tools, max_tokens, max_completion_tokens, n, stream and
// stream_options. Everything else is forwarded byte for byte.
package chat

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
)

// Request is a chat-completions request body.
type Request struct {
	Model               string
	Messages            []Message
	Tools               json.RawMessage // as sent; counted as prompt tokens
	MaxTokens           *int64
	MaxCompletionTokens *int64
	N                   *int64
	Stream              bool
	IncludeUsage        bool // stream_options.include_usage

	// fields holds every top-level key as received, for re-encoding.
	fields map[string]json.RawMessage
}

// Message is one chat message. Content is a string or an array of parts; it is
// kept raw and read by Text.
type Message struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content,omitempty"`
	Name       string          `json:"name,omitempty"`
	ToolCalls  json.RawMessage `json:"tool_calls,omitempty"`
	ToolCallID string          `json:"tool_call_id,omitempty"`
}

// Text returns the textual content of a message: the string, or the text parts
// of an array, joined. Other parts (images, audio) are not text.
func (m Message) Text() string {
	c := bytes.TrimSpace(m.Content)
	if len(c) == 0 || string(c) == "null" {
		return ""
	}
	if c[0] == '"' {
		var s string
		_ = json.Unmarshal(c, &s)
		return s
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if json.Unmarshal(c, &parts) != nil {
		return ""
	}
	var b bytes.Buffer
	for _, p := range parts {
		if p.Type == "text" {
			b.WriteString(p.Text)
		}
	}
	return b.String()
}

// Errors of ParseRequest. Each is a 400 invalid_request_error for the client.
var (
	ErrNotObject   = errors.New("request body must be a JSON object")
	ErrNoModel     = errors.New("model is required")
	ErrNoMessages  = errors.New("messages must be a non-empty array")
	ErrBadField    = errors.New("a field has the wrong type")
	ErrBadMaxToken = errors.New("max_tokens and max_completion_tokens must be positive integers")
	ErrBadN        = errors.New("n must be an integer from 1 to 128")
)

// MaxN bounds n: every choice multiplies the price bound.
const MaxN = 128

// ParseRequest decodes and validates a chat-completions body.
func ParseRequest(body []byte) (*Request, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil || fields == nil {
		return nil, ErrNotObject
	}
	r := &Request{fields: fields}
	if err := decodeField(fields, "model", &r.Model); err != nil {
		return nil, err
	}
	if r.Model == "" {
		return nil, ErrNoModel
	}
	if err := decodeField(fields, "messages", &r.Messages); err != nil {
		return nil, err
	}
	if len(r.Messages) == 0 {
		return nil, ErrNoMessages
	}
	for i, m := range r.Messages {
		if m.Role == "" {
			return nil, fmt.Errorf("%w: messages[%d].role is required", ErrBadField, i)
		}
	}
	if t, ok := fields["tools"]; ok && string(bytes.TrimSpace(t)) != "null" {
		r.Tools = t
	}
	if err := decodeField(fields, "max_tokens", &r.MaxTokens); err != nil {
		return nil, err
	}
	if err := decodeField(fields, "max_completion_tokens", &r.MaxCompletionTokens); err != nil {
		return nil, err
	}
	for _, p := range []*int64{r.MaxTokens, r.MaxCompletionTokens} {
		if p != nil && *p <= 0 {
			return nil, ErrBadMaxToken
		}
	}
	if err := decodeField(fields, "n", &r.N); err != nil {
		return nil, err
	}
	if r.N != nil && (*r.N < 1 || *r.N > MaxN) {
		return nil, ErrBadN
	}
	if err := decodeField(fields, "stream", &r.Stream); err != nil {
		return nil, err
	}
	var so struct {
		IncludeUsage bool `json:"include_usage"`
	}
	if err := decodeField(fields, "stream_options", &so); err != nil {
		return nil, err
	}
	r.IncludeUsage = so.IncludeUsage
	return r, nil
}

func decodeField(fields map[string]json.RawMessage, key string, v any) error {
	raw, ok := fields[key]
	if !ok || string(bytes.TrimSpace(raw)) == "null" {
		return nil
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return fmt.Errorf("%w: %s", ErrBadField, key)
	}
	return nil
}

// Choices returns n, defaulting to 1.
func (r *Request) Choices() int64 {
	if r.N == nil {
		return 1
	}
	return *r.N
}

// OutputCap returns the output token bound the client asked for:
// max_completion_tokens when present (it supersedes max_tokens), else
// max_tokens, else 0 (none given).
func (r *Request) OutputCap() int64 {
	switch {
	case r.MaxCompletionTokens != nil:
		return *r.MaxCompletionTokens
	case r.MaxTokens != nil:
		return *r.MaxTokens
	}
	return 0
}

// Field returns the raw value of a top-level key, if present.
func (r *Request) Field(key string) (json.RawMessage, bool) {
	v, ok := r.fields[key]
	return v, ok
}

// Upstream returns the body to send upstream: model replaced by the upstream's
// name for it, the output cap set when the client gave none (D13), and
// stream_options.include_usage forced on for streams so the last chunk carries
// usage. Every other field is kept as received.
func (r *Request) Upstream(model string, defaultCap int64) ([]byte, error) {
	out := make(map[string]json.RawMessage, len(r.fields)+2)
	maps.Copy(out, r.fields)
	m, err := json.Marshal(model)
	if err != nil {
		return nil, err
	}
	out["model"] = m
	if r.OutputCap() == 0 && defaultCap > 0 {
		out["max_tokens"] = json.RawMessage(fmt.Sprint(defaultCap))
	}
	if r.Stream {
		so := map[string]json.RawMessage{}
		if raw, ok := r.fields["stream_options"]; ok {
			_ = json.Unmarshal(raw, &so)
		}
		so["include_usage"] = json.RawMessage("true")
		b, err := json.Marshal(so)
		if err != nil {
			return nil, err
		}
		out["stream_options"] = b
	}
	return json.Marshal(out)
}

// Usage is the token accounting of a completion. Reasoning tokens are part of
// CompletionTokens (OpenAI reports them inside completion_tokens_details).
type Usage struct {
	PromptTokens            int64           `json:"prompt_tokens"`
	CompletionTokens        int64           `json:"completion_tokens"`
	TotalTokens             int64           `json:"total_tokens"`
	CompletionTokensDetails json.RawMessage `json:"completion_tokens_details,omitempty"`
	PromptTokensDetails     json.RawMessage `json:"prompt_tokens_details,omitempty"`
}

// Chunk is the part of a streamed chat.completion.chunk the gateway reads.
type Chunk struct {
	Choices []struct {
		Delta struct {
			Role         string          `json:"role"`
			Content      *string         `json:"content"`
			RefusalError *string         `json:"refusal"`
			ToolCalls    json.RawMessage `json:"tool_calls"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *Usage `json:"usage"`
}

// HasContent reports whether a chunk carries content the client pays for: text,
// a refusal or a tool-call delta. A role-only delta does not count (D2).
func (c *Chunk) HasContent() bool {
	for _, ch := range c.Choices {
		d := ch.Delta
		if (d.Content != nil && *d.Content != "") || (d.RefusalError != nil && *d.RefusalError != "") ||
			(len(d.ToolCalls) > 0 && string(d.ToolCalls) != "null" && string(d.ToolCalls) != "[]") {
			return true
		}
	}
	return false
}

// ErrorBody is the OpenAI error JSON: {"error":{"message","type","code"}}.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail is the inside of ErrorBody. Extra carries fields we add for some
// errors (a credit shortfall's balance and top-up route).
type ErrorDetail struct {
	Message string `json:"message"`
	Type    string `json:"type"`
	Param   any    `json:"param"`
	Code    any    `json:"code"`
}
