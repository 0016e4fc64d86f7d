package config

import (
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.yaml.in/yaml/v3"

	"github.com/llm4agents/llm4agents/internal/facilitator"
	"github.com/llm4agents/llm4agents/internal/pricing"
	"github.com/llm4agents/llm4agents/internal/store"
)

// base is a valid configuration the cases below break one edit at a time.
const base = `listen: 127.0.0.1:8080
network:
  id: eip155:8453
  rpc_url: https://mainnet.base.org
  asset: 0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913
  asset_name: USD Coin
  asset_version: "2"
  decimals: 6
  pay_to: 0x70997970C51812dc3A010C7d01b50e0d17dc79C8
facilitator:
  mode: in-process
  key_file: /run/secrets/facilitator.key
store:
  dsn: sqlite:///tmp/llm4agents.db
upstreams:
  - name: openai
    base_url: https://api.openai.com/v1
    api_key_env: OPENAI_API_KEY
  - name: demo
    type: demo
models:
  - id: gpt-4o-mini
    upstream: openai
    price: { input: "150000", output: "600000" }
  - id: demo
    upstream: demo
    price: { input: 1000000, output: 2_000_000 }
`

// edit applies old->new replacements (each must match exactly once).
func edit(tb testing.TB, text string, pairs ...string) string {
	tb.Helper()
	if len(pairs)%2 != 0 {
		tb.Fatal("edit takes old, new pairs")
	}
	for i := 0; i < len(pairs); i += 2 {
		if n := strings.Count(text, pairs[i]); n != 1 {
			tb.Fatalf("edit: %q occurs %d times", pairs[i], n)
		}
		text = strings.Replace(text, pairs[i], pairs[i+1], 1)
	}
	return text
}

// lineOf returns the 1-based line of the first occurrence of needle.
func lineOf(tb testing.TB, text, needle string) int {
	tb.Helper()
	i := strings.Index(text, needle)
	if i < 0 {
		tb.Fatalf("%q not in the document", needle)
	}
	return strings.Count(text[:i], "\n") + 1
}

// fieldErrors flattens a joined error into its FieldErrors.
func fieldErrors(tb testing.TB, err error) []*FieldError {
	tb.Helper()
	var errs []error
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	} else {
		errs = []error{err}
	}
	var out []*FieldError
	for _, e := range errs {
		var fe *FieldError
		if !errors.As(e, &fe) {
			tb.Fatalf("error %v (%T) is not a *FieldError", e, e)
		}
		out = append(out, fe)
	}
	return out
}

func TestParseBase(t *testing.T) {
	c, err := Parse([]byte(base))
	if err != nil {
		t.Fatal(err)
	}
	want := &Config{
		Listen:    "127.0.0.1:8080",
		PublicURL: "http://127.0.0.1:8080",
		Network: Network{
			ID: "eip155:8453", RPCURL: "https://mainnet.base.org",
			Asset: "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913", AssetName: "USD Coin", AssetVersion: "2",
			Decimals: 6, PayTo: "0x70997970C51812dc3A010C7d01b50e0d17dc79C8", MaxTimeoutSeconds: 300,
			Schemes: []string{SchemeExact}, Upto: Upto{MinCharge: "10000", Streaming: UptoDeliverThenSettle},
		},
		Facilitator: Facilitator{
			Mode: ModeInProcess, KeyFile: "/run/secrets/facilitator.key",
			MaxFeePerGas: DefaultMaxFeePerGas, SettleTimeout: 30 * time.Second, ReconcileInterval: DefaultReconcileInterval,
			PollInterval: 250 * time.Millisecond, ReorgWindow: DefaultReorgWindow,
		},
		Store: Store{DSN: "sqlite:///tmp/llm4agents.db"},
		Limits: Limits{MaxBodyBytes: 1 << 20, UpstreamTimeout: 120 * time.Second, MaxStreamDuration: 10 * time.Minute,
			RecoveryTTL: DefaultRecoveryTTL, RecoveryReplays: DefaultRecoveryReplays,
			UnpaidPerMinute: new(DefaultUnpaidPerMinute), UnpaidBurst: DefaultUnpaidBurst},
		Upstreams: []Upstream{
			{Name: "openai", Type: UpstreamOpenAI, BaseURL: "https://api.openai.com/v1", APIKeyEnv: "OPENAI_API_KEY", Timeout: 120 * time.Second},
			{Name: "demo", Type: UpstreamDemo, Timeout: 120 * time.Second},
		},
		Models: []Model{
			{
				ID: "gpt-4o-mini", Upstream: "openai", UpstreamModel: "gpt-4o-mini",
				Kind: KindChat, Price: Price{Input: "150000", Output: "600000"}, MaxOutputTokens: 4096, Encoding: pricing.O200kBase,
				PaymentIdentifier: PaymentIDOptional,
			},
			{
				ID: "demo", Upstream: "demo", UpstreamModel: "demo",
				Kind: KindChat, Price: Price{Input: "1000000", Output: "2_000_000"}, MaxOutputTokens: 4096, Encoding: pricing.O200kBase,
				PaymentIdentifier: PaymentIDOptional,
			},
		},
	}
	if d := cmp.Diff(want, c, cmp.AllowUnexported(Config{})); d != "" {
		t.Errorf("Parse(base) (-want +got):\n%s", d)
	}

	p, err := c.Models[1].Price.Parse()
	if err != nil || p != (pricing.Price{Input: 1_000_000, Output: 2_000_000}) {
		t.Errorf("demo price = %+v, %v", p, err)
	}
	if c.Model("demo") != &c.Models[1] || c.Model("nope") != nil || c.Upstream("openai") != &c.Upstreams[0] || c.Upstream("x") != nil {
		t.Error("Model/Upstream lookups are wrong")
	}
	if path, ok := c.Store.SQLitePath(); !ok || path != "/tmp/llm4agents.db" {
		t.Errorf("SQLitePath = %q, %v", path, ok)
	}
	if id, err := c.Network.ChainID(); err != nil || id.Int64() != 8453 {
		t.Errorf("ChainID = %v, %v", id, err)
	}
	if a, err := c.Network.AssetAddress(); err != nil || a.Hex() != c.Network.Asset {
		t.Errorf("AssetAddress = %v, %v", a, err)
	}
	if a, err := c.Network.PayToAddress(); err != nil || a.Hex() != c.Network.PayTo {
		t.Errorf("PayToAddress = %v, %v", a, err)
	}
	if fee, err := c.Facilitator.MaxFee(); err != nil || fee.String() != DefaultMaxFeePerGas {
		t.Errorf("MaxFee = %v, %v", fee, err)
	}
}

