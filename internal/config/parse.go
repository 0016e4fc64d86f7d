package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Parse decodes a YAML configuration, fills the defaults and validates it.
// Decoding is strict: an unknown key, a duplicate key, a value of the wrong
// type or a second document is an error. Every error is a *FieldError (joined
// with errors.Join when there are several) naming the YAML path and the line,
// sorted by line; all problems are reported at once, not only the first.
func Parse(data []byte) (*Config, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, syntaxError(err)
	}
	if root.Kind != yaml.DocumentNode || len(root.Content) == 0 || root.Content[0].Tag == "!!null" {
		return nil, &FieldError{Msg: "the configuration is empty"}
	}
	ix := newIndex(&root)

	var c Config
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil {
		return nil, ix.decodeError(err)
	}
	var next yaml.Node
	switch err := dec.Decode(&next); {
	case errors.Is(err, io.EOF):
	case err != nil:
		return nil, syntaxError(err)
	default:
		return nil, &FieldError{Line: next.Line, Msg: "a second YAML document (after ---) is not allowed"}
	}

	var p problems
	if !ix.has("network.decimals") {
		p.add("network.decimals", "is required: the asset's decimals (6 for USDC); a wrong value misprices every call")
	}
	for i := range c.Networks {
		if at := fmt.Sprintf("networks[%d].decimals", i); !ix.has(at) {
			p.add(at, "is required: the asset's decimals (6 for USDC), the same as network.decimals")
		}
	}
	c.SetDefaults()
	p = append(p, c.validate()...)
	if len(p) == 0 {
		return &c, nil
	}
	for _, e := range p {
		if e.Line == 0 {
			e.Line = ix.lineOf(e.Path)
		}
	}
	sortByLine(p)
	return nil, p.err()
}

// sortByLine orders problems by line, keeping the order of equal lines and
// putting those without a line last.
func sortByLine(p problems) {
	slices.SortStableFunc(p, func(a, b *FieldError) int {
		switch {
		case a.Line == b.Line:
			return 0
		case a.Line == 0:
			return 1
		case b.Line == 0:
			return -1
		}
		return a.Line - b.Line
	})
}

var yamlLineRE = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// syntaxError turns a YAML parser error into a FieldError with its line.
func syntaxError(err error) error {
	msg := err.Error()
	if m := yamlLineRE.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		return &FieldError{Line: line, Msg: m[2]}
	}
	return &FieldError{Msg: strings.TrimPrefix(msg, "yaml: ")}
}

// maxIndexDepth bounds how deep newIndex looks: the configuration is four
// levels deep, and paths of a deeper (hostile) document would cost quadratic
// memory.
const maxIndexDepth = 32

// index maps YAML paths to source lines, so that decode and validation errors
// can say where they are.
type index struct {
	entries []entry
	byPath  map[string]int // first entry of each path
}

type entry struct {
	path    string
	key     string // "" for a sequence item
	keyLine int    // line of the key; of the item for a sequence item
	line    int    // line of the value
	kind    yaml.Kind
	value   string // a scalar's text
}

func newIndex(root *yaml.Node) *index {
	ix := &index{byPath: map[string]int{}}
	ix.walk(root.Content[0], "", 0)
	return ix
}

func (ix *index) walk(n *yaml.Node, path string, depth int) {
	if depth > maxIndexDepth {
		return
	}
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			p := k.Value
			if path != "" {
				p = path + "." + k.Value
			}
			ix.add(entry{path: p, key: k.Value, keyLine: k.Line, line: v.Line, kind: v.Kind, value: v.Value})
			ix.walk(v, p, depth+1)
		}
	case yaml.SequenceNode:
		for i, v := range n.Content {
			p := path + "[" + strconv.Itoa(i) + "]"
			ix.add(entry{path: p, keyLine: v.Line, line: v.Line, kind: v.Kind, value: v.Value})
			ix.walk(v, p, depth+1)
		}
	default: // scalars have no children; aliases are not followed
	}
}

func (ix *index) add(e entry) {
	if _, ok := ix.byPath[e.path]; !ok {
		ix.byPath[e.path] = len(ix.entries)
	}
	ix.entries = append(ix.entries, e)
}

func (ix *index) has(path string) bool {
	_, ok := ix.byPath[path]
	return ok
}

// lineOf returns the line of a path's key, or of its nearest ancestor present
// in the source (for a missing key: the block it belongs in), or 0.
func (ix *index) lineOf(path string) int {
	for path != "" {
		if i, ok := ix.byPath[path]; ok {
			return ix.entries[i].keyLine
		}
		i := strings.LastIndexAny(path, ".[")
		if i < 0 {
			break
		}
		path = path[:i]
	}
	return 0
}

var (
	typeErrLineRE  = regexp.MustCompile(`^line (\d+): (.*)$`)
	unknownFieldRE = regexp.MustCompile(`^field (.*) not found in type (\S+)$`)
	duplicateKeyRE = regexp.MustCompile(`^mapping key (".*") already defined at line (\d+)$`)
	unmarshalRE    = regexp.MustCompile("^cannot unmarshal (\\S+)(?: `(.*)`)? into (.+)$")
)

