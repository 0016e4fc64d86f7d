package gateway

import (
	"context"
	"fmt"
	"net/http"

	"github.com/llm4agents/llm4agents/internal/embeddings"
	"github.com/llm4agents/llm4agents/internal/paywall"
	"github.com/llm4agents/llm4agents/internal/pricing"
	"github.com/llm4agents/llm4agents/internal/upstream"
	"github.com/llm4agents/llm4agents/x402"
)

// POST /v1/embeddings is sold as a non-streaming chat completion is, on the
// same paths: the x402 payment goes through paid and complete (admission,
// the upstream, settlement before the body, recovery), and a credit call
// through the hold, creditComplete and the capture with its receipt. Only
// the request, its quote and the upstream call differ:
//
//	the request         -> internal/embeddings: bounded to 2048 inputs and
//	                       300,000 tokens, refused with a 400 before any quote
//	the quote           -> every input's tokens, counted with the model's
//	                       encoding (a token-id input counts its length), at
//	                       Price.Input; no output (D13 with an output bound of 0)
//	the upstream        -> upstream.Embedder.Embed, and an answer that is not
//	                       one vector per input is a 502 that settles and
//	                       charges nothing
//
// A model is sold here only when it is configured for embeddings
// (Model.Embeddings), and then only here: docs/DESIGN.md D31. Payment is exact only: the quote
// is the exact input count, so there is nothing for upto to save.

// embeddings serves POST /v1/embeddings.
func (s *Server) embeddings(w http.ResponseWriter, r *http.Request) error {
	body, err := s.readBody(w, r)
	if err != nil {
		return err
	}
	req, err := embeddings.ParseRequest(body)
	if err != nil {
		return &apiError{Status: http.StatusBadRequest, Type: "invalid_request_error", Code: "invalid_request", Message: err.Error()}
	}
	if err := keyAndPayment(r); err != nil {
		return err
	}
	if hasOwnKey(r) {
		return s.creditEmbeddings(w, r, req)
	}
	q, err := s.embeddingsQuote(r, req)
	if err != nil {
		return err
	}
	return s.paid(w, r, chatWire, q, req.Model, body, func(a *paywall.Fresh) error {
		up, err := req.Upstream(q.model.UpstreamModel)
		if err != nil {
			a.Release(r.Context())
			return fmt.Errorf("rewrite embeddings request: %w", err)
		}
		return s.complete(w, r, chatWire, q, a, s.upstreamOf(q), up)
	})
}

// embeddingsQuote prices an embeddings request: its input tokens at the
// model's input price, rounded up to the cent as every quote is.
func (s *Server) embeddingsQuote(r *http.Request, req *embeddings.Request) (*quote, error) {
	m, ok := s.models[req.Model]
	if !ok {
		return nil, modelNotFound(req.Model)
	}
	if !m.Embeddings {
		return nil, wrongRoute(m, "/v1/chat/completions")
	}
	tokens, err := s.inputTokens(m, req.Input)
	if err != nil {
		return nil, err
	}
	q := &quote{model: m, promptTokens: tokens, inputs: req.Input.Len()}
	s.pay.Offer(&q.Quote, pricing.Quote(tokens, 0, m.Price, s.cfg.Decimals), false)
	q.PaymentIDRequired = m.PaymentIDRequired
	q.What = paywall.WhatRequest
	q.Resource = &x402.ResourceInfo{
		URL:         s.cfg.PublicURL + r.URL.Path,
		Description: fmt.Sprintf("embeddings with %s: %d input tokens in %d inputs", m.ID, tokens, q.inputs),
		MimeType:    "application/json",
	}
	return q, nil
}

