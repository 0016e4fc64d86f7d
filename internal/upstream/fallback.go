package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"
)

// Defaults of HealthConfig.
const (
	DefaultFailuresToOpen = 3
	DefaultOpenFor        = 30 * time.Second
)

// HealthConfig is when a provider is skipped for failing.
type HealthConfig struct {
	// FailuresToOpen is how many failures in a row open the provider's
	// circuit. Default DefaultFailuresToOpen.
	FailuresToOpen int
	// OpenFor is how long an open circuit skips the provider before one
	// call tries it again. Default DefaultOpenFor.
	OpenFor time.Duration
}

// Health is what one provider's recent answers say about it, shared by every
// model it serves: passive (no probes), from the calls themselves. A
// provider whose circuit is open, or that asked for a pause with a 429's
// Retry-After, is tried after the others, or not at all.
type Health struct {
	cfg HealthConfig
	now func() time.Time

	mu       sync.Mutex
	failures int       // in a row
	open     time.Time // the circuit is open until then
	paused   time.Time // a 429 asked for no call until then
}

// NewHealth returns the health of one provider.
func NewHealth(cfg HealthConfig) *Health {
	if cfg.FailuresToOpen <= 0 {
		cfg.FailuresToOpen = DefaultFailuresToOpen
	}
	if cfg.OpenFor <= 0 {
		cfg.OpenFor = DefaultOpenFor
	}
	return &Health{cfg: cfg, now: time.Now}
}

// SetNow replaces the clock (tests).
func (h *Health) SetNow(now func() time.Time) { h.now = now }

// state says whether the provider is paused by a 429 (and for how long
// still), or has its circuit open.
func (h *Health) state() (pausedFor time.Duration, open bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.now()
	return max(h.paused.Sub(now), 0), now.Before(h.open)
}

// Open reports whether the provider's circuit is open (for metrics).
func (h *Health) Open() bool {
	_, open := h.state()
	return open
}

// record takes in the outcome of one call.
func (h *Health) record(o outcome, retryAfter time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.now()
	switch o {
	case outcomeOK, outcomeRefused, outcomeNotServed:
		// The provider answered: a refusal of the request, or a model it
		// does not have, is not a failure of the provider.
		h.failures, h.open = 0, time.Time{}
	case outcomeLimited:
		h.paused = now.Add(retryAfter)
	case outcomeFailed:
		h.failures++
		if h.failures >= h.cfg.FailuresToOpen {
			h.open = now.Add(h.cfg.OpenFor)
		}
	case outcomeCanceled:
	}
}

// outcome is what one attempt says about its provider.
type outcome int

const (
	outcomeOK        outcome = iota // it answered
	outcomeRefused                  // it refused the request itself (4xx): the next would too
	outcomeNotServed                // 404: it does not have the model (as configured): try another
	outcomeLimited                  // 429: try another, and this one after its Retry-After
	outcomeFailed                   // unreachable, timed out, 5xx, a bad answer: try another
	outcomeCanceled                 // the caller left: stop
)

// outcomeOf classifies an attempt's error. ctx is the caller's: once it is
// done, nothing else is tried, whatever the error says.
func outcomeOf(ctx context.Context, err error) outcome {
	if err == nil {
		return outcomeOK
	}
	if ctx.Err() != nil {
		return outcomeCanceled
	}
	ue, ok := errors.AsType[*Error](err)
	if !ok {
		return outcomeFailed
	}
	switch {
	case ue.Code == CodeCanceled:
		return outcomeCanceled
	case ue.Status == http.StatusTooManyRequests:
		return outcomeLimited
	case ue.Status == http.StatusNotFound:
		return outcomeNotServed
	case ue.Code == CodeUnavailable, ue.Code == CodeTimeout, ue.Code == CodeError, ue.Code == CodeBadResponse:
		return outcomeFailed
	}
	return outcomeRefused
}