// TestReorgWindow: the reorg window defaults to what the facilitator
// defaults to, may be set up to what the stores list, and its bound is the
// stores' (config does not import them).
func TestReorgWindow(t *testing.T) {
	if DefaultReorgWindow != facilitator.DefaultReorgWindow || MaxReorgWindow != store.RecentRetention {
		t.Errorf("DefaultReorgWindow %s, MaxReorgWindow %s; want facilitator's %s and store's %s",
			DefaultReorgWindow, MaxReorgWindow, facilitator.DefaultReorgWindow, store.RecentRetention)
	}
	c, err := Parse([]byte(base))
	if err != nil || c.Facilitator.ReorgWindow != DefaultReorgWindow {
		t.Fatalf("default reorg_window = %v, %v; want %s", c.Facilitator.ReorgWindow, err, DefaultReorgWindow)
	}
	c, err = Parse([]byte(edit(t, base, "  mode: in-process\n", "  mode: in-process\n  reorg_window: 24h\n")))
	if err != nil || c.Facilitator.ReorgWindow != 24*time.Hour {
		t.Errorf("reorg_window: 24h = %v, %v", c.Facilitator.ReorgWindow, err)
	}
	// Payments that stay valid longer than the default window lengthen it.
	c, err = Parse([]byte(edit(t, base, "  id: eip155:8453\n", "  id: eip155:8453\n  max_timeout_seconds: 3600\n")))
	if want := time.Hour + 30*time.Second + DefaultReconcileInterval; err != nil || c.Facilitator.ReorgWindow != want {
		t.Errorf("reorg_window with max_timeout_seconds 3600 = %v, %v; want %s", c.Facilitator.ReorgWindow, err, want)
	}
}

// TestPollIntervalDefault: the receipt poll interval follows the network
// unless the file sets one.
func TestPollIntervalDefault(t *testing.T) {
	for _, tc := range []struct {
		name  string
		edits []string
		want  time.Duration
	}{
		{name: "base", want: 250 * time.Millisecond},
		{name: "anvil", edits: []string{"id: eip155:8453", "id: eip155:31337"}, want: 100 * time.Millisecond},
		{name: "local 1337", edits: []string{"id: eip155:8453", "id: eip155:1337"}, want: 100 * time.Millisecond},
		{name: "base sepolia", edits: []string{"id: eip155:8453", "id: eip155:84532"}, want: 250 * time.Millisecond},
		{name: "set", edits: []string{"  mode: in-process\n", "  mode: in-process\n  poll_interval: 2s\n"}, want: 2 * time.Second},
		{name: "set on anvil", edits: []string{"id: eip155:8453", "id: eip155:31337", "  mode: in-process\n", "  mode: in-process\n  poll_interval: 1s\n"}, want: time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse([]byte(edit(t, base, tc.edits...)))
			if err != nil {
				t.Fatal(err)
			}
			if c.Facilitator.PollInterval != tc.want {
				t.Errorf("poll_interval = %s, want %s", c.Facilitator.PollInterval, tc.want)
			}
		})
	}
	if got := Demo().Facilitator.PollInterval; got != 100*time.Millisecond {
		t.Errorf("Demo() poll_interval = %s, want 100ms", got)
	}
}

// TestRoundTrip checks that a parsed configuration, written back as YAML,
// parses to the same thing.
func TestRoundTrip(t *testing.T) {
	c, err := Parse([]byte(base))
	if err != nil {
		t.Fatal(err)
	}
	out, err := yaml.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	c2, err := Parse(out)
	if err != nil {
		t.Fatalf("Parse(Marshal(Parse(base))): %v\n%s", err, out)
	}
	if d := cmp.Diff(c, c2, cmp.AllowUnexported(Config{})); d != "" {
		t.Errorf("round trip (-first +second):\n%s", d)
	}
}

func TestPublicURLDefault(t *testing.T) {
	for listen, want := range map[string]string{
		"127.0.0.1:8080": "http://127.0.0.1:8080",
		":9000":          "http://127.0.0.1:9000",
		"0.0.0.0:80":     "http://127.0.0.1:80",
		"[::]:8080":      "http://127.0.0.1:8080",
		"[::1]:8080":     "http://[::1]:8080",
		"gw.local:8080":  "http://gw.local:8080",
	} {
		c, err := Parse([]byte(edit(t, base, "listen: 127.0.0.1:8080", "listen: "+strings.ReplaceAll(strings.ReplaceAll(`"L"`, "L", listen), `""`, ""))))
		if err != nil {
			t.Errorf("listen %s: %v", listen, err)
			continue
		}
		if c.PublicURL != want {
			t.Errorf("listen %s: public_url = %s, want %s", listen, c.PublicURL, want)
		}
	}
	c, err := Parse([]byte(edit(t, base, "listen: 127.0.0.1:8080", "public_url: https://llm.example.com/x402/")))
	if err != nil || c.PublicURL != "https://llm.example.com/x402" {
		t.Errorf("public_url with a trailing slash: %q, %v", c.PublicURL, err)
	}
}

// TestRemovedKeys: every removed key is named under a type of the
// configuration that no longer has it, or its message could never show.
func TestRemovedKeys(t *testing.T) {
	for typ, keys := range removedKeys {
		known, ok := knownKeys[typ]
		if !ok {
			t.Errorf("removedKeys names type %s, which the configuration does not have", typ)
		}
		for key := range keys {
			if slices.Contains(known, key) {
				t.Errorf("removed key %s of %s is still a key of it", key, typ)
			}
		}
	}
}

