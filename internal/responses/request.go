// Package responses serves the OpenAI Responses API (POST /v1/responses),
// passed through to an upstream that speaks it or translated for one that
// speaks only chat completions.
//
// Translated: ParseRequest reads a Responses request and turns it into the
// chat-completions request that carries the same conversation, and
// Completion and Stream turn the chat answer back into a Response object or
// the Responses event stream. The gateway prices, pays for and forwards the
// chat request exactly as it does one sent to /v1/chat/completions, so a
// Responses call has every payment path of a chat call.
//
// Passed through: ParseForward reads the request for an upstream that speaks
// the API, refusing only what cannot be priced, and gives the chat body that
// prices it; ReadEvent and ResponseUsage read the upstream's answer for the
// payment (first content, final usage).
//
// The common subset is translated: text (and image URL) input, instructions,
// function tools and their calls and outputs, tool_choice, structured output
// (text.format), max_output_tokens, temperature, top_p, reasoning effort and
// user. What chat completions cannot carry is refused with a 400 naming it,
// never dropped silently: built-in tools (web search, file search, computer
// use...), previous_response_id and conversation (this gateway keeps no
// conversation state), background mode, stored prompts, file inputs.
package responses

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// Limits of a request.
const (
	// MaxItems bounds the input items of one request.
	MaxItems = 10_000
	// MaxTools bounds the tools of one request (OpenAI's own limit).
	MaxTools = 128
)

// Error is a request the gateway refuses: a 400 invalid_request_error whose
// Param names the field at fault.
type Error struct {
	Param   string
	Message string
}

func (e *Error) Error() string { return e.Param + ": " + e.Message }

func refuse(param, format string, args ...any) *Error {
	return &Error{Param: param, Message: fmt.Sprintf(format, args...)}
}

// Request is a Responses request, as far as the translation needs it.
type Request struct {
	Model  string
	Stream bool
	// Instructions, MaxOutputTokens, Temperature, TopP, Tools, ToolChoice,
	// ParallelToolCalls, Text, Metadata and User are echoed in the Response,
	// as OpenAI does; nil or "" when absent.
	Instructions      *string
	MaxOutputTokens   *int64
	Temperature       *float64
	TopP              *float64
	Tools             []json.RawMessage
	ToolChoice        json.RawMessage
	ParallelToolCalls *bool
	Text              json.RawMessage
	Metadata          json.RawMessage
	User              *string
	ReasoningEffort   *string

	chat []byte // the chat-completions body
}

// Chat is the chat-completions request body that carries the request.
func (r *Request) Chat() []byte { return r.chat }

// request is the wire form. Every key OpenAI documents is listed, so that an
// unknown key is refused and a known one is translated, ignored as harmless,
// or refused by name.
type request struct {
	Model              *string           `json:"model"`
	Input              json.RawMessage   `json:"input"`
	Instructions       *string           `json:"instructions"`
	MaxOutputTokens    *int64            `json:"max_output_tokens"`
	Temperature        *float64          `json:"temperature"`
	TopP               *float64          `json:"top_p"`
	Stream             *bool             `json:"stream"`
	Tools              []json.RawMessage `json:"tools"`
	ToolChoice         json.RawMessage   `json:"tool_choice"`
	ParallelToolCalls  *bool             `json:"parallel_tool_calls"`
	Text               json.RawMessage   `json:"text"`
	Metadata           json.RawMessage   `json:"metadata"`
	User               *string           `json:"user"`
	SafetyIdentifier   *string           `json:"safety_identifier"`
	Reasoning          *reasoning        `json:"reasoning"`
	Store              *bool             `json:"store"`
	PreviousResponseID *string           `json:"previous_response_id"`
	Conversation       json.RawMessage   `json:"conversation"`
	Background         *bool             `json:"background"`
	Prompt             json.RawMessage   `json:"prompt"`
	Include            []string          `json:"include"`
	Truncation         *string           `json:"truncation"`
	ServiceTier        *string           `json:"service_tier"`
	PromptCacheKey     *string           `json:"prompt_cache_key"`
	StreamOptions      json.RawMessage   `json:"stream_options"`
	TopLogprobs        *int64            `json:"top_logprobs"`
	MaxToolCalls       *int64            `json:"max_tool_calls"`
}

