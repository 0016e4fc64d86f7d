// Package config is the gateway's configuration: a plain Config struct that
// mirrors the YAML file key for key (docs/CONFIG.md), its defaults, and
// Validate, which says what is wrong and where (a YAML path such as
// models[2].price.input).
//
// Parse decodes a YAML document strictly (an unknown or duplicate key is an
// error), fills the defaults and validates; reading the file is the command's
// job. The Config holds the names of environment variables and the paths of
// files that hold secrets, never a secret itself (docs/DESIGN.md D23): ReadSecret
// and the accessors built on it read them when the caller asks.
package config

import (
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/netip"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/ethereum/go-ethereum/common"

	"github.com/llm4agents/llm4agents/internal/embeddings"
	"github.com/llm4agents/llm4agents/internal/pricing"
	"github.com/llm4agents/llm4agents/internal/upstream"
	"github.com/llm4agents/llm4agents/x402/evm/exact"
)

// Config is the whole configuration of `llm4agents serve`. Its zero value is
// not valid; Parse and Demo return one with the defaults filled in.
type Config struct {
	// Listen is the address the gateway serves on. Default DefaultListen.
	Listen string `yaml:"listen"`
	// PublicURL is the origin (and optional path prefix) clients reach the
	// gateway at; the 402's resource URL is PublicURL + the route. Default
	// http://<Listen>, with 127.0.0.1 for an unspecified host. No trailing slash.
	PublicURL string  `yaml:"public_url"`
	Network   Network `yaml:"network"`
	// Networks are further ways to pay, offered after Network in every
	// call's 402 (networks.go).
	Networks    []OtherNetwork `yaml:"networks,omitempty"`
	Facilitator Facilitator    `yaml:"facilitator"`
	Store       Store          `yaml:"store"`
	Limits      Limits         `yaml:"limits"`
	Upstreams   []Upstream     `yaml:"upstreams"`
	Models      []Model        `yaml:"models"`
	// Pricing sets the price of models that have none of their own from
	// their provider's cost (markup.go).
	Pricing Pricing `yaml:"pricing"`
	// Credits turns on prepaid credits (credits.go); off by default.
	Credits Credits `yaml:"credits"`
	// Receipts turns on signed receipts without credits (receipts.go); off
	// by default, on with credits.
	Receipts Receipts `yaml:"receipts"`
	// Log turns on the public receipt log (receiptlog.go); off by default.
	Log ReceiptLog `yaml:"log"`
	// Dashboard is the web dashboard (dashboard.go); on by default.
	Dashboard Dashboard `yaml:"dashboard"`

	// demo marks the embedded demo configuration, whose chain and facilitator
	// signer are in-process: it needs no RPC URL and no key source.
	demo bool
}

// Network is the payment network and asset a 402 offers.
type Network struct {
	// ID is the CAIP-2 network, eip155:<chain id> (eip155:8453 is Base).
	ID string `yaml:"id"`
	// RPCURL is the node's JSON-RPC URL, or RPCURLEnv names the environment
	// variable that holds it (use that when the URL carries an API key). The
	// in-process facilitator needs one of them.
	RPCURL    string `yaml:"rpc_url"`
	RPCURLEnv string `yaml:"rpc_url_env"`
	// Asset is the EIP-3009 token contract; AssetName and AssetVersion are its
	// EIP-712 domain name and version, sent in the 402's extra.
	Asset        string `yaml:"asset"`
	AssetName    string `yaml:"asset_name"`
	AssetVersion string `yaml:"asset_version"`
	// Decimals is the asset's decimals (6 for USDC). Required in a file: a
	// wrong value misprices every call by powers of ten.
	Decimals uint8 `yaml:"decimals"`
	// PayTo receives the payments.
	PayTo string `yaml:"pay_to"`
	// MaxTimeoutSeconds is the 402's maxTimeoutSeconds: how long a payment the
	// buyer signs may stay valid. Default DefaultMaxTimeoutSeconds.
	MaxTimeoutSeconds int `yaml:"max_timeout_seconds"`
	// Schemes are the x402 schemes a call's 402 offers: SchemeExact (pay the
	// quote) and, beside it, SchemeUpto (authorize the quote, pay for the
	// tokens used; Permit2). Default [exact]. exact is always among them:
	// top-ups pay with it, and so do streams under UptoExactOnly.
	Schemes []string `yaml:"schemes"`
	// Upto tunes the upto scheme, when Schemes has it.
	Upto Upto `yaml:"upto"`
}

// Upto tunes the upto scheme (D27).
type Upto struct {
	// MinCharge is the least an upto call settles for, in atomic units of the
	// asset, as a decimal string: every settlement costs the seller gas.
	// Default one cent of the asset ("10000" for USDC); "0" turns it off.
	MinCharge string `yaml:"min_charge"`
	// Streaming is how a streamed call pays with upto, whose amount is only
	// known at the end: UptoDeliverThenSettle (default: the stream is
	// delivered, then settled; a failed settlement is the seller's loss,
	// counted) or UptoExactOnly (upto is not offered for streams).
	Streaming string `yaml:"streaming"`
}

// The x402 schemes a 402 may offer (Network.Schemes).
const (
	SchemeExact = "exact"
	SchemeUpto  = "upto"
)

// Upto streaming policies (Upto.Streaming).
const (
	UptoDeliverThenSettle = "deliver_then_settle"
	UptoExactOnly         = "exact_only"
)

// Offers reports whether the 402 offers scheme.
func (n Network) Offers(scheme string) bool { return slices.Contains(n.Schemes, scheme) }

// MinChargeAmount returns MinCharge parsed.
func (u Upto) MinChargeAmount() (*big.Int, error) {
	v, ok := new(big.Int).SetString(strings.ReplaceAll(u.MinCharge, "_", ""), 10)
	if !ok || v.Sign() < 0 || v.BitLen() > 256 || !priceRE.MatchString(u.MinCharge) {
		return nil, fmt.Errorf("upto.min_charge %q is not a whole, non-negative number of atomic units", truncate(u.MinCharge))
	}
	return v, nil
}