func TestParseErrors(t *testing.T) {
	const (
		network   = "network:"
		rpc       = "  rpc_url: https://mainnet.base.org\n"
		keyFile   = "  key_file: /run/secrets/facilitator.key\n"
		mode      = "  mode: in-process"
		dsn       = "  dsn: sqlite:///tmp/llm4agents.db"
		price0    = `price: { input: "150000", output: "600000" }`
		openaiKey = "    api_key_env: OPENAI_API_KEY"
		demoType  = "    type: demo"
	)
	for _, tc := range []struct {
		name  string
		edits []string
		path  string // of the expected FieldError
		msg   string // a part of its message
		line  string // where it is, as a needle in the edited document; "" = don't check
		never string // must not appear in any error (a secret)
	}{
		// Network.
		{name: "network id not CAIP-2", edits: []string{"id: eip155:8453", "id: base"}, path: "network.id", msg: "eip155:<chain id>", line: "id: base"},
		{name: "network id not EVM", edits: []string{"id: eip155:8453", "id: solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp"}, path: "network.id", msg: "only EVM"},
		{name: "network id zero chain", edits: []string{"id: eip155:8453", "id: eip155:0"}, path: "network.id", msg: "eip155"},
		{name: "network id missing", edits: []string{"  id: eip155:8453\n", ""}, path: "network.id", msg: "is required", line: network},
		{name: "asset bad checksum", edits: []string{"0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913", "0x833589FCD6eDb6E08f4c7C32D4f71b54bdA02913"}, path: "network.asset", msg: "checksum", line: "asset:"},
		{name: "asset too short", edits: []string{"0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913", "0x8335"}, path: "network.asset", msg: "not a valid address"},
		{name: "asset zero", edits: []string{"0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913", "0x0000000000000000000000000000000000000000"}, path: "network.asset", msg: "zero address"},
		{name: "asset missing", edits: []string{"  asset: 0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913\n", ""}, path: "network.asset", msg: "is required", line: network},
		{name: "asset name missing", edits: []string{"  asset_name: USD Coin\n", ""}, path: "network.asset_name", msg: "EIP-712 domain name"},
		{name: "asset version missing", edits: []string{`  asset_version: "2"` + "\n", ""}, path: "network.asset_version", msg: "EIP-712 domain version"},
		{name: "pay_to missing", edits: []string{"  pay_to: 0x70997970C51812dc3A010C7d01b50e0d17dc79C8\n", ""}, path: "network.pay_to", msg: "is required", line: network},
		{name: "pay_to lower case is fine but not hex", edits: []string{"0x70997970C51812dc3A010C7d01b50e0d17dc79C8", "0x70997970c51812dc3a010c7d01b50e0d17dc79zz"}, path: "network.pay_to", msg: "not a valid address"},
		{name: "pay_to is the asset", edits: []string{"0x70997970C51812dc3A010C7d01b50e0d17dc79C8", "0x833589fcd6edb6e08f4c7c32d4f71b54bda02913"}, path: "network.pay_to", msg: "asset's own contract"},
		{name: "pay_to is the burn address", edits: []string{"0x70997970C51812dc3A010C7d01b50e0d17dc79C8", "0x000000000000000000000000000000000000dEaD"}, path: "network.pay_to", msg: "burn address"},
		{name: "pay_to is zero", edits: []string{"0x70997970C51812dc3A010C7d01b50e0d17dc79C8", "0x0000000000000000000000000000000000000000"}, path: "network.pay_to", msg: "burn address"},
		{name: "decimals above 36", edits: []string{"decimals: 6", "decimals: 37"}, path: "network.decimals", msg: "more than 36", line: "decimals:"},
		{name: "decimals above uint8", edits: []string{"decimals: 6", "decimals: 300"}, path: "network.decimals", msg: "from 0 to 255", line: "decimals:"},
		{name: "decimals negative", edits: []string{"decimals: 6", "decimals: -6"}, path: "network.decimals", msg: "from 0 to 255"},
		{name: "decimals as text", edits: []string{"decimals: 6", "decimals: six"}, path: "network.decimals", msg: "got !!str `six`"},
		{name: "decimals missing", edits: []string{"  decimals: 6\n", ""}, path: "network.decimals", msg: "is required", line: network},
		{name: "max_timeout_seconds negative", edits: []string{"  decimals: 6\n", "  decimals: 6\n  max_timeout_seconds: -1\n"}, path: "network.max_timeout_seconds", msg: "from 1 to 86400"},
		{name: "schemes unknown", edits: []string{"  decimals: 6\n", "  decimals: 6\n  schemes: [exact, batch-settlement]\n"}, path: "network.schemes", msg: `"batch-settlement" is not a scheme offered here`},
		{name: "schemes twice", edits: []string{"  decimals: 6\n", "  decimals: 6\n  schemes: [exact, upto, upto]\n"}, path: "network.schemes", msg: "lists upto twice"},
		{name: "schemes without exact", edits: []string{"  decimals: 6\n", "  decimals: 6\n  schemes: [upto]\n"}, path: "network.schemes", msg: "must include exact"},
		{name: "schemes case", edits: []string{"  decimals: 6\n", "  decimals: 6\n  schemes: [exact, UPTO]\n"}, path: "network.schemes", msg: `"UPTO" is not a scheme`},
		{name: "schemes not a list", edits: []string{"  decimals: 6\n", "  decimals: 6\n  schemes: exact\n"}, path: "network.schemes", msg: "!!str"},
		{name: "min_charge decimal", edits: []string{"  decimals: 6\n", "  decimals: 6\n  upto:\n    min_charge: \"0.01\"\n"}, path: "network.upto.min_charge", msg: "whole, non-negative number of atomic units"},
		{name: "min_charge negative", edits: []string{"  decimals: 6\n", "  decimals: 6\n  upto:\n    min_charge: \"-1\"\n"}, path: "network.upto.min_charge", msg: "whole, non-negative"},
		{name: "min_charge above uint256", edits: []string{"  decimals: 6\n", "  decimals: 6\n  upto:\n    min_charge: \"115792089237316195423570985008687907853269984665640564039457584007913129639936\"\n"}, path: "network.upto.min_charge", msg: "whole, non-negative"},
		{name: "min_charge float", edits: []string{"  decimals: 6\n", "  decimals: 6\n  upto:\n    min_charge: 1e4\n"}, path: "network.upto.min_charge", msg: "whole, non-negative"},
		{name: "upto streaming unknown", edits: []string{"  decimals: 6\n", "  decimals: 6\n  upto:\n    streaming: settle_first\n"}, path: "network.upto.streaming", msg: "must be deliver_then_settle or exact_only"},
		{name: "upto unknown key", edits: []string{"  decimals: 6\n", "  decimals: 6\n  upto:\n    minimum: \"1\"\n"}, path: "network.upto.minimum", msg: "unknown key"},
		{name: "rpc_url and rpc_url_env", edits: []string{rpc, rpc + "  rpc_url_env: BASE_RPC_URL\n"}, path: "network.rpc_url_env", msg: "not both"},
		{name: "rpc_url not http", edits: []string{"https://mainnet.base.org", "ftp://mainnet.base.org"}, path: "network.rpc_url", msg: "absolute http or https or ws or wss URL"},
		{name: "rpc_url relative", edits: []string{"https://mainnet.base.org", "mainnet.base.org/rpc"}, path: "network.rpc_url", msg: "URL"},
		{
			name: "rpc_url with credentials", edits: []string{"https://mainnet.base.org", "https://me:hunter2@mainnet.base.org"},
			path: "network.rpc_url", msg: "must not carry credentials", never: "hunter2",
		},
		{name: "rpc_url_env bad name", edits: []string{rpc, "  rpc_url_env: 9BASE-RPC\n"}, path: "network.rpc_url_env", msg: "not an environment variable name"},

		// Facilitator.
		{name: "in-process without rpc", edits: []string{rpc, ""}, path: "network.rpc_url", msg: "is required with facilitator.mode in-process", line: network},
		{name: "in-process without key", edits: []string{keyFile, ""}, path: "facilitator.key_file", msg: "is required with mode in-process", line: "facilitator:"},
		{name: "in-process with two keys", edits: []string{keyFile, keyFile + "  key_env: FACILITATOR_KEY\n"}, path: "facilitator.key_env", msg: "not both", line: "key_env:"},
		{name: "key_env bad name", edits: []string{keyFile, "  key_env: MY KEY\n"}, path: "facilitator.key_env", msg: "not an environment variable name"},
		{name: "in-process with url", edits: []string{keyFile, keyFile + "  url: https://f.example\n"}, path: "facilitator.url", msg: "only for mode remote"},
		{name: "remote without url", edits: []string{mode, "  mode: remote", keyFile, ""}, path: "facilitator.url", msg: "is required with mode remote"},
		{name: "remote with a key", edits: []string{mode, "  mode: remote\n  url: https://f.example"}, path: "facilitator.key_file", msg: "remote facilitator holds its own key"},
		{name: "remote url not http", edits: []string{mode, "  mode: remote\n  url: f.example", keyFile, ""}, path: "facilitator.url", msg: "URL"},
		{name: "unknown mode", edits: []string{mode, "  mode: sideways"}, path: "facilitator.mode", msg: `"sideways" is not in-process or remote`, line: "mode:"},
		{name: "max fee zero", edits: []string{keyFile, keyFile + "  max_fee_per_gas: \"0\"\n"}, path: "facilitator.max_fee_per_gas", msg: "positive whole number of wei"},
		{name: "max fee decimal", edits: []string{keyFile, keyFile + "  max_fee_per_gas: 1.5\n"}, path: "facilitator.max_fee_per_gas", msg: "positive whole number of wei"},
		{name: "max fee negative", edits: []string{keyFile, keyFile + "  max_fee_per_gas: -1\n"}, path: "facilitator.max_fee_per_gas", msg: "positive whole number of wei"},
		{name: "settle timeout negative", edits: []string{keyFile, keyFile + "  settle_timeout: -1s\n"}, path: "facilitator.settle_timeout", msg: "must be positive"},
		{name: "settle timeout without unit", edits: []string{keyFile, keyFile + "  settle_timeout: 30\n"}, path: "facilitator.settle_timeout", msg: "a duration such as 30s", line: "settle_timeout:"},
		{name: "settle timeout in days", edits: []string{keyFile, keyFile + "  settle_timeout: 1d\n"}, path: "facilitator.settle_timeout", msg: "got !!str `1d`"},

		// Store.
		{name: "dsn missing", edits: []string{dsn, "  dsn: \"\""}, path: "store.dsn", msg: "is required", line: "dsn:"},
		{name: "store missing", edits: []string{"store:\n" + dsn + "\n", ""}, path: "store.dsn", msg: "is required"},
		{name: "dsn postgres with password", edits: []string{dsn, "  dsn: postgres://app:s3cret@db/app"}, path: "store.dsn", msg: "carries a password: put the DSN in an environment variable", never: "s3cret"},
		{name: "dsn postgres password param", edits: []string{dsn, "  dsn: postgres://app@db/app?password=s3cret"}, path: "store.dsn", msg: "carries a password", never: "s3cret"},
		{name: "dsn redis with password", edits: []string{dsn, "  dsn: redis://:s3cret@cache:6379/0"}, path: "store.dsn", msg: "carries a password", never: "s3cret"},
		{name: "dsn redis without host", edits: []string{dsn, "  dsn: redis:///0"}, path: "store.dsn", msg: "redis://HOST:PORT/DB"},
		{name: "dsn postgres bad url", edits: []string{dsn, "  dsn: postgres://a b@%zz/x"}, path: "store.dsn", msg: "not a valid postgres:// URL", never: "%zz"},
		{name: "dsn and dsn_env", edits: []string{dsn, dsn + "\n  dsn_env: STORE_DSN"}, path: "store.dsn_env", msg: "not both"},
		{name: "dsn_env bad name", edits: []string{dsn, "  dsn_env: postgres://x"}, path: "store.dsn_env", msg: "not an environment variable name"},
		{name: "dsn without path", edits: []string{dsn, "  dsn: sqlite://"}, path: "store.dsn", msg: "needs a file path"},
		{name: "dsn a bare path", edits: []string{dsn, "  dsn: /var/lib/x.db"}, path: "store.dsn", msg: "must be sqlite://PATH"},
		{name: "dsn other scheme", edits: []string{dsn, "  dsn: mysql://db"}, path: "store.dsn", msg: `scheme "mysql" is not supported`},
		{name: "claim lease too short", edits: []string{dsn, dsn + "\nlimits:\n  claim_lease: 1m"}, path: "limits.claim_lease", msg: "shorter than the longest upstream timeout"},
		{name: "claim lease negative", edits: []string{dsn, dsn + "\nlimits:\n  claim_lease: -1m"}, path: "limits.claim_lease", msg: "shorter than"},
		{name: "recovery ttl too short", edits: []string{dsn, dsn + "\nlimits:\n  recovery_ttl: 500ms"}, path: "limits.recovery_ttl", msg: "is not between 1s and 24h0m0s"},
		{name: "recovery ttl too long", edits: []string{dsn, dsn + "\nlimits:\n  recovery_ttl: 25h"}, path: "limits.recovery_ttl", msg: "is not between 1s and 24h0m0s"},
		{name: "recovery ttl negative", edits: []string{dsn, dsn + "\nlimits:\n  recovery_ttl: -1h"}, path: "limits.recovery_ttl", msg: "is not between"},
		{name: "recovery replays negative", edits: []string{dsn, dsn + "\nlimits:\n  recovery_replays: -1"}, path: "limits.recovery_replays", msg: "is not between 1 and 1000"},
		{name: "recovery replays too many", edits: []string{dsn, dsn + "\nlimits:\n  recovery_replays: 1001"}, path: "limits.recovery_replays", msg: "is not between 1 and 1000"},
		{name: "reconcile interval tiny", edits: []string{keyFile, keyFile + "  reconcile_interval: 10ms\n"}, path: "facilitator.reconcile_interval", msg: "less than 1s"},
		{name: "poll interval tiny", edits: []string{keyFile, keyFile + "  poll_interval: 1ms\n"}, path: "facilitator.poll_interval", msg: "1ms is not between 10ms and 10s", line: "poll_interval:"},
		{name: "poll interval huge", edits: []string{keyFile, keyFile + "  poll_interval: 1m\n"}, path: "facilitator.poll_interval", msg: "1m0s is not between 10ms and 10s"},
		{name: "poll interval negative", edits: []string{keyFile, keyFile + "  poll_interval: -250ms\n"}, path: "facilitator.poll_interval", msg: "-250ms is not between"},
		{name: "poll interval without unit", edits: []string{keyFile, keyFile + "  poll_interval: 250\n"}, path: "facilitator.poll_interval", msg: "a duration such as 30s"},
		{name: "reorg window negative", edits: []string{keyFile, keyFile + "  reorg_window: -1m\n"}, path: "facilitator.reorg_window", msg: "-1m0s is not between 0 and 24h0m0s", line: "reorg_window:"},
		{name: "reorg window past what stores keep", edits: []string{keyFile, keyFile + "  reorg_window: 25h\n"}, path: "facilitator.reorg_window", msg: "25h0m0s is not between 0 and 24h0m0s"},
		{name: "reorg window shorter than a payment lives", edits: []string{keyFile, keyFile + "  reorg_window: 5m\n"}, path: "facilitator.reorg_window", msg: "5m0s is shorter than a settlement a reorg dropped can still be mined and resolved (network.max_timeout_seconds + 30s + facilitator.reconcile_interval = 6m0s)"},
		{name: "reorg window as blocks", edits: []string{keyFile, keyFile + "  reorg_window: 64\n"}, path: "facilitator.reorg_window", msg: "a duration such as 30s"},

		// Limits and listen.
		{name: "body limit negative", edits: []string{dsn, dsn + "\nlimits:\n  max_body_bytes: -1"}, path: "limits.max_body_bytes", msg: "must be positive", line: "max_body_bytes:"},
		{name: "upstream timeout negative", edits: []string{dsn, dsn + "\nlimits:\n  upstream_timeout: -5s"}, path: "limits.upstream_timeout", msg: "must be positive"},
		{name: "stream duration negative", edits: []string{dsn, dsn + "\nlimits:\n  max_stream_duration: -1m"}, path: "limits.max_stream_duration", msg: "must be positive"},
		{name: "unpaid rate negative", edits: []string{dsn, dsn + "\nlimits:\n  unpaid_per_minute: -1"}, path: "limits.unpaid_per_minute", msg: "-1 is not between 0 (off) and 1000000", line: "unpaid_per_minute:"},
		{name: "unpaid rate huge", edits: []string{dsn, dsn + "\nlimits:\n  unpaid_per_minute: 1000001"}, path: "limits.unpaid_per_minute", msg: "is not between 0 (off) and 1000000"},
		{name: "unpaid rate overflows", edits: []string{dsn, dsn + "\nlimits:\n  unpaid_per_minute: 99999999999999999999"}, path: "limits.unpaid_per_minute", msg: "a whole number"},
		{name: "unpaid rate a string", edits: []string{dsn, dsn + "\nlimits:\n  unpaid_per_minute: off"}, path: "limits.unpaid_per_minute", msg: "got !!str `off`"},
		{name: "unpaid burst negative", edits: []string{dsn, dsn + "\nlimits:\n  unpaid_per_minute: 60\n  unpaid_burst: -3"}, path: "limits.unpaid_burst", msg: "-3 is not between 1 and 100000"},
		{name: "unpaid burst huge", edits: []string{dsn, dsn + "\nlimits:\n  unpaid_burst: 100001"}, path: "limits.unpaid_burst", msg: "is not between 1 and 100000"},
		{name: "trusted proxy garbage", edits: []string{dsn, dsn + "\nlimits:\n  trusted_proxies: [10.0.0.0/8, proxy.internal]"}, path: "limits.trusted_proxies[1]", msg: `"proxy.internal" is neither an IP address nor a CIDR prefix`},
		{name: "trusted proxy bad prefix length", edits: []string{dsn, dsn + "\nlimits:\n  trusted_proxies: [10.0.0.0/33]"}, path: "limits.trusted_proxies[0]", msg: "is neither"},
		{name: "trusted proxy with zone", edits: []string{dsn, dsn + "\nlimits:\n  trusted_proxies: [\"fe80::1%eth0\"]"}, path: "limits.trusted_proxies[0]", msg: "has a zone"},
		{name: "trusted proxy everyone v4", edits: []string{dsn, dsn + "\nlimits:\n  trusted_proxies: [0.0.0.0/0]"}, path: "limits.trusted_proxies[0]", msg: "trusts every peer"},
		{name: "trusted proxy everyone v6", edits: []string{dsn, dsn + "\nlimits:\n  trusted_proxies: [\"::/0\"]"}, path: "limits.trusted_proxies[0]", msg: "trusts every peer"},
		{name: "trusted proxy a mapping", edits: []string{dsn, dsn + "\nlimits:\n  trusted_proxies:\n    a: 1"}, path: "limits.trusted_proxies", msg: "want a list, got !!map"},
		{name: "trusted proxy long garbage", edits: []string{dsn, dsn + "\nlimits:\n  trusted_proxies: [\"" + strings.Repeat("x", 500) + "\"]"}, path: "limits.trusted_proxies[0]", msg: "...\" is neither", never: strings.Repeat("x", 65)},
		{name: "listen without port", edits: []string{"listen: 127.0.0.1:8080", "listen: localhost"}, path: "listen", msg: "host:port", line: "listen:"},
		{name: "listen port too big", edits: []string{"listen: 127.0.0.1:8080", "listen: 127.0.0.1:99999"}, path: "listen", msg: "0 to 65535"},
		{name: "public_url not http", edits: []string{"listen: 127.0.0.1:8080", "public_url: ftp://gw"}, path: "public_url", msg: "http or https"},
		{name: "public_url with query", edits: []string{"listen: 127.0.0.1:8080", "public_url: https://gw.example/?a=b"}, path: "public_url", msg: "no query"},
		{name: "public_url without host", edits: []string{"listen: 127.0.0.1:8080", "public_url: http:///x"}, path: "public_url", msg: "no host"},

		// Upstreams.
		{name: "no upstreams", edits: []string{
			"upstreams:\n  - name: openai\n    base_url: https://api.openai.com/v1\n" + openaiKey + "\n  - name: demo\n" + demoType + "\n", "upstreams: []\n",
		}, path: "upstreams", msg: "at least one upstream", line: "upstreams:"},
		{name: "duplicate upstream", edits: []string{"  - name: demo", "  - name: openai"}, path: "upstreams[1].name", msg: `"openai" is already the name of upstreams[0]`, line: "  - name: openai\n" + demoType},
		{name: "upstream without name", edits: []string{"  - name: demo\n" + demoType, "  - type: demo"}, path: "upstreams[1].name", msg: "is required"},
		{name: "upstream name with space", edits: []string{"  - name: demo", "  - name: my demo"}, path: "upstreams[1].name", msg: "letters, digits"},
		{name: "upstream unknown type", edits: []string{demoType, "    type: anthropic"}, path: "upstreams[1].type", msg: `"anthropic" is not openai or demo`, line: "type: anthropic"},
		{name: "openai without base_url", edits: []string{"    base_url: https://api.openai.com/v1\n", ""}, path: "upstreams[0].base_url", msg: "is required for type openai"},
		{name: "openai base_url relative", edits: []string{"https://api.openai.com/v1", "api.openai.com/v1"}, path: "upstreams[0].base_url", msg: "URL"},
		{
			name: "openai base_url with credentials", edits: []string{"https://api.openai.com/v1", "https://sk-live:abc@api.openai.com/v1"},
			path: "upstreams[0].base_url", msg: "credentials", never: "sk-live",
		},
		{name: "two api key sources", edits: []string{openaiKey, openaiKey + "\n    api_key_file: /run/secrets/openai"}, path: "upstreams[0].api_key_file", msg: "not both"},
		{name: "api key env bad name", edits: []string{openaiKey, "    api_key_env: sk-abc123"}, path: "upstreams[0].api_key_env", msg: "not an environment variable name"},
		{name: "demo with base_url", edits: []string{demoType, demoType + "\n    base_url: http://x"}, path: "upstreams[1].base_url", msg: "not used by type demo"},
		{name: "demo with a key", edits: []string{demoType, demoType + "\n    api_key_env: X"}, path: "upstreams[1].api_key_env", msg: "takes no API key"},
		{name: "upstream timeout negative", edits: []string{demoType, demoType + "\n    timeout: -1s"}, path: "upstreams[1].timeout", msg: "must be positive"},
		{name: "upstream timeout beyond payment validity", edits: []string{demoType, demoType + "\n    timeout: 250s"}, path: "upstreams[1].timeout", msg: "max_timeout_seconds (300s)", line: "timeout: 250s"},
		{name: "upstreams not a list", edits: []string{"upstreams:\n  - name: openai", "upstreams:\n  x:\n  - name: openai"}, path: "upstreams", msg: "want a list, got !!map"},

		// Models.
		{name: "empty models", edits: []string{
			"models:\n  - id: gpt-4o-mini\n    upstream: openai\n    " + price0 + "\n  - id: demo\n    upstream: demo\n    price: { input: 1000000, output: 2_000_000 }\n", "models: []\n",
		}, path: "models", msg: "at least one model"},
		{name: "duplicate model", edits: []string{"  - id: demo", "  - id: gpt-4o-mini"}, path: "models[1].id", msg: `already the id of models[0]`},
		{name: "markup negative", edits: []string{dsn, dsn + "\npricing:\n  markup: -1"}, path: "pricing.markup", msg: "from 0 to 100000"},
		{name: "markup too large", edits: []string{dsn, dsn + "\npricing:\n  markup: 100001"}, path: "pricing.markup", msg: "from 0 to 100000"},
		{name: "markup a float", edits: []string{dsn, dsn + "\npricing:\n  markup: 12.5"}, path: "pricing.markup", msg: "whole number of basis points"},
		{name: "markup a percent", edits: []string{dsn, dsn + "\npricing:\n  markup: 20%"}, path: "pricing.markup", msg: "whole number of basis points"},
		{name: "markup huge", edits: []string{dsn, dsn + "\npricing:\n  markup: 99999999999999999999999"}, path: "pricing.markup", msg: "basis points"},
		{name: "pricing unknown key", edits: []string{dsn, dsn + "\npricing:\n  margin: 5"}, path: "pricing.margin", msg: "unknown key"},
		{name: "cost a decimal", edits: []string{openaiKey, openaiKey + "\n    prices:\n      gpt-4o-mini: {input: \"0.15\", output: \"600000\"}"}, path: "upstreams[0].prices.gpt-4o-mini.input", msg: "not a decimal"},
		{name: "cost negative output", edits: []string{openaiKey, openaiKey + "\n    prices:\n      gpt-4o-mini: {input: \"1\", output: -5}"}, path: "upstreams[0].prices.gpt-4o-mini.output", msg: "whole, non-negative"},
		{name: "cost model name with a space", edits: []string{openaiKey, openaiKey + "\n    prices:\n      \"a b\": {input: \"1\"}"}, path: "upstreams[0].prices", msg: "not a model name"},
		{name: "no price and no cost", edits: []string{"    " + price0 + "\n", ""}, path: "models[0].price", msg: "or list upstream openai's cost for \"gpt-4o-mini\""},
		{name: "cost with markup past uint64", edits: []string{"    " + price0 + "\n", "", openaiKey, openaiKey + "\n    prices:\n      gpt-4o-mini: {input: \"18446744073709551615\", output: \"1\"}", dsn, dsn + "\npricing:\n  markup: 1"}, path: "models[0].price", msg: "more than 2^64-1"},
		{name: "fallback upstream unknown", edits: []string{"    upstream: openai\n", "    upstream: openai\n    fallbacks: [{upstream: azure}]\n"}, path: "models[0].fallbacks[0].upstream", msg: `"azure" is not the name of any of upstreams`},
		{name: "fallback upstream missing", edits: []string{"    upstream: openai\n", "    upstream: openai\n    fallbacks: [{upstream_model: x}]\n"}, path: "models[0].fallbacks[0].upstream", msg: "is required"},
		{name: "fallback is the model's own upstream", edits: []string{"    upstream: openai\n", "    upstream: openai\n    fallbacks: [{upstream: openai}]\n"}, path: "models[0].fallbacks[0].upstream", msg: "already models[0].upstream of this model"},
		{name: "fallback twice", edits: []string{"    upstream: openai\n", "    upstream: openai\n    fallbacks: [{upstream: demo}, {upstream: demo}]\n"}, path: "models[0].fallbacks[1].upstream", msg: "already models[0].fallbacks[0]"},
		{name: "fallback model with a space", edits: []string{"    upstream: openai\n", "    upstream: openai\n    fallbacks: [{upstream: demo, upstream_model: \"a b\"}]\n"}, path: "models[0].fallbacks[0].upstream_model", msg: "printable, without spaces"},
		{name: "fallback unknown key", edits: []string{"    upstream: openai\n", "    upstream: openai\n    fallbacks: [{upstream: demo, weight: 2}]\n"}, path: "models[0].fallbacks[0].weight", msg: "unknown key"},
		{name: "fallbacks not a list", edits: []string{"    upstream: openai\n", "    upstream: openai\n    fallbacks: demo\n"}, path: "models[0].fallbacks", msg: "!!str"},
		{name: "too many fallbacks", edits: []string{"    upstream: openai\n", "    upstream: openai\n    fallbacks: [" + strings.Repeat("{upstream: demo},", 9) + "]\n"}, path: "models[0].fallbacks", msg: "at most 8"},
		{name: "failures_to_open negative", edits: []string{demoType, demoType + "\n    failures_to_open: -1"}, path: "upstreams[1].failures_to_open", msg: "between 1 and 1000"},
		{name: "failures_to_open huge", edits: []string{demoType, demoType + "\n    failures_to_open: 99999999999999999999"}, path: "upstreams[1].failures_to_open", msg: ""},
		{name: "open_for negative", edits: []string{demoType, demoType + "\n    open_for: -1s"}, path: "upstreams[1].open_for", msg: "at most 1h"},
		{name: "open_for a day", edits: []string{demoType, demoType + "\n    open_for: 24h"}, path: "upstreams[1].open_for", msg: "at most 1h"},
		{name: "open_for a number", edits: []string{demoType, demoType + "\n    open_for: 30"}, path: "upstreams[1].open_for", msg: ""},
		{name: "model without id", edits: []string{"  - id: demo\n    upstream: demo", "  - upstream: demo"}, path: "models[1].id", msg: "is required"},
		{name: "model id with space", edits: []string{"  - id: demo", "  - id: my model"}, path: "models[1].id", msg: "without spaces"},
		{name: "model without upstream", edits: []string{"    upstream: demo\n", ""}, path: "models[1].upstream", msg: "is required"},
		{name: "model unknown upstream", edits: []string{"    upstream: demo\n", "    upstream: anthropic\n"}, path: "models[1].upstream", msg: `"anthropic" is not the name`, line: "upstream: anthropic"},
		{name: "price decimal string", edits: []string{`input: "150000"`, `input: "0.15"`}, path: "models[0].price.input", msg: `not a decimal: 0.15 of the asset per million tokens is "150000" with 6 decimals`, line: `input: "0.15"`},
		{name: "price YAML float", edits: []string{`input: "150000"`, `input: 0.15`}, path: "models[0].price.input", msg: `"150000"`},
		{name: "price negative", edits: []string{`input: "150000"`, `input: -1`}, path: "models[0].price.input", msg: "whole, non-negative"},
		{name: "price exponent", edits: []string{`input: "150000"`, `input: 1e3`}, path: "models[0].price.input", msg: "whole, non-negative"},
		{name: "price hex", edits: []string{`input: "150000"`, `input: 0x10`}, path: "models[0].price.input", msg: "whole, non-negative"},
		{name: "price words", edits: []string{`input: "150000"`, `input: cheap`}, path: "models[0].price.input", msg: "whole, non-negative"},
		{name: "price Arabic-Indic digits", edits: []string{`input: "150000"`, `input: "١٥٠"`}, path: "models[0].price.input", msg: "whole, non-negative"},
		{name: "price missing", edits: []string{`input: "150000", `, ""}, path: "models[0].price.input", msg: "is required", line: `price: { output: "600000"`},
		{name: "price above uint64", edits: []string{`output: "600000"`, `output: "18446744073709551616"`}, path: "models[0].price.output", msg: "more than 18446744073709551615"},
		{name: "price a list", edits: []string{price0, "price: [150000, 600000]"}, path: "models[0].price", msg: "want a mapping of keys, got !!seq"},
		{name: "price with currency", edits: []string{`output: "600000" }`, `output: "600000", currency: USD }`}, path: "models[0].price.currency", msg: `unknown key "currency" (the keys here are input, output)`},
		{name: "max output tokens negative", edits: []string{price0, price0 + "\n    max_output_tokens: -5"}, path: "models[0].max_output_tokens", msg: "must be positive"},
		{name: "max output tokens text", edits: []string{price0, price0 + "\n    max_output_tokens: many"}, path: "models[0].max_output_tokens", msg: "want a whole number, got !!str `many`"},
		{name: "unknown encoding", edits: []string{price0, price0 + "\n    encoding: o100k"}, path: "models[0].encoding", msg: `"o100k" is not a known encoding`},
		{name: "removed settle policy", edits: []string{price0, price0 + "\n    settle:\n      non_streaming: buffered\n      streaming: after_first_chunk"},
			path: "models[0].settle", msg: "was removed: how a paid call settles is fixed, not configured: a non-streamed call settles before its answer is released, " +
				"and a streamed one after the first upstream chunk with content, before the first byte reaches the client", line: "settle:"},
		{name: "removed settle policy, flow style", edits: []string{price0, price0 + "\n    settle: { streaming: before_first_chunk }"}, path: "models[0].settle", msg: "delete the settle block"},
		{name: "unknown payment identifier", edits: []string{price0, price0 + "\n    payment_identifier: always"}, path: "models[0].payment_identifier", msg: `"always" is not optional or required`},
		{name: "payment identifier a bool", edits: []string{price0, price0 + "\n    payment_identifier: true"}, path: "models[0].payment_identifier", msg: `is not optional or required`},

		// Document.
		{name: "unknown top-level key", edits: []string{"listen:", "lissten:"}, path: "lissten", msg: `unknown key "lissten" (the keys here are listen, public_url, network,`, line: "lissten:"},
		{name: "unknown nested key", edits: []string{"  decimals: 6", "  decimals: 6\n  chain: base"}, path: "network.chain", msg: `unknown key "chain"`, line: "chain: base"},
		{name: "unknown key in a list item", edits: []string{demoType, demoType + "\n    weight: 2"}, path: "upstreams[1].weight", msg: `unknown key "weight"`, line: "weight:"},
		{name: "duplicate key", edits: []string{"  decimals: 6", "  decimals: 6\n  decimals: 18"}, path: "network.decimals", msg: `duplicate key "decimals" (first at line 8)`, line: "decimals: 18"},
		{name: "a second document", edits: []string{"listen:", "---\nlisten:", demoType, demoType + "\n---\nlisten: x"}, path: "", msg: "second YAML document"},
		{name: "syntax error", edits: []string{"  asset_name: USD Coin", "  asset_name: [USD Coin"}, path: "", msg: "", line: ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			doc := edit(t, base, tc.edits...)
			c, err := Parse([]byte(doc))
			if err == nil {
				t.Fatalf("Parse succeeded: %+v", c)
			}
			if c != nil {
				t.Error("Parse returned a Config with an error")
			}
			if tc.never != "" && strings.Contains(err.Error(), tc.never) {
				t.Errorf("the error repeats the secret %q: %v", tc.never, err)
			}
			var found *FieldError
			for _, fe := range fieldErrors(t, err) {
				if fe.Path == tc.path && strings.Contains(fe.Msg, tc.msg) {
					found = fe
					break
				}
			}
			if found == nil {
				t.Fatalf("no error at %q containing %q in:\n%v", tc.path, tc.msg, err)
			}
			if tc.line != "" {
				if want := lineOf(t, doc, tc.line); found.Line != want {
					t.Errorf("%v: line %d, want %d", found, found.Line, want)
				}
			}
			if found.Path != "" && !strings.HasPrefix(found.Error(), found.Path) {
				t.Errorf("Error() = %q does not start with the path", found.Error())
			}
		})
	}
}

