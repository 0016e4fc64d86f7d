package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/crypto"
	"github.com/google/go-cmp/cmp"
	"go.yaml.in/yaml/v3"
)

// withCredits is base with credits on.
const withCredits = base + `credits:
  enabled: true
  receipt_key_env: LLM4AGENTS_RECEIPT_KEY
`

func TestCreditsDefaults(t *testing.T) {
	c, err := Parse([]byte(withCredits))
	if err != nil {
		t.Fatal(err)
	}
	want := Credits{Enabled: true, ReceiptKeyEnv: "LLM4AGENTS_RECEIPT_KEY", TopUpMin: "10000", TopUpMax: "1000000000",
		HoldTTL: DefaultHoldTTL, Confirmations: 1, Durability: DurabilityLeased, FlushInterval: DefaultFlushInterval,
		LeaseWindow: DefaultLeaseWindow, LeaseMax: "1000000", KeyCache: new(DefaultKeyCache)}
	if d := cmp.Diff(want, c.Credits); d != "" {
		t.Errorf("credits (-want +got):\n%s", d)
	}
	lo, hi, err := c.Credits.TopUpBounds()
	if err != nil || lo.String() != "10000" || hi.String() != "1000000000" {
		t.Errorf("TopUpBounds = %v, %v, %v", lo, hi, err)
	}
	if id, err := c.ReceiptChainID(); err != nil || id.Int64() != 8453 {
		t.Errorf("ReceiptChainID = %v, %v; want the network's 8453", id, err)
	}
	if got := c.SignInOrigin(); got != "http://127.0.0.1:8080" {
		t.Errorf("SignInOrigin = %q", got)
	}
	// A public_url with a path: the origin is its scheme and host only.
	c.PublicURL = "https://llm.example.com:8443/x402"
	if got := c.SignInOrigin(); got != "https://llm.example.com:8443" {
		t.Errorf("SignInOrigin of a path prefix = %q", got)
	}

	// Off by default, and then nothing is filled in or checked.
	off, err := Parse([]byte(base))
	if err != nil {
		t.Fatal(err)
	}
	if off.Credits != (Credits{}) {
		t.Errorf("credits without the section: %+v", off.Credits)
	}

	// Explicit values are kept; a large maximum is capped by the ledger's
	// bound only where it is a default.
	c, err = Parse([]byte(withCredits + `  receipt_chain_id: 84532
  topup_min: 1_000_000
  topup_max: "250000000"
  hold_ttl: 1h
  sign_in_origin: https://llm.example.com/
  confirmations: 3
  durability: per_call
  flush_interval: 5ms
  lease_window: 2s
  lease_max: 5_000_000
  key_cache: 0s
`))
	if err != nil {
		t.Fatal(err)
	}
	want = Credits{Enabled: true, ReceiptKeyEnv: "LLM4AGENTS_RECEIPT_KEY", ReceiptChainID: 84532, TopUpMin: "1_000_000",
		TopUpMax: "250000000", HoldTTL: time.Hour, SignInOrigin: "https://llm.example.com/", Confirmations: 3,
		Durability: DurabilityPerCall, FlushInterval: 5 * time.Millisecond, LeaseWindow: 2 * time.Second, LeaseMax: "5_000_000",
		KeyCache: new(time.Duration(0))}
	if d := cmp.Diff(want, c.Credits); d != "" {
		t.Errorf("credits (-want +got):\n%s", d)
	}
	if lo, _, _ := c.Credits.TopUpBounds(); lo.String() != "1000000" {
		t.Errorf("topup_min = %v", lo)
	}
	if id, _ := c.ReceiptChainID(); id.Int64() != 84532 {
		t.Errorf("ReceiptChainID = %v", id)
	}
	if got := c.SignInOrigin(); got != "https://llm.example.com" {
		t.Errorf("SignInOrigin = %q", got)
	}
	if got := c.Credits.KeyCacheTTL(); got != 0 {
		t.Errorf("KeyCacheTTL with key_cache: 0s = %v, want 0 (off)", got)
	}

	// Round trip.
	out, err := yaml.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	c2, err := Parse(out)
	if err != nil {
		t.Fatalf("Parse(Marshal(c)): %v\n%s", err, out)
	}
	if d := cmp.Diff(c, c2, cmp.AllowUnexported(Config{})); d != "" {
		t.Errorf("round trip (-first +second):\n%s", d)
	}
}

