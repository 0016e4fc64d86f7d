package responses

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
)

// Forward is a Responses request passed through to an upstream that speaks
// the Responses API: the buyer's body goes upstream as written, with only
// its model renamed and max_output_tokens set when absent (Upstream).
//
// Its Request is what the request says (model, stream, the output bound)
// and Chat is the chat-completions body that prices it: the translation's,
// when the translation takes the request, so it is priced exactly as a
// translated call; otherwise a body that counts every input the upstream
// will read (tokens of each item's JSON where chat has no place for it,
// which can only count more than the upstream will).
type Forward struct {
	Request
	// fields holds every top-level key as received, for Upstream.
	fields map[string]json.RawMessage
}

// passedTools are the tool types whose calls the buyer runs: the upstream
// only writes the call, counted as output. Every other tool (web search,
// file search, code interpreter, image generation, MCP) is run and billed by
// the upstream per call, outside the token usage this gateway charges: it
// cannot be priced and is refused.
var passedTools = map[string]bool{
	"function": true, "custom": true, "computer_use_preview": true, "computer_use": true,
	"local_shell": true, "shell": true, "apply_patch": true,
}

// passedItems are the input item types passed through besides messages.
// An item_reference names an item stored upstream, whose tokens cannot be
// counted, and the items of hosted tools belong to tools that are refused.
var passedItems = map[string]bool{
	"function_call": true, "function_call_output": true,
	"custom_tool_call": true, "custom_tool_call_output": true,
	"reasoning":     true,
	"computer_call": true, "computer_call_output": true,
	"local_shell_call": true, "local_shell_call_output": true,
	"shell_call": true, "shell_call_output": true,
	"apply_patch_call": true, "apply_patch_call_output": true,
}

// passedTiers are the service tiers passed through: a tier that costs more
// than the default (priority, scale) is not what the model's price pays for.
var passedTiers = map[string]bool{"auto": true, "default": true, "flex": true}

// ParseForward reads a Responses request to pass through. It refuses, with
// an *Error naming the field, what this gateway cannot price: anything that
// makes the upstream read content it keeps (previous_response_id,
// conversation, stored prompts, file ids, item references), tools the
// upstream runs and bills per call, background mode (the answer would come
// after the payment's call), a costlier service tier, and keys it does not
// know. Everything else reaches the upstream as written.
func ParseForward(body []byte) (*Forward, error) {
	var w request
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&w); err != nil {
		return nil, decodeError(err)
	}
	if dec.More() {
		return nil, refuse("", "the body must be one JSON object")
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil || fields == nil {
		return nil, refuse("", "the body must be one JSON object")
	}
	if err := w.refuseUnpriced(); err != nil {
		return nil, err
	}
	if w.Model == nil || *w.Model == "" {
		return nil, refuse("model", "is required")
	}
	f := &Forward{fields: fields}
	if tr, err := ParseRequest(body); err == nil {
		// The translation takes it: priced exactly as a translated call.
		f.Request = *tr
		return f, nil
	}
	f.Request = Request{
		Model: *w.Model, Stream: w.Stream != nil && *w.Stream, Instructions: w.Instructions,
		MaxOutputTokens: w.MaxOutputTokens, Temperature: w.Temperature, TopP: w.TopP, Tools: w.Tools,
		ToolChoice: w.ToolChoice, ParallelToolCalls: w.ParallelToolCalls, Text: w.Text, Metadata: w.Metadata,
		User: w.User,
	}
	var err error
	if f.chat, err = w.pricing(); err != nil {
		return nil, err
	}
	return f, nil
}

