package exact

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
)

// The payload of the exact scheme is two levels of JSON objects whose leaves are
// all strings. It is parsed here by a small strict scanner instead of
// encoding/json: it reads each value in place (no intermediate maps or
// RawMessage copies, a third of the allocations of a verification), spells keys
// exactly (encoding/json would accept "Signature" for "signature"), and refuses
// duplicate and unknown keys.

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

// str reads a JSON string. Without escapes the result aliases the input; with
// them encoding/json decodes the literal.
func (s *scanner) str() ([]byte, error) {
	if err := s.expect('"'); err != nil {
		return nil, err
	}
	start, escaped := s.i, false
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			lit := s.b[start:s.i]
			s.i++
			if !escaped {
				return lit, nil
			}
			var out string
			if err := json.Unmarshal(s.b[start-1:s.i], &out); err != nil {
				return nil, errSyntax
			}
			return []byte(out), nil
		case c == '\\':
			escaped = true
			s.i += 2
		case c < 0x20:
			return nil, errSyntax
		default:
			s.i++
		}
	}
	return nil, errSyntax
}

// object reads an object whose values field handles, key by key. A key seen
// twice is refused.
func (s *scanner) object(field func(key []byte) error) error {
	if err := s.expect('{'); err != nil {
		return err
	}
	if s.peek() == '}' {
		s.i++
		return nil
	}
	for {
		key, err := s.str()
		if err != nil {
			return err
		}
		if err := s.expect(':'); err != nil {
			return err
		}
		if err := field(key); err != nil {
			return err
		}
		switch s.peek() {
		case ',':
			s.i++
		case '}':
			s.i++
			return nil
		default:
			return errSyntax
		}
	}
}

// parsePayload parses the scheme payload with the scanner.
func parsePayload(raw []byte) (*Payload, error) {
	s := &scanner{b: raw}
	var p Payload
	var sig, from, to, value, after, before, nonce []byte
	var seen uint8
	once := func(bit uint8, key []byte) error {
		if seen&bit != 0 {
			return fmt.Errorf("payload has key %q twice", key)
		}
		seen |= bit
		return nil
	}
	err := s.object(func(key []byte) error {
		var err error
		switch string(key) {
		case "signature":
			if err = once(1, key); err == nil {
				sig, err = s.str()
			}
		case "authorization":
			if err = once(2, key); err != nil {
				return err
			}
			var aseen uint8
			err = s.object(func(k []byte) error {
				var dst *[]byte
				var bit uint8
				switch string(k) {
				case "from":
					dst, bit = &from, 1
				case "to":
					dst, bit = &to, 2
				case "value":
					dst, bit = &value, 4
				case "validAfter":
					dst, bit = &after, 8
				case "validBefore":
					dst, bit = &before, 16
				case "nonce":
					dst, bit = &nonce, 32
				default:
					return fmt.Errorf("payload.authorization has unknown key %q", k)
				}
				if aseen&bit != 0 {
					return fmt.Errorf("payload.authorization has key %q twice", k)
				}
				aseen |= bit
				v, err := s.str()
				if err != nil {
					return fmt.Errorf("payload.authorization.%s is not a string", k)
				}
				*dst = v
				return nil
			})
		case "permit2Authorization":
			return errors.New("permit2 payloads are not supported")
		default:
			return fmt.Errorf("payload has unknown key %q", key)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	if s.peek() != 0 {
		return nil, errSyntax
	}
	if seen&2 == 0 {
		return nil, errors.New("payload has no authorization")
	}
	a := &p.Authorization
	if a.From, err = ParseAddress(string(from)); err != nil {
		return nil, fmt.Errorf("authorization.from: %w", err)
	}
	if a.To, err = ParseAddress(string(to)); err != nil {
		return nil, fmt.Errorf("authorization.to: %w", err)
	}
	if a.Value, err = parseUint256Bytes(value); err != nil {
		return nil, fmt.Errorf("authorization.value: %w", err)
	}
	if a.ValidAfter, err = parseUint256Bytes(after); err != nil {
		return nil, fmt.Errorf("authorization.validAfter: %w", err)
	}
	if a.ValidBefore, err = parseUint256Bytes(before); err != nil {
		return nil, fmt.Errorf("authorization.validBefore: %w", err)
	}
	if len(nonce) != 66 || nonce[0] != '0' || nonce[1] != 'x' {
		return nil, fmt.Errorf("authorization.nonce: %w", errNotNonce)
	}
	if _, err := hex.Decode(a.Nonce[:], nonce[2:]); err != nil {
		return nil, fmt.Errorf("authorization.nonce: %w", errNotNonce)
	}
	if len(sig) > 0 && string(sig) != "0x" {
		if len(sig) < 2 || sig[0] != '0' || sig[1] != 'x' || len(sig)%2 != 0 || len(sig) > 2+2*maxSignatureBytes {
			return nil, fmt.Errorf("signature: %w", errSignature)
		}
		p.Signature = make([]byte, (len(sig)-2)/2)
		if _, err := hex.Decode(p.Signature, sig[2:]); err != nil {
			return nil, fmt.Errorf("signature: %w", errSignature)
		}
	}
	return &p, nil
}