func TestParseDocumentErrors(t *testing.T) {
	for _, tc := range []struct{ name, doc, msg string }{
		{"empty", "", "empty"},
		{"comments only", "# nothing\n", "empty"},
		{"null", "~\n", "empty"},
		{"a list", "- listen: x\n", "want a mapping of the configuration's keys, got !!seq"},
		{"a scalar", "hello\n", "want a mapping of the configuration's keys, got !!str `hello`"},
		{"tabs", "listen:\n\t- x\n", "line 2"},
		{"alias bomb", "a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\nc: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\n" +
			"d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]\ne: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]\nf: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]\n" +
			"g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f]\nmodels: [*g, *g, *g, *g, *g, *g, *g, *g, *g]\n", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.doc))
			if err == nil {
				t.Fatal("Parse succeeded")
			}
			if !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("error %q does not contain %q", err, tc.msg)
			}
			fieldErrors(t, err) // every error is a *FieldError
		})
	}
}

// TestAllErrorsAtOnce checks that Parse reports every problem, sorted by line.
func TestAllErrorsAtOnce(t *testing.T) {
	doc := edit(t, base,
		"listen: 127.0.0.1:8080", "listen: nowhere",
		"decimals: 6", "decimals: 99",
		`input: "150000"`, `input: "0.15"`,
		"  - id: demo", "  - id: gpt-4o-mini",
	)
	_, err := Parse([]byte(doc))
	fes := fieldErrors(t, err)
	var got []string
	for _, fe := range fes {
		got = append(got, fe.Path)
	}
	want := []string{"listen", "network.decimals", "models[0].price.input", "models[1].id"}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("paths (-want +got):\n%s\n%v", d, err)
	}
}

