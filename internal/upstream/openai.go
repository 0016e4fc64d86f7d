package upstream

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/llm4agents/llm4agents/internal/chat"
)

const (
	defaultTimeout       = 120 * time.Second
	defaultMaxBodyBytes  = 32 << 20
	defaultMaxEventBytes = 1 << 20
	defaultIdleConns     = 64

	// maxErrorBodyBytes caps what is read of an upstream error body.
	maxErrorBodyBytes = 64 << 10
	// logSnippetBytes caps how much of an upstream body an error keeps for the log.
	logSnippetBytes = 512
	// Close after "[DONE]" reads the rest of the body (normally nothing) for up
	// to drainBytes and drainTimeout, so the connection goes back to the pool.
	drainBytes   = 64 << 10
	drainTimeout = 100 * time.Millisecond

	userAgent = "llm4agents"
)

// Causes of a request's cancellation, told apart by context.Cause.
var (
	errTimeout     = errors.New("no answer within the upstream timeout")
	errIdleTimeout = errors.New("no event within the stream idle timeout")
	errDrained     = errors.New("stream drained")
	errTooLarge    = errors.New("response body over the size limit")
)

// OpenAIConfig configures an OpenAI provider. Zero values select the defaults
// given in the comments.
type OpenAIConfig struct {
	// BaseURL is the API root that "/chat/completions" is appended to, such as
	// "https://api.openai.com/v1". Required; http or https.
	BaseURL string
	// APIKey is sent as "Authorization: Bearer <APIKey>"; when empty no
	// Authorization is sent. It is a secret: never logged, and cut out of any
	// upstream text an error keeps.
	APIKey string
	// Timeout bounds a non-streaming call from the request to the end of the
	// body, and a streaming call until its response headers. Default 120s;
	// keep it below the payment's maxTimeoutSeconds (D6).
	Timeout time.Duration
	// IdleTimeout bounds each wait for a stream's next event. A reasoning model
	// can think silently for a while, so it should not be short. Default:
	// Timeout. The stream's total duration is the caller's to bound, by ctx.
	IdleTimeout time.Duration
	// MaxBodyBytes caps a non-streamed answer. Default 32 MiB.
	MaxBodyBytes int64
	// MaxEventBytes caps the data of one streamed event. Default 1 MiB.
	MaxEventBytes int
	// Client sends the requests. Default: a client of the provider's own that
	// keeps up to 64 idle connections per host and follows no redirect (an
	// upstream that redirects is misconfigured, and a redirect would re-send
	// the body). A client given here must have no Timeout: it would cut
	// streams; Timeout and IdleTimeout above do that job.
	Client *http.Client
}

// String describes the configuration without the key, so a config printed by
// mistake leaks nothing.
func (c OpenAIConfig) String() string {
	key := "none"
	if c.APIKey != "" {
		key = "[redacted]"
	}
	return fmt.Sprintf("OpenAIConfig{BaseURL: %q, APIKey: %s, Timeout: %s, IdleTimeout: %s}", c.BaseURL, key, c.Timeout, c.IdleTimeout)
}

// GoString is String, for %#v.
func (c OpenAIConfig) GoString() string { return c.String() }

// OpenAI is a Provider for any OpenAI-compatible chat-completions API. It
// builds every request from scratch: POST {BaseURL}/chat/completions with the
// body it is given, Content-Type, Accept, User-Agent and its own Authorization,
// nothing else. No header of the client's request can reach the upstream,
// because none is ever handed to it (D11).
//
// Errors are *Error, mapped as that type describes. The provider logs only what
// does not surface as an error (a missing usage); the caller logs errors, with
// their detail, once. It is safe for concurrent use.
type OpenAI struct {
	endpoint string // {BaseURL}/chat/completions
	embed    string // {BaseURL}/embeddings
	key      string
	timeout  time.Duration
	idle     time.Duration
	maxBody  int64
	maxEvent int
	client   *http.Client
	log      *slog.Logger
}

