package main

import (
	"context"
	"crypto/ecdsa"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/ethclient"
	"github.com/ethereum/go-ethereum/rpc"

	"github.com/llm4agents/llm4agents/internal/chain"
	"github.com/llm4agents/llm4agents/internal/chat"
	"github.com/llm4agents/llm4agents/internal/config"
	"github.com/llm4agents/llm4agents/internal/crashpoint"
	"github.com/llm4agents/llm4agents/internal/facilitator"
	"github.com/llm4agents/llm4agents/internal/gateway"
	"github.com/llm4agents/llm4agents/internal/pricing"
	"github.com/llm4agents/llm4agents/internal/receiptlog"
	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/internal/upstream"
	"github.com/llm4agents/llm4agents/x402/evm/upto"
)

// node is what the gateway's in-process facilitator needs from a chain: an
// *ethclient.Client for a real node, simulated.Client for the demo.
type node interface {
	facilitator.Backend
	chain.Backend
}

// confirmingFacilitator is a remote facilitator with a chain confirmer: the
// gateway asks the chain itself whether a payment whose settle answer it did
// not get was paid.
type confirmingFacilitator struct {
	gateway.Facilitator
	*facilitator.ChainConfirmer
}

// gatewayParts are the running pieces behind a gateway, closed in reverse.
type gatewayParts struct {
	server      *gateway.Server
	sender      *chain.Sender            // the in-process facilitator's, or nil
	facilitator *facilitator.Facilitator // the in-process facilitator, or nil
	closers     []func()
}

func (g *gatewayParts) close() {
	for _, c := range slices.Backward(g.closers) {
		c()
	}
}

