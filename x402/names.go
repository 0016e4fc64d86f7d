package x402

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"sync"
)

// errFieldName is wrapped, under ErrHeaderJSON, by the decoders when a
// member name would be read differently here and by the official TypeScript
// decoder.
var errFieldName = errors.New("member names must match the protocol's field names exactly")

// Unmarshal decodes JSON into v like encoding/json, but first refuses a
// document that encoding/json and a case-sensitive decoder (the official
// TypeScript packages') would read differently: a member whose name matches
// a field of v's type only case-insensitively ("Accepts", "ACCEPTS",
// "acceptſ" with a long s). encoding/json folds case when it matches names,
// so {"accepts":[A],"Accepts":[B]} would be B here and A there; a seller
// could show a person one offer and have the client pay another. A member
// given twice under the exact same name is left alone: both decoders keep
// the last. Objects decoded into maps, json.RawMessage or types with
// their own UnmarshalJSON are not looked into, except PaymentRequired's,
// whose shape this package knows. The error never quotes the input.
func Unmarshal(data []byte, v any) error {
	if err := checkNames(data, reflect.TypeOf(v)); err != nil {
		return err
	}
	return json.Unmarshal(data, v)
}

// checkNames walks data along the struct fields of t.
func checkNames(data []byte, t reflect.Type) error {
	return checkNamesShape(data, shapeFor(t))
}

func checkNamesShape(data []byte, sh *shape) error {
	if sh == nil || onlyExactNames(data, sh) {
		return nil
	}
	if err := walkNames(data, sh); errors.Is(err, errFieldName) {
		return err
	}
	// Not JSON: encoding/json reports that with its own words next.
	return nil
}

// walkNames walks the JSON document data along sh.
func walkNames(data []byte, sh *shape) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	return walk(dec, sh)
}

// onlyExactNames reports, without decoding data, that no member name in it
// can match a field of sh only case-insensitively, so that the walk, which
// costs hundreds of allocations per header, can be skipped. It reads every
// string of data (members and values alike) as its raw bytes: when data is
// ASCII and has no \u escape, a string that folds to a field name is
// spelled with letters alone, so its bytes are its value, and they fold as
// ASCII (no long s, no Kelvin sign). It holds when no string folds to a
// field name of sh without being one of them exactly. false only means:
// walk.
func onlyExactNames(data []byte, sh *shape) bool {
	names := sh.names()
	if names == nil {
		return false
	}
	var buf [maxFieldName]byte
	for i := 0; i < len(data); i++ {
		if data[i] >= 0x80 {
			return false
		}
		if data[i] != '"' {
			continue
		}
		j := i + 1
		for ; j < len(data) && data[j] != '"'; j++ {
			switch {
			case data[j] >= 0x80:
				return false
			case data[j] == '\\':
				if j+1 < len(data) && data[j+1] == 'u' {
					return false
				}
				j++ // the escaped byte, a quote among them
			}
		}
		str := data[i+1 : min(j, len(data))]
		i = j
		if len(str) > len(buf) {
			continue // longer than any field name
		}
		folded := buf[:len(str)]
		for k, c := range str {
			if 'A' <= c && c <= 'Z' {
				c += 'a' - 'A'
			}
			folded[k] = c
		}
		exact, ok := names[string(folded)]
		if !ok {
			continue
		}
		found := false
		for _, e := range exact {
			found = found || string(str) == e
		}
		if !found {
			return false
		}
	}
	return true
}

// maxFieldName bounds the length of a field name onlyExactNames looks for;
// a shape with a longer one is always walked.
const maxFieldName = 64

// shape is what a Go type expects of a JSON value: an object with these
// fields, a map of values of one shape, or an array of them.
type shape struct {
	fields map[string]*shape // a struct: its JSON field names
	elem   *shape            // a map's values or a slice's elements
	isMap  bool

	namesOnce sync.Once
	folded    map[string][]string // see names
}

// names returns every field name of sh and of the shapes within it, by
// their ASCII-lowercased form; nil when one of them is not ASCII or is
// longer than maxFieldName, which onlyExactNames cannot look for (it then
// walks every document).
func (sh *shape) names() map[string][]string {
	sh.namesOnce.Do(func() {
		folded := map[string][]string{}
		seen := map[*shape]bool{}
		ok := true
		var visit func(*shape)
		visit = func(s *shape) {
			if s == nil || seen[s] {
				return
			}
			seen[s] = true
			for name, f := range s.fields {
				ok = ok && isASCII(name) && len(name) <= maxFieldName
				k := strings.ToLower(name)
				folded[k] = append(folded[k], name)
				visit(f)
			}
			visit(s.elem)
		}
		visit(sh)
		if ok {
			sh.folded = folded
		}
	})
	return sh.folded
}