// NewOpenAI checks cfg and returns the provider. A nil log discards.
func NewOpenAI(cfg OpenAIConfig, log *slog.Logger) (*OpenAI, error) {
	u, err := url.Parse(cfg.BaseURL)
	if err != nil {
		return nil, errors.New("upstream base URL: not a URL")
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("upstream base URL %q: want an absolute http or https URL with no query", u.Redacted())
	}
	for i := range len(cfg.APIKey) {
		if c := cfg.APIKey[i]; c <= ' ' || c >= 0x7f {
			return nil, errors.New("upstream API key: it has a space, control or non-ASCII character, which a header cannot carry")
		}
	}
	if cfg.Timeout < 0 || cfg.IdleTimeout < 0 || cfg.MaxBodyBytes < 0 || cfg.MaxEventBytes < 0 {
		return nil, errors.New("upstream config: timeouts and size limits must not be negative")
	}
	o := &OpenAI{
		endpoint: strings.TrimRight(cfg.BaseURL, "/") + "/chat/completions",
		embed:    strings.TrimRight(cfg.BaseURL, "/") + "/embeddings",
		key:      cfg.APIKey,
		timeout:  cmp.Or(cfg.Timeout, defaultTimeout),
		maxBody:  cmp.Or(cfg.MaxBodyBytes, defaultMaxBodyBytes),
		maxEvent: cmp.Or(cfg.MaxEventBytes, defaultMaxEventBytes),
		client:   cfg.Client,
		log:      log,
	}
	o.idle = cmp.Or(cfg.IdleTimeout, o.timeout)
	if o.client == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.MaxIdleConnsPerHost = defaultIdleConns
		o.client = &http.Client{
			Transport:     t,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
	}
	if o.log == nil {
		o.log = slog.New(slog.DiscardHandler)
	}
	u.Path = strings.TrimRight(u.Path, "/") + "/chat/completions"
	o.log = o.log.With("component", "upstream-openai", "endpoint", u.Redacted())
	return o, nil
}

// CloseIdleConnections closes the pooled connections to the upstream, for
// shutdown.
func (o *OpenAI) CloseIdleConnections() { o.client.CloseIdleConnections() }

func (o *OpenAI) newRequest(ctx context.Context, endpoint string, body []byte, stream bool) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	h := req.Header
	h.Set("Content-Type", "application/json")
	h.Set("User-Agent", userAgent)
	if stream {
		h.Set("Accept", "text/event-stream")
		h.Set("Accept-Encoding", "identity") // a compressed stream can be held back in buffers
	} else {
		h.Set("Accept", "application/json")
	}
	if o.key != "" {
		h.Set("Authorization", "Bearer "+o.key)
	}
	return req, nil
}

// Complete implements Provider. The whole call, body included, is bounded by
// the Timeout. A body without usage is accepted with UsageReported false.
func (o *OpenAI) Complete(ctx context.Context, body []byte) (*Completion, error) {
	ctx, cancel := context.WithTimeoutCause(ctx, o.timeout, errTimeout)
	defer cancel()
	b, h, err := o.post(ctx, o.endpoint, body)
	if err != nil {
		return nil, err
	}
	return o.completion(b, h)
}

// post makes a non-streaming call to endpoint and returns the body of its
// 200 answer, read whole within the size limit, and its headers. ctx bounds
// the whole call.
func (o *OpenAI) post(ctx context.Context, endpoint string, body []byte) ([]byte, http.Header, error) {
	req, err := o.newRequest(ctx, endpoint, body, false)
	if err != nil {
		return nil, nil, upstreamFailed(err)
	}
	resp, err := o.client.Do(req)
	if err != nil {
		return nil, nil, classify(ctx, err, unavailable)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, nil, o.statusError(resp)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, o.maxBody+1))
	if err != nil {
		return nil, nil, classify(ctx, fmt.Errorf("read body: %w", err), badResponse)
	}
	if int64(len(b)) > o.maxBody {
		return nil, nil, badResponse(fmt.Errorf("%w (%d bytes)", errTooLarge, o.maxBody))
	}
	return b, resp.Header, nil
}

