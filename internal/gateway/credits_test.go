package gateway_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base32"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/big"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"

	"github.com/llm4agents/llm4agents/internal/chat"
	"github.com/llm4agents/llm4agents/internal/credits"
	"github.com/llm4agents/llm4agents/internal/gateway"
	"github.com/llm4agents/llm4agents/internal/ledger"
	"github.com/llm4agents/llm4agents/internal/pricing"
	"github.com/llm4agents/llm4agents/internal/receiptlog"
	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/internal/store/postgres"
	"github.com/llm4agents/llm4agents/internal/store/sqlite"
	"github.com/llm4agents/llm4agents/internal/testdb"
	"github.com/llm4agents/llm4agents/internal/upstream"
	"github.com/llm4agents/llm4agents/internal/upstream/upstreamtest"
	"github.com/llm4agents/llm4agents/x402"
	"github.com/llm4agents/llm4agents/x402/receipt"
)

var (
	creditToken = common.HexToAddress("0x036CbD53842c5426634e7929541eC2318f3dCF7e")
	alice       = common.HexToAddress("0x857B06519E91e3A54538791bDbb0E22373e36b66")
	bob         = common.HexToAddress("0x2546BcD3c84621e976D8185a91A922aE77ECEc30")
)

// creditStore is what the credit path needs of a store: both SQLite and
// PostgreSQL are one.
type creditStore interface {
	store.Ledger
	store.Leases
	store.Keys
	store.Rates
	store.Receipts
	store.Payments
}

// creditBackend opens a fresh, empty store of one kind for one test, closed
// when the test ends.
type creditBackend struct {
	name string
	open func(tb testing.TB, log *slog.Logger) creditStore
	// leased serves credit calls from leases (credits.durability: leased);
	// otherwise every hold and capture is written before the answer.
	leased bool
	// keyCache is credits.key_cache: how long a key looked up is kept.
	keyCache time.Duration
	// watchKeys drops a key from the cache when the store tells of its
	// change (WatchKeys), as serve does with a key cache.
	watchKeys bool
}

// creditBackends are the stores the credit tests run on (SQLite and
// PostgreSQL). PostgreSQL is skipped when LLM4AGENTS_TEST_POSTGRES_DSN is
// unset, unless LLM4AGENTS_TEST_REQUIRE_BACKENDS=1.
var creditBackends = []creditBackend{
	{name: "sqlite", open: openCreditSQLite},
	{name: "postgres", open: openCreditPostgres},
	{name: "sqlite-leased", open: openCreditSQLite, leased: true},
	{name: "postgres-leased", open: openCreditPostgres, leased: true},
}

// eachCreditBackend runs f once per backend, as subtests named after it.
func eachCreditBackend(t *testing.T, f func(t *testing.T, b creditBackend)) {
	t.Helper()
	for _, b := range creditBackends {
		t.Run(b.name, func(t *testing.T) { f(t, b) })
	}
}

func openCreditSQLite(t testing.TB, log *slog.Logger) creditStore {
	t.Helper()
	db, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "credits.db"), log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := db.Close(); err != nil {
			t.Error(err)
		}
	})
	return db
}

// openCreditPostgres opens the store on a schema of its own on the test
// server, dropped when the test ends, so tests never see each other's rows.
func openCreditPostgres(t testing.TB, log *slog.Logger) creditStore {
	t.Helper()
	// The schema's drop, registered first, runs after the store is closed.
	db, err := postgres.Open(t.Context(), testdb.PostgresDSN(t, "gw"), log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := db.Close(); err != nil {
			t.Error(err)
		}
	})
	return db
}

// creditEnv is a gateway with prepaid credits on a fresh store of one backend
// (ledger, keys, receipts), the real ledger, key checks and receipt signer,
// and the fake OpenAI upstream. No chain: nothing on the credit path touches
// one.
type creditEnv struct {
	db     creditStore
	leases *ledger.Leases // nil unless the backend is leased
	up     *upstreamtest.Server
	srv    *httptest.Server
	led    *ledger.Ledger
	signer *credits.Signer
}

type creditOpts struct {
	// backend is the store to run on; required.
	backend creditBackend
	// wrap wraps the ledger store, to inject faults.
	wrap func(store.Ledger) store.Ledger
	demo upstream.DemoConfig
	log  *slog.Logger
	// receiptLog, when set, is the gateway's receipt log (on db).
	receiptLog func(db creditStore) *receiptlog.Log
	// receipts, when set, wraps the store the gateway keeps receipts in, to
	// inject faults.
	receipts func(db creditStore) creditStore
	// provider, when set, is what serves the model in place of the fake
	// upstream's provider, given it.
	provider func(up gateway.Provider) gateway.Provider
}

func newCreditEnv(t *testing.T, o creditOpts) *creditEnv {
	t.Helper()
	log := o.log
	if log == nil {
		log = discard()
	}
	if o.backend.open == nil {
		t.Fatal("creditOpts.backend is unset")
	}
	db := o.backend.open(t, log)
	var ls store.Ledger = db
	if o.wrap != nil {
		ls = o.wrap(db)
	}
	up := upstreamtest.NewServer(t, upstreamtest.Config{APIKey: "sk-upstream-secret", Demo: o.demo})
	prov, err := upstream.NewOpenAI(upstream.OpenAIConfig{BaseURL: up.URL(), APIKey: "sk-upstream-secret", Timeout: 5 * time.Second}, log)
	if err != nil {
		t.Fatal(err)
	}
	var rl *receiptlog.Log
	if o.receiptLog != nil {
		rl = o.receiptLog(db)
	}
	var gwProv gateway.Provider = prov
	if o.provider != nil {
		gwProv = o.provider(prov)
	}
	gwdb := db
	if o.receipts != nil {
		gwdb = o.receipts(db)
	}
	srv, led, signer, leases := newCreditGateway(t, gwdb, ls, gwProv, rl, log, o.backend)
	return &creditEnv{db: db, leases: leases, up: up, srv: srv, led: led, signer: signer}
}

// sync writes every leased call's draw and closes every idle lease, so the
// store's books show every charge; a no-op without leases.
func (e *creditEnv) sync(t *testing.T) {
	t.Helper()
	if e.leases != nil && !e.leases.Quiesce(t.Context()) {
		t.Log("a lease with calls in flight stays open")
	}
}