// buildGateway wires a gateway from a validated config. backend is the node
// (nil when none is configured, with a remote facilitator only); key is the
// in-process facilitator's signer, nil for a remote one.
func buildGateway(ctx context.Context, cfg *config.Config, backend node, key *ecdsa.PrivateKey, getenv func(string) string, log *slog.Logger) (_ *gatewayParts, err error) {
	g := &gatewayParts{}
	defer func() {
		if err != nil {
			g.close()
		}
	}()
	db, err := openStore(ctx, cfg.Store, getenv, log)
	if err != nil {
		return nil, err
	}
	g.closers = append(g.closers, func() { _ = db.Close() })

	asset, _ := cfg.Network.AssetAddress()
	primary, stop, err := newSettler(ctx, cfg, cfg.Facilitator, primaryChain(cfg), backend, key, db, nil, log)
	if err != nil {
		return nil, err
	}
	g.closers = append(g.closers, stop)
	fac := primary.fac
	g.sender, g.facilitator = primary.sender, primary.inproc
	var upto *gateway.Upto
	if cfg.Network.Offers(config.SchemeUpto) {
		if upto, err = gatewayUpto(cfg, primary.address); err != nil {
			return nil, err
		}
	}
	networks, others, closers, err := paymentNetworks(ctx, cfg, primary, key, db, getenv, log)
	g.closers = append(g.closers, closers...)
	if err != nil {
		return nil, err
	}

	counter := pricing.NewCounter()
	providers := map[string]gateway.Provider{}
	for _, u := range cfg.Upstreams {
		switch u.Type {
		case config.UpstreamDemo:
			providers[u.Name] = upstream.NewDemo(upstream.DemoConfig{
				Tokenizer:   upstream.TokenizerFunc(func(s string) int { n, _ := counter.Tokens(pricing.O200kBase, s); return int(n) }),
				CountPrompt: func(r *chat.Request) int64 { n, _ := counter.PromptTokens(r); return n },
			})
		default:
			apiKey, err := u.APIKey(getenv)
			if err != nil {
				return nil, fmt.Errorf("upstream %s: %w", u.Name, err)
			}
			p, err := upstream.NewOpenAI(upstream.OpenAIConfig{BaseURL: u.BaseURL, APIKey: apiKey, Timeout: u.Timeout}, log)
			if err != nil {
				return nil, fmt.Errorf("upstream %s: %w", u.Name, err)
			}
			providers[u.Name] = p
		}
	}
	metrics := gateway.NewMetrics()
	health := map[string]*upstream.Health{}
	for _, u := range cfg.Upstreams {
		health[u.Name] = upstream.NewHealth(upstream.HealthConfig{FailuresToOpen: u.FailuresToOpen, OpenFor: u.OpenFor})
	}
	models := make([]gateway.Model, 0, len(cfg.Models))
	for _, m := range cfg.Models {
		price, err := m.Price.Parse()
		if err != nil {
			return nil, fmt.Errorf("model %s: %w", m.ID, err)
		}
		provider, err := modelProvider(m, cfg.Upstreams, providers, health, metrics, log)
		if err != nil {
			return nil, fmt.Errorf("model %s: %w", m.ID, err)
		}
		models = append(models, gateway.Model{
			ID: m.ID, UpstreamModel: m.UpstreamModel, Provider: provider, Price: price,
			MaxOutputTokens: m.MaxOutputTokens, Encoding: m.Encoding,
			PaymentIDRequired: m.PaymentIdentifier == config.PaymentIDRequired,
			Embeddings:        m.Kind == config.KindEmbeddings,
			MaxInputTokens:    m.MaxInputTokens,
		})
	}
	var cred *gateway.Credits
	// With credits on, expired claims are purged only once the top-up sweep
	// left none of them waiting for its credit (gateway.PurgeGate).
	var gate gateway.PurgeGate
	if cfg.Credits.Enabled {
		var chain gateway.ChainReader
		if backend != nil {
			chain = backend
		}
		c, topUps, stop, err := buildCredits(cfg, db, chain, getenv, log)
		if err != nil {
			return nil, err
		}
		g.closers = append(g.closers, stop)
		cred, gate = c, topUps
	} else if cfg.Receipts.Enabled {
		c, stop, err := buildReceipts(cfg, db, backend, getenv, log)
		if err != nil {
			return nil, err
		}
		g.closers = append(g.closers, stop)
		cred = c
	}
	g.closers = append(g.closers, gateway.StartPurger(db, gate, time.Hour, log).Close)
	hostname, _ := os.Hostname()
	owner := fmt.Sprintf("%s/%d", hostname, os.Getpid())
	var receiptLog *receiptlog.Log
	if cfg.Log.Enabled {
		l, stop, err := buildLog(ctx, cfg, db, owner, g.sender, backend, getenv, log)
		if err != nil {
			return nil, err
		}
		g.closers = append(g.closers, stop)
		receiptLog = l
	}
	var settlements store.Settlements
	if g.facilitator != nil {
		settlements = db
	}
	dash, err := buildDashboard(cfg, cred, settlements, metrics, receiptLog, log)
	if err != nil {
		return nil, fmt.Errorf("dashboard: %w", err)
	}
	srv, err := gateway.New(gateway.Config{
		PublicURL: cfg.PublicURL, Network: cfg.Network.ID, Asset: asset.Hex(),
		AssetName: cfg.Network.AssetName, AssetVersion: cfg.Network.AssetVersion, Decimals: cfg.Network.Decimals,
		PayTo: cfg.Network.PayTo, MaxTimeoutSeconds: int64(cfg.Network.MaxTimeoutSeconds),
		MaxBodyBytes: cfg.Limits.MaxBodyBytes, UpstreamTimeout: cfg.Limits.UpstreamTimeout,
		SettleTimeout: cfg.Facilitator.SettleTimeout, MaxStreamDuration: cfg.Limits.MaxStreamDuration,
		RecoveryTTL: cfg.Limits.RecoveryTTL, RecoveryReplays: cfg.Limits.RecoveryReplays,
		ClaimLease: cfg.ClaimLease(), Owner: owner, Models: models, Metrics: metrics,
		Credits: cred, Upto: upto, Log: receiptLog, Dashboard: dash, Networks: networks,
		Unpaid: gateway.UnpaidLimits{PerMinute: cfg.Limits.UnpaidRate(), Burst: cfg.Limits.UnpaidBurst,
			TrustedProxies: cfg.Limits.TrustedProxyPrefixes()},
	}, fac, db, log)
	if err != nil {
		return nil, err
	}
	g.server = srv
	// Not ready while the store is unreachable: a replica that cannot claim
	// payments would only answer 503s (fail closed), so traffic goes elsewhere.
	srv.SetReadiness(db.Ping)
	if err := registerSettlers(srv.Metrics().Registry(), append([]*settler{primary}, others...)); err != nil {
		return nil, err
	}
	if receiptLog != nil {
		if err := receiptLog.RegisterMetrics(srv.Metrics().Registry()); err != nil {
			return nil, err
		}
	}
	return g, nil
}

// gatewayUpto is the gateway's upto offer: settled by settler (the
// facilitator's address the buyer signs into the permit), for at least
// network.upto.min_charge.
func gatewayUpto(cfg *config.Config, settler common.Address) (*gateway.Upto, error) {
	minCharge, err := cfg.Network.Upto.MinChargeAmount()
	if err != nil {
		return nil, err
	}
	return gateway.NewUpto(settler, minCharge, cfg.Network.Upto.Streaming == config.UptoExactOnly)
}

