// Package gateway is the paid, OpenAI-compatible HTTP API: POST
// /v1/chat/completions and POST /v1/embeddings behind an x402 paywall, GET
// /v1/models with prices, health and metrics.
//
// The gateway prices each request (paywall.go) and hands its payment to the
// paywall (internal/paywall), which runs the steps of DESIGN.md D0 (decode,
// match, freshness, recovery lookup, verify, claim) and returns an admission.
// The gateway acts on it: a fresh payment calls the upstream and settles
// (chat.go, stream.go), a recovered one is rendered as the live answer was
// (recovery.go). Non-streaming answers are withheld until settlement succeeds
// (D1); streams settle after the first upstream chunk with content and before
// the first byte to the client (D2). An upstream failure settles nothing and
// releases the claim, so the buyer may retry with the same authorization. A
// refusal of the paywall becomes an HTTP answer in one table (paywall.go).
package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"net/http"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/ethereum/go-ethereum/common"

	"github.com/llm4agents/llm4agents/internal/chat"
	"github.com/llm4agents/llm4agents/internal/credits"
	"github.com/llm4agents/llm4agents/internal/paywall"
	"github.com/llm4agents/llm4agents/internal/pricing"
	"github.com/llm4agents/llm4agents/internal/receiptlog"
	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/internal/upstream"
	"github.com/llm4agents/llm4agents/x402"
	"github.com/llm4agents/llm4agents/x402/evm/exact"
)

// Provider is an upstream LLM as the gateway uses it.
type Provider interface {
	Complete(ctx context.Context, body []byte) (*upstream.Completion, error)
	Stream(ctx context.Context, body []byte) (upstream.Stream, error)
}

// Model is one public model: where it goes and what it costs.
type Model struct {
	ID              string
	UpstreamModel   string
	Provider        Provider
	Price           pricing.Price
	MaxOutputTokens int64  // default cap injected upstream; requests above it are refused
	Encoding        string // tokenizer encoding for quotes; "" chooses by model name
	OwnedBy         string
	// PaymentIDRequired makes the x402 payment-identifier extension (D14)
	// required for this model's requests; it is optional by default, since
	// the official clients send none. It needs a recovery store.
	PaymentIDRequired bool
	// Embeddings sells the model on POST /v1/embeddings, and only there
	// (embeddings.go): priced per input token at Price.Input, its Provider
	// must be an upstream.Embedder. A chat model is not sold there.
	Embeddings bool
	// MaxInputTokens bounds each input of an embeddings call, as the
	// upstream model does; 0 bounds only the request's total
	// (embeddings.MaxTokens).
	MaxInputTokens int64
}

// Config is what a Server needs besides its collaborators.
type Config struct {
	// PublicURL is the origin clients reach us at; resource URLs in 402s are built
	// from it.
	PublicURL string
	Network   string // CAIP-2, eip155:<id>
	Asset     string // token address
	// AssetName and AssetVersion are the token's EIP-712 domain, sent as extra.
	AssetName    string
	AssetVersion string
	AssetSymbol  string // for messages, "USDC"
	Decimals     uint8
	PayTo        string
	// MaxTimeoutSeconds is offered in every 402; default 300.
	MaxTimeoutSeconds int64
	MaxBodyBytes      int64
	UpstreamTimeout   time.Duration
	// SettleTimeout bounds the wait for a settlement; past it the answer is
	// settlement_pending (D3).
	SettleTimeout time.Duration
	// MaxStreamDuration bounds how long a paid stream is read once settled.
	MaxStreamDuration time.Duration
	// ClaimLease bounds how long a crashed request's claim blocks its
	// authorization.
	ClaimLease time.Duration
	Owner      string // this replica's name in claims
	// RecoveryTTL is how long a paid answer may be replayed to its buyer after
	// settlement; RecoveryReplays how many times (internal/paywall). Defaults
	// DefaultRecoveryTTL and DefaultRecoveryReplays.
	RecoveryTTL     time.Duration
	RecoveryReplays int
	Models          []Model
	// Metrics is where the gateway counts; nil makes its own. Given, it can
	// also count what the providers do (upstream.NewFallback).
	Metrics *Metrics
	// Credits turns on prepaid credits (credits.go, topup.go); nil serves
	// x402 payments only.
	Credits *Credits
	// Unpaid limits requests without payment per client address (unpaid.go);
	// the zero value limits nothing.
	Unpaid UnpaidLimits
	// Upto offers the upto scheme beside exact (D27); nil offers exact
	// alone.
	Upto *Upto
	// Log is the public receipt log (D30): every receipt's leaf is queued in
	// it with the receipt, and /log/ serves it. nil keeps no log.
	Log *receiptlog.Log
	// Dashboard, when set, serves /dashboard and the pages under it
	// (internal/dashboard).
	Dashboard http.Handler
	// Networks are further ways to pay, offered in every call's 402 after
	// the primary network and asset above (Network, Asset...), at par: the
	// same quote in atomic units of each asset. Top-ups are paid on the
	// primary network alone.
	Networks []PaymentNetwork
}

