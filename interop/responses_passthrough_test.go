package interop_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/llm4agents/llm4agents/internal/testchain"
)

// TestOpenAINodeClientResponsesPassThrough: the official openai client's
// responses.create, streamed and not, with @x402/fetch, pays a gateway
// whose upstream speaks the Responses API, one transfer per call. The calls
// carry truncation "auto", which only the pass-through takes (the
// translation to chat refuses it, and the script would fail on that 400):
// the SDK read the upstream's own Response and event stream.
func TestOpenAINodeClientResponsesPassThrough(t *testing.T) {
	requireTools(t)
	requireNPMPackage(t, "openai")
	c := newChain(t)
	gw := startGatewayOpts(t, c, gatewayOpts{responses: true})
	mark := c.mark(t, gw.Facilitator)

	out := runNodeScript(t, "openai-client.mjs", nil,
		"BASE_URL="+gw.URL+"/v1",
		"PAYER_KEY="+keyHex(testchain.DevKey(payerIdx)),
		"TOKEN="+c.token.Hex(),
		"NETWORK="+network,
		"MODEL="+sdkModel,
		"RESPONSES_PASSTHROUGH=1",
	)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("openai-client.mjs output:\n%s", out)
		}
	})
	var got struct {
		NonStreaming       callResult `json:"nonStreaming"`
		Streaming          callResult `json:"streaming"`
		Responses          callResult `json:"responses"`
		ResponsesStreaming callResult `json:"responsesStreaming"`
		ResponsesBuiltin   callResult `json:"responsesBuiltinTool"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("openai-client.mjs output %q: %v", out, err)
	}
	var paid []paidCall
	t.Run("chat still paid", func(t *testing.T) {
		paid = append(paid, checkPaidCall(t, got.NonStreaming, quoteModelCap, sdkModelCap, false))
		paid = append(paid, checkPaidCall(t, got.Streaming, quoteMaxTokens64, 64, true))
	})
	t.Run("responses passed through", func(t *testing.T) {
		paid = append(paid, checkPaidCallAt(t, "/v1/responses", got.Responses, quoteMaxTokens64, 64, false))
	})
	t.Run("responses streaming passed through", func(t *testing.T) {
		paid = append(paid, checkPaidCallAt(t, "/v1/responses", got.ResponsesStreaming, quoteMaxTokens64, 64, true))
	})
	t.Run("a hosted tool is refused", func(t *testing.T) {
		checkRefusedCall(t, got.ResponsesBuiltin, http.StatusBadRequest, "invalid_request")
	})
	if len(paid) != 4 {
		t.Fatalf("%d of 4 calls paid", len(paid))
	}
	c.checkPaidOnChain(t, mark, gw.Facilitator, paid)
}