type reasoning struct {
	Effort  *string         `json:"effort"`
	Summary json.RawMessage `json:"summary"`
}

// ParseRequest reads a Responses request and builds its chat request. Every
// error is an *Error.
func ParseRequest(body []byte) (*Request, error) {
	var w request
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&w); err != nil {
		return nil, decodeError(err)
	}
	if dec.More() {
		return nil, refuse("", "the body must be one JSON object")
	}
	if err := w.refuseUnsupported(); err != nil {
		return nil, err
	}
	if w.Model == nil || *w.Model == "" {
		return nil, refuse("model", "is required")
	}
	r := &Request{
		Model: *w.Model, Stream: w.Stream != nil && *w.Stream, Instructions: w.Instructions,
		MaxOutputTokens: w.MaxOutputTokens, Temperature: w.Temperature, TopP: w.TopP, Tools: w.Tools,
		ToolChoice: w.ToolChoice, ParallelToolCalls: w.ParallelToolCalls, Text: w.Text, Metadata: w.Metadata,
		User: w.User,
	}
	if w.Reasoning != nil {
		r.ReasoningEffort = w.Reasoning.Effort
	}
	var err error
	if r.chat, err = w.chat(r); err != nil {
		return nil, err
	}
	return r, nil
}

func decodeError(err error) *Error {
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &te):
		return refuse(te.Field, "has the wrong type (%s)", te.Value)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		field := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		return refuse(field, "is not a Responses API field this gateway knows")
	}
	return refuse("", "the body is not a valid JSON object: %v", err)
}

// refuseUnsupported names the fields chat completions cannot carry.
func (w *request) refuseUnsupported() error {
	switch {
	case w.PreviousResponseID != nil:
		return refuse("previous_response_id", "is not supported: this gateway stores no responses; send the whole conversation in input")
	case present(w.Conversation):
		return refuse("conversation", "is not supported: this gateway stores no conversations; send the whole conversation in input")
	case w.Background != nil && *w.Background:
		return refuse("background", "is not supported: a paid call is answered while the buyer waits")
	case present(w.Prompt):
		return refuse("prompt", "is not supported: this gateway stores no prompts")
	case len(w.Include) > 0:
		return refuse("include", "is not supported: there are no tool results or reasoning items to include")
	case w.Truncation != nil && *w.Truncation != "disabled":
		return refuse("truncation", "only \"disabled\" is supported: the paid input is what the upstream gets")
	case w.TopLogprobs != nil:
		return refuse("top_logprobs", "is not supported")
	case w.MaxToolCalls != nil:
		return refuse("max_tool_calls", "is not supported: there are no built-in tools")
	case w.MaxOutputTokens != nil && *w.MaxOutputTokens <= 0:
		return refuse("max_output_tokens", "must be a positive integer")
	}
	return nil
}

// chat builds the chat-completions body of the request.
func (w *request) chat(r *Request) ([]byte, error) {
	msgs, err := messages(w.Input, w.Instructions)
	if err != nil {
		return nil, err
	}
	c := map[string]any{"model": r.Model, "messages": msgs}
	if r.Stream {
		c["stream"] = true
		c["stream_options"] = map[string]bool{"include_usage": true}
	}
	if w.MaxOutputTokens != nil {
		c["max_completion_tokens"] = *w.MaxOutputTokens
	}
	setIf(c, "temperature", w.Temperature)
	setIf(c, "top_p", w.TopP)
	setIf(c, "parallel_tool_calls", w.ParallelToolCalls)
	if u := firstString(w.User, w.SafetyIdentifier); u != nil {
		c["user"] = *u
	}
	if w.Reasoning != nil && w.Reasoning.Effort != nil {
		c["reasoning_effort"] = *w.Reasoning.Effort
	}
	if len(w.Tools) > 0 {
		tools, err := chatTools(w.Tools)
		if err != nil {
			return nil, err
		}
		c["tools"] = tools
	}
	if present(w.ToolChoice) {
		tc, err := chatToolChoice(w.ToolChoice)
		if err != nil {
			return nil, err
		}
		c["tool_choice"] = tc
	}
	if present(w.Text) {
		rf, err := responseFormat(w.Text)
		if err != nil {
			return nil, err
		}
		if rf != nil {
			c["response_format"] = rf
		}
	}
	return json.Marshal(c)
}

