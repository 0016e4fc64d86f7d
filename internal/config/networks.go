package config

import (
	"fmt"
	"strings"

	"github.com/ethereum/go-ethereum/common"
)

// OtherNetwork is one more way to pay, offered in every call's 402 after the
// primary Network: the same asset on another chain (USDC on Base and on
// Base Sepolia), or another asset (USDC and USDT on Base). Every asset is
// taken at par: the models' prices, in atomic units, are asked in each, so
// each must have the primary asset's decimals. Top-ups, receipts' chain and
// the prices' display stay on the primary network.
//
// An entry on the primary's chain is settled by the primary's facilitator
// and read from its node: it sets neither rpc_url nor facilitator. An entry
// on another chain names its node (rpc_url or rpc_url_env) and may set its
// own facilitator; by default it is the top-level one (the same signer key
// in process, or the same remote URL). Entries on one chain share that
// chain's node and facilitator, so they must name the same ones.
type OtherNetwork struct {
	Network `yaml:",inline"`
	// Facilitator overrides the top-level facilitator for this chain.
	Facilitator *ChainFacilitator `yaml:"facilitator,omitempty"`
}

// ChainFacilitator is who verifies and settles on one further chain: the
// top-level Facilitator's mode, URL and key, overridden. Its timeouts, fee
// cap and intervals are the top-level ones.
type ChainFacilitator struct {
	// Mode is ModeInProcess or ModeRemote; default the top-level mode.
	Mode string `yaml:"mode"`
	// URL is the remote facilitator's base URL (ModeRemote only).
	URL string `yaml:"url"`
	// KeyFile or KeyEnv is the in-process signer's key; default the
	// top-level key.
	KeyFile string `yaml:"key_file"`
	KeyEnv  string `yaml:"key_env"`
}

// maxNetworks bounds networks: every 402 lists each of them.
const maxNetworks = 8

// ChainFacilitatorOf returns the facilitator that settles on o's chain: the
// top-level one with o's overrides.
func (c *Config) ChainFacilitatorOf(o OtherNetwork) Facilitator {
	f := c.Facilitator
	if o.Facilitator == nil {
		return f
	}
	if o.Facilitator.Mode != "" && o.Facilitator.Mode != f.Mode {
		f.Mode, f.URL, f.KeyFile, f.KeyEnv = o.Facilitator.Mode, "", "", ""
	}
	if o.Facilitator.URL != "" {
		f.URL = o.Facilitator.URL
	}
	if o.Facilitator.KeyFile != "" || o.Facilitator.KeyEnv != "" {
		f.KeyFile, f.KeyEnv = o.Facilitator.KeyFile, o.Facilitator.KeyEnv
	}
	return f
}

func (c *Config) setNetworkDefaults() {
	for i := range c.Networks {
		n := &c.Networks[i].Network
		if n.MaxTimeoutSeconds == 0 {
			n.MaxTimeoutSeconds = c.Network.MaxTimeoutSeconds
		}
		if len(n.Schemes) == 0 {
			n.Schemes = []string{SchemeExact}
		}
		// The quote is one: upto's minimum charge and streaming policy are
		// the primary's.
		if n.Upto == (Upto{}) {
			n.Upto = c.Network.Upto
		}
	}
}

func (c *Config) validateNetworks(p *problems) {
	if len(c.Networks) > maxNetworks {
		p.add("networks", "has %d entries, at most %d: every 402 lists each", len(c.Networks), maxNetworks)
		return
	}
	type chain struct {
		at   string
		node string
		fac  ChainFacilitator
	}
	chains := map[string]chain{}
	seen := map[string]string{c.Network.ID + "/" + strings.ToLower(c.Network.Asset): "network"}
	for i, o := range c.Networks {
		at := fmt.Sprintf("networks[%d]", i)
		n := o.Network
		checkNetwork(p, at, &n)
		if n.Decimals != c.Network.Decimals {
			p.add(at+".decimals", "%d differs from network.decimals %d: every asset is asked the same quote in atomic units, so all must have the same decimals",
				n.Decimals, c.Network.Decimals)
		}
		if n.MaxTimeoutSeconds != c.Network.MaxTimeoutSeconds {
			p.add(at+".max_timeout_seconds", "%d differs from network.max_timeout_seconds %d; leave it out", n.MaxTimeoutSeconds, c.Network.MaxTimeoutSeconds)
		}
		if n.Upto != c.Network.Upto {
			p.add(at+".upto", "differs from network.upto; leave it out: one quote has one minimum charge and one streaming policy")
		}
		if common.IsHexAddress(n.Asset) {
			id := n.ID + "/" + strings.ToLower(common.HexToAddress(n.Asset).Hex())
			if prev, dup := seen[id]; dup {
				p.add(at+".asset", "is offered on %s already (%s)", n.ID, prev)
			}
			seen[id] = at
		}
		var fac ChainFacilitator
		if o.Facilitator != nil {
			fac = *o.Facilitator
		}
		node := n.RPCURL + "\x00" + n.RPCURLEnv
		if n.ID == c.Network.ID {
			if node != "\x00" || o.Facilitator != nil {
				p.add(at, "is on the primary network's chain (%s): it is settled by the primary facilitator and read from its node; leave out rpc_url and facilitator", n.ID)
			}
			continue
		}
		if prev, ok := chains[n.ID]; ok {
			if prev.node != node || prev.fac != fac {
				p.add(at, "is on the chain of %s (%s) but names another node or facilitator: one chain has one of each", prev.at, n.ID)
			}
			continue
		}
		chains[n.ID] = chain{at: at, node: node, fac: fac}
		c.validateChainFacilitator(p, at, o)
	}
}

// validateChainFacilitator checks the facilitator of o's chain, which is
// not the primary's.
func (c *Config) validateChainFacilitator(p *problems, at string, o OtherNetwork) {
	if o.Facilitator != nil {
		switch o.Facilitator.Mode {
		case "", ModeInProcess, ModeRemote:
		default:
			p.add(at+".facilitator.mode", "%q is not %s or %s", truncate(o.Facilitator.Mode), ModeInProcess, ModeRemote)
			return
		}
	}
	f := c.ChainFacilitatorOf(o)
	switch f.Mode {
	case ModeInProcess:
		if o.RPCURL == "" && o.RPCURLEnv == "" {
			p.add(at+".rpc_url", "is required: the in-process facilitator settles on this chain's node (or set rpc_url_env)")
		}
		switch {
		case f.KeyFile != "" && f.KeyEnv != "":
			p.add(at+".facilitator.key_env", "set key_file or key_env, not both")
		case f.KeyFile == "" && f.KeyEnv == "" && !c.demo:
			p.add(at+".facilitator.key_file", "is required with mode %s: the signer key's file (or set key_env)", ModeInProcess)
		case f.KeyEnv != "":
			checkEnvName(p, at+".facilitator.key_env", f.KeyEnv)
		}
		if f.URL != "" {
			p.add(at+".facilitator.url", "is only for mode %s", ModeRemote)
		}
	case ModeRemote:
		if f.URL == "" {
			p.add(at+".facilitator.url", "is required with mode %s", ModeRemote)
		} else if msg := checkURL(f.URL, "http", "https"); msg != "" {
			p.add(at+".facilitator.url", "%s", msg)
		}
		if o.Facilitator != nil && (o.Facilitator.KeyFile != "" || o.Facilitator.KeyEnv != "") {
			p.add(at+".facilitator.key_file", "is only for mode %s: a remote facilitator holds its own key", ModeInProcess)
		}
	}
}
