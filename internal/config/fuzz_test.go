package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.yaml.in/yaml/v3"
)

// FuzzParse checks that Parse never panics, that every error it returns is a
// list of FieldErrors, and that whatever it accepts is valid and survives
// being written back as YAML.
func FuzzParse(f *testing.F) {
	f.Add([]byte(base))
	f.Add([]byte(strings.Replace(base, `input: "150000"`, `input: 0.15`, 1)))
	f.Add([]byte(strings.Replace(base, "listen:", "lissten:", 1)))
	f.Add([]byte("a: &a [x, x]\nmodels: [*a, *a]\n"))
	f.Add([]byte("listen: x\n---\nlisten: y\n"))
	f.Add([]byte("models:\n  - price: {input: [1], output: {a: b}}\n"))
	f.Add([]byte(""))
	if files, _ := filepath.Glob(filepath.Join("..", "..", "examples", "*.yaml")); len(files) > 0 {
		for _, name := range files {
			if data, err := os.ReadFile(name); err == nil {
				f.Add(data)
			}
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data)
		if err != nil {
			if c != nil {
				t.Fatal("a Config with an error")
			}
			fieldErrors(t, err)
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("Parse accepted an invalid Config: %v", err)
		}
		for _, m := range c.Models {
			if _, err := m.Price.Parse(); err != nil {
				t.Fatalf("accepted price does not parse: %v", err)
			}
		}
		out, err := yaml.Marshal(c)
		if err != nil {
			t.Fatalf("Marshal: %v", err)
		}
		c2, err := Parse(out)
		if err != nil {
			t.Fatalf("Parse(Marshal(c)): %v\n%s", err, out)
		}
		if d := cmp.Diff(c, c2, cmp.AllowUnexported(Config{})); d != "" {
			t.Fatalf("round trip (-first +second):\n%s", d)
		}
	})
}