// remoteUptoSettler asks a remote facilitator, at start, which address
// settles upto permits on network (GET /supported, kinds[].extra
// .facilitatorAddress): one that lists none cannot be offered.
func remoteUptoSettler(ctx context.Context, c *facilitator.Client, network string) (common.Address, error) {
	sr, err := c.Supported(ctx)
	if err != nil {
		return common.Address{}, fmt.Errorf("network.schemes has upto: ask the remote facilitator what it supports: %w", err)
	}
	for _, k := range sr.Kinds {
		if k.Scheme != upto.Scheme || k.Network != network {
			continue
		}
		extra, err := upto.ParseExtra(k.Extra)
		if err != nil {
			return common.Address{}, fmt.Errorf("network.schemes has upto: the remote facilitator's upto kind on %s: %w", network, err)
		}
		return extra.FacilitatorAddress, nil
	}
	return common.Address{}, fmt.Errorf("network.schemes has upto, but the remote facilitator does not list upto on %s in GET /supported", network)
}

func runServe(ctx context.Context, args []string, e env) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	path := fs.String("config", "", "YAML config file (see docs/CONFIG.md and examples/)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("serve: unexpected argument #%d (flags go before it; values are not echoed)", fs.NArg())
	}
	if err := crashpoint.Validate(); err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	if *path == "" {
		return errors.New("serve: --config is required")
	}
	data, err := readCapped(*path, 1<<20)
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	cfg, err := config.Parse(data)
	if err != nil {
		return fmt.Errorf("serve: %s:\n%w", *path, err)
	}
	log := slog.New(slog.NewJSONHandler(e.stderr, nil))

	var backend node
	var key *ecdsa.PrivateKey
	if cfg.Facilitator.Mode != config.ModeRemote {
		// The key first: a missing or bad key is reported as such, not hidden
		// behind a node that is down.
		hexKey, err := cfg.Facilitator.Key(e.getenv)
		if err != nil {
			return fmt.Errorf("serve: facilitator key: %w", err)
		}
		if key, err = parseKey(hexKey, "facilitator"); err != nil {
			return fmt.Errorf("serve: %w", err)
		}
	}
	// The in-process facilitator settles on the node; credits read top-up
	// settlements from it, whoever settles (config.Validate requires a node for
	// both). A remote facilitator's gateway given a node checks it too.
	if cfg.Network.RPCURL != "" || cfg.Network.RPCURLEnv != "" {
		rpcURL, err := cfg.Network.RPC(e.getenv)
		if err != nil {
			return fmt.Errorf("serve: network: %w", err)
		}
		dialCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		client, err := dialNode(dialCtx, rpcURL)
		if err != nil {
			return fmt.Errorf("serve: dial node: %w", redactURL(err, rpcURL))
		}
		defer client.Close()
		// Before listening: a wrong asset, domain or chain, or a signer
		// without gas, would otherwise show only at the first payment.
		if _, err := checkChain(ctx, client, serveSetup(cfg, key), rpcURL, log); err != nil {
			return fmt.Errorf("serve: %w", err)
		}
		backend = client
	}
	if backend == nil {
		log.Warn("a remote facilitator and no network.rpc_url: a settle answer lost to a timeout cannot be confirmed from the chain, " +
			"and its buyer's retry may be refused although it paid (docs/CONFIG.md, \"A remote facilitator and lost answers\")")
	}
	// Listen before building the gateway: with port 0 the public URL, and so
	// every 402's resource URL, is known only once the port is bound.
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("serve: listen: %w", err)
	}
	cfg.PublicURL = boundPublicURL(cfg.PublicURL, cfg.Listen, ln.Addr())
	parts, err := buildGateway(ctx, cfg, backend, key, e.getenv, log)
	if err != nil {
		_ = ln.Close() // never served: nothing to lose
		return fmt.Errorf("serve: %w", err)
	}
	defer parts.close()
	log.Info("gateway listening", "addr", ln.Addr().String(), "public_url", cfg.PublicURL, "network", cfg.Network.ID, "models", len(cfg.Models))
	printf(e.stdout, "gateway listening on http://%s\n", ln.Addr())
	return serve(ctx, ln, parts.server, cfg.Facilitator.SettleTimeout+cfg.Limits.UpstreamTimeout)
}

