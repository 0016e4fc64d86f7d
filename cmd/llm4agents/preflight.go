package main

import (
	"context"
	"crypto/ecdsa"
	"errors"
	"fmt"
	"log/slog"
	"net/url"

	"github.com/ethereum/go-ethereum/crypto"

	"github.com/llm4agents/llm4agents/internal/config"
	"github.com/llm4agents/llm4agents/internal/facilitator"
	"github.com/llm4agents/llm4agents/internal/preflight"
)

// checkChain runs the start-up checks of internal/preflight against the node
// at rawURL. A node's failure may repeat the URL, which may carry a provider's
// key, so it is redacted; a *preflight.SetupError carries no node error.
func checkChain(ctx context.Context, c preflight.Chain, s preflight.Setup, rawURL string, log *slog.Logger) ([]preflight.Asset, error) {
	assets, err := preflight.Check(ctx, c, s, log)
	if err != nil && !errors.As(err, new(*preflight.SetupError)) {
		return nil, redactURL(err, rawURL)
	}
	return assets, err
}

// nodeName names the node in the checks' messages without the path or query
// of its URL, which may carry a provider's key: the URL's origin, or the
// environment variable that holds the URL.
func nodeName(rawURL, env string) string {
	if env != "" {
		return "node in $" + env
	}
	u, err := url.Parse(rawURL)
	if err != nil || u.Host == "" {
		return ""
	}
	return "chain at " + u.Scheme + "://" + u.Host
}

// serveSetup is what serve checks on the node: the network, the asset (and
// every further one offered on its chain) and,
// with an in-process facilitator (key not nil), its signer's gas.
func serveSetup(cfg *config.Config, key *ecdsa.PrivateKey) preflight.Setup {
	n := cfg.Network
	asset, _ := n.AssetAddress() // validated
	s := preflight.Setup{
		Network: n.ID, NetworkKey: "network.id", Node: nodeName(n.RPCURL, n.RPCURLEnv),
		Assets: []preflight.Asset{{
			Address: asset, Name: n.AssetName, Version: n.AssetVersion,
			Key: "network.asset", NameKey: "network.asset_name", VersionKey: "network.asset_version",
		}},
	}
	for i, o := range cfg.Networks {
		if o.ID != n.ID {
			continue // its own node checks it (paymentNetworks)
		}
		a, _ := o.AssetAddress() // validated
		at := fmt.Sprintf("networks[%d]", i)
		s.Assets = append(s.Assets, preflight.Asset{
			Address: a, Name: o.AssetName, Version: o.AssetVersion,
			Key: at + ".asset", NameKey: at + ".asset_name", VersionKey: at + ".asset_version",
		})
	}
	if key != nil {
		s.Signer, s.SignerKey = crypto.PubkeyToAddress(key.PublicKey), "facilitator.key_env"
		if cfg.Facilitator.KeyFile != "" {
			s.SignerKey = "facilitator.key_file"
		}
		s.MaxFeePerGas, _ = cfg.Facilitator.MaxFee() // validated
	}
	return s
}

// facilitatorSetup is what the facilitator command checks on the node: the
// network, each --asset (its domain read from the token unless the flag
// gives one) and the signer's gas.
func facilitatorSetup(f *facilitatorFlags, key *ecdsa.PrivateKey) preflight.Setup {
	s := preflight.Setup{
		Network: f.network, NetworkKey: "--network", Node: nodeName(f.rpc, ""),
		Signer: crypto.PubkeyToAddress(key.PublicKey), SignerKey: "--key-file", MaxFeePerGas: f.maxFee,
	}
	if f.keyFile == "" {
		s.SignerKey = "$" + facilitatorKeyEnv
	}
	for _, a := range f.assetList {
		flag := "--asset " + a.Address.Hex()
		s.Assets = append(s.Assets, preflight.Asset{
			Address: a.Address, Name: a.Name, Version: a.Version,
			Key: "--asset", NameKey: flag + ":NAME", VersionKey: flag + ":VERSION",
		})
	}
	return s
}

// facilitatorAssets are the checked assets, their domains filled in.
func facilitatorAssets(checked []preflight.Asset) []facilitator.Asset {
	out := make([]facilitator.Asset, 0, len(checked))
	for _, a := range checked {
		out = append(out, facilitator.Asset{Address: a.Address, Name: a.Name, Version: a.Version})
	}
	return out
}
