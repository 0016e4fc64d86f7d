package config

import (
	"errors"
	"fmt"
	"math/big"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/ethereum/go-ethereum/crypto"

	"github.com/llm4agents/llm4agents/internal/store"
)

// Credits turns on prepaid credits (docs/DESIGN.md D16-D18): top-ups
// through an x402 payment, API keys drawing on the payer's balance, and
// signed receipts. They need a store that holds the ledger (SQLite or
// PostgreSQL; Redis does not) and a chain to read top-up settlements from.
type Credits struct {
	// Enabled turns the credit routes on. Every other key is read only when
	// it is true.
	Enabled bool `yaml:"enabled"`
	// ReceiptKeyFile or ReceiptKeyEnv is where the key that signs receipts
	// (EIP-712, D18) is: exactly one of them, a 32-byte hex
	// private key. Use a key of its own, never the facilitator's: it holds
	// no funds and signs nothing on chain.
	ReceiptKeyFile string `yaml:"receipt_key_file"`
	ReceiptKeyEnv  string `yaml:"receipt_key_env"`
	// ReceiptChainID is the chainId of the receipts' EIP-712 domain and of
	// sign-in messages. Default: the payment network's chain id.
	ReceiptChainID uint64 `yaml:"receipt_chain_id"`
	// TopUpMin and TopUpMax bound a top-up in whole atomic units of the
	// asset, written as prices are (decimal strings; '_' may separate digit
	// groups). Defaults: a hundredth of a token and a thousand tokens (0.01
	// and 1000 USDC), the maximum capped at the ledger's bound of 10^15.
	TopUpMin string `yaml:"topup_min"`
	TopUpMax string `yaml:"topup_max"`
	// HoldTTL is how long the hold of a credit-paid call lasts before the
	// sweep releases it: longer than the slowest call, a stream included.
	// Default DefaultHoldTTL.
	HoldTTL time.Duration `yaml:"hold_ttl"`
	// SignInOrigin is the origin (scheme://host[:port]) that wallet sign-in
	// messages must name (EIP-4361). Default: the origin of public_url.
	SignInOrigin string `yaml:"sign_in_origin"`
	// Confirmations is how many blocks a top-up's settlement needs before it
	// is credited, its own block included (D17). Default 1.
	Confirmations uint64 `yaml:"confirmations"`
	// Durability says when a credit call's charge is written (D28):
	// DurabilityLeased (the default) admits and charges calls against this
	// replica's lease of the key in memory and writes the charges, with
	// their receipts, in batches at least every FlushInterval; a replica
	// killed between two batches loses those calls' charges (free calls,
	// the operator's loss; never a double charge). DurabilityPerCall writes
	// the hold and the capture of every call before it answers.
	Durability string `yaml:"durability"`
	// FlushInterval is the longest a leased call's charge waits to be
	// written (a batch of 256 is written at once). Default 20ms.
	FlushInterval time.Duration `yaml:"flush_interval"`
	// LeaseWindow is how long a lease admits calls, and the staleness of a
	// receipt's balanceAfter. A lowered cap or a revoked key retires the
	// lease at the next call that reads the changed key (KeyCache), not at
	// the window's end. Default 5s.
	LeaseWindow time.Duration `yaml:"lease_window"`
	// LeaseMax bounds one lease, in atomic units written as prices are:
	// a lease holds about a second of its key's spend, at most this (a call
	// whose maximum cost is larger gets a lease of its own size). Default
	// one token (1 USDC).
	LeaseMax string `yaml:"lease_max"`
	// KeyCache keeps each API key a replica looked up for that long (at
	// most 1s), so that a call costs no store read: a key revoked or
	// changed through another replica binds here when the store tells of
	// it, and within KeyCache at the latest (through this one, at once).
	// A pointer, so that an explicit 0 (every call reads its key) is told
	// from an absent key. Default DefaultKeyCache.
	KeyCache *time.Duration `yaml:"key_cache"`
}

// Durability modes of Credits.Durability.
const (
	DurabilityLeased  = "leased"
	DurabilityPerCall = "per_call"
)

// Defaults and bounds of Credits.
const (
	DefaultHoldTTL       = 15 * time.Minute
	DefaultConfirmations = 1
	DefaultFlushInterval = 20 * time.Millisecond
	// DefaultKeyCache is the longest a change to a key may take to bind on
	// a replica that was not told of it: the one second within which a
	// revocation must bind everywhere.
	DefaultKeyCache    = time.Second
	DefaultLeaseWindow = 5 * time.Second
	// MaxConfirmations bounds Credits.Confirmations: a deeper wait belongs in
	// the chain's finality, not in a buyer's retry.
	MaxConfirmations = 1000
)

