package config

import (
	"crypto/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/mod/sumdb/note"
)

// withLog is base with credits and the receipt log on.
const withLog = withCredits + `log:
  enabled: true
  key_env: LLM4AGENTS_LOG_KEY
`

func TestLogDefaults(t *testing.T) {
	c, err := Parse([]byte(withLog))
	if err != nil {
		t.Fatal(err)
	}
	if want := (ReceiptLog{Enabled: true, KeyEnv: "LLM4AGENTS_LOG_KEY", MaxMergeDelay: DefaultMaxMergeDelay}); c.Log != want {
		t.Errorf("log = %+v, want %+v", c.Log, want)
	}
	off, err := Parse([]byte(base))
	if err != nil {
		t.Fatal(err)
	}
	if off.Log != (ReceiptLog{}) {
		t.Errorf("log without the section: %+v", off.Log)
	}
	if d := Demo(); !d.Log.Enabled || d.Log.MaxMergeDelay != DefaultMaxMergeDelay {
		t.Errorf("demo log = %+v, want on with the default delay", d.Log)
	}
}

func TestLogErrors(t *testing.T) {
	const keyEnv = "  key_env: LLM4AGENTS_LOG_KEY\n"
	for _, tc := range []struct {
		name, doc, path, msg, never string
	}{
		{"no key", strings.Replace(withLog, keyEnv, "", 1), "log.key_file", "is required", ""},
		{"two keys", withLog + "  key_file: /run/secrets/log.key\n", "log.key_env", "not both", ""},
		{"key inline", withLog + "  key: PRIVATE+KEY+gw.example+12345678+AXY\n", "log.key", `unknown key "key"`, "AXY"},
		{"key env not a name", strings.Replace(withLog, "LLM4AGENTS_LOG_KEY", "PRIVATE+KEY+x", 1), "log.key_env", "not an environment variable name", ""},
		{"delay too short", withLog + "  max_merge_delay: 10ms\n", "log.max_merge_delay", "not between", ""},
		{"delay too long", withLog + "  max_merge_delay: 2h\n", "log.max_merge_delay", "not between", ""},
		{"delay negative", withLog + "  max_merge_delay: -1s\n", "log.max_merge_delay", "not between", ""},
		{"delay a number", withLog + "  max_merge_delay: 2\n", "log.max_merge_delay", "", ""},
		{"redis store", strings.Replace(withLog, "dsn: sqlite:///tmp/llm4agents.db", "dsn: redis://127.0.0.1:6379/0", 1), "log.enabled", "Redis does not", ""},
		{"unknown key", withLog + "  anchors: yes\n", "log.anchors", `unknown key "anchors"`, ""},
		{"no credits", strings.Replace(withLog, "credits:\n  enabled: true\n", "credits:\n  enabled: false\n", 1), "log.enabled", "needs credits.enabled", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse([]byte(tc.doc))
			if err == nil {
				t.Fatalf("Parse succeeded: %+v", c.Log)
			}
			if tc.never != "" && strings.Contains(err.Error(), tc.never) {
				t.Errorf("the error repeats a secret: %v", err)
			}
			for _, fe := range fieldErrors(t, err) {
				if fe.Path == tc.path && strings.Contains(fe.Msg, tc.msg) {
					return
				}
			}
			t.Fatalf("no error at %q containing %q in:\n%v", tc.path, tc.msg, err)
		})
	}
}

func TestLogKey(t *testing.T) {
	skey, vkey, err := note.GenerateKey(rand.Reader, "gw.example/receipts")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "log.key")
	if err := os.WriteFile(path, []byte(skey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Parse([]byte(strings.Replace(withLog, "key_env: LLM4AGENTS_LOG_KEY", "key_file: "+path, 1)))
	if err != nil {
		t.Fatal(err)
	}
	s, vk, err := c.LogKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	if vk != vkey {
		t.Errorf("LogKey's public key %q, want %q", vk, vkey)
	}
	v, err := note.NewVerifier(vk)
	if err != nil {
		t.Fatal(err)
	}
	if s.Name() != "gw.example/receipts" || v.Name() != s.Name() || v.KeyHash() != s.KeyHash() {
		t.Errorf("signer %q/%x, verifier %q/%x", s.Name(), s.KeyHash(), v.Name(), v.KeyHash())
	}
	// The derived verifier is the key's own: a note it signs opens with the
	// verifier key GenerateKey printed.
	signed, err := note.Sign(&note.Note{Text: "gw.example/receipts\n1\nAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\n"}, s)
	if err != nil {
		t.Fatal(err)
	}
	printed, err := note.NewVerifier(vkey)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := note.Open(signed, note.VerifierList(printed)); err != nil {
		t.Errorf("a checkpoint signed with the file's key does not open with its public key: %v", err)
	}
	for name, bad := range map[string]string{
		"empty":          "",
		"a verifier key": vkey,
		"hex":            "ac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80",
		"cut":            skey[:len(skey)-4],
	} {
		if _, _, err := ParseLogKey(bad); err == nil {
			t.Errorf("%s: ParseLogKey accepted it", name)
		} else if len(bad) > 8 && strings.Contains(err.Error(), bad[len(bad)-8:]) {
			t.Errorf("%s: the error repeats the key: %v", name, err)
		}
	}
	d := Demo()
	d.PublicURL = "http://127.0.0.1:4021"
	ds, _, err := d.LogKey(nil)
	if err != nil || ds.Name() != "127.0.0.1:4021/receipts" {
		t.Errorf("demo LogKey = %v, %v", ds, err)
	}
}