func isASCII(s string) bool {
	for i := range len(s) {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

// shapes caches shapeFor by type.
var shapes sync.Map // reflect.Type -> *shape (nil stored as (*shape)(nil))

var (
	unmarshalerType    = reflect.TypeFor[json.Unmarshaler]()
	rawMessageType     = reflect.TypeFor[json.RawMessage]()
	paymentRequiredTyp = reflect.TypeFor[PaymentRequired]()
	paymentPayloadTyp  = reflect.TypeFor[PaymentPayload]()
	settleResponseTyp  = reflect.TypeFor[SettleResponse]()
)

// shapeFor returns the shape of t, or nil when nothing in t is matched by
// name (a map of raw JSON, a string, a type with its own UnmarshalJSON).
func shapeFor(t reflect.Type) *shape {
	if t == nil {
		return nil
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if v, ok := shapes.Load(t); ok {
		return v.(*shape)
	}
	sh := buildShape(t, map[reflect.Type]*shape{})
	shapes.Store(t, sh)
	return sh
}

func buildShape(t reflect.Type, building map[reflect.Type]*shape) *shape {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if sh, ok := building[t]; ok {
		return sh // a recursive type: the shape being built
	}
	custom := t != paymentRequiredTyp && (t.Implements(unmarshalerType) || reflect.PointerTo(t).Implements(unmarshalerType))
	if custom || t == rawMessageType {
		return nil
	}
	switch t.Kind() {
	case reflect.Struct:
		sh := &shape{fields: map[string]*shape{}}
		building[t] = sh
		addFields(sh, t, building)
		if t == paymentPayloadTyp {
			// accepted stays raw in the struct but is read as requirements
			// (AcceptedRequirements) and matched against an offer.
			sh.fields["accepted"] = buildShape(reflect.TypeFor[PaymentRequirements](), building)
		}
		return sh
	case reflect.Map:
		if e := buildShape(t.Elem(), building); e != nil {
			return &shape{isMap: true, elem: e}
		}
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 {
			return nil // []byte is a base64 string
		}
		if e := buildShape(t.Elem(), building); e != nil {
			return &shape{elem: e}
		}
	default:
	}
	return nil
}

// addFields adds t's JSON fields to sh as encoding/json names them,
// promoting the fields of untagged embedded structs.
func addFields(sh *shape, t reflect.Type, building map[reflect.Type]*shape) {
	for f := range t.Fields() {
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		ft := f.Type
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if f.Anonymous && name == "" && ft.Kind() == reflect.Struct {
			addFields(sh, ft, building)
			continue
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		sh.fields[name] = buildShape(f.Type, building)
	}
}

// walk reads one value from dec and checks it against sh (nil: anything).
func walk(dec *json.Decoder, sh *shape) error {
	if sh == nil {
		return skip(dec)
	}
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	switch tok {
	case json.Delim('{'):
		if sh.isMap {
			for dec.More() {
				if _, err := dec.Token(); err != nil {
					return err
				}
				if err := walk(dec, sh.elem); err != nil {
					return err
				}
			}
		} else if err := walkObject(dec, sh); err != nil {
			return err
		}
		_, err = dec.Token()
		return err
	case json.Delim('['):
		for dec.More() {
			if err := walk(dec, sh.elem); err != nil {
				return err
			}
		}
		_, err = dec.Token()
		return err
	}
	return nil
}

// walkObject checks the members of an object decoded into a struct.
func walkObject(dec *json.Decoder, sh *shape) error {
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		key, _ := tok.(string)
		field, exact := sh.fields[key]
		if !exact {
			for name := range sh.fields {
				if strings.EqualFold(key, name) {
					return fmt.Errorf("%w: a member differs from %q only in case", errFieldName, name)
				}
			}
		}
		if err := walk(dec, field); err != nil {
			return err
		}
	}
	return nil
}

// skip reads one value from dec without looking into it, iteratively, so
// that deep nesting costs no stack.
func skip(dec *json.Decoder) error {
	depth := 0
	for {
		tok, err := dec.Token()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return io.ErrUnexpectedEOF
			}
			return err
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			depth++
		case json.Delim('}'), json.Delim(']'):
			depth--
		}
		if depth == 0 {
			return nil
		}
	}
}
