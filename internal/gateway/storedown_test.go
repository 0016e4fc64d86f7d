package gateway_test

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llm4agents/llm4agents/internal/chain"
	"github.com/llm4agents/llm4agents/internal/facilitator"
	"github.com/llm4agents/llm4agents/internal/gateway"
	"github.com/llm4agents/llm4agents/internal/store/redis"
	"github.com/llm4agents/llm4agents/internal/store/sqlite"
	"github.com/llm4agents/llm4agents/internal/testchain"
	"github.com/llm4agents/llm4agents/internal/testdb"
	"github.com/llm4agents/llm4agents/internal/upstream"
	"github.com/llm4agents/llm4agents/internal/upstream/upstreamtest"
	"github.com/llm4agents/llm4agents/x402"
)

// TestStoreDownFailsClosed: the gateway's claims live in a real Redis reached
// through a TCP proxy the test can cut or stall. While the store cannot be
// reached, a paid request is a 503 store_unavailable with a log line, the
// upstream is never called and nothing moves on chain; once it is back, the
// same payment buys its answer (nothing was consumed by the outage).
func TestStoreDownFailsClosed(t *testing.T) {
	e, proxy, logs := newStoreDownEnv(t, testdb.Server(t, testdb.RedisEnv))

	for _, tc := range []struct {
		name  string
		fault func()
	}{
		{"refused", proxy.Cut},
		{"stalled", proxy.Stall},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := e.signedHeader(t, chatBody, buyerIdx)
			before := e.chain.BalanceOf(t, e.chain.Addr(payToIdx))
			calls := e.up.Calls()

			tc.fault()
			began := time.Now()
			resp := e.post(t, http.DefaultClient, chatBody, http.Header{x402.HeaderPaymentSignature: {h}})
			b := readAll(t, resp)
			if resp.StatusCode != http.StatusServiceUnavailable || errorCode(t, b) != "store_unavailable" {
				t.Fatalf("with the store %s: %d %s, want 503 store_unavailable", tc.name, resp.StatusCode, b)
			}
			if took := time.Since(began); took > 15*time.Second {
				t.Errorf("the refusal took %s: a slow store must not hold requests past its timeout", took)
			}
			if e.up.Calls() != calls {
				t.Errorf("upstream called %d times without a durable claim", e.up.Calls()-calls)
			}
			if !strings.Contains(logs.String(), "store_unavailable") {
				t.Errorf("no log line names the store failure:\n%s", logs)
			}
			if strings.Contains(logs.String(), h) {
				t.Error("the payment header was logged")
			}

			proxy.Restore()
			resp = e.post(t, http.DefaultClient, chatBody, http.Header{x402.HeaderPaymentSignature: {h}})
			b = readAll(t, resp)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("the same payment once the store is back: %d %s, want 200", resp.StatusCode, b)
			}
			if e.up.Calls() != calls+1 {
				t.Errorf("upstream calls = %d, want %d", e.up.Calls()-calls, 1)
			}
			if got := new(big.Int).Sub(e.chain.BalanceOf(t, e.chain.Addr(payToIdx)), before); got.Int64() != 10000 {
				t.Errorf("payTo received %s, want exactly one payment of 10000", got)
			}
		})
	}
}

