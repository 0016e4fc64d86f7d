package interop_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/accounts/abi/bind"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/ethereum/go-ethereum/ethclient"
	"github.com/google/go-cmp/cmp"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/respjson"
	"github.com/openai/openai-go/v3/responses"

	"github.com/llm4agents/llm4agents/client"
	"github.com/llm4agents/llm4agents/internal/chain"
	"github.com/llm4agents/llm4agents/internal/chat"
	"github.com/llm4agents/llm4agents/internal/config"
	"github.com/llm4agents/llm4agents/internal/facilitator"
	"github.com/llm4agents/llm4agents/internal/gateway"
	"github.com/llm4agents/llm4agents/internal/pricing"
	"github.com/llm4agents/llm4agents/internal/store/sqlite"
	"github.com/llm4agents/llm4agents/internal/testchain"
	"github.com/llm4agents/llm4agents/internal/upstream"
	"github.com/llm4agents/llm4agents/x402"
	"github.com/llm4agents/llm4agents/x402/evm/exact"
)

// The tests in this file pay `llm4agents serve` on anvil with the official
// OpenAI clients: the Go SDK over our paying client.Transport,
// and the npm client whose fetch is wrapped by @x402/fetch.

const (
	// sdkModel is the paid model of gatewayConfigYAML: the demo upstream.
	sdkModel = "demo"
	// sdkModelCap is its max_output_tokens.
	sdkModelCap = 256
	// sdkEmbedModel is gatewayConfigYAML's embeddings model, on the demo
	// upstream.
	sdkEmbedModel = "demo-embed"
	// sdkAPIKey is what the SDKs send as their bearer; not an sk-l4a- key, so
	// the gateway ignores it (D12).
	sdkAPIKey      = "unused"
	sdkPrompt      = "Say hello to the official OpenAI client"
	sdkCallTimeout = 60 * time.Second // one SDK call, payment and settlement included
	// facilitatorKeyEnv is where serve reads the in-process facilitator's key.
	facilitatorKeyEnv = "LLM4AGENTS_FACILITATOR_KEY"
)

// Quotes, in atomic units of the 6-decimal token. The demo model costs 1 unit
// per input token and 200 per output token, and a quote is rounded up to the
// cent (10000 units): with prompts far under 7200 tokens, the output bound alone
// sets it.
const (
	quoteMaxTokens64  = "20000" // 64 x 200 = 12800, plus the prompt
	quoteMaxTokens100 = "30000" // 100 x 200 = 20000, plus the prompt
	quoteModelCap     = "60000" // no cap asked: the model's 256 (D13), 51200 plus the prompt
)

// gatewayConfigYAML is the serve configuration the tests run: anvil, our token,
// the in-process facilitator, a SQLite store and the demo upstream. Filled by
// startGateway.
const gatewayConfigYAML = `# llm4agents serve --config: TestOpenAI* on anvil
listen: %[1]s
network:
  id: %[2]s
  rpc_url: %[3]s
  asset: %[4]s
  asset_name: %[5]s
  asset_version: "%[6]s"
  decimals: 6
  pay_to: %[7]s
facilitator:
  mode: in-process
  key_env: %[8]s
  settle_timeout: 20s
store:
  dsn: sqlite://%[9]s
limits:
  upstream_timeout: 30s
upstreams:
  - name: demo
    type: demo
models:
  - id: demo
    upstream: demo
    price: { input: "1000000", output: "200000000" }
    max_output_tokens: 256
  - id: demo-embed
    upstream: demo
    kind: embeddings
    price: { input: "1000000000" }
`