// newCreditGateway starts a gateway serving the model "demo" from prov (and
// "embed", embedModel, when prov serves embeddings), with
// credits on db (its ledger on ls, which may wrap db) and a fresh receipt
// key, and rl as its receipt log when not nil, and returns the running
// server, its ledger, its receipt signer and, when leased, its leases
// (running until the test ends).
func newCreditGateway(tb testing.TB, db creditStore, ls store.Ledger, prov gateway.Provider, rl *receiptlog.Log, log *slog.Logger,
	be creditBackend) (*httptest.Server, *ledger.Ledger, *credits.Signer, *ledger.Leases) {
	tb.Helper()
	led, err := ledger.New(ls, ledger.Config{Asset: ledger.AssetID(network, creditToken)}, log)
	if err != nil {
		tb.Fatal(err)
	}
	var leases *ledger.Leases
	if be.leased {
		leases = startTestLeases(tb, led, leaseStore{Ledger: ls, Leases: db})
	}
	key, err := crypto.GenerateKey()
	if err != nil {
		tb.Fatal(err)
	}
	signer, err := credits.NewSigner(key, big.NewInt(1337))
	if err != nil {
		tb.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(nil)
	origin := "http://" + srv.Listener.Addr().String()
	auth, err := credits.NewAuth(db, origin, 1337, log)
	if err != nil {
		tb.Fatal(err)
	}
	keys := credits.NewKeys(db, log)
	keys.CacheTTL = be.keyCache
	account := credits.NewHandler(auth, db, log)
	account.KeyChanged = keys.Forget
	if be.watchKeys {
		watchTestKeys(tb, db, keys)
	}
	models := []gateway.Model{{ID: "demo", UpstreamModel: "demo-upstream", Provider: prov, Price: price, MaxOutputTokens: 256}}
	if _, ok := prov.(upstream.Embedder); ok {
		models = append(models, embedModel(prov))
	}
	gw, err := gateway.New(gateway.Config{
		PublicURL: origin, Network: network, Asset: creditToken.Hex(), AssetName: "USD Coin", AssetVersion: "2", Decimals: 6,
		PayTo: bob.Hex(), UpstreamTimeout: 5 * time.Second, SettleTimeout: 10 * time.Second,
		Models: models,
		Credits: &gateway.Credits{
			Ledger: led, Keys: keys, Auth: auth, Account: account,
			Signer: signer, Receipts: db, Leases: leases,
		},
		Log: rl,
	}, nil, db, log)
	if err != nil {
		tb.Fatal(err)
	}
	srv.Config.Handler = gw
	srv.Start()
	tb.Cleanup(srv.Close)
	return srv, led, signer, leases
}

// leaseStore is the store leases use: holds through the (maybe wrapped)
// ledger, draws on the store itself.
type leaseStore struct {
	store.Ledger
	store.Leases
}

// startTestLeases starts leases on st with a short flush interval, runs them
// until the test ends, and then writes and closes them.
func startTestLeases(tb testing.TB, led *ledger.Ledger, st leaseStore) *ledger.Leases {
	tb.Helper()
	ls, err := led.NewLeases(st, ledger.LeaseConfig{Replica: "test", Window: 2 * time.Second, TTL: time.Hour}, nil)
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); ls.Run(ctx) }()
	tb.Cleanup(func() {
		cancel()
		<-done
		cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer ccancel()
		if err := ls.Close(cctx); err != nil {
			tb.Error(err)
		}
	})
	return ls
}

// receiptCount is how many receipts a has.
func (e *creditEnv) receiptCount(t *testing.T, a common.Address) int {
	t.Helper()
	e.sync(t)
	recs, err := e.db.ReceiptsOf(t.Context(), store.ReceiptsQuery{Owner: ownerOf(a), Limit: store.MaxReceiptsPage})
	if err != nil {
		t.Fatal(err)
	}
	return len(recs)
}

func ownerOf(a common.Address) string { return strings.ToLower(a.Hex()) }

// topUp credits a with amount atomic units.
func (e *creditEnv) topUp(t *testing.T, a common.Address, amount int64) {
	t.Helper()
	if _, err := e.led.TopUp(t.Context(), "test-topup:"+ownerOf(a)+fmt.Sprint(amount), a, big.NewInt(amount)); err != nil {
		t.Fatal(err)
	}
}

// newKey stores a key of a without caps, changed by mod, and returns its
// secret and record.
func (e *creditEnv) newKey(t *testing.T, a common.Address, mod func(*store.APIKey)) (string, store.APIKey) {
	t.Helper()
	secret, id, err := credits.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	k := store.APIKey{ID: id, Hash: credits.HashSecret(secret), Owner: ownerOf(a), TotalCap: store.NoCap, PeriodCap: store.NoCap}
	if mod != nil {
		mod(&k)
	}
	k, err = e.db.CreateKey(t.Context(), k)
	if err != nil {
		t.Fatal(err)
	}
	return secret, k
}

// sessionToken returns a well-formed session token, not stored.
func sessionToken() string {
	var b [32]byte
	_, _ = rand.Read(b[:])
	return credits.SessionPrefix + base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding).EncodeToString(b[:])
}

// newSession stores a sign-in session of a and returns its token.
func (e *creditEnv) newSession(t *testing.T, a common.Address) string {
	t.Helper()
	tok := sessionToken()
	if _, err := e.db.CreateSession(t.Context(), credits.HashSecret(tok), ownerOf(a), 10*time.Minute); err != nil {
		t.Fatal(err)
	}
	return tok
}