// Facilitator says who verifies and settles payments.
type Facilitator struct {
	// Mode is ModeInProcess (default) or ModeRemote.
	Mode string `yaml:"mode"`
	// URL is the remote facilitator's base URL (ModeRemote only).
	URL string `yaml:"url"`
	// KeyFile or KeyEnv is where the in-process facilitator's signer key is:
	// exactly one of them in ModeInProcess, neither in ModeRemote.
	KeyFile string `yaml:"key_file"`
	KeyEnv  string `yaml:"key_env"`
	// MaxFeePerGas caps the fee per gas of a settlement transaction, in wei,
	// as a decimal string (D19). Default DefaultMaxFeePerGas.
	MaxFeePerGas string `yaml:"max_fee_per_gas"`
	// SettleTimeout is how long a request waits for its settlement before the
	// answer is settlement_pending (D3). Default DefaultSettleTimeout.
	SettleTimeout time.Duration `yaml:"settle_timeout"`
	// ReconcileInterval is how often the in-process facilitator resolves
	// settlements left unresolved (a crash, a pending answer) from the chain;
	// it also runs once at start. Default DefaultReconcileInterval.
	ReconcileInterval time.Duration `yaml:"reconcile_interval"`
	// PollInterval is how often the in-process facilitator asks the node for
	// a settlement's receipt (it also looks right after the broadcast, and a
	// few times sooner within the first interval). From MinPollInterval to
	// MaxPollInterval. Default DefaultPollInterval(Network.ID).
	PollInterval time.Duration `yaml:"poll_interval"`
	// ReorgWindow is how long after its settlement the in-process
	// facilitator's reconciler re-reads a settled payment's transaction for
	// reorgs (D17); up to MaxReorgWindow. Default
	// DefaultReorgWindow.
	ReorgWindow time.Duration `yaml:"reorg_window"`
}

// Store says where claims and settlement records live: one SQLite file for
// one process, or a PostgreSQL or Redis server that several replicas share.
type Store struct {
	// DSN is sqlite://PATH (sqlite:///abs/path.db or sqlite://relative.db),
	// postgres://USER@HOST:PORT/DB?... (or postgresql://), or
	// redis://HOST:PORT/DB (rediss:// for TLS). A DSN in the file carries no
	// password: put one that does in an environment variable and name it in
	// DSNEnv. Exactly one of DSN and DSNEnv.
	DSN    string `yaml:"dsn"`
	DSNEnv string `yaml:"dsn_env"`
}

// Store backends, by DSN scheme.
const (
	StoreSQLite   = "sqlite"
	StorePostgres = "postgres"
	StoreRedis    = "redis"
)

// Limits bound requests.
type Limits struct {
	// MaxBodyBytes bounds a request body. Default DefaultMaxBodyBytes.
	MaxBodyBytes int64 `yaml:"max_body_bytes"`
	// UpstreamTimeout is the default Upstream.Timeout. Default
	// DefaultUpstreamTimeout.
	UpstreamTimeout time.Duration `yaml:"upstream_timeout"`
	// MaxStreamDuration bounds how long a stream is read after its settlement
	// (D2). Default DefaultMaxStreamDuration.
	MaxStreamDuration time.Duration `yaml:"max_stream_duration"`
	// ClaimLease is how long the claim on a payment blocks its authorization
	// when the replica holding it dies mid-request; it must outlast the
	// slowest request: at least the longest upstream timeout + the settle
	// timeout + MinClaimLeaseMargin. Default: the larger of 5 minutes and
	// that minimum.
	ClaimLease time.Duration `yaml:"claim_lease"`
	// RecoveryTTL is how long a paid answer may be replayed to its buyer
	// after settlement, when the response was lost (D14, D15); 1s to 24h.
	// Default DefaultRecoveryTTL.
	RecoveryTTL time.Duration `yaml:"recovery_ttl"`
	// RecoveryReplays is how many replays one paid answer allows, 1 to
	// MaxRecoveryReplays. Default DefaultRecoveryReplays.
	RecoveryReplays int `yaml:"recovery_replays"`
	// UnpaidPerMinute is how many requests without a payment or an API key
	// one client address may make per minute on the paid routes, sustained,
	// 0 to MaxUnpaidPerMinute; 0 turns the limit off. A pointer, so that an
	// explicit 0 is told from an absent key. Default DefaultUnpaidPerMinute.
	UnpaidPerMinute *int `yaml:"unpaid_per_minute"`
	// UnpaidBurst is how many of them it may make at once after being idle,
	// 1 to MaxUnpaidBurst. Default DefaultUnpaidBurst.
	UnpaidBurst int `yaml:"unpaid_burst"`
	// TrustedProxies are the peers, IP addresses or CIDR prefixes, whose
	// X-Forwarded-For and X-Real-IP name the client; from any other peer
	// those headers are ignored. Empty: the client is the TCP peer.
	TrustedProxies []string `yaml:"trusted_proxies,omitempty"`
}

// UnpaidRate returns UnpaidPerMinute, 0 (off) when unset and defaults were
// not filled.
func (l *Limits) UnpaidRate() int {
	if l.UnpaidPerMinute == nil {
		return 0
	}
	return *l.UnpaidPerMinute
}

// TrustedProxyPrefixes returns TrustedProxies parsed, an address as its
// one-address prefix. Entries Validate refuses are left out.
func (l *Limits) TrustedProxyPrefixes() []netip.Prefix {
	var out []netip.Prefix
	for _, s := range l.TrustedProxies {
		if p, err := parseProxy(s); err == nil {
			out = append(out, p)
		}
	}
	return out
}

// parseProxy parses a trusted_proxies entry: an IP address or a CIDR
// prefix, without a zone, narrower than the whole address space.
func parseProxy(s string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(s)
	if err != nil {
		a, aerr := netip.ParseAddr(s)
		if aerr != nil {
			return netip.Prefix{}, errors.New("is neither an IP address nor a CIDR prefix such as 10.0.0.0/8")
		}
		if a.Zone() != "" {
			return netip.Prefix{}, errors.New("has a zone: name the address without %zone")
		}
		p = netip.PrefixFrom(a, a.BitLen())
	}
	if p.Bits() == 0 {
		return netip.Prefix{}, errors.New("trusts every peer: any client could name any address and take another's limit, or none")
	}
	return p.Masked(), nil
}

// Upstream is a provider the gateway forwards to.
type Upstream struct {
	// Name is what models refer to; unique.
	Name string `yaml:"name"`
	// Type is UpstreamOpenAI (default: any OpenAI-compatible API) or
	// UpstreamDemo (the built-in deterministic demo model).
	Type string `yaml:"type"`
	// BaseURL is the API's base, such as https://api.openai.com/v1 (openai
	// only, required there).
	BaseURL string `yaml:"base_url"`
	// APIKeyEnv or APIKeyFile is where the upstream's API key is: at most one
	// (none for a local server that wants no key).
	APIKeyEnv  string `yaml:"api_key_env"`
	APIKeyFile string `yaml:"api_key_file"`
	// Timeout bounds a call to this upstream. Default Limits.UpstreamTimeout.
	// For a model with fallbacks, keep it below Limits.UpstreamTimeout, which
	// bounds every attempt together: a timed-out attempt then leaves time for
	// the next provider.
	Timeout time.Duration `yaml:"timeout"`
	// FailuresToOpen is how many failures in a row (unreachable, timed out,
	// 5xx, a bad answer) open this upstream's circuit: models with fallbacks
	// then try it last, for OpenFor. Defaults upstream.DefaultFailuresToOpen
	// and upstream.DefaultOpenFor.
	FailuresToOpen int           `yaml:"failures_to_open"`
	OpenFor        time.Duration `yaml:"open_for"`
	// Prices is what this provider charges, by its name for a model
	// (upstream_model), in atomic units per million tokens: a model served
	// here without a price of its own sells at that cost plus
	// Pricing.Markup.
	Prices map[string]Price `yaml:"prices,omitempty"`
	// Responses says the upstream also speaks the OpenAI Responses API
	// (POST {base_url}/responses): the gateway passes /v1/responses calls
	// of its models through to it instead of translating them into chat
	// completions (upstream_api.go). Default false: chat completions only.
	Responses bool `yaml:"responses,omitempty"`
}

