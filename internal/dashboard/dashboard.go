// Package dashboard serves the gateway's web pages at /dashboard: a wallet
// sign-in, the buyer's view of their account (balance, keys, receipts,
// spend) and the operator's view of the gateway (revenue, settlements,
// signer gas, the receipt log).
//
// The pages are rendered on the server with html/template from files
// embedded in the binary; a little JavaScript signs the sign-in message with
// the browser's wallet (EIP-1193), and everything else is plain HTML forms,
// so the pages work without a CDN or a build step.
//
// A signed-in browser holds its session token in an HttpOnly, SameSite=Strict
// cookie scoped to /dashboard (Secure when the origin is https). Every form
// that changes something carries a CSRF token derived from the session
// token, and every POST must come from the dashboard's own origin.
package dashboard

import (
	"context"
	"crypto/ecdsa"
	"crypto/hmac"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"

	"github.com/llm4agents/llm4agents/internal/credits"
	"github.com/llm4agents/llm4agents/internal/ledger"
	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/x402/receipt"
)

// Path is where the dashboard is served; every page is under it.
const Path = "/dashboard"

// cookieName holds the session token; csrfField is the forms' CSRF member.
const (
	cookieName = "l4a_session"
	csrfField  = "csrf"
)

// storeTimeout bounds the store reads of one page.
const storeTimeout = 5 * time.Second

//go:embed templates/*.html static/*
var assets embed.FS

// Sessions is the wallet sign-in (credits.Auth).
type Sessions interface {
	IssueNonce(ctx context.Context) (string, time.Time, error)
	SignIn(ctx context.Context, text string, sig []byte) (string, store.Session, error)
	Session(ctx context.Context, token string) (store.Session, error)
	SignOut(ctx context.Context, token string) error
}

// KeyManager manages an account's API keys (credits.Handler).
type KeyManager interface {
	Keys(ctx context.Context, owner string) ([]store.APIKey, error)
	CreateKey(ctx context.Context, owner string, req credits.KeyRequest) (string, store.APIKey, error)
	RevokeKey(ctx context.Context, owner, id string) (store.APIKey, error)
	ChangeKey(ctx context.Context, owner, id string, c credits.KeyChange) (store.APIKey, error)
}

// Balances reads an account's credit balance (ledger.Ledger, or
// ledger.Leases when credits are leased).
type Balances interface {
	Balance(ctx context.Context, payer common.Address) (ledger.Balance, error)
}

// ReceiptReader lists an account's receipts (store.Receipts).
type ReceiptReader interface {
	ReceiptsOf(ctx context.Context, q store.ReceiptsQuery) ([]store.StoredReceipt, error)
}

