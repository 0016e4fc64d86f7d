package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"

	"github.com/llm4agents/llm4agents/internal/config"
)

// TestLogKeygen: the key written is one serve reads (config.ParseLogKey),
// named for the origin, 0600, never overwritten; the public key printed is
// its verifier; bad origins are refused before anything is written.
func TestLogKeygen(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "log.key")
	stdout, _, err := runBounded(t, 10*time.Second, []string{"log", "keygen", "--origin", "gw.example.com/receipts", "--out", out}, envMap(nil))
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(out); fi.Mode().Perm() != 0o600 {
		t.Errorf("key file mode %v, want 0600", fi.Mode().Perm())
	}
	s, vkey, err := config.ParseLogKey(string(b))
	if err != nil || s.Name() != "gw.example.com/receipts" || strings.TrimSpace(stdout) != vkey {
		t.Fatalf("ParseLogKey = %v, %q, %v; printed %q", s, vkey, err, stdout)
	}
	if strings.Contains(stdout, "PRIVATE") {
		t.Error("the private key was printed")
	}
	if _, err := note.NewVerifier(strings.TrimSpace(stdout)); err != nil {
		t.Errorf("the printed key is not a verifier key: %v", err)
	}
	if _, _, err := runBounded(t, 10*time.Second, []string{"log", "keygen", "--origin", "gw.example.com/receipts", "--out", out}, envMap(nil)); err == nil {
		t.Error("keygen overwrote a key file")
	}
	for _, args := range [][]string{
		{"--origin", "gw example", "--out", filepath.Join(dir, "a")},
		{"--origin", "gw+example", "--out", filepath.Join(dir, "b")},
		{"--origin", strings.Repeat("o", 201), "--out", filepath.Join(dir, "c")},
		{"--origin", "gw.example"},
		{"--out", filepath.Join(dir, "d")},
		{"--origin", "gw.example", "--out", filepath.Join(dir, "e"), "extra"},
	} {
		if _, _, err := runBounded(t, 10*time.Second, append([]string{"log", "keygen"}, args...), envMap(nil)); err == nil {
			t.Errorf("keygen %q: accepted", args)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("refused keygens wrote files: %v", entries)
	}
}

// TestReceiptsVerifyFlags: bad flags are refused before any request.
func TestReceiptsVerifyFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--url", "http://127.0.0.1:1"},
		{"--url", "http://127.0.0.1:1", "--all", "--request-id", "0x01"},
		{"--url", "http://127.0.0.1:1", "--request-id", "../etc"},
		{"--url", "http://127.0.0.1:1", "--request-id", "a?b"},
		{"--url", "http://127.0.0.1:1/path", "--all"},
		{"--all"},
		{"--url", "http://127.0.0.1:1", "--all", "positional"},
	} {
		_, _, err := runBounded(t, 10*time.Second, append([]string{"receipts", "verify"}, args...), envMap(map[string]string{"LLM4AGENTS_API_KEY": "sk-l4a-x"}))
		if err == nil {
			t.Errorf("receipts verify %q: accepted", args)
		} else if strings.Contains(err.Error(), "sk-l4a-x") {
			t.Errorf("receipts verify %q: the error repeats the API key: %v", args, err)
		}
	}
	for _, args := range [][]string{
		{"--url", "ftp://127.0.0.1:1"},
		{"--url", "http://127.0.0.1:1", "--since", "not a checkpoint\\n"},
		{"--url", "http://127.0.0.1:1", "--since", "/nonexistent/file"},
		{"--url", "http://127.0.0.1:1", "x"},
		{"--url", "http://127.0.0.1:1", "--from-block", "-1"},
		{"--url", "http://127.0.0.1:1", "--from-block", "1e6"},
		{"--url", "http://127.0.0.1:1", "--from-block", "18446744073709551616"},
	} {
		if _, _, err := runBounded(t, 10*time.Second, append([]string{"log", "audit"}, args...), envMap(nil)); err == nil {
			t.Errorf("log audit %q: accepted", args)
		}
	}
}