// Model is a model the gateway sells. How its calls settle is not configured
// (the key settle was removed): a non-streamed call settles before its answer
// is released (D1), a streamed one after the first upstream chunk
// with content and before the first byte reaches the client (D2).
type Model struct {
	// ID is the public model name clients send; unique.
	ID string `yaml:"id"`
	// Upstream names the Upstream that serves it.
	Upstream string `yaml:"upstream"`
	// UpstreamModel is the upstream's name for it. Default ID.
	UpstreamModel string `yaml:"upstream_model"`
	// Fallbacks are the providers tried, in order, when Upstream fails
	// before the first byte of its answer (unreachable, timed out, 5xx, a
	// bad answer, 429, 404). The buyer pays the model's price once, for the
	// answer it gets, whichever provider gave it.
	Fallbacks []Fallback `yaml:"fallbacks,omitempty"`
	// Kind is what the model is sold for: KindChat (POST
	// /v1/chat/completions, the default) or KindEmbeddings (POST
	// /v1/embeddings, priced per input token: no output price, no output
	// cap). A model is sold on its kind's route only.
	Kind string `yaml:"kind"`
	// Price is in atomic units of the asset per million tokens.
	Price Price `yaml:"price"`
	// MaxOutputTokens is the output cap injected upstream when the client
	// gives none, and the most a client may ask for (D13). Default
	// DefaultMaxOutputTokens for a chat model; an embeddings model has none.
	MaxOutputTokens int64 `yaml:"max_output_tokens"`
	// MaxInputTokens bounds each input of an embeddings call (a text or a
	// token array), as the upstream model does: an input longer than this is
	// refused before any quote, so nobody pays for a call the upstream would
	// refuse. Default DefaultMaxInputTokens for an embeddings model
	// (OpenAI's text-embedding models); a chat model has none.
	MaxInputTokens int64 `yaml:"max_input_tokens"`
	// Encoding is the tiktoken encoding prompts are counted with. Default
	// pricing.EncodingFor(UpstreamModel).
	Encoding string `yaml:"encoding"`
	// PaymentIdentifier is PaymentIDOptional (default: the official clients
	// send no id) or PaymentIDRequired: whether a payment for this model must
	// carry the x402 payment-identifier extension (D14), specified in
	// https://github.com/x402-foundation/x402/blob/main/specs/extensions/payment_identifier.md.
	PaymentIdentifier string `yaml:"payment_identifier"`
}

// Fallback is one more provider of a model.
type Fallback struct {
	// Upstream names the Upstream; each at most once per model.
	Upstream string `yaml:"upstream"`
	// UpstreamModel is that upstream's name for the model. Default the
	// model's UpstreamModel.
	UpstreamModel string `yaml:"upstream_model"`
}

// Price is a model's price as written in the file: whole atomic units of the
// asset per million tokens, as decimal strings (a YAML integer is read as its
// digits; '_' may separate digit groups). A decimal such as 0.15 is refused:
// an atomic unit is the smallest amount there is. Use Parse to get a
// pricing.Price.
type Price struct {
	Input  string `yaml:"input"`
	Output string `yaml:"output"`
}

// Defaults.
const (
	DefaultListen            = "127.0.0.1:8080"
	DefaultMaxTimeoutSeconds = 300
	DefaultMaxFeePerGas      = "200000000000" // 200 gwei
	DefaultSettleTimeout     = 30 * time.Second
	DefaultMaxBodyBytes      = 1 << 20
	DefaultUpstreamTimeout   = 120 * time.Second
	DefaultMaxStreamDuration = 10 * time.Minute
	DefaultMaxOutputTokens   = 4096
	// DefaultMaxInputTokens is OpenAI's limit on one input of its
	// text-embedding models.
	DefaultMaxInputTokens    = 8192
	DefaultReconcileInterval = 30 * time.Second
	// MinClaimLeaseMargin is what Limits.ClaimLease must leave beyond the
	// longest upstream timeout plus the settle timeout.
	MinClaimLeaseMargin = 10 * time.Second
	// DefaultRecoveryTTL and DefaultRecoveryReplays are short on purpose: a
	// replayable answer is exposure: whoever proves control of the payment
	// gets the answer again.
	DefaultRecoveryTTL     = time.Hour
	DefaultRecoveryReplays = 10
	// MaxRecoveryTTL and MaxRecoveryReplays bound them.
	MaxRecoveryTTL     = 24 * time.Hour
	MaxRecoveryReplays = 1000
	// DefaultUnpaidPerMinute and DefaultUnpaidBurst limit unpaid requests per
	// client address. Off unless configured: by default a gateway cannot
	// know whether it sees its clients or a proxy in front of them
	// (trusted_proxies), and limiting a proxy's one address would
	// throttle every client at once. SuggestedUnpaidPerMinute is what the
	// examples set for a gateway facing its clients: the 402 quote of a
	// 1 MiB prompt costs up to about 0.7 s of a core (docs/BENCHMARKS.md,
	// "Unpaid requests"), so 20 a minute hold one address to about a quarter
	// of a core; a buyer who pays for its quotes gets each token back, and is
	// never held back.
	DefaultUnpaidPerMinute   = 0
	SuggestedUnpaidPerMinute = 20
	DefaultUnpaidBurst       = 20
	// MaxUnpaidPerMinute, MaxUnpaidBurst and MaxTrustedProxies bound them.
	MaxUnpaidPerMinute = 1_000_000
	MaxUnpaidBurst     = 100_000
	MaxTrustedProxies  = 1000
)

// Values of the enumerated keys.
const (
	ModeInProcess = "in-process"
	ModeRemote    = "remote"

	UpstreamOpenAI = "openai"
	UpstreamDemo   = "demo"

	PaymentIDOptional = "optional"
	PaymentIDRequired = "required"

	KindChat       = "chat"
	KindEmbeddings = "embeddings"
)

