package config

import (
	"os"
	"path/filepath"
	"testing"
)

// TestExamples parses every example configuration shipped in examples/.
func TestExamples(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "..", "examples", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 2 {
		t.Fatalf("found %d example configurations, want at least anvil.yaml and base-mainnet.yaml", len(files))
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			c, err := Parse(data)
			if err != nil {
				t.Fatalf("%s:\n%v", f, err)
			}
			for _, m := range c.Models {
				if _, err := m.Price.Parse(); err != nil {
					t.Errorf("model %s: %v", m.ID, err)
				}
			}
		})
	}
}
