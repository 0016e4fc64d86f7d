package upstream

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"math"
	"net/http"
	"strconv"

	"github.com/llm4agents/llm4agents/internal/chat"
	"github.com/llm4agents/llm4agents/internal/embeddings"
)

const (
	// defaultDimensions is the length of a demo vector when the request
	// names none: short, so tests and the demo stay small.
	defaultDimensions = 32
	// maxDimensions is the longest vector the demo makes, as
	// text-embedding-3-large's.
	maxDimensions = 3072
)

// Embed implements Embedder: one deterministic unit vector per input, a
// function of the model and the input alone (so equal inputs embed equally
// across requests, and a test can recompute them), of the requested
// dimensions (default 32, at most 3072), as floats or as base64 of
// little-endian float32s, as OpenAI encodes them. prompt_tokens counts each
// text with Tokenizer and each token input by its length.
func (d *Demo) Embed(ctx context.Context, body []byte) (*Completion, error) {
	if err := ctx.Err(); err != nil {
		return nil, contextError(err)
	}
	r, err := embeddings.ParseRequest(body)
	if err != nil {
		return nil, &Error{Status: http.StatusBadRequest, Type: "invalid_request_error", Code: "invalid_request", Message: err.Error(), Err: err}
	}
	dims := defaultDimensions
	if r.Dimensions != nil {
		if *r.Dimensions > maxDimensions {
			return nil, &Error{Status: http.StatusBadRequest, Type: "invalid_request_error", Code: "invalid_value", Param: "dimensions",
				Message: "dimensions must be at most " + strconv.Itoa(maxDimensions)}
		}
		dims = int(*r.Dimensions)
	}
	keys := make([][]byte, 0, r.Input.Len())
	var tokens int64
	for _, t := range r.Input.Texts {
		keys = append(keys, append([]byte{'t'}, t...))
		tokens += int64(d.cfg.Tokenizer.Count(t))
	}
	for _, ids := range r.Input.Tokens {
		k := make([]byte, 0, 1+4*len(ids))
		k = append(k, 'i') // texts start with 't': token inputs never embed as a text does
		for _, id := range ids {
			k = binary.LittleEndian.AppendUint32(k, uint32(id)) // #nosec G115 -- ParseRequest bounds ids to MaxTokenID
		}
		keys = append(keys, k)
		tokens += int64(len(ids))
	}
	list := embeddingListJSON{Object: "list", Data: make([]embeddingJSON, len(keys)), Model: r.Model,
		Usage: embeddings.Usage{PromptTokens: tokens, TotalTokens: tokens}}
	for i, k := range keys {
		v := demoVector(r.Model, k, dims)
		e := embeddingJSON{Object: "embedding", Index: i, Embedding: v}
		if r.EncodingFormat == embeddings.FormatBase64 {
			e.Embedding = encodeVector(v)
		}
		list.Data[i] = e
	}
	out, err := marshal(list)
	if err != nil {
		return nil, upstreamFailed(err)
	}
	return &Completion{
		Body: out, Usage: chat.Usage{PromptTokens: tokens, TotalTokens: tokens}, UsageReported: true, Header: http.Header{},
	}, nil
}

// demoVector is the demo's embedding of input for model (a text's bytes after
// a 't', or a token input's little-endian uint32 ids after an 'i'): dims
// components drawn from SHA-256 of the model, the input and a counter,
// scaled to unit length as OpenAI's embeddings are.
func demoVector(model string, input []byte, dims int) []float32 {
	v := make([]float64, dims)
	var norm float64
	var block [sha256.Size]byte
	for i := range v {
		if i%(sha256.Size/4) == 0 {
			h := sha256.New()
			_, _ = h.Write([]byte(model))
			_, _ = h.Write([]byte{0})
			_, _ = h.Write(input)
			_, _ = h.Write(binary.BigEndian.AppendUint32(nil, uint32(i))) // #nosec G115 -- i < maxDimensions
			h.Sum(block[:0])
		}
		u := binary.BigEndian.Uint32(block[4*(i%(sha256.Size/4)):])
		v[i] = float64(u)/(1<<31) - 1
		norm += v[i] * v[i]
	}
	norm = math.Sqrt(norm)
	out := make([]float32, dims)
	for i := range v {
		if norm > 0 {
			out[i] = float32(v[i] / norm)
		}
	}
	return out
}

// encodeVector is v as OpenAI's base64 encoding_format sends it: the
// little-endian float32s, base64 with padding.
func encodeVector(v []float32) string {
	b := make([]byte, 0, 4*len(v))
	for _, f := range v {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(f))
	}
	return base64.StdEncoding.EncodeToString(b)
}

// The OpenAI wire shapes of an embeddings answer, fields in OpenAI's order.

type embeddingListJSON struct {
	Object string           `json:"object"`
	Data   []embeddingJSON  `json:"data"`
	Model  string           `json:"model"`
	Usage  embeddings.Usage `json:"usage"`
}

type embeddingJSON struct {
	Object    string `json:"object"`
	Index     int    `json:"index"`
	Embedding any    `json:"embedding"` // []float32, or a base64 string
}

var _ Embedder = (*Demo)(nil)
