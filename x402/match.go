package x402

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/big"
	"reflect"
	"strings"
)

// Match reports whether accepted, the requirement a client echoed, is the offer,
// so that a payment for a cheaper request cannot buy a dearer one: scheme, network, amount and maxTimeoutSeconds equal; asset and
// payTo equal ignoring case; every key of the offer's extra present in accepted's
// extra with the same JSON value. The client may add keys to extra. The error names
// the first field that differs.
func Match(offer, accepted PaymentRequirements) error {
	switch {
	case offer.Scheme != accepted.Scheme:
		return fmt.Errorf("accepted scheme %q is not the offered %q", accepted.Scheme, offer.Scheme)
	case offer.Network != accepted.Network:
		return fmt.Errorf("accepted network %q is not the offered %q", accepted.Network, offer.Network)
	case offer.Amount != accepted.Amount:
		return fmt.Errorf("accepted amount %q is not the offered %q", accepted.Amount, offer.Amount)
	case !strings.EqualFold(offer.Asset, accepted.Asset):
		return fmt.Errorf("accepted asset %q is not the offered %q", accepted.Asset, offer.Asset)
	case !strings.EqualFold(offer.PayTo, accepted.PayTo):
		return fmt.Errorf("accepted payTo %q is not the offered %q", accepted.PayTo, offer.PayTo)
	case offer.MaxTimeoutSeconds != accepted.MaxTimeoutSeconds:
		return fmt.Errorf("accepted maxTimeoutSeconds %d is not the offered %d", accepted.MaxTimeoutSeconds, offer.MaxTimeoutSeconds)
	}
	return extraSubset(offer.Extra, accepted.Extra)
}

func extraSubset(offer, accepted json.RawMessage) error {
	if len(bytes.TrimSpace(offer)) == 0 || string(bytes.TrimSpace(offer)) == "null" {
		return nil
	}
	if o := bytes.TrimSpace(offer); o[0] == '{' && bytes.Equal(o, bytes.TrimSpace(accepted)) {
		return nil // the usual case: the client echoed the offer's extra verbatim
	}
	var want map[string]any
	if err := decodeExact(offer, &want); err != nil {
		return fmt.Errorf("offered extra is not an object: %w", err)
	}
	var got map[string]any
	if len(bytes.TrimSpace(accepted)) > 0 {
		if err := decodeExact(accepted, &got); err != nil {
			return fmt.Errorf("accepted extra is not an object: %w", err)
		}
	}
	if got == nil && len(want) > 0 {
		return fmt.Errorf("accepted has no extra")
	}
	for k, v := range want {
		gv, ok := got[k]
		if !ok {
			return fmt.Errorf("accepted extra lacks %q", k)
		}
		if !jsonEqual(v, gv) {
			return fmt.Errorf("accepted extra %q differs from the offer", k)
		}
	}
	return nil
}

// decodeExact decodes JSON keeping numbers as their decimal text, so that large
// integers in extra compare exactly rather than as float64.
func decodeExact(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	return dec.Decode(v)
}

// jsonEqual compares decoded JSON values; numbers compare by exact value, so 1,
// 1.0 and 1e0 are equal and large integers do not collide as they would in float64.
func jsonEqual(a, b any) bool {
	switch av := a.(type) {
	case json.Number:
		bv, ok := b.(json.Number)
		if !ok {
			return false
		}
		if hugeExponent(string(av)) || hugeExponent(string(bv)) {
			return av == bv // refuse to expand 1e999999999 into a number
		}
		ar, aok := new(big.Rat).SetString(string(av))
		br, bok := new(big.Rat).SetString(string(bv))
		return aok && bok && ar.Cmp(br) == 0
	case map[string]any:
		bv, ok := b.(map[string]any)
		if !ok || len(av) != len(bv) {
			return false
		}
		for k, x := range av {
			y, ok := bv[k]
			if !ok || !jsonEqual(x, y) {
				return false
			}
		}
		return true
	case []any:
		bv, ok := b.([]any)
		if !ok || len(av) != len(bv) {
			return false
		}
		for i := range av {
			if !jsonEqual(av[i], bv[i]) {
				return false
			}
		}
		return true
	default:
		return reflect.DeepEqual(a, b)
	}
}

// hugeExponent reports whether a JSON number has an exponent of more than three
// digits, which exact arithmetic would expand at great cost.
func hugeExponent(n string) bool {
	i := strings.IndexAny(n, "eE")
	if i < 0 {
		return false
	}
	exp := strings.TrimLeft(n[i+1:], "+-0")
	return len(exp) > 3
}

// FindMatch returns the index of the offer that accepted matches, or -1.
func FindMatch(offers []PaymentRequirements, accepted PaymentRequirements) int {
	for i, o := range offers {
		if Match(o, accepted) == nil {
			return i
		}
	}
	return -1
}
