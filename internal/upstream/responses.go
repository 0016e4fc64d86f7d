package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/llm4agents/llm4agents/internal/responses"
)

// Responder is a Provider whose upstream also speaks the OpenAI Responses
// API (POST /responses): the gateway passes a /v1/responses call through to
// it, instead of translating it into a chat completion. Only WithResponses
// and a Fallback of Responders make one (the interface is sealed), so an
// upstream speaks the Responses API only when it is configured to.
//
// Both calls take the buyer's Responses body, already rewritten by the
// gateway (responses.Forward.Upstream: model, max_output_tokens). Errors
// are *Error, mapped as for Provider.
type Responder interface {
	Provider
	// Respond makes a non-streaming call. The Completion's Body is the
	// Response object as the upstream sent it; its Usage is the response's
	// usage (input_tokens as prompt tokens, output_tokens as completion
	// tokens). A body that is not a Response object is an
	// upstream_bad_response; a failed response an upstream_error.
	Respond(ctx context.Context, body []byte) (*Completion, error)
	// StreamResponses makes a streaming call. The Stream's Next returns the
	// data of each event (a JSON object with its type; the SSE event name is
	// that type), and io.EOF after the final event (response.completed,
	// response.incomplete or response.failed), whose response's usage
	// Usage returns. An "error" event is an upstream_error; a stream that
	// ends before its final event an upstream_bad_response wrapping
	// io.ErrUnexpectedEOF.
	StreamResponses(ctx context.Context, body []byte) (Stream, error)

	speaksResponses()
}

// responsesAPI is the Responses API of a provider that can speak it: OpenAI
// and Demo.
type responsesAPI interface {
	Respond(ctx context.Context, body []byte) (*Completion, error)
	StreamResponses(ctx context.Context, body []byte) (Stream, error)
}

// WithResponses returns p as a Responder: configured to speak the Responses
// API. p must have it (OpenAI and Demo do). The Responder is a chat Provider
// as p is, but not an Embedder: it serves chat models.
func WithResponses(p Provider) (Responder, error) {
	api, ok := p.(responsesAPI)
	if !ok {
		return nil, fmt.Errorf("upstream: a %T cannot speak the Responses API", p)
	}
	return &responder{Provider: p, api: api}, nil
}

// responder is a Provider configured to speak the Responses API.
type responder struct {
	Provider
	api responsesAPI
}

func (r *responder) Respond(ctx context.Context, body []byte) (*Completion, error) {
	return r.api.Respond(ctx, body)
}

func (r *responder) StreamResponses(ctx context.Context, body []byte) (Stream, error) {
	return r.api.StreamResponses(ctx, body)
}

func (*responder) speaksResponses() {}

// Respond implements the Responses API: POST {BaseURL}/responses, bounded by
// the Timeout like Complete. A body without usage is accepted with
// UsageReported false.
func (o *OpenAI) Respond(ctx context.Context, body []byte) (*Completion, error) {
	ctx, cancel := context.WithTimeoutCause(ctx, o.timeout, errTimeout)
	defer cancel()
	b, h, err := o.post(ctx, o.responsesEndpoint(), body)
	if err != nil {
		return nil, err
	}
	u, err := responses.ResponseUsage(b)
	if err != nil {
		if _, isErr := parseErrorBody(b); isErr {
			return nil, upstreamFailed(fmt.Errorf("upstream answered 200 with an error: %s", o.snippet(b)))
		}
		return nil, badResponse(fmt.Errorf("%w: %s", err, o.snippet(b)))
	}
	if status := responseStatus(b); status == "failed" || status == "queued" || status == "in_progress" || status == "cancelled" {
		return nil, upstreamFailed(fmt.Errorf("upstream answered 200 with a response %s: %s", status, o.snippet(b)))
	}
	out := &Completion{Body: b, Header: safeHeader(h)}
	if u == nil {
		o.log.Warn("upstream response has no usage", "request_id", h.Get("X-Request-Id"))
		return out, nil
	}
	out.Usage, out.UsageReported = *u, true
	return out, nil
}

// StreamResponses implements the Responses API's stream: POST
// {BaseURL}/responses with stream true, bounded as Stream is.
func (o *OpenAI) StreamResponses(ctx context.Context, body []byte) (Stream, error) {
	return o.stream(ctx, o.responsesEndpoint(), body, true)
}

// responsesEndpoint is {BaseURL}/responses.
func (o *OpenAI) responsesEndpoint() string {
	return strings.TrimSuffix(o.endpoint, "/chat/completions") + "/responses"
}

// responseStatus is the status of a Response object, "" when it has none.
func responseStatus(b []byte) string {
	var r struct {
		Status string `json:"status"`
	}
	_ = json.Unmarshal(b, &r)
	return r.Status
}

// responsesEvent checks one event of a Responses stream: an "error" event
// is an upstream_error, an event that is not a typed JSON object an
// upstream_bad_response; the final event's usage is kept and ends the
// stream.
func (s *eventStream) responsesEvent(data []byte) ([]byte, error) {
	ev, err := responses.ReadEvent(data)
	if err != nil {
		return nil, badResponse(fmt.Errorf("%w: %s", err, s.snippet(data)))
	}
	switch {
	case ev.Type == "error":
		return nil, upstreamFailed(fmt.Errorf("error event in the stream: %s", s.snippet(data)))
	case ev.Final():
		s.final = true
		if ev.Usage != nil {
			s.usage, s.hasUsage = *ev.Usage, true
		} else {
			s.log.Warn("upstream response stream ended without usage", "request_id", s.requestID)
		}
	}
	return data, nil
}

// respondFallback is a Fallback whose every provider speaks the Responses
// API: the same routes, health and order serve both APIs.
type respondFallback struct{ *Fallback }

// Respond implements Responder.
func (f *respondFallback) Respond(ctx context.Context, body []byte) (*Completion, error) {
	return try(ctx, f.Fallback, body, func(p Provider, b []byte) (*Completion, error) {
		return p.(Responder).Respond(ctx, b)
	})
}

// StreamResponses implements Responder: a provider is replaced only while
// its stream has not started, as for Stream.
func (f *respondFallback) StreamResponses(ctx context.Context, body []byte) (Stream, error) {
	return try(ctx, f.Fallback, body, func(p Provider, b []byte) (Stream, error) {
		return startStream(ctx, streamResponsesOf(p), b)
	})
}

func (*respondFallback) speaksResponses() {}

// streamResponsesOf is p's StreamResponses as a Provider's Stream, for
// startStream.
func streamResponsesOf(p Provider) Provider {
	return streamer(p.(Responder).StreamResponses)
}

// streamer is a stream function as a Provider; only Stream is called.
type streamer func(ctx context.Context, body []byte) (Stream, error)

func (s streamer) Stream(ctx context.Context, body []byte) (Stream, error) { return s(ctx, body) }

func (streamer) Complete(context.Context, []byte) (*Completion, error) {
	return nil, upstreamFailed(errors.New("upstream: a streamer does not complete"))
}

var (
	_ Responder    = (*responder)(nil)
	_ Responder    = (*respondFallback)(nil)
	_ responsesAPI = (*OpenAI)(nil)
)
