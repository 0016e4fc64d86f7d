package config

import (
	"crypto/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
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
	if want := (ReceiptLog{Enabled: true, KeyEnv: "LLM4AGENTS_LOG_KEY", MaxMergeDelay: DefaultMaxMergeDelay}); !cmp.Equal(c.Log, want) {
		t.Errorf("log = %+v, want %+v", c.Log, want)
	}
	off, err := Parse([]byte(base))
	if err != nil {
		t.Fatal(err)
	}
	if !cmp.Equal(off.Log, ReceiptLog{}) {
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
		{"unknown key", withLog + "  anchors: yes\n", "log.anchors", `unknown key "anchors"`, ""},
		{"no receipts", strings.Replace(withLog, "credits:\n  enabled: true\n", "credits:\n  enabled: false\n", 1), "log.enabled", "needs receipts", ""},
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

// withAnchor is withLog with anchoring on.
const withAnchor = withLog + `  anchor:
    enabled: true
    contract: 0xe7f1725E7734CE288F8367e1Bb143E90bb3F0512
`

func TestAnchorDefaults(t *testing.T) {
	c, err := Parse([]byte(withAnchor))
	if err != nil {
		t.Fatal(err)
	}
	want := Anchor{Enabled: true, Contract: "0xe7f1725E7734CE288F8367e1Bb143E90bb3F0512", Every: DefaultAnchorEvery}
	if !cmp.Equal(c.Log.Anchor, want) {
		t.Errorf("anchor = %+v, want %+v", c.Log.Anchor, want)
	}
	// Other replicas' senders are read as listed.
	c, err = Parse([]byte(withAnchor + "    senders: [0x976EA74026E726554dB657fA54763abd0C3a0aa9]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Log.Anchor.SenderAddresses(); len(got) != 1 || got[0].Hex() != "0x976EA74026E726554dB657fA54763abd0C3a0aa9" {
		t.Errorf("senders %v", got)
	}
	if a, err := c.Log.Anchor.ContractAddress(); err != nil || a.Hex() != want.Contract {
		t.Errorf("ContractAddress() = %s, %v", a.Hex(), err)
	}
	for _, doc := range []string{withLog, withLog + "  anchor:\n    enabled: false\n    every: 1ms\n"} {
		off, err := Parse([]byte(doc))
		if err != nil {
			t.Fatalf("anchoring off: %v", err)
		}
		if off.Log.Anchor.Enabled || off.Log.Anchor.Every > time.Millisecond {
			t.Errorf("anchor = %+v, want it off and no default filled in", off.Log.Anchor)
		}
	}
	// The bounds themselves are accepted.
	for _, every := range []string{"1s", "24h", "1000ms", "0s"} {
		c, err := Parse([]byte(withAnchor + "    every: " + every + "\n"))
		if err != nil {
			t.Errorf("every %s: %v", every, err)
			continue
		}
		if every == "0s" && c.Log.Anchor.Every != DefaultAnchorEvery {
			t.Errorf("every 0s = %s, want the default", c.Log.Anchor.Every)
		}
	}
	d := Demo()
	if want := (Anchor{Enabled: true, Every: DemoAnchorEvery}); !cmp.Equal(d.Log.Anchor, want) {
		t.Errorf("demo anchor = %+v, want %+v", d.Log.Anchor, want)
	}
}

func TestAnchorErrors(t *testing.T) {
	const contract = "    contract: 0xe7f1725E7734CE288F8367e1Bb143E90bb3F0512\n"
	remote := strings.Replace(withAnchor, "  mode: in-process\n  key_file: /run/secrets/facilitator.key\n", "  mode: remote\n  url: https://facilitator.example\n", 1)
	for _, tc := range []struct {
		name, doc, path, msg string
	}{
		{"no contract", strings.Replace(withAnchor, contract, "", 1), "log.anchor.contract", "is required"},
		{"contract empty", strings.Replace(withAnchor, contract, "    contract: \"\"\n", 1), "log.anchor.contract", "is required"},
		{"contract not hex", strings.Replace(withAnchor, "0xe7f1725E", "0xg7f1725E", 1), "log.anchor.contract", "not a valid address"},
		{"contract bad checksum", strings.Replace(withAnchor, "0xe7f1725E", "0xE7f1725E", 1), "log.anchor.contract", "not a valid address"},
		{"contract short", strings.Replace(withAnchor, "0512\n", "05\n", 1), "log.anchor.contract", "not a valid address"},
		{"contract zero", strings.Replace(withAnchor, "0xe7f1725E7734CE288F8367e1Bb143E90bb3F0512", "0x0000000000000000000000000000000000000000", 1), "log.anchor.contract", "zero address"},
		{"contract is the token", strings.Replace(withAnchor, "0xe7f1725E7734CE288F8367e1Bb143E90bb3F0512", "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913", 1), "log.anchor.contract", "is network.asset"},
		{"contract a long string", strings.Replace(withAnchor, "0xe7f1725E7734CE288F8367e1Bb143E90bb3F0512", strings.Repeat("x", 5000), 1), "log.anchor.contract", "not a valid address"},
		{"contract a list", strings.Replace(withAnchor, contract, "    contract: [0xe7f1725E7734CE288F8367e1Bb143E90bb3F0512]\n", 1), "log.anchor.contract", ""},
		{"every too short", withAnchor + "    every: 999ms\n", "log.anchor.every", "not between 1s and 24h0m0s"},
		{"every too long", withAnchor + "    every: 24h1s\n", "log.anchor.every", "not between"},
		{"every negative", withAnchor + "    every: -10m\n", "log.anchor.every", "not between"},
		{"every a number", withAnchor + "    every: 600\n", "log.anchor.every", ""},
		{"every a word", withAnchor + "    every: hourly\n", "log.anchor.every", ""},
		{"every overflowing", withAnchor + "    every: 9999999999h\n", "log.anchor.every", ""},
		{"remote facilitator", remote, "log.anchor.enabled", "in-process facilitator's signer"},
		{"log off", strings.Replace(withAnchor, "  enabled: true\n  key_env", "  enabled: false\n  key_env", 1), "log.anchor.enabled", "needs the receipt log"},
		{"unknown key", withAnchor + "    sender: 0xe7f1725E7734CE288F8367e1Bb143E90bb3F0512\n", "log.anchor.sender", `unknown key "sender"`},
		{"enabled a string", strings.Replace(withAnchor, "    enabled: true\n", "    enabled: \"yes please\"\n", 1), "log.anchor.enabled", ""},
		{"a sender not hex", withAnchor + "    senders: [0xnothex]\n", "log.anchor.senders[0]", "not a valid address"},
		{"a zero sender", withAnchor + "    senders: [\"0x0000000000000000000000000000000000000000\"]\n", "log.anchor.senders[0]", "zero address"},
		{"a sender twice", withAnchor + "    senders: [0x976EA74026E726554dB657fA54763abd0C3a0aa9, 0x976EA74026E726554dB657fA54763abd0C3a0aa9]\n", "log.anchor.senders[1]", "already log.anchor.senders[0]"},
		{"senders not a list", withAnchor + "    senders: 0x976EA74026E726554dB657fA54763abd0C3a0aa9\n", "log.anchor.senders", ""},
		{"too many senders", withAnchor + "    senders: [" + strings.Repeat("0x976EA74026E726554dB657fA54763abd0C3a0aa9,", 31) + "0x976EA74026E726554dB657fA54763abd0C3a0aa9]\n", "log.anchor.senders", "at most 31"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse([]byte(tc.doc))
			if err == nil {
				t.Fatalf("Parse succeeded: %+v", c.Log.Anchor)
			}
			if len(err.Error()) > 2000 {
				t.Errorf("an error of %d bytes: a hostile value is repeated whole", len(err.Error()))
			}
			for _, fe := range fieldErrors(t, err) {
				if fe.Path == tc.path && strings.Contains(fe.Msg, tc.msg) {
					return
				}
			}
			t.Fatalf("no error at %q containing %q in:\n%v", tc.path, tc.msg, err)
		})
	}
	// The demo names the contract like the token, once it is deployed; until
	// then Validate says so.
	d := Demo()
	d.Network.Asset = "0x5FbDB2315678afecb367f032d93F642f64180aa3"
	d.Network.PayTo = "0xa0Ee7A142d267C1f36714E4a8F75612F20a79720"
	d.Store.DSN = "sqlite:///tmp/demo.db"
	err := d.Validate()
	if fes := fieldErrors(t, err); len(fes) != 1 || fes[0].Path != "log.anchor.contract" {
		t.Errorf("Demo() without its anchor contract: %v, want log.anchor.contract alone", err)
	}
}
