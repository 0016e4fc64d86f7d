package gateway_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"math/big"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/llm4agents/llm4agents/internal/embeddings"
	"github.com/llm4agents/llm4agents/internal/gateway"
	"github.com/llm4agents/llm4agents/internal/pricing"
	"github.com/llm4agents/llm4agents/internal/upstream"
	"github.com/llm4agents/llm4agents/internal/upstream/upstreamtest"
	"github.com/llm4agents/llm4agents/x402"
	"github.com/llm4agents/llm4agents/x402/evm/exact"
)

// embedPrice is an embeddings model's price: input only, 100 atomic units
// a token, so that a few thousand tokens move the quote past one cent.
var embedPrice = pricing.Price{Input: 100_000_000}

// embedModel is the embeddings model the tests sell beside "demo", served
// by prov; its encoding is the one OpenAI's embedding models use.
func embedModel(prov gateway.Provider) gateway.Model {
	return gateway.Model{ID: "embed", UpstreamModel: "text-embedding-3-small", Provider: prov, Price: embedPrice,
		Encoding: pricing.Cl100kBase, Embeddings: true, MaxInputTokens: embedMaxInput}
}

// embedMaxInput is embedModel's bound on one input: OpenAI's.
const embedMaxInput = 8192

// withEmbed adds embedModel, served by the chat model's upstream, to a
// gateway's config.
func withEmbed(cfg *gateway.Config) {
	cfg.Models = append(cfg.Models, embedModel(cfg.Models[0].Provider))
}

// embedQuote is what the gateway quotes for texts: their cl100k tokens at
// embedPrice, rounded up to the cent.
func embedQuote(t *testing.T, texts ...string) (tokens int64, amount *big.Int) {
	t.Helper()
	c := pricing.NewCounter()
	for _, s := range texts {
		n, err := c.Tokens(pricing.Cl100kBase, s)
		if err != nil {
			t.Fatal(err)
		}
		tokens += n
	}
	return tokens, pricing.Quote(tokens, 0, embedPrice, 6)
}

// postEmbed posts body to /v1/embeddings with hdr.
func postEmbed(t *testing.T, c *http.Client, url, body string, hdr http.Header) *http.Response {
	t.Helper()
	return postJSON(t, c, url+"/v1/embeddings", body, hdr)
}