func TestValidateInCode(t *testing.T) {
	var c Config
	c.SetDefaults()
	err := c.Validate()
	if err == nil {
		t.Fatal("the zero Config validated")
	}
	for _, fe := range fieldErrors(t, err) {
		if fe.Line != 0 {
			t.Errorf("%v: a Config built in code has no lines", fe)
		}
	}
	for _, path := range []string{"network.id", "network.asset", "network.pay_to", "store.dsn", "upstreams", "models"} {
		if !strings.Contains(err.Error(), path+": ") {
			t.Errorf("no error for %s in:\n%v", path, err)
		}
	}
}

func TestDemo(t *testing.T) {
	c := Demo()
	err := c.Validate()
	var paths []string
	for _, fe := range fieldErrors(t, err) {
		paths = append(paths, fe.Path)
	}
	if d := cmp.Diff([]string{"network.asset", "network.pay_to", "store.dsn", "log.anchor.contract"}, paths); d != "" {
		t.Fatalf("Demo() before the caller fills it: (-want +got)\n%s\n%v", d, err)
	}
	c.Network.Asset = "0x5FbDB2315678afecb367f032d93F642f64180aa3"
	c.Network.PayTo = "0xa0Ee7A142d267C1f36714E4a8F75612F20a79720"
	c.Store.DSN = "sqlite:///tmp/demo.db"
	c.Log.Anchor.Contract = "0xe7f1725E7734CE288F8367e1Bb143E90bb3F0512"
	c.PublicURL = "http://127.0.0.1:41234"
	if err := c.Validate(); err != nil {
		t.Fatalf("filled Demo(): %v", err)
	}
	m := c.Model("demo")
	if m == nil || c.Upstream(m.Upstream) == nil || c.Upstream(m.Upstream).Type != UpstreamDemo {
		t.Fatalf("demo model routes nowhere: %+v", m)
	}
	p, err := m.Price.Parse()
	if err != nil {
		t.Fatal(err)
	}
	if q := pricing.Quote(20, m.MaxOutputTokens, p, c.Network.Decimals); pricing.FormatAmount(q, c.Network.Decimals) != "0.01" {
		t.Errorf("a short demo call quotes %s, want the one-cent minimum", pricing.FormatAmount(q, c.Network.Decimals))
	}
	d1, d2 := Demo(), Demo()
	d1.Models[0].Price.Input = "7"
	if d1 == d2 || d2.Models[0].Price.Input != "1000000" {
		t.Error("Demo shares state between calls")
	}
}