// TestOpenAIGoSDK pays the gateway with the official OpenAI Go SDK over our
// client.Transport: a completion and a stream, each paid exactly once, and two
// requests the gateway refuses before any payment.
func TestOpenAIGoSDK(t *testing.T) {
	requireTools(t)
	c := newChain(t)
	gw := startGateway(t, c)
	mark := c.mark(t, gw.Facilitator)

	wire := &wireLog{}
	base := http.DefaultTransport.(*http.Transport).Clone()
	t.Cleanup(base.CloseIdleConnections)
	pay := &client.Transport{
		Base:   &recordingTransport{next: base, log: wire},
		Signer: exact.NewKeySigner(testchain.DevKey(payerIdx)),
		Policy: client.Policy{
			MaxPerRequest: big.NewInt(1_000_000), Budget: big.NewInt(10_000_000),
			Assets: []client.Asset{{Network: network, Address: c.token.Hex()}},
		},
	}
	// The SDK's own retries stay on (2 by default): a paid call must still be
	// paid once.
	sdk := openai.NewClient(
		option.WithBaseURL(gw.URL+"/v1"),
		option.WithAPIKey(sdkAPIKey),
		option.WithHTTPClient(&http.Client{Transport: pay}),
	)
	messages := []openai.ChatCompletionMessageParamUnion{openai.UserMessage(sdkPrompt)}
	var paid []paidCall

	t.Run("non-streaming", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), sdkCallTimeout)
		defer cancel()
		var raw *http.Response
		n := wire.len()
		comp, err := sdk.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model: sdkModel, Messages: messages, MaxTokens: openai.Int(64),
		}, option.WithResponseInto(&raw))
		if err != nil {
			t.Fatalf("Chat.Completions.New: %v%s", err, describeAPIError(err))
		}
		r := callResult{Wire: wire.since(n), Status: raw.StatusCode}
		if len(comp.Choices) > 0 {
			r.Content = comp.Choices[0].Message.Content
		}
		if comp.JSON.Usage.Valid() {
			r.Usage = sdkUsage(comp.Usage)
		}
		r.Cost = extraCost(t, comp.JSON.ExtraFields)
		r.PaymentResponse = settleResponse(t, raw)
		paid = append(paid, checkPaidCall(t, r, quoteMaxTokens64, 64, false))
	})

	t.Run("streaming", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), sdkCallTimeout)
		defer cancel()
		var raw *http.Response
		n := wire.len()
		// No StreamOptions: usage comes anyway, since the gateway asks the
		// upstream for it.
		stream := sdk.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
			Model: sdkModel, Messages: messages, MaxCompletionTokens: openai.Int(100),
		}, option.WithResponseInto(&raw))
		defer func() { _ = stream.Close() }()
		var acc openai.ChatCompletionAccumulator
		r := callResult{}
		usageAt := 0 // the number of the chunk that carried usage
		for stream.Next() {
			chunk := stream.Current()
			r.Chunks++
			if !acc.AddChunk(chunk) {
				t.Errorf("chunk %d rejected by the SDK's accumulator: %s", r.Chunks, chunk.RawJSON())
			}
			if chunk.JSON.Usage.Valid() {
				r.UsageChunks++
				usageAt = r.Chunks
				if len(chunk.Choices) != 0 {
					t.Errorf("the usage chunk has %d choices, want none (OpenAI's shape): %s", len(chunk.Choices), chunk.RawJSON())
				}
				if r.Cost = extraCost(t, chunk.JSON.ExtraFields); r.Cost == nil {
					t.Errorf("the usage chunk has no x_llm4agents: %s", chunk.RawJSON())
				}
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatalf("stream: %v%s", err, describeAPIError(err))
		}
		if usageAt != r.Chunks {
			t.Errorf("usage came in chunk %d of %d, want the last", usageAt, r.Chunks)
		}
		if raw == nil {
			t.Fatal("the SDK gave no *http.Response for the stream")
		}
		r.Wire, r.Status = wire.since(n), raw.StatusCode
		if len(acc.Choices) > 0 {
			r.Content = acc.Choices[0].Message.Content
		}
		r.Usage = sdkUsage(acc.Usage) // zero unless the usage chunk was accumulated
		r.PaymentResponse = settleResponse(t, raw)
		paid = append(paid, checkPaidCall(t, r, quoteMaxTokens100, 100, true))
	})

	// The Responses API: its input is the prompt alone, so it is quoted as
	// the chat call with max_tokens 64 is.
	respParams := responses.ResponseNewParams{
		Model: sdkModel, Input: responses.ResponseNewParamsInputUnion{OfString: openai.String(sdkPrompt)}, MaxOutputTokens: openai.Int(64),
	}
	t.Run("responses", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), sdkCallTimeout)
		defer cancel()
		var raw *http.Response
		n := wire.len()
		resp, err := sdk.Responses.New(ctx, respParams, option.WithResponseInto(&raw))
		if err != nil {
			t.Fatalf("Responses.New: %v%s", err, describeAPIError(err))
		}
		r := callResult{Wire: wire.since(n), Status: raw.StatusCode, Content: resp.OutputText(), Usage: responsesUsage(resp.Usage)}
		r.Cost = extraCost(t, resp.JSON.ExtraFields)
		r.PaymentResponse = settleResponse(t, raw)
		paid = append(paid, checkPaidCallAt(t, "/v1/responses", r, quoteMaxTokens64, 64, false))
	})

	t.Run("responses streaming", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), sdkCallTimeout)
		defer cancel()
		var raw *http.Response
		n := wire.len()
		stream := sdk.Responses.NewStreaming(ctx, respParams, option.WithResponseInto(&raw))
		defer func() { _ = stream.Close() }()
		r := callResult{}
		var text strings.Builder
		for stream.Next() {
			ev := stream.Current()
			r.Chunks++
			switch ev.Type {
			case "response.output_text.delta":
				text.WriteString(ev.Delta)
			case "response.completed", "response.incomplete":
				r.UsageChunks++
				r.Usage = responsesUsage(ev.Response.Usage)
				r.Cost = extraCost(t, ev.Response.JSON.ExtraFields)
				if got := ev.Response.OutputText(); got != text.String() {
					t.Errorf("the final response's text %q is not the deltas' %q", got, text.String())
				}
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatalf("stream: %v%s", err, describeAPIError(err))
		}
		if raw == nil {
			t.Fatal("the SDK gave no *http.Response for the stream")
		}
		r.Wire, r.Status, r.Content = wire.since(n), raw.StatusCode, text.String()
		r.PaymentResponse = settleResponse(t, raw)
		paid = append(paid, checkPaidCallAt(t, "/v1/responses", r, quoteMaxTokens64, 64, true))
	})

	t.Run("unknown model", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), sdkCallTimeout)
		defer cancel()
		n := wire.len()
		_, err := sdk.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "no-such-model", Messages: messages})
		checkRefusedCall(t, sdkRefusal(t, err, wire.since(n)), http.StatusNotFound, "model_not_found")
	})

	t.Run("max_tokens above the cap", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), sdkCallTimeout)
		defer cancel()
		n := wire.len()
		_, err := sdk.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model: sdkModel, Messages: messages, MaxTokens: openai.Int(sdkModelCap + 1),
		})
		checkRefusedCall(t, sdkRefusal(t, err, wire.since(n)), http.StatusBadRequest, "max_tokens_too_large")
	})

	c.checkPaidOnChain(t, mark, gw.Facilitator, paid)
	if want := sumAmounts(t, paid); pay.Spent().Cmp(want) != 0 {
		t.Errorf("client.Transport spent %s, want %s", pay.Spent(), want)
	}
}

