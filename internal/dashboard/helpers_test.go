package dashboard

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"math/big"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/ethereum/go-ethereum/accounts"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"

	"github.com/llm4agents/llm4agents/internal/credits"
	"github.com/llm4agents/llm4agents/internal/ledger"
	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/internal/store/sqlite"
	"github.com/llm4agents/llm4agents/x402/receipt"
)

const (
	testChain   = 84532
	testNetwork = "eip155:84532"
	testAsset   = "0x036CbD53842c5426634e7929541eC8318dAE7dC3"
)

// fixture is a dashboard on a real SQLite store, with the real sign-in,
// key handler, ledger and receipt signer, served over HTTP.
type fixture struct {
	db     *sqlite.DB
	auth   *credits.Auth
	keys   *credits.Handler
	led    *ledger.Ledger
	signer *credits.Signer
	h      *Handler
	srv    *httptest.Server
	origin string
	logs   *logBuffer
	admin  *ecdsa.PrivateKey
}

// newFixture starts a dashboard; adjust, when set, changes its config
// before it is built.
func newFixture(t testing.TB, adjust func(*Config)) *fixture {
	t.Helper()
	f := &fixture{logs: &logBuffer{}}
	db, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "dash.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	f.db = db
	f.srv = httptest.NewUnstartedServer(nil)
	f.origin = "http://" + f.srv.Listener.Addr().String()
	log := f.logs.logger()
	if f.auth, err = credits.NewAuth(db, f.origin, testChain, log); err != nil {
		t.Fatal(err)
	}
	f.keys = credits.NewHandler(f.auth, db, log)
	if f.led, err = ledger.New(db, ledger.Config{Asset: ledger.AssetID(testNetwork, common.HexToAddress(testAsset))}, log); err != nil {
		t.Fatal(err)
	}
	sk, _ := crypto.GenerateKey()
	if f.signer, err = credits.NewSigner(sk, big.NewInt(testChain)); err != nil {
		t.Fatal(err)
	}
	f.admin, _ = crypto.GenerateKey()
	cfg := Config{
		Origin: f.origin, ChainID: testChain, Sessions: f.auth, Keys: f.keys, Balances: f.led, Receipts: db,
		Verify: NewVerifier(f.signer.Address(), f.signer.Domain(), nil, nil),
		Admins: []common.Address{crypto.PubkeyToAddress(f.admin.PublicKey)},
		KeyUsage: func(ctx context.Context, k store.APIKey) (store.KeyUsage, error) {
			return f.led.KeyUsage(ctx, *ledger.KeyOf(k))
		},
		Settlements: db, AllReceipts: db, Asset: common.HexToAddress(testAsset),
		AssetSymbol: "USDC", Decimals: 6, Network: testNetwork, TxURL: "https://explorer.example/tx/%s", Log: log,
	}
	if adjust != nil {
		adjust(&cfg)
	}
	if f.h, err = New(cfg); err != nil {
		t.Fatal(err)
	}
	f.srv.Config.Handler = f.h
	f.srv.Start()
	t.Cleanup(f.srv.Close)
	return f
}

// browser is a client with a cookie jar that sends what a browser sends
// from the dashboard's own pages (Origin), unless told otherwise.
type browser struct {
	t      testing.TB
	f      *fixture
	c      *http.Client
	origin string // the Origin header sent with POSTs; "" sends none
}

func (f *fixture) browser(t *testing.T) *browser { return f.benchBrowser(t) }

// benchBrowser is browser for a benchmark or a test.
func (f *fixture) benchBrowser(t testing.TB) *browser {
	jar, _ := cookiejar.New(nil)
	return &browser{t: t, f: f, origin: f.origin, c: &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	}}}
}

// answer is what a test reads of a response besides its status and body.
type answer struct {
	Header  http.Header
	Cookies []*http.Cookie
}

// do sends a request and returns the status, body and the rest.
func (b *browser) do(method, path, contentType string, body io.Reader) (int, string, answer) {
	b.t.Helper()
	req, err := http.NewRequestWithContext(b.t.Context(), method, b.f.srv.URL+path, body)
	if err != nil {
		b.t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if b.origin != "" && method == http.MethodPost {
		req.Header.Set("Origin", b.origin)
	}
	resp, err := b.c.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		b.t.Fatal(err)
	}
	return resp.StatusCode, string(out), answer{Header: resp.Header, Cookies: resp.Cookies()}
}

func (b *browser) get(path string) (int, string) {
	b.t.Helper()
	status, body, _ := b.do(http.MethodGet, path, "", nil)
	return status, body
}

