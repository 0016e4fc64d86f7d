package credits

import (
	"bytes"
	"crypto/ecdsa"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/accounts"
	"github.com/ethereum/go-ethereum/crypto"

	"github.com/llm4agents/llm4agents/internal/store/sqlite"
)

// testOrigin and testChain are the gateway's configured origin and chain.
const (
	testOrigin = "https://gw.example.com"
	testHost   = "gw.example.com"
	testChain  = 84532
)

// t0 is the tests' fixed now.
var t0 = time.Date(2026, 11, 30, 6, 0, 0, 0, time.UTC)

// testClock is a settable clock, safe for concurrent use.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *testClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// openStore opens a SQLite store on a temporary file, on clk.
func openStore(tb testing.TB, clk *testClock) *sqlite.DB {
	tb.Helper()
	db, err := sqlite.Open(tb.Context(), filepath.Join(tb.TempDir(), "credits.db"), nil)
	if err != nil {
		tb.Fatal(err)
	}
	db.Now = clk.Now
	tb.Cleanup(func() { _ = db.Close() })
	return db
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

// assertNoSecret fails if any of secrets (non-empty) appears in text.
func assertNoSecret(tb testing.TB, where, text string, secrets ...string) {
	tb.Helper()
	for _, s := range secrets {
		if s != "" && strings.Contains(text, s) {
			tb.Errorf("%s contains a secret (%.12q...)", where, s)
		}
	}
}

// newWallet returns a fresh secp256k1 key.
func newWallet(tb testing.TB) *ecdsa.PrivateKey {
	tb.Helper()
	k, err := crypto.GenerateKey()
	if err != nil {
		tb.Fatal(err)
	}
	return k
}

// personalSign signs text as a wallet's personal_sign does (EIP-191), v in
// {27, 28}.
func personalSign(tb testing.TB, k *ecdsa.PrivateKey, text string) []byte {
	tb.Helper()
	sig, err := crypto.Sign(accounts.TextHash([]byte(text)), k)
	if err != nil {
		tb.Fatal(err)
	}
	sig[64] += 27
	return sig
}

// message returns a valid sign-in message for k with nonce, issued at.
func message(k *ecdsa.PrivateKey, nonce string, issued time.Time) *Message {
	return &Message{
		Scheme: "https", Domain: testHost, Address: crypto.PubkeyToAddress(k.PublicKey),
		Statement: "Sign in to manage your llm4agents API keys.", URI: testOrigin + "/", Version: "1",
		ChainID: testChain, Nonce: nonce, IssuedAt: issued,
	}
}
