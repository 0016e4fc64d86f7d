package x402

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"
)

// MaxStrictJSONDepth bounds the nesting of a document CheckStrictJSON accepts.
const MaxStrictJSONDepth = 32

// ErrNotStrictJSON is wrapped by every error of CheckStrictJSON; the error
// never quotes the input.
var ErrNotStrictJSON = errors.New("not a single JSON value without duplicate keys")

// CheckStrictJSON checks that b is exactly one JSON value in UTF-8, nested at
// most MaxStrictJSONDepth deep, whose objects have no duplicate keys.
// encoding/json keeps the last of duplicate keys where other parsers keep the
// first, so a signed or recorded document with duplicates could be read two
// ways; documents that are signed or kept (receipts, journals) are checked with
// it before they are decoded.
func CheckStrictJSON(b []byte) error {
	if !utf8.Valid(b) {
		// encoding/json would replace the bad bytes, silently.
		return fmt.Errorf("%w: not UTF-8", ErrNotStrictJSON)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := strictValue(dec, 0); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return fmt.Errorf("%w: data after the value", ErrNotStrictJSON)
	}
	return nil
}

func strictValue(dec *json.Decoder, depth int) error {
	if depth > MaxStrictJSONDepth {
		return fmt.Errorf("%w: nested deeper than %d", ErrNotStrictJSON, MaxStrictJSONDepth)
	}
	tok, err := dec.Token()
	if err != nil {
		return ErrNotStrictJSON
	}
	switch tok {
	case json.Delim('{'):
		seen := map[string]bool{}
		for dec.More() {
			k, err := dec.Token()
			if err != nil {
				return ErrNotStrictJSON
			}
			key, _ := k.(string)
			if seen[key] {
				return fmt.Errorf("%w: duplicate key", ErrNotStrictJSON)
			}
			seen[key] = true
			if err := strictValue(dec, depth+1); err != nil {
				return err
			}
		}
		if _, err := dec.Token(); err != nil {
			return ErrNotStrictJSON
		}
	case json.Delim('['):
		for dec.More() {
			if err := strictValue(dec, depth+1); err != nil {
				return err
			}
		}
		if _, err := dec.Token(); err != nil {
			return ErrNotStrictJSON
		}
	}
	return nil
}