func setIf[T any](c map[string]any, key string, v *T) {
	if v != nil {
		c[key] = *v
	}
}

func firstString(ss ...*string) *string {
	for _, s := range ss {
		if s != nil && *s != "" {
			return s
		}
	}
	return nil
}

// present reports whether a raw JSON value is there and not null.
func present(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) > 0 && string(t) != "null"
}

// chatMessage is a chat-completions message as the translation writes it.
type chatMessage struct {
	Role       string         `json:"role"`
	Content    any            `json:"content"`
	ToolCalls  []chatToolCall `json:"tool_calls,omitempty"`
	ToolCallID string         `json:"tool_call_id,omitempty"`
}

type chatToolCall struct {
	ID       string       `json:"id"`
	Type     string       `json:"type"`
	Function chatFunction `json:"function"`
}

type chatFunction struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// item is one input item: a message (typed or not), a function call or a
// function call's output.
type item struct {
	Type      string          `json:"type"`
	Role      string          `json:"role"`
	Content   json.RawMessage `json:"content"`
	CallID    string          `json:"call_id"`
	Name      string          `json:"name"`
	Arguments string          `json:"arguments"`
	Output    json.RawMessage `json:"output"`
	ID        string          `json:"id"`
	Status    string          `json:"status"`
}

// messages turns instructions and input into chat messages.
func messages(input json.RawMessage, instructions *string) ([]chatMessage, error) {
	var out []chatMessage
	if instructions != nil && *instructions != "" {
		out = append(out, chatMessage{Role: "system", Content: *instructions})
	}
	in := bytes.TrimSpace(input)
	switch {
	case len(in) == 0 || string(in) == "null":
		return nil, refuse("input", "is required: a string or an array of input items")
	case in[0] == '"':
		var s string
		if err := json.Unmarshal(in, &s); err != nil {
			return nil, refuse("input", "is not a valid string")
		}
		return append(out, chatMessage{Role: "user", Content: s}), nil
	case in[0] != '[':
		return nil, refuse("input", "must be a string or an array of input items")
	}
	var items []item
	if err := json.Unmarshal(in, &items); err != nil {
		return nil, refuse("input", "must be a string or an array of input items: %v", err)
	}
	switch {
	case len(items) == 0:
		return nil, refuse("input", "must not be empty")
	case len(items) > MaxItems:
		return nil, refuse("input", "has %d items; at most %d", len(items), MaxItems)
	}
	for i, it := range items {
		at := fmt.Sprintf("input[%d]", i)
		switch it.Type {
		case "", "message":
			m, err := message(at, it)
			if err != nil {
				return nil, err
			}
			out = append(out, m)
		case "function_call":
			if it.CallID == "" || it.Name == "" {
				return nil, refuse(at, "a function_call needs call_id and name")
			}
			call := chatToolCall{ID: it.CallID, Type: "function", Function: chatFunction{Name: it.Name, Arguments: it.Arguments}}
			// Consecutive calls are one assistant turn, as chat carries them.
			if n := len(out); n > 0 && out[n-1].Role == "assistant" && len(out[n-1].ToolCalls) > 0 {
				out[n-1].ToolCalls = append(out[n-1].ToolCalls, call)
				continue
			}
			out = append(out, chatMessage{Role: "assistant", Content: nil, ToolCalls: []chatToolCall{call}})
		case "function_call_output":
			if it.CallID == "" {
				return nil, refuse(at+".call_id", "is required")
			}
			text, err := outputText(at+".output", it.Output)
			if err != nil {
				return nil, err
			}
			out = append(out, chatMessage{Role: "tool", ToolCallID: it.CallID, Content: text})
		default:
			return nil, refuse(at+".type", "%q items are not supported: only message, function_call and function_call_output", clip(it.Type))
		}
	}
	return out, nil
}

