package responses

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Response is the Responses API's response object, as this gateway fills
// it in. Fields it has no value for are there, null or defaulted, as OpenAI
// sends them, so that strict clients parse it.
type Response struct {
	ID                 string            `json:"id"`
	Object             string            `json:"object"` // "response"
	CreatedAt          int64             `json:"created_at"`
	Status             string            `json:"status"` // in_progress, completed, incomplete
	Error              json.RawMessage   `json:"error"`
	IncompleteDetails  *incomplete       `json:"incomplete_details"`
	Instructions       *string           `json:"instructions"`
	MaxOutputTokens    *int64            `json:"max_output_tokens"`
	Model              string            `json:"model"`
	Output             []Item            `json:"output"`
	ParallelToolCalls  bool              `json:"parallel_tool_calls"`
	PreviousResponseID *string           `json:"previous_response_id"`
	Reasoning          reasoningOut      `json:"reasoning"`
	Store              bool              `json:"store"`
	Temperature        float64           `json:"temperature"`
	Text               json.RawMessage   `json:"text"`
	ToolChoice         json.RawMessage   `json:"tool_choice"`
	Tools              []json.RawMessage `json:"tools"`
	TopP               float64           `json:"top_p"`
	Truncation         string            `json:"truncation"`
	Usage              *Usage            `json:"usage"`
	User               *string           `json:"user"`
	Metadata           json.RawMessage   `json:"metadata"`
	// X is the gateway's x_llm4agents annotation of the chat answer (what
	// was charged, the receipt), carried over as is.
	X json.RawMessage `json:"x_llm4agents,omitempty"`
}

type incomplete struct {
	Reason string `json:"reason"`
}

type reasoningOut struct {
	Effort  *string `json:"effort"`
	Summary *string `json:"summary"`
}

// Item is one output item: a message or a function call.
type Item struct {
	ID      string        `json:"id"`
	Type    string        `json:"type"` // message, function_call
	Status  string        `json:"status"`
	Role    string        `json:"role,omitempty"`
	Content []ContentPart `json:"content,omitempty"`
	// A function call's.
	CallID    string `json:"call_id,omitempty"`
	Name      string `json:"name,omitempty"`
	Arguments string `json:"arguments,omitempty"`
}

// ContentPart is a part of a message: output_text or refusal.
type ContentPart struct {
	Type        string            `json:"type"`
	Text        string            `json:"text,omitempty"`
	Refusal     string            `json:"refusal,omitempty"`
	Annotations []json.RawMessage `json:"annotations"`
}

// Usage is the Responses API's usage.
type Usage struct {
	InputTokens         int64        `json:"input_tokens"`
	InputTokensDetails  inputDetail  `json:"input_tokens_details"`
	OutputTokens        int64        `json:"output_tokens"`
	OutputTokensDetails outputDetail `json:"output_tokens_details"`
	TotalTokens         int64        `json:"total_tokens"`
}

type inputDetail struct {
	CachedTokens int64 `json:"cached_tokens"`
}

type outputDetail struct {
	ReasoningTokens int64 `json:"reasoning_tokens"`
}

