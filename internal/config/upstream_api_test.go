package config

import (
	"strings"
	"testing"
)

func TestUpstreamResponses(t *testing.T) {
	const key = "    api_key_env: OPENAI_API_KEY"
	t.Run("default chat only", func(t *testing.T) {
		c, err := Parse([]byte(base))
		if err != nil {
			t.Fatal(err)
		}
		for _, u := range c.Upstreams {
			if u.Responses {
				t.Errorf("upstream %s speaks the Responses API by default", u.Name)
			}
		}
	})
	t.Run("on", func(t *testing.T) {
		c, err := Parse([]byte(edit(t, base, key, key+"\n    responses: true")))
		if err != nil {
			t.Fatal(err)
		}
		if !c.Upstreams[0].Responses || c.Upstreams[1].Responses {
			t.Errorf("responses = %v, %v; want true, false", c.Upstreams[0].Responses, c.Upstreams[1].Responses)
		}
	})
	t.Run("a fallback of the other API is ok on an embeddings model", func(t *testing.T) {
		doc := edit(t, base, key, key+"\n    responses: true",
			`    upstream: openai
    price:`, `    upstream: openai
    kind: embeddings
    fallbacks: [{upstream: demo}]
    price:`, `price: { input: "150000", output: "600000" }`, `price: { input: "150000" }`)
		if _, err := Parse([]byte(doc)); err != nil {
			t.Fatal(err)
		}
	})
	for _, tc := range []struct {
		name      string
		edits     []string
		path, msg string
	}{
		{name: "not a bool", edits: []string{key, key + "\n    responses: [chat, responses]"}, path: "upstreams[0].responses", msg: "!!seq"},
		{name: "a word", edits: []string{key, key + "\n    responses: sometimes"}, path: "upstreams[0].responses", msg: "sometimes"},
		{name: "fallback does not speak it", edits: []string{key, key + "\n    responses: true",
			"    upstream: openai\n", "    upstream: openai\n    fallbacks: [{upstream: demo}]\n"},
			path: "models[0].fallbacks[0].upstream", msg: `"demo" does not speak the Responses API and upstream "openai" speaks`},
		{name: "only the fallback speaks it", edits: []string{"    type: demo", "    type: demo\n    responses: true",
			"    upstream: openai\n", "    upstream: openai\n    fallbacks: [{upstream: demo}]\n"},
			path: "models[0].fallbacks[0].upstream", msg: "every provider of a model must agree"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(edit(t, base, tc.edits...)))
			if err == nil {
				t.Fatal("Parse succeeded")
			}
			for _, fe := range fieldErrors(t, err) {
				if fe.Path == tc.path && strings.Contains(fe.Msg, tc.msg) {
					return
				}
			}
			t.Fatalf("no error at %q containing %q in:\n%v", tc.path, tc.msg, err)
		})
	}
}