// refuseUnpriced names the fields a pass-through cannot price.
func (w *request) refuseUnpriced() error {
	switch {
	case w.PreviousResponseID != nil:
		return refuse("previous_response_id", "is not supported: the upstream would read a stored conversation this gateway cannot count or price; send the whole conversation in input")
	case present(w.Conversation):
		return refuse("conversation", "is not supported: the upstream would read a stored conversation this gateway cannot count or price; send the whole conversation in input")
	case w.Background != nil && *w.Background:
		return refuse("background", "is not supported: a paid call is answered while the buyer waits")
	case present(w.Prompt):
		return refuse("prompt", "is not supported: a stored prompt cannot be counted or priced; send its text in instructions or input")
	case w.MaxOutputTokens != nil && *w.MaxOutputTokens <= 0:
		return refuse("max_output_tokens", "must be a positive integer")
	case w.ServiceTier != nil && !passedTiers[*w.ServiceTier]:
		return refuse("service_tier", "%q is not sold here: the model's price is the upstream's default tier (auto, default or flex)", clip(*w.ServiceTier))
	}
	for i, raw := range w.Tools {
		var t struct {
			Type string `json:"type"`
		}
		if err := json.Unmarshal(raw, &t); err != nil {
			return refuse(fmt.Sprintf("tools[%d]", i), "must be a tool object")
		}
		if !passedTools[t.Type] {
			return refuse(fmt.Sprintf("tools[%d].type", i), "%q tools are not supported: the upstream runs and bills them per call, outside the tokens this gateway charges; tools the caller runs (function, custom, computer use, shell, apply_patch) are", clip(t.Type))
		}
	}
	if len(w.Tools) > MaxTools {
		return refuse("tools", "has %d tools; at most %d", len(w.Tools), MaxTools)
	}
	return nil
}

// pricing builds the chat body that prices a request the translation does
// not take: every message's text and images as chat carries them, every
// other item counted as its JSON text.
func (w *request) pricing() ([]byte, error) {
	var msgs []chatMessage
	if w.Instructions != nil && *w.Instructions != "" {
		msgs = append(msgs, chatMessage{Role: "system", Content: *w.Instructions})
	}
	in := bytes.TrimSpace(w.Input)
	switch {
	case len(in) == 0 || string(in) == "null":
		return nil, refuse("input", "is required: a string or an array of input items")
	case in[0] == '"':
		var s string
		if err := json.Unmarshal(in, &s); err != nil {
			return nil, refuse("input", "is not a valid string")
		}
		msgs = append(msgs, chatMessage{Role: "user", Content: s})
	case in[0] == '[':
		var items []json.RawMessage
		if err := json.Unmarshal(in, &items); err != nil {
			return nil, refuse("input", "must be a string or an array of input items")
		}
		switch {
		case len(items) == 0:
			return nil, refuse("input", "must not be empty")
		case len(items) > MaxItems:
			return nil, refuse("input", "has %d items; at most %d", len(items), MaxItems)
		}
		for i, raw := range items {
			m, err := pricedItem(fmt.Sprintf("input[%d]", i), raw)
			if err != nil {
				return nil, err
			}
			msgs = append(msgs, m)
		}
	default:
		return nil, refuse("input", "must be a string or an array of input items")
	}
	c := map[string]any{"model": *w.Model, "messages": msgs}
	if w.Stream != nil && *w.Stream {
		c["stream"] = true
		c["stream_options"] = map[string]bool{"include_usage": true}
	}
	if w.MaxOutputTokens != nil {
		c["max_completion_tokens"] = *w.MaxOutputTokens
	}
	if len(w.Tools) > 0 {
		c["tools"] = w.Tools // counted as their JSON
	}
	if present(w.Text) {
		c["response_format"] = w.Text
	}
	return json.Marshal(c)
}

// pricedItem is the chat message that counts one input item.
func pricedItem(at string, raw json.RawMessage) (chatMessage, error) {
	if stored(raw) {
		return chatMessage{}, refuse(at, "names a file_id: files stored with the upstream cannot be counted or priced (and this gateway stores none); send the content inline")
	}
	var it struct {
		Type    string          `json:"type"`
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
		Output  json.RawMessage `json:"output"`
	}
	if err := json.Unmarshal(raw, &it); err != nil {
		return chatMessage{}, refuse(at, "must be an input item object")
	}
	switch {
	case it.Type == "" || it.Type == "message":
		return pricedMessage(at, it.Role, it.Content)
	case it.Type == "computer_call_output":
		// Its screenshot is an image, counted as chat counts one.
		var out struct {
			ImageURL string `json:"image_url"`
		}
		_ = json.Unmarshal(it.Output, &out)
		parts := []map[string]any{{"type": "text", "text": string(raw)}}
		if out.ImageURL != "" {
			var rest map[string]json.RawMessage
			_ = json.Unmarshal(raw, &rest)
			delete(rest, "output")
			b, _ := json.Marshal(rest)
			parts = []map[string]any{{"type": "text", "text": string(b)}, {"type": "image_url", "image_url": map[string]string{"url": out.ImageURL}}}
		}
		return chatMessage{Role: "user", Content: parts}, nil
	case passedItems[it.Type]:
		return chatMessage{Role: "user", Content: string(raw)}, nil
	case it.Type == "item_reference":
		return chatMessage{}, refuse(at+".type", "item_reference is not supported: the item is stored with the upstream and cannot be counted or priced; send the item itself")
	}
	return chatMessage{}, refuse(at+".type", "%q items are not supported here", clip(it.Type))
}