// messageHead checks what every message item has, for the translation
// and for the pricing of a passed-through request alike: its chat role
// (developer becomes system, the chat role every OpenAI-compatible server
// knows), and its content, as the text when it is a string, else trimmed,
// for the caller to decode as parts.
func messageHead(at, role string, content json.RawMessage) (chatRole string, text *string, parts json.RawMessage, err error) {
	switch role {
	case "user", "assistant", "system":
	case "developer":
		role = "system"
	default:
		return "", nil, nil, refuse(at+".role", "%q is not user, assistant, system or developer", clip(role))
	}
	c := bytes.TrimSpace(content)
	switch {
	case len(c) == 0 || string(c) == "null":
		return "", nil, nil, refuse(at+".content", "is required")
	case c[0] == '"':
		var s string
		if err := json.Unmarshal(c, &s); err != nil {
			return "", nil, nil, refuse(at+".content", "is not a valid string")
		}
		return role, &s, nil, nil
	}
	return role, nil, c, nil
}

// message translates a message item.
func message(at string, it item) (chatMessage, error) {
	role, text, c, err := messageHead(at, it.Role, it.Content)
	switch {
	case err != nil:
		return chatMessage{}, err
	case text != nil:
		return chatMessage{Role: role, Content: *text}, nil
	}
	var parts []struct {
		Type     string          `json:"type"`
		Text     *string         `json:"text"`
		ImageURL *string         `json:"image_url"`
		FileID   *string         `json:"file_id"`
		Detail   *string         `json:"detail"`
		Extra    json.RawMessage `json:"annotations"`
	}
	if err := json.Unmarshal(c, &parts); err != nil {
		return chatMessage{}, refuse(at+".content", "must be a string or an array of content parts")
	}
	var out []map[string]any
	for j, p := range parts {
		pat := fmt.Sprintf("%s.content[%d]", at, j)
		switch p.Type {
		case "input_text", "output_text":
			if p.Text == nil {
				return chatMessage{}, refuse(pat+".text", "is required")
			}
			out = append(out, map[string]any{"type": "text", "text": *p.Text})
		case "input_image":
			if p.ImageURL == nil || *p.ImageURL == "" {
				return chatMessage{}, refuse(pat, "an input_image needs image_url: file_id is not supported here")
			}
			img := map[string]any{"url": *p.ImageURL}
			if p.Detail != nil {
				img["detail"] = *p.Detail
			}
			out = append(out, map[string]any{"type": "image_url", "image_url": img})
		default:
			return chatMessage{}, refuse(pat+".type", "%q is not supported: only input_text, output_text and input_image", clip(p.Type))
		}
	}
	if role == "assistant" {
		// Chat takes an assistant turn as text.
		var b strings.Builder
		for _, p := range out {
			if t, ok := p["text"].(string); ok {
				b.WriteString(t)
			}
		}
		return chatMessage{Role: role, Content: b.String()}, nil
	}
	return chatMessage{Role: role, Content: out}, nil
}