// Embed implements Embedder: POST {BaseURL}/embeddings, bounded by the
// Timeout like Complete. The answer is a Completion whose Body is the
// embeddings list as the upstream sent it; its Usage has only prompt and
// total tokens. A body without a data array is an upstream_bad_response;
// whether it holds one vector per input is the caller's to check
// (embeddings.CheckResponse), since only the caller knows the inputs.
func (o *OpenAI) Embed(ctx context.Context, body []byte) (*Completion, error) {
	ctx, cancel := context.WithTimeoutCause(ctx, o.timeout, errTimeout)
	defer cancel()
	b, h, err := o.post(ctx, o.embed, body)
	if err != nil {
		return nil, err
	}
	var e struct {
		Data  json.RawMessage `json:"data"`
		Usage *chat.Usage     `json:"usage"`
		Error json.RawMessage `json:"error"`
	}
	if t := bytes.TrimSpace(b); len(t) == 0 || t[0] != '{' {
		return nil, badResponse(fmt.Errorf("body is not a JSON object: %s", o.snippet(b)))
	}
	if err := json.Unmarshal(b, &e); err != nil {
		return nil, badResponse(fmt.Errorf("decode embeddings: %w", err))
	}
	if present(e.Error) && !present(e.Data) {
		return nil, upstreamFailed(fmt.Errorf("upstream answered 200 with an error: %s", o.snippet(b)))
	}
	if t := bytes.TrimSpace(e.Data); len(t) == 0 || t[0] != '[' {
		return nil, badResponse(fmt.Errorf("embeddings answer has no data array: %s", o.snippet(b)))
	}
	out := &Completion{Body: b, Header: safeHeader(h)}
	if e.Usage == nil {
		o.log.Warn("upstream embeddings answer has no usage", "request_id", h.Get("X-Request-Id"))
		return out, nil
	}
	if err := checkUsage(e.Usage); err != nil {
		return nil, badResponse(err)
	}
	out.Usage, out.UsageReported = *e.Usage, true
	return out, nil
}

// completion checks a 200 body and reads its usage.
func (o *OpenAI) completion(b []byte, h http.Header) (*Completion, error) {
	var c struct {
		Choices json.RawMessage `json:"choices"`
		Usage   *chat.Usage     `json:"usage"`
		Error   json.RawMessage `json:"error"`
	}
	if t := bytes.TrimSpace(b); len(t) == 0 || t[0] != '{' {
		return nil, badResponse(fmt.Errorf("body is not a JSON object: %s", o.snippet(b)))
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, badResponse(fmt.Errorf("decode completion: %w", err))
	}
	if present(c.Error) && !present(c.Choices) {
		return nil, upstreamFailed(fmt.Errorf("upstream answered 200 with an error: %s", o.snippet(b)))
	}
	if t := bytes.TrimSpace(c.Choices); len(t) == 0 || t[0] != '[' {
		return nil, badResponse(fmt.Errorf("completion has no choices array: %s", o.snippet(b)))
	}
	out := &Completion{Body: b, Header: safeHeader(h)}
	if c.Usage == nil {
		o.log.Warn("upstream completion has no usage; reporting zero", "request_id", h.Get("X-Request-Id"))
		return out, nil
	}
	if err := checkUsage(c.Usage); err != nil {
		return nil, badResponse(err)
	}
	out.Usage, out.UsageReported = *c.Usage, true
	return out, nil
}

func checkUsage(u *chat.Usage) error {
	if u.PromptTokens < 0 || u.CompletionTokens < 0 || u.TotalTokens < 0 {
		return fmt.Errorf("usage has negative token counts: %d prompt, %d completion, %d total", u.PromptTokens, u.CompletionTokens, u.TotalTokens)
	}
	return nil
}

// Stream implements Provider. The Timeout bounds the wait for the response
// headers (and an error body); after that, IdleTimeout bounds each event and
// ctx the whole stream.
func (o *OpenAI) Stream(ctx context.Context, body []byte) (Stream, error) {
	return o.stream(ctx, o.endpoint, body, false)
}