func (b *browser) postJSON(path string, v any) (int, string, answer) {
	b.t.Helper()
	body, _ := json.Marshal(v)
	return b.do(http.MethodPost, path, "application/json", bytes.NewReader(body))
}

func (b *browser) postForm(path string, v url.Values) (int, string) {
	b.t.Helper()
	status, body, _ := b.do(http.MethodPost, path, "application/x-www-form-urlencoded", strings.NewReader(v.Encode()))
	return status, body
}

// signIn signs in with key as the page's script does; it fails the test
// unless the gateway set a session cookie.
func (b *browser) signIn(key *ecdsa.PrivateKey) {
	b.t.Helper()
	status, body, _ := b.postJSON(Path+"/nonce", map[string]string{"address": crypto.PubkeyToAddress(key.PublicKey).Hex()})
	if status != http.StatusOK {
		b.t.Fatalf("nonce: %d %s", status, body)
	}
	var m struct{ Message string }
	if err := json.Unmarshal([]byte(body), &m); err != nil {
		b.t.Fatal(err)
	}
	status, body, resp := b.postJSON(Path+"/signin", map[string]string{"message": m.Message, "signature": personalSign(b.t, key, m.Message)})
	if status != http.StatusNoContent {
		b.t.Fatalf("sign-in: %d %s", status, body)
	}
	if len(resp.Cookies) != 1 {
		b.t.Fatalf("sign-in set %d cookies, want 1", len(resp.Cookies))
	}
}

// signedIn returns a browser signed in as a new account, the account, and
// the CSRF token of its session.
func (f *fixture) signedIn(t *testing.T) (b *browser, owner, token string) {
	t.Helper()
	key, _ := crypto.GenerateKey()
	b = f.browser(t)
	b.signIn(key)
	_, page := b.get(Path)
	return b, strings.ToLower(crypto.PubkeyToAddress(key.PublicKey).Hex()), csrfToken(t, page)
}

// csrfToken reads the CSRF token from a page.
func csrfToken(t *testing.T, page string) string {
	t.Helper()
	_, rest, ok := strings.Cut(page, `name="csrf" value="`)
	if !ok {
		t.Fatalf("no CSRF token on the page:\n%s", page)
	}
	token, _, _ := strings.Cut(rest, `"`)
	return token
}

func personalSign(t testing.TB, key *ecdsa.PrivateKey, text string) string {
	t.Helper()
	sig, err := crypto.Sign(accounts.TextHash([]byte(text)), key)
	if err != nil {
		t.Fatal(err)
	}
	sig[64] += 27
	return "0x" + hex.EncodeToString(sig)
}

// putReceipt keeps a signed credits receipt for owner.
func (f *fixture) putReceipt(t testing.TB, owner common.Address, keyID, model string, amount int64, seq int64, issued uint64) string {
	t.Helper()
	r := receipt.Receipt{Model: model, InputTokens: big.NewInt(12), OutputTokens: big.NewInt(34), Amount: big.NewInt(amount),
		BalanceAfter: big.NewInt(0), LedgerSeq: big.NewInt(seq), IssuedAt: issued, Rail: receipt.RailCredits}
	if keyID != "" {
		r.KeyID = common.HexToHash(keyID)
	}
	return f.putSigned(t, owner, keyID, seq, r)
}

// putSigned signs r for owner and keeps it: the request id is drawn, and
// seq 0 lets the store draw the receipt's place.
func (f *fixture) putSigned(t testing.TB, owner common.Address, keyID string, seq int64, r receipt.Receipt) string {
	t.Helper()
	var id common.Hash
	if _, err := rand.Read(id[:]); err != nil {
		t.Fatal(err)
	}
	r.RequestID, r.Account = id, owner
	sr, err := f.signer.Sign(r)
	if err != nil {
		t.Fatal(err)
	}
	env, err := sr.JSON()
	if err != nil {
		t.Fatal(err)
	}
	reqID := strings.TrimPrefix(id.Hex(), "0x")
	if err := f.db.PutReceipt(t.Context(), store.StoredReceipt{RequestID: reqID, Owner: strings.ToLower(owner.Hex()), KeyID: keyID, Seq: seq, Envelope: env}); err != nil {
		t.Fatal(err)
	}
	return reqID
}

// logBuffer collects log output, to check that no secret reaches it.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func (l *logBuffer) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func httptestRecorder() *httptest.ResponseRecorder { return httptest.NewRecorder() }

func strconvQuote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func keyRequestNamed(name string) credits.KeyRequest { return credits.KeyRequest{Name: name} }
