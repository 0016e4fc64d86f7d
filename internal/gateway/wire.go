package gateway

import (
	"bytes"
	"encoding/json"

	"github.com/llm4agents/llm4agents/internal/chat"
	"github.com/llm4agents/llm4agents/internal/responses"
	"github.com/llm4agents/llm4agents/internal/upstream"
)

// wire is what tells a chat completion (or embeddings) answer from a
// passed-through Responses answer where the one payment flow reads, writes
// or annotates it: the flow (paid, complete, stream, deliverThenSettle,
// stageStream, serveAnswer, render) is the same, only how an answer and its
// events read, where the usage stands and where the annotation goes differ.
type wire struct {
	// usage is the usage a JSON answer body reports, nil when none.
	usage func(body []byte) *chat.Usage
	// recorded reads one event of a recorded stream's text (split at its
	// blank lines), false for what is no event of the upstream's.
	recorded func(ev []byte) (streamEvent, bool)
	// text is the output of a JSON answer body, counted when the upstream
	// reports no usage.
	text func(body []byte) string

	// first reads an upstream stream up to and including its first event
	// with content (D2); next reads its next event (io.EOF at its end).
	first func(st upstream.Stream) ([]streamEvent, error)
	next  func(st upstream.Stream) (streamEvent, error)
	// frame is an event as written to the client and to the recorded text.
	frame func(typ string, data []byte) []byte
	// annotateEvent adds the charge to the data of a stream's final event.
	annotateEvent func(data []byte, info any) []byte
	// broken is the in-band error event of a stream that broke after the
	// payment, and unfinished the event that carries the charge of an upto
	// stream that sent no final event.
	broken     func(msg string) streamEvent
	unfinished func() streamEvent
	// done follows a stream's last event, nil where the final event ends
	// the stream; endsAtFinal says an upto stream is read no further than
	// its final event.
	done        []byte
	endsAtFinal bool
}

// streamEvent is one event of an upstream stream as the paid stream sees
// it: its data, its Responses event type ("" for a chat chunk), whether it
// is the final event that carries the usage and the charge (a chat stream's
// usage chunk, a Responses stream's response.completed and the like), and
// that usage.
type streamEvent struct {
	data  []byte
	typ   string
	final bool
	usage *chat.Usage
}

// chatWire is the wire of chat completions and embeddings: the usage is the
// body's (or its usage chunk's) usage field, and the annotation goes at the
// top level of the body or of the usage chunk.
var chatWire = wire{
	usage: completionUsage,
	recorded: func(ev []byte) (streamEvent, bool) {
		data, ok := bytes.CutPrefix(ev, []byte("data: "))
		if !ok || bytes.Equal(data, []byte("[DONE]")) {
			return streamEvent{}, false
		}
		return chunkEvent(data), true
	},
	text: completionText,

	first: func(st upstream.Stream) ([]streamEvent, error) {
		held, err := firstContent(st)
		if err != nil {
			return nil, err
		}
		evs := make([]streamEvent, len(held))
		for i, ev := range held {
			evs[i] = chunkEvent(ev)
		}
		return evs, nil
	},
	next: func(st upstream.Stream) (streamEvent, error) {
		ev, err := st.Next()
		if err != nil {
			return streamEvent{}, err
		}
		return chunkEvent(ev), nil
	},
	frame: func(_ string, data []byte) []byte {
		return append(append([]byte("data: "), data...), '\n', '\n')
	},
	annotateEvent: annotate,
	broken: func(msg string) streamEvent {
		return streamEvent{data: mustJSON(chat.ErrorBody{Error: chat.ErrorDetail{
			Message: msg, Type: "upstream_error", Code: "upstream_stream_broken"}})}
	},
	unfinished: func() streamEvent {
		return streamEvent{data: []byte(`{"object":"chat.completion.chunk","choices":[]}`)}
	},
	done: []byte("data: [DONE]\n\n"),
}

// responsesWire is the wire of a passed-through Responses call: the usage
// is read in the Responses API's names, from the Response or its final
// event, and the annotation goes into the response object.
var responsesWire = wire{
	usage: func(body []byte) *chat.Usage {
		u, _ := responses.ResponseUsage(body)
		return u
	},
	recorded: func(ev []byte) (streamEvent, bool) {
		data, ok := eventData(ev)
		if !ok {
			return streamEvent{}, false
		}
		e, err := responses.ReadEvent(data)
		if err != nil {
			return streamEvent{}, false
		}
		return respEvent{data: data, ev: e}.streamEvent(), true
	},
	text: responses.OutputText,

	first: func(st upstream.Stream) ([]streamEvent, error) {
		held, err := firstForwardContent(st)
		if err != nil {
			return nil, err
		}
		evs := make([]streamEvent, len(held))
		for i, e := range held {
			evs[i] = e.streamEvent()
		}
		return evs, nil
	},
	next: func(st upstream.Stream) (streamEvent, error) {
		e, err := nextEvent(st)
		return e.streamEvent(), err
	},
	frame:         frame,
	annotateEvent: annotateResponse,
	broken:        func(msg string) streamEvent { return brokenEvent(msg).streamEvent() },
	unfinished: func() streamEvent {
		return brokenEvent("the upstream stream ended before its final event").streamEvent()
	},
	endsAtFinal: true,
}

// chunkEvent is a chat stream's chunk as the paid stream sees it: final
// when it carries the usage.
func chunkEvent(ev []byte) streamEvent {
	u := usageOf(ev)
	return streamEvent{data: ev, final: u != nil, usage: u}
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