// Bounds Validate enforces.
const (
	// MaxDecimals bounds Network.Decimals: 10^36 atomic units per token is
	// beyond any real asset, and keeps amounts far inside uint256.
	MaxDecimals = 36
	// MinPollInterval and MaxPollInterval bound Facilitator.PollInterval:
	// faster floods the node with receipt lookups, slower adds seconds to
	// every paid call.
	MinPollInterval = 10 * time.Millisecond
	MaxPollInterval = 10 * time.Second
	// DefaultReorgWindow outlasts the reorgs a rollup such as Base sees
	// (rare, and a few blocks deep); MaxReorgWindow is as far back as the
	// stores list settled records for it (store.RecentRetention).
	DefaultReorgWindow = 15 * time.Minute
	MaxReorgWindow     = 24 * time.Hour
	// maxTimeoutSecondsCap bounds Network.MaxTimeoutSeconds to a day.
	maxTimeoutSecondsCap = 24 * 60 * 60
	// deliveryMargin is what Validate leaves, inside a payment's validity, for
	// the buyer to sign and send it: a paid request refuses a payment that
	// would expire before its upstream call and settlement could finish
	// (D6), so Upstream.Timeout + SettleTimeout + deliveryMargin must
	// fit in MaxTimeoutSeconds, or no payment could ever be accepted.
	deliveryMargin = 30 * time.Second
)

// burnAddress is the conventional burn address, a tempting placeholder.
var burnAddress = common.HexToAddress("0x000000000000000000000000000000000000dEaD")

// checkedAddress reports whether s parses as an address, so that the burn check
// does not repeat the parse error checkAddress already reported.
func checkedAddress(s string) bool {
	_, err := exact.ParseAddress(s)
	return err == nil
}

// SetDefaults fills every unset field that has a default. It is idempotent.
// PublicURL is derived from Listen only when empty: a caller that binds port
// 0 sets PublicURL itself once it knows the port.
func (c *Config) SetDefaults() {
	if c.Listen == "" {
		c.Listen = DefaultListen
	}
	if c.PublicURL == "" {
		c.PublicURL = defaultPublicURL(c.Listen)
	}
	c.PublicURL = strings.TrimRight(c.PublicURL, "/")
	if c.Network.MaxTimeoutSeconds == 0 {
		c.Network.MaxTimeoutSeconds = DefaultMaxTimeoutSeconds
	}
	if len(c.Network.Schemes) == 0 {
		c.Network.Schemes = []string{SchemeExact}
	}
	if c.Network.Upto.MinCharge == "" && c.Network.Decimals <= MaxDecimals {
		c.Network.Upto.MinCharge = pricing.Cent(c.Network.Decimals).String()
	}
	if c.Network.Upto.Streaming == "" {
		c.Network.Upto.Streaming = UptoDeliverThenSettle
	}
	c.setNetworkDefaults()
	f := &c.Facilitator
	if f.Mode == "" {
		f.Mode = ModeInProcess
	}
	if f.MaxFeePerGas == "" {
		f.MaxFeePerGas = DefaultMaxFeePerGas
	}
	if f.SettleTimeout == 0 {
		f.SettleTimeout = DefaultSettleTimeout
	}
	if f.ReconcileInterval == 0 {
		f.ReconcileInterval = DefaultReconcileInterval
	}
	if f.PollInterval == 0 {
		f.PollInterval = DefaultPollInterval(c.Network.ID)
	}
	if f.ReorgWindow == 0 {
		f.ReorgWindow = min(max(DefaultReorgWindow, c.reorgNeed()), MaxReorgWindow)
	}
	l := &c.Limits
	if l.MaxBodyBytes == 0 {
		l.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if l.UpstreamTimeout == 0 {
		l.UpstreamTimeout = DefaultUpstreamTimeout
	}
	if l.MaxStreamDuration == 0 {
		l.MaxStreamDuration = DefaultMaxStreamDuration
	}
	if l.RecoveryTTL == 0 {
		l.RecoveryTTL = DefaultRecoveryTTL
	}
	if l.RecoveryReplays == 0 {
		l.RecoveryReplays = DefaultRecoveryReplays
	}
	if l.UnpaidPerMinute == nil {
		n := DefaultUnpaidPerMinute
		l.UnpaidPerMinute = &n
	}
	if l.UnpaidBurst == 0 {
		l.UnpaidBurst = DefaultUnpaidBurst
	}
	for i := range c.Upstreams {
		u := &c.Upstreams[i]
		if u.Type == "" {
			u.Type = UpstreamOpenAI
		}
		if u.Timeout == 0 {
			u.Timeout = l.UpstreamTimeout
		}
	}
	for i := range c.Models {
		m := &c.Models[i]
		if m.UpstreamModel == "" {
			m.UpstreamModel = m.ID
		}
		for j := range m.Fallbacks {
			if m.Fallbacks[j].UpstreamModel == "" {
				m.Fallbacks[j].UpstreamModel = m.UpstreamModel
			}
		}
		if m.Kind == "" {
			m.Kind = KindChat
		}
		if m.MaxOutputTokens == 0 && m.Kind == KindChat {
			m.MaxOutputTokens = DefaultMaxOutputTokens
		}
		if m.MaxInputTokens == 0 && m.Kind == KindEmbeddings {
			m.MaxInputTokens = DefaultMaxInputTokens
		}
		if m.Encoding == "" {
			m.Encoding = pricing.EncodingFor(m.UpstreamModel)
		}
		if m.PaymentIdentifier == "" {
			m.PaymentIdentifier = PaymentIDOptional
		}
		if m.Price == (Price{}) {
			m.Price, _ = c.markedUp(*m) // an invalid cost or markup: validate says which
		}
	}
	c.setCreditDefaults()
	c.setLogDefaults()
}

func defaultPublicURL(listen string) string {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return "" // Validate reports listen
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port)
}

// FieldError is one problem in a configuration: where it is and what is
// wrong. Validate and Parse return them joined (errors.Join); errors.As finds
// the first.
type FieldError struct {
	// Path is the YAML path of the key, such as models[2].price.input; empty
	// for the document as a whole.
	Path string
	// Line is the 1-based line in the YAML source, 0 when unknown (a Config
	// built in code, or a key that is missing).
	Line int
	// Msg says what is wrong. It never contains a secret, a URL or a DSN.
	Msg string
}

func (e *FieldError) Error() string {
	switch {
	case e.Path != "" && e.Line > 0:
		return fmt.Sprintf("%s (line %d): %s", e.Path, e.Line, e.Msg)
	case e.Path != "":
		return e.Path + ": " + e.Msg
	case e.Line > 0:
		return fmt.Sprintf("line %d: %s", e.Line, e.Msg)
	}
	return e.Msg
}

// problems collects FieldErrors in the order they are found.
type problems []*FieldError

func (p *problems) add(path, format string, args ...any) {
	*p = append(*p, &FieldError{Path: path, Msg: fmt.Sprintf(format, args...)})
}

func (p problems) err() error {
	if len(p) == 0 {
		return nil
	}
	errs := make([]error, len(p))
	for i, e := range p {
		errs[i] = e
	}
	return errors.Join(errs...)
}

// Validate reports every problem of c, each a *FieldError with its YAML path,
// joined with errors.Join; nil means c is usable as is. It does no I/O: it
// checks that secret sources are named, not that they hold anything. Run
// SetDefaults first (Parse does).
func (c *Config) Validate() error {
	return c.validate().err()
}