// signedEmbed answers the 402 of an embeddings body with an exact payment of
// dev account i, and returns its PAYMENT-SIGNATURE and the offer.
func (e *env) signedEmbed(t *testing.T, body string, i int) (string, *x402.PaymentRequired) {
	t.Helper()
	resp := postEmbed(t, http.DefaultClient, e.srv.URL, body, nil)
	b := readAll(t, resp)
	if resp.StatusCode != http.StatusPaymentRequired {
		t.Fatalf("unpaid: %d %s", resp.StatusCode, b)
	}
	pr, err := x402.DecodePaymentRequired(resp.Header.Get(x402.HeaderPaymentRequired))
	if err != nil {
		t.Fatal(err)
	}
	p, err := exact.NewPaymentPayload(t.Context(), exact.NewKeySigner(e.chain.Keys[i]), pr, 0, exact.SignOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return encodeHeader(t, p), pr
}

// embedAnswer is an embeddings answer as a client reads it, with our
// annotation.
type embedAnswer struct {
	Object string `json:"object"`
	Data   []struct {
		Object    string          `json:"object"`
		Index     int             `json:"index"`
		Embedding json.RawMessage `json:"embedding"`
	} `json:"data"`
	Model string           `json:"model"`
	Usage embeddings.Usage `json:"usage"`
	Cost  struct {
		Charged     string          `json:"charged"`
		Transaction string          `json:"transaction"`
		Balance     string          `json:"balance"`
		RequestID   string          `json:"request_id"`
		Receipt     json.RawMessage `json:"receipt"`
	} `json:"x_llm4agents"`
}

func decodeEmbed(t *testing.T, b []byte) embedAnswer {
	t.Helper()
	var a embedAnswer
	if err := json.Unmarshal(b, &a); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	return a
}

// TestEmbeddingsExact: an embeddings request gets a 402 with the exact price
// of its input tokens, is paid once with exact, settles before the body, and
// a second presentation of the payment replays the answer without a second
// upstream call or transfer.
func TestEmbeddingsExact(t *testing.T) {
	e := newEnvConfig(t, 10*time.Second, nil, withEmbed)
	texts := []string{strings.Repeat("The quick brown fox jumps over the lazy dog. ", 40), "hello", "a third input"}
	in, _ := json.Marshal(texts)
	body := `{"model":"embed","input":` + string(in) + `,"dimensions":16,"x_custom_field":{"kept":true}}`
	tokens, amount := embedQuote(t, texts...)
	if amount.Int64() <= 10000 {
		t.Fatalf("quote %s: the test wants a quote above the one-cent minimum", amount)
	}

	h, pr := e.signedEmbed(t, body, buyerIdx)
	if got := pr.Accepts[0].Amount; got != amount.String() {
		t.Errorf("402 quotes %s, want %s (%d tokens)", got, amount, tokens)
	}
	if len(pr.Accepts) != 1 || pr.Accepts[0].Scheme != exact.Scheme {
		t.Errorf("offers %+v, want exact alone", pr.Accepts)
	}
	if want := fmt.Sprintf("%d input tokens in 3 inputs", tokens); pr.Resource == nil || !strings.Contains(pr.Resource.Description, want) {
		t.Errorf("resource %+v, want a description with %q", pr.Resource, want)
	}
	if e.up.Calls() != 0 {
		t.Fatalf("the 402 called the upstream %d times", e.up.Calls())
	}

	payTo0 := e.chain.BalanceOf(t, e.chain.Addr(payToIdx))
	buyer0 := e.chain.BalanceOf(t, e.chain.Addr(buyerIdx))
	resp := postEmbed(t, http.DefaultClient, e.srv.URL, body, http.Header{x402.HeaderPaymentSignature: {h}})
	b := readAll(t, resp)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("paid: %d %s", resp.StatusCode, b)
	}
	a := decodeEmbed(t, b)
	if a.Object != "list" || len(a.Data) != 3 || a.Data[2].Index != 2 || a.Model != "text-embedding-3-small" {
		t.Errorf("answer: %s", b)
	}
	var v []float32
	if err := json.Unmarshal(a.Data[0].Embedding, &v); err != nil || len(v) != 16 {
		t.Errorf("vector %s: %v, want 16 floats", a.Data[0].Embedding, err)
	}
	if a.Cost.Charged != amount.String() || a.Cost.Transaction == "" || resp.Header.Get(x402.HeaderPaymentResponse) == "" {
		t.Errorf("charged %q tx %q, PAYMENT-RESPONSE %q; want %s settled", a.Cost.Charged, a.Cost.Transaction,
			resp.Header.Get(x402.HeaderPaymentResponse), amount)
	}
	if received, spent := e.moved(t, payTo0, buyer0); received != amount.Int64() || spent != amount.Int64() {
		t.Errorf("payTo received %d, buyer spent %d; want %s", received, spent, amount)
	}
	// The upstream got the upstream's model name and every other field as sent.
	var sent map[string]json.RawMessage
	if err := json.Unmarshal(e.up.LastRequest().Body, &sent); err != nil {
		t.Fatal(err)
	}
	if string(sent["model"]) != `"text-embedding-3-small"` || string(sent["x_custom_field"]) != `{"kept":true}` || string(sent["dimensions"]) != "16" {
		t.Errorf("upstream body: %s", e.up.LastRequest().Body)
	}

	// Presented again: the recorded answer, no upstream call, no transfer.
	resp = postEmbed(t, http.DefaultClient, e.srv.URL, body, http.Header{x402.HeaderPaymentSignature: {h}})
	b2 := readAll(t, resp)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Llm4agents-Replay") != "promoted" || string(b2) != string(b) {
		t.Errorf("replay: %d %q, same bytes %v", resp.StatusCode, resp.Header.Get("X-Llm4agents-Replay"), string(b2) == string(b))
	}
	if e.up.Calls() != 1 {
		t.Errorf("upstream calls = %d, want 1", e.up.Calls())
	}
	if received, _ := e.moved(t, payTo0, buyer0); received != amount.Int64() {
		t.Errorf("payTo received %d after the replay, want %s", received, amount)
	}

	// The same payment for another request is not a replay.
	other := `{"model":"embed","input":"something else"}`
	resp = postEmbed(t, http.DefaultClient, e.srv.URL, other, http.Header{x402.HeaderPaymentSignature: {h}})
	if b := readAll(t, resp); resp.StatusCode == http.StatusOK {
		t.Errorf("a payment for another request answered: %s", b)
	}
}