// boundPublicURL returns the public URL to serve under once the listener is
// bound to addr. A public_url the file did not set defaults to http://<listen>
// (config.SetDefaults), which for port 0 names a port nothing listens on: it
// becomes the bound port. A public_url written in the file is kept as it is.
func boundPublicURL(publicURL, listen string, addr net.Addr) string {
	host, port, err := net.SplitHostPort(listen)
	if err != nil || port != "0" {
		return publicURL
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1" // as config.SetDefaults does
	}
	if publicURL != "http://"+net.JoinHostPort(host, port) {
		return publicURL // set in the file
	}
	_, bound, err := net.SplitHostPort(addr.String())
	if err != nil {
		return publicURL
	}
	return "http://" + net.JoinHostPort(host, bound)
}

// dialNode connects to the node at rawURL. Over http(s) the RPC client is
// given only the URL's origin, and a transport puts the path and query back
// on each request: net/http's errors repeat the request URL, the gateway logs
// them (a node that goes away fails every verify), and the path or query may
// carry a provider's API key (network.rpc_url_env).
func dialNode(ctx context.Context, rawURL string) (*ethclient.Client, error) {
	u, err := url.Parse(rawURL)
	if err != nil || u.Scheme != "http" && u.Scheme != "https" {
		return ethclient.DialContext(ctx, rawURL)
	}
	origin := (&url.URL{Scheme: u.Scheme, Host: u.Host}).String()
	hc := &http.Client{Transport: fullURLTransport{url: u}}
	c, err := rpc.DialOptions(ctx, origin, rpc.WithHTTPClient(hc))
	if err != nil {
		return nil, err
	}
	return ethclient.NewClient(c), nil
}

// fullURLTransport sends every request to url, whatever URL it names.
type fullURLTransport struct{ url *url.URL }

func (t fullURLTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	out := req.Clone(req.Context()) // a RoundTripper must not change req
	u := *t.url
	out.URL, out.Host = &u, ""
	return http.DefaultTransport.RoundTrip(out)
}

// redactURL takes the node's URL out of err: net/http's errors repeat the
// request URL, and an RPC URL may carry a provider's API key in its path or
// query (network.rpc_url_env). The result does not unwrap, so that nothing
// can print the original.
func redactURL(err error, rawURL string) error {
	msg := err.Error()
	forms := []string{rawURL}
	if u, perr := url.Parse(rawURL); perr == nil {
		forms = append(forms, u.String(), u.Redacted())
	}
	for _, f := range forms {
		if f != "" {
			msg = strings.ReplaceAll(msg, f, "<rpc url>")
		}
	}
	return errors.New(msg)
}

// readCapped reads a small file, refusing one larger than limit.
func readCapped(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path) // #nosec G304 -- the operator names the config file
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }() // read-only: closing loses nothing
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, limit)
	}
	return b, nil
}

// modelProvider is what serves m: its upstream, or, with fallbacks, its
// upstream and then each fallback in order, under each provider's health.
// A chat model's provider speaks the Responses API when its upstreams are
// configured to (config validated that they all agree).
func modelProvider(m config.Model, upstreams []config.Upstream, providers map[string]gateway.Provider, health map[string]*upstream.Health,
	metrics *gateway.Metrics, log *slog.Logger) (gateway.Provider, error) {
	provider := func(name string) (gateway.Provider, error) {
		p := providers[name]
		if m.Kind == config.KindEmbeddings || !speaksResponses(upstreams, name) {
			return p, nil
		}
		rp, err := upstream.WithResponses(p)
		if err != nil {
			return nil, fmt.Errorf("upstream %s: %w", name, err)
		}
		return rp, nil
	}
	first, err := provider(m.Upstream)
	if err != nil {
		return nil, err
	}
	if len(m.Fallbacks) == 0 {
		return first, nil
	}
	routes := []upstream.Route{{Name: m.Upstream, Provider: first, Health: health[m.Upstream]}}
	for _, f := range m.Fallbacks {
		p, err := provider(f.Upstream)
		if err != nil {
			return nil, err
		}
		r := upstream.Route{Name: f.Upstream, Provider: p, Health: health[f.Upstream]}
		if f.UpstreamModel != m.UpstreamModel {
			r.Model = f.UpstreamModel // the gateway writes the first route's name
		}
		routes = append(routes, r)
	}
	return upstream.NewFallback(routes, metrics, log.With("model", m.ID))
}

// speaksResponses reports whether the upstream named name is configured to
// speak the Responses API.
func speaksResponses(upstreams []config.Upstream, name string) bool {
	for _, u := range upstreams {
		if u.Name == name {
			return u.Responses
		}
	}
	return false
}
