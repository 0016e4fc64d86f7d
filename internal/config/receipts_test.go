package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// withReceipts is base with receipts on and credits off.
const withReceipts = base + `receipts:
  enabled: true
  key_env: LLM4AGENTS_RECEIPT_KEY
`

func TestReceiptsWithoutCredits(t *testing.T) {
	const hexKey = "ac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80"
	c, err := Parse([]byte(withReceipts + "  chain_id: 84532\n  sign_in_origin: https://llm.example.com/\n"))
	if err != nil {
		t.Fatal(err)
	}
	if !c.ReceiptsOn() || c.Credits.Enabled {
		t.Errorf("ReceiptsOn = %v, credits %v; want receipts without credits", c.ReceiptsOn(), c.Credits.Enabled)
	}
	if id, err := c.ReceiptChainID(); err != nil || id.Int64() != 84532 {
		t.Errorf("ReceiptChainID = %v, %v", id, err)
	}
	if got := c.SignInOrigin(); got != "https://llm.example.com" {
		t.Errorf("SignInOrigin = %q", got)
	}
	getenv := func(k string) string {
		if k == "LLM4AGENTS_RECEIPT_KEY" {
			return hexKey
		}
		return ""
	}
	if k, err := c.ReceiptKey(getenv); err != nil || k != hexKey {
		t.Errorf("ReceiptKey = %v", err)
	}

	// The log may be kept on receipts alone, on any store.
	withLog := withReceipts + "log:\n  enabled: true\n  key_env: LLM4AGENTS_LOG_KEY\n"
	if _, err := Parse([]byte(withLog)); err != nil {
		t.Errorf("log with receipts and no credits: %v", err)
	}
	onRedis := strings.Replace(withLog, "dsn: sqlite:///tmp/llm4agents.db", "dsn: redis://127.0.0.1:6379/0", 1)
	if onRedis == withLog {
		t.Fatal("base has no sqlite dsn to replace")
	}
	if _, err := Parse([]byte(onRedis)); err != nil {
		t.Errorf("receipts and the log on Redis: %v", err)
	}

	// With credits, the key may live in either section, and the
	// receipts section's chain id is used.
	path := filepath.Join(t.TempDir(), "receipt.key")
	if err := os.WriteFile(path, []byte(hexKey), 0o600); err != nil {
		t.Fatal(err)
	}
	both := strings.Replace(withCredits, "  receipt_key_env: LLM4AGENTS_RECEIPT_KEY\n", "", 1) +
		"receipts:\n  key_file: " + path + "\n  chain_id: 84532\n"
	c, err = Parse([]byte(both))
	if err != nil {
		t.Fatal(err)
	}
	if k, err := c.ReceiptKey(nil); err != nil || k != hexKey {
		t.Errorf("ReceiptKey from receipts.key_file with credits: %v", err)
	}
	if id, _ := c.ReceiptChainID(); id.Int64() != 84532 {
		t.Errorf("ReceiptChainID = %v", id)
	}

	// Off, a receipts section is not read.
	off, err := Parse([]byte(base + "receipts:\n  key_env: 0xnot-a-name\n"))
	if err != nil || off.ReceiptsOn() {
		t.Errorf("receipts off: on=%v, %v", off != nil && off.ReceiptsOn(), err)
	}
}

func TestReceiptsErrors(t *testing.T) {
	const keyEnv = "  key_env: LLM4AGENTS_RECEIPT_KEY\n"
	for _, tc := range []struct {
		name, doc, path, msg, never string
	}{
		{"no key", strings.Replace(withReceipts, keyEnv, "", 1), "receipts.key_file", "is required", ""},
		{"two keys", withReceipts + "  key_file: /run/secrets/receipt.key\n", "receipts.key_env", "not both", ""},
		{"key env not a name", strings.Replace(withReceipts, "LLM4AGENTS_RECEIPT_KEY", "0xac0974bec39a17e36ba4a6b4d238ff944bacb478", 1),
			"receipts.key_env", "not an environment variable name", ""},
		{"key inline", withReceipts + "  key: ac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80\n",
			"receipts.key", `unknown key "key"`, "cbed5efcae784d7bf4f2ff80"},
		{"key in both sections", withCredits + "receipts:\n  key_file: /run/secrets/receipt.key\n", "receipts.key_file", "set twice", ""},
		{"chain ids disagree", withCredits + "  receipt_chain_id: 8453\nreceipts:\n  chain_id: 84532\n", "receipts.chain_id", "differs", ""},
		{"origins disagree", withCredits + "  sign_in_origin: https://a.example.com\nreceipts:\n  sign_in_origin: https://b.example.com\n",
			"receipts.sign_in_origin", "differs", ""},
		{"origin with a path", withReceipts + "  sign_in_origin: https://llm.example.com/login\n", "receipts.sign_in_origin", "must be an origin", ""},
		{"origin with credentials", withReceipts + "  sign_in_origin: https://me:pw@llm.example.com\n", "receipts.sign_in_origin", "credentials", "pw@"},
		{"enabled not a bool", strings.Replace(withReceipts, "enabled: true", "enabled: sometimes", 1), "receipts.enabled", "sometimes", ""},
		{"chain id negative", withReceipts + "  chain_id: -1\n", "receipts.chain_id", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse([]byte(tc.doc))
			if err == nil {
				t.Fatalf("Parse succeeded: %+v", c.Receipts)
			}
			if tc.never != "" && strings.Contains(err.Error(), tc.never) {
				t.Errorf("the error repeats a secret: %v", err)
			}
			for _, fe := range fieldErrors(t, err) {
				if fe.Path == tc.path && strings.Contains(fe.Msg, tc.msg) {
					if fe.Line == 0 {
						t.Errorf("%v has no line", fe)
					}
					return
				}
			}
			t.Fatalf("no error at %q containing %q in:\n%v", tc.path, tc.msg, err)
		})
	}
}
