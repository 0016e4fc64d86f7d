package main

import (
	"context"
	"crypto/ecdsa"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/ethereum/go-ethereum/crypto"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/llm4agents/llm4agents/internal/chain"
	"github.com/llm4agents/llm4agents/internal/config"
	"github.com/llm4agents/llm4agents/internal/crashpoint"
	"github.com/llm4agents/llm4agents/internal/facilitator"
	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/x402/evm/exact"
	"github.com/llm4agents/llm4agents/x402/evm/upto"
)

// facilitatorKeyEnv names the environment variable that may hold the signer key.
const facilitatorKeyEnv = "LLM4AGENTS_FACILITATOR_KEY"

// assetFlags collects repeated --asset values: 0xTOKEN, or 0xTOKEN:NAME:VERSION to
// override the EIP-712 domain read from the token.
type assetFlags []string

func (a *assetFlags) String() string     { return strings.Join(*a, ",") }
func (a *assetFlags) Set(s string) error { *a = append(*a, s); return nil }

type facilitatorFlags struct {
	listen         string
	rpc            string
	network        string
	assets         assetFlags
	keyFile        string
	storePath      string
	maxFeeWei      string
	settleTimeout  time.Duration
	reconcileEvery time.Duration
	reorgWindow    time.Duration
	pollInterval   time.Duration // unset: config.DefaultPollInterval of the network
	schemes        string

	// Parsed from the flags above, so that every flag is checked before any I/O.
	assetList  []facilitator.Asset // Name and Version empty: read from the token
	maxFee     *big.Int
	schemeList []string
}

