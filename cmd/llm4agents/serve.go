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
	"os"
	"strings"
	"time"

	"github.com/ethereum/go-ethereum/crypto"
	"github.com/ethereum/go-ethereum/ethclient"

	"github.com/llm4agents/llm4agents/internal/chain"
	"github.com/llm4agents/llm4agents/internal/chat"
	"github.com/llm4agents/llm4agents/internal/config"
	"github.com/llm4agents/llm4agents/internal/facilitator"
	"github.com/llm4agents/llm4agents/internal/gateway"
	"github.com/llm4agents/llm4agents/internal/pricing"
	"github.com/llm4agents/llm4agents/internal/store/sqlite"
	"github.com/llm4agents/llm4agents/internal/upstream"
	"github.com/llm4agents/llm4agents/x402"
)

// node is what the gateway's in-process facilitator needs from a chain: an
// *ethclient.Client for a real node, simulated.Client for the demo.
type node interface {
	facilitator.Backend
	chain.Backend
}

// gatewayParts are the running pieces behind a gateway, closed in reverse.
type gatewayParts struct {
	server  *gateway.Server
	closers []func()
}

func (g *gatewayParts) close() {
	for i := len(g.closers) - 1; i >= 0; i-- {
		g.closers[i]()
	}
}

// buildGateway wires a gateway from a validated config. backend and key serve
// the in-process facilitator; both are nil for a remote one.
func buildGateway(ctx context.Context, cfg *config.Config, backend node, key *ecdsa.PrivateKey, getenv func(string) string, log *slog.Logger) (_ *gatewayParts, err error) {
	g := &gatewayParts{}
	defer func() {
		if err != nil {
			g.close()
		}
	}()
	path, ok := cfg.Store.SQLitePath()
	if !ok {
		return nil, fmt.Errorf("store.dsn: only sqlite:// is supported for now")
	}
	db, err := sqlite.Open(ctx, path, log)
	if err != nil {
		return nil, err
	}
	g.closers = append(g.closers, func() { _ = db.Close() })

	asset, _ := cfg.Network.AssetAddress()
	var fac x402.Facilitator
	switch cfg.Facilitator.Mode {
	case config.ModeRemote:
		fac = facilitator.NewClient(cfg.Facilitator.URL, nil)
	default:
		chainID, err := cfg.Network.ChainID()
		if err != nil {
			return nil, err
		}
		maxFee, err := cfg.Facilitator.MaxFee()
		if err != nil {
			return nil, err
		}
		sender, err := chain.NewSender(backend, key, chainID, chain.SenderConfig{MaxFeePerGas: maxFee, PollInterval: 200 * time.Millisecond}, log)
		if err != nil {
			return nil, err
		}
		f, err := facilitator.New(facilitator.Config{
			Network: cfg.Network.ID, SettleTimeout: cfg.Facilitator.SettleTimeout,
			Assets: []facilitator.Asset{{Address: asset, Name: cfg.Network.AssetName, Version: cfg.Network.AssetVersion}},
		}, backend, sender, db, log)
		if err != nil {
			return nil, err
		}
		rec := f.StartReconciler(30 * time.Second)
		g.closers = append(g.closers, rec.Close)
		fac = f
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
	models := make([]gateway.Model, 0, len(cfg.Models))
	for _, m := range cfg.Models {
		price, err := m.Price.Parse()
		if err != nil {
			return nil, fmt.Errorf("model %s: %w", m.ID, err)
		}
		models = append(models, gateway.Model{
			ID: m.ID, UpstreamModel: m.UpstreamModel, Provider: providers[m.Upstream], Price: price,
			MaxOutputTokens: m.MaxOutputTokens, Encoding: m.Encoding,
		})
	}
	hostname, _ := os.Hostname()
	srv, err := gateway.New(gateway.Config{
		PublicURL: cfg.PublicURL, Network: cfg.Network.ID, Asset: asset.Hex(),
		AssetName: cfg.Network.AssetName, AssetVersion: cfg.Network.AssetVersion, Decimals: cfg.Network.Decimals,
		PayTo: cfg.Network.PayTo, MaxTimeoutSeconds: int64(cfg.Network.MaxTimeoutSeconds),
		MaxBodyBytes: cfg.Limits.MaxBodyBytes, UpstreamTimeout: cfg.Limits.UpstreamTimeout,
		SettleTimeout: cfg.Facilitator.SettleTimeout, MaxStreamDuration: cfg.Limits.MaxStreamDuration,
		Owner: fmt.Sprintf("%s/%d", hostname, os.Getpid()), Models: models,
	}, fac, db, log)
	if err != nil {
		return nil, err
	}
	g.server = srv
	return g, nil
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
		rpcURL, err := cfg.Network.RPC(e.getenv)
		if err != nil {
			return fmt.Errorf("serve: network: %w", err)
		}
		dialCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		client, err := ethclient.DialContext(dialCtx, rpcURL)
		if err != nil {
			return fmt.Errorf("serve: dial node: %w", err)
		}
		defer client.Close()
		id, err := client.ChainID(dialCtx)
		if err != nil {
			return fmt.Errorf("serve: read chain id: %w", err)
		}
		if want, _ := cfg.Network.ChainID(); want.Cmp(id) != 0 {
			return fmt.Errorf("serve: network.id %s does not match the node's chain id %s", cfg.Network.ID, id)
		}
		hexKey, err := cfg.Facilitator.Key(e.getenv)
		if err != nil {
			return fmt.Errorf("serve: facilitator key: %w", err)
		}
		if key, err = crypto.HexToECDSA(strings.TrimPrefix(hexKey, "0x")); err != nil {
			return errors.New("serve: the facilitator key is not a 32-byte hex private key")
		}
		backend = client
	}
	parts, err := buildGateway(ctx, cfg, backend, key, e.getenv, log)
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	defer parts.close()
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("serve: listen: %w", err)
	}
	log.Info("gateway listening", "addr", ln.Addr().String(), "public_url", cfg.PublicURL, "network", cfg.Network.ID, "models", len(cfg.Models))
	fmt.Fprintf(e.stdout, "gateway listening on http://%s\n", ln.Addr())
	return serve(ctx, ln, parts.server, cfg.Facilitator.SettleTimeout+cfg.Limits.UpstreamTimeout)
}

// readCapped reads a small file, refusing one larger than limit.
func readCapped(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path) // #nosec G304 -- the operator names the config file
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, limit)
	}
	return b, nil
}