// setCreditDefaults fills Credits when enabled; the receipt chain id and the
// sign-in origin are derived when asked (ReceiptChainID, SignInOrigin), since
// public_url may change once the port is bound.
func (c *Config) setCreditDefaults() {
	cr := &c.Credits
	if !cr.Enabled {
		return
	}
	if cr.HoldTTL == 0 {
		cr.HoldTTL = DefaultHoldTTL
	}
	if cr.Confirmations == 0 {
		cr.Confirmations = DefaultConfirmations
	}
	if cr.Durability == "" {
		cr.Durability = DurabilityLeased
	}
	if cr.FlushInterval == 0 {
		cr.FlushInterval = DefaultFlushInterval
	}
	if cr.LeaseWindow == 0 {
		cr.LeaseWindow = DefaultLeaseWindow
	}
	if cr.KeyCache == nil {
		cr.KeyCache = new(DefaultKeyCache)
	}
	if c.Network.Decimals > MaxDecimals {
		return // Validate reports it; the defaults below would be huge
	}
	unit := new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(c.Network.Decimals)), nil)
	if cr.LeaseMax == "" {
		cr.LeaseMax = unit.String()
	}
	if cr.TopUpMin == "" {
		cr.TopUpMin = new(big.Int).Quo(unit, big.NewInt(100)).String()
		if cr.TopUpMin == "0" {
			cr.TopUpMin = "1"
		}
	}
	if cr.TopUpMax == "" {
		m := new(big.Int).Mul(unit, big.NewInt(1000))
		if m.Cmp(big.NewInt(store.MaxAmount)) > 0 {
			m.SetInt64(store.MaxAmount)
		}
		cr.TopUpMax = m.String()
	}
}

func (c *Config) validateCredits(p *problems) {
	cr := &c.Credits
	if !cr.Enabled {
		return
	}
	if !c.demo {
		switch {
		case cr.ReceiptKeyFile == "" && cr.ReceiptKeyEnv == "" && c.Receipts.KeyFile == "" && c.Receipts.KeyEnv == "":
			p.add("credits.receipt_key_file", "is required with credits: the receipt signing key's file (or set receipt_key_env, or receipts.key_file)")
		case cr.ReceiptKeyFile != "" && cr.ReceiptKeyEnv != "":
			p.add("credits.receipt_key_env", "set receipt_key_file or receipt_key_env, not both")
		case cr.ReceiptKeyEnv != "":
			checkEnvName(p, "credits.receipt_key_env", cr.ReceiptKeyEnv)
		}
		if c.Facilitator.Mode == ModeRemote && c.Network.RPCURL == "" && c.Network.RPCURLEnv == "" {
			p.add("network.rpc_url", "is required with credits (or set network.rpc_url_env): top-ups are credited from the settlement's receipt on chain")
		}
	}
	if backend, msg := checkDSN(c.Store.DSN); c.Store.DSN != "" && msg == "" && backend == StoreRedis {
		p.add("credits.enabled", "needs a store that holds the ledger (sqlite:// or postgres://); Redis does not")
	}
	lo := checkTopUp(p, "credits.topup_min", cr.TopUpMin, c.Network.Decimals)
	hi := checkTopUp(p, "credits.topup_max", cr.TopUpMax, c.Network.Decimals)
	if lo != nil && hi != nil && lo.Cmp(hi) > 0 {
		p.add("credits.topup_min", "%s is more than credits.topup_max %s", lo, hi)
	}
	longest := c.Limits.UpstreamTimeout
	for _, u := range c.Upstreams {
		longest = max(longest, u.Timeout)
	}
	switch minHold := longest + c.Limits.MaxStreamDuration + MinClaimLeaseMargin; {
	case cr.HoldTTL < time.Second || cr.HoldTTL > store.MaxHoldTTL:
		p.add("credits.hold_ttl", "%s is not between 1s and %s", cr.HoldTTL, store.MaxHoldTTL)
	case cr.HoldTTL < minHold:
		p.add("credits.hold_ttl", "%s is shorter than the longest upstream timeout + limits.max_stream_duration + %s (%s): the sweep could release the hold of a call still running",
			cr.HoldTTL, MinClaimLeaseMargin, minHold)
	}
	if cr.SignInOrigin != "" {
		if msg := checkOrigin(cr.SignInOrigin); msg != "" {
			p.add("credits.sign_in_origin", "%s", msg)
		}
	}
	if cr.Confirmations < 1 || cr.Confirmations > MaxConfirmations {
		p.add("credits.confirmations", "%d is not between 1 and %d", cr.Confirmations, MaxConfirmations)
	}
	switch cr.Durability {
	case DurabilityLeased, DurabilityPerCall:
	default:
		p.add("credits.durability", "%q is not %s or %s", truncate(cr.Durability), DurabilityLeased, DurabilityPerCall)
	}
	if cr.FlushInterval < time.Millisecond || cr.FlushInterval > time.Second {
		p.add("credits.flush_interval", "%s is not between 1ms and 1s", cr.FlushInterval)
	}
	if cr.LeaseWindow < 100*time.Millisecond || cr.LeaseWindow > time.Minute {
		p.add("credits.lease_window", "%s is not between 100ms and 1m", cr.LeaseWindow)
	}
	if _, err := cr.LeaseMaxAmount(); err != nil {
		p.add("credits.lease_max", "%q: %v", truncate(cr.LeaseMax), err)
	}
	if d := cr.KeyCacheTTL(); d < 0 || d > time.Second {
		p.add("credits.key_cache", "%s is not between 0 (every call reads its key) and 1s", d)
	}
}