// PaymentNetwork is one more network and asset a call's 402 offers, with
// the facilitator that verifies and settles its payments.
type PaymentNetwork struct {
	Network string // CAIP-2, eip155:<id>
	Asset   string // token address
	// AssetName and AssetVersion are the token's EIP-712 domain.
	AssetName    string
	AssetVersion string
	PayTo        string
	Facilitator  Facilitator
	// Upto offers the upto scheme on this network too; nil offers exact
	// alone. Its MinCharge and ExactOnlyStreams must be those of every
	// other network that offers upto: the quote is one.
	Upto *Upto
}

// Upto is how the gateway sells with the upto scheme: the buyer authorizes
// the exact quote as a maximum, and the call settles for what its usage
// cost (pricing.Charge).
type Upto struct {
	// Extra is the upto offer's extra, naming the facilitator's settling
	// address: {"facilitatorAddress":"0x..."}.
	Extra json.RawMessage
	// MinCharge is the least a call settles for (a settlement costs gas);
	// nil or zero turns it off.
	MinCharge *big.Int
	// ExactOnlyStreams offers streams exact alone (upto.streaming
	// exact_only); otherwise a stream is delivered, then settled.
	ExactOnlyStreams bool
}

// NewUpto is the Upto of a gateway whose upto permits settler settles (the
// facilitator's address the buyer signs into the permit's witness).
func NewUpto(settler common.Address, minCharge *big.Int, exactOnlyStreams bool) (*Upto, error) {
	extra, err := x402.Marshal(map[string]string{"facilitatorAddress": settler.Hex()})
	if err != nil {
		return nil, fmt.Errorf("gateway: upto extra: %w", err)
	}
	return &Upto{Extra: extra, MinCharge: minCharge, ExactOnlyStreams: exactOnlyStreams}, nil
}

// extra is u's offer extra, nil when u is.
func (u *Upto) extra() json.RawMessage {
	if u == nil {
		return nil
	}
	return u.Extra
}

// Defaults of Config.
const (
	DefaultMaxTimeoutSeconds = 300
	DefaultMaxBodyBytes      = 1 << 20
	DefaultUpstreamTimeout   = 120 * time.Second
	DefaultSettleTimeout     = 30 * time.Second
	DefaultMaxStreamDuration = 10 * time.Minute
	DefaultClaimLease        = 5 * time.Minute
	// MinClaimLeaseMargin is what ClaimLease must leave beyond
	// UpstreamTimeout + SettleTimeout: the request's own work around them.
	MinClaimLeaseMargin = 10 * time.Second
)