// TestEmbeddingsTokenInputs: token-id inputs are priced by their length.
func TestEmbeddingsTokenInputs(t *testing.T) {
	e := newEnvConfig(t, 10*time.Second, nil, withEmbed)
	ids := strings.TrimSuffix(strings.Repeat("9906,", 150), ",")
	body := `{"model":"embed","input":[[` + ids + `],[1,2,3]],"encoding_format":"base64"}`
	h, pr := e.signedEmbed(t, body, buyerIdx)
	if want := pricing.Quote(153, 0, embedPrice, 6).String(); pr.Accepts[0].Amount != want {
		t.Errorf("quote %s, want %s (153 tokens)", pr.Accepts[0].Amount, want)
	}
	resp := postEmbed(t, http.DefaultClient, e.srv.URL, body, http.Header{x402.HeaderPaymentSignature: {h}})
	b := readAll(t, resp)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("paid: %d %s", resp.StatusCode, b)
	}
	a := decodeEmbed(t, b)
	if len(a.Data) != 2 || a.Data[0].Embedding[0] != '"' || a.Usage.PromptTokens != 153 {
		t.Errorf("answer: %s", b)
	}
}

// TestEmbeddingsBadInput: each refused before any quote or payment, with no
// upstream call.
func TestEmbeddingsBadInput(t *testing.T) {
	e := newEnvConfig(t, 10*time.Second, nil, withEmbed)
	many := func(elem string, n int) string {
		return "[" + strings.TrimSuffix(strings.Repeat(elem+",", n), ",") + "]"
	}
	tests := []struct {
		name   string
		path   string // default /v1/embeddings
		body   string
		hdr    http.Header
		status int
		code   string
	}{
		{"not JSON", "", `{"model":`, nil, 400, "invalid_request"},
		{"no input", "", `{"model":"embed"}`, nil, 400, "invalid_request"},
		{"empty string", "", `{"model":"embed","input":""}`, nil, 400, "invalid_request"},
		{"empty strings", "", `{"model":"embed","input":["a",""]}`, nil, 400, "invalid_request"},
		{"empty array", "", `{"model":"embed","input":[]}`, nil, 400, "invalid_request"},
		{"empty token array", "", `{"model":"embed","input":[[]]}`, nil, 400, "invalid_request"},
		{"input an object", "", `{"model":"embed","input":{"text":"a"}}`, nil, 400, "invalid_request"},
		{"input a number", "", `{"model":"embed","input":3}`, nil, 400, "invalid_request"},
		{"mixed kinds", "", `{"model":"embed","input":["a",[1]]}`, nil, 400, "invalid_request"},
		{"model a number", "", `{"model":1,"input":"a"}`, nil, 400, "invalid_request"},
		{"negative token id", "", `{"model":"embed","input":[5,-1]}`, nil, 400, "invalid_request"},
		{"overflowing token id", "", `{"model":"embed","input":[[18446744073709551616]]}`, nil, 400, "invalid_request"},
		{"fractional token id", "", `{"model":"embed","input":[0.5]}`, nil, 400, "invalid_request"},
		{"bad encoding_format", "", `{"model":"embed","input":"a","encoding_format":"int8"}`, nil, 400, "invalid_request"},
		{"bad dimensions", "", `{"model":"embed","input":"a","dimensions":0}`, nil, 400, "invalid_request"},
		{"2049 inputs", "", `{"model":"embed","input":` + many(`"a"`, 2049) + `}`, nil, 400, "invalid_request"},
		{"300001 token ids", "", `{"model":"embed","input":` + many("1", 300_001) + `}`, nil, 400, "invalid_request"},
		{"over 300000 tokens of text", "", `{"model":"embed","input":` + many(`"`+strings.Repeat(" a", 8000)+`"`, 38) + `}`, nil, 400, "too_many_tokens"},
		{"a text over the model's input bound", "", `{"model":"embed","input":["a","` + strings.Repeat(" a", embedMaxInput+1) + `"]}`, nil, 400, "input_too_long"},
		{"a token array over the model's input bound", "", `{"model":"embed","input":[[1],` + many("1", embedMaxInput+1) + `]}`, nil, 400, "input_too_long"},
		{"unknown model", "", `{"model":"nope","input":"a"}`, nil, 404, "model_not_found"},
		{"chat model", "", `{"model":"demo","input":"a"}`, nil, 400, "model_not_supported"},
		{"embeddings model on chat", "/v1/chat/completions", `{"model":"embed","messages":[{"role":"user","content":"a"}]}`, nil, 400, "model_not_supported"},
		{"key and payment", "", `{"model":"embed","input":"a"}`, http.Header{x402.HeaderPaymentSignature: {"x"}, "Authorization": {"Bearer sk-l4a-abc"}}, 400, "key_and_payment"},
		{"key without credits", "", `{"model":"embed","input":"a"}`, http.Header{"Authorization": {"Bearer sk-l4a-abc"}}, 401, "invalid_api_key"},
		{"garbage payment", "", `{"model":"embed","input":"a"}`, http.Header{x402.HeaderPaymentSignature: {"%%%"}}, 400, "invalid_payment"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := cmpOr(tc.path, "/v1/embeddings")
			req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, e.srv.URL+path, strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			maps.Copy(req.Header, tc.hdr)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b := readAll(t, resp)
			if resp.StatusCode != tc.status || errorCode(t, b) != tc.code {
				t.Errorf("%d %s, want %d %s", resp.StatusCode, b, tc.status, tc.code)
			}
			if resp.Header.Get(x402.HeaderPaymentRequired) != "" {
				t.Error("a refused request was quoted")
			}
		})
	}
	if e.up.Calls() != 0 {
		t.Errorf("upstream calls = %d, want 0", e.up.Calls())
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// TestEmbeddingsUpstreamFails: an upstream error or an answer of the wrong
// shape is a 502 and settles nothing; the payment stays the buyer's.
func TestEmbeddingsUpstreamFails(t *testing.T) {
	e := newEnvConfig(t, 10*time.Second, nil, withEmbed)
	const body = `{"model":"embed","input":["one","two"]}`
	vec := `{"object":"embedding","index":%d,"embedding":[0.5]}`
	tests := []struct {
		name  string
		fault upstreamtest.Fault
		code  string
	}{
		{"500", upstreamtest.Fault{Status: 500}, upstream.CodeError},
		{"not JSON", upstreamtest.Fault{Status: 200, Body: `<html></html>`}, upstream.CodeBadResponse},
		{"no data", upstreamtest.Fault{Status: 200, Body: `{"object":"list","usage":{"prompt_tokens":2,"total_tokens":2}}`}, upstream.CodeBadResponse},
		{"a chat completion", upstreamtest.Fault{Status: 200, Body: `{"object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hi"}}]}`}, upstream.CodeBadResponse},
		{"one vector for two inputs", upstreamtest.Fault{Status: 200, Body: `{"object":"list","data":[` + fmt.Sprintf(vec, 0) + `]}`}, upstream.CodeBadResponse},
		{"an index twice", upstreamtest.Fault{Status: 200, Body: `{"object":"list","data":[` + fmt.Sprintf(vec, 0) + `,` + fmt.Sprintf(vec, 0) + `]}`}, upstream.CodeBadResponse},
		{"empty vectors", upstreamtest.Fault{Status: 200, Body: `{"object":"list","data":[{"index":0,"embedding":[]},{"index":1,"embedding":[]}]}`}, upstream.CodeBadResponse},
		{"an error in a 200", upstreamtest.Fault{Status: 200, Body: `{"error":{"message":"overloaded"}}`}, upstream.CodeError},
		{"connection dropped", upstreamtest.Fault{Drop: true}, upstream.CodeBadResponse},
	}
	payTo0 := e.chain.BalanceOf(t, e.chain.Addr(payToIdx))
	buyer0 := e.chain.BalanceOf(t, e.chain.Addr(buyerIdx))
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h, _ := e.signedEmbed(t, body, buyerIdx)
			e.up.SetFault(tc.fault)
			defer e.up.SetFault(upstreamtest.Fault{})
			resp := postEmbed(t, http.DefaultClient, e.srv.URL, body, http.Header{x402.HeaderPaymentSignature: {h}})
			b := readAll(t, resp)
			if resp.StatusCode != http.StatusBadGateway || errorCode(t, b) != tc.code || !strings.Contains(string(b), "nothing was charged") {
				t.Errorf("%d %s, want 502 %s", resp.StatusCode, b, tc.code)
			}
			if resp.Header.Get(x402.HeaderPaymentResponse) != "" {
				t.Error("a failed call carries a PAYMENT-RESPONSE")
			}
			// The claim was released: the same payment buys the call once
			// the upstream is well.
			if tc.name == "500" {
				e.up.SetFault(upstreamtest.Fault{})
				resp := postEmbed(t, http.DefaultClient, e.srv.URL, body, http.Header{x402.HeaderPaymentSignature: {h}})
				if b := readAll(t, resp); resp.StatusCode != http.StatusOK {
					t.Errorf("retry after the failure: %d %s", resp.StatusCode, b)
				}
				payTo0 = e.chain.BalanceOf(t, e.chain.Addr(payToIdx))
				buyer0 = e.chain.BalanceOf(t, e.chain.Addr(buyerIdx))
			}
		})
	}
	if received, spent := e.moved(t, payTo0, buyer0); received != 0 || spent != 0 {
		t.Errorf("failed calls moved money: payTo received %d, buyer spent %d", received, spent)
	}
}