// inputTokens counts the tokens of in as the upstream will: each text with
// the model's encoding, each token input by its length. It stops counting
// once the sum passes embeddings.MaxTokens, which is refused: nobody is
// asked to pay for a request the upstream would refuse, and nobody gets
// more tokenizing for free than the bound.
func (s *Server) inputTokens(m *Model, in embeddings.Input) (int64, error) {
	tooMany := &apiError{Status: http.StatusBadRequest, Type: "invalid_request_error", Code: "too_many_tokens",
		Message: fmt.Sprintf("the input has more than %d tokens, the most one embeddings request may carry; nothing was charged", embeddings.MaxTokens)}
	total := in.TokenIDs()
	if total > embeddings.MaxTokens {
		return 0, tooMany
	}
	for i, t := range in.Tokens {
		if err := inputTooLong(m, i, int64(len(t))); err != nil {
			return 0, err
		}
	}
	enc := m.Encoding
	if enc == "" {
		enc = pricing.EncodingFor(m.UpstreamModel)
	}
	for i, t := range in.Texts {
		n, err := s.counter.Tokens(enc, t)
		if err != nil {
			return 0, &apiError{Status: http.StatusBadRequest, Type: "invalid_request_error", Code: "invalid_request",
				Message: "the input could not be tokenized", Err: err}
		}
		if err := inputTooLong(m, i, n); err != nil {
			return 0, err
		}
		if total += n; total > embeddings.MaxTokens {
			return 0, tooMany
		}
	}
	return total, nil
}

// inputTooLong refuses input i of n tokens when it is longer than m takes
// in one input: the upstream would refuse the call after it was paid.
func inputTooLong(m *Model, i int, n int64) error {
	if m.MaxInputTokens <= 0 || n <= m.MaxInputTokens {
		return nil
	}
	return &apiError{Status: http.StatusBadRequest, Type: "invalid_request_error", Code: "input_too_long",
		Message: fmt.Sprintf("input[%d] has %d tokens; %s takes at most %d per input; split it; nothing was charged", i, n, m.ID, m.MaxInputTokens)}
}

// wrongRoute refuses a request for m on the route that does not sell it.
func wrongRoute(m *Model, route string) *apiError {
	what := "a chat model"
	if m.Embeddings {
		what = "an embeddings model"
	}
	return &apiError{Status: http.StatusBadRequest, Type: "invalid_request_error", Code: "model_not_supported",
		Message: fmt.Sprintf("the model %q is %s: use POST %s; nothing was charged", truncate(m.ID, 100), what, route)}
}

// callUpstream makes q's non-streaming upstream call: an embeddings call for
// a model sold for embeddings, else a chat completion. An embeddings answer
// without exactly one vector per input is an upstream_bad_response, so the
// callers settle and charge nothing for it, as for any upstream failure.
func (s *Server) callUpstream(ctx context.Context, q *quote, body []byte) (*upstream.Completion, error) {
	if !q.model.Embeddings {
		return q.model.Provider.Complete(ctx, body)
	}
	// New checked that every embeddings model's provider is an Embedder.
	c, err := q.model.Provider.(upstream.Embedder).Embed(ctx, body)
	if err != nil {
		return nil, err
	}
	if err := embeddings.CheckResponse(c.Body, q.inputs); err != nil {
		return nil, &upstream.Error{Status: http.StatusBadGateway, Type: upstream.TypeUpstream, Code: upstream.CodeBadResponse,
			Message: "the upstream provider sent an invalid response", Err: err}
	}
	return c, nil
}

// creditEmbeddings serves an embeddings call paid from credits through an
// API key: the key, its scope and rate, the quote, the hold of its cost,
// then creditComplete (the upstream, the capture of the reported
// prompt_tokens, capped at the hold, and the receipt).
func (s *Server) creditEmbeddings(w http.ResponseWriter, r *http.Request, req *embeddings.Request) error {
	if c := s.cfg.Credits; c == nil || c.Ledger == nil || c.Keys == nil {
		return &apiError{Status: http.StatusUnauthorized, Type: "invalid_request_error", Code: "invalid_api_key",
			Message: "this gateway takes no API keys: pay per call with x402 (send no sk-l4a- key); nothing was charged"}
	}
	call, err := s.admitKeyCall(r, req.Model, func() (*quote, error) { return s.embeddingsQuote(r, req) }, "send fewer inputs")
	if err != nil {
		return err
	}
	w.Header().Set(HeaderRequestID, call.ID)
	up, err := req.Upstream(call.q.model.UpstreamModel)
	if err != nil {
		call.Release(r.Context())
		return fmt.Errorf("rewrite embeddings request: %w", err)
	}
	return s.creditComplete(w, r, chatWire, call, s.upstreamOf(call.q), up)
}
