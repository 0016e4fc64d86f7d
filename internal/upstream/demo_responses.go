package upstream

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"

	"github.com/llm4agents/llm4agents/internal/chat"
	"github.com/llm4agents/llm4agents/internal/responses"
)

// Respond implements the Responses API for the demo model: the request is
// read as an upstream that speaks the API reads it (responses.ParseForward:
// what the gateway passes through, the demo takes), answered as the chat
// completion of the same conversation, and written as the Response object
// OpenAI documents, usage in input_tokens and output_tokens.
func (d *Demo) Respond(ctx context.Context, body []byte) (*Completion, error) {
	f, err := d.forward(body)
	if err != nil {
		return nil, err
	}
	c, err := d.Complete(ctx, f.Chat())
	if err != nil {
		return nil, err
	}
	out, err := f.Completion(c.Body)
	if err != nil {
		return nil, upstreamFailed(err)
	}
	return &Completion{Body: out, Usage: c.Usage, UsageReported: true, Header: http.Header{}}, nil
}

// StreamResponses implements the Responses API's stream for the demo model:
// response.created, response.in_progress, the output item's events with
// its text deltas, and response.completed (or response.incomplete) with the
// whole response and its usage, as OpenAI sends them.
func (d *Demo) StreamResponses(ctx context.Context, body []byte) (Stream, error) {
	f, err := d.forward(body)
	if err != nil {
		return nil, err
	}
	st, err := d.Stream(ctx, f.Chat())
	if err != nil {
		return nil, err
	}
	return &demoResponsesStream{chat: st, tr: f.NewStream()}, nil
}

// forward reads a Responses body; a refusal is the 400 OpenAI would send.
func (d *Demo) forward(body []byte) (*responses.Forward, error) {
	f, err := responses.ParseForward(body)
	if err != nil {
		e := &Error{Status: http.StatusBadRequest, Type: "invalid_request_error", Code: "invalid_request", Message: err.Error(), Err: err}
		if re, ok := errors.AsType[*responses.Error](err); ok {
			e.Param = re.Param
		}
		return nil, e
	}
	return f, nil
}

// demoResponsesStream is the demo's chat stream turned into Responses events
// as they come.
type demoResponsesStream struct {
	chat  Stream
	tr    *responses.Stream
	queue [][]byte
	ended bool
}

func (s *demoResponsesStream) Next() ([]byte, error) {
	for len(s.queue) == 0 {
		if s.ended {
			return nil, io.EOF
		}
		ev, err := s.chat.Next()
		switch {
		case errors.Is(err, io.EOF):
			s.ended = true
			ev = []byte("[DONE]")
		case err != nil:
			return nil, err
		}
		out, err := s.tr.Event(ev)
		if err != nil {
			return nil, badResponse(err)
		}
		s.queue = append(s.queue, eventData(out)...)
	}
	data := s.queue[0]
	s.queue = s.queue[1:]
	return data, nil
}

// eventData splits server-sent events into the data of each.
func eventData(text []byte) [][]byte {
	var out [][]byte
	for ev := range bytes.SplitSeq(text, []byte("\n\n")) {
		for line := range bytes.Lines(ev) {
			if data, ok := bytes.CutPrefix(bytes.TrimRight(line, "\n"), []byte("data: ")); ok {
				out = append(out, bytes.Clone(data))
			}
		}
	}
	return out
}

func (s *demoResponsesStream) Usage() (chat.Usage, bool) { return s.chat.Usage() }

func (s *demoResponsesStream) Close() error { return s.chat.Close() }

var (
	_ responsesAPI = (*Demo)(nil)
	_ Stream       = (*demoResponsesStream)(nil)
)