// KeyCacheTTL returns KeyCache, 0 (no cache) when unset and defaults were
// not applied.
func (cr *Credits) KeyCacheTTL() time.Duration {
	if cr.KeyCache == nil {
		return 0
	}
	return *cr.KeyCache
}

// LeaseMaxAmount returns the validated LeaseMax in atomic units.
func (cr *Credits) LeaseMaxAmount() (int64, error) {
	n, err := parseAtomic(cr.LeaseMax)
	if err != nil {
		return 0, err
	}
	if n < 1 || n > uint64(store.MaxAmount) {
		return 0, fmt.Errorf("not between 1 and %d atomic units", store.MaxAmount)
	}
	return int64(n), nil
}

// checkTopUp validates a top-up bound and returns it (nil on error).
func checkTopUp(p *problems, path, s string, decimals uint8) *big.Int {
	n, err := parseAtomic(s)
	switch {
	case err == nil && n == 0:
		p.add(path, "must be at least 1 atomic unit")
	case err == nil && n > uint64(store.MaxAmount):
		p.add(path, "%q is more than the ledger's bound of %d atomic units", truncate(s), store.MaxAmount)
	case err == nil:
		return new(big.Int).SetUint64(n)
	case errors.Is(err, strconv.ErrRange):
		p.add(path, "%q is more than the ledger's bound of %d atomic units", truncate(s), store.MaxAmount)
	default:
		p.add(path, "%q must be a whole, positive number of atomic units of the asset, such as \"1000000\" (1.00 with %d decimals)", truncate(s), decimals)
	}
	return nil
}

// checkOrigin returns what is wrong with an http(s) origin, or "".
func checkOrigin(s string) string {
	if msg := checkURL(s, "http", "https"); msg != "" {
		return msg
	}
	u, _ := url.Parse(s)
	if (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || strings.Contains(s, "#") {
		return "must be an origin, scheme://host[:port], with no path, query or fragment"
	}
	return ""
}

// TopUpBounds returns Credits.TopUpMin and TopUpMax in atomic units.
func (cr Credits) TopUpBounds() (lo, hi *big.Int, err error) {
	a, err := parseAtomic(cr.TopUpMin)
	if err != nil {
		return nil, nil, fmt.Errorf("credits.topup_min %q: %w", truncate(cr.TopUpMin), err)
	}
	b, err := parseAtomic(cr.TopUpMax)
	if err != nil {
		return nil, nil, fmt.Errorf("credits.topup_max %q: %w", truncate(cr.TopUpMax), err)
	}
	return new(big.Int).SetUint64(a), new(big.Int).SetUint64(b), nil
}

// ReceiptChainID returns the receipts' chain id (receipts.chain_id or
// credits.receipt_chain_id), or the payment network's chain id when unset.
func (c *Config) ReceiptChainID() (*big.Int, error) {
	if id := c.receiptChainID(); id != nil {
		return id, nil
	}
	return c.Network.ChainID()
}

// SignInOrigin returns the sign-in origin (receipts.sign_in_origin or
// credits.sign_in_origin), or the origin of PublicURL when unset.
func (c *Config) SignInOrigin() string {
	if o := c.signInOrigin(); o != "" {
		return strings.TrimRight(o, "/")
	}
	u, err := url.Parse(c.PublicURL)
	if err != nil {
		return c.PublicURL
	}
	return (&url.URL{Scheme: u.Scheme, Host: u.Host}).String()
}

// ReceiptKey returns the receipt signing key as hex, from its file or
// variable (receipts.key_file or credits.receipt_key_file, or their _env).
// The demo, which names neither, gets a new random key: its receipts are
// verifiable against the address it publishes while it runs.
func (c *Config) ReceiptKey(getenv func(string) string) (string, error) {
	file, env := c.receiptKeySource()
	if c.demo && file == "" && env == "" {
		k, err := crypto.GenerateKey()
		if err != nil {
			return "", fmt.Errorf("generate a receipt key: %w", err)
		}
		return fmt.Sprintf("%x", crypto.FromECDSA(k)), nil
	}
	return ReadSecret(file, env, getenv)
}