// Server serves the gateway's HTTP API.
type Server struct {
	cfg Config
	// pay runs the payment lifecycle (internal/paywall): admission,
	// settlement, recovery, on each network and asset offered; pw is its
	// primary paywall, the one top-ups pay through.
	pay *paywall.Set
	pw  *paywall.Paywall
	// payableWith lists the networks and assets pay takes payments on, in
	// order, for /v1/models.
	payableWith []payableWith
	// upto is the upto policy (minimum charge, streams) of the networks
	// that offer upto; nil when none does.
	upto *Upto
	// calls runs the payment steps of credit-paid calls
	// (internal/credits): nil when the gateway takes no API keys.
	calls   *credits.Calls
	counter *pricing.Counter
	models  map[string]*Model
	order   []string // model ids, sorted
	log     *slog.Logger
	metrics *Metrics
	mux     *http.ServeMux
	now     func() time.Time
	ready   func(context.Context) error
	unpaid  *unpaidLimiter // nil: unpaid requests are not limited

	asset common.Address // parsed once from cfg
}

// New returns a Server. fac verifies and settles; payments holds the claims,
// and the recovery records when it implements store.Recoveries.
func New(cfg Config, fac Facilitator, payments store.Payments, log *slog.Logger) (*Server, error) {
	if cfg.MaxTimeoutSeconds <= 0 {
		cfg.MaxTimeoutSeconds = DefaultMaxTimeoutSeconds
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.UpstreamTimeout <= 0 {
		cfg.UpstreamTimeout = DefaultUpstreamTimeout
	}
	if cfg.SettleTimeout <= 0 {
		cfg.SettleTimeout = DefaultSettleTimeout
	}
	if cfg.MaxStreamDuration <= 0 {
		cfg.MaxStreamDuration = DefaultMaxStreamDuration
	}
	// A claim must outlive the slowest request that holds it, or a second
	// presentation could take it over while the first is still in the upstream.
	minLease := cfg.UpstreamTimeout + cfg.SettleTimeout + MinClaimLeaseMargin
	if cfg.ClaimLease <= 0 {
		cfg.ClaimLease = max(DefaultClaimLease, minLease)
	}
	if cfg.ClaimLease < minLease {
		return nil, fmt.Errorf("gateway: claim lease %s is shorter than upstream timeout + settle timeout + %s (%s)", cfg.ClaimLease, MinClaimLeaseMargin, minLease)
	}
	if cfg.RecoveryTTL <= 0 {
		cfg.RecoveryTTL = DefaultRecoveryTTL
	}
	if cfg.RecoveryReplays <= 0 {
		cfg.RecoveryReplays = DefaultRecoveryReplays
	}
	if cfg.AssetSymbol == "" {
		cfg.AssetSymbol = "USDC"
	}
	cfg.PublicURL = strings.TrimRight(cfg.PublicURL, "/")
	if len(cfg.Models) == 0 {
		return nil, errors.New("gateway: no models configured")
	}
	asset, err := exact.ParseAddress(cfg.Asset)
	if err != nil {
		return nil, fmt.Errorf("gateway: asset: %w", err)
	}
	s := &Server{
		cfg: cfg, counter: pricing.NewCounter(),
		models: make(map[string]*Model, len(cfg.Models)),
		log:    log.With("component", "gateway"), metrics: cfg.Metrics, now: time.Now,
		asset: asset, unpaid: newUnpaidLimiter(cfg.Unpaid),
	}
	if s.metrics == nil {
		s.metrics = NewMetrics()
	}
	if cfg.Credits != nil && cfg.Credits.Leases != nil {
		s.metrics.reg.MustRegister(newLeaseCollector(cfg.Credits.Leases))
	}
	if cfg.Credits != nil && cfg.Credits.Ledger != nil {
		s.metrics.reg.MustRegister(newLostCallsCollector(cfg.Credits.Ledger))
	}
	networks := append([]PaymentNetwork{{
		Network: cfg.Network, Asset: cfg.Asset, AssetName: cfg.AssetName, AssetVersion: cfg.AssetVersion,
		PayTo: cfg.PayTo, Facilitator: fac, Upto: cfg.Upto,
	}}, cfg.Networks...)
	pws := make([]*paywall.Paywall, 0, len(networks))
	seen := make(map[string]bool, len(networks))
	for i, n := range networks {
		pc, err := s.paywallConfig(n)
		if err == nil && i > 0 && n.Facilitator == nil {
			err = errors.New("no facilitator")
		}
		if err != nil {
			return nil, fmt.Errorf("gateway: network %d (%s): %w", i, n.Network, err)
		}
		id := pc.Network + "/" + pc.AssetAddress.Hex()
		if seen[id] {
			return nil, fmt.Errorf("gateway: network %s offers asset %s twice", n.Network, pc.AssetAddress.Hex())
		}
		seen[id] = true
		s.payableWith = append(s.payableWith, payableWith{Network: pc.Network, Asset: pc.Asset})
		pws = append(pws, paywall.New(pc, n.Facilitator, payments, paymentMetrics{s.metrics}, s.log))
	}
	s.pay, s.pw = paywall.NewSet(pws...), pws[0]
	// The upto policy is one for every network that offers upto, the
	// first one's (the config gives them all the primary's).
	for _, n := range networks {
		if n.Upto != nil {
			s.upto = n.Upto
			break
		}
	}
	if c := cfg.Credits; c != nil && c.Keys != nil {
		s.calls = credits.NewCalls(credits.CallsConfig{
			Keys: c.Keys, Ledger: c.Ledger, Leases: c.Leases, Receipts: c.Receipts,
			Display: s.display, TopUp: topUpRoute, Metrics: creditMetrics{s.metrics}, Log: s.log,
		})
	}
	for i := range cfg.Models {
		m := &cfg.Models[i]
		if m.UpstreamModel == "" {
			m.UpstreamModel = m.ID
		}
		if _, dup := s.models[m.ID]; dup {
			return nil, fmt.Errorf("gateway: model %q configured twice", m.ID)
		}
		if _, ok := m.Provider.(upstream.Embedder); m.Embeddings && !ok {
			return nil, fmt.Errorf("gateway: model %q is sold for embeddings, but its upstream serves none", m.ID)
		}
		if m.PaymentIDRequired && !s.pay.Recovers() {
			return nil, fmt.Errorf("gateway: model %q requires a payment identifier, but the store keeps no recovery records", m.ID)
		}
		s.models[m.ID] = m
		s.order = append(s.order, m.ID)
	}
	sort.Strings(s.order)
	s.mux = http.NewServeMux()
	s.mux.Handle("POST /v1/chat/completions", s.handle("chat", s.limitUnpaid(s.chat)))
	s.mux.Handle("POST /v1/embeddings", s.handle("embeddings", s.limitUnpaid(s.embeddings)))
	s.mux.Handle("POST /v1/responses", s.handle("responses", s.limitUnpaid(s.responses)))
	s.mux.Handle("GET /v1/models", s.handle("models", s.listModels))
	s.mux.Handle("GET /v1/models/{id}", s.handle("model", s.getModel))
	if c := cfg.Credits; c != nil {
		if c.Ledger != nil {
			s.mux.Handle("POST /v1/credits/topup", s.handle("topup", s.limitUnpaid(s.topUp)))
			s.mux.Handle("GET /v1/credits/balance", s.handle("balance", s.balance))
		}
		s.mux.Handle("GET /v1/receipts", s.handle("receipts", s.listReceipts))
		s.mux.Handle("GET /v1/receipts/{id}", s.handle("receipt", s.getReceipt))
		if c.Account != nil {
			s.mux.Handle("/v1/auth/", c.Account)
			if c.Ledger != nil {
				s.mux.Handle("/v1/keys", c.Account)
				s.mux.Handle("/v1/keys/", c.Account)
			}
		}
		if c.Signer != nil {
			doc := c.Signer.WellKnown()
			doc.Log = s.wellKnownLog()
			s.mux.Handle("GET /.well-known/llm4agents.json", credits.WellKnownHandler(doc))
		}
		if cfg.Log != nil {
			s.mux.Handle("GET /v1/receipts/{id}/proof", s.handle("receipt_proof", s.getReceiptProof))
		}
	}
	if cfg.Log != nil {
		s.mux.Handle("GET /log/checkpoint", s.handle("log_checkpoint", s.getCheckpoint))
		s.mux.Handle("GET /log/tile/{path...}", s.handle("log_tile", s.getTile))
		s.mux.Handle("GET /log/anchors", s.handle("log_anchors", s.getAnchors))
	}
	if cfg.Dashboard != nil {
		s.mux.Handle("/dashboard", cfg.Dashboard)
		s.mux.Handle("/dashboard/", cfg.Dashboard)
	}
	s.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { writePlain(w, "ok\n") })
	s.mux.Handle("GET /readyz", s.handle("readyz", s.readyz))
	s.mux.Handle("GET /metrics", s.metrics.Handler())
	s.mux.Handle("/", s.handle("notfound", func(http.ResponseWriter, *http.Request) error {
		return &apiError{Status: http.StatusNotFound, Type: "invalid_request_error", Code: "not_found", Message: "no such route"}
	}))
	return s, nil
}