func (e *creditEnv) balance(t *testing.T, a common.Address) ledger.Balance {
	t.Helper()
	e.sync(t)
	b, err := e.led.Balance(t.Context(), a)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func (e *creditEnv) do(t *testing.T, ctx context.Context, method, path, bearer, body string, hdr http.Header) *http.Response {
	t.Helper()
	if method == http.MethodGet {
		e.sync(t) // a leased call's receipt is listed once its draw is written
	}
	req, err := http.NewRequestWithContext(ctx, method, e.srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	maps.Copy(req.Header, hdr)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func (e *creditEnv) chat(t *testing.T, secret, body string) *http.Response {
	t.Helper()
	return e.do(t, t.Context(), http.MethodPost, "/v1/chat/completions", secret, body, nil)
}

// maxCostOf is the hold the gateway takes for body, computed as the ledger
// does.
func maxCostOf(t *testing.T, body string) int64 {
	t.Helper()
	req, err := chat.ParseRequest([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	prompt, err := pricing.NewCounter().PromptTokens(req)
	if err != nil {
		t.Fatal(err)
	}
	return ledger.MaxCost(prompt, pricing.OutputBound(req, 256), price).Int64()
}

// tokensOf is what a call of body counts against a tokens-per-minute
// limit: its prompt plus its output bound.
func tokensOf(t *testing.T, body string) int64 {
	t.Helper()
	req, err := chat.ParseRequest([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	return promptTokensOf(t, body) + pricing.OutputBound(req, 256)
}

func promptTokensOf(t *testing.T, body string) int64 {
	t.Helper()
	req, err := chat.ParseRequest([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	n, err := pricing.NewCounter().PromptTokens(req)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// verified checks a receipt's signature against the signer's published
// address and domain, as a buyer does.
func (e *creditEnv) verified(t *testing.T, r *receipt.Receipt, sig []byte) {
	t.Helper()
	wk := e.signer.WellKnown()
	addr, err := receipt.Verify(r, sig, wk.Receipts.Domain)
	if err != nil {
		t.Fatal(err)
	}
	if addr != wk.Receipts.Signer {
		t.Fatalf("receipt signed by %s, want %s", addr, wk.Receipts.Signer)
	}
}

// creditAnnotation is the x_llm4agents field of a credit-paid answer.
type creditAnnotation struct {
	Charged   string          `json:"charged"`
	Balance   string          `json:"balance"`
	RequestID string          `json:"request_id"`
	Usage     *chat.Usage     `json:"usage"`
	Receipt   json.RawMessage `json:"receipt"`
}

func TestCreditChat(t *testing.T) {
	eachCreditBackend(t, func(t *testing.T, b creditBackend) {
		e := newCreditEnv(t, creditOpts{backend: b})
		e.topUp(t, alice, 1_000_000)
		secret, key := e.newKey(t, alice, nil)

		resp := e.chat(t, secret, chatBody)
		body := readAll(t, resp)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d: %s", resp.StatusCode, body)
		}
		if got := resp.Header.Get("X-Should-Retry"); got != "false" {
			t.Errorf("X-Should-Retry = %q", got)
		}
		r, sig, err := receipt.DecodeHeader(resp.Header.Get(receipt.Header))
		if err != nil {
			t.Fatal(err)
		}
		e.verified(t, r, sig)
		var out struct {
			Usage chat.Usage       `json:"usage"`
			X     creditAnnotation `json:"x_llm4agents"`
		}
		if err := json.Unmarshal(body, &out); err != nil {
			t.Fatal(err)
		}
		// The charge is the usage's cost, capped at the hold (D16): the demo
		// upstream counts the prompt a token above the quote.
		cost := big.NewInt(min(pricing.Cost(out.Usage, price).Int64(), maxCostOf(t, chatBody)))
		bal := e.balance(t, alice)
		keyID, err := credits.KeyIDBytes32(key.ID)
		if err != nil {
			t.Fatal(err)
		}
		id := resp.Header.Get(gateway.HeaderRequestID)
		checkReceipt(t, r, wantReceipt{id: id, account: alice, keyID: keyID, in: out.Usage.PromptTokens, out: out.Usage.CompletionTokens,
			amount: cost.Int64(), balance: bal.Available.Int64()})
		if bal.Available.Int64() != 1_000_000-cost.Int64() || bal.Held.Sign() != 0 {
			t.Errorf("balance %v held %v after a charge of %v", bal.Available, bal.Held, cost)
		}
		if out.X.Charged != cost.String() || out.X.Balance != bal.Available.String() || out.X.RequestID != id {
			t.Errorf("x_llm4agents = %+v, want charged %v balance %v id %s", out.X, cost, bal.Available, id)
		}
		// D11: the upstream sees its own key, never the buyer's.
		if got := e.up.LastRequest().Header.Get("Authorization"); got != "Bearer sk-upstream-secret" {
			t.Errorf("upstream Authorization = %q", got)
		}

		// The same envelope, by id, to the key and to the owner's session.
		want, err := receipt.EncodeEnvelope(r, sig)
		if err != nil {
			t.Fatal(err)
		}
		for _, auth := range []string{secret, e.newSession(t, alice)} {
			resp := e.do(t, t.Context(), http.MethodGet, "/v1/receipts/"+id, auth, "", nil)
			got := readAll(t, resp)
			if resp.StatusCode != http.StatusOK || !bytes.Equal(bytes.TrimSpace(got), want) {
				t.Errorf("GET receipt: status %d: %s, want %s", resp.StatusCode, got, want)
			}
		}
	})
}

type wantReceipt struct {
	id                       string
	account                  common.Address
	keyID                    common.Hash
	in, out, amount, balance int64
}

func checkReceipt(t *testing.T, r *receipt.Receipt, w wantReceipt) {
	t.Helper()
	got := fmt.Sprintf("id %s account %s key %s model %s in %v out %v amount %v balance %v",
		r.RequestID.Hex(), r.Account.Hex(), r.KeyID.Hex(), r.Model, r.InputTokens, r.OutputTokens, r.Amount, r.BalanceAfter)
	want := fmt.Sprintf("id %s account %s key %s model %s in %d out %d amount %d balance %d",
		w.id, w.account.Hex(), w.keyID.Hex(), "demo", w.in, w.out, w.amount, w.balance)
	if got != want {
		t.Errorf("receipt:\n got %s\nwant %s", got, want)
	}
	if r.LedgerSeq.Sign() <= 0 || r.IssuedAt == 0 {
		t.Errorf("receipt seq %v issued %d", r.LedgerSeq, r.IssuedAt)
	}
}

// sseData returns the data of every event of an SSE body.
func sseData(t *testing.T, body []byte) []string {
	t.Helper()
	var out []string
	for line := range strings.SplitSeq(string(body), "\n") {
		if d, ok := strings.CutPrefix(line, "data: "); ok {
			out = append(out, d)
		}
	}
	return out
}

// streamReceipt finds the final usage chunk's annotation in a stream.
func streamReceipt(t *testing.T, events []string) (creditAnnotation, *receipt.Receipt, []byte) {
	t.Helper()
	if len(events) < 2 || events[len(events)-1] != "[DONE]" {
		t.Fatalf("stream does not end with [DONE]: %q", events)
	}
	var c struct {
		Usage *chat.Usage       `json:"usage"`
		X     *creditAnnotation `json:"x_llm4agents"`
	}
	if err := json.Unmarshal([]byte(events[len(events)-2]), &c); err != nil || c.Usage == nil || c.X == nil {
		t.Fatalf("the last chunk is not an annotated usage chunk: %s", events[len(events)-2])
	}
	r, sig, err := receipt.ParseEnvelope(c.X.Receipt)
	if err != nil {
		t.Fatal(err)
	}
	c.X.Usage = c.Usage
	return *c.X, r, sig
}

func TestCreditChatStream(t *testing.T) {
	eachCreditBackend(t, func(t *testing.T, b creditBackend) {
		for _, tc := range []struct {
			name  string
			fault upstreamtest.Fault
		}{
			{"usage reported", upstreamtest.Fault{}},
			// No usage chunk from the upstream: the gateway counts what it
			// delivered and makes the final chunk itself.
			{"no usage", upstreamtest.Fault{NoUsage: true}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				e := newCreditEnv(t, creditOpts{backend: b})
				e.up.SetFault(tc.fault)
				e.topUp(t, alice, 1_000_000)
				secret, key := e.newKey(t, alice, nil)
				body := `{"model":"demo","messages":[{"role":"user","content":"Say hello"}],"max_tokens":32,"stream":true}`
				resp := e.chat(t, secret, body)
				raw := readAll(t, resp)
				if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
					t.Fatalf("status %d %s: %s", resp.StatusCode, resp.Header.Get("Content-Type"), raw)
				}
				events := sseData(t, raw)
				x, r, sig := streamReceipt(t, events)
				e.verified(t, r, sig)
				want := *x.Usage
				if tc.fault.NoUsage {
					want = chat.Usage{PromptTokens: promptTokensOf(t, body), CompletionTokens: countTokens(t, streamText(t, events))}
				}
				if x.Usage.PromptTokens != want.PromptTokens || x.Usage.CompletionTokens != want.CompletionTokens {
					t.Errorf("usage %+v, want %+v", *x.Usage, want)
				}
				cost := min(pricing.Cost(want, price).Int64(), maxCostOf(t, body)) // capped at the hold (D16)
				bal := e.balance(t, alice)
				keyID, _ := credits.KeyIDBytes32(key.ID)
				checkReceipt(t, r, wantReceipt{id: resp.Header.Get(gateway.HeaderRequestID), account: alice, keyID: keyID,
					in: want.PromptTokens, out: want.CompletionTokens, amount: cost, balance: bal.Available.Int64()})
				if x.Charged != fmt.Sprint(cost) || bal.Held.Sign() != 0 || bal.Available.Int64() != 1_000_000-cost {
					t.Errorf("charged %s, balance %v held %v; want %d", x.Charged, bal.Available, bal.Held, cost)
				}
			})
		}
	})
}

// streamText is the content a client read from stream events.
func streamText(t *testing.T, events []string) string {
	t.Helper()
	var b strings.Builder
	for _, ev := range events {
		var c chat.Chunk
		if json.Unmarshal([]byte(ev), &c) != nil {
			continue
		}
		for _, ch := range c.Choices {
			if ch.Delta.Content != nil {
				b.WriteString(*ch.Delta.Content)
			}
		}
	}
	return b.String()
}

func countTokens(t *testing.T, text string) int64 {
	t.Helper()
	n, err := pricing.NewCounter().Tokens(pricing.EncodingFor("demo"), text)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// waitFor polls cond until it holds, failing after a generous bound: the
// tests wait for an outcome, never assert how fast it came.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestCreditStreamClientLeaves: a client gone mid-stream is charged for the
// content it was sent, counted, and one gone before any content nothing
// (D16). The upstream stalls after a fixed number of events, so what was
// sent is exactly what the client read.
func TestCreditStreamClientLeaves(t *testing.T) {
	eachCreditBackend(t, func(t *testing.T, b creditBackend) {
		body := `{"model":"demo","messages":[{"role":"user","content":"Say hello"}],"max_tokens":200,"stream":true}`

		t.Run("mid-way", func(t *testing.T) {
			e := newCreditEnv(t, creditOpts{backend: b})
			e.up.SetFault(upstreamtest.Fault{StallAfter: 4}) // the role chunk and three content chunks
			e.topUp(t, alice, 1_000_000)
			secret, key := e.newKey(t, alice, nil)
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			resp := e.do(t, ctx, http.MethodPost, "/v1/chat/completions", secret, body, nil)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d: %s", resp.StatusCode, readAll(t, resp))
			}
			id := resp.Header.Get(gateway.HeaderRequestID)
			var events []string
			rd := bufio.NewReader(resp.Body)
			for contentEvents := 0; contentEvents < 3; {
				line, err := rd.ReadString('\n')
				if err != nil {
					t.Fatalf("stream ended after %q: %v", events, err)
				}
				if d, ok := strings.CutPrefix(strings.TrimRight(line, "\n"), "data: "); ok {
					events = append(events, d)
					if streamText(t, []string{d}) != "" {
						contentEvents++
					}
				}
			}
			cancel()
			_ = resp.Body.Close()

			var rec store.StoredReceipt
			waitFor(t, "the receipt of the cut stream", func() bool {
				var err error
				rec, err = e.db.Receipt(t.Context(), id)
				return err == nil
			})
			r, sig, err := receipt.ParseEnvelope(rec.Envelope)
			if err != nil {
				t.Fatal(err)
			}
			e.verified(t, r, sig)
			delivered := chat.Usage{PromptTokens: promptTokensOf(t, body), CompletionTokens: countTokens(t, streamText(t, events))}
			cost := pricing.Cost(delivered, price).Int64()
			bal := e.balance(t, alice)
			keyID, _ := credits.KeyIDBytes32(key.ID)
			checkReceipt(t, r, wantReceipt{id: id, account: alice, keyID: keyID, in: delivered.PromptTokens,
				out: delivered.CompletionTokens, amount: cost, balance: bal.Available.Int64()})
			if bal.Held.Sign() != 0 || bal.Available.Int64() != 1_000_000-cost {
				t.Errorf("balance %v held %v, want %d charged", bal.Available, bal.Held, cost)
			}
			if maxCost := maxCostOf(t, body); cost >= maxCost {
				t.Errorf("charged %d, not less than the whole hold %d", cost, maxCost)
			}
		})

		t.Run("before the first token", func(t *testing.T) {
			e := newCreditEnv(t, creditOpts{backend: b})
			e.up.SetFault(upstreamtest.Fault{StallAfter: 1}) // the role chunk only
			e.topUp(t, alice, 1_000_000)
			secret, _ := e.newKey(t, alice, nil)
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			done := make(chan error, 1)
			go func() {
				req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.srv.URL+"/v1/chat/completions", strings.NewReader(body))
				if err != nil {
					done <- err
					return
				}
				req.Header.Set("Authorization", "Bearer "+secret)
				resp, err := http.DefaultClient.Do(req)
				if err == nil {
					_ = resp.Body.Close()
					err = fmt.Errorf("got a response, status %d", resp.StatusCode)
				}
				done <- err
			}()
			waitFor(t, "the upstream call", func() bool { return e.up.Calls() == 1 })
			// Leased, the lease holds at least the call's maximum.
			if held := e.balance(t, alice).Held.Int64(); held != maxCostOf(t, body) && (!b.leased || held < maxCostOf(t, body)) {
				t.Fatalf("held %d while the upstream runs, want the maximum %d", held, maxCostOf(t, body))
			}
			cancel()
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Fatalf("client: %v", err)
			}
			waitFor(t, "the hold's release", func() bool { return e.balance(t, alice).Held.Sign() == 0 })
			if got := e.balance(t, alice).Available.Int64(); got != 1_000_000 {
				t.Errorf("balance %d after a stream cut before any token, want 1000000", got)
			}
			if n := e.receiptCount(t, alice); n != 0 {
				t.Errorf("%d receipts for a call that charged nothing", n)
			}
		})
	})
}

// shortfallBody is the error object of a credit 402.
type shortfallBody struct {
	Error struct {
		Message   string `json:"message"`
		Code      string `json:"code"`
		Limit     string `json:"limit"`
		MaxCost   string `json:"max_cost"`
		Available string `json:"available"`
		TopUp     string `json:"topup"`
		TopUpURL  string `json:"topup_url"`
	} `json:"error"`
}

func TestCreditShortfall(t *testing.T) {
	eachCreditBackend(t, func(t *testing.T, b creditBackend) {
		maxCost := maxCostOf(t, chatBody)
		for _, tc := range []struct {
			name      string
			balance   int64
			mod       func(*store.APIKey)
			limit     string
			available int64
		}{
			{"balance", maxCost - 1, nil, "balance", maxCost - 1},
			{"key total cap", 1_000_000, func(k *store.APIKey) { k.TotalCap = 50 }, "key_total", 50},
			{"key period cap", 1_000_000, func(k *store.APIKey) { k.PeriodCap, k.Period = 70, 24*time.Hour }, "key_period", 70},
		} {
			t.Run(tc.name, func(t *testing.T) {
				e := newCreditEnv(t, creditOpts{backend: b})
				e.topUp(t, alice, tc.balance)
				secret, _ := e.newKey(t, alice, tc.mod)
				resp := e.chat(t, secret, chatBody)
				body := readAll(t, resp)
				if resp.StatusCode != http.StatusPaymentRequired {
					t.Fatalf("status %d: %s", resp.StatusCode, body)
				}
				// D12: no PAYMENT-REQUIRED: a key holder is never switched to
				// per-call payment.
				if v := resp.Header.Get(x402.HeaderPaymentRequired); v != "" {
					t.Errorf("PAYMENT-REQUIRED = %q", v)
				}
				if got := resp.Header.Get("X-Should-Retry"); got != "false" {
					t.Errorf("X-Should-Retry = %q", got)
				}
				var sb shortfallBody
				if err := json.Unmarshal(body, &sb); err != nil {
					t.Fatal(err)
				}
				got := sb.Error
				if got.Code != "insufficient_credit" || got.Limit != tc.limit || got.MaxCost != fmt.Sprint(maxCost) ||
					got.Available != fmt.Sprint(tc.available) || got.TopUp != "POST /v1/credits/topup" ||
					got.TopUpURL != e.srv.URL+"/v1/credits/topup" || !strings.Contains(got.Message, "POST /v1/credits/topup") {
					t.Errorf("error = %+v; want limit %s, max_cost %d, available %d", got, tc.limit, maxCost, tc.available)
				}
				if n := e.up.Calls(); n != 0 {
					t.Errorf("%d upstream calls for a refused request", n)
				}
				if b := e.balance(t, alice); b.Available.Int64() != tc.balance || b.Held.Sign() != 0 {
					t.Errorf("balance %v held %v after a refusal", b.Available, b.Held)
				}
			})
		}
	})
}

// TestCreditKeyRefused: every refusal before the hold calls no upstream and
// holds nothing.
func TestCreditKeyRefused(t *testing.T) {
	eachCreditBackend(t, func(t *testing.T, b creditBackend) {
		e := newCreditEnv(t, creditOpts{backend: b})
		e.topUp(t, alice, 1_000_000)
		unknown, _, err := credits.NewKey() // well formed, never stored
		if err != nil {
			t.Fatal(err)
		}
		revoked, rk := e.newKey(t, alice, nil)
		if _, err := e.db.RevokeKey(t.Context(), rk.Owner, rk.ID); err != nil {
			t.Fatal(err)
		}
		expired, _ := e.newKey(t, alice, func(k *store.APIKey) { k.ExpiresAt = time.Now().Add(-time.Minute) })
		scoped, _ := e.newKey(t, alice, func(k *store.APIKey) { k.Models = []string{"other-model"} })
		good, _ := e.newKey(t, alice, nil)
		for _, tc := range []struct {
			name, secret string
			hdr          http.Header
			status       int
			code         string
		}{
			{"unknown", unknown, nil, 401, "invalid_api_key"},
			{"malformed", "sk-l4a-not-a-key", nil, 401, "invalid_api_key"},
			{"revoked", revoked, nil, 401, "invalid_api_key"},
			{"expired", expired, nil, 401, "invalid_api_key"},
			{"model out of scope", scoped, nil, 403, "model_not_allowed"},
			{"key and payment", good, http.Header{x402.HeaderPaymentSignature: {"eyJ4NDAyVmVyc2lvbiI6Mn0="}}, 400, "key_and_payment"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				resp := e.do(t, t.Context(), http.MethodPost, "/v1/chat/completions", tc.secret, chatBody, tc.hdr)
				body := readAll(t, resp)
				if resp.StatusCode != tc.status || errorCode(t, body) != tc.code {
					t.Fatalf("status %d: %s; want %d %s", resp.StatusCode, body, tc.status, tc.code)
				}
			})
		}
		if n := e.up.Calls(); n != 0 {
			t.Errorf("%d upstream calls for refused requests", n)
		}
		if b := e.balance(t, alice); b.Available.Int64() != 1_000_000 || b.Held.Sign() != 0 {
			t.Errorf("balance %v held %v after refusals", b.Available, b.Held)
		}

		t.Run("rate limited", func(t *testing.T) {
			limited, _ := e.newKey(t, alice, func(k *store.APIKey) { k.RatePerMinute = 1 })
			first := e.chat(t, limited, chatBody)
			if b := readAll(t, first); first.StatusCode != http.StatusOK {
				t.Fatalf("first request: status %d: %s", first.StatusCode, b)
			}
			resp := e.chat(t, limited, chatBody)
			body := readAll(t, resp)
			// Retry-After is when the store's minute ends: 1 to 60 s.
			retry, err := strconv.Atoi(resp.Header.Get("Retry-After"))
			if resp.StatusCode != http.StatusTooManyRequests || errorCode(t, body) != "rate_limited" || err != nil || retry < 1 || retry > 60 {
				t.Fatalf("status %d Retry-After %q: %s", resp.StatusCode, resp.Header.Get("Retry-After"), body)
			}
			if n := e.up.Calls(); n != 1 {
				t.Errorf("%d upstream calls, want the first request's only", n)
			}
		})
		t.Run("tokens per minute", func(t *testing.T) {
			calls := e.up.Calls()
			// chatBody's call counts its prompt plus max_tokens: room
			// for one such call in the minute, not two.
			need := tokensOf(t, chatBody)
			limited, _ := e.newKey(t, alice, func(k *store.APIKey) { k.TokensPerMinute = need + need/2 })
			first := e.chat(t, limited, chatBody)
			if b := readAll(t, first); first.StatusCode != http.StatusOK {
				t.Fatalf("first request: status %d: %s", first.StatusCode, b)
			}
			resp := e.chat(t, limited, chatBody)
			if body := readAll(t, resp); resp.StatusCode != http.StatusTooManyRequests || errorCode(t, body) != "rate_limited" ||
				!strings.Contains(string(body), "tokens per minute") {
				t.Fatalf("second request: status %d: %s", resp.StatusCode, body)
			}
			small, _ := e.newKey(t, alice, func(k *store.APIKey) { k.TokensPerMinute = need - 1 })
			resp = e.chat(t, small, chatBody)
			if body := readAll(t, resp); resp.StatusCode != http.StatusBadRequest || errorCode(t, body) != "rate_limit_too_small" {
				t.Fatalf("a call above the key's limit: status %d: %s", resp.StatusCode, body)
			}
			if n := e.up.Calls() - calls; n != 1 {
				t.Errorf("%d upstream calls, want the first request's only", n)
			}
		})
	})
}

// TestCreditConcurrentCap: 50 concurrent requests through one key with a
// small cap never spend more than the cap, and every refused one calls no
// upstream.
func TestCreditConcurrentCap(t *testing.T) {
	eachCreditBackend(t, func(t *testing.T, b creditBackend) {
		e := newCreditEnv(t, creditOpts{backend: b})
		e.topUp(t, alice, 100_000_000)
		maxCost := maxCostOf(t, chatBody)
		capAmount := 3*maxCost + maxCost/2
		secret, key := e.newKey(t, alice, func(k *store.APIKey) { k.TotalCap = capAmount })

		const n = 50
		type result struct {
			status  int
			code    string
			charged int64
			err     error
		}
		results := make(chan result, n)
		var start sync.WaitGroup
		start.Add(1)
		for range n {
			go func() {
				start.Wait()
				req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, e.srv.URL+"/v1/chat/completions", strings.NewReader(chatBody))
				if err != nil {
					results <- result{err: err}
					return
				}
				req.Header.Set("Authorization", "Bearer "+secret)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					results <- result{err: err}
					return
				}
				var b bytes.Buffer
				_, err = b.ReadFrom(resp.Body)
				_ = resp.Body.Close()
				r := result{status: resp.StatusCode, err: err}
				var out struct {
					X     creditAnnotation `json:"x_llm4agents"`
					Error struct {
						Code string `json:"code"`
					} `json:"error"`
				}
				if json.Unmarshal(b.Bytes(), &out) == nil {
					r.code = out.Error.Code
					_, _ = fmt.Sscan(out.X.Charged, &r.charged)
				}
				results <- r
			}()
		}
		start.Done()
		var ok, refused int
		var charged int64
		for range n {
			r := <-results
			switch {
			case r.err != nil:
				t.Fatal(r.err)
			case r.status == http.StatusOK:
				ok++
				charged += r.charged
			case r.status == http.StatusPaymentRequired && r.code == "insufficient_credit":
				refused++
			default:
				t.Errorf("status %d code %s", r.status, r.code)
			}
		}
		e.sync(t) // a leased call's draw is on its lease until the lease closes
		usage, err := e.led.KeyUsage(t.Context(), ledger.Key{ID: key.ID, TotalCap: big.NewInt(capAmount)})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("cap %d: %d served (charged %d), %d refused", capAmount, ok, charged, refused)
		if charged > capAmount || usage.Spent != charged || usage.Held != 0 {
			t.Errorf("charged %d (key spent %d, held %d) against a cap of %d", charged, usage.Spent, usage.Held, capAmount)
		}
		if ok == 0 || refused == 0 {
			t.Errorf("%d served, %d refused: the cap was not exercised", ok, refused)
		}
		if calls := e.up.Calls(); calls != int64(ok) {
			t.Errorf("%d upstream calls for %d served requests", calls, ok)
		}
	})
}

// TestCreditReceiptsOwner: a receipt is served to its owner only; to anyone
// else it does not exist.
func TestCreditReceiptsOwner(t *testing.T) {
	eachCreditBackend(t, func(t *testing.T, b creditBackend) {
		e := newCreditEnv(t, creditOpts{backend: b})
		e.topUp(t, alice, 1_000_000)
		e.topUp(t, bob, 1_000_000)
		aliceKey, _ := e.newKey(t, alice, nil)
		bobKey, _ := e.newKey(t, bob, nil)
		resp := e.chat(t, aliceKey, chatBody)
		if b := readAll(t, resp); resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d: %s", resp.StatusCode, b)
		}
		id := resp.Header.Get(gateway.HeaderRequestID)
		other, _ := newRandomID()
		bobSession := e.newSession(t, bob)

		get := func(auth, path string) (int, []byte) {
			resp := e.do(t, t.Context(), http.MethodGet, path, auth, "", nil)
			return resp.StatusCode, readAll(t, resp)
		}
		_, missing := get(bobKey, "/v1/receipts/"+other)
		for _, tc := range []struct {
			name, auth, path string
			status           int
			code             string
		}{
			{"another owner's key", bobKey, "/v1/receipts/" + id, 404, "receipt_not_found"},
			{"another owner's session", bobSession, "/v1/receipts/" + id, 404, "receipt_not_found"},
			{"no such receipt", aliceKey, "/v1/receipts/" + other, 404, "receipt_not_found"},
			{"no credentials", "", "/v1/receipts/" + id, 401, "authentication_required"},
			{"another bearer", "unused", "/v1/receipts/" + id, 401, "authentication_required"},
			{"unknown session", "sess-l4a-nope", "/v1/receipts/" + id, 401, "invalid_session"},
			{"unknown key", "sk-l4a-nope", "/v1/receipts", 401, "invalid_api_key"},
			{"limit zero", aliceKey, "/v1/receipts?limit=0", 400, "invalid_request"},
			{"limit too large", aliceKey, "/v1/receipts?limit=1001", 400, "invalid_request"},
			{"negative before", aliceKey, "/v1/receipts?before=-1", 400, "invalid_request"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				status, body := get(tc.auth, tc.path)
				if status != tc.status || errorCode(t, body) != tc.code {
					t.Fatalf("status %d: %s; want %d %s", status, body, tc.status, tc.code)
				}
				if tc.status == 404 && !bytes.Equal(body, missing) {
					t.Errorf("an existing receipt of another owner answers %s, a missing one %s", body, missing)
				}
			})
		}

		list := func(auth string) []string {
			status, body := get(auth, "/v1/receipts?limit=10")
			if status != http.StatusOK {
				t.Fatalf("list: status %d: %s", status, body)
			}
			var l struct {
				Object string            `json:"object"`
				Data   []json.RawMessage `json:"data"`
			}
			if err := json.Unmarshal(body, &l); err != nil || l.Object != "list" {
				t.Fatalf("list: %s", body)
			}
			var ids []string
			for _, env := range l.Data {
				r, _, err := receipt.ParseEnvelope(env)
				if err != nil {
					t.Fatal(err)
				}
				ids = append(ids, r.RequestID.Hex())
			}
			return ids
		}
		if got := list(bobSession); len(got) != 0 {
			t.Errorf("bob lists %v", got)
		}
		if got := list(e.newSession(t, alice)); !slices.Equal(got, []string{id}) {
			t.Errorf("alice lists %v, want [%s]", got, id)
		}
	})
}

