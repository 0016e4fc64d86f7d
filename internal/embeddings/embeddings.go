// Package embeddings holds the OpenAI embeddings wire types the gateway reads
// and rewrites: the request (kept as raw JSON so fields we do not know pass
// through untouched, as chat requests do), its inputs, the usage, and the
// check of an answer's shape.
//
// Only the fields that move the price, the routing or the answer's shape are
// decoded: model, input, encoding_format, dimensions and user. Everything
// else is forwarded byte for byte.
//
// The bounds are OpenAI's documented ones (at most 2048 inputs and 300,000
// tokens in one request), so that a request the upstream would refuse is
// refused here, before anyone is asked to pay for it.
package embeddings

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"strconv"
)

// Bounds of one request, as OpenAI documents them for /v1/embeddings.
const (
	// MaxInputs is the most inputs (strings or token arrays) one request
	// may carry.
	MaxInputs = 2048
	// MaxTokens is the most input tokens one request may carry, summed over
	// its inputs.
	MaxTokens = 300_000
	// MaxTokenID is the largest token id accepted: above every tokenizer's
	// vocabulary (o200k_base has about 200,000 tokens), and small enough
	// that no upstream's integer type overflows on it.
	MaxTokenID = math.MaxInt32
)

// Encoding formats of the answer's vectors.
const (
	FormatFloat  = "float"
	FormatBase64 = "base64"
)

// Errors of ParseRequest. Each is a 400 invalid_request_error for the client;
// the ones that carry a position wrap one of these.
var (
	ErrNotObject     = errors.New("request body must be a JSON object")
	ErrNoModel       = errors.New("model is required")
	ErrNoInput       = errors.New("input is required: a string, an array of strings, an array of token ids or an array of token-id arrays")
	ErrEmptyInput    = errors.New("input must not be empty")
	ErrBadInput      = errors.New("input must be a string, an array of strings, an array of token ids or an array of token-id arrays")
	ErrTooManyInputs = fmt.Errorf("input has more than %d items", MaxInputs)
	ErrTooManyTokens = fmt.Errorf("input has more than %d tokens", MaxTokens)
	ErrBadTokenID    = fmt.Errorf("a token id must be an integer from 0 to %d", MaxTokenID)
	ErrBadField      = errors.New("a field has the wrong type")
	ErrBadFormat     = errors.New(`encoding_format must be "float" or "base64"`)
	ErrBadDimensions = errors.New("dimensions must be a positive integer")
)

// errNotArray is array's error; callers say which input it was.
var errNotArray = errors.New("not a JSON array")

// Request is an embeddings request body.
type Request struct {
	Model string
	Input Input
	// EncodingFormat is FormatFloat or FormatBase64; "" when absent (the
	// upstream's default, float).
	EncodingFormat string
	// Dimensions is the vectors' length the client asked for; nil when
	// absent (the model's own).
	Dimensions *int64

	// fields holds every top-level key as received, for re-encoding.
	fields map[string]json.RawMessage
}

// Input is what a request embeds: texts, or token-id arrays, never both (the
// API's input is a string, an array of strings, an array of token ids or an
// array of token-id arrays). A single string is one text and a single array
// of token ids is one token input.
type Input struct {
	Texts  []string
	Tokens [][]int64
}

// Len is the number of inputs: the number of vectors the answer must hold.
func (in Input) Len() int { return len(in.Texts) + len(in.Tokens) }

// TokenIDs is the number of token ids of the token inputs, 0 for texts.
func (in Input) TokenIDs() int64 {
	var n int64
	for _, t := range in.Tokens {
		n += int64(len(t))
	}
	return n
}