// paysOn reports whether network is one pay takes payments on.
func (s *Server) paysOn(network string) bool {
	return slices.ContainsFunc(s.payableWith, func(p payableWith) bool { return p.Network == network })
}

// paywallConfig is the paywall of network n, with what every network
// shares from s.cfg.
func (s *Server) paywallConfig(n PaymentNetwork) (paywall.Config, error) {
	asset, err := exact.ParseAddress(n.Asset)
	if err != nil {
		return paywall.Config{}, fmt.Errorf("asset: %w", err)
	}
	payTo, err := exact.ParseAddress(n.PayTo)
	if err != nil {
		return paywall.Config{}, fmt.Errorf("payTo: %w", err)
	}
	if _, err := exact.ChainID(n.Network); err != nil {
		return paywall.Config{}, err
	}
	extra, err := json.Marshal(exact.Extra{Name: n.AssetName, Version: n.AssetVersion})
	if err != nil {
		return paywall.Config{}, fmt.Errorf("extra: %w", err)
	}
	c := s.cfg
	return paywall.Config{
		Network: n.Network, Asset: n.Asset, PayTo: n.PayTo, AssetAddress: asset, PayToAddress: payTo, Extra: extra,
		UptoExtra:         n.Upto.extra(),
		MaxTimeoutSeconds: c.MaxTimeoutSeconds, UpstreamTimeout: c.UpstreamTimeout, SettleTimeout: c.SettleTimeout,
		ClaimLease: c.ClaimLease, Owner: c.Owner, RecoveryTTL: c.RecoveryTTL, RecoveryReplays: c.RecoveryReplays,
	}, nil
}