// chatUsage is the chat usage the translation reads.
type chatUsage struct {
	PromptTokens        int64 `json:"prompt_tokens"`
	CompletionTokens    int64 `json:"completion_tokens"`
	TotalTokens         int64 `json:"total_tokens"`
	PromptTokensDetails *struct {
		CachedTokens int64 `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
	CompletionTokensDetails *struct {
		ReasoningTokens int64 `json:"reasoning_tokens"`
	} `json:"completion_tokens_details"`
}

func (u *chatUsage) responses() *Usage {
	if u == nil {
		return nil
	}
	out := &Usage{InputTokens: u.PromptTokens, OutputTokens: u.CompletionTokens, TotalTokens: u.TotalTokens}
	if out.TotalTokens == 0 {
		out.TotalTokens = u.PromptTokens + u.CompletionTokens
	}
	if d := u.PromptTokensDetails; d != nil {
		out.InputTokensDetails.CachedTokens = d.CachedTokens
	}
	if d := u.CompletionTokensDetails; d != nil {
		out.OutputTokensDetails.ReasoningTokens = d.ReasoningTokens
	}
	return out
}

// newResponse is the response object of r for the chat answer id, created at
// created, before any output.
func (r *Request) newResponse(chatID string, created int64) *Response {
	resp := &Response{
		ID: "resp_" + derive(chatID, "resp"), Object: "response", CreatedAt: created, Status: "in_progress",
		Error: json.RawMessage("null"), Instructions: r.Instructions, MaxOutputTokens: r.MaxOutputTokens,
		Model: r.Model, Output: []Item{}, ParallelToolCalls: r.ParallelToolCalls == nil || *r.ParallelToolCalls,
		Reasoning: reasoningOut{Effort: r.ReasoningEffort}, Temperature: 1, TopP: 1, Truncation: "disabled",
		Text: json.RawMessage(`{"format":{"type":"text"}}`), ToolChoice: json.RawMessage(`"auto"`),
		Tools: r.Tools, User: r.User, Metadata: json.RawMessage("{}"),
	}
	if r.Temperature != nil {
		resp.Temperature = *r.Temperature
	}
	if r.TopP != nil {
		resp.TopP = *r.TopP
	}
	if present(r.Text) {
		resp.Text = r.Text
	}
	if present(r.ToolChoice) {
		resp.ToolChoice = r.ToolChoice
	}
	if present(r.Metadata) {
		resp.Metadata = r.Metadata
	}
	if resp.Tools == nil {
		resp.Tools = []json.RawMessage{}
	}
	return resp
}

// derive is a stable id suffix for what of the chat answer id: a replay of a
// paid answer gets the same ids again.
func derive(chatID, what string) string {
	sum := sha256.Sum256([]byte(what + "\x00" + chatID))
	return hex.EncodeToString(sum[:24])
}

// finish sets the status from the chat finish reason.
func (resp *Response) finish(reason string) {
	switch reason {
	case "length":
		resp.Status, resp.IncompleteDetails = "incomplete", &incomplete{Reason: "max_output_tokens"}
	case "content_filter":
		resp.Status, resp.IncompleteDetails = "incomplete", &incomplete{Reason: "content_filter"}
	default:
		resp.Status = "completed"
	}
}

// chatCompletion is the part of a chat.completion the translation reads.
type chatCompletion struct {
	ID      string `json:"id"`
	Created int64  `json:"created"`
	Choices []struct {
		Message struct {
			Content   *string        `json:"content"`
			Refusal   *string        `json:"refusal"`
			ToolCalls []chatToolCall `json:"tool_calls"`
		} `json:"message"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage *chatUsage      `json:"usage"`
	X     json.RawMessage `json:"x_llm4agents"`
}

// Completion turns a chat.completion body into the Response of r. Only the
// first choice is read: a Responses call has one.
func (r *Request) Completion(body []byte) ([]byte, error) {
	var c chatCompletion
	if err := json.Unmarshal(body, &c); err != nil {
		return nil, fmt.Errorf("responses: the chat answer is not a chat.completion: %w", err)
	}
	if len(c.Choices) == 0 {
		return nil, errors.New("responses: the chat answer has no choice")
	}
	if c.Created == 0 {
		c.Created = time.Now().Unix()
	}
	resp := r.newResponse(c.ID, c.Created)
	ch := c.Choices[0]
	m := ch.Message
	var parts []ContentPart
	if m.Content != nil && *m.Content != "" {
		parts = append(parts, ContentPart{Type: "output_text", Text: *m.Content, Annotations: []json.RawMessage{}})
	}
	if m.Refusal != nil && *m.Refusal != "" {
		parts = append(parts, ContentPart{Type: "refusal", Refusal: *m.Refusal, Annotations: []json.RawMessage{}})
	}
	if len(parts) > 0 {
		resp.Output = append(resp.Output, Item{ID: "msg_" + derive(c.ID, "msg"), Type: "message", Status: "completed", Role: "assistant", Content: parts})
	}
	for i, tc := range m.ToolCalls {
		resp.Output = append(resp.Output, Item{
			ID: "fc_" + derive(c.ID, fmt.Sprint("fc", i)), Type: "function_call", Status: "completed",
			CallID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments,
		})
	}
	resp.finish(ch.FinishReason)
	if resp.Status == "incomplete" {
		for i := range resp.Output {
			resp.Output[i].Status = "incomplete"
		}
	}
	resp.Usage = c.Usage.responses()
	resp.X = c.X
	return json.Marshal(resp)
}

// outputText joins the text of a response's message items (tests, logs).
func (resp *Response) outputText() string {
	var b strings.Builder
	for _, it := range resp.Output {
		for _, p := range it.Content {
			b.WriteString(p.Text)
		}
	}
	return b.String()
}