// Config is what the dashboard shows and acts on. Sessions and Origin are
// required; a nil part hides what it would show (no Keys: no key
// management; no Balances: no credit balance).
type Config struct {
	// Origin is the gateway's public origin (scheme://host[:port]), the one
	// sign-in messages name; POSTs must come from it.
	Origin  string
	ChainID uint64

	Sessions Sessions
	Keys     KeyManager
	Balances Balances
	// KeyUsage reads what a key has spent and holds (the ledger's
	// bookkeeping its caps are enforced by); nil shows each key's spend
	// among the receipts on the page.
	KeyUsage func(ctx context.Context, k store.APIKey) (store.KeyUsage, error)
	Receipts ReceiptReader
	// Verify checks a stored receipt's signature and its place in the
	// receipt log (NewVerifier); nil shows receipts unchecked.
	// It gets the receipt as parsed from its stored envelope, and prove
	// for the receipts whose log inclusion the page shows.
	Verify func(ctx context.Context, requestID string, r *receipt.Receipt, sig []byte, prove bool) Verification

	// Admins may see the operator view (the payee, pay_to, among them).
	Admins []common.Address
	// Settlements are the in-process facilitator's settlement records: the
	// transactions of on-chain payments, and the operator's revenue and
	// pending settlements. Nil with a remote facilitator.
	Settlements Settlements
	// AllReceipts lists every account's recent receipts, for the operator's
	// charges by rail and tokens by model; nil hides them.
	AllReceipts AllReceipts
	// Asset is the payment asset's contract (it names settlements).
	Asset common.Address
	// Metrics is the gateway's metrics registry, which the operator view
	// reads its counters from; nil shows none.
	Metrics prometheus.Gatherer
	// ReceiptLog is the receipt log, for its latest checkpoint and anchor;
	// nil when the gateway keeps none.
	ReceiptLog LogReader
	// SignerLowGwei is the facilitator signer's balance, in gwei, below
	// which the operator view warns; 0 means 1,000,000 (0.001 ETH).
	SignerLowGwei int64

	// Asset describes amounts: symbol and decimals of the payment asset.
	AssetSymbol string
	Decimals    uint8
	// Network is the CAIP-2 network payments settle on; TxURL, when set, is
	// a block explorer's transaction URL with %s for the hash.
	Network string
	TxURL   string

	// DemoAccounts are wallets whose keys the gateway itself holds: the
	// public dev keys of `demo`'s simulated chain. The sign-in page offers
	// to sign in as each of them without a browser wallet, so that someone
	// trying the demo sees their calls at once. Only `demo` sets them,
	// never `serve`.
	DemoAccounts []DemoAccount

	// SignInsPerMinute bounds the sign-in attempts (nonces and
	// signatures) this replica takes per minute; 0 means 600.
	SignInsPerMinute int

	Log *slog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// DemoAccount is a wallet of the demo the server signs in for.
type DemoAccount struct {
	Label string // e.g. "the demo buyer"
	Key   *ecdsa.PrivateKey
}

// Handler serves the dashboard. Create it with New.
type Handler struct {
	cfg     Config
	host    string
	secure  bool
	log     *slog.Logger
	pages   map[string]*template.Template
	static  http.Handler
	signIns *rate.Limiter
	mux     *http.ServeMux
}

// New returns the dashboard handler of cfg.
func New(cfg Config) (*Handler, error) {
	u, err := url.Parse(cfg.Origin)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("dashboard: origin %q is not http(s)://host[:port]", cfg.Origin)
	}
	if cfg.Sessions == nil {
		return nil, errors.New("dashboard: no sign-in")
	}
	if cfg.ChainID == 0 {
		return nil, errors.New("dashboard: chain id is zero")
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.SignInsPerMinute <= 0 {
		cfg.SignInsPerMinute = 600
	}
	if cfg.SignerLowGwei <= 0 {
		cfg.SignerLowGwei = 1_000_000
	}
	if cfg.AssetSymbol == "" {
		cfg.AssetSymbol = "USDC"
	}
	pages, err := parsePages()
	if err != nil {
		return nil, err
	}
	static, err := fs.Sub(assets, "static")
	if err != nil {
		return nil, fmt.Errorf("dashboard: static assets: %w", err)
	}
	h := &Handler{
		cfg: cfg, host: strings.ToLower(u.Host), secure: u.Scheme == "https",
		log: cfg.Log.With("component", "dashboard"), pages: pages,
		static:  http.StripPrefix(Path+"/static/", http.FileServerFS(static)),
		signIns: rate.NewLimiter(rate.Limit(float64(cfg.SignInsPerMinute)/60), cfg.SignInsPerMinute),
	}
	h.routes()
	return h, nil
}

func (h *Handler) routes() {
	m := http.NewServeMux()
	m.HandleFunc("GET "+Path, h.page(h.buyer))
	m.HandleFunc("GET "+Path+"/{$}", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, Path, http.StatusMovedPermanently)
	})
	m.HandleFunc("GET "+Path+"/operator", h.page(h.operator))
	m.Handle("GET "+Path+"/static/", h.static)
	m.HandleFunc("POST "+Path+"/nonce", h.api(h.nonce))
	m.HandleFunc("POST "+Path+"/signin", h.api(h.signIn))
	m.HandleFunc("POST "+Path+"/logout", h.form(h.logout))
	if len(h.cfg.DemoAccounts) > 0 {
		m.HandleFunc("POST "+Path+"/demo-signin", h.demoSignIn)
	}
	m.HandleFunc("POST "+Path+"/keys", h.form(h.createKey))
	m.HandleFunc("POST "+Path+"/keys/{id}/revoke", h.form(h.revokeKey))
	m.HandleFunc("POST "+Path+"/keys/{id}/limits", h.form(h.changeKey))
	m.HandleFunc(Path+"/", h.notFound)
	h.mux = m
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	// No page of the dashboard may be framed, sniffed or cached, and its
	// pages run only their own scripts.
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Referrer-Policy", "same-origin")
	hd.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'")
	h.mux.ServeHTTP(w, r)
}

