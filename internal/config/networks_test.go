package config

import (
	"strings"
	"testing"
)

// twoNetworks adds to base USDT on Base (the primary's chain) and USDC on
// Base Sepolia (another chain, with a remote facilitator).
const twoNetworks = `networks:
  - id: eip155:8453
    asset: 0xfde4C96c8593536E31F229EA8f37b2ADa2699bb2
    asset_name: Tether USD
    asset_version: "1"
    decimals: 6
    pay_to: 0x70997970C51812dc3A010C7d01b50e0d17dc79C8
  - id: eip155:84532
    rpc_url: https://sepolia.base.org
    asset: 0x036CbD53842c5426634e7929541eC2318f3dCF7e
    asset_name: USDC
    asset_version: "2"
    decimals: 6
    pay_to: 0x70997970C51812dc3A010C7d01b50e0d17dc79C8
    schemes: [exact, upto]
    facilitator:
      mode: remote
      url: https://facilitator.example
`

func TestNetworks(t *testing.T) {
	c, err := Parse([]byte(base + twoNetworks))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Networks) != 2 {
		t.Fatalf("networks: %d entries, want 2", len(c.Networks))
	}
	usdt, sepolia := c.Networks[0], c.Networks[1]
	if usdt.MaxTimeoutSeconds != c.Network.MaxTimeoutSeconds || usdt.Upto != c.Network.Upto {
		t.Errorf("defaults not the primary's: %+v", usdt.Network)
	}
	if len(usdt.Schemes) != 1 || usdt.Schemes[0] != SchemeExact {
		t.Errorf("schemes default %v, want [exact]", usdt.Schemes)
	}
	if f := c.ChainFacilitatorOf(usdt); f.Mode != ModeInProcess || f.KeyFile != c.Facilitator.KeyFile {
		t.Errorf("same-chain facilitator %+v, want the top-level one", f)
	}
	if f := c.ChainFacilitatorOf(sepolia); f.Mode != ModeRemote || f.URL != "https://facilitator.example" || f.KeyFile != "" {
		t.Errorf("sepolia facilitator %+v, want remote without a key", f)
	}
	if !sepolia.Offers(SchemeUpto) {
		t.Error("sepolia does not offer upto")
	}
}

func TestNetworksErrors(t *testing.T) {
	const sepolia = `  - id: eip155:84532
    rpc_url: https://sepolia.base.org
    asset: 0x036CbD53842c5426634e7929541eC2318f3dCF7e
    asset_name: USDC
    asset_version: "2"
    decimals: 6
    pay_to: 0x70997970C51812dc3A010C7d01b50e0d17dc79C8
`
	for _, tc := range []struct {
		name  string
		doc   string
		path  string
		msg   string
		never string
	}{
		{name: "decimals differ", doc: "networks:\n" + strings.Replace(sepolia, "decimals: 6", "decimals: 18", 1), path: "networks[0].decimals", msg: "same decimals"},
		{name: "decimals missing", doc: "networks:\n" + strings.Replace(sepolia, "    decimals: 6\n", "", 1), path: "networks[0].decimals", msg: "is required"},
		{name: "primary asset again", doc: "networks:\n" + strings.NewReplacer("eip155:84532", "eip155:8453", "    rpc_url: https://sepolia.base.org\n", "",
			"0x036CbD53842c5426634e7929541eC2318f3dCF7e", "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913").Replace(sepolia),
			path: "networks[0].asset", msg: "offered on eip155:8453 already (network)"},
		{name: "same entry twice", doc: "networks:\n" + sepolia + sepolia, path: "networks[1].asset", msg: "already (networks[0])"},
		{name: "primary chain with a node", doc: "networks:\n" + strings.NewReplacer("eip155:84532", "eip155:8453").Replace(sepolia),
			path: "networks[0]", msg: "leave out rpc_url and facilitator"},
		{name: "other chain without a node", doc: "networks:\n" + strings.Replace(sepolia, "    rpc_url: https://sepolia.base.org\n", "", 1),
			path: "networks[0].rpc_url", msg: "is required"},
		{name: "one chain, two nodes", doc: "networks:\n" + sepolia + strings.NewReplacer("sepolia.base.org", "other.example",
			"0x036CbD53842c5426634e7929541eC2318f3dCF7e", "0x70997970C51812dc3A010C7d01b50e0d17dc79C8").Replace(sepolia),
			path: "networks[1]", msg: "one chain has one of each"},
		{name: "bad facilitator mode", doc: "networks:\n" + sepolia + "    facilitator: {mode: cloud}\n", path: "networks[0].facilitator.mode", msg: "is not"},
		{name: "remote without url", doc: "networks:\n" + sepolia + "    facilitator: {mode: remote}\n", path: "networks[0].facilitator.url", msg: "is required"},
		{name: "remote with a key", doc: "networks:\n" + sepolia + "    facilitator: {mode: remote, url: https://f.example, key_env: K}\n",
			path: "networks[0].facilitator.key_file", msg: "only for mode in-process"},
		{name: "key file and env", doc: "networks:\n" + sepolia + "    facilitator: {key_file: /k, key_env: K}\n", path: "networks[0].facilitator.key_env", msg: "not both"},
		{name: "bad key env", doc: "networks:\n" + sepolia + "    facilitator: {key_env: \"1-bad\"}\n", path: "networks[0].facilitator.key_env", msg: "not an environment variable"},
		{name: "upto of its own", doc: "networks:\n" + sepolia + "    upto: {min_charge: \"1\"}\n", path: "networks[0].upto", msg: "leave it out"},
		{name: "timeout of its own", doc: "networks:\n" + sepolia + "    max_timeout_seconds: 60\n", path: "networks[0].max_timeout_seconds", msg: "leave it out"},
		{name: "bad scheme", doc: "networks:\n" + sepolia + "    schemes: [upto]\n", path: "networks[0].schemes", msg: "must include exact"},
		{name: "bad pay_to", doc: "networks:\n" + strings.Replace(sepolia, "0x70997970C51812dc3A010C7d01b50e0d17dc79C8", "0x000000000000000000000000000000000000dEaD", 1),
			path: "networks[0].pay_to", msg: "burn address"},
		{name: "rpc url with a secret", doc: "networks:\n" + strings.Replace(sepolia, "https://sepolia.base.org", "ftp://user:s3cret@x", 1),
			path: "networks[0].rpc_url", msg: "", never: "s3cret"},
		{name: "unknown key", doc: "networks:\n" + sepolia + "    chain: base\n", path: "", msg: "chain"},
		{name: "too many", doc: "networks:\n" + strings.Repeat(sepolia, maxNetworks+1), path: "networks", msg: "at most"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(base + tc.doc))
			if err == nil {
				t.Fatal("parsed")
			}
			if tc.never != "" && strings.Contains(err.Error(), tc.never) {
				t.Errorf("the error repeats %q: %v", tc.never, err)
			}
			for _, fe := range fieldErrors(t, err) {
				if (tc.path == "" || fe.Path == tc.path) && strings.Contains(fe.Error(), tc.msg) {
					return
				}
			}
			t.Fatalf("no error at %q containing %q in:\n%v", tc.path, tc.msg, err)
		})
	}
}