func (c *Config) validate() problems {
	var p problems
	c.validateServer(&p)
	c.validateNetwork(&p)
	c.validateFacilitator(&p)
	c.validateStore(&p)
	c.validateLimits(&p)
	c.validateUpstreams(&p)
	c.validatePricing(&p)
	c.validateModels(&p)
	c.validateUpstreamAPIs(&p)
	c.validateCredits(&p)
	c.validateReceipts(&p)
	c.validateDashboard(&p)
	c.validateLog(&p)
	c.validateAnchor(&p)
	return p
}

func (c *Config) validateServer(p *problems) {
	if _, port, err := net.SplitHostPort(c.Listen); err != nil {
		p.add("listen", "must be host:port, such as 127.0.0.1:8080 or :8080")
		if c.PublicURL == "" {
			return // its default comes from listen: one error is enough
		}
	} else if n, err := strconv.ParseUint(port, 10, 16); err != nil || strconv.FormatUint(n, 10) != port {
		p.add("listen", "port must be a number from 0 to 65535")
	}
	if msg := checkURL(c.PublicURL, "http", "https"); msg != "" {
		p.add("public_url", "%s", msg)
	} else if u, _ := url.Parse(c.PublicURL); u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || strings.Contains(c.PublicURL, "#") {
		p.add("public_url", "must have no query or fragment: routes are appended to it")
	}
}

func (c *Config) validateNetwork(p *problems) {
	checkNetwork(p, "network", &c.Network)
	c.validateNetworks(p)
}

// checkNetwork reports the problems of n, at path (network, or
// networks[i]).
func checkNetwork(p *problems, path string, n *Network) {
	if n.ID == "" {
		p.add(path+".id", "is required: the CAIP-2 network, eip155:<chain id> (eip155:8453 for Base)")
	} else if _, err := exact.ChainID(n.ID); err != nil {
		p.add(path+".id", "%q is not eip155:<chain id> (eip155:8453 for Base); only EVM networks are supported", truncate(n.ID))
	}
	switch {
	case n.RPCURL != "" && n.RPCURLEnv != "":
		p.add(path+".rpc_url_env", "set rpc_url or rpc_url_env, not both")
	case n.RPCURL != "":
		if msg := checkURL(n.RPCURL, "http", "https", "ws", "wss"); msg != "" {
			p.add(path+".rpc_url", "%s", msg)
		}
	case n.RPCURLEnv != "":
		checkEnvName(p, path+".rpc_url_env", n.RPCURLEnv)
	}
	asset := checkAddress(p, path+".asset", n.Asset, "the EIP-3009 token contract")
	if n.AssetName == "" {
		p.add(path+".asset_name", "is required: the token's EIP-712 domain name (USD Coin for USDC)")
	}
	if n.AssetVersion == "" {
		p.add(path+".asset_version", "is required: the token's EIP-712 domain version (2 for USDC)")
	}
	if n.Decimals > MaxDecimals {
		p.add(path+".decimals", "%d is more than %d", n.Decimals, MaxDecimals)
	}
	payTo := checkAddress(p, path+".pay_to", n.PayTo, "the address that receives payments")
	if payTo != (common.Address{}) && payTo == asset {
		p.add(path+".pay_to", "is the asset's own contract: payments sent there are lost")
	}
	if n.PayTo != "" && (payTo == (common.Address{}) || payTo == burnAddress) && checkedAddress(n.PayTo) {
		p.add(path+".pay_to", "is a burn address: payments sent there are lost; set your own address")
	}
	if n.MaxTimeoutSeconds <= 0 || n.MaxTimeoutSeconds > maxTimeoutSecondsCap {
		p.add(path+".max_timeout_seconds", "%d must be from 1 to %d", n.MaxTimeoutSeconds, maxTimeoutSecondsCap)
	}
	checkSchemes(p, path, n)
}

func checkSchemes(p *problems, path string, n *Network) {
	seen := make(map[string]bool, len(n.Schemes))
	for _, s := range n.Schemes {
		switch {
		case s != SchemeExact && s != SchemeUpto:
			p.add(path+".schemes", "%q is not a scheme offered here: use %s, or %s and %s", truncate(s), SchemeExact, SchemeExact, SchemeUpto)
		case seen[s]:
			p.add(path+".schemes", "lists %s twice", s)
		}
		seen[s] = true
	}
	if len(n.Schemes) > 0 && !seen[SchemeExact] {
		p.add(path+".schemes", "must include %s: top-ups pay with it, and so do streams under upto.streaming %s", SchemeExact, UptoExactOnly)
	}
	// Empty only when decimals is invalid, which is reported already.
	if _, err := n.Upto.MinChargeAmount(); err != nil && n.Upto.MinCharge != "" {
		p.add(path+".upto.min_charge", "%q must be a whole, non-negative number of atomic units of the asset, such as \"10000\" (one cent with 6 decimals); \"0\" turns it off", truncate(n.Upto.MinCharge))
	}
	switch n.Upto.Streaming {
	case UptoDeliverThenSettle, UptoExactOnly:
	default:
		p.add(path+".upto.streaming", "%q must be %s or %s", truncate(n.Upto.Streaming), UptoDeliverThenSettle, UptoExactOnly)
	}
}

func (c *Config) validateFacilitator(p *problems) {
	f := &c.Facilitator
	switch f.Mode {
	case ModeInProcess:
		if !c.demo {
			if c.Network.RPCURL == "" && c.Network.RPCURLEnv == "" {
				p.add("network.rpc_url", "is required with facilitator.mode %s (or set network.rpc_url_env)", ModeInProcess)
			}
			switch {
			case f.KeyFile == "" && f.KeyEnv == "":
				p.add("facilitator.key_file", "is required with mode %s: the signer key's file (or set key_env)", ModeInProcess)
			case f.KeyFile != "" && f.KeyEnv != "":
				p.add("facilitator.key_env", "set key_file or key_env, not both")
			case f.KeyEnv != "":
				checkEnvName(p, "facilitator.key_env", f.KeyEnv)
			}
		}
		if f.URL != "" {
			p.add("facilitator.url", "is only for mode %s", ModeRemote)
		}
		if n, err := exact.ParseUint256(f.MaxFeePerGas); err != nil || n.Sign() == 0 {
			p.add("facilitator.max_fee_per_gas", "%q is not a positive whole number of wei (a decimal string such as \"200000000000\")", truncate(f.MaxFeePerGas))
		}
	case ModeRemote:
		if f.URL == "" {
			p.add("facilitator.url", "is required with mode %s", ModeRemote)
		} else if msg := checkURL(f.URL, "http", "https"); msg != "" {
			p.add("facilitator.url", "%s", msg)
		}
		if f.KeyFile != "" || f.KeyEnv != "" {
			p.add("facilitator.key_file", "is only for mode %s: a remote facilitator holds its own key", ModeInProcess)
		}
	default:
		p.add("facilitator.mode", "%q is not %s or %s", truncate(f.Mode), ModeInProcess, ModeRemote)
	}
	if f.SettleTimeout <= 0 {
		p.add("facilitator.settle_timeout", "%s must be positive", f.SettleTimeout)
	}
	if f.ReconcileInterval < time.Second {
		p.add("facilitator.reconcile_interval", "%s is less than 1s", f.ReconcileInterval)
	}
	if f.PollInterval < MinPollInterval || f.PollInterval > MaxPollInterval {
		p.add("facilitator.poll_interval", "%s is not between %s and %s", f.PollInterval, MinPollInterval, MaxPollInterval)
	}
	switch need := c.reorgNeed(); {
	case f.ReorgWindow < 0 || f.ReorgWindow > MaxReorgWindow:
		p.add("facilitator.reorg_window", "%s is not between 0 and %s", f.ReorgWindow, MaxReorgWindow)
	case f.ReorgWindow < need && need <= MaxReorgWindow:
		p.add("facilitator.reorg_window", "%s is shorter than a settlement a reorg dropped can still be mined and resolved "+
			"(network.max_timeout_seconds + 30s + facilitator.reconcile_interval = %s): it could leave the window unresolved", f.ReorgWindow, need)
	}
}