func parseFacilitatorFlags(args []string, e env) (*facilitatorFlags, error) {
	fs := flag.NewFlagSet("facilitator", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	var f facilitatorFlags
	fs.StringVar(&f.listen, "listen", "127.0.0.1:4022", "address to serve on")
	fs.StringVar(&f.rpc, "rpc", "", "JSON-RPC URL of the chain's node (required)")
	fs.StringVar(&f.network, "network", "", "CAIP-2 network to serve, eip155:<chain id> (required; must match the node)")
	fs.Var(&f.assets, "asset", "EIP-3009 token to settle, 0xTOKEN or 0xTOKEN:NAME:VERSION (repeatable; required)")
	fs.StringVar(&f.keyFile, "key-file", "", "file holding the signer's hex private key (or set "+facilitatorKeyEnv+")")
	fs.StringVar(&f.storePath, "store", "llm4agents-facilitator.db", "settlement records: a SQLite file path, or a DSN (sqlite://, postgres:// or redis://; one with a password goes in $"+facilitatorStoreEnv+")")
	fs.StringVar(&f.maxFeeWei, "max-fee-per-gas", "200000000000", "cap on the fee per gas of any settlement transaction, in wei")
	fs.DurationVar(&f.settleTimeout, "settle-timeout", facilitator.DefaultSettleTimeout, "how long /settle waits for a receipt before answering settlement_pending")
	fs.DurationVar(&f.reconcileEvery, "reconcile-every", 30*time.Second, "how often unresolved settlements are resolved from the chain")
	fs.DurationVar(&f.reorgWindow, "reorg-window", facilitator.DefaultReorgWindow, fmt.Sprintf("how long a settled payment is checked again for reorgs, up to %s", store.RecentRetention))
	fs.DurationVar(&f.pollInterval, "poll-interval", 0, fmt.Sprintf("how often a settlement's receipt is polled, %s to %s; it is also looked for right after the broadcast (default %s on eip155:1337 and eip155:31337, else %s)",
		config.MinPollInterval, config.MaxPollInterval, config.DefaultPollInterval("eip155:1337"), config.DefaultPollInterval("")))
	fs.StringVar(&f.schemes, "schemes", exact.Scheme, "x402 schemes to serve, comma-separated: exact, upto (upto needs Permit2 and the x402 upto proxy on the chain; llm4agents devnet places them on a dev node)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("facilitator: unexpected argument #%d (flags go before it; values are not echoed)", fs.NArg())
	}
	switch {
	case f.rpc == "":
		return nil, errors.New("facilitator: --rpc is required")
	case f.network == "":
		return nil, errors.New("facilitator: --network is required")
	case len(f.assets) == 0:
		return nil, errors.New("facilitator: at least one --asset is required")
	case f.settleTimeout <= 0:
		return nil, errors.New("facilitator: --settle-timeout must be positive")
	case f.reconcileEvery <= 0:
		return nil, errors.New("facilitator: --reconcile-every must be positive")
	case f.reorgWindow <= 0 || f.reorgWindow > store.RecentRetention:
		return nil, fmt.Errorf("facilitator: --reorg-window %s is not between 0 and %s", f.reorgWindow, store.RecentRetention)
	}
	pollSet := false
	fs.Visit(func(fl *flag.Flag) { pollSet = pollSet || fl.Name == "poll-interval" })
	if !pollSet {
		f.pollInterval = config.DefaultPollInterval(f.network)
	}
	if f.pollInterval < config.MinPollInterval || f.pollInterval > config.MaxPollInterval {
		return nil, fmt.Errorf("facilitator: --poll-interval %s is not between %s and %s", f.pollInterval, config.MinPollInterval, config.MaxPollInterval)
	}
	if _, err := exact.ChainID(f.network); err != nil {
		return nil, fmt.Errorf("facilitator: --network: %w", err)
	}
	for _, s := range f.assets {
		a, err := parseAsset(s)
		if err != nil {
			return nil, err
		}
		f.assetList = append(f.assetList, a)
	}
	var err error
	if f.maxFee, err = parseMaxFee(f.maxFeeWei); err != nil {
		return nil, err
	}
	if f.schemeList, err = parseSchemes(f.schemes); err != nil {
		return nil, err
	}
	return &f, nil
}

// parseSchemes reads --schemes: exact and upto, each at most once.
func parseSchemes(s string) ([]string, error) {
	var list []string
	for name := range strings.SplitSeq(s, ",") {
		name = strings.TrimSpace(name)
		switch {
		case name != exact.Scheme && name != upto.Scheme:
			return nil, fmt.Errorf("facilitator: --schemes: %q is not a scheme served here (%s, %s)", truncateFlag(name), exact.Scheme, upto.Scheme)
		case slices.Contains(list, name):
			return nil, fmt.Errorf("facilitator: --schemes lists %s twice", name)
		}
		list = append(list, name)
	}
	return list, nil
}

// truncateFlag bounds a flag value quoted back in an error.
func truncateFlag(s string) string {
	if len(s) > 32 {
		return s[:32] + "..."
	}
	return s
}

// loadKey reads the signer key from a file or the environment, never a flag
// value. Errors never repeat the key material.
func loadKey(path string, getenv func(string) string) (*ecdsa.PrivateKey, error) {
	var raw string
	var err error
	switch {
	case path != "":
		b, err := readCapped(path, config.MaxSecretBytes)
		if err != nil {
			return nil, fmt.Errorf("read key file: %w", err)
		}
		raw = string(b)
	case getenv(facilitatorKeyEnv) != "":
		if raw, err = config.ReadSecret("", facilitatorKeyEnv, getenv); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("no signer key: use --key-file or set %s", facilitatorKeyEnv)
	}
	return parseKey(raw, "signer")
}

// parseKey reads a hex private key, with or without 0x. Its error names the
// key by role and never repeats the input.
func parseKey(raw, role string) (*ecdsa.PrivateKey, error) {
	key, err := crypto.HexToECDSA(strings.TrimPrefix(strings.TrimSpace(raw), "0x"))
	if err != nil {
		return nil, fmt.Errorf("the %s key is not a 32-byte hex private key", role)
	}
	return key, nil
}

func parseMaxFee(s string) (*big.Int, error) {
	n, err := exact.ParseUint256(s)
	if err != nil || n.Sign() == 0 {
		return nil, fmt.Errorf("--max-fee-per-gas %q is not a positive integer of wei", s)
	}
	return n, nil
}

// parseAsset reads one --asset value, 0xTOKEN or 0xTOKEN:NAME:VERSION. Without
// an override the Asset's Name and Version are empty, for the start-up checks to
// read from the token (facilitatorSetup).
func parseAsset(s string) (facilitator.Asset, error) {
	parts := strings.SplitN(s, ":", 3)
	addr, err := exact.ParseAddress(parts[0])
	if err != nil {
		return facilitator.Asset{}, fmt.Errorf("--asset %q: %w", s, err)
	}
	a := facilitator.Asset{Address: addr}
	switch len(parts) {
	case 3:
		a.Name, a.Version = parts[1], parts[2]
		if a.Name == "" || a.Version == "" {
			return facilitator.Asset{}, fmt.Errorf("--asset %q: empty name or version", s)
		}
	case 2:
		return facilitator.Asset{}, fmt.Errorf("--asset %q: give both NAME and VERSION, or neither", s)
	}
	return a, nil
}

func runFacilitator(ctx context.Context, args []string, e env) error {
	f, err := parseFacilitatorFlags(args, e)
	if err != nil {
		return err
	}
	if err := crashpoint.Validate(); err != nil {
		return fmt.Errorf("facilitator: %w", err)
	}
	log := slog.New(slog.NewTextHandler(e.stderr, nil))
	key, err := loadKey(f.keyFile, e.getenv)
	if err != nil {
		return err
	}
	dialCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	client, err := dialNode(dialCtx, f.rpc)
	if err != nil {
		return fmt.Errorf("dial node: %w", redactURL(err, f.rpc))
	}
	defer client.Close()
	// Before listening: the node's chain, each token's EIP-712 domain (read
	// from it unless --asset gives one) and the signer's gas.
	checked, err := checkChain(ctx, client, facilitatorSetup(f, key), f.rpc, log)
	if err != nil {
		return err
	}
	assets := facilitatorAssets(checked)
	chainID, _ := exact.ChainID(f.network) // the node's, checked
	db, err := openStore(ctx, f.store(e.getenv), e.getenv, log)
	if err != nil {
		return err
	}
	defer func() { _ = db.Close() }() // a write is acknowledged only once committed: a close error loses none
	sender, err := chain.NewSender(client, key, chainID, chain.SenderConfig{
		MaxFeePerGas: f.maxFee, PollInterval: f.pollInterval, ReplaceAfter: replaceAfter(f.settleTimeout),
	}, log)
	if err != nil {
		return err
	}
	fac, err := facilitator.New(facilitator.Config{Network: f.network, Assets: assets, SettleTimeout: f.settleTimeout, ReorgWindow: f.reorgWindow, Schemes: f.schemeList}, client, sender, db, log)
	if err != nil {
		return err
	}
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", f.listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	rec := fac.StartReconciler(f.reconcileEvery)
	defer rec.Close()
	for _, a := range assets {
		log.Info("serving asset", "asset", a.Address.Hex(), "name", a.Name, "version", a.Version)
	}
	log.Info("facilitator listening", "addr", ln.Addr().String(), "network", f.network, "signer", sender.Address().Hex())
	printf(e.stdout, "facilitator listening on http://%s\n", ln.Addr())
	reg := prometheus.NewRegistry()
	if err := signerBalanceGauge(reg, sender, f.network); err != nil {
		return err
	}
	if err := fac.RegisterMetrics(reg); err != nil {
		return err
	}
	return serve(ctx, ln, withMetrics(facilitator.NewHandler(fac, log), reg), f.settleTimeout+10*time.Second)
}

// serve runs h until ctx ends, then lets in-flight requests (settles waiting for
// a receipt) finish within grace.
func serve(ctx context.Context, ln net.Listener, h http.Handler, grace time.Duration) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutCtx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if err := srv.Shutdown(shutCtx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// replaceAfter is how long a settlement transaction may sit unmined before the
// sender re-broadcasts or replaces it: well inside one settle wait, so a stuck
// transaction is repaired while its caller still waits for it.
func replaceAfter(settleTimeout time.Duration) time.Duration {
	return max(settleTimeout/3, 2*time.Second)
}

// facilitatorStoreEnv holds the facilitator's store DSN when it carries a
// password; it overrides --store.
const facilitatorStoreEnv = "LLM4AGENTS_FACILITATOR_STORE_DSN"

// store is the store the environment or --store names: a plain path is a
// SQLite file, as before DSNs were accepted.
func (f *facilitatorFlags) store(getenv func(string) string) config.Store {
	if getenv(facilitatorStoreEnv) != "" {
		return config.Store{DSNEnv: facilitatorStoreEnv}
	}
	if strings.Contains(f.storePath, "://") {
		return config.Store{DSN: f.storePath}
	}
	return config.Store{DSN: "sqlite://" + f.storePath}
}