func TestClaimLease(t *testing.T) {
	base := func() *Config {
		c, err := Parse([]byte(edit(t, base,
			"store:", "limits:\n  upstream_timeout: 20s\nstore:",
			"  mode: in-process", "  mode: in-process\n  settle_timeout: 5s",
			"    type: demo", "    type: demo\n    timeout: 40s")))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	for _, tc := range []struct {
		name    string
		lease   time.Duration
		want    time.Duration
		wantErr bool
	}{
		// The slowest upstream (40s) + settle (5s) + margin (10s) = 55s.
		{name: "default is five minutes", want: 5 * time.Minute},
		{name: "set at the minimum", lease: 55 * time.Second, want: 55 * time.Second},
		{name: "a millisecond under the minimum", lease: 55*time.Second - time.Millisecond, wantErr: true},
		{name: "negative", lease: -time.Second, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := base()
			c.Limits.ClaimLease = tc.lease
			err := c.Validate()
			if tc.wantErr {
				if err == nil || !strings.Contains(err.Error(), "limits.claim_lease") {
					t.Fatalf("Validate() = %v, want a limits.claim_lease error", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Validate(): %v", err)
			}
			if got := c.ClaimLease(); got != tc.want {
				t.Errorf("ClaimLease() = %s, want %s", got, tc.want)
			}
		})
	}
	c := base()
	c.Upstreams[len(c.Upstreams)-1].Timeout = 10 * time.Minute
	if got, want := c.ClaimLease(), 10*time.Minute+15*time.Second; got != want {
		t.Errorf("ClaimLease() with a 10m upstream = %s, want %s (the minimum outgrows the default)", got, want)
	}
}

// TestRecoveryKnobs: the recovery knobs and a required payment identifier
// parse as written.
func TestRecoveryKnobs(t *testing.T) {
	text := edit(t, base,
		"  dsn: sqlite:///tmp/llm4agents.db\n", "  dsn: sqlite:///tmp/llm4agents.db\nlimits:\n  recovery_ttl: 90s\n  recovery_replays: 3\n",
		`price: { input: "150000", output: "600000" }`, `price: { input: "150000", output: "600000" }`+"\n    payment_identifier: required")
	c, err := Parse([]byte(text))
	if err != nil {
		t.Fatal(err)
	}
	if c.Limits.RecoveryTTL != 90*time.Second || c.Limits.RecoveryReplays != 3 ||
		c.Models[0].PaymentIdentifier != PaymentIDRequired || c.Models[1].PaymentIdentifier != PaymentIDOptional {
		t.Errorf("limits %+v, models %q %q", c.Limits, c.Models[0].PaymentIdentifier, c.Models[1].PaymentIdentifier)
	}
}

// TestUnpaidLimits: the unpaid limit is on by default, an explicit 0 turns
// it off, and trusted proxies parse to masked prefixes, an address to its
// own.
func TestUnpaidLimits(t *testing.T) {
	const dsnLine = "  dsn: sqlite:///tmp/llm4agents.db\n"
	for _, tc := range []struct {
		name    string
		limits  string
		rate    int
		burst   int
		trusted []netip.Prefix
	}{
		{name: "defaults", rate: DefaultUnpaidPerMinute, burst: DefaultUnpaidBurst},
		{name: "off", limits: "  unpaid_per_minute: 0\n", rate: 0, burst: DefaultUnpaidBurst},
		{name: "set", limits: "  unpaid_per_minute: 1000000\n  unpaid_burst: 1\n", rate: MaxUnpaidPerMinute, burst: 1},
		{
			name:   "trusted",
			limits: "  trusted_proxies:\n    - 10.1.2.3/8\n    - 192.0.2.7\n    - \"2001:db8::/32\"\n    - \"::ffff:10.0.0.1\"\n",
			rate:   DefaultUnpaidPerMinute, burst: DefaultUnpaidBurst,
			trusted: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("192.0.2.7/32"),
				netip.MustParsePrefix("2001:db8::/32"), netip.MustParsePrefix("::ffff:10.0.0.1/128")},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			text := base
			if tc.limits != "" {
				text = edit(t, base, dsnLine, dsnLine+"limits:\n"+tc.limits)
			}
			c, err := Parse([]byte(text))
			if err != nil {
				t.Fatal(err)
			}
			if got := c.Limits.UnpaidRate(); got != tc.rate || c.Limits.UnpaidBurst != tc.burst {
				t.Errorf("rate %d burst %d, want %d %d", got, c.Limits.UnpaidBurst, tc.rate, tc.burst)
			}
			if d := cmp.Diff(tc.trusted, c.Limits.TrustedProxyPrefixes(), cmp.Comparer(func(a, b netip.Prefix) bool { return a == b })); d != "" {
				t.Errorf("trusted proxies (-want +got):\n%s", d)
			}
		})
	}
	if (&Limits{}).UnpaidRate() != 0 {
		t.Error("an unset rate without defaults is not off")
	}
}