func newRandomID() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return common.Hash(b).Hex(), nil
}

// faultyLedger fails the ledger operations it is told to.
type faultyLedger struct {
	store.Ledger
	holdErr, captureErr error
}

func (f *faultyLedger) Hold(ctx context.Context, r store.HoldRequest) (store.Hold, error) {
	if f.holdErr != nil {
		return store.Hold{}, f.holdErr
	}
	return f.Ledger.Hold(ctx, r)
}

func (f *faultyLedger) Capture(ctx context.Context, id string, actual int64) (store.Hold, store.Entry, error) {
	if f.captureErr != nil {
		return store.Hold{}, store.Entry{}, f.captureErr
	}
	return f.Ledger.Capture(ctx, id, actual)
}

// faultyCapturer fails a capture with its receipt after the receipt was
// made, as a write whose commit fails does.
type faultyCapturer struct{ store.Ledger }

func (f faultyCapturer) CaptureWithReceipt(ctx context.Context, id string, _ int64,
	receiptOf func(store.Hold, store.Entry) *store.StoredReceipt) (store.CaptureResult, error) {
	h, err := f.HoldRecord(ctx, id)
	if err != nil {
		return store.CaptureResult{}, err
	}
	receiptOf(h, store.Entry{Seq: 1})
	return store.CaptureResult{}, errors.New("disk I/O error")
}