// SetReadiness installs the check behind /readyz (a store and node ping).
func (s *Server) SetReadiness(f func(context.Context) error) { s.ready = f }

// SetNow replaces the clock (tests).
func (s *Server) SetNow(now func() time.Time) {
	s.now = now
	s.pay.SetNow(now)
}

// Metrics returns the server's metrics.
func (s *Server) Metrics() *Metrics { return s.metrics }

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// apiError is an error with its HTTP answer: an OpenAI-style error body, and
// optionally protocol headers (PAYMENT-REQUIRED, PAYMENT-RESPONSE).
type apiError struct {
	Status  int
	Type    string
	Code    string
	Message string
	Header  http.Header
	// Detail, when set, is sent as the body's "error" object instead of
	// {message, type, param, code}; it embeds chat.ErrorDetail with those
	// fields and adds its own (a credit shortfall's numbers and top-up route).
	Detail any
	Err    error // detail for the log, never sent
}

func (e *apiError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%d %s: %s: %v", e.Status, e.Code, e.Message, e.Err)
	}
	return fmt.Sprintf("%d %s: %s", e.Status, e.Code, e.Message)
}

func (e *apiError) Unwrap() error { return e.Err }

// handle adapts a handler that returns an error: the error is written once, as
// OpenAI error JSON, and logged (4xx at Info, 5xx at Error with the detail the
// client does not see).
func (s *Server) handle(route string, h func(http.ResponseWriter, *http.Request) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := s.now()
		sw := &statusWriter{ResponseWriter: w}
		err := h(sw, r)
		if err != nil {
			ae := s.answerOf(err)
			if ae.Status >= 500 {
				s.log.Error("request failed", "route", route, "status", ae.Status, "code", ae.Code, "err", ae.Err)
			} else {
				s.log.Info("request refused", "route", route, "status", ae.Status, "code", ae.Code, "msg", ae.Message)
			}
			if !sw.wrote {
				writeError(sw, ae)
			}
		}
		s.metrics.request(route, sw.status(), s.now().Sub(start))
	})
}