func (c *Config) validateStore(p *problems) {
	st := c.Store
	switch {
	case st.DSN != "" && st.DSNEnv != "":
		p.add("store.dsn_env", "set dsn or dsn_env, not both")
	case st.DSNEnv != "":
		checkEnvName(p, "store.dsn_env", st.DSNEnv)
	case st.DSN == "":
		p.add("store.dsn", "is required: sqlite://PATH (one process), postgres://... or redis://... (replicas), or set dsn_env")
	default:
		if _, msg := checkDSN(st.DSN); msg != "" {
			p.add("store.dsn", "%s", msg)
		} else if hasPassword(st.DSN) {
			p.add("store.dsn", "carries a password: put the DSN in an environment variable and name it in store.dsn_env")
		}
	}
}

// checkDSN returns the backend a store DSN names, or a message saying what is
// wrong with it. The message never repeats the DSN.
func checkDSN(dsn string) (backend, msg string) {
	scheme, rest, ok := strings.Cut(dsn, "://")
	switch {
	case !ok:
		return "", "must be sqlite://PATH, postgres://... or redis://..."
	case scheme == "sqlite" && rest == "":
		return "", "sqlite:// needs a file path, such as sqlite:///var/lib/llm4agents/llm4agents.db"
	case scheme == "sqlite":
		return StoreSQLite, ""
	case scheme == "postgres", scheme == "postgresql":
		if _, err := url.Parse(dsn); err != nil || rest == "" {
			return "", "is not a valid postgres:// URL"
		}
		return StorePostgres, ""
	case scheme == "redis", scheme == "rediss":
		if u, err := url.Parse(dsn); err != nil || u.Host == "" {
			return "", "is not a valid redis:// URL: redis://HOST:PORT/DB"
		}
		return StoreRedis, ""
	}
	return "", fmt.Sprintf("scheme %q is not supported: use sqlite://, postgres:// or redis://", truncate(scheme))
}

// hasPassword reports whether a URL DSN carries a password.
func hasPassword(dsn string) bool {
	u, err := url.Parse(dsn)
	if err != nil || u.User == nil {
		return false
	}
	_, set := u.User.Password()
	return set || u.Query().Has("password")
}

// SQLitePath returns the file path of a sqlite:// DSN.
func (s Store) SQLitePath() (string, bool) {
	return strings.CutPrefix(s.DSN, "sqlite://")
}

func (c *Config) validateLimits(p *problems) {
	l := &c.Limits
	if l.MaxBodyBytes <= 0 {
		p.add("limits.max_body_bytes", "%d must be positive", l.MaxBodyBytes)
	}
	if l.UpstreamTimeout <= 0 {
		p.add("limits.upstream_timeout", "%s must be positive", l.UpstreamTimeout)
	}
	if l.MaxStreamDuration <= 0 {
		p.add("limits.max_stream_duration", "%s must be positive", l.MaxStreamDuration)
	}
	if l.RecoveryTTL < time.Second || l.RecoveryTTL > MaxRecoveryTTL {
		p.add("limits.recovery_ttl", "%s is not between 1s and %s", l.RecoveryTTL, MaxRecoveryTTL)
	}
	if l.RecoveryReplays < 1 || l.RecoveryReplays > MaxRecoveryReplays {
		p.add("limits.recovery_replays", "%d is not between 1 and %d", l.RecoveryReplays, MaxRecoveryReplays)
	}
	if n := l.UnpaidRate(); n < 0 || n > MaxUnpaidPerMinute {
		p.add("limits.unpaid_per_minute", "%d is not between 0 (off) and %d", n, MaxUnpaidPerMinute)
	}
	if l.UnpaidBurst < 1 || l.UnpaidBurst > MaxUnpaidBurst {
		p.add("limits.unpaid_burst", "%d is not between 1 and %d", l.UnpaidBurst, MaxUnpaidBurst)
	}
	if len(l.TrustedProxies) > MaxTrustedProxies {
		p.add("limits.trusted_proxies", "has %d entries, more than %d: name prefixes, not addresses", len(l.TrustedProxies), MaxTrustedProxies)
	} else {
		for i, s := range l.TrustedProxies {
			if _, err := parseProxy(s); err != nil {
				p.add(fmt.Sprintf("limits.trusted_proxies[%d]", i), "%q %v", truncate(s), err)
			}
		}
	}
	if l.ClaimLease != 0 {
		if minLease := c.minClaimLease(); l.ClaimLease < minLease {
			p.add("limits.claim_lease", "%s is shorter than the longest upstream timeout + facilitator.settle_timeout + %s (%s): a slow request could lose its claim to a second presentation of its payment",
				l.ClaimLease, MinClaimLeaseMargin, minLease)
		}
	}
}

// minClaimLease is the shortest claim lease that outlasts the slowest request.
func (c *Config) minClaimLease() time.Duration {
	longest := c.Limits.UpstreamTimeout
	for _, u := range c.Upstreams {
		longest = max(longest, u.Timeout)
	}
	return longest + c.Facilitator.SettleTimeout + MinClaimLeaseMargin
}

// ClaimLease returns Limits.ClaimLease, or its default when unset: the larger
// of 5 minutes and the shortest lease that outlasts the slowest request.
func (c *Config) ClaimLease() time.Duration {
	if c.Limits.ClaimLease != 0 {
		return c.Limits.ClaimLease
	}
	return max(5*time.Minute, c.minClaimLease())
}

var (
	nameRE    = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)
	envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)
)