// TestCreditStoreFaults: a store failing at the hold calls no upstream (fail
// closed); one failing at the capture serves the answer unbilled, its hold
// left to the sweep, with no receipt even when one was signed inside the
// capture's failed write.
func TestCreditStoreFaults(t *testing.T) {
	eachCreditBackend(t, func(t *testing.T, b creditBackend) {
		t.Run("hold", func(t *testing.T) {
			e := newCreditEnv(t, creditOpts{backend: b, wrap: func(l store.Ledger) store.Ledger {
				return &faultyLedger{Ledger: l, holdErr: errors.New("disk I/O error")}
			}})
			e.topUp(t, alice, 1_000_000)
			secret, _ := e.newKey(t, alice, nil)
			resp := e.chat(t, secret, chatBody)
			body := readAll(t, resp)
			if resp.StatusCode != http.StatusServiceUnavailable || errorCode(t, body) != "store_unavailable" {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			if strings.Contains(string(body), "disk") {
				t.Errorf("the store's error reached the client: %s", body)
			}
			if n := e.up.Calls(); n != 0 {
				t.Errorf("%d upstream calls with the store down", n)
			}
		})
		for _, tc := range []struct {
			name string
			wrap func(store.Ledger) store.Ledger
		}{
			{"capture", func(l store.Ledger) store.Ledger {
				return &faultyLedger{Ledger: l, captureErr: errors.New("disk I/O error")}
			}},
			{"capture with its receipt", func(l store.Ledger) store.Ledger { return faultyCapturer{l} }},
		} {
			t.Run(tc.name, func(t *testing.T) {
				if b.leased {
					t.Skip("a leased call writes no capture on its path; a failing draw write is ledger's TestLeasesStoreDown")
				}
				testCaptureFault(t, newCreditEnv(t, creditOpts{backend: b, wrap: tc.wrap}))
			})
		}
	})
}

// testCaptureFault: a credit call whose capture fails is answered unbilled,
// its hold left to the sweep, and its answer names no charge and carries
// no receipt.
func testCaptureFault(t *testing.T, e *creditEnv) {
	e.topUp(t, alice, 1_000_000)
	secret, _ := e.newKey(t, alice, nil)
	resp := e.chat(t, secret, chatBody)
	body := readAll(t, resp)
	if resp.StatusCode != http.StatusOK || resp.Header.Get(receipt.Header) != "" {
		t.Fatalf("status %d, receipt %q: %s", resp.StatusCode, resp.Header.Get(receipt.Header), body)
	}
	h, err := e.db.HoldRecord(t.Context(), resp.Header.Get(gateway.HeaderRequestID))
	if err != nil {
		t.Fatal(err)
	}
	if h.State != store.HoldHeld || h.Captured != 0 {
		t.Errorf("hold %+v, want it open for the sweep", h)
	}
	if strings.Contains(string(body), `"charged"`) {
		t.Errorf("the answer of an unbilled call names a charge: %s", body)
	}
}

// TestCreditUpstreamFails: an upstream failure releases the hold.
func TestCreditUpstreamFails(t *testing.T) {
	eachCreditBackend(t, func(t *testing.T, b creditBackend) {
		for _, tc := range []struct {
			name   string
			body   string
			fault  upstreamtest.Fault
			status int
		}{
			{"complete 500", chatBody, upstreamtest.Fault{Status: 500}, http.StatusBadGateway},
			{"stream 500", strings.Replace(chatBody, `"max_tokens"`, `"stream":true,"max_tokens"`, 1), upstreamtest.Fault{Status: 500}, http.StatusBadGateway},
			{"stream dropped before content", strings.Replace(chatBody, `"max_tokens"`, `"stream":true,"max_tokens"`, 1), upstreamtest.Fault{Drop: true}, http.StatusBadGateway},
		} {
			t.Run(tc.name, func(t *testing.T) {
				e := newCreditEnv(t, creditOpts{backend: b})
				e.up.SetFault(tc.fault)
				e.topUp(t, alice, 1_000_000)
				secret, _ := e.newKey(t, alice, nil)
				resp := e.chat(t, secret, tc.body)
				body := readAll(t, resp)
				if resp.StatusCode != tc.status {
					t.Fatalf("status %d: %s", resp.StatusCode, body)
				}
				if b := e.balance(t, alice); b.Available.Int64() != 1_000_000 || b.Held.Sign() != 0 {
					t.Errorf("balance %v held %v after an upstream failure", b.Available, b.Held)
				}
				if n := e.receiptCount(t, alice); n != 0 {
					t.Errorf("%d receipts", n)
				}
			})
		}
	})
}

// TestCreditSecretsNotLogged: no API key or session token reaches the log,
// at any level, on success or refusal.
func TestCreditSecretsNotLogged(t *testing.T) {
	eachCreditBackend(t, func(t *testing.T, b creditBackend) {
		var logs syncBuffer
		log := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
		e := newCreditEnv(t, creditOpts{backend: b, log: log})
		e.topUp(t, alice, 1_000_000)
		good, _ := e.newKey(t, alice, nil)
		revoked, rk := e.newKey(t, alice, nil)
		if _, err := e.db.RevokeKey(t.Context(), rk.Owner, rk.ID); err != nil {
			t.Fatal(err)
		}
		poor, _ := e.newKey(t, alice, func(k *store.APIKey) { k.TotalCap = 1 })
		unknown, _, _ := credits.NewKey()
		session := e.newSession(t, alice)
		deadSession := sessionToken()

		for _, c := range []struct{ method, path, bearer, body string }{
			{http.MethodPost, "/v1/chat/completions", good, chatBody},
			{http.MethodPost, "/v1/chat/completions", good, strings.Replace(chatBody, `"max_tokens"`, `"stream":true,"max_tokens"`, 1)},
			{http.MethodPost, "/v1/chat/completions", revoked, chatBody},
			{http.MethodPost, "/v1/chat/completions", poor, chatBody},
			{http.MethodPost, "/v1/chat/completions", unknown, chatBody},
			{http.MethodGet, "/v1/receipts", session, ""},
			{http.MethodGet, "/v1/receipts", deadSession, ""},
			{http.MethodGet, "/v1/receipts/0x01", revoked, ""},
		} {
			resp := e.do(t, t.Context(), c.method, c.path, c.bearer, c.body, nil)
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
		}
		out := logs.String()
		if !strings.Contains(out, "request refused") {
			t.Fatalf("the log captured nothing: %s", out)
		}
		for name, secret := range map[string]string{"key": good, "revoked key": revoked, "capped key": poor, "unknown key": unknown,
			"session": session, "dead session": deadSession} {
			random := secret[strings.LastIndexByte(secret, '-')+1:]
			if strings.Contains(out, random) {
				t.Errorf("the %s is in the log", name)
			}
		}
	})
}

// TestCreditRevokedKeyStops: a key revoked while its calls are served (from
// a lease, when leased) is refused at its next call: the key is read from
// the store on every call, so no lease outlives its key's revocation.
func TestCreditRevokedKeyStops(t *testing.T) {
	eachCreditBackend(t, func(t *testing.T, b creditBackend) {
		e := newCreditEnv(t, creditOpts{backend: b})
		e.topUp(t, alice, 1_000_000)
		secret, key := e.newKey(t, alice, nil)
		for range 3 {
			if resp := e.chat(t, secret, chatBody); resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d: %s", resp.StatusCode, readAll(t, resp))
			}
		}
		before := e.up.Calls()
		if _, err := e.db.RevokeKey(t.Context(), key.Owner, key.ID); err != nil {
			t.Fatal(err)
		}
		resp := e.chat(t, secret, chatBody)
		if body := readAll(t, resp); resp.StatusCode != http.StatusUnauthorized || errorCode(t, body) != "invalid_api_key" {
			t.Errorf("a call after revocation: status %d: %s", resp.StatusCode, body)
		}
		if e.up.Calls() != before {
			t.Error("a revoked key's call reached the upstream")
		}
		// What the three calls charged is billed, nothing more.
		if bal := e.balance(t, alice); bal.Held.Sign() != 0 || bal.Available.Int64() >= 1_000_000 {
			t.Errorf("balance after revocation = %v available, %v held", bal.Available, bal.Held)
		}
	})
}

