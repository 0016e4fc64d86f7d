// Package upstream is the gateway's view of an LLM provider: a Provider takes an
// already-rewritten chat-completions body (chat.Request.Upstream) and returns a
// completion or a stream of chunks, with the usage the provider reported, or an
// *Error that says what the client should be told. An Embedder does the same
// for embeddings bodies, and a Responder (an upstream configured to speak the
// Responses API, WithResponses) for Responses bodies passed through.
//
// Two providers live here: OpenAI, any OpenAI-compatible HTTP API by base URL and
// key, and Demo, an in-process deterministic model for the embedded default and
// for tests. The gateway passes a Provider only the body, never the client's
// request or its headers, so nothing the client sent besides the body
// (payment headers, cookies, its own Authorization; docs/DESIGN.md D11) can
// reach an upstream.
package upstream

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/llm4agents/llm4agents/internal/chat"
)

// Provider is one upstream. Both calls take the upstream body as JSON bytes,
// already rewritten by the gateway (model name, output cap, include_usage).
//
// Every error either call returns, and every error of a Stream other than
// io.EOF, is an *Error.
type Provider interface {
	// Complete makes a non-streaming call.
	Complete(ctx context.Context, body []byte) (*Completion, error)
	// Stream makes a streaming call. It returns once the upstream answered
	// with status 200 and its headers, before any event; an upstream that
	// refuses gets an *Error here, so a Stream never starts with an error the
	// upstream announced. Cancelling ctx ends the stream.
	Stream(ctx context.Context, body []byte) (Stream, error)
}

// Embedder is an upstream that also serves embeddings (POST /v1/embeddings).
// It is separate from Provider because not every OpenAI-compatible server
// has the route, and a gateway sells embeddings only from upstreams that do.
type Embedder interface {
	// Embed makes an embeddings call with the body as the gateway rewrote
	// it (embeddings.Request.Upstream). The answer is a Completion whose
	// Body is the embeddings list and whose Usage counts input tokens only.
	// Every error it returns is an *Error.
	Embed(ctx context.Context, body []byte) (*Completion, error)
}

// Completion is a non-streamed answer.
type Completion struct {
	// Body is the chat.completion JSON as the upstream sent it.
	Body []byte
	// Usage is the usage the upstream reported; zero when UsageReported is false.
	Usage chat.Usage
	// UsageReported says whether the body carried a usage object. A missing
	// usage is tolerated (the exact-payment price is the quote, not the usage)
	// and logged; credit captures (D16) should treat it as unknown.
	UsageReported bool
	// Header holds the few upstream response headers that are safe to pass on
	// or log: X-Request-Id only. Never cookies or rate-limit details of the
	// operator's account.
	Header http.Header
}

// Stream is a streamed answer, one chat.completion.chunk at a time. Next and
// Usage are not safe for concurrent use; Close may be called from any
// goroutine, at any time, to abort a Next in progress.
type Stream interface {
	// Next returns the data of the next server-sent event: one
	// chat.completion.chunk JSON object, the bytes as the upstream sent them,
	// owned by the caller. It returns io.EOF after the upstream's "[DONE]".
	// A stream that ends without "[DONE]" returns an *Error wrapping
	// io.ErrUnexpectedEOF; the caller decides what a truncated stream is worth.
	Next() ([]byte, error)
	// Usage returns the usage of the last chunk that carried one, and whether
	// any did so far. OpenAI sends it in the last chunk when
	// stream_options.include_usage is set, which the gateway always sets.
	Usage() (chat.Usage, bool)
	// Close cancels the upstream request and releases the connection; every
	// Stream must be closed. After io.EOF it first reads what little follows
	// "[DONE]" (at most 100ms), so the connection can be reused. It is
	// idempotent and always returns nil.
	Close() error
}

