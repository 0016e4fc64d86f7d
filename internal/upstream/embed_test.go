package upstream_test

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"math"
	"net/http"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/llm4agents/llm4agents/internal/embeddings"
	"github.com/llm4agents/llm4agents/internal/upstream"
	"github.com/llm4agents/llm4agents/internal/upstream/upstreamtest"
)

// embeddingList is an embeddings answer as a client decodes it.
type embeddingList struct {
	Object string `json:"object"`
	Data   []struct {
		Object    string          `json:"object"`
		Index     int             `json:"index"`
		Embedding json.RawMessage `json:"embedding"`
	} `json:"data"`
	Model string           `json:"model"`
	Usage embeddings.Usage `json:"usage"`
}

func decodeList(t *testing.T, b []byte) embeddingList {
	t.Helper()
	var l embeddingList
	if err := json.Unmarshal(b, &l); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	return l
}

func floats(t *testing.T, raw json.RawMessage) []float32 {
	t.Helper()
	var v []float32
	if err := json.Unmarshal(raw, &v); err == nil {
		return v
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		t.Fatalf("embedding %s is neither floats nor base64", raw)
	}
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil || len(b)%4 != 0 {
		t.Fatalf("embedding %q is not base64 of float32s", s)
	}
	for i := 0; i < len(b); i += 4 {
		v = append(v, math.Float32frombits(binary.LittleEndian.Uint32(b[i:])))
	}
	return v
}

func TestDemoEmbed(t *testing.T) {
	words := upstream.TokenizerFunc(func(s string) int { return len(s) }) // one token a byte, to check the sum
	d := upstream.NewDemo(upstream.DemoConfig{Tokenizer: words})

	c, err := d.Embed(t.Context(), []byte(`{"model":"emb","input":["hello","hi"],"dimensions":8}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := embeddings.CheckResponse(c.Body, 2); err != nil {
		t.Fatal(err)
	}
	l := decodeList(t, c.Body)
	if l.Object != "list" || l.Model != "emb" || l.Data[0].Object != "embedding" || l.Data[1].Index != 1 {
		t.Errorf("answer shape: %s", c.Body)
	}
	if want := (embeddings.Usage{PromptTokens: 7, TotalTokens: 7}); l.Usage != want || c.Usage.PromptTokens != 7 || !c.UsageReported {
		t.Errorf("usage %+v (reported %+v), want %+v", l.Usage, c.Usage, want)
	}
	v0 := floats(t, l.Data[0].Embedding)
	if len(v0) != 8 {
		t.Fatalf("%d dimensions, want 8", len(v0))
	}
	var norm float64
	for _, f := range v0 {
		norm += float64(f) * float64(f)
	}
	if math.Abs(norm-1) > 1e-5 {
		t.Errorf("squared norm %v, want 1", norm)
	}
	if cmp.Equal(v0, floats(t, l.Data[1].Embedding)) {
		t.Error("two inputs embed equally")
	}

	// The same input embeds the same in another request, and base64 carries
	// the same floats.
	c2, err := d.Embed(t.Context(), []byte(`{"model":"emb","input":"hello","dimensions":8,"encoding_format":"base64"}`))
	if err != nil {
		t.Fatal(err)
	}
	l2 := decodeList(t, c2.Body)
	if l2.Data[0].Embedding[0] != '"' {
		t.Errorf("base64 answer has %s", l2.Data[0].Embedding)
	}
	if diff := cmp.Diff(v0, floats(t, l2.Data[0].Embedding)); diff != "" {
		t.Errorf("base64 vector differs (-float +base64):\n%s", diff)
	}

	// Token inputs count their length, and embed unlike any text.
	c3, err := d.Embed(t.Context(), []byte(`{"model":"emb","input":[[104,101],[7,7,7]]}`))
	if err != nil {
		t.Fatal(err)
	}
	l3 := decodeList(t, c3.Body)
	if l3.Usage.PromptTokens != 5 || len(floats(t, l3.Data[0].Embedding)) != 32 {
		t.Errorf("token inputs: usage %+v, %d dimensions; want 5 tokens, 32", l3.Usage, len(floats(t, l3.Data[0].Embedding)))
	}

	for body, code := range map[string]string{
		`{"model":"emb","input":""}`:                    "invalid_request",
		`{"model":"emb","input":"x","dimensions":3073}`: "invalid_value",
	} {
		_, err := d.Embed(t.Context(), []byte(body))
		checkErr(t, err, wantErr{status: http.StatusBadRequest, typ: "invalid_request_error", code: code})
	}
}

func TestOpenAIEmbed(t *testing.T) {
	srv := upstreamtest.NewServer(t, upstreamtest.Config{APIKey: testKey, Models: []string{"emb"}})
	o, _ := newOpenAI(t, srv, upstream.OpenAIConfig{})
	body := []byte(`{"model":"emb","input":["a","b","c"],"x_extra":true}`)
	c, err := o.Embed(t.Context(), body)
	if err != nil {
		t.Fatal(err)
	}
	if err := embeddings.CheckResponse(c.Body, 3); err != nil {
		t.Fatal(err)
	}
	if !c.UsageReported || c.Usage.PromptTokens <= 0 || c.Usage.CompletionTokens != 0 {
		t.Errorf("usage %+v reported %v", c.Usage, c.UsageReported)
	}
	last := srv.LastRequest()
	if string(last.Body) != string(body) || last.Header.Get("Authorization") != "Bearer "+testKey {
		t.Errorf("upstream got %s with %q", last.Body, last.Header.Get("Authorization"))
	}

	srv.SetFault(upstreamtest.Fault{NoUsage: true})
	if c, err := o.Embed(t.Context(), body); err != nil || c.UsageReported {
		t.Errorf("no usage: err %v, reported %v", err, c != nil && c.UsageReported)
	}

	bad := wantErr{status: 502, code: upstream.CodeBadResponse}
	failed := wantErr{status: 502, code: upstream.CodeError, typ: upstream.TypeUpstream, msg: "the upstream provider failed to answer"}
	tests := []struct {
		name  string
		fault upstreamtest.Fault
		want  wantErr
	}{
		{"500", upstreamtest.Fault{Status: 500}, *with(failed, "shard 7")},
		{"400 passes", upstreamtest.Fault{Status: 400}, wantErr{status: 400, code: "invalid_value", typ: "invalid_request_error"}},
		{"200 not JSON", upstreamtest.Fault{Status: 200, Body: `<html>`}, bad},
		{"200 array", upstreamtest.Fault{Status: 200, Body: `[]`}, bad},
		{"200 no data", upstreamtest.Fault{Status: 200, Body: `{"object":"list"}`}, bad},
		{"200 chat completion", upstreamtest.Fault{Status: 200, Body: `{"object":"chat.completion","choices":[]}`}, bad},
		{"200 error", upstreamtest.Fault{Status: 200, Body: `{"error":{"message":"overloaded"}}`}, failed},
		{"200 negative usage", upstreamtest.Fault{Status: 200, Body: `{"data":[],"usage":{"prompt_tokens":-1,"total_tokens":-1}}`}, bad},
		{"dropped", upstreamtest.Fault{Drop: true}, wantErr{status: 502, code: upstream.CodeBadResponse, eof: true}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv.SetFault(tc.fault)
			_, err := o.Embed(t.Context(), body)
			checkErr(t, err, tc.want)
		})
	}
}
