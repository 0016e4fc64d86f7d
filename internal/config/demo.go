package config

// Demo returns the embedded configuration of `llm4agents demo`: the local
// test network eip155:1337 with a 6-decimal test USDC, an in-process
// facilitator, the built-in demo upstream and two models: "demo", at $1 per
// million input tokens and $2 per million output tokens (so a short call
// quotes the one-cent minimum), and "demo-embed" for embeddings, listening on a free port of 127.0.0.1, with
// prepaid credits on and a receipt key generated when it starts, and the
// receipt log on and anchored on chain.
//
// The demo's chain and facilitator signer run in the process, so this Config
// validates without an RPC URL or a key source, which a parsed one never does.
// What only the caller knows is left empty, and Validate reports it until it
// is filled: Network.Asset (the test token, once deployed), Network.PayTo,
// Log.Anchor.Contract (the receipt log's anchor contract, once deployed) and
// Store.DSN (a temporary SQLite file). PublicURL is http://127.0.0.1:0; set
// it once the listener is bound.
func Demo() *Config {
	c := &Config{
		Listen: "127.0.0.1:0",
		Network: Network{
			ID:           "eip155:1337",
			AssetName:    "USD Coin",
			AssetVersion: "2",
			Decimals:     6,
		},
		Facilitator: Facilitator{Mode: ModeInProcess},
		Upstreams:   []Upstream{{Name: "demo", Type: UpstreamDemo}},
		Models: []Model{{
			ID:       "demo",
			Upstream: "demo",
			Price:    Price{Input: "1000000", Output: "2000000"},
		}, {
			// POST /v1/embeddings: the demo upstream's deterministic
			// vectors, at $0.02 per million input tokens.
			ID:       "demo-embed",
			Upstream: "demo",
			Kind:     KindEmbeddings,
			Price:    Price{Input: "20000"},
		}},
		// Credits on, with a receipt key generated at start (ReceiptKey).
		Credits: Credits{Enabled: true},
		// The receipt log on, with a checkpoint key generated at start
		// (LogKey), anchored on the demo's chain every DemoAnchorEvery at
		// the contract the caller fills in.
		Log:  ReceiptLog{Enabled: true, Anchor: Anchor{Enabled: true, Every: DemoAnchorEvery}},
		demo: true,
	}
	c.SetDefaults()
	return c
}

// IsDemo reports whether c is the embedded demo configuration (Demo), whose
// chain, keys and facilitator signer live in the process.
func (c *Config) IsDemo() bool { return c.demo }
