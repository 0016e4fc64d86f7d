package embeddings_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/llm4agents/llm4agents/internal/embeddings"
)

// repeat is a JSON array of n copies of elem.
func repeat(elem string, n int) string {
	return "[" + strings.TrimSuffix(strings.Repeat(elem+",", n), ",") + "]"
}

func TestParseRequest(t *testing.T) {
	dims := int64(256)
	tests := []struct {
		name string
		body string
		want embeddings.Input
		// format and dims are the decoded options, when the body is valid.
		format string
		dims   *int64
		err    error
	}{
		{name: "string", body: `{"model":"m","input":"hello"}`, want: embeddings.Input{Texts: []string{"hello"}}},
		{name: "strings", body: `{"model":"m","input":["a","b c"]}`, want: embeddings.Input{Texts: []string{"a", "b c"}}},
		{name: "token ids", body: `{"model":"m","input":[1,2,3]}`, want: embeddings.Input{Tokens: [][]int64{{1, 2, 3}}}},
		{name: "token arrays", body: `{"model":"m","input":[[1],[0, 2147483647]]}`, want: embeddings.Input{Tokens: [][]int64{{1}, {0, 2147483647}}}},
		{name: "options", body: `{"model":"m","input":"x","encoding_format":"base64","dimensions":256,"user":"u-1"}`,
			want: embeddings.Input{Texts: []string{"x"}}, format: embeddings.FormatBase64, dims: &dims},
		{name: "null options", body: `{"model":"m","input":"x","encoding_format":null,"dimensions":null,"user":null}`,
			want: embeddings.Input{Texts: []string{"x"}}},
		{name: "unknown fields pass", body: `{"model":"m","input":"x","x_custom":{"a":1}}`, want: embeddings.Input{Texts: []string{"x"}}},
		{name: "most inputs", body: `{"model":"m","input":` + repeat(`"a"`, embeddings.MaxInputs) + `}`,
			want: embeddings.Input{Texts: strings.Split(strings.Repeat("a", embeddings.MaxInputs), "")}},

		{name: "not an object", body: `["m"]`, err: embeddings.ErrNotObject},
		{name: "not JSON", body: `{"model":`, err: embeddings.ErrNotObject},
		{name: "null body", body: `null`, err: embeddings.ErrNotObject},
		{name: "no model", body: `{"input":"x"}`, err: embeddings.ErrNoModel},
		{name: "model not a string", body: `{"model":7,"input":"x"}`, err: embeddings.ErrBadField},
		{name: "no input", body: `{"model":"m"}`, err: embeddings.ErrNoInput},
		{name: "null input", body: `{"model":"m","input":null}`, err: embeddings.ErrNoInput},
		{name: "empty string", body: `{"model":"m","input":""}`, err: embeddings.ErrEmptyInput},
		{name: "empty array", body: `{"model":"m","input":[]}`, err: embeddings.ErrEmptyInput},
		{name: "empty string in array", body: `{"model":"m","input":["a",""]}`, err: embeddings.ErrEmptyInput},
		{name: "empty token array", body: `{"model":"m","input":[[1],[]]}`, err: embeddings.ErrEmptyInput},
		{name: "number", body: `{"model":"m","input":5}`, err: embeddings.ErrBadInput},
		{name: "object", body: `{"model":"m","input":{"text":"a"}}`, err: embeddings.ErrBadInput},
		{name: "bool", body: `{"model":"m","input":true}`, err: embeddings.ErrBadInput},
		{name: "array of bools", body: `{"model":"m","input":[true]}`, err: embeddings.ErrBadInput},
		{name: "array of nulls", body: `{"model":"m","input":[null]}`, err: embeddings.ErrBadInput},
		{name: "string then number", body: `{"model":"m","input":["a",1]}`, err: embeddings.ErrBadInput},
		{name: "number then string", body: `{"model":"m","input":[1,"a"]}`, err: embeddings.ErrBadInput},
		{name: "array then number", body: `{"model":"m","input":[[1],2]}`, err: embeddings.ErrBadInput},
		{name: "array of strings in arrays", body: `{"model":"m","input":[["a"]]}`, err: embeddings.ErrBadInput},
		{name: "three levels", body: `{"model":"m","input":[[[1]]]}`, err: embeddings.ErrBadInput},
		{name: "negative token", body: `{"model":"m","input":[1,-2]}`, err: embeddings.ErrBadTokenID},
		{name: "negative first token", body: `{"model":"m","input":[-1]}`, err: embeddings.ErrBadTokenID},
		{name: "token above the bound", body: `{"model":"m","input":[2147483648]}`, err: embeddings.ErrBadTokenID},
		{name: "token overflows int64", body: `{"model":"m","input":[[99999999999999999999999]]}`, err: embeddings.ErrBadTokenID},
		{name: "fractional token", body: `{"model":"m","input":[1.5]}`, err: embeddings.ErrBadTokenID},
		{name: "exponent token", body: `{"model":"m","input":[1e3]}`, err: embeddings.ErrBadTokenID},
		{name: "too many strings", body: `{"model":"m","input":` + repeat(`"a"`, embeddings.MaxInputs+1) + `}`, err: embeddings.ErrTooManyInputs},
		{name: "too many token arrays", body: `{"model":"m","input":` + repeat(`[1]`, embeddings.MaxInputs+1) + `}`, err: embeddings.ErrTooManyInputs},
		{name: "too many token ids", body: `{"model":"m","input":` + repeat(`1`, embeddings.MaxTokens+1) + `}`, err: embeddings.ErrTooManyTokens},
		{name: "too many token ids in arrays", body: `{"model":"m","input":` + repeat(repeat("7", 200), 1501) + `}`, err: embeddings.ErrTooManyTokens},
		{name: "bad format", body: `{"model":"m","input":"x","encoding_format":"int8"}`, err: embeddings.ErrBadFormat},
		{name: "format not a string", body: `{"model":"m","input":"x","encoding_format":1}`, err: embeddings.ErrBadFormat},
		{name: "zero dimensions", body: `{"model":"m","input":"x","dimensions":0}`, err: embeddings.ErrBadDimensions},
		{name: "negative dimensions", body: `{"model":"m","input":"x","dimensions":-5}`, err: embeddings.ErrBadDimensions},
		{name: "fractional dimensions", body: `{"model":"m","input":"x","dimensions":1.5}`, err: embeddings.ErrBadDimensions},
		{name: "string dimensions", body: `{"model":"m","input":"x","dimensions":"256"}`, err: embeddings.ErrBadDimensions},
		{name: "user not a string", body: `{"model":"m","input":"x","user":1}`, err: embeddings.ErrBadField},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := embeddings.ParseRequest([]byte(tc.body))
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("err = %v, want %v", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, r.Input); diff != "" {
				t.Errorf("input (-want +got):\n%s", diff)
			}
			if r.EncodingFormat != tc.format {
				t.Errorf("encoding_format = %q, want %q", r.EncodingFormat, tc.format)
			}
			if diff := cmp.Diff(tc.dims, r.Dimensions); diff != "" {
				t.Errorf("dimensions (-want +got):\n%s", diff)
			}
		})
	}
}