// TestEmbeddingsModels: an embeddings model needs an upstream that serves
// embeddings.
func TestEmbeddingsModels(t *testing.T) {
	chatOnly := struct{ gateway.Provider }{upstream.NewDemo(upstream.DemoConfig{})}
	_, err := gateway.New(gateway.Config{
		Network: network, Asset: "0x036CbD53842c5426634e7929541eC2318f3dCF7e", PayTo: "0x2546BcD3c84621e976D8185a91A922aE77ECEc30", Decimals: 6,
		Models: []gateway.Model{embedModel(chatOnly)},
	}, nil, nil, discard())
	if err == nil || !strings.Contains(err.Error(), "serves none") {
		t.Errorf("New with a chat-only upstream: %v", err)
	}
}

// TestEmbeddingsListed: /v1/models says which route sells each model, and
// prices an embeddings model per input token.
func TestEmbeddingsListed(t *testing.T) {
	e := newEnvConfig(t, 10*time.Second, nil, withEmbed)
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, e.srv.URL+"/v1/models/embed", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b := readAll(t, resp)
	var m struct {
		Kind    string `json:"kind"`
		Pricing struct {
			Input   string `json:"input_per_million_tokens"`
			Output  string `json:"output_per_million_tokens"`
			Display string `json:"display"`
		} `json:"pricing"`
	}
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if m.Kind != "embeddings" || m.Pricing.Input != "100000000" || m.Pricing.Output != "0" ||
		m.Pricing.Display != "100.00 USDC per million input tokens, rounded up to the cent" {
		t.Errorf("listed as %s", b)
	}
}