// ParseRequest decodes and validates an embeddings body. Every input is
// checked (an empty string or token array, a token id out of range, a mix of
// kinds is an error), and the number of inputs and of token ids is bounded;
// the tokens of texts are the caller's to count, with the model's encoding.
func ParseRequest(body []byte) (*Request, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil || fields == nil {
		return nil, ErrNotObject
	}
	r := &Request{fields: fields}
	if err := decodeField(fields, "model", &r.Model); err != nil {
		return nil, err
	}
	if r.Model == "" {
		return nil, ErrNoModel
	}
	raw, ok := fields["input"]
	if !ok || isNull(raw) {
		return nil, ErrNoInput
	}
	in, err := parseInput(raw)
	if err != nil {
		return nil, err
	}
	r.Input = in
	var format *string
	if err := decodeField(fields, "encoding_format", &format); err != nil {
		return nil, ErrBadFormat
	}
	if format != nil {
		if *format != FormatFloat && *format != FormatBase64 {
			return nil, ErrBadFormat
		}
		r.EncodingFormat = *format
	}
	if err := decodeField(fields, "dimensions", &r.Dimensions); err != nil {
		return nil, ErrBadDimensions
	}
	if r.Dimensions != nil && *r.Dimensions < 1 {
		return nil, ErrBadDimensions
	}
	// user is only forwarded, but a wrong type is refused here, before a
	// quote, rather than by the upstream once the buyer signed a payment.
	var user string
	if err := decodeField(fields, "user", &user); err != nil {
		return nil, err
	}
	return r, nil
}

// parseInput reads input: its first element decides the kind, and every
// other element must be of the same kind.
func parseInput(raw json.RawMessage) (Input, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return Input{}, ErrBadInput
	}
	switch raw[0] {
	case '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return Input{}, ErrBadInput
		}
		if s == "" {
			return Input{}, fmt.Errorf("%w: the string is empty", ErrEmptyInput)
		}
		return Input{Texts: []string{s}}, nil
	case '[':
	default:
		return Input{}, ErrBadInput
	}
	elems, err := array(raw)
	if err != nil {
		return Input{}, ErrBadInput
	}
	if len(elems) == 0 {
		return Input{}, fmt.Errorf("%w: the array is empty", ErrEmptyInput)
	}
	switch first := elems[0]; {
	case first[0] == '"':
		return texts(elems)
	case first[0] == '[':
		return tokenArrays(elems)
	case first[0] == '-' || first[0] >= '0' && first[0] <= '9':
		// One input given as token ids: its length is its token count.
		if len(elems) > MaxTokens {
			return Input{}, ErrTooManyTokens
		}
		ids, err := tokenIDs(elems, "input")
		if err != nil {
			return Input{}, err
		}
		return Input{Tokens: [][]int64{ids}}, nil
	}
	return Input{}, ErrBadInput
}

func texts(elems []json.RawMessage) (Input, error) {
	if len(elems) > MaxInputs {
		return Input{}, ErrTooManyInputs
	}
	out := make([]string, len(elems))
	for i, e := range elems {
		if e[0] != '"' || json.Unmarshal(e, &out[i]) != nil {
			return Input{}, fmt.Errorf("%w: input[%d] is not a string", ErrBadInput, i)
		}
		if out[i] == "" {
			return Input{}, fmt.Errorf("%w: input[%d] is an empty string", ErrEmptyInput, i)
		}
	}
	return Input{Texts: out}, nil
}

func tokenArrays(elems []json.RawMessage) (Input, error) {
	if len(elems) > MaxInputs {
		return Input{}, ErrTooManyInputs
	}
	out := make([][]int64, len(elems))
	total := 0
	for i, e := range elems {
		at := fmt.Sprintf("input[%d]", i)
		if e[0] != '[' {
			return Input{}, fmt.Errorf("%w: %s is not an array of token ids", ErrBadInput, at)
		}
		ids, err := array(e)
		if err != nil {
			return Input{}, fmt.Errorf("%w: %s is not an array of token ids", ErrBadInput, at)
		}
		if len(ids) == 0 {
			return Input{}, fmt.Errorf("%w: %s is an empty array", ErrEmptyInput, at)
		}
		if total += len(ids); total > MaxTokens {
			return Input{}, ErrTooManyTokens
		}
		if out[i], err = tokenIDs(ids, at); err != nil {
			return Input{}, err
		}
	}
	return Input{Tokens: out}, nil
}

