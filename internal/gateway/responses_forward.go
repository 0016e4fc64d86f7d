package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/llm4agents/llm4agents/internal/chat"
	"github.com/llm4agents/llm4agents/internal/paywall"
	"github.com/llm4agents/llm4agents/internal/responses"
	"github.com/llm4agents/llm4agents/internal/upstream"
)

// A /v1/responses call of a model whose every provider speaks the Responses
// API (upstream.Responder) is passed through (DESIGN.md D33): priced as the
// translated call would be (responses.ParseForward), paid by every path a
// chat call has, and the buyer's body goes upstream with only its model
// renamed and max_output_tokens set when absent. The upstream's Response, or
// its event stream, goes back as written, with the payment's headers and
// the x_llm4agents annotation added inside the response object (of the
// final event, for a stream), where the translated answer has it.

// responder is the Responses API of the model body names, nil when that
// model's providers do not all speak it (the call is then translated).
func (s *Server) responder(body []byte) upstream.Responder {
	var probe struct {
		Model string `json:"model"`
	}
	if json.Unmarshal(body, &probe) != nil {
		return nil
	}
	m, ok := s.models[probe.Model]
	if !ok || m.Embeddings {
		return nil
	}
	rp, _ := m.Provider.(upstream.Responder)
	return rp
}

// refusedResponses is the 400 of a Responses request this gateway refuses.
func refusedResponses(err error) *apiError {
	msg, param := err.Error(), any(nil)
	if re, ok := errors.AsType[*responses.Error](err); ok && re.Param != "" {
		param = re.Param
	}
	return &apiError{Status: http.StatusBadRequest, Type: "invalid_request_error", Code: "invalid_request", Message: msg,
		Detail: chat.ErrorDetail{Message: msg, Type: "invalid_request_error", Param: param, Code: "invalid_request"}}
}

// chatOnly says, of a translation's refusal of body that a pass-through
// would take, that the model's upstream is what refuses it.
func chatOnly(body []byte, err error) error {
	re, ok := errors.AsType[*responses.Error](err)
	if !ok {
		return err
	}
	if _, ferr := responses.ParseForward(body); ferr != nil {
		return err // refused on either path: its own reason says why
	}
	return &responses.Error{Param: re.Param,
		Message: re.Message + " (this model's upstream speaks only chat completions, which cannot carry it; nothing was charged)"}
}

// forwardResponses serves a Responses call passed through to rp.
func (s *Server) forwardResponses(w http.ResponseWriter, r *http.Request, body []byte, rp upstream.Responder) error {
	f, err := responses.ParseForward(body)
	if err != nil {
		return refusedResponses(err)
	}
	req, err := chat.ParseRequest(f.Chat())
	if err != nil {
		return fmt.Errorf("the pricing body of a Responses request: %w", err)
	}
	if err := keyAndPayment(r); err != nil {
		return err
	}
	if hasOwnKey(r) {
		return s.creditForward(w, r, f, req, rp)
	}
	q, err := s.price(r, req)
	if err != nil {
		return err
	}
	return s.paid(w, r, responsesWire, q, f.Model, body, func(a *paywall.Fresh) error {
		up, err := f.Upstream(q.model.UpstreamModel, q.model.MaxOutputTokens)
		if err != nil {
			a.Release(r.Context())
			return fmt.Errorf("rewrite request: %w", err)
		}
		if f.Stream {
			return s.stream(w, r, responsesWire, q, a, rp.StreamResponses, up)
		}
		return s.complete(w, r, responsesWire, q, a, rp.Respond, up)
	})
}

// eventData is the data of one recorded event ("event: ...\ndata: ...").
func eventData(ev []byte) ([]byte, bool) {
	for line := range bytes.Lines(ev) {
		if data, ok := bytes.CutPrefix(bytes.TrimRight(line, "\n"), []byte("data: ")); ok {
			return data, true
		}
	}
	return nil, false
}

// frame is one server-sent event of the Responses API: its type as the
// event name, then its data.
func frame(typ string, data []byte) []byte {
	out := make([]byte, 0, len(typ)+len(data)+16)
	out = append(out, "event: "...)
	out = append(out, typ...)
	out = append(out, "\ndata: "...)
	out = append(out, data...)
	return append(out, '\n', '\n')
}

// annotateResponse adds "x_llm4agents": info to the response object of a
// final event, without re-encoding anything else; to the event itself when
// it has no response object.
func annotateResponse(ev []byte, info any) []byte {
	dec := json.NewDecoder(bytes.NewReader(ev))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return annotate(ev, info)
	}
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			break
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			break
		}
		if key != "response" {
			continue
		}
		end := int(dec.InputOffset())
		start := end - len(raw)
		if start < 0 || !bytes.Equal(ev[start:end], raw) || len(raw) == 0 || raw[0] != '{' {
			break
		}
		out := make([]byte, 0, len(ev)+512)
		out = append(out, ev[:start]...)
		out = append(out, annotate(raw, info)...)
		return append(out, ev[end:]...)
	}
	return annotate(ev, info)
}

// creditForward serves a passed-through call paid from credits through an
// API key: admitted and held as a chat call is, then the upstream, the
// capture of its usage and the receipt.
func (s *Server) creditForward(w http.ResponseWriter, r *http.Request, f *responses.Forward, req *chat.Request, rp upstream.Responder) error {
	if c := s.cfg.Credits; c == nil || c.Ledger == nil || c.Keys == nil {
		return &apiError{Status: http.StatusUnauthorized, Type: "invalid_request_error", Code: "invalid_api_key",
			Message: "this gateway takes no API keys: pay per call with x402 (send no sk-l4a- key); nothing was charged"}
	}
	call, err := s.admitKeyCall(r, req.Model, func() (*quote, error) { return s.price(r, req) }, "lower max_output_tokens")
	if err != nil {
		return err
	}
	w.Header().Set(HeaderRequestID, call.ID)
	up, err := f.Upstream(call.q.model.UpstreamModel, call.q.model.MaxOutputTokens)
	if err != nil {
		call.Release(r.Context())
		return fmt.Errorf("rewrite request: %w", err)
	}
	if f.Stream {
		return s.creditForwardStream(w, r, call, rp, up)
	}
	return s.creditComplete(w, r, responsesWire, call, rp.Respond, up)
}
