package config

import (
	"strings"
	"testing"

	"github.com/llm4agents/llm4agents/internal/pricing"
)

// embedModel is an embeddings model appended to base's models.
const embedModel = `  - id: text-embedding-3-small
    upstream: openai
    kind: embeddings
    price: { input: "20000" }
`

func TestEmbeddingsModel(t *testing.T) {
	c, err := Parse([]byte(base + embedModel))
	if err != nil {
		t.Fatal(err)
	}
	m := c.Model("text-embedding-3-small")
	if m.Kind != KindEmbeddings || m.MaxOutputTokens != 0 || m.Encoding != pricing.Cl100kBase || m.MaxInputTokens != DefaultMaxInputTokens {
		t.Errorf("kind %q, max_output_tokens %d, encoding %q, max_input_tokens %d; want embeddings, 0, cl100k_base, %d",
			m.Kind, m.MaxOutputTokens, m.Encoding, m.MaxInputTokens, DefaultMaxInputTokens)
	}
	c, err = Parse([]byte(base + embedModel + "    max_input_tokens: 32000\n"))
	if err != nil || c.Model("text-embedding-3-small").MaxInputTokens != 32000 {
		t.Errorf("max_input_tokens 32000: %v", err)
	}
	p, err := m.Price.Parse()
	if err != nil || p != (pricing.Price{Input: 20000}) {
		t.Errorf("price %+v, %v; want input 20000 alone", p, err)
	}
	if chat := c.Model("gpt-4o-mini"); chat.Kind != KindChat || chat.MaxOutputTokens != DefaultMaxOutputTokens || chat.MaxInputTokens != 0 {
		t.Errorf("a model without kind: %q, max_output_tokens %d; want chat and the default", chat.Kind, chat.MaxOutputTokens)
	}
}

func TestEmbeddingsModelErrors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		model string
		path  string
		msg   string
	}{
		{"unknown kind", strings.Replace(embedModel, "kind: embeddings", "kind: embedding", 1), "models[2].kind", `"embedding" is not chat or embeddings`},
		{"output price", strings.Replace(embedModel, `input: "20000"`, `input: "20000", output: "0"`, 1), "models[2].price.output", "priced per input token only"},
		{"output cap", embedModel + "    max_output_tokens: 100\n", "models[2].max_output_tokens", "has no output"},
		{"input bound negative", embedModel + "    max_input_tokens: -1\n", "models[2].max_input_tokens", "not between 1 and 300000"},
		{"input bound over a request's", embedModel + "    max_input_tokens: 300001\n", "models[2].max_input_tokens", "not between 1 and 300000"},
		{"input bound a string", embedModel + "    max_input_tokens: lots\n", "models[2].max_input_tokens", ""},
		{"input bound on a chat model", strings.Replace(embedModel, "kind: embeddings", "kind: chat", 1) + "    max_input_tokens: 10\n",
			"models[2].max_input_tokens", "bounds each input of an embeddings model"},
		{"no input price", strings.Replace(embedModel, `input: "20000"`, `output: "1"`, 1), "models[2].price.input", "is required"},
		{"chat without output price", strings.Replace(embedModel, "kind: embeddings", "kind: chat", 1), "models[2].price.output", "is required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(base + tc.model))
			if err == nil {
				t.Fatal("no error")
			}
			for _, fe := range fieldErrors(t, err) {
				if fe.Path == tc.path && strings.Contains(fe.Msg, tc.msg) {
					return
				}
			}
			t.Errorf("errors %v, want %s: ...%s...", err, tc.path, tc.msg)
		})
	}
}