// pricedMessage counts a message item: its text parts as text, its images
// as chat counts images, a refusal as text; files are refused.
func pricedMessage(at, role string, content json.RawMessage) (chatMessage, error) {
	role, text, c, err := messageHead(at, role, content)
	switch {
	case err != nil:
		return chatMessage{}, err
	case text != nil:
		return chatMessage{Role: role, Content: *text}, nil
	}
	var parts []struct {
		Type     string  `json:"type"`
		Text     *string `json:"text"`
		Refusal  *string `json:"refusal"`
		ImageURL *string `json:"image_url"`
	}
	if err := json.Unmarshal(c, &parts); err != nil {
		return chatMessage{}, refuse(at+".content", "must be a string or an array of content parts")
	}
	out := make([]map[string]any, 0, len(parts))
	for j, p := range parts {
		pat := fmt.Sprintf("%s.content[%d]", at, j)
		switch p.Type {
		case "input_text", "output_text":
			if p.Text == nil {
				return chatMessage{}, refuse(pat+".text", "is required")
			}
			out = append(out, map[string]any{"type": "text", "text": *p.Text})
		case "refusal":
			if p.Refusal != nil {
				out = append(out, map[string]any{"type": "text", "text": *p.Refusal})
			}
		case "input_image":
			if p.ImageURL == nil || *p.ImageURL == "" {
				return chatMessage{}, refuse(pat, "an input_image needs image_url")
			}
			out = append(out, map[string]any{"type": "image_url", "image_url": map[string]string{"url": *p.ImageURL}})
		case "input_file":
			return chatMessage{}, refuse(pat+".type", "input_file is not supported: a file's tokens cannot be counted before the call, so it cannot be priced")
		default:
			return chatMessage{}, refuse(pat+".type", "%q is not supported: only input_text, output_text, refusal and input_image", clip(p.Type))
		}
	}
	return chatMessage{Role: role, Content: out}, nil
}

// stored reports whether raw names a file_id anywhere, at any depth.
func stored(raw json.RawMessage) bool {
	if !bytes.Contains(raw, []byte(`"file_id"`)) {
		return false
	}
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return true // refused either way
	}
	var walk func(any) bool
	walk = func(v any) bool {
		switch v := v.(type) {
		case map[string]any:
			for k, e := range v {
				if k == "file_id" && e != nil {
					return true
				}
				if walk(e) {
					return true
				}
			}
		case []any:
			return slices.ContainsFunc(v, walk)
		}
		return false
	}
	return walk(v)
}

// Upstream is the body to send upstream: the buyer's, with model set to the
// upstream's name for it and max_output_tokens set to defaultCap when the
// buyer gave none, so the upstream never writes more than was paid for
// (D13), and store false when the buyer said nothing of it: the API's
// default keeps every response on the operator's upstream account, where
// the buyer could never read it again (previous_response_id is refused).
// Every other key is kept as received.
func (f *Forward) Upstream(model string, defaultCap int64) ([]byte, error) {
	out := make(map[string]json.RawMessage, len(f.fields)+1)
	maps.Copy(out, f.fields)
	m, err := json.Marshal(model)
	if err != nil {
		return nil, err
	}
	out["model"] = m
	if f.MaxOutputTokens == nil && defaultCap > 0 {
		out["max_output_tokens"] = json.RawMessage(strconv.FormatInt(defaultCap, 10))
	}
	if _, ok := out["store"]; !ok {
		out["store"] = json.RawMessage("false")
	}
	return json.Marshal(out)
}