// TestFallbacks: a fallback's model name defaults to the model's upstream
// name, and a circuit's knobs are read per upstream.
func TestFallbacks(t *testing.T) {
	doc := edit(t, base,
		"    upstream: openai\n", "    upstream: openai\n    upstream_model: gpt-4o-mini-2024\n    fallbacks:\n      - upstream: demo\n      - upstream: backup\n        upstream_model: openai/gpt-4o-mini\n",
		"  - name: demo\n", "  - name: backup\n    base_url: https://openrouter.ai/api/v1\n    failures_to_open: 5\n    open_for: 10s\n  - name: demo\n")
	c, err := Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	want := []Fallback{{Upstream: "demo", UpstreamModel: "gpt-4o-mini-2024"}, {Upstream: "backup", UpstreamModel: "openai/gpt-4o-mini"}}
	if diff := cmp.Diff(want, c.Models[0].Fallbacks); diff != "" {
		t.Errorf("fallbacks (-want +got):\n%s", diff)
	}
	if u := c.Upstreams[1]; u.FailuresToOpen != 5 || u.OpenFor != 10*time.Second {
		t.Errorf("backup: failures_to_open %d, open_for %s", u.FailuresToOpen, u.OpenFor)
	}
}

// TestMarkup: a model without a price sells at its provider's cost for it
// plus the markup, rounded up; a model with a price keeps it.
func TestMarkup(t *testing.T) {
	doc := edit(t, base,
		"    api_key_env: OPENAI_API_KEY\n", "    api_key_env: OPENAI_API_KEY\n    prices:\n      gpt-4o-mini: {input: \"150000\", output: \"600001\"}\n      demo: {input: \"1\", output: \"1\"}\n",
		`    price: { input: "150000", output: "600000" }`+"\n", "",
		"  dsn: sqlite:///tmp/llm4agents.db\n", "  dsn: sqlite:///tmp/llm4agents.db\npricing:\n  markup: 2000\n")
	c, err := Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := c.Models[0].Price, (Price{Input: "180000", Output: "720002"}); got != want {
		t.Errorf("gpt-4o-mini at cost + 20%%: %+v, want %+v", got, want)
	}
	if got := c.Models[1].Price; got != (Price{Input: "1000000", Output: "2_000_000"}) {
		t.Errorf("demo keeps its own price: %+v", got)
	}
}