func TestCreditsErrors(t *testing.T) {
	const keyEnv = "  receipt_key_env: LLM4AGENTS_RECEIPT_KEY\n"
	for _, tc := range []struct {
		name  string
		doc   string
		path  string
		msg   string
		never string
	}{
		{"no receipt key", strings.Replace(withCredits, keyEnv, "", 1), "credits.receipt_key_file", "is required", ""},
		{"two receipt keys", withCredits + "  receipt_key_file: /run/secrets/receipt.key\n", "credits.receipt_key_env", "not both", ""},
		{"receipt key env not a name", strings.Replace(withCredits, "LLM4AGENTS_RECEIPT_KEY", "0xac0974bec39a17e36ba4a6b4d238ff944bacb478", 1),
			"credits.receipt_key_env", "not an environment variable name", ""},
		{"receipt key inline", withCredits + "  receipt_key: 0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80\n",
			"credits.receipt_key", `unknown key "receipt_key"`, "cbed5efcae784d7bf4f2ff80"},
		{"unknown key", withCredits + "  topup_minimum: 5\n", "credits.topup_minimum", `unknown key "topup_minimum"`, ""},
		{"enabled not a bool", strings.Replace(withCredits, "enabled: true", "enabled: maybe", 1), "credits.enabled", "maybe", ""},
		{"topup_min a decimal", withCredits + "  topup_min: \"0.5\"\n", "credits.topup_min", "whole, positive number of atomic units", ""},
		{"topup_min negative", withCredits + "  topup_min: -5\n", "credits.topup_min", "whole, positive", ""},
		{"topup_min zero", withCredits + "  topup_min: 0\n", "credits.topup_min", "at least 1", ""},
		{"topup_max exponent", withCredits + "  topup_max: 1e6\n", "credits.topup_max", "whole, positive", ""},
		{"topup_max above the ledger", withCredits + "  topup_max: \"1000000000000001\"\n", "credits.topup_max", "ledger's bound", ""},
		{"topup_max above uint64", withCredits + "  topup_max: \"99999999999999999999999\"\n", "credits.topup_max", "ledger's bound", ""},
		{"min above max", withCredits + "  topup_min: 500\n  topup_max: 400\n", "credits.topup_min", "more than credits.topup_max", ""},
		{"hold ttl short", withCredits + "  hold_ttl: 5m\n", "credits.hold_ttl", "max_stream_duration", ""},
		{"hold ttl long", withCredits + "  hold_ttl: 200h\n", "credits.hold_ttl", "not between 1s", ""},
		{"hold ttl negative", withCredits + "  hold_ttl: -1h\n", "credits.hold_ttl", "not between 1s", ""},
		{"origin with a path", withCredits + "  sign_in_origin: https://llm.example.com/login\n", "credits.sign_in_origin", "must be an origin", ""},
		{"origin with a query", withCredits + "  sign_in_origin: https://llm.example.com?x=1\n", "credits.sign_in_origin", "must be an origin", ""},
		{"origin not http", withCredits + "  sign_in_origin: ftp://llm.example.com\n", "credits.sign_in_origin", "http or https", ""},
		{"origin with credentials", withCredits + "  sign_in_origin: https://me:pw@llm.example.com\n", "credits.sign_in_origin", "credentials", "pw@"},
		{"too many confirmations", withCredits + "  confirmations: 5000\n", "credits.confirmations", "not between 1 and 1000", ""},
		{"durability unknown", withCredits + "  durability: eventually\n", "credits.durability", `"eventually" is not leased or per_call`, ""},
		{"flush interval zero-ish", withCredits + "  flush_interval: 1us\n", "credits.flush_interval", "not between 1ms and 1s", ""},
		{"flush interval long", withCredits + "  flush_interval: 2s\n", "credits.flush_interval", "not between 1ms and 1s", ""},
		{"flush interval not a duration", withCredits + "  flush_interval: 20\n", "credits.flush_interval", "", ""},
		{"lease window short", withCredits + "  lease_window: 10ms\n", "credits.lease_window", "not between 100ms and 1m", ""},
		{"lease window long", withCredits + "  lease_window: 2h\n", "credits.lease_window", "not between 100ms and 1m", ""},
		{"key cache negative", withCredits + "  key_cache: -1s\n", "credits.key_cache", "not between 0", ""},
		{"key cache past 1s", withCredits + "  key_cache: 1001ms\n", "credits.key_cache", "and 1s", ""},
		{"key cache a number", withCredits + "  key_cache: 5\n", "credits.key_cache", "", ""},
		{"lease max zero", withCredits + "  lease_max: 0\n", "credits.lease_max", "not between 1 and", ""},
		{"lease max decimal", withCredits + "  lease_max: \"1.5\"\n", "credits.lease_max", "not a whole number", ""},
		{"lease max above the ledger", withCredits + "  lease_max: \"1000000000000001\"\n", "credits.lease_max", "not between 1 and", ""},
		{"receipt chain id negative", withCredits + "  receipt_chain_id: -1\n", "credits.receipt_chain_id", "", ""},
		{"redis store", strings.Replace(withCredits, "dsn: sqlite:///tmp/llm4agents.db", "dsn: redis://127.0.0.1:6379/0", 1),
			"credits.enabled", "Redis does not", ""},
		{"remote facilitator without a node", strings.Replace(strings.Replace(withCredits, "  rpc_url: https://mainnet.base.org\n", "", 1),
			"  mode: in-process\n  key_file: /run/secrets/facilitator.key\n", "  mode: remote\n  url: https://x402.example.com\n", 1),
			"network.rpc_url", "required with credits", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse([]byte(tc.doc))
			if err == nil {
				t.Fatalf("Parse succeeded: %+v", c.Credits)
			}
			if tc.never != "" && strings.Contains(err.Error(), tc.never) {
				t.Errorf("the error repeats a secret: %v", err)
			}
			for _, fe := range fieldErrors(t, err) {
				if fe.Path == tc.path && strings.Contains(fe.Msg, tc.msg) {
					if fe.Line == 0 && tc.path != "network.rpc_url" {
						t.Errorf("%v has no line", fe)
					}
					return
				}
			}
			t.Fatalf("no error at %q containing %q in:\n%v", tc.path, tc.msg, err)
		})
	}
}