// outcomeNames label the attempts in metrics.
var outcomeNames = map[outcome]string{
	outcomeOK: "ok", outcomeRefused: "refused", outcomeNotServed: "not_served", outcomeLimited: "rate_limited",
	outcomeFailed: "failed", outcomeCanceled: "canceled",
}

// Route is one provider of a model.
type Route struct {
	// Name is the upstream's name in the configuration: metrics and logs
	// say it, never its URL or key.
	Name     string
	Provider Provider
	// Model is the provider's name for the model; "" keeps the one in the
	// body the gateway rewrote (the first route's).
	Model string
	// Health is the provider's, shared by every model it serves.
	Health *Health
}

// AttemptMetrics counts the attempts of a Fallback by provider and outcome
// (ok, refused, not_served, rate_limited, failed, canceled, skipped).
type AttemptMetrics interface {
	Attempt(provider, outcome string)
}

// Fallback is a Provider that serves one model from several providers, in
// order: on a failure before the first byte (unreachable, a timeout, a 5xx,
// a bad answer), a 429 or a 404 (the provider does not have the model as
// configured), the next is tried with the same body, within the caller's
// context. The caller pays once, for the answer it gets: a failed
// attempt delivered nothing. A refusal of the request itself (400, 413,
// 422) is returned at once: another provider would refuse it too. Once a
// stream has started it is the answer: a provider that fails mid-stream is
// not replaced, since part of the answer was delivered.
//
// Providers whose circuit is open are tried last; one paused by its 429's
// Retry-After is not tried until the pause ends. When every provider is
// paused, the answer is a 429 whose Retry-After is the shortest pause.
type Fallback struct {
	routes  []Route
	metrics AttemptMetrics
	log     *slog.Logger
}

// NewFallback returns a Provider serving from routes, in order; it is also
// an Embedder when every route's provider is one, and a Responder when every
// route's provider is one. At least one route is required, each with a
// Provider and a Health.
func NewFallback(routes []Route, m AttemptMetrics, log *slog.Logger) (Provider, error) {
	if len(routes) == 0 {
		return nil, errors.New("upstream: a fallback needs at least one route")
	}
	embeds, responds := true, true
	for i, r := range routes {
		if r.Provider == nil || r.Health == nil {
			return nil, fmt.Errorf("upstream: route %d (%s) has no provider or health", i, r.Name)
		}
		_, ok := r.Provider.(Embedder)
		embeds = embeds && ok
		_, ok = r.Provider.(Responder)
		responds = responds && ok
	}
	f := &Fallback{routes: routes, metrics: m, log: log}
	switch {
	case embeds:
		return &embedFallback{f}, nil
	case responds:
		return &respondFallback{f}, nil
	}
	return f, nil
}

// embedFallback is a Fallback whose every provider serves embeddings.
type embedFallback struct{ *Fallback }

// Embed implements Embedder.
func (f *embedFallback) Embed(ctx context.Context, body []byte) (*Completion, error) {
	return try(ctx, f.Fallback, body, func(p Provider, b []byte) (*Completion, error) {
		return p.(Embedder).Embed(ctx, b)
	})
}

// Complete implements Provider.
func (f *Fallback) Complete(ctx context.Context, body []byte) (*Completion, error) {
	return try(ctx, f, body, func(p Provider, b []byte) (*Completion, error) { return p.Complete(ctx, b) })
}

// Stream implements Provider: a provider is replaced only while its stream
// has not started. A stream has started once its first event arrived: one
// that answers 200 and then breaks, or ends, before any event is a failure
// before the first byte, like a refused connection.
func (f *Fallback) Stream(ctx context.Context, body []byte) (Stream, error) {
	return try(ctx, f, body, func(p Provider, b []byte) (Stream, error) { return startStream(ctx, p, b) })
}

