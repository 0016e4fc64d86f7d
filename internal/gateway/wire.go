package gateway

import (
	"bytes"
	"context"
	"encoding/json"

	"github.com/llm4agents/llm4agents/internal/chat"
	"github.com/llm4agents/llm4agents/internal/responses"
	"github.com/llm4agents/llm4agents/x402"
)

// wire is what tells a chat completion (or embeddings) answer from a
// passed-through Responses answer where the one payment flow reads or
// annotates it: the flow (paid, serveAnswer, render) is the same, only
// where the usage stands and where the annotation goes differ.
type wire struct {
	// usage is the usage a JSON answer body reports, nil when none.
	usage func(body []byte) *chat.Usage
	// eventUsage is the usage one recorded event of a stream's text
	// reports, nil when none.
	eventUsage func(ev []byte) *chat.Usage
	// annotateSSE annotates a recorded stream's text as the live stream
	// was annotated.
	annotateSSE func(s *Server, ctx context.Context, text []byte, q *quote, sr *x402.SettleResponse) []byte
	// text is the output of a JSON answer body, counted when the upstream
	// reports no usage.
	text func(body []byte) string
}

// chatWire is the wire of chat completions and embeddings: the usage is the
// body's (or its usage chunk's) usage field, and the annotation goes at the
// top level of the body or of the usage chunk.
var chatWire = wire{
	usage: completionUsage,
	eventUsage: func(ev []byte) *chat.Usage {
		if data, ok := bytes.CutPrefix(ev, []byte("data: ")); ok {
			return usageOf(data)
		}
		return nil
	},
	annotateSSE: (*Server).annotateSSE,
	text:        completionText,
}

// responsesWire is the wire of a passed-through Responses call: the usage
// is read in the Responses API's names, from the Response or its final
// event, and the annotation goes into the response object.
var responsesWire = wire{
	usage: func(body []byte) *chat.Usage {
		u, _ := responses.ResponseUsage(body)
		return u
	},
	eventUsage: func(ev []byte) *chat.Usage {
		if data, ok := eventData(ev); ok {
			if e, err := responses.ReadEvent(data); err == nil {
				return e.Usage
			}
		}
		return nil
	},
	annotateSSE: (*Server).annotateForwardSSE,
	text:        responses.OutputText,
}

// completionUsage is the usage field of a chat completion or embeddings
// body, nil when it has none or is not JSON.
func completionUsage(body []byte) *chat.Usage {
	var c struct {
		Usage *chat.Usage `json:"usage"`
	}
	if json.Unmarshal(body, &c) != nil {
		return nil
	}
	return c.Usage
}