// TestEmbeddingsInputBound: an input of exactly the model's bound is quoted;
// one token more is refused before any quote, naming the input and the
// bound.
func TestEmbeddingsInputBound(t *testing.T) {
	e := newEnvConfig(t, 10*time.Second, nil, withEmbed)
	at := strings.Repeat(" a", embedMaxInput)
	resp := postEmbed(t, http.DefaultClient, e.srv.URL, `{"model":"embed","input":["`+at+`"]}`, nil)
	if b := readAll(t, resp); resp.StatusCode != http.StatusPaymentRequired {
		t.Fatalf("an input of %d tokens: %d %s", embedMaxInput, resp.StatusCode, b)
	}
	resp = postEmbed(t, http.DefaultClient, e.srv.URL, `{"model":"embed","input":["x","`+at+` a"]}`, nil)
	b := readAll(t, resp)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), fmt.Sprintf("input[1] has %d tokens", embedMaxInput+1)) ||
		!strings.Contains(string(b), fmt.Sprintf("at most %d per input", embedMaxInput)) {
		t.Errorf("an input of %d tokens: %d %s", embedMaxInput+1, resp.StatusCode, b)
	}
	if e.up.Calls() != 0 {
		t.Errorf("upstream calls = %d, want 0", e.up.Calls())
	}
}