// TestCreditLoweredCapStops: a key's cap lowered in the store (PATCH
// /v1/keys/{id}) binds at its next call, also where a replica holds a lease
// opened under the old cap: the lease's limits differ from the key's, so it
// is retired and a new one placed under the new cap.
func TestCreditLoweredCapStops(t *testing.T) {
	eachCreditBackend(t, func(t *testing.T, b creditBackend) {
		e := newCreditEnv(t, creditOpts{backend: b})
		e.topUp(t, alice, 1_000_000)
		maxCost := maxCostOf(t, chatBody)
		secret, key := e.newKey(t, alice, func(k *store.APIKey) { k.TotalCap = 1_000_000 })
		if resp := e.chat(t, secret, chatBody); resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d: %s", resp.StatusCode, readAll(t, resp))
		}
		before := e.up.Calls()
		lowered := key
		lowered.TotalCap = maxCost - 1 // below one more call, whatever the first spent
		if _, err := e.db.UpdateKey(t.Context(), key.Owner, key.ID, key, lowered); err != nil {
			t.Fatal(err)
		}
		resp := e.chat(t, secret, chatBody)
		body := readAll(t, resp)
		var sb shortfallBody
		if err := json.Unmarshal(body, &sb); err != nil || resp.StatusCode != http.StatusPaymentRequired ||
			sb.Error.Code != "insufficient_credit" || sb.Error.Limit != "key_total" {
			t.Errorf("a call after the cap was lowered: status %d: %s", resp.StatusCode, body)
		}
		if e.up.Calls() != before {
			t.Error("a call over the lowered cap reached the upstream")
		}
		if bal := e.balance(t, alice); bal.Held.Sign() != 0 {
			t.Errorf("%v held after the refusal", bal.Held)
		}
	})
}

