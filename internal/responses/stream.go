package responses

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"
)

// Stream turns a chat-completions stream into the Responses event stream,
// one chat event at a time: response.created and response.in_progress, then
// for each output item its output_item.added, its deltas and its .done
// events, then response.completed (or response.incomplete, or
// response.failed after an in-band error) carrying the whole response with
// its usage and the gateway's annotation. It is not safe for concurrent use.
type Stream struct {
	r    *Request
	resp *Response
	seq  int64
	out  bytes.Buffer

	chatID string
	// msg is the message item once begun; parts its content parts by kind
	// ("output_text", "refusal"), in the order they began.
	msg   *Item
	index map[string]int // content index of each part kind
	text  map[string]*strings.Builder
	// calls are the function call items by the chat tool call index.
	calls  map[int]*callState
	finish string
	usage  *chatUsage
	x      json.RawMessage
	failed json.RawMessage
	ended  bool
}

type callState struct {
	item        Item
	outputIndex int
}

// NewStream returns the translator of r's chat stream.
func (r *Request) NewStream() *Stream {
	return &Stream{r: r, index: map[string]int{}, text: map[string]*strings.Builder{}, calls: map[int]*callState{}}
}

// chatChunk is the part of a chat.completion.chunk the translation reads.
type chatChunk struct {
	ID      string `json:"id"`
	Created int64  `json:"created"`
	Choices []struct {
		Delta struct {
			Content   *string `json:"content"`
			Refusal   *string `json:"refusal"`
			ToolCalls []struct {
				Index int `json:"index"`
				chatToolCall
			} `json:"tool_calls"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *chatUsage      `json:"usage"`
	X     json.RawMessage `json:"x_llm4agents"`
	Error json.RawMessage `json:"error"`
}

// Event takes the data of one chat event ("[DONE]" included) and returns the
// Responses events it becomes, as server-sent events; nothing once the
// stream has ended. A chunk that is not JSON is an error.
func (s *Stream) Event(data []byte) ([]byte, error) {
	s.out.Reset()
	if s.ended {
		return nil, nil
	}
	if string(bytes.TrimSpace(data)) == "[DONE]" {
		s.end()
		return s.flush(), nil
	}
	var c chatChunk
	if err := json.Unmarshal(data, &c); err != nil {
		return nil, fmt.Errorf("responses: a chat stream event is not JSON: %w", err)
	}
	if present(c.Error) {
		s.failed = c.Error
		return nil, nil
	}
	s.begin(c.ID, c.Created)
	if len(c.Choices) > 0 {
		ch := c.Choices[0]
		d := ch.Delta
		if d.Content != nil && *d.Content != "" {
			s.delta("output_text", *d.Content)
		}
		if d.Refusal != nil && *d.Refusal != "" {
			s.delta("refusal", *d.Refusal)
		}
		for _, tc := range d.ToolCalls {
			s.callDelta(tc.Index, tc.ID, tc.Function.Name, tc.Function.Arguments)
		}
		if ch.FinishReason != nil && *ch.FinishReason != "" {
			s.finish = *ch.FinishReason
		}
	}
	if c.Usage != nil {
		s.usage = c.Usage
	}
	if present(c.X) {
		s.x = c.X
	}
	return s.flush(), nil
}

func (s *Stream) flush() []byte {
	if s.out.Len() == 0 {
		return nil
	}
	return bytes.Clone(s.out.Bytes())
}

// emit writes one event of type typ with fields.
func (s *Stream) emit(typ string, fields map[string]any) {
	fields["type"] = typ
	fields["sequence_number"] = s.seq
	s.seq++
	b, err := json.Marshal(fields)
	if err != nil { // cannot happen: the fields are ours
		return
	}
	fmt.Fprintf(&s.out, "event: %s\ndata: %s\n\n", typ, b)
}

// begin emits response.created and response.in_progress once.
func (s *Stream) begin(chatID string, created int64) {
	if s.resp != nil {
		return
	}
	if created == 0 {
		created = time.Now().Unix()
	}
	s.chatID = chatID
	s.resp = s.r.newResponse(chatID, created)
	s.emit("response.created", map[string]any{"response": s.resp})
	s.emit("response.in_progress", map[string]any{"response": s.resp})
}

// delta appends text to the message's part of kind, beginning the message
// and the part as needed.
func (s *Stream) delta(kind, text string) {
	if s.msg == nil {
		s.msg = &Item{ID: "msg_" + derive(s.chatID, "msg"), Type: "message", Status: "in_progress", Role: "assistant", Content: []ContentPart{}}
		s.resp.Output = append(s.resp.Output, *s.msg)
		s.index["msg"] = len(s.resp.Output) - 1
		s.emit("response.output_item.added", map[string]any{"output_index": s.index["msg"], "item": s.msg})
	}
	b, ok := s.text[kind]
	if !ok {
		b = &strings.Builder{}
		s.text[kind] = b
		s.index[kind] = len(s.msg.Content)
		part := ContentPart{Type: kind, Annotations: []json.RawMessage{}}
		s.msg.Content = append(s.msg.Content, part)
		s.emit("response.content_part.added", map[string]any{
			"item_id": s.msg.ID, "output_index": s.index["msg"], "content_index": s.index[kind], "part": part})
	}
	b.WriteString(text)
	ev := map[string]any{"item_id": s.msg.ID, "output_index": s.index["msg"], "content_index": s.index[kind], "delta": text}
	if kind == "output_text" {
		ev["logprobs"] = []any{}
		s.emit("response.output_text.delta", ev)
		return
	}
	s.emit("response.refusal.delta", ev)
}

// callDelta adds to the function call of chat tool call index.
func (s *Stream) callDelta(index int, id, name, args string) {
	c, ok := s.calls[index]
	if !ok {
		c = &callState{item: Item{
			ID: "fc_" + derive(s.chatID, fmt.Sprint("fc", index)), Type: "function_call", Status: "in_progress",
			CallID: id, Name: name,
		}}
		c.outputIndex = len(s.resp.Output)
		s.resp.Output = append(s.resp.Output, c.item)
		s.calls[index] = c
		s.emit("response.output_item.added", map[string]any{"output_index": c.outputIndex, "item": c.item})
	}
	if c.item.CallID == "" {
		c.item.CallID = id
	}
	if c.item.Name == "" {
		c.item.Name = name
	}
	if args != "" {
		c.item.Arguments += args
		s.emit("response.function_call_arguments.delta", map[string]any{
			"item_id": c.item.ID, "output_index": c.outputIndex, "delta": args})
	}
}

// end closes every open item and emits the final event.
func (s *Stream) end() {
	s.ended = true
	s.begin(s.chatID, 0)
	status := "completed"
	if s.failed != nil || s.finish == "length" || s.finish == "content_filter" {
		status = "incomplete"
	}
	if s.msg != nil {
		kinds := make([]string, 0, len(s.text))
		for k := range s.text {
			kinds = append(kinds, k)
		}
		sort.Slice(kinds, func(i, j int) bool { return s.index[kinds[i]] < s.index[kinds[j]] })
		for _, kind := range kinds {
			text := s.text[kind].String()
			part := &s.msg.Content[s.index[kind]]
			ev := map[string]any{"item_id": s.msg.ID, "output_index": s.index["msg"], "content_index": s.index[kind]}
			if kind == "output_text" {
				part.Text = text
				ev["text"], ev["logprobs"] = text, []any{}
				s.emit("response.output_text.done", ev)
			} else {
				part.Refusal = text
				ev["refusal"] = text
				s.emit("response.refusal.done", ev)
			}
			s.emit("response.content_part.done", map[string]any{
				"item_id": s.msg.ID, "output_index": s.index["msg"], "content_index": s.index[kind], "part": *part})
		}
		s.msg.Status = status
		s.resp.Output[s.index["msg"]] = *s.msg
		s.emit("response.output_item.done", map[string]any{"output_index": s.index["msg"], "item": s.msg})
	}
	indexes := make([]int, 0, len(s.calls))
	for i := range s.calls {
		indexes = append(indexes, i)
	}
	sort.Ints(indexes)
	for _, i := range indexes {
		c := s.calls[i]
		c.item.Status = status
		s.resp.Output[c.outputIndex] = c.item
		s.emit("response.function_call_arguments.done", map[string]any{
			"item_id": c.item.ID, "output_index": c.outputIndex, "arguments": c.item.Arguments})
		s.emit("response.output_item.done", map[string]any{"output_index": c.outputIndex, "item": c.item})
	}
	s.resp.Usage = s.usage.responses()
	s.resp.X = s.x
	if s.failed != nil {
		s.resp.Status, s.resp.Error = "failed", failure(s.failed)
		s.emit("response.failed", map[string]any{"response": s.resp})
		return
	}
	s.resp.finish(s.finish)
	if s.resp.Status == "incomplete" {
		s.emit("response.incomplete", map[string]any{"response": s.resp})
		return
	}
	s.emit("response.completed", map[string]any{"response": s.resp})
}

// failure is the response's error object from a chat in-band error.
func failure(raw json.RawMessage) json.RawMessage {
	var e struct {
		Code    any    `json:"code"`
		Message string `json:"message"`
	}
	_ = json.Unmarshal(raw, &e)
	code := "server_error"
	if c, ok := e.Code.(string); ok && c != "" {
		code = c
	}
	b, _ := json.Marshal(map[string]string{"code": code, "message": e.Message})
	return b
}
