package upto

import (
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"
)

// The payload of the upto scheme is three levels of JSON objects whose leaves
// are all strings. It is read here by a small strict scanner rather than
// encoding/json, which matches keys case-insensitively ("Nonce" for "nonce"),
// keeps the last of duplicate keys (other parsers keep the first, so a payload
// with duplicates could be read two ways) and ignores unknown keys.

var errSyntax = errors.New("payload is not a JSON object of the expected shape")

type scanner struct {
	b []byte
	i int
}

func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// peek returns the next non-space byte, or 0 at the end.
func (s *scanner) peek() byte {
	s.ws()
	if s.i >= len(s.b) {
		return 0
	}
	return s.b[s.i]
}

func (s *scanner) expect(c byte) error {
	if s.peek() != c {
		return errSyntax
	}
	s.i++
	return nil
}

// str reads a JSON string. Escapes are decoded by encoding/json.
func (s *scanner) str() (string, error) {
	if err := s.expect('"'); err != nil {
		return "", err
	}
	start, escaped := s.i, false
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			lit := s.b[start:s.i]
			s.i++
			if !escaped {
				if !utf8.Valid(lit) {
					return "", errSyntax
				}
				return string(lit), nil
			}
			var out string
			if err := json.Unmarshal(s.b[start-1:s.i], &out); err != nil {
				return "", errSyntax
			}
			return out, nil
		case c == '\\':
			escaped = true
			s.i += 2
		case c < 0x20:
			return "", errSyntax
		default:
			s.i++
		}
	}
	return "", errSyntax
}

// field is one key of an object the scanner reads: either a string leaf (str)
// or a nested object (obj).
type field struct {
	key string
	str *string
	obj []field
}

// object reads an object with exactly the keys of fields, each once, at path
// (for messages).
func (s *scanner) object(path string, fields []field) error {
	if err := s.expect('{'); err != nil {
		return fmt.Errorf("%s: %w", path, errSyntax)
	}
	seen := make([]bool, len(fields))
	if s.peek() == '}' {
		s.i++
		return missing(path, fields, seen)
	}
	for {
		key, err := s.str()
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		if err := s.expect(':'); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		j := -1
		for k := range fields {
			if fields[k].key == key {
				j = k
				break
			}
		}
		if j < 0 {
			return fmt.Errorf("%s has unknown key %q", path, key)
		}
		if seen[j] {
			return fmt.Errorf("%s has key %q twice", path, key)
		}
		seen[j] = true
		f := fields[j]
		if f.obj != nil {
			if err := s.object(path+"."+key, f.obj); err != nil {
				return err
			}
		} else if *f.str, err = s.str(); err != nil {
			return fmt.Errorf("%s.%s is not a string", path, key)
		}
		switch s.peek() {
		case ',':
			s.i++
		case '}':
			s.i++
			return missing(path, fields, seen)
		default:
			return fmt.Errorf("%s: %w", path, errSyntax)
		}
	}
}

// missing names the first key an object lacked: every key is required, as
// the official facilitator requires them (an empty signature string is
// present, and verification names it).
func missing(path string, fields []field, seen []bool) error {
	for k, f := range fields {
		if !seen[k] {
			return fmt.Errorf("%s has no %q", path, f.key)
		}
	}
	return nil
}

// scanPayload reads the payload's JSON text into its wire form.
func scanPayload(raw []byte) (*PayloadJSON, error) {
	var w PayloadJSON
	a := &w.Authorization
	fields := []field{
		{key: "signature", str: &w.Signature},
		{key: "permit2Authorization", obj: []field{
			{key: "from", str: &a.From},
			{key: "permitted", obj: []field{
				{key: "token", str: &a.Permitted.Token},
				{key: "amount", str: &a.Permitted.Amount},
			}},
			{key: "spender", str: &a.Spender},
			{key: "nonce", str: &a.Nonce},
			{key: "deadline", str: &a.Deadline},
			{key: "witness", obj: []field{
				{key: "to", str: &a.Witness.To},
				{key: "facilitator", str: &a.Witness.Facilitator},
				{key: "validAfter", str: &a.Witness.ValidAfter},
			}},
		}},
	}
	s := &scanner{b: raw}
	if err := s.object("payload", fields); err != nil {
		return nil, err
	}
	if s.ws(); s.i != len(s.b) {
		return nil, errSyntax // data after the object (a NUL byte too)
	}
	return &w, nil
}