// TestCreditKeyCache: with credits.key_cache a key revoked elsewhere (in the
// store, as another replica would) stops within the cache's TTL, and one
// revoked through this gateway's account routes at its next call.
func TestCreditKeyCache(t *testing.T) {
	for _, b := range []creditBackend{
		{name: "sqlite-leased", open: openCreditSQLite, leased: true, keyCache: time.Second},
		{name: "postgres-leased", open: openCreditPostgres, leased: true, keyCache: time.Second},
	} {
		t.Run(b.name, func(t *testing.T) {
			e := newCreditEnv(t, creditOpts{backend: b})
			e.topUp(t, alice, 1_000_000)
			secret, key := e.newKey(t, alice, nil)
			if resp := e.chat(t, secret, chatBody); resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d: %s", resp.StatusCode, readAll(t, resp))
			}
			if _, err := e.db.RevokeKey(t.Context(), key.Owner, key.ID); err != nil {
				t.Fatal(err)
			}
			revoked := time.Now()
			for {
				resp := e.chat(t, secret, chatBody)
				body := readAll(t, resp)
				if resp.StatusCode == http.StatusUnauthorized {
					break
				}
				if time.Since(revoked) > time.Second+500*time.Millisecond {
					t.Fatalf("still served %s after a revocation elsewhere: %d %s", time.Since(revoked), resp.StatusCode, body)
				}
				time.Sleep(50 * time.Millisecond)
			}

			secret, key = e.newKey(t, alice, nil)
			if resp := e.chat(t, secret, chatBody); resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d: %s", resp.StatusCode, readAll(t, resp))
			}
			if resp := e.do(t, t.Context(), http.MethodDelete, "/v1/keys/"+key.ID, e.newSession(t, alice), "", nil); resp.StatusCode != http.StatusOK {
				t.Fatalf("revoke: %d %s", resp.StatusCode, readAll(t, resp))
			}
			if resp := e.chat(t, secret, chatBody); resp.StatusCode != http.StatusUnauthorized {
				t.Fatalf("the next call after a revocation through this gateway: %d %s", resp.StatusCode, readAll(t, resp))
			}
		})
	}
}