// decodeError turns the decoder's error into FieldErrors with paths.
func (ix *index) decodeError(err error) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return syntaxError(err)
	}
	var p problems
	seen := map[string]bool{} // a value reached through several aliases fails once per alias
	for _, msg := range te.Errors {
		if !seen[msg] {
			seen[msg] = true
			p = append(p, ix.typeProblem(msg))
		}
	}
	sortByLine(p)
	return p.err()
}

// typeProblem explains one message of a yaml.TypeError ("line N: ...") in our
// words, with the path of the key it is about.
func (ix *index) typeProblem(msg string) *FieldError {
	m := typeErrLineRE.FindStringSubmatch(msg)
	if m == nil {
		return &FieldError{Msg: msg}
	}
	line, _ := strconv.Atoi(m[1])
	msg = m[2]
	fe := &FieldError{Line: line, Msg: msg}
	if m := unknownFieldRE.FindStringSubmatch(msg); m != nil {
		fe.Path = ix.keyAt(line, m[1])
		if why, ok := removedKeys[m[2]][m[1]]; ok {
			fe.Msg = "was removed: " + why
			return fe
		}
		fe.Msg = fmt.Sprintf("unknown key %q", m[1])
		if keys := knownKeys[m[2]]; len(keys) > 0 {
			fe.Msg += " (the keys here are " + strings.Join(keys, ", ") + ")"
		}
		return fe
	}
	if m := duplicateKeyRE.FindStringSubmatch(msg); m != nil {
		key, err := strconv.Unquote(m[1])
		if err != nil {
			key = m[1]
		}
		fe.Path = ix.keyAt(line, key)
		fe.Msg = fmt.Sprintf("duplicate key %q (first at line %s)", key, m[2])
		return fe
	}
	if m := unmarshalRE.FindStringSubmatch(msg); m != nil {
		tag, value, goType := m[1], m[2], m[3]
		fe.Path = ix.valueAt(line, tag, value)
		got := tag
		if value != "" {
			got += " `" + value + "`"
		}
		fe.Msg = fmt.Sprintf("want %s, got %s", describeType(goType), got)
	}
	return fe
}

// keyAt returns the path of the key named key on line, or "".
func (ix *index) keyAt(line int, key string) string {
	for _, e := range ix.entries {
		if e.keyLine == line && e.key == key {
			return e.path
		}
	}
	return ""
}

// valueAt returns the path of the value on line that the decoder quoted: a
// scalar by its (maybe shortened, "abcdefg...") text, a mapping or sequence by
// its tag. The document itself is "".
func (ix *index) valueAt(line int, tag, quoted string) string {
	prefix, shortened := strings.CutSuffix(quoted, "...")
	for _, e := range ix.entries {
		if e.line != line {
			continue
		}
		switch {
		case tag == "!!map" && e.kind == yaml.MappingNode, tag == "!!seq" && e.kind == yaml.SequenceNode:
			return e.path
		case e.kind == yaml.ScalarNode && (e.value == quoted || shortened && len(e.value) > 10 && strings.HasPrefix(e.value, prefix)):
			return e.path
		}
	}
	return ""
}

// describeType names the Go type a YAML value was decoded into in the
// configuration's terms.
func describeType(goType string) string {
	switch {
	case goType == "uint8":
		return "a whole number from 0 to 255"
	case goType == "int" || goType == "int64":
		return "a whole number"
	case goType == "time.Duration":
		return "a duration such as 30s, 2m or 1h30m"
	case goType == "string":
		return "a single value"
	case strings.HasPrefix(goType, "[]"):
		return "a list"
	case goType == "config.Config":
		return "a mapping of the configuration's keys"
	case strings.HasPrefix(goType, "config."):
		return "a mapping of keys"
	}
	return goType
}

// removedKeys says, by Go type name as the decoder reports it and then by
// key, why a key that configurations once carried is gone and what to do
// instead. Decoding still refuses such a key, with this message in place of
// "unknown key".
var removedKeys = map[string]map[string]string{
	"config.Model": {
		"settle": "how a paid call settles is fixed, not configured: a non-streamed call settles before its answer is released, " +
			"and a streamed one after the first upstream chunk with content, before the first byte reaches the client " +
			"(docs/DESIGN.md D1, D2; docs/CONFIG.md, models[]); delete the settle block",
	},
}

// knownKeys lists the YAML keys of each struct of the configuration, by Go
// type name as the decoder reports it ("config.Network"), for the message
// about an unknown key.
var knownKeys = func() map[string][]string {
	m := map[string][]string{}
	var visit func(t reflect.Type)
	visit = func(t reflect.Type) {
		for t.Kind() == reflect.Slice || t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct || t.PkgPath() != reflect.TypeFor[Config]().PkgPath() || m[t.String()] != nil {
			return
		}
		var keys []string
		for f := range t.Fields() {
			name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if !f.IsExported() || name == "" || name == "-" {
				continue
			}
			keys = append(keys, name)
			visit(f.Type)
		}
		m[t.String()] = keys
	}
	visit(reflect.TypeFor[Config]())
	return m
}()