// TestUpstreamKeepsFields checks the rewrite sends every field as received
// but the model, as chat's does.
func TestUpstreamKeepsFields(t *testing.T) {
	r, err := embeddings.ParseRequest([]byte(`{"model":"public","input":["a"],"dimensions":64,"x_custom":{"k":[1,2]},"user":"u"}`))
	if err != nil {
		t.Fatal(err)
	}
	b, err := r.Upstream("upstream-name")
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"model": "upstream-name", "input": []any{"a"}, "dimensions": 64.0, "x_custom": map[string]any{"k": []any{1.0, 2.0}}, "user": "u"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("upstream body (-want +got):\n%s", diff)
	}
}

func TestInputCounts(t *testing.T) {
	in := embeddings.Input{Tokens: [][]int64{{1, 2}, {3}}}
	if in.Len() != 2 || in.TokenIDs() != 3 {
		t.Errorf("Len %d TokenIDs %d, want 2 and 3", in.Len(), in.TokenIDs())
	}
	in = embeddings.Input{Texts: []string{"a", "b", "c"}}
	if in.Len() != 3 || in.TokenIDs() != 0 {
		t.Errorf("Len %d TokenIDs %d, want 3 and 0", in.Len(), in.TokenIDs())
	}
}

func TestCheckResponse(t *testing.T) {
	vec := func(i int) string { return fmt.Sprintf(`{"object":"embedding","index":%d,"embedding":[0.1,-0.2]}`, i) }
	tests := []struct {
		name   string
		body   string
		inputs int
		ok     bool
	}{
		{"one", `{"object":"list","data":[` + vec(0) + `],"model":"m","usage":{"prompt_tokens":1,"total_tokens":1}}`, 1, true},
		{"out of order", `{"data":[` + vec(1) + `,` + vec(0) + `]}`, 2, true},
		{"base64", `{"data":[{"index":0,"embedding":"AAAAAA=="}]}`, 1, true},
		{"not an object", `[]`, 1, false},
		{"not JSON", `{"data":`, 1, false},
		{"empty", ``, 1, false},
		{"no data", `{"object":"list"}`, 1, false},
		{"data not an array", `{"data":{"index":0}}`, 1, false},
		{"too few", `{"data":[` + vec(0) + `]}`, 2, false},
		{"too many", `{"data":[` + vec(0) + `,` + vec(1) + `]}`, 1, false},
		{"index twice", `{"data":[` + vec(0) + `,` + vec(0) + `]}`, 2, false},
		{"index out of range", `{"data":[` + vec(2) + `,` + vec(0) + `]}`, 2, false},
		{"negative index", `{"data":[` + vec(-1) + `]}`, 1, false},
		{"no index", `{"data":[{"embedding":[1]}]}`, 1, false},
		{"no embedding", `{"data":[{"index":0}]}`, 1, false},
		{"null embedding", `{"data":[{"index":0,"embedding":null}]}`, 1, false},
		{"empty embedding", `{"data":[{"index":0,"embedding":[ ]}]}`, 1, false},
		{"empty base64", `{"data":[{"index":0,"embedding":""}]}`, 1, false},
		{"number embedding", `{"data":[{"index":0,"embedding":3}]}`, 1, false},
		{"chat completion", `{"object":"chat.completion","choices":[{"index":0,"message":{"content":"hi"}}]}`, 1, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := embeddings.CheckResponse([]byte(tc.body), tc.inputs)
			if tc.ok && err != nil {
				t.Fatalf("err = %v, want nil", err)
			}
			if !tc.ok && !errors.Is(err, embeddings.ErrBadResponse) {
				t.Fatalf("err = %v, want ErrBadResponse", err)
			}
		})
	}
}