// Codes of the errors this package makes itself. An upstream 4xx that is passed
// through keeps the upstream's own type and code instead.
const (
	// CodeUnavailable: the upstream could not be reached (DNS, connection
	// refused, TLS). Status 502.
	CodeUnavailable = "upstream_unavailable"
	// CodeTimeout: the upstream did not answer within the timeout, or a stream
	// went silent past the idle timeout. Status 504.
	CodeTimeout = "upstream_timeout"
	// CodeError: the upstream answered with an error that is not the client's
	// to see: a 5xx, a refusal of the operator's own key (401, 403), an
	// exhausted account (402, 429 insufficient_quota), any other status.
	// Status 502 and a generic message.
	CodeError = "upstream_error"
	// CodeBadResponse: the upstream answered 200 with something that is not a
	// chat completion: bad JSON, broken SSE, an oversized body or event, a
	// stream cut before "[DONE]". Status 502.
	CodeBadResponse = "upstream_bad_response"
	// CodeCanceled: the caller's context was cancelled or the stream closed;
	// nobody is waiting for an answer. Status 499 (the client went away), never
	// meant to be written to a connection that is still open.
	CodeCanceled = "request_canceled"
)

// TypeUpstream is the OpenAI error type of every error this package makes
// itself; a passed-through upstream 4xx keeps its own type.
const TypeUpstream = "upstream_error"

// StatusClientClosed is the status of a CodeCanceled error (nginx's 499).
const StatusClientClosed = 499

// Error is what the gateway maps to a client error. Status, Type, Code, Param
// and Message are safe to send to the client as the OpenAI error JSON; Err holds
// the detail for the log (an upstream 5xx body, a transport error) and must not
// be sent. Error() includes Err, so log the error and send the fields.
//
// Mapping:
//   - unreachable, or the connection closed before any answer -> 502
//     upstream_unavailable;
//   - no answer within the timeout, a stream idle past its idle timeout, or the
//     caller's deadline -> 504 upstream_timeout;
//   - upstream 400, 404, 413, 422 with an OpenAI error body -> the same status
//     with the upstream's type, code, param and message (the same statuses
//     without one are a misconfigured base URL or a proxy: 502 upstream_error);
//   - upstream 429 -> 429 with its type, code and Retry-After and a generic
//     message (the upstream's names the operator's organization and limits),
//     but 429 insufficient_quota (the operator's account is empty) -> 502;
//   - upstream 401, 402, 403, 5xx, 3xx and any other status, a 200 whose body
//     is an error, an error event in a stream -> 502 upstream_error with a
//     generic message: the client's credentials and credit are not the
//     upstream's, and the detail stays in Err;
//   - bad JSON, broken SSE, oversized body or event, a body or stream cut
//     short -> 502 upstream_bad_response;
//   - the caller's context cancelled or the stream closed -> 499
//     request_canceled.
type Error struct {
	Status  int
	Type    string
	Code    string
	Param   string // the request field the upstream blamed, if any
	Message string
	// RetryAfter is the upstream's Retry-After on a passed-through 429, zero
	// when absent.
	RetryAfter time.Duration
	Err        error
}

func (e *Error) Error() string {
	s := fmt.Sprintf("upstream %d %s: %s", e.Status, e.Code, e.Message)
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

func (e *Error) Unwrap() error { return e.Err }

func newError(status int, code, msg string, err error) *Error {
	return &Error{Status: status, Type: TypeUpstream, Code: code, Message: msg, Err: err}
}

func unavailable(err error) *Error {
	return newError(http.StatusBadGateway, CodeUnavailable, "the upstream provider could not be reached", err)
}

func timeout(err error) *Error {
	return newError(http.StatusGatewayTimeout, CodeTimeout, "the upstream provider did not answer in time", err)
}

func upstreamFailed(err error) *Error {
	return newError(http.StatusBadGateway, CodeError, "the upstream provider failed to answer", err)
}

func badResponse(err error) *Error {
	return newError(http.StatusBadGateway, CodeBadResponse, "the upstream provider sent an invalid response", err)
}

func canceled(err error) *Error {
	return newError(StatusClientClosed, CodeCanceled, "the request was canceled", err)
}