// newStoreDownEnv is newEnv with the gateway's claims in Redis behind a proxy
// (the facilitator's records stay in SQLite) and its logs in a buffer.
func newStoreDownEnv(t *testing.T, redisURL string) (*env, *faultProxy, *syncBuffer) {
	t.Helper()
	u, err := (&urlParts{}).parse(redisURL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := newFaultProxy(t, u.host)
	// A fresh prefix, its keys deleted on the server itself (not through
	// the proxy) when the test ends.
	_, prefix := testdb.RedisPrefix(t, "storedown")
	payments, err := redis.Open(t.Context(), u.withHost(proxy.Addr())+"?key_prefix="+prefix, discard())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = payments.Close() })

	sim := testchain.NewSimulated(t)
	sim.StartAutoCommit(t, 10*time.Millisecond)
	db, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "fac.db"), discard())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	sender, err := chain.NewSender(sim.Client, sim.Keys[signerIdx], sim.ChainID,
		chain.SenderConfig{MaxFeePerGas: big.NewInt(1e12), PollInterval: 10 * time.Millisecond}, discard())
	if err != nil {
		t.Fatal(err)
	}
	fac, err := facilitator.New(facilitator.Config{
		Network: network,
		Assets:  []facilitator.Asset{{Address: sim.Token, Name: "USD Coin", Version: "2"}},
	}, sim.Client, sender, db, discard())
	if err != nil {
		t.Fatal(err)
	}
	up := upstreamtest.NewServer(t, upstreamtest.Config{APIKey: "sk-upstream-secret"})
	prov, err := upstream.NewOpenAI(upstream.OpenAIConfig{BaseURL: up.URL(), APIKey: "sk-upstream-secret", Timeout: 5 * time.Second}, discard())
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	e := &env{db: db, chain: sim, up: up}
	e.srv = httptest.NewUnstartedServer(nil)
	gw, err := gateway.New(gateway.Config{
		PublicURL: "http://" + e.srv.Listener.Addr().String(),
		Network:   network, Asset: sim.Token.Hex(), AssetName: "USD Coin", AssetVersion: "2", Decimals: 6,
		PayTo: sim.Addr(payToIdx).Hex(), UpstreamTimeout: 5 * time.Second, SettleTimeout: 10 * time.Second,
		Models: []gateway.Model{{ID: "demo", UpstreamModel: "demo-upstream", Provider: prov, Price: price, MaxOutputTokens: 256}},
	}, fac, payments, slog.New(slog.NewJSONHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	e.gw = gw
	e.srv.Config.Handler = gw
	e.srv.Start()
	t.Cleanup(e.srv.Close)
	return e, proxy, logs
}

// urlParts splits a redis:// URL around its host:port.
type urlParts struct{ scheme, userinfo, host, rest string }

func (u *urlParts) parse(raw string) (*urlParts, error) {
	scheme, after, ok := strings.Cut(raw, "://")
	if !ok {
		return nil, errors.New("not a URL")
	}
	u.scheme = scheme
	if at := strings.LastIndex(after, "@"); at >= 0 {
		u.userinfo, after = after[:at+1], after[at+1:]
	}
	u.host, u.rest = after, ""
	if i := strings.IndexAny(after, "/?"); i >= 0 {
		u.host, u.rest = after[:i], after[i:]
	}
	// The test adds its own query; keep only the path (the database number).
	u.rest, _, _ = strings.Cut(u.rest, "?")
	return u, nil
}

func (u *urlParts) withHost(host string) string {
	return u.scheme + "://" + u.userinfo + host + u.rest
}

// faultProxy forwards TCP connections to a backend until told to refuse them
// (Cut: every connection closed at once, new ones refused) or to stall them
// (Stall: connections accepted, nothing forwarded either way).
type faultProxy struct {
	ln      net.Listener
	backend string

	mu    sync.Mutex
	mode  string // "", "cut" or "stall"
	conns map[net.Conn]struct{}
}

func newFaultProxy(t *testing.T, backend string) *faultProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &faultProxy{ln: ln, backend: backend, conns: map[net.Conn]struct{}{}}
	var wg sync.WaitGroup
	wg.Go(p.serve)
	t.Cleanup(func() {
		_ = ln.Close()
		p.closeAll()
		wg.Wait()
	})
	return p
}

func (p *faultProxy) Addr() string { return p.ln.Addr().String() }

func (p *faultProxy) Cut()     { p.set("cut") }
func (p *faultProxy) Stall()   { p.set("stall") }
func (p *faultProxy) Restore() { p.set("") }

// set changes the mode and drops every open connection, so the client's pool
// meets the new mode on its next command.
func (p *faultProxy) set(mode string) {
	p.mu.Lock()
	p.mode = mode
	p.mu.Unlock()
	p.closeAll()
}

func (p *faultProxy) closeAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		_ = c.Close()
		delete(p.conns, c)
	}
}

func (p *faultProxy) track(c net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.conns[c] = struct{}{}
}

func (p *faultProxy) serve() {
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		mode := p.mode
		p.mu.Unlock()
		switch mode {
		case "cut":
			_ = c.Close()
			continue
		case "stall":
			p.track(c) // held open, never answered, closed by the next mode change
			continue
		}
		b, err := net.Dial("tcp", p.backend)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.track(c)
		p.track(b)
		wg.Go(func() { _, _ = io.Copy(b, c); _ = b.Close() })
		wg.Go(func() { _, _ = io.Copy(c, b); _ = c.Close() })
	}
}

// syncBuffer is a bytes.Buffer safe for a logger's concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