// TestOpenAINodeClient pays the gateway with the official `openai` npm client
// whose fetch is wrapped by @x402/fetch (openai-client.mjs).
func TestOpenAINodeClient(t *testing.T) {
	requireTools(t)
	requireNPMPackage(t, "openai")
	c := newChain(t)
	gw := startGateway(t, c)
	mark := c.mark(t, gw.Facilitator)

	out := runNodeScript(t, "openai-client.mjs", nil,
		"BASE_URL="+gw.URL+"/v1",
		"PAYER_KEY="+keyHex(testchain.DevKey(payerIdx)),
		"TOKEN="+c.token.Hex(),
		"NETWORK="+network,
		"MODEL="+sdkModel,
		"EMBED_MODEL="+sdkEmbedModel,
	)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("openai-client.mjs output:\n%s", out)
		}
	})
	var got struct {
		NonStreaming        callResult `json:"nonStreaming"`
		Streaming           callResult `json:"streaming"`
		UnknownModel        callResult `json:"unknownModel"`
		MaxTokensAboveCap   callResult `json:"maxTokensAboveCap"`
		Embeddings          callResult `json:"embeddings"`
		EmbeddingsChatModel callResult `json:"embeddingsChatModel"`
		Responses           callResult `json:"responses"`
		ResponsesStreaming  callResult `json:"responsesStreaming"`
		ResponsesBuiltin    callResult `json:"responsesBuiltinTool"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("openai-client.mjs output %q: %v", out, err)
	}

	var paid []paidCall
	t.Run("non-streaming", func(t *testing.T) {
		paid = append(paid, checkPaidCall(t, got.NonStreaming, quoteModelCap, sdkModelCap, false))
	})
	t.Run("streaming", func(t *testing.T) {
		paid = append(paid, checkPaidCall(t, got.Streaming, quoteMaxTokens64, 64, true))
	})
	t.Run("unknown model", func(t *testing.T) {
		checkRefusedCall(t, got.UnknownModel, http.StatusNotFound, "model_not_found")
	})
	t.Run("max_tokens above the cap", func(t *testing.T) {
		checkRefusedCall(t, got.MaxTokensAboveCap, http.StatusBadRequest, "max_tokens_too_large")
	})
	// The Responses API: its input is the chat messages' one user message,
	// so it is quoted as the chat call with max_tokens 64 is.
	t.Run("responses", func(t *testing.T) {
		paid = append(paid, checkPaidCallAt(t, "/v1/responses", got.Responses, quoteMaxTokens64, 64, false))
	})
	t.Run("responses streaming", func(t *testing.T) {
		paid = append(paid, checkPaidCallAt(t, "/v1/responses", got.ResponsesStreaming, quoteMaxTokens64, 64, true))
	})
	t.Run("responses with a built-in tool", func(t *testing.T) {
		checkRefusedCall(t, got.ResponsesBuiltin, http.StatusBadRequest, "invalid_request")
	})
	t.Run("embeddings", func(t *testing.T) {
		paid = append(paid, checkEmbeddingsCall(t, got.Embeddings))
	})
	t.Run("embeddings with a chat model", func(t *testing.T) {
		checkRefusedCall(t, got.EmbeddingsChatModel, http.StatusBadRequest, "model_not_supported")
	})
	c.checkPaidOnChain(t, mark, gw.Facilitator, paid)
}

// checkEmbeddingsCall asserts that openai-client.mjs's embeddings call was
// quoted its input tokens at demo-embed's price, paid exactly once, and
// answered with two vectors the client decoded from base64.
func checkEmbeddingsCall(t *testing.T, r callResult) paidCall {
	t.Helper()
	counter := pricing.NewCounter()
	var tokens int64
	for _, s := range []string{"Embed me with the official OpenAI client", "and me too"} {
		n, err := counter.Tokens(pricing.O200kBase, s)
		if err != nil {
			t.Fatal(err)
		}
		tokens += n
	}
	quote := pricing.Quote(tokens, 0, pricing.Price{Input: 1_000_000_000}, 6).String()
	var steps []string
	for _, e := range r.Wire {
		steps = append(steps, fmt.Sprintf("%s paid=%t %d", e.Path, e.Paid, e.Status))
	}
	if diff := cmp.Diff([]string{"/v1/embeddings paid=false 402", "/v1/embeddings paid=true 200"}, steps); diff != "" {
		t.Errorf("requests under the payment layer (-want +got):\n%s", diff)
	}
	if len(r.Wire) == 2 && (r.Wire[0].Quote != quote || r.Wire[1].Charged != quote) {
		t.Errorf("quoted %q, charged %q; want %s (%d tokens)", r.Wire[0].Quote, r.Wire[1].Charged, quote, tokens)
	}
	if r.Status != http.StatusOK || r.Vectors != 2 || r.Dimensions != 32 {
		t.Errorf("status %d, %d vectors of %d dimensions; want 200, 2 of 32", r.Status, r.Vectors, r.Dimensions)
	}
	if u := r.Usage; u == nil || u.PromptTokens != tokens || u.TotalTokens != tokens {
		t.Errorf("usage %+v, want %d prompt tokens", u, tokens)
	}
	sr := r.PaymentResponse
	if sr == nil || !sr.Success || sr.Network != network || !txHashRE.MatchString(sr.Transaction) {
		t.Fatalf("PAYMENT-RESPONSE = %+v; want a settlement on %s", sr, network)
	}
	if ci := r.Cost; ci == nil || ci.Charged != quote || ci.Transaction != sr.Transaction {
		t.Errorf("x_llm4agents = %+v; want charged %s in %s", ci, quote, sr.Transaction)
	}
	return paidCall{quote: quote, settle: sr}
}

// --- What a call showed ---

// callResult is what one chat completion through an official client showed:
// the exchanges on the wire and what the client returned. openai-client.mjs
// prints the same shape.
type callResult struct {
	Wire            []wireExchange       `json:"wire"`
	Status          int                  `json:"status"`
	Content         string               `json:"content"`
	Chunks          int                  `json:"chunks"`
	UsageChunks     int                  `json:"usageChunks"` // chunks with a usage object
	Usage           *usage               `json:"usage"`
	Cost            *costInfo            `json:"cost"` // the body's (or last chunk's) x_llm4agents
	PaymentResponse *x402.SettleResponse `json:"paymentResponse"`
	// Vectors and Dimensions are an embeddings call's: how many vectors the
	// client decoded, and the length of the first.
	Vectors    int `json:"vectors"`
	Dimensions int `json:"dimensions"`
	// Code and Type are the OpenAI error's, for a refused call.
	Code string `json:"code"`
	Type string `json:"type"`
}

// wireExchange is one HTTP exchange under the client's payment layer.
type wireExchange struct {
	Path       string   `json:"path"`
	Paid       bool     `json:"paid"`       // the request carried PAYMENT-SIGNATURE
	Bearer     string   `json:"bearer"`     // its Authorization header
	RetryCount string   `json:"retryCount"` // X-Stainless-Retry-Count: the SDK's attempt
	BodyKeys   []string `json:"bodyKeys"`   // the JSON body's top-level keys, sorted
	Status     int      `json:"status"`
	Quote      string   `json:"quote"`   // a 402's PAYMENT-REQUIRED accepts[0].amount
	Charged    string   `json:"charged"` // X-Llm4agents-Charged
}

type usage struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	TotalTokens      int64 `json:"total_tokens"`
}

// costInfo is the part of the gateway's x_llm4agents the tests read.
type costInfo struct {
	Charged     string `json:"charged"`
	Network     string `json:"network"`
	Transaction string `json:"transaction"`
	Usage       *usage `json:"usage"`
}

// paidCall is a call the buyer paid: the quote of its 402 and the settlement
// its answer reported.
type paidCall struct {
	quote  string
	settle *x402.SettleResponse
}

// checkPaidCall asserts that r was quoted wantQuote, paid exactly once (one
// unpaid request answered 402, then one paid request answered 200, both the
// SDK's first attempt), and answered with content, usage and the settlement.
func checkPaidCall(t *testing.T, r callResult, wantQuote string, outputCap int64, streaming bool) paidCall {
	t.Helper()
	return checkPaidCallAt(t, "/v1/chat/completions", r, wantQuote, outputCap, streaming)
}

// checkPaidCallAt is checkPaidCall for a call to path.
func checkPaidCallAt(t *testing.T, path string, r callResult, wantQuote string, outputCap int64, streaming bool) paidCall {
	t.Helper()
	return checkPaidCallOn(t, network, path, r, wantQuote, outputCap, streaming)
}

// checkPaidCallOn is checkPaidCallAt for a call paid on network net.
func checkPaidCallOn(t *testing.T, net, path string, r callResult, wantQuote string, outputCap int64, streaming bool) paidCall {
	t.Helper()
	type step struct {
		Path       string
		Paid       bool
		Bearer     string
		RetryCount string
		Status     int
	}
	var steps []step
	for _, e := range r.Wire {
		steps = append(steps, step{e.Path, e.Paid, e.Bearer, e.RetryCount, e.Status})
	}
	first := step{path, false, "Bearer " + sdkAPIKey, "0", http.StatusPaymentRequired}
	second := first
	second.Paid, second.Status = true, http.StatusOK
	if diff := cmp.Diff([]step{first, second}, steps); diff != "" {
		t.Errorf("requests under the payment layer (-want +got):\n%s", diff)
	}
	if len(r.Wire) > 0 && r.Wire[0].Quote != wantQuote {
		t.Errorf("402 quoted %q, want %s", r.Wire[0].Quote, wantQuote)
	}
	// Streams carry the charge header too: the amount is known before the
	// first byte.
	if len(r.Wire) > 1 && r.Wire[1].Charged != wantQuote {
		t.Errorf("X-Llm4agents-Charged = %q, want the quote %s", r.Wire[1].Charged, wantQuote)
	}
	for i, e := range r.Wire {
		hasStream, hasOptions := slices.Contains(e.BodyKeys, "stream"), slices.Contains(e.BodyKeys, "stream_options")
		if hasStream != streaming || hasOptions {
			t.Errorf("request %d body keys %v: want stream %t and no stream_options (the gateway injects include_usage)", i, e.BodyKeys, streaming)
		}
	}

	if r.Status != http.StatusOK {
		t.Errorf("status %d, want 200", r.Status)
	}
	if !strings.Contains(r.Content, "demo model") {
		t.Errorf("content %q: want the demo model's answer", r.Content)
	}
	if streaming && r.Chunks < 3 {
		t.Errorf("%d chunks: want a real stream", r.Chunks)
	}
	if streaming && r.UsageChunks != 1 {
		t.Errorf("%d chunks carried usage, want exactly 1 (the last)", r.UsageChunks)
	}
	u := r.Usage
	switch {
	case u == nil:
		t.Error("no usage")
	case u.PromptTokens <= 0 || u.CompletionTokens <= 0 || u.CompletionTokens > outputCap || u.TotalTokens != u.PromptTokens+u.CompletionTokens:
		t.Errorf("usage %+v: want prompt and completion tokens, completion at most %d, total their sum", *u, outputCap)
	}

	sr := r.PaymentResponse
	payer := testchain.DevAddress(payerIdx).Hex()
	if sr == nil || !sr.Success || sr.Network != net || sr.Payer != payer || !txHashRE.MatchString(sr.Transaction) {
		t.Fatalf("PAYMENT-RESPONSE = %+v; want success on %s by %s with a transaction", sr, net, payer)
	}
	if ci := r.Cost; ci == nil || ci.Charged != wantQuote || ci.Network != net || ci.Transaction != sr.Transaction ||
		u != nil && (ci.Usage == nil || *ci.Usage != *u) {
		t.Errorf("x_llm4agents = %+v; want charged %s, transaction %s and the usage %+v", ci, wantQuote, sr.Transaction, u)
	}
	return paidCall{quote: wantQuote, settle: sr}
}

// checkRefusedCall asserts that r was refused with status and code by one
// unpaid request, which the SDK did not retry.
func checkRefusedCall(t *testing.T, r callResult, status int, code string) {
	t.Helper()
	if r.Status != status || r.Code != code || r.Type != "invalid_request_error" {
		t.Errorf("refused with status %d, code %q, type %q; want %d, %q, invalid_request_error", r.Status, r.Code, r.Type, status, code)
	}
	if len(r.Wire) != 1 || r.Wire[0].Paid || r.Wire[0].Status != status || r.Wire[0].Quote != "" {
		t.Errorf("requests under the payment layer: %+v; want one unpaid request answered %d", r.Wire, status)
	}
}

// sdkRefusal reads the *openai.Error a refused Go SDK call returned.
func sdkRefusal(t *testing.T, err error, wire []wireExchange) callResult {
	t.Helper()
	apiErr, ok := errors.AsType[*openai.Error](err)
	if !ok {
		t.Fatalf("error %v (%T), want an *openai.Error", err, err)
	}
	return callResult{Wire: wire, Status: apiErr.StatusCode, Code: apiErr.Code, Type: apiErr.Type}
}

// describeAPIError adds an *openai.Error's body to a failure message.
func describeAPIError(err error) string {
	if apiErr, ok := errors.AsType[*openai.Error](err); ok {
		return fmt.Sprintf(" (status %d, body %s)", apiErr.StatusCode, apiErr.RawJSON())
	}
	return ""
}

// responsesUsage is a Responses usage as chat usage, to check it as a chat
// call's.
func responsesUsage(u responses.ResponseUsage) *usage {
	return &usage{PromptTokens: u.InputTokens, CompletionTokens: u.OutputTokens, TotalTokens: u.TotalTokens}
}

func sdkUsage(u openai.CompletionUsage) *usage {
	return &usage{PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens, TotalTokens: u.TotalTokens}
}

// extraCost decodes the gateway's x_llm4agents from the fields the SDK did not
// know, or returns nil when there is none.
func extraCost(t *testing.T, extra map[string]respjson.Field) *costInfo {
	t.Helper()
	f, ok := extra["x_llm4agents"]
	if !ok || f.Raw() == "" {
		return nil
	}
	var ci costInfo
	if err := json.Unmarshal([]byte(f.Raw()), &ci); err != nil {
		t.Errorf("x_llm4agents %s: %v", f.Raw(), err)
		return nil
	}
	return &ci
}

func settleResponse(t *testing.T, resp *http.Response) *x402.SettleResponse {
	t.Helper()
	if resp == nil {
		return nil
	}
	sr, err := client.SettleResponse(resp)
	if err != nil {
		t.Errorf("PAYMENT-RESPONSE: %v", err)
		return nil
	}
	return sr
}

// --- The wire under the Go SDK ---

// wireLog records exchanges; safe for concurrent use.
type wireLog struct {
	mu sync.Mutex
	ex []wireExchange
}

func (w *wireLog) add(e wireExchange) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.ex = append(w.ex, e)
}

func (w *wireLog) len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.ex)
}

func (w *wireLog) since(n int) []wireExchange {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.ex[n:])
}

// recordingTransport records every request client.Transport sends, and the
// headers of its answer.
type recordingTransport struct {
	next http.RoundTripper
	log  *wireLog
}

func (rt *recordingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	e := wireExchange{
		Path:       req.URL.Path,
		Paid:       req.Header.Get(x402.HeaderPaymentSignature) != "",
		Bearer:     req.Header.Get("Authorization"),
		RetryCount: req.Header.Get("X-Stainless-Retry-Count"),
	}
	if req.GetBody != nil {
		if body, err := req.GetBody(); err == nil {
			var fields map[string]json.RawMessage
			if json.NewDecoder(body).Decode(&fields) == nil {
				for k := range fields {
					e.BodyKeys = append(e.BodyKeys, k)
				}
				slices.Sort(e.BodyKeys)
			}
			_ = body.Close()
		}
	}
	resp, err := rt.next.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	e.Status = resp.StatusCode
	e.Charged = resp.Header.Get("X-Llm4agents-Charged")
	if h := resp.Header.Get(x402.HeaderPaymentRequired); h != "" {
		if pr, err := x402.DecodePaymentRequired(h); err == nil && len(pr.Accepts) > 0 {
			e.Quote = pr.Accepts[0].Amount
		}
	}
	rt.log.add(e)
	return resp, nil
}

// --- The gateway ---

// gatewayServer is `llm4agents serve` running in this process.
type gatewayServer struct {
	URL         string         // its public URL, http://127.0.0.1:<port>
	Facilitator common.Address // the in-process facilitator's settling account
}

// startGateway runs `llm4agents serve` on c in this process: it writes the
// YAML configuration, parses it with the config package, and wires the gateway
// from it as cmd/llm4agents runServe and buildGateway do (package main cannot
// be imported; keep the two in step). It listens on a free loopback port until
// the test ends.
func startGateway(t *testing.T, c *testChain) *gatewayServer {
	t.Helper()
	return startGatewayWith(t, c, false)
}

// uptoYAML turns upto on in gatewayConfigYAML's network, with no minimum
// charge, so that a charge below the quote shows.
const uptoYAML = "  pay_to: %[7]s\n  schemes: [exact, upto]\n  upto: { min_charge: \"0\" }\n"

// startGatewayWith is startGateway, offering upto beside exact when upto is
// set, as serve does with network.schemes [exact, upto].
func startGatewayWith(t *testing.T, c *testChain, withUpto bool, more ...*testChain) *gatewayServer {
	t.Helper()
	return startGatewayOpts(t, c, gatewayOpts{upto: withUpto, more: more})
}

// gatewayOpts are startGatewayOpts' variations on gatewayConfigYAML.
type gatewayOpts struct {
	// upto offers upto beside exact.
	upto bool
	// responses says the demo upstream speaks the Responses API: chat
	// models pass /v1/responses through to it.
	responses bool
	// more are further networks every 402 offers, each settled by its own
	// in-process facilitator.
	more []*testChain
}

// startGatewayOpts is startGateway with opts.
func startGatewayOpts(t *testing.T, c *testChain, opts gatewayOpts) *gatewayServer {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), chainTimeout)
	defer cancel()
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	format := gatewayConfigYAML
	if opts.upto {
		format = strings.Replace(format, "  pay_to: %[7]s\n", uptoYAML, 1)
	}
	if opts.responses {
		format = strings.Replace(format, "    type: demo\n", "    type: demo\n    responses: true\n", 1)
	}
	yml := fmt.Sprintf(format, ln.Addr(), network, c.anvil.URL, c.token.Hex(), tokenName, tokenVersion,
		testchain.DevAddress(payToIdx).Hex(), facilitatorKeyEnv, filepath.Join(dir, "llm4agents.db"))
	path := filepath.Join(dir, "llm4agents.yaml")
	if err := os.WriteFile(path, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse(data)
	if err != nil {
		t.Fatalf("%s:\n%v\n%s", path, err, data)
	}
	environ := map[string]string{facilitatorKeyEnv: keyHex(testchain.DevKey(facilitatorIdx))}
	getenv := func(name string) string { return environ[name] }
	log := slog.New(slog.NewJSONHandler(newLogBuffer(t, "gateway"), nil))

	// runServe: dial the node, check its chain id, read the key.
	rpcURL, err := cfg.Network.RPC(getenv)
	if err != nil {
		t.Fatal(err)
	}
	node, err := ethclient.DialContext(ctx, rpcURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(node.Close)
	id, err := node.ChainID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want, _ := cfg.Network.ChainID(); want.Cmp(id) != 0 {
		t.Fatalf("network.id %s, node's chain id %s", cfg.Network.ID, id)
	}
	hexKey, err := cfg.Facilitator.Key(getenv)
	if err != nil {
		t.Fatal(err)
	}
	key, err := crypto.HexToECDSA(strings.TrimPrefix(hexKey, "0x"))
	if err != nil {
		t.Fatal(err)
	}

	// buildGateway.
	dbPath, ok := cfg.Store.SQLitePath()
	if !ok {
		t.Fatalf("store.dsn %s is not sqlite", cfg.Store.DSN)
	}
	db, err := sqlite.Open(ctx, dbPath, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := db.Close(); err != nil {
			t.Errorf("close store: %v", err)
		}
	})
	asset, _ := cfg.Network.AssetAddress()
	chainID, _ := cfg.Network.ChainID()
	maxFee, err := cfg.Facilitator.MaxFee()
	if err != nil {
		t.Fatal(err)
	}
	sender, err := chain.NewSender(node, key, chainID, chain.SenderConfig{MaxFeePerGas: maxFee, PollInterval: 200 * time.Millisecond}, log)
	if err != nil {
		t.Fatal(err)
	}
	fac, err := facilitator.New(facilitator.Config{
		Network: cfg.Network.ID, SettleTimeout: cfg.Facilitator.SettleTimeout,
		Assets:  []facilitator.Asset{{Address: asset, Name: cfg.Network.AssetName, Version: cfg.Network.AssetVersion}},
		Schemes: cfg.Network.Schemes,
	}, node, sender, db, log)
	if err != nil {
		t.Fatal(err)
	}
	rec := fac.StartReconciler(30 * time.Second)
	t.Cleanup(rec.Close)

	counter := pricing.NewCounter()
	providers := map[string]gateway.Provider{}
	for _, u := range cfg.Upstreams {
		if u.Type != config.UpstreamDemo {
			t.Fatalf("upstream %s: only the demo upstream is used here", u.Name)
		}
		providers[u.Name] = upstream.NewDemo(upstream.DemoConfig{
			Tokenizer:   upstream.TokenizerFunc(func(s string) int { n, _ := counter.Tokens(pricing.O200kBase, s); return int(n) }),
			CountPrompt: func(r *chat.Request) int64 { n, _ := counter.PromptTokens(r); return n },
		})
	}
	// serve's modelProvider: a chat model on an upstream with responses:
	// true speaks the Responses API.
	speaks := func(m config.Model) gateway.Provider {
		p := providers[m.Upstream]
		u := cfg.Upstream(m.Upstream)
		if m.Kind == config.KindEmbeddings || u == nil || !u.Responses {
			return p
		}
		rp, err := upstream.WithResponses(p)
		if err != nil {
			t.Fatal(err)
		}
		return rp
	}
	var models []gateway.Model
	for _, m := range cfg.Models {
		price, err := m.Price.Parse()
		if err != nil {
			t.Fatalf("model %s: %v", m.ID, err)
		}
		models = append(models, gateway.Model{
			ID: m.ID, UpstreamModel: m.UpstreamModel, Provider: speaks(m), Price: price,
			MaxOutputTokens: m.MaxOutputTokens, Encoding: m.Encoding,
			Embeddings: m.Kind == config.KindEmbeddings,
		})
	}
	var networks []gateway.PaymentNetwork
	for _, m := range opts.more {
		networks = append(networks, m.paymentNetwork(t, key, db, log))
	}
	gw, err := gateway.New(gateway.Config{
		Networks:  networks,
		PublicURL: cfg.PublicURL, Network: cfg.Network.ID, Asset: asset.Hex(),
		AssetName: cfg.Network.AssetName, AssetVersion: cfg.Network.AssetVersion, Decimals: cfg.Network.Decimals,
		PayTo: cfg.Network.PayTo, MaxTimeoutSeconds: int64(cfg.Network.MaxTimeoutSeconds),
		MaxBodyBytes: cfg.Limits.MaxBodyBytes, UpstreamTimeout: cfg.Limits.UpstreamTimeout,
		SettleTimeout: cfg.Facilitator.SettleTimeout, MaxStreamDuration: cfg.Limits.MaxStreamDuration,
		Owner: "interop-test", Models: models, Upto: gatewayUpto(t, cfg, sender.Address()),
	}, fac, db, log)
	if err != nil {
		t.Fatal(err)
	}

	// serve.
	srv := &http.Server{Handler: gw, ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("shut the gateway down: %v", err)
		}
		if err := <-served; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("gateway: %v", err)
		}
	})
	return &gatewayServer{URL: cfg.PublicURL, Facilitator: crypto.PubkeyToAddress(key.PublicKey)}
}

// requireNPMPackage skips the test when an npm package the scripts need is not
// installed (fails with LLM4AGENTS_TEST_REQUIRE_TOOLS=1).
func requireNPMPackage(t *testing.T, pkg string) {
	t.Helper()
	if _, err := os.Stat(filepath.Join("node_modules", pkg, "package.json")); err != nil {
		if os.Getenv(requireToolsEnv) == "1" {
			t.Fatalf("interop tools: %v", err)
		}
		t.Skipf("interop tools: %v (run npm ci in interop/; set %s=1 to fail instead)", err, requireToolsEnv)
	}
}

// --- On chain ---

// chainMark is the chain's state before a series of calls.
type chainMark struct {
	block    uint64
	balance  *big.Int // payTo's
	facNonce uint64   // the facilitator account's
}

func (c *testChain) mark(t *testing.T, fac common.Address) chainMark {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), chainTimeout)
	defer cancel()
	block, err := c.anvil.Client.BlockNumber(ctx)
	if err != nil {
		t.Fatal(err)
	}
	nonce, err := c.anvil.Client.NonceAt(ctx, fac, nil)
	if err != nil {
		t.Fatal(err)
	}
	return chainMark{block: block, balance: c.balance(t, testchain.DevAddress(payToIdx)), facNonce: nonce}
}

// checkPaidOnChain asserts that since m exactly the calls were paid: one
// token transfer to payTo per call, in order, from the payer, of the call's
// quote, in the transaction its PAYMENT-RESPONSE named; one transaction sent by
// the facilitator per call; and payTo's balance risen by the sum of the quotes.
func (c *testChain) checkPaidOnChain(t *testing.T, m chainMark, fac common.Address, calls []paidCall) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), chainTimeout)
	defer cancel()
	payTo := testchain.DevAddress(payToIdx)
	it, err := c.tokenContract.FilterTransfer(&bind.FilterOpts{Start: m.block + 1, Context: ctx}, nil, []common.Address{payTo})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = it.Close() }()
	type transfer struct {
		From  common.Address
		Value string
		Tx    string
	}
	var got, want []transfer
	for it.Next() {
		e := it.Event
		got = append(got, transfer{e.From, e.Value.String(), e.Raw.TxHash.Hex()})
	}
	if err := it.Error(); err != nil {
		t.Fatal(err)
	}
	for _, pc := range calls {
		want = append(want, transfer{testchain.DevAddress(payerIdx), pc.quote, pc.settle.Transaction})
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("transfers to payTo (-one per paid call +on chain):\n%s", diff)
	}
	nonce, err := c.anvil.Client.NonceAt(ctx, fac, nil)
	if err != nil {
		t.Fatal(err)
	}
	if sent := nonce - m.facNonce; sent != uint64(len(calls)) {
		t.Errorf("the facilitator sent %d transactions for %d paid calls", sent, len(calls))
	}
	c.checkBalanceRose(t, payTo, m.balance, sumAmounts(t, calls).String())
}

func sumAmounts(t *testing.T, calls []paidCall) *big.Int {
	t.Helper()
	sum := new(big.Int)
	for _, pc := range calls {
		sum.Add(sum, mustUint(t, pc.quote))
	}
	return sum
}
