package gateway

import (
	"bytes"
	"context"

	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/x402"
)

// Staged answers (DESIGN.md D3, D14). When a settlement answers
// settlement_pending, the answer the buyer paid for is staged with the claim
// (internal/paywall, staged.go): the upstream's JSON body, or the whole SSE
// text of a stream (every "data: ...\n\n" event through [DONE]), as the
// upstream sent it. Once a retry sees it paid, the staged answer is served,
// annotated with the cost like a live one, with X-Llm4agents-Replay: staged;
// the upstream is never called again and nothing is charged again.

// replayHeader marks an answer served from a staged response.
const replayHeader = "X-Llm4agents-Replay"

// annotateSSE annotates the final event (a chat stream's usage chunk) of a
// staged or recorded SSE text on wi as stream does live; every other byte
// stays as kept.
func (s *Server) annotateSSE(ctx context.Context, wi wire, text []byte, q *quote, sr *x402.SettleResponse) []byte {
	out := make([]byte, 0, len(text)+512)
	for len(text) > 0 {
		ev, rest, found := bytes.Cut(text, []byte("\n\n"))
		text = rest
		if e, ok := wi.recorded(ev); ok && e.final {
			ev = wi.frame(e.typ, s.withCharge(ctx, wi, e, q, sr))
			ev = ev[:len(ev)-2]
		}
		out = append(out, ev...)
		if found {
			out = append(out, '\n', '\n')
		}
	}
	return out
}

// sseText is the SSE text of a stream as staged: each event as its wire
// frames it ("data: <event>\n\n" for chat). It stops growing past
// store.MaxStagedBody.
type sseText struct {
	buf  bytes.Buffer
	over bool
}

// add adds an event b, as framed.
func (t *sseText) add(b []byte) {
	if t.over {
		return
	}
	if t.buf.Len()+len(b) > store.MaxStagedBody {
		t.over = true
		return
	}
	t.buf.Write(b)
}