// outputText is a function call's output as chat's tool message carries it:
// a string, or the text of an array of input_text parts.
func outputText(at string, raw json.RawMessage) (string, error) {
	c := bytes.TrimSpace(raw)
	if len(c) > 0 && c[0] == '"' {
		var s string
		if err := json.Unmarshal(c, &s); err == nil {
			return s, nil
		}
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if json.Unmarshal(c, &parts) != nil {
		return "", refuse(at, "must be a string or an array of input_text parts")
	}
	var b strings.Builder
	for _, p := range parts {
		if p.Type != "input_text" {
			return "", refuse(at, "%q parts are not supported in a function call output: only input_text", clip(p.Type))
		}
		b.WriteString(p.Text)
	}
	return b.String(), nil
}

// chatTools translates function tools; any other tool type is refused.
func chatTools(tools []json.RawMessage) ([]map[string]any, error) {
	if len(tools) > MaxTools {
		return nil, refuse("tools", "has %d tools; at most %d", len(tools), MaxTools)
	}
	out := make([]map[string]any, 0, len(tools))
	for i, raw := range tools {
		var t struct {
			Type        string          `json:"type"`
			Name        string          `json:"name"`
			Description *string         `json:"description"`
			Parameters  json.RawMessage `json:"parameters"`
			Strict      *bool           `json:"strict"`
		}
		if err := json.Unmarshal(raw, &t); err != nil {
			return nil, refuse(fmt.Sprintf("tools[%d]", i), "must be a tool object")
		}
		if t.Type != "function" {
			return nil, refuse(fmt.Sprintf("tools[%d].type", i), "%q tools are not supported by this gateway: only function tools", clip(t.Type))
		}
		if t.Name == "" {
			return nil, refuse(fmt.Sprintf("tools[%d].name", i), "is required")
		}
		fn := map[string]any{"name": t.Name}
		setIf(fn, "description", t.Description)
		if present(t.Parameters) {
			fn["parameters"] = t.Parameters
		}
		setIf(fn, "strict", t.Strict)
		out = append(out, map[string]any{"type": "function", "function": fn})
	}
	return out, nil
}

// chatToolChoice translates tool_choice: a mode, or one function.
func chatToolChoice(raw json.RawMessage) (any, error) {
	var mode string
	if json.Unmarshal(raw, &mode) == nil {
		switch mode {
		case "auto", "none", "required":
			return mode, nil
		}
		return nil, refuse("tool_choice", "%q is not auto, none, required or a function", clip(mode))
	}
	var fn struct {
		Type string `json:"type"`
		Name string `json:"name"`
	}
	if json.Unmarshal(raw, &fn) != nil || fn.Type != "function" || fn.Name == "" {
		return nil, refuse("tool_choice", "only auto, none, required or {\"type\":\"function\",\"name\":...} are supported")
	}
	return map[string]any{"type": "function", "function": map[string]string{"name": fn.Name}}, nil
}

// responseFormat translates text.format into chat's response_format; nil
// for plain text.
func responseFormat(raw json.RawMessage) (any, error) {
	var text struct {
		Format *struct {
			Type        string          `json:"type"`
			Name        string          `json:"name"`
			Schema      json.RawMessage `json:"schema"`
			Description *string         `json:"description"`
			Strict      *bool           `json:"strict"`
		} `json:"format"`
		Verbosity *string `json:"verbosity"`
	}
	if err := json.Unmarshal(raw, &text); err != nil {
		return nil, refuse("text", "must be an object with a format")
	}
	if text.Format == nil {
		return nil, nil
	}
	switch f := text.Format; f.Type {
	case "text":
		return nil, nil
	case "json_object":
		return map[string]string{"type": "json_object"}, nil
	case "json_schema":
		if f.Name == "" || !present(f.Schema) {
			return nil, refuse("text.format", "a json_schema format needs name and schema")
		}
		js := map[string]any{"name": f.Name, "schema": f.Schema}
		setIf(js, "description", f.Description)
		setIf(js, "strict", f.Strict)
		return map[string]any{"type": "json_schema", "json_schema": js}, nil
	default:
		return nil, refuse("text.format.type", "%q is not text, json_object or json_schema", clip(f.Type))
	}
}

// clip bounds a client's string quoted in an error.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
