package embeddings_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/llm4agents/llm4agents/internal/embeddings"
)

// FuzzParseRequest checks that ParseRequest never panics, that what it
// accepts is within the bounds the gateway prices by (1 to MaxInputs inputs,
// no empty one, token ids in range, at most MaxTokens of them), and that the
// upstream body it writes parses back to the same input.
func FuzzParseRequest(f *testing.F) {
	for _, seed := range []string{
		`{"model":"m","input":"hello"}`,
		`{"model":"m","input":["a","b"],"encoding_format":"base64","dimensions":8,"user":"u"}`,
		`{"model":"m","input":[1,2,3]}`,
		`{"model":"m","input":[[1],[2,3]]}`,
		`{"model":"m","input":[[1],["a"]]}`,
		`{"model":"m","input":[-1]}`,
		`{"model":"m","input":[1e400]}`,
		`{"model":"m","input":[""]}`,
		`{"model":"m","input":[]}`,
		`{"model":"m","input":[[]]}`,
		`{"model":"m","input":{"a":1},"x":[1]}`,
		`{"model":"m","input":" \u0000\ud800"}`,
		`{"model":"m","input":"x","dimensions":-1}`,
		`{"model":null,"input":null}`,
		`[]`,
		``,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := embeddings.ParseRequest(body)
		if err != nil {
			return
		}
		in := r.Input
		if n := in.Len(); n < 1 || n > embeddings.MaxInputs {
			t.Fatalf("%d inputs accepted", n)
		}
		if len(in.Texts) > 0 && len(in.Tokens) > 0 {
			t.Fatal("texts and token ids mixed")
		}
		for _, s := range in.Texts {
			if s == "" {
				t.Fatal("empty string accepted")
			}
		}
		for _, ids := range in.Tokens {
			if len(ids) == 0 {
				t.Fatal("empty token array accepted")
			}
			for _, id := range ids {
				if id < 0 || id > embeddings.MaxTokenID {
					t.Fatalf("token id %d accepted", id)
				}
			}
		}
		if in.TokenIDs() > embeddings.MaxTokens {
			t.Fatalf("%d token ids accepted", in.TokenIDs())
		}
		if r.Model == "" {
			t.Fatal("no model accepted")
		}
		if r.Dimensions != nil && *r.Dimensions < 1 {
			t.Fatalf("dimensions %d accepted", *r.Dimensions)
		}
		up, err := r.Upstream("up")
		if err != nil {
			t.Fatal(err)
		}
		again, err := embeddings.ParseRequest(up)
		if err != nil {
			t.Fatalf("upstream body %s does not parse: %v", up, err)
		}
		if diff := cmp.Diff(in, again.Input); diff != "" {
			t.Fatalf("upstream input differs (-sent +upstream):\n%s", diff)
		}
	})
}
