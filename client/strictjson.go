package client

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"
)

// maxJSONDepth bounds the nesting of documents this package parses strictly.
const maxJSONDepth = 32

// errJSONShape is the error of strictJSON; it never quotes the input.
var errJSONShape = errors.New("not a single JSON value without duplicate keys")

// strictJSON checks that b is exactly one JSON value in UTF-8, nested at most
// maxJSONDepth deep, whose objects have no duplicate keys. encoding/json keeps
// the last of duplicate keys where other parsers keep the first, so a signed
// or recorded document with duplicates could be read two ways.
func strictJSON(b []byte) error {
	if !utf8.Valid(b) {
		// encoding/json would replace the bad bytes, silently.
		return fmt.Errorf("%w: not UTF-8", errJSONShape)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := strictValue(dec, 0); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return fmt.Errorf("%w: data after the value", errJSONShape)
	}
	return nil
}

func strictValue(dec *json.Decoder, depth int) error {
	if depth > maxJSONDepth {
		return fmt.Errorf("%w: nested deeper than %d", errJSONShape, maxJSONDepth)
	}
	tok, err := dec.Token()
	if err != nil {
		return errJSONShape
	}
	switch tok {
	case json.Delim('{'):
		seen := map[string]bool{}
		for dec.More() {
			k, err := dec.Token()
			if err != nil {
				return errJSONShape
			}
			key, _ := k.(string)
			if seen[key] {
				return fmt.Errorf("%w: duplicate key", errJSONShape)
			}
			seen[key] = true
			if err := strictValue(dec, depth+1); err != nil {
				return err
			}
		}
		if _, err := dec.Token(); err != nil {
			return errJSONShape
		}
	case json.Delim('['):
		for dec.More() {
			if err := strictValue(dec, depth+1); err != nil {
				return err
			}
		}
		if _, err := dec.Token(); err != nil {
			return errJSONShape
		}
	}
	return nil
}