// answerOf is the HTTP answer of a handler's error: a paywall refusal by the
// refusal table (paywall.go), a credit call's by its own (credits.go), an
// apiError as it is, anything else a 500.
func (s *Server) answerOf(err error) *apiError {
	if rf, ok := errors.AsType[*paywall.RefusalError](err); ok {
		return s.refused(rf)
	}
	if rf, ok := errors.AsType[*credits.RefusalError](err); ok {
		return s.creditRefused(rf)
	}
	if ae, ok := errors.AsType[*apiError](err); ok {
		return ae
	}
	return &apiError{Status: http.StatusInternalServerError, Type: "server_error", Code: "internal_error", Message: "internal error", Err: err}
}

func writeError(w http.ResponseWriter, e *apiError) {
	for k, vs := range e.Header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	if e.Detail != nil {
		writeJSON(w, e.Status, struct {
			Error any `json:"error"`
		}{e.Detail})
		return
	}
	writeJSON(w, e.Status, chat.ErrorBody{Error: chat.ErrorDetail{Message: e.Message, Type: e.Type, Code: e.Code}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := x402.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":{"message":"internal error","type":"server_error","param":null,"code":"internal_error"}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n')) // #nosec G705 -- JSON sent as application/json with nosniff, not HTML
}

func writePlain(w http.ResponseWriter, s string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = w.Write([]byte(s))
}

// statusWriter remembers the status written, for metrics and to know whether an
// error can still be sent.
type statusWriter struct {
	http.ResponseWriter
	code  int
	wrote bool
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wrote {
		w.code, w.wrote = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if !w.wrote {
		w.code, w.wrote = http.StatusOK, true
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) status() int {
	if !w.wrote {
		return http.StatusOK
	}
	return w.code
}

// Unwrap lets http.ResponseController reach Flush and deadlines.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) error {
	if s.ready != nil {
		ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
		defer cancel()
		if err := s.ready(ctx); err != nil {
			return &apiError{Status: http.StatusServiceUnavailable, Type: "server_error", Code: "not_ready", Message: "not ready", Err: err}
		}
	}
	writePlain(w, "ready\n")
	return nil
}

// modelInfo is one entry of /v1/models: the OpenAI fields plus our prices.
type modelInfo struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
	// Kind is what the model is sold for, "chat" or "embeddings": the one
	// route that takes it.
	Kind    string       `json:"kind"`
	Pricing modelPricing `json:"pricing"`
}

type modelPricing struct {
	Asset               string `json:"asset"`
	Network             string `json:"network"`
	Decimals            uint8  `json:"decimals"`
	InputPerMTok        string `json:"input_per_million_tokens"`  // atomic units
	OutputPerMTok       string `json:"output_per_million_tokens"` // atomic units
	MaxOutputTokens     int64  `json:"max_output_tokens"`
	MinimumCharge       string `json:"minimum_charge"`
	QuoteForEmptyPrompt string `json:"quote_at_max_output"` // what a one-token prompt at the default cap costs
	Display             string `json:"display"`
	// PayableWith lists every network and asset a call's 402 offers, the
	// primary (Asset, Network) first; the amounts are the same in each.
	PayableWith []payableWith `json:"payable_with"`
}

// payableWith is one network and asset a 402 offers.
type payableWith struct {
	Network string `json:"network"`
	Asset   string `json:"asset"`
}

func (s *Server) modelInfo(m *Model) modelInfo {
	minCharge := pricing.Quote(0, 0, m.Price, s.cfg.Decimals)
	atCap := pricing.Quote(1, m.MaxOutputTokens, m.Price, s.cfg.Decimals)
	owner := m.OwnedBy
	if owner == "" {
		owner = "llm4agents"
	}
	info := modelInfo{
		ID: m.ID, Object: "model", OwnedBy: owner, Kind: "chat",
		Pricing: modelPricing{
			Asset: s.cfg.Asset, Network: s.cfg.Network, Decimals: s.cfg.Decimals,
			InputPerMTok: fmt.Sprint(m.Price.Input), OutputPerMTok: fmt.Sprint(m.Price.Output),
			MaxOutputTokens: m.MaxOutputTokens, MinimumCharge: minCharge.String(), QuoteForEmptyPrompt: atCap.String(),
			Display: fmt.Sprintf("%s %s in / %s %s out per million tokens, rounded up to the cent",
				pricing.FormatAmount(bigU(m.Price.Input), s.cfg.Decimals), s.cfg.AssetSymbol,
				pricing.FormatAmount(bigU(m.Price.Output), s.cfg.Decimals), s.cfg.AssetSymbol),
			PayableWith: s.payableWith,
		},
	}
	if m.Embeddings {
		info.Kind = "embeddings"
		info.Pricing.Display = fmt.Sprintf("%s %s per million input tokens, rounded up to the cent",
			pricing.FormatAmount(bigU(m.Price.Input), s.cfg.Decimals), s.cfg.AssetSymbol)
	}
	return info
}

func (s *Server) listModels(w http.ResponseWriter, r *http.Request) error {
	if err := refusePaymentOnFreeRoute(r); err != nil {
		return err
	}
	list := struct {
		Object string      `json:"object"`
		Data   []modelInfo `json:"data"`
	}{Object: "list", Data: make([]modelInfo, 0, len(s.order))}
	for _, id := range s.order {
		list.Data = append(list.Data, s.modelInfo(s.models[id]))
	}
	writeJSON(w, http.StatusOK, list)
	return nil
}

func (s *Server) getModel(w http.ResponseWriter, r *http.Request) error {
	if err := refusePaymentOnFreeRoute(r); err != nil {
		return err
	}
	m, ok := s.models[r.PathValue("id")]
	if !ok {
		return modelNotFound(r.PathValue("id"))
	}
	writeJSON(w, http.StatusOK, s.modelInfo(m))
	return nil
}

// refusePaymentOnFreeRoute answers 400 to a payment sent where nothing is sold,
// so a buyer learns its mistake and nothing is ever charged.
func refusePaymentOnFreeRoute(r *http.Request) error {
	if r.Header.Get(x402.HeaderPaymentSignature) != "" || r.Header.Get(x402.HeaderLegacyPayment) != "" {
		return &apiError{Status: http.StatusBadRequest, Type: "invalid_request_error", Code: "payment_not_required",
			Message: "this route is free; the payment was not used and nothing was charged"}
	}
	return nil
}

func modelNotFound(id string) *apiError {
	return &apiError{Status: http.StatusNotFound, Type: "invalid_request_error", Code: "model_not_found",
		Message: fmt.Sprintf("the model %q does not exist; GET /v1/models lists the models served here", truncate(id, 100))}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
