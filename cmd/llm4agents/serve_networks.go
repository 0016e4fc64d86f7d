package main

import (
	"context"
	"crypto/ecdsa"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/llm4agents/llm4agents/internal/chain"
	"github.com/llm4agents/llm4agents/internal/config"
	"github.com/llm4agents/llm4agents/internal/facilitator"
	"github.com/llm4agents/llm4agents/internal/gateway"
	"github.com/llm4agents/llm4agents/internal/preflight"
	"github.com/llm4agents/llm4agents/internal/store"
)

// settler is the facilitator that verifies and settles one chain's
// payments, with what runs behind it.
type settler struct {
	network string
	fac     gateway.Facilitator
	// address settles upto permits (their witness.facilitator); zero when
	// the chain offers no upto.
	address common.Address
	sender  *chain.Sender            // the in-process facilitator's, or nil
	inproc  *facilitator.Facilitator // the in-process facilitator, or nil
}

// chainSettings is what one chain's facilitator settles: its network, the
// assets offered on it and the schemes any of them offers.
type chainSettings struct {
	network string
	assets  []facilitator.Asset
	schemes []string
}

// addAsset adds one offered asset of the chain, with its schemes.
func (s *chainSettings) addAsset(n config.Network) {
	asset, _ := n.AssetAddress() // validated
	s.assets = append(s.assets, facilitator.Asset{Address: asset, Name: n.AssetName, Version: n.AssetVersion})
	for _, sc := range n.Schemes {
		if !slices.Contains(s.schemes, sc) {
			s.schemes = append(s.schemes, sc)
		}
	}
}

// primaryChain is what the primary network's facilitator settles: its
// asset and every further one offered on its chain.
func primaryChain(cfg *config.Config) chainSettings {
	s := chainSettings{network: cfg.Network.ID}
	s.addAsset(cfg.Network)
	for _, o := range cfg.Networks {
		if o.ID == cfg.Network.ID {
			s.addAsset(o.Network)
		}
	}
	return s
}

// newSettler wires the facilitator f of one chain: a remote one (confirmed
// from backend, when there is one), or one in process that settles with key
// on backend, its reconciler started (stopped by the returned closer). An
// in-process one counts into metricsOf's counters, when not nil
// (registerSettlers).
func newSettler(ctx context.Context, cfg *config.Config, f config.Facilitator, cs chainSettings, backend node, key *ecdsa.PrivateKey,
	db store.Settlements, metricsOf *facilitator.Facilitator, log *slog.Logger,
) (_ *settler, closer func(), err error) {
	offersUpto := slices.Contains(cs.schemes, config.SchemeUpto)
	if f.Mode == config.ModeRemote {
		client := facilitator.NewClient(f.URL, nil)
		s := &settler{network: cs.network, fac: client}
		if offersUpto {
			if s.address, err = remoteUptoSettler(ctx, client, cs.network); err != nil {
				return nil, nil, err
			}
		}
		if backend != nil {
			// A settle answer lost to a timeout or a dropped connection is
			// then resolved from the chain, whatever the remote facilitator
			// is (docs/CONFIG.md, "A remote facilitator").
			s.fac = confirmingFacilitator{Facilitator: client, ChainConfirmer: facilitator.NewChainConfirmer(backend, 0)}
		}
		return s, func() {}, nil
	}
	chainID, err := config.Network{ID: cs.network}.ChainID()
	if err != nil {
		return nil, nil, err
	}
	maxFee, err := f.MaxFee()
	if err != nil {
		return nil, nil, err
	}
	sender, err := chain.NewSender(backend, key, chainID, chain.SenderConfig{
		MaxFeePerGas: maxFee, PollInterval: f.PollInterval, ReplaceAfter: replaceAfter(f.SettleTimeout),
	}, log)
	if err != nil {
		return nil, nil, err
	}
	fac, err := facilitator.New(facilitator.Config{
		Network: cs.network, SettleTimeout: f.SettleTimeout, ClaimLease: cfg.ClaimLease(),
		Assets: cs.assets, ReorgWindow: f.ReorgWindow, Schemes: cs.schemes,
	}, backend, sender, db, log)
	if err != nil {
		return nil, nil, err
	}
	if metricsOf != nil {
		fac.ShareMetrics(metricsOf)
	}
	rec := fac.StartReconciler(f.ReconcileInterval)
	return &settler{network: cs.network, fac: fac, address: sender.Address(), sender: sender, inproc: fac}, rec.Close, nil
}

// otherChain is one chain of config.networks other than the primary's,
// with the entries offered on it (their indexes in cfg.Networks).
type otherChain struct {
	settings chainSettings
	entries  []int
}

// otherChains groups cfg.Networks' entries on chains other than the
// primary's, in the order they are first listed.
func otherChains(cfg *config.Config) []otherChain {
	var out []otherChain
	at := map[string]int{}
	for i, o := range cfg.Networks {
		if o.ID == cfg.Network.ID {
			continue
		}
		j, ok := at[o.ID]
		if !ok {
			j = len(out)
			at[o.ID] = j
			out = append(out, otherChain{settings: chainSettings{network: o.ID}})
		}
		out[j].settings.addAsset(o.Network)
		out[j].entries = append(out[j].entries, i)
	}
	return out
}

