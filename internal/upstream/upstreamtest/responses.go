package upstreamtest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/llm4agents/llm4agents/internal/responses"
)

// responses answers POST /v1/responses with the demo model's Response
// object or event stream. The faults apply as to chat completions: Status
// and Body, HeaderDelay, Hang, Drop, DropAfter and StallAfter (in events),
// Garbage (an event cut inside its JSON), NoUsage (the response's usage is
// null) and NoDone (no final event).
func (s *Server) responses(w http.ResponseWriter, r *http.Request) {
	body, f, ok := s.begin(w, r)
	if !ok {
		return
	}
	req, err := responses.ParseForward(body)
	if err != nil {
		var param any
		if re, ok := errors.AsType[*responses.Error](err); ok && re.Param != "" {
			param = re.Param
		}
		writeError(w, http.StatusBadRequest, err.Error(), "invalid_request_error", "", param)
		return
	}
	if !s.serves(w, req.Model) {
		return
	}
	w.Header().Set("X-Request-Id", "req_"+requestID(body))
	w.Header().Set("Openai-Organization", "org-upstreamtest") // not to be passed on
	if req.Stream {
		s.responsesStream(w, r, body, f)
		return
	}
	c, err := s.demo.Respond(r.Context(), body)
	if err != nil {
		writeUpstreamError(w, err)
		return
	}
	out := c.Body
	if f.NoUsage {
		out = withoutUsage(out)
		f.NoUsage = false
	}
	s.writeJSON(w, out, f)
}

func (s *Server) responsesStream(w http.ResponseWriter, r *http.Request, body []byte, f Fault) {
	st, err := s.demo.StreamResponses(r.Context(), body)
	if err != nil {
		writeUpstreamError(w, err)
		return
	}
	s.sendStream(w, r, st, f, responsesSSE)
}

// responsesSSE is the Responses event stream: each event named by its
// type; Fault.NoDone ends it before its final event, Fault.NoUsage sets
// the final response's usage to null; nothing follows the final event.
var responsesSSE = sseShape{
	garbage: "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"hel\n\n",
	event: func(ev []byte, f Fault) ([]byte, bool, bool) {
		typ, final := eventType(ev)
		if final && f.NoDone {
			return nil, false, true
		}
		if final && f.NoUsage {
			ev = finalWithoutUsage(ev)
		}
		return fmt.Appendf(nil, "event: %s\ndata: %s\n\n", typ, ev), false, false
	},
}

// eventType is the type of a Responses event and whether it is the final
// one.
func eventType(data []byte) (string, bool) {
	ev, err := responses.ReadEvent(data)
	if err != nil {
		return "message", false
	}
	return ev.Type, ev.Final()
}

// withoutUsage sets a Response object's usage to null.
func withoutUsage(b []byte) []byte {
	var m map[string]json.RawMessage
	if json.Unmarshal(b, &m) != nil {
		return b
	}
	m["usage"] = json.RawMessage("null")
	out, err := json.Marshal(m)
	if err != nil {
		return b
	}
	return out
}

// finalWithoutUsage sets the usage of a final event's response to null.
func finalWithoutUsage(b []byte) []byte {
	var m map[string]json.RawMessage
	if json.Unmarshal(b, &m) != nil {
		return b
	}
	m["response"] = bytes.TrimSpace(withoutUsage(m["response"]))
	out, err := json.Marshal(m)
	if err != nil {
		return b
	}
	return out
}