// tokenIDs reads JSON numbers that must be token ids: plain integers (no
// fraction, exponent or sign) from 0 to MaxTokenID.
func tokenIDs(elems []json.RawMessage, at string) ([]int64, error) {
	out := make([]int64, len(elems))
	for i, e := range elems {
		if len(e) == 0 || e[0] < '0' || e[0] > '9' {
			if len(e) > 0 && e[0] == '-' {
				return nil, fmt.Errorf("%w: %s[%d] is negative", ErrBadTokenID, at, i)
			}
			return nil, fmt.Errorf("%w: %s[%d] is not a number", ErrBadInput, at, i)
		}
		n, err := strconv.ParseInt(string(e), 10, 64)
		if err != nil || n > MaxTokenID {
			return nil, fmt.Errorf("%w: %s[%d] is %s", ErrBadTokenID, at, i, truncate(string(e), 40))
		}
		out[i] = n
	}
	return out, nil
}

// array splits a JSON array into its elements, each trimmed and non-empty.
func array(raw json.RawMessage) ([]json.RawMessage, error) {
	var elems []json.RawMessage
	if err := json.Unmarshal(raw, &elems); err != nil {
		return nil, errNotArray
	}
	for i := range elems {
		elems[i] = bytes.TrimSpace(elems[i])
		if len(elems[i]) == 0 {
			return nil, errNotArray
		}
	}
	return elems, nil
}

func decodeField(fields map[string]json.RawMessage, key string, v any) error {
	raw, ok := fields[key]
	if !ok || isNull(raw) {
		return nil
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return fmt.Errorf("%w: %s", ErrBadField, key)
	}
	return nil
}

func isNull(raw json.RawMessage) bool { return string(bytes.TrimSpace(raw)) == "null" }

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// Upstream returns the body to send upstream: model replaced by the
// upstream's name for it, every other field kept as received.
func (r *Request) Upstream(model string) ([]byte, error) {
	out := make(map[string]json.RawMessage, len(r.fields))
	maps.Copy(out, r.fields)
	m, err := json.Marshal(model)
	if err != nil {
		return nil, err
	}
	out["model"] = m
	return json.Marshal(out)
}

// Usage is the token accounting of an embeddings answer: input tokens only.
type Usage struct {
	PromptTokens int64 `json:"prompt_tokens"`
	TotalTokens  int64 `json:"total_tokens"`
}

// ErrBadResponse is CheckResponse's error: the upstream's answer is not the
// list of vectors the request asked for, and nothing of it may be sold.
var ErrBadResponse = errors.New("not an embeddings list")

// CheckResponse checks that body, an upstream's 200 answer, is an embeddings
// list with exactly one vector for each of inputs inputs: a data array whose
// indexes are 0 to inputs-1, each once, and whose embeddings are non-empty
// arrays (float) or strings (base64). The numbers themselves are not read:
// the body is valid JSON, and a client decodes its own vectors.
func CheckResponse(body []byte, inputs int) error {
	var r struct {
		Data []struct {
			Index     *int            `json:"index"`
			Embedding json.RawMessage `json:"embedding"`
		} `json:"data"`
	}
	if t := bytes.TrimSpace(body); len(t) == 0 || t[0] != '{' {
		return fmt.Errorf("%w: the body is not a JSON object", ErrBadResponse)
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return fmt.Errorf("%w: %w", ErrBadResponse, err)
	}
	if len(r.Data) != inputs {
		return fmt.Errorf("%w: %d vectors for %d inputs", ErrBadResponse, len(r.Data), inputs)
	}
	seen := make([]bool, inputs)
	for i, d := range r.Data {
		switch {
		case d.Index == nil || *d.Index < 0 || *d.Index >= inputs:
			return fmt.Errorf("%w: data[%d] has no index from 0 to %d", ErrBadResponse, i, inputs-1)
		case seen[*d.Index]:
			return fmt.Errorf("%w: index %d is given twice", ErrBadResponse, *d.Index)
		}
		seen[*d.Index] = true
		if !nonEmptyVector(d.Embedding) {
			return fmt.Errorf("%w: data[%d] has no embedding", ErrBadResponse, i)
		}
	}
	return nil
}

// nonEmptyVector reports whether e, valid JSON, is a non-empty array (float
// vectors) or a non-empty string (base64 vectors).
func nonEmptyVector(e json.RawMessage) bool {
	e = bytes.TrimSpace(e)
	if len(e) < 2 {
		return false
	}
	switch e[0] {
	case '[':
		return len(bytes.TrimSpace(e[1:len(e)-1])) > 0
	case '"':
		return len(e) > 2
	}
	return false
}