// stream makes a streaming call to endpoint; responses says the events are
// the Responses API's (responses.go), not chat completion chunks.
func (o *OpenAI) stream(ctx context.Context, endpoint string, body []byte, responses bool) (Stream, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	req, err := o.newRequest(ctx, endpoint, body, true)
	if err != nil {
		cancel(nil)
		return nil, upstreamFailed(err)
	}
	headers := time.AfterFunc(o.timeout, func() { cancel(errTimeout) })
	fail := func(e *Error) (Stream, error) {
		headers.Stop()
		cancel(nil)
		return nil, e
	}
	resp, err := o.client.Do(req)
	if err != nil {
		return fail(classify(ctx, err, unavailable))
	}
	if resp.StatusCode != http.StatusOK {
		e := o.statusError(resp)
		_ = resp.Body.Close()
		return fail(e)
	}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt == "application/json" {
		// Some compatible servers answer an error, or ignore "stream", with JSON.
		b, err := io.ReadAll(io.LimitReader(resp.Body, maxErrorBodyBytes))
		_ = resp.Body.Close()
		if err != nil {
			return fail(classify(ctx, fmt.Errorf("read body: %w", err), badResponse))
		}
		if _, e := parseErrorBody(b); e {
			return fail(upstreamFailed(fmt.Errorf("upstream answered a stream with a JSON error: %s", o.snippet(b))))
		}
		return fail(badResponse(fmt.Errorf("upstream answered a stream with JSON, not an event stream: %s", o.snippet(b))))
	}
	if !headers.Stop() { // the timeout fired as the headers came: the request is cancelled
		_ = resp.Body.Close()
		cancel(nil)
		return nil, timeout(errTimeout)
	}
	s := o.newEventStream(ctx, cancel, resp.Body, resp.Header.Get("X-Request-Id"))
	s.responses = responses
	return s, nil
}

func (o *OpenAI) newEventStream(ctx context.Context, cancel context.CancelCauseFunc, body io.ReadCloser, requestID string) *eventStream {
	s := &eventStream{
		ctx: ctx, cancel: cancel, body: body,
		sse: newSSEReader(body, o.maxEvent), idle: o.idle,
		log: o.log, snippet: o.snippet, requestID: requestID,
	}
	s.timer = time.AfterFunc(time.Hour, func() { cancel(errIdleTimeout) })
	s.timer.Stop()
	return s
}

// eventStream is the Stream of an OpenAI call. It holds the request's context,
// as the response body does, to tell why a read failed.
type eventStream struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	body   io.ReadCloser
	sse    *sseReader
	idle   time.Duration
	// timer cancels the request when a Next waits past idle. It runs only
	// inside Next; if it fires just as an event arrives, that event is still
	// returned and the next call reports the timeout.
	timer     *time.Timer
	log       *slog.Logger
	snippet   func([]byte) string
	requestID string

	usage    chat.Usage
	hasUsage bool
	// responses: the events are the Responses API's, and the stream ends
	// after its final event (final) rather than at "[DONE]".
	responses bool
	final     bool
	err       error       // sticky: io.EOF or an *Error
	done      atomic.Bool // "[DONE]", or a Responses final event, was read

	closeOnce sync.Once
}

func (s *eventStream) Next() ([]byte, error) {
	if s.err != nil {
		return nil, s.err
	}
	s.timer.Reset(s.idle)
	data, err := s.read()
	s.timer.Stop()
	if err != nil {
		s.err = err
		return nil, err
	}
	return data, nil
}