func (c *Config) validateUpstreams(p *problems) {
	if len(c.Upstreams) == 0 {
		p.add("upstreams", "at least one upstream is required")
	}
	seen := map[string]int{}
	validity := time.Duration(c.Network.MaxTimeoutSeconds) * time.Second
	for i, u := range c.Upstreams {
		at := fmt.Sprintf("upstreams[%d]", i)
		switch j, dup := seen[u.Name]; {
		case u.Name == "":
			p.add(at+".name", "is required")
		case !nameRE.MatchString(u.Name):
			p.add(at+".name", "%q must be letters, digits, '.', '_' or '-' (at most 64)", truncate(u.Name))
		case dup:
			p.add(at+".name", "%q is already the name of upstreams[%d]", u.Name, j)
		default:
			seen[u.Name] = i
		}
		switch u.Type {
		case UpstreamOpenAI:
			if u.BaseURL == "" {
				p.add(at+".base_url", "is required for type %s, such as https://api.openai.com/v1", UpstreamOpenAI)
			} else if msg := checkURL(u.BaseURL, "http", "https"); msg != "" {
				p.add(at+".base_url", "%s", msg)
			}
			switch {
			case u.APIKeyEnv != "" && u.APIKeyFile != "":
				p.add(at+".api_key_file", "set api_key_env or api_key_file, not both")
			case u.APIKeyEnv != "":
				checkEnvName(p, at+".api_key_env", u.APIKeyEnv)
			}
		case UpstreamDemo:
			if u.BaseURL != "" {
				p.add(at+".base_url", "is not used by type %s: remove it", UpstreamDemo)
			}
			if u.APIKeyEnv != "" || u.APIKeyFile != "" {
				p.add(at+".api_key_env", "type %s takes no API key: remove api_key_env and api_key_file", UpstreamDemo)
			}
		default:
			p.add(at+".type", "%q is not %s or %s", truncate(u.Type), UpstreamOpenAI, UpstreamDemo)
		}
		if u.FailuresToOpen < 0 || u.FailuresToOpen > 1000 {
			p.add(at+".failures_to_open", "%d must be between 1 and 1000 (0: the default, %d)", u.FailuresToOpen, upstream.DefaultFailuresToOpen)
		}
		if u.OpenFor < 0 || u.OpenFor > time.Hour {
			p.add(at+".open_for", "%s must be positive and at most 1h (0: the default, %s)", u.OpenFor, upstream.DefaultOpenFor)
		}
		switch settle := c.Facilitator.SettleTimeout; {
		case u.Timeout <= 0:
			p.add(at+".timeout", "%s must be positive", u.Timeout)
		case validity > 0 && settle > 0 && u.Timeout+settle+deliveryMargin > validity:
			p.add(at+".timeout", "%s + facilitator.settle_timeout %s + %s to deliver the payment exceeds network.max_timeout_seconds (%ds): "+
				"no payment would stay valid long enough; lower them or raise max_timeout_seconds",
				u.Timeout, settle, deliveryMargin, c.Network.MaxTimeoutSeconds)
		}
	}
}

func (c *Config) validateModels(p *problems) {
	if len(c.Models) == 0 {
		p.add("models", "at least one model is required")
	}
	upstreams := map[string]bool{}
	for _, u := range c.Upstreams {
		upstreams[u.Name] = true
	}
	seen := map[string]int{}
	for i, m := range c.Models {
		at := fmt.Sprintf("models[%d]", i)
		switch j, dup := seen[m.ID]; {
		case m.ID == "":
			p.add(at+".id", "is required: the model name clients send")
		case !printableName(m.ID):
			p.add(at+".id", "%q must be printable, without spaces, at most 256 bytes", truncate(m.ID))
		case dup:
			p.add(at+".id", "%q is already the id of models[%d]", m.ID, j)
		default:
			seen[m.ID] = i
		}
		switch {
		case m.Upstream == "":
			p.add(at+".upstream", "is required: the name of one of upstreams")
		case !upstreams[m.Upstream]:
			p.add(at+".upstream", "%q is not the name of any of upstreams", truncate(m.Upstream))
		}
		if !printableName(m.UpstreamModel) {
			p.add(at+".upstream_model", "%q must be printable, without spaces, at most 256 bytes", truncate(m.UpstreamModel))
		}
		validateFallbacks(p, at, m, upstreams)
		if m.Price == (Price{}) {
			p.add(at+".price", "%s", c.missingPrice(m))
		} else {
			checkPrice(p, at+".price.input", m.Price.Input, c.Network.Decimals)
		}
		switch m.Kind {
		case KindChat:
			if m.Price != (Price{}) {
				checkPrice(p, at+".price.output", m.Price.Output, c.Network.Decimals)
			}
			if m.MaxOutputTokens <= 0 {
				p.add(at+".max_output_tokens", "%d must be positive", m.MaxOutputTokens)
			}
			if m.MaxInputTokens != 0 {
				p.add(at+".max_input_tokens", "%d is not read: it bounds each input of an embeddings model; remove it", m.MaxInputTokens)
			}
		case KindEmbeddings:
			if m.MaxInputTokens <= 0 || m.MaxInputTokens > embeddings.MaxTokens {
				p.add(at+".max_input_tokens", "%d is not between 1 and %d (the most one embeddings request may carry)", m.MaxInputTokens, embeddings.MaxTokens)
			}
			// An embeddings call has no output: a price or cap for one would
			// read as if it were charged or enforced.
			if m.Price.Output != "" {
				p.add(at+".price.output", "%q is not read: an embeddings model is priced per input token only; remove price.output", truncate(m.Price.Output))
			}
			if m.MaxOutputTokens != 0 {
				p.add(at+".max_output_tokens", "%d is not read: an embeddings call has no output; remove max_output_tokens", m.MaxOutputTokens)
			}
		default:
			p.add(at+".kind", "%q is not %s or %s", truncate(m.Kind), KindChat, KindEmbeddings)
		}
		if !pricing.KnownEncoding(m.Encoding) {
			p.add(at+".encoding", "%q is not a known encoding (%s, %s, %s, %s or %s)", truncate(m.Encoding),
				pricing.O200kBase, pricing.Cl100kBase, pricing.P50kBase, pricing.P50kEdit, pricing.R50kBase)
		}
		if m.PaymentIdentifier != PaymentIDOptional && m.PaymentIdentifier != PaymentIDRequired {
			p.add(at+".payment_identifier", "%q is not %s or %s", truncate(m.PaymentIdentifier), PaymentIDOptional, PaymentIDRequired)
		}
	}
}

// maxFallbacks bounds a model's fallbacks: each is one more wait for a
// client whose first providers are down.
const maxFallbacks = 8