// Settlements reads the in-process facilitator's settlement records
// (store.Settlements).
type Settlements interface {
	Settlement(ctx context.Context, key string) (store.Settlement, error)
	RecentSettlements(ctx context.Context, network string, since time.Time, limit int) ([]store.Settlement, error)
	UnresolvedSettlements(ctx context.Context, network string, limit int) ([]store.Settlement, error)
}

// AllReceipts lists the receipts of every account (store.RecentReceipts).
type AllReceipts interface {
	RecentReceipts(ctx context.Context, since time.Time, limit int) ([]store.StoredReceipt, error)
}

// LogReader reads the receipt log's state (receiptlog.Log).
type LogReader interface {
	Checkpoint(ctx context.Context) ([]byte, error)
	Anchors(ctx context.Context, limit int) ([]receipt.Anchor, error)
}

// account is who a request is signed in as.
type account struct {
	Owner   string // lower-case 0x address
	Address common.Address
	Token   string // the session token: never rendered, only its CSRF derivative
	Expires time.Time
	Admin   bool
}

// signedIn returns r's session, or false when r carries none that is valid.
func (h *Handler) signedIn(r *http.Request) (account, bool, error) {
	c, err := r.Cookie(cookieName)
	if err != nil || c.Value == "" {
		return account{}, false, nil
	}
	ctx, cancel := context.WithTimeout(r.Context(), storeTimeout)
	defer cancel()
	s, err := h.cfg.Sessions.Session(ctx, c.Value)
	switch {
	case errors.Is(err, credits.ErrNoSession):
		return account{}, false, nil
	case err != nil:
		return account{}, false, err
	}
	a := account{Owner: s.Owner, Address: common.HexToAddress(s.Owner), Token: c.Value, Expires: s.ExpiresAt}
	a.Admin = slices.Contains(h.cfg.Admins, a.Address)
	return a, true, nil
}

// csrf is the CSRF token of a session: an HMAC of a fixed label under the
// session token, so it needs no storage, dies with the session, and cannot
// be computed without the token (which the HttpOnly cookie keeps from
// scripts).
func csrf(token string) string {
	m := hmac.New(sha256.New, []byte(token))
	m.Write([]byte("llm4agents dashboard csrf v1"))
	return hex.EncodeToString(m.Sum(nil))
}

// sameOrigin reports whether a state-changing request came from the
// dashboard's own pages: its Origin header, or failing that its Referer, is
// the configured origin, and the browser did not mark it cross-site.
func (h *Handler) sameOrigin(r *http.Request) bool {
	if s := r.Header.Get("Sec-Fetch-Site"); s != "" && s != "same-origin" && s != "none" {
		return false
	}
	from := r.Header.Get("Origin")
	if from == "" {
		ref, err := url.Parse(r.Header.Get("Referer"))
		if err != nil || ref.Host == "" {
			return false
		}
		from = ref.Scheme + "://" + ref.Host
	}
	return strings.EqualFold(from, h.cfg.Origin)
}

// The session cookie is Secure when the sign-in origin is https: over a
// plain-http origin (a laptop's demo at 127.0.0.1) a Secure cookie would
// never be sent back.
func (h *Handler) setSession(w http.ResponseWriter, token string, expires time.Time) {
	http.SetCookie(w, &http.Cookie{ // #nosec G124 -- Secure follows the origin's scheme, above
		Name: cookieName, Value: token, Path: Path, Expires: expires,
		HttpOnly: true, Secure: h.secure, SameSite: http.SameSiteStrictMode,
	})
}

func (h *Handler) clearSession(w http.ResponseWriter) {
	http.SetCookie(w, &http.Cookie{ // #nosec G124 -- as setSession
		Name: cookieName, Value: "", Path: Path, MaxAge: -1,
		HttpOnly: true, Secure: h.secure, SameSite: http.SameSiteStrictMode,
	})
}