// paymentNetworks wires every further way to pay of cfg.Networks: those on
// the primary's chain with primary (its facilitator), and each other chain
// with its own node and facilitator, checked before it is used. topKey is
// the top-level facilitator key, or nil.
func paymentNetworks(ctx context.Context, cfg *config.Config, primary *settler, topKey *ecdsa.PrivateKey, db store.Settlements,
	getenv func(string) string, log *slog.Logger,
) (_ []gateway.PaymentNetwork, others []*settler, closers []func(), err error) {
	defer func() {
		if err != nil {
			for _, c := range slices.Backward(closers) {
				c()
			}
		}
	}()
	settlers := map[string]*settler{cfg.Network.ID: primary}
	metricsOf := primary.inproc // whose counters every chain's facilitator shares
	for _, oc := range otherChains(cfg) {
		first := cfg.Networks[oc.entries[0]]
		at := fmt.Sprintf("networks[%d]", oc.entries[0])
		f := cfg.ChainFacilitatorOf(first)
		var key *ecdsa.PrivateKey
		if f.Mode != config.ModeRemote {
			if key, err = chainKey(f, cfg.Facilitator, topKey, getenv); err != nil {
				return nil, nil, closers, fmt.Errorf("%s.facilitator: %w", at, err)
			}
		}
		var backend node
		if first.RPCURL != "" || first.RPCURLEnv != "" {
			client, closeNode, err := dialChain(ctx, first, at, oc, key, f, log, getenv)
			if err != nil {
				return nil, nil, closers, err
			}
			closers = append(closers, closeNode)
			backend = client
		}
		s, stop, err := newSettler(ctx, cfg, f, oc.settings, backend, key, db, metricsOf, log)
		if err != nil {
			return nil, nil, closers, fmt.Errorf("%s: %w", at, err)
		}
		if metricsOf == nil {
			metricsOf = s.inproc
		}
		closers = append(closers, stop)
		settlers[oc.settings.network] = s
		others = append(others, s)
	}
	out := make([]gateway.PaymentNetwork, 0, len(cfg.Networks))
	for _, o := range cfg.Networks {
		s := settlers[o.ID]
		pn := gateway.PaymentNetwork{
			Network: o.ID, Asset: o.Asset, AssetName: o.AssetName, AssetVersion: o.AssetVersion, PayTo: o.PayTo, Facilitator: s.fac,
		}
		if o.Offers(config.SchemeUpto) {
			if pn.Upto, err = gatewayUpto(cfg, s.address); err != nil {
				return nil, nil, closers, err
			}
		}
		out = append(out, pn)
	}
	return out, others, closers, nil
}

// registerSettlers exports, for every in-process facilitator among
// settlers, its signer's balance on its network; and the facilitators'
// reconciler and reorg counters, once, from the first: every chain's
// facilitator counts into its counters (newSettler), so the metrics keep
// their names and labels however many chains are paid on (the log names
// each chain's work).
func registerSettlers(reg prometheus.Registerer, settlers []*settler) error {
	registered := false
	for _, s := range settlers {
		if s.inproc == nil {
			continue
		}
		if err := signerBalanceGauge(reg, s.sender, s.network); err != nil {
			return err
		}
		if !registered {
			if err := s.inproc.RegisterMetrics(reg); err != nil {
				return err
			}
			registered = true
		}
	}
	return nil
}

// chainKey is the in-process signer key of a further chain's facilitator
// f: the top-level key when f names the same source, else its own.
func chainKey(f, top config.Facilitator, topKey *ecdsa.PrivateKey, getenv func(string) string) (*ecdsa.PrivateKey, error) {
	if topKey != nil && f.KeyFile == top.KeyFile && f.KeyEnv == top.KeyEnv {
		return topKey, nil
	}
	hexKey, err := f.Key(getenv)
	if err != nil {
		return nil, err
	}
	return parseKey(hexKey, "facilitator")
}

// dialChain dials the node of a further chain and checks it as serve checks
// the primary's: its chain id, each asset's domain, the signer's gas.
func dialChain(ctx context.Context, first config.OtherNetwork, at string, oc otherChain, key *ecdsa.PrivateKey, f config.Facilitator,
	log *slog.Logger, getenv func(string) string,
) (node, func(), error) {
	rpcURL, err := first.RPC(getenv)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", at, err)
	}
	dialCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	client, err := dialNode(dialCtx, rpcURL)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: dial node: %w", at, redactURL(err, rpcURL))
	}
	setup := preflight.Setup{Network: oc.settings.network, NetworkKey: at + ".id", Node: nodeName(first.RPCURL, first.RPCURLEnv)}
	for i, a := range oc.settings.assets {
		ak := fmt.Sprintf("networks[%d]", oc.entries[i])
		setup.Assets = append(setup.Assets, preflight.Asset{
			Address: a.Address, Name: a.Name, Version: a.Version,
			Key: ak + ".asset", NameKey: ak + ".asset_name", VersionKey: ak + ".asset_version",
		})
	}
	if key != nil {
		setup.Signer, setup.SignerKey = crypto.PubkeyToAddress(key.PublicKey), at+".facilitator"
		setup.MaxFeePerGas, _ = f.MaxFee() // validated
	}
	if _, err := checkChain(ctx, client, setup, rpcURL, log); err != nil {
		client.Close()
		return nil, nil, fmt.Errorf("%s: %w", at, err)
	}
	return client, client.Close, nil
}