func (s *eventStream) read() ([]byte, error) {
	if s.final {
		// A Responses stream is over at its final event, whatever follows.
		s.done.Store(true)
		return nil, io.EOF
	}
	for {
		data, err := s.sse.next()
		switch {
		case errors.Is(err, io.EOF) && s.responses:
			return nil, classify(s.ctx, fmt.Errorf("stream ended before its final event: %w", io.ErrUnexpectedEOF), badResponse)
		case errors.Is(err, io.EOF):
			return nil, classify(s.ctx, fmt.Errorf("stream ended without [DONE]: %w", io.ErrUnexpectedEOF), badResponse)
		case errors.Is(err, errEventTooLarge):
			return nil, badResponse(err)
		case err != nil:
			return nil, classify(s.ctx, fmt.Errorf("read stream: %w", err), badResponse)
		}
		t := bytes.TrimSpace(data)
		if len(t) == 0 {
			continue // an empty keep-alive event
		}
		if s.responses {
			return s.responsesEvent(data)
		}
		if string(t) == "[DONE]" {
			if !s.hasUsage {
				s.log.Warn("upstream stream ended without usage", "request_id", s.requestID)
			}
			s.done.Store(true)
			return nil, io.EOF
		}
		if t[0] != '{' {
			return nil, badResponse(fmt.Errorf("event is not a JSON object: %s", s.snippet(data)))
		}
		if !json.Valid(data) {
			return nil, badResponse(fmt.Errorf("chunk is not valid JSON: %s", s.snippet(data)))
		}
		// Most chunks carry neither an error nor a usage object ("usage":null);
		// only those that may are decoded.
		if hasMember(data, keyError, notNull) || hasMember(data, keyUsage, isObject) {
			var probe struct {
				Usage *chat.Usage     `json:"usage"`
				Error json.RawMessage `json:"error"`
			}
			if err := json.Unmarshal(data, &probe); err != nil {
				return nil, badResponse(fmt.Errorf("decode chunk: %w", err))
			}
			if present(probe.Error) {
				return nil, upstreamFailed(fmt.Errorf("error event in the stream: %s", s.snippet(data)))
			}
			if probe.Usage != nil {
				if err := checkUsage(probe.Usage); err != nil {
					return nil, badResponse(err)
				}
				s.usage, s.hasUsage = *probe.Usage, true
			}
		}
		return data, nil
	}
}

var (
	keyError = []byte(`"error"`)
	keyUsage = []byte(`"usage"`)
)

// hasMember reports whether the JSON text data may have a member named by key
// (quoted) whose value starts with a byte that passes want, at any depth. Inside
// a JSON string a quote is always escaped, so no string holds the quoted key:
// there are no false negatives (short of a key written with \u escapes, which
// no encoder does), and a false positive (a nested member) costs a full decode.
func hasMember(data, key []byte, want func(byte) bool) bool {
	for i := 0; ; {
		j := bytes.Index(data[i:], key)
		if j < 0 {
			return false
		}
		p := skipSpace(data, i+j+len(key))
		if p < len(data) && data[p] == ':' {
			if p = skipSpace(data, p+1); p < len(data) && want(data[p]) {
				return true
			}
		}
		i += j + 1
	}
}

func notNull(c byte) bool  { return c != 'n' }
func isObject(c byte) bool { return c == '{' }

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

func (s *eventStream) Usage() (chat.Usage, bool) { return s.usage, s.hasUsage }

// Close, after "[DONE]", first reads what follows it (normally just the end of
// the body) for up to drainTimeout, so the connection goes back to the pool.
func (s *eventStream) Close() error {
	s.closeOnce.Do(func() {
		s.timer.Stop()
		if s.done.Load() {
			t := time.AfterFunc(drainTimeout, func() { s.cancel(errDrained) })
			_, _ = io.Copy(io.Discard, io.LimitReader(s.body, drainBytes))
			t.Stop()
		}
		s.cancel(errClosed)
		_ = s.body.Close()
	})
	return nil
}

// classify maps a transport or read error, told apart by why ctx ended if it
// did: our timeouts -> upstream_timeout; Close or the caller's cancellation ->
// request_canceled; the caller's deadline -> upstream_timeout; a network
// timeout -> upstream_timeout; anything else -> fallback.
func classify(ctx context.Context, err error, fallback func(error) *Error) *Error {
	if ctx.Err() != nil {
		cause := context.Cause(ctx)
		switch {
		case errors.Is(cause, errTimeout), errors.Is(cause, errIdleTimeout):
			return timeout(fmt.Errorf("%w: %w", cause, err))
		case errors.Is(cause, errClosed):
			return canceled(cause)
		}
		return contextError(ctx.Err())
	}
	if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
		return timeout(err)
	}
	return fallback(err)
}