func validateFallbacks(p *problems, at string, m Model, upstreams map[string]bool) {
	if len(m.Fallbacks) > maxFallbacks {
		p.add(at+".fallbacks", "%d fallbacks: at most %d", len(m.Fallbacks), maxFallbacks)
		return
	}
	used := map[string]string{m.Upstream: at + ".upstream"}
	for j, f := range m.Fallbacks {
		fat := fmt.Sprintf("%s.fallbacks[%d]", at, j)
		switch first, dup := used[f.Upstream]; {
		case f.Upstream == "":
			p.add(fat+".upstream", "is required: the name of one of upstreams")
		case !upstreams[f.Upstream]:
			p.add(fat+".upstream", "%q is not the name of any of upstreams", truncate(f.Upstream))
		case dup:
			p.add(fat+".upstream", "%q is already %s of this model: a provider is tried once per call", f.Upstream, first)
		default:
			used[f.Upstream] = fat
		}
		if !printableName(f.UpstreamModel) {
			p.add(fat+".upstream_model", "%q must be printable, without spaces, at most 256 bytes", truncate(f.UpstreamModel))
		}
	}
}

var priceRE = regexp.MustCompile(`^[0-9]+(_[0-9]+)*$`)

// parseAtomic reads a whole number of atomic units: ASCII digits, with '_'
// allowed between digit groups, at most the uint64 maximum.
func parseAtomic(s string) (uint64, error) {
	if !priceRE.MatchString(s) {
		return 0, errors.New("not a whole number")
	}
	return strconv.ParseUint(strings.ReplaceAll(s, "_", ""), 10, 64)
}

func checkPrice(p *problems, path, s string, decimals uint8) {
	if s == "" {
		p.add(path, "is required: atomic units of the asset per million tokens, such as \"150000\" ($0.15 with 6 decimals)")
		return
	}
	_, err := parseAtomic(s)
	switch {
	case err == nil:
	case errors.Is(err, strconv.ErrRange):
		p.add(path, "%q is more than %d atomic units per million tokens", truncate(s), uint64(1<<64-1))
	default:
		// A decimal ("0.15") is whole tokens to pricing.ParseAmount: say what
		// it would be in atomic units.
		if a, err := pricing.ParseAmount(s, decimals); err == nil && strings.Contains(s, ".") {
			p.add(path, "%q must be whole atomic units per million tokens, not a decimal: %s of the asset per million tokens is %q with %d decimals",
				truncate(s), truncate(s), a.String(), decimals)
			return
		}
		p.add(path, "%q must be a whole, non-negative number of atomic units per million tokens, such as \"150000\"", truncate(s))
	}
}

// Parse returns the pricing.Price of a validated Price. An absent output
// price is zero: Validate requires one of every chat model, and an
// embeddings model has none.
func (p Price) Parse() (pricing.Price, error) {
	in, err := parseAtomic(p.Input)
	if err != nil {
		return pricing.Price{}, fmt.Errorf("price input %q: %w", truncate(p.Input), err)
	}
	if p.Output == "" {
		return pricing.Price{Input: in}, nil
	}
	out, err := parseAtomic(p.Output)
	if err != nil {
		return pricing.Price{}, fmt.Errorf("price output %q: %w", truncate(p.Output), err)
	}
	return pricing.Price{Input: in, Output: out}, nil
}

// printableName reports whether s is a non-empty name of printable characters
// without spaces, at most 256 bytes.
func printableName(s string) bool {
	if s == "" || len(s) > 256 {
		return false
	}
	for _, r := range s {
		if !unicode.IsPrint(r) || unicode.IsSpace(r) {
			return false
		}
	}
	return true
}

// checkAddress validates a required address and returns it (zero on error).
func checkAddress(p *problems, path, s, what string) common.Address {
	if s == "" {
		p.add(path, "is required: %s (0x followed by 40 hex digits)", what)
		return common.Address{}
	}
	a, err := exact.ParseAddress(s)
	switch {
	case err != nil:
		p.add(path, "%q is not a valid address (0x and 40 hex digits, EIP-55 checksummed if mixed-case): %v", truncate(s), err)
	case a == common.Address{}:
		p.add(path, "is the zero address")
	}
	return a
}

func checkEnvName(p *problems, path, name string) {
	if !envNameRE.MatchString(name) {
		p.add(path, "%q is not an environment variable name (letters, digits and '_', not starting with a digit)", truncate(name))
	}
}

// checkURL returns what is wrong with an absolute URL, or "". It never repeats
// the URL: URLs may carry keys.
func checkURL(s string, schemes ...string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "is not a valid absolute " + strings.Join(schemes, " or ") + " URL"
	}
	ok := false
	for _, sc := range schemes {
		ok = ok || u.Scheme == sc
	}
	switch {
	case !ok:
		return "must be an absolute " + strings.Join(schemes, " or ") + " URL"
	case u.Host == "" || u.Hostname() == "":
		return "has no host"
	case u.User != nil:
		return "must not carry credentials: secrets come from files or environment variables"
	}
	return ""
}

// truncate shortens a value quoted in an error message.
func truncate(s string) string {
	const max = 64
	if len(s) <= max {
		return s
	}
	return s[:max] + "..."
}

// Model returns the model with the given public id, or nil.
func (c *Config) Model(id string) *Model {
	for i := range c.Models {
		if c.Models[i].ID == id {
			return &c.Models[i]
		}
	}
	return nil
}

// Upstream returns the upstream with the given name, or nil.
func (c *Config) Upstream(name string) *Upstream {
	for i := range c.Upstreams {
		if c.Upstreams[i].Name == name {
			return &c.Upstreams[i]
		}
	}
	return nil
}

// ChainID returns the chain id of Network.ID.
func (n Network) ChainID() (*big.Int, error) { return exact.ChainID(n.ID) }

// AssetAddress returns Network.Asset parsed.
func (n Network) AssetAddress() (common.Address, error) { return exact.ParseAddress(n.Asset) }

// PayToAddress returns Network.PayTo parsed.
func (n Network) PayToAddress() (common.Address, error) { return exact.ParseAddress(n.PayTo) }

// reorgNeed is the shortest reorg window that sees every dropped settlement
// resolved: after a reorg drops it, its authorization may stay valid for up
// to max_timeout_seconds and the freshness slack, and the reconciler looks
// once more after that, within one reconcile interval.
func (c *Config) reorgNeed() time.Duration {
	return time.Duration(c.Network.MaxTimeoutSeconds)*time.Second + exact.FreshnessSlack + c.Facilitator.ReconcileInterval
}

// DefaultPollInterval is Facilitator.PollInterval when none is set: 100ms on
// a local development chain (eip155:1337, eip155:31337), whose node is free
// to ask, and 250ms elsewhere, an eighth of Base's 2s blocks, so a paid call
// waits on average 125ms beyond its block.
func DefaultPollInterval(network string) time.Duration {
	switch network {
	case "eip155:1337", "eip155:31337":
		return 100 * time.Millisecond
	}
	return 250 * time.Millisecond
}

// MaxFee returns Facilitator.MaxFeePerGas in wei.
func (f Facilitator) MaxFee() (*big.Int, error) {
	n, err := exact.ParseUint256(f.MaxFeePerGas)
	if err != nil || n.Sign() == 0 {
		return nil, fmt.Errorf("facilitator.max_fee_per_gas %q is not a positive whole number of wei", truncate(f.MaxFeePerGas))
	}
	return n, nil
}
