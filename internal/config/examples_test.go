package config

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const payToPlaceholder = "REPLACE_WITH_YOUR_ADDRESS"

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
			// Placeholders an operator must fill are refused as they are...
			if bytes.Contains(data, []byte(payToPlaceholder)) {
				if _, err := Parse(data); err == nil || !strings.Contains(err.Error(), "network.pay_to") {
					t.Errorf("the placeholder pay_to was accepted: %v", err)
				}
				// ...and the rest of the file is valid once they are filled.
				data = bytes.ReplaceAll(data, []byte(payToPlaceholder), []byte("0x70997970C51812dc3A010C7d01b50e0d17dc79C8"))
			}
			c, err := Parse(data)
			if err != nil {
				t.Fatalf("%s:\n%v", f, err)
			}
			// Off by default, the unpaid limit is on in what a user copies.
			if got := c.Limits.UnpaidRate(); got != SuggestedUnpaidPerMinute {
				t.Errorf("limits.unpaid_per_minute = %d, want the suggested %d", got, SuggestedUnpaidPerMinute)
			}
			for _, m := range c.Models {
				if _, err := m.Price.Parse(); err != nil {
					t.Errorf("model %s: %v", m.ID, err)
				}
			}
		})
	}
}