// statusError maps an upstream answer other than 200, reading its body, capped.
// An error that is the client's (400, 404, 413, 422) passes through only when
// the body is an OpenAI error: a bare 404 is a wrong base URL, not a missing
// model. A 429 always passes through, with a generic message.
func (o *OpenAI) statusError(resp *http.Response) *Error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBodyBytes))
	st := resp.StatusCode
	d, ok := parseErrorBody(b)
	detail := fmt.Errorf("upstream answered %d: %s", st, o.snippet(b))
	if st == http.StatusUnauthorized || st == http.StatusForbidden {
		// The message quotes part of the key; type and code say enough.
		detail = fmt.Errorf("upstream answered %d (type %q, code %q): check the upstream API key", st, d.Type, d.Code)
	}
	switch {
	case st == http.StatusTooManyRequests && d.Code == "insufficient_quota":
		return upstreamFailed(detail) // the operator's account, not the client's rate
	case st == http.StatusTooManyRequests:
		return &Error{
			Status: st, Type: cmp.Or(d.Type, "rate_limit_error"), Code: cmp.Or(d.Code, "rate_limit_exceeded"),
			Message:    "the upstream provider is rate limiting requests; retry later",
			RetryAfter: retryAfter(resp.Header.Get("Retry-After")), Err: detail,
		}
	case ok && (st == http.StatusBadRequest || st == http.StatusNotFound ||
		st == http.StatusRequestEntityTooLarge || st == http.StatusUnprocessableEntity):
		msg := o.redact(d.Message)
		if msg == "" {
			msg = fmt.Sprintf("the upstream provider refused the request (%d %s)", st, http.StatusText(st))
		}
		return &Error{
			Status: st, Type: cmp.Or(d.Type, "invalid_request_error"), Code: d.Code, Param: d.Param,
			Message: msg, Err: detail,
		}
	}
	return upstreamFailed(detail)
}

// errorDetail is the part of an upstream error body statusError uses.
type errorDetail struct {
	Message, Type, Code, Param string
}

// parseErrorBody reads an OpenAI error, {"error":{"message","type","param",
// "code"}}, and the variants compatible servers send: {"error":"text"} and a
// top-level {"object":"error","message",...} (vLLM). ok is false when b is
// none of them.
func parseErrorBody(b []byte) (errorDetail, bool) {
	type fields struct {
		Message string `json:"message"`
		Type    string `json:"type"`
		Param   any    `json:"param"`
		Code    any    `json:"code"`
	}
	var body struct {
		Error  json.RawMessage `json:"error"`
		Object string          `json:"object"`
		fields
	}
	if json.Unmarshal(b, &body) != nil {
		return errorDetail{}, false
	}
	var f fields
	switch {
	case present(body.Error) && json.Unmarshal(body.Error, &f) == nil:
	case present(body.Error) && json.Unmarshal(body.Error, &f.Message) == nil:
	case body.Object == "error":
		f = body.fields
	default:
		return errorDetail{}, false
	}
	return errorDetail{Message: f.Message, Type: f.Type, Code: scalar(f.Code), Param: scalar(f.Param)}, true
}

// scalar renders a JSON string or number; anything else is "".
func scalar(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
	return ""
}

// retryAfter reads a Retry-After header: seconds or an HTTP date.
func retryAfter(v string) time.Duration {
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil && s >= 0 {
		return time.Duration(min(s, 24*3600)) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(time.Until(t).Round(time.Second), 0)
	}
	return 0
}

// present reports whether a raw JSON value is there and not null.
func present(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) > 0 && string(t) != "null"
}

// safeHeader keeps the response headers that may be passed on: X-Request-Id.
func safeHeader(h http.Header) http.Header {
	out := http.Header{}
	if v := h.Get("X-Request-Id"); v != "" {
		out.Set("X-Request-Id", v)
	}
	return out
}

// snippet is the start of an upstream body, for an error's log detail, with
// the key cut out.
func (o *OpenAI) snippet(b []byte) string {
	if len(b) > logSnippetBytes {
		b = b[:logSnippetBytes]
	}
	return o.redact(strings.ToValidUTF8(string(b), "\uFFFD"))
}

func (o *OpenAI) redact(s string) string {
	if o.key == "" {
		return s
	}
	return strings.ReplaceAll(s, o.key, "[redacted]")
}

var (
	_ Provider = (*OpenAI)(nil)
	_ Embedder = (*OpenAI)(nil)
	_ Stream   = (*eventStream)(nil)
)