// startStream starts p's stream and reads its first event, which the
// returned stream gives again first.
func startStream(ctx context.Context, p Provider, body []byte) (Stream, error) {
	st, err := p.Stream(ctx, body)
	if err != nil {
		return nil, err
	}
	first, err := st.Next()
	if err != nil {
		_ = st.Close()
		if errors.Is(err, io.EOF) {
			err = badResponse(errors.New("the stream ended before its first event"))
		}
		return nil, err
	}
	return &startedStream{Stream: st, first: first}, nil
}

// startedStream is a stream whose first event was read to know it started.
type startedStream struct {
	Stream
	first []byte
	given bool
}

func (s *startedStream) Next() ([]byte, error) {
	if !s.given {
		s.given = true
		return s.first, nil
	}
	return s.Stream.Next()
}

// try calls each route in turn with call until one answers, the request is
// refused, or the caller leaves. It returns the last error otherwise.
func try[T any](ctx context.Context, f *Fallback, body []byte, call func(Provider, []byte) (T, error)) (T, error) {
	var zero T
	order, paused := f.order()
	if len(order) == 0 {
		return zero, allPaused(paused)
	}
	var last error
	for i, r := range order {
		b, err := withModel(body, r.Model)
		if err != nil {
			return zero, badRequestBody(err)
		}
		ans, err := call(r.Provider, b)
		o := outcomeOf(ctx, err)
		var ra time.Duration
		if ue, ok := errors.AsType[*Error](err); ok {
			ra = ue.RetryAfter
		}
		r.Health.record(o, ra)
		f.count(r.Name, outcomeNames[o])
		switch o {
		case outcomeOK:
			return ans, nil
		case outcomeRefused, outcomeCanceled:
			return zero, err
		case outcomeNotServed, outcomeLimited, outcomeFailed:
		}
		last = err
		if i+1 < len(order) {
			f.log.Warn("upstream failed; trying the next provider", "provider", r.Name, "next", order[i+1].Name, "err", err)
		}
	}
	return zero, last
}

// order is the routes to try: the healthy ones in order, then those whose
// circuit is open. Paused routes are left out; paused is the shortest of
// their pauses, 0 when none is paused.
func (f *Fallback) order() (order []Route, paused time.Duration) {
	order = make([]Route, 0, len(f.routes))
	var open []Route
	for _, r := range f.routes {
		p, isOpen := r.Health.state()
		switch {
		case p > 0:
			if paused == 0 || p < paused {
				paused = p
			}
			f.count(r.Name, "skipped")
		case isOpen:
			open = append(open, r)
		default:
			order = append(order, r)
		}
	}
	return append(order, open...), paused
}

func (f *Fallback) count(provider, outcome string) {
	if f.metrics != nil {
		f.metrics.Attempt(provider, outcome)
	}
}

// allPaused is the answer when every provider asked for a pause: a 429 that
// says when the first pause ends.
func allPaused(d time.Duration) *Error {
	return &Error{
		Status: http.StatusTooManyRequests, Type: "rate_limit_error", Code: "rate_limit_exceeded",
		Message:    "the upstream providers are rate limiting requests; retry later",
		RetryAfter: (d + time.Second - 1).Truncate(time.Second),
		Err:        fmt.Errorf("every provider is paused by its Retry-After for at least %s", d),
	}
}

// badRequestBody is a body the gateway rewrote but that is not a JSON object:
// it cannot happen, since the gateway only sends bodies it wrote.
func badRequestBody(err error) *Error {
	return newError(http.StatusInternalServerError, "internal_error", "internal error", err)
}

// withModel returns body with its "model" set to model; body itself when
// model is "".
func withModel(body []byte, model string) ([]byte, error) {
	if model == "" {
		return body, nil
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(body, &obj); err != nil {
		return nil, fmt.Errorf("rewrite the model of the upstream body: %w", err)
	}
	m, err := json.Marshal(model)
	if err != nil {
		return nil, err
	}
	obj["model"] = m
	return json.Marshal(obj)
}