func TestReceiptKey(t *testing.T) {
	const hexKey = "ac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80"
	c, err := Parse([]byte(withCredits))
	if err != nil {
		t.Fatal(err)
	}
	getenv := func(k string) string {
		if k == "LLM4AGENTS_RECEIPT_KEY" {
			return "  " + hexKey + "\n"
		}
		return ""
	}
	if k, err := c.ReceiptKey(getenv); err != nil || k != hexKey {
		t.Errorf("ReceiptKey from the environment: %v", err)
	}
	_, err = c.ReceiptKey(func(string) string { return "" })
	if err == nil || !strings.Contains(err.Error(), "LLM4AGENTS_RECEIPT_KEY") {
		t.Errorf("ReceiptKey with the variable unset: %v", err)
	}
	path := filepath.Join(t.TempDir(), "receipt.key")
	if err := os.WriteFile(path, []byte(hexKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c.Credits.ReceiptKeyEnv, c.Credits.ReceiptKeyFile = "", path
	if k, err := c.ReceiptKey(nil); err != nil || k != hexKey {
		t.Errorf("ReceiptKey from a file: %v", err)
	}

	// The demo generates a fresh key each start, never a fixed one.
	d := Demo()
	k1, err := d.ReceiptKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	k2, _ := d.ReceiptKey(nil)
	if _, err := crypto.HexToECDSA(k1); err != nil || k1 == k2 {
		t.Errorf("demo receipt keys %q, %q: %v", k1, k2, err)
	}
	if !d.Credits.Enabled || d.Credits.TopUpMin != "10000" || d.Credits.TopUpMax != "1000000000" {
		t.Errorf("demo credits %+v", d.Credits)
	}
}
