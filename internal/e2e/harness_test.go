package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/accounts/abi/bind"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/crypto"

	"github.com/llm4agents/llm4agents/contracts"
	"github.com/llm4agents/llm4agents/internal/proctest"
	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/internal/store/postgres"
	"github.com/llm4agents/llm4agents/internal/store/redis"
	"github.com/llm4agents/llm4agents/internal/store/sqlite"
	"github.com/llm4agents/llm4agents/internal/testchain"
	"github.com/llm4agents/llm4agents/internal/testdb"
	"github.com/llm4agents/llm4agents/x402"
	"github.com/llm4agents/llm4agents/x402/evm/exact"
)

func TestMain(m *testing.M) { proctest.Main(m) }

// Dev accounts of the anvil test mnemonic, by role.
const (
	deployerIdx = 0 // deploys and mints the token
	payerIdx    = 1 // the buyer
	payToIdx    = 2 // receives the payments
	// firstSignerIdx is the first facilitator signer; replica i signs with
	// dev key firstSignerIdx+i (D20: one key per replica).
	firstSignerIdx = 3
	numSigners     = testchain.NumDevKeys - firstSignerIdx
)

const (
	network      = "eip155:1337"
	tokenName    = "USD Coin"
	tokenVersion = "2"
	payerFunds   = 1_000_000_000_000 // atomic units minted to the buyer

	// chatBody is what every paid request asks; it is quoted at one cent.
	chatBody   = `{"model":"demo","messages":[{"role":"user","content":"Say hello"}],"max_tokens":16}`
	streamBody = `{"model":"demo","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"Say hello"}],"max_tokens":16}`

	// Timeouts of the replicas under test: short, so that a crashed claim
	// expires in seconds. The claim lease is the shortest the config allows.
	upstreamTimeout   = 4 * time.Second
	settleTimeout     = 8 * time.Second
	claimLease        = upstreamTimeout + settleTimeout + 10*time.Second
	reconcileInterval = time.Second

	chainTimeout = 30 * time.Second // one chain operation of the test itself
	callTimeout  = 30 * time.Second // one HTTP call of the buyer
)

// chainEnv is anvil with the test token deployed and the buyer funded.
type chainEnv struct {
	anvil *testchain.Anvil
	token common.Address
	tok   *contracts.EIP3009Token
}

func startChain(t *testing.T) *chainEnv {
	t.Helper()
	a := testchain.StartAnvil(t)
	ctx, cancel := context.WithTimeout(t.Context(), chainTimeout)
	defer cancel()
	auth, err := bind.NewKeyedTransactorWithChainID(testchain.DevKey(deployerIdx), a.ChainID)
	if err != nil {
		t.Fatal(err)
	}
	auth.Context = ctx
	addr, tx, tok, err := contracts.DeployEIP3009Token(auth, a.Client, tokenName, tokenVersion, 6)
	if err != nil {
		t.Fatalf("deploy token: %v", err)
	}
	waitMined(ctx, t, a, tx)
	tx, err = tok.Mint(auth, testchain.DevAddress(payerIdx), big.NewInt(payerFunds))
	if err != nil {
		t.Fatalf("mint: %v", err)
	}
	waitMined(ctx, t, a, tx)
	return &chainEnv{anvil: a, token: addr, tok: tok}
}

func waitMined(ctx context.Context, t *testing.T, a *testchain.Anvil, tx *types.Transaction) {
	t.Helper()
	r, err := bind.WaitMined(ctx, a.Client, tx)
	if err != nil || r.Status != types.ReceiptStatusSuccessful {
		t.Fatalf("mine %s: %v (receipt %+v)", tx.Hash().Hex(), err, r)
	}
}

func (c *chainEnv) balance(t *testing.T, addr common.Address) *big.Int {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), chainTimeout)
	defer cancel()
	b, err := c.tok.BalanceOf(&bind.CallOpts{Context: ctx}, addr)
	if err != nil {
		t.Fatalf("balanceOf %s: %v", addr.Hex(), err)
	}
	return b
}

func (c *chainEnv) head(t *testing.T) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), chainTimeout)
	defer cancel()
	n, err := c.anvil.Client.BlockNumber(ctx)
	if err != nil {
		t.Fatalf("block number: %v", err)
	}
	return n
}

// settlement is one on-chain use of an authorization: the transaction and
// the transfer its logs carry right after AuthorizationUsed (D5).
type settlement struct {
	tx     common.Hash
	to     common.Address
	amount *big.Int
	sender common.Address // who sent the transaction
}

// settlements returns every AuthorizationUsed of (from, nonce) from block 0,
// each with the transfer that follows it in its transaction's logs.
func (c *chainEnv) settlements(t *testing.T, from common.Address, nonce common.Hash) []settlement {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), chainTimeout)
	defer cancel()
	it, err := c.tok.FilterAuthorizationUsed(&bind.FilterOpts{Context: ctx}, []common.Address{from}, [][32]byte{nonce})
	if err != nil {
		t.Fatalf("filter AuthorizationUsed: %v", err)
	}
	defer func() { _ = it.Close() }()
	var out []settlement
	for it.Next() {
		ev := it.Event.Raw
		s := settlement{tx: ev.TxHash}
		receipt, err := c.anvil.Client.TransactionReceipt(ctx, ev.TxHash)
		if err != nil {
			t.Fatalf("receipt of %s: %v", ev.TxHash.Hex(), err)
		}
		for i, l := range receipt.Logs {
			if l.Index == ev.Index && i+1 < len(receipt.Logs) {
				next := receipt.Logs[i+1]
				if len(next.Topics) == 3 && next.Topics[0] == exact.TopicTransfer && next.Address == c.token {
					s.to = common.BytesToAddress(next.Topics[2][:])
					s.amount = new(big.Int).SetBytes(next.Data)
				}
			}
		}
		tx, _, err := c.anvil.Client.TransactionByHash(ctx, ev.TxHash)
		if err != nil {
			t.Fatalf("transaction %s: %v", ev.TxHash.Hex(), err)
		}
		if s.sender, err = types.Sender(types.LatestSignerForChainID(c.anvil.ChainID), tx); err != nil {
			t.Fatalf("sender of %s: %v", ev.TxHash.Hex(), err)
		}
		out = append(out, s)
	}
	if err := it.Error(); err != nil {
		t.Fatalf("filter AuthorizationUsed: %v", err)
	}
	return out
}

// transfersTo counts the token's Transfer events to addr from block on.
func (c *chainEnv) transfersTo(t *testing.T, addr common.Address, from uint64) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), chainTimeout)
	defer cancel()
	it, err := c.tok.FilterTransfer(&bind.FilterOpts{Context: ctx, Start: from}, nil, []common.Address{addr})
	if err != nil {
		t.Fatalf("filter Transfer: %v", err)
	}
	defer func() { _ = it.Close() }()
	n := 0
	for it.Next() {
		n++
	}
	if err := it.Error(); err != nil {
		t.Fatalf("filter Transfer: %v", err)
	}
	return n
}

// replicaConfig renders the YAML config of one replica: in-process
// facilitator signing with the key in LLM4AGENTS_FACILITATOR_KEY, the given
// store and upstream, the short timeouts above.
func replicaConfig(c *chainEnv, dsn, upstreamURL string) string {
	return fmt.Sprintf(`listen: 127.0.0.1:0
network:
  id: %s
  rpc_url: %s
  asset: %s
  asset_name: %s
  asset_version: "%s"
  decimals: 6
  pay_to: %s
facilitator:
  mode: in-process
  key_env: LLM4AGENTS_FACILITATOR_KEY
  max_fee_per_gas: "1000000000000"
  settle_timeout: %s
  reconcile_interval: %s
store:
  dsn: %s
limits:
  upstream_timeout: %s
  claim_lease: %s
upstreams:
  - name: fake
    base_url: %s
models:
  - id: demo
    upstream: fake
    price: { input: "1000000", output: "2000000" }
    max_output_tokens: 64
`, network, c.anvil.URL, c.token.Hex(), tokenName, tokenVersion, testchain.DevAddress(payToIdx).Hex(),
		settleTimeout, reconcileInterval, dsn, upstreamTimeout, claimLease, upstreamURL)
}

// signerEnv is the environment entry that gives replica i its own
// facilitator key.
func signerEnv(i int) string {
	return "LLM4AGENTS_FACILITATOR_KEY=" + hexutil.Encode(crypto.FromECDSA(testchain.DevKey(firstSignerIdx+i)))
}

// records is what the tests read from a store: the facilitator's settlement
// records and the gateway's payment claims.
type records interface {
	store.Settlements
	store.Payments
	Close() error
}

// storeVariant is a store backend the replicas share.
type storeVariant struct {
	name string
	// fresh returns the DSN of a new, empty store (a file, a schema, a key
	// prefix) that is dropped when the test ends, or skips the test.
	fresh func(t *testing.T) string
	// open opens dsn for the test to read records.
	open func(ctx context.Context, dsn string) (records, error)
}

var storeVariants = []storeVariant{
	{
		name:  "sqlite",
		fresh: freshSQLite,
		open: func(ctx context.Context, dsn string) (records, error) {
			return sqlite.Open(ctx, strings.TrimPrefix(dsn, "sqlite://"), discard())
		},
	},
	{
		name:  "postgres",
		fresh: freshPostgres,
		open: func(ctx context.Context, dsn string) (records, error) {
			return postgres.Open(ctx, dsn, discard())
		},
	},
	{
		name:  "redis",
		fresh: freshRedis,
		open: func(ctx context.Context, dsn string) (records, error) {
			return redis.Open(ctx, dsn, discard())
		},
	},
}

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

// freshSQLite returns the DSN of a new database file in the test's
// temporary directory.
func freshSQLite(t *testing.T) string {
	return "sqlite://" + filepath.Join(t.TempDir(), "llm4agents.db")
}

// freshPostgres returns the DSN of a schema of its own on the test server,
// dropped when the test ends.
func freshPostgres(t *testing.T) string {
	t.Helper()
	return testdb.PostgresDSN(t, "e2e")
}

// freshRedis returns a DSN with a key prefix of its own; the prefix's keys
// are deleted when the test ends.
func freshRedis(t *testing.T) string {
	t.Helper()
	return testdb.RedisURL(t, "e2e")
}

// openRecords opens the store at dsn for reading and closes it when the test
// ends.
func openRecords(t *testing.T, v storeVariant, dsn string) records {
	t.Helper()
	return openClosed(t, "the "+v.name+" store", func(ctx context.Context) (records, error) { return v.open(ctx, dsn) })
}

// openClosed opens a store (what names it in a failure) with open, bounded
// by chainTimeout, fails the test if it cannot, and closes it when the test
// ends.
func openClosed[S io.Closer](t *testing.T, what string, open func(context.Context) (S, error)) S {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), chainTimeout)
	defer cancel()
	st, err := open(ctx)
	if err != nil {
		t.Fatalf("open %s: %v", what, err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// buyer signs authorizations for the one offer every paid request of the
// tests gets.
type buyer struct {
	signer *exact.KeySigner
	pr     *x402.PaymentRequired
	amount *big.Int
}

// newBuyer asks gatewayURL for the price of body (an unpaid request, answered
// 402) and returns a buyer for it, paying as dev account payerIdx.
func newBuyer(t *testing.T, hc *http.Client, gatewayURL, body string) *buyer {
	t.Helper()
	a := post(t.Context(), hc, gatewayURL, body, "")
	if a.err != nil || a.status != http.StatusPaymentRequired || a.required == nil {
		t.Fatalf("unpaid request: status %d, err %v, body %.300s; want a 402 with PAYMENT-REQUIRED", a.status, a.err, a.body)
	}
	if len(a.required.Accepts) != 1 {
		t.Fatalf("402 offers %d requirements, want 1", len(a.required.Accepts))
	}
	amount, err := exact.ParseUint256(a.required.Accepts[0].Amount)
	if err != nil {
		t.Fatalf("402 amount: %v", err)
	}
	return &buyer{signer: exact.NewKeySigner(testchain.DevKey(payerIdx)), pr: a.required, amount: amount}
}

// payment is one signed authorization, as the buyer sends it.
type payment struct {
	header string // the PAYMENT-SIGNATURE value
	from   common.Address
	nonce  common.Hash
	key    string // the claim key (D4)
}

// sign signs a new authorization (a fresh random nonce) for the offer.
func (b *buyer) sign(t *testing.T) payment {
	t.Helper()
	p, err := exact.NewPaymentPayload(t.Context(), b.signer, b.pr, 0, exact.SignOptions{})
	if err != nil {
		t.Fatalf("sign: %v", err)
	}
	h, err := x402.EncodeHeader(p)
	if err != nil {
		t.Fatalf("encode PAYMENT-SIGNATURE: %v", err)
	}
	pl, err := exact.ParsePayload(p.Payload)
	if err != nil {
		t.Fatalf("parse own payload: %v", err)
	}
	a := pl.Authorization
	asset, err := exact.ParseAddress(b.pr.Accepts[0].Asset)
	if err != nil {
		t.Fatal(err)
	}
	return payment{header: h, from: a.From, nonce: a.Nonce, key: exact.Key(network, asset, a.From, a.Nonce)}
}

// answer is how one request went.
type answer struct {
	err        error // transport error: no answer
	status     int
	code       string // the error JSON's code
	reason     string // the x402 reason of PAYMENT-REQUIRED or PAYMENT-RESPONSE, if any
	replay     string // the X-Llm4agents-Replay header: a replayed answer
	retryAfter time.Duration
	body       []byte
	required   *x402.PaymentRequired
	settled    *x402.SettleResponse
}

// fresh reports a paid answer that is not a replay: 200 with a body that
// carries a completion and a successful PAYMENT-RESPONSE.
func (a answer) fresh() bool {
	return a.status == http.StatusOK && a.replay == "" && a.settled != nil && a.settled.Success && hasCompletion(a.body)
}

// outcome names the answer for tallies: "200", "200 replay", "409
// payment_in_use", "402 payment_required (invalid_exact_evm_nonce_already_used)",
// "transport error".
func (a answer) outcome() string {
	switch {
	case a.err != nil:
		return "transport error"
	case a.status == http.StatusOK && a.replay != "":
		return "200 replay"
	case a.status == http.StatusOK:
		return "200"
	}
	s := strconv.Itoa(a.status) + " " + a.code
	if a.reason != "" && a.reason != a.code {
		s += " (" + a.reason + ")"
	}
	return s
}

func hasCompletion(body []byte) bool {
	if strings.HasPrefix(string(body), "data: ") {
		return strings.Contains(string(body), `"content"`) && strings.HasSuffix(strings.TrimSpace(string(body)), "data: [DONE]")
	}
	var c struct {
		Choices []struct {
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
		} `json:"choices"`
	}
	return json.Unmarshal(body, &c) == nil && len(c.Choices) == 1 && c.Choices[0].Message.Content != ""
}

// post sends one chat completion to gatewayURL with payment as its
// PAYMENT-SIGNATURE (none when empty) and reads the whole answer.
func post(ctx context.Context, hc *http.Client, gatewayURL, body, payment string) answer {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, gatewayURL+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		return answer{err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	if payment != "" {
		req.Header.Set(x402.HeaderPaymentSignature, payment)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return answer{err: err}
	}
	defer func() { _ = resp.Body.Close() }()
	a := answer{status: resp.StatusCode, replay: resp.Header.Get("X-Llm4agents-Replay")}
	if a.body, err = io.ReadAll(resp.Body); err != nil {
		return answer{err: fmt.Errorf("read the %d answer: %w", resp.StatusCode, err)}
	}
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil {
		a.retryAfter = time.Duration(s) * time.Second
	}
	if h := resp.Header.Get(x402.HeaderPaymentRequired); h != "" {
		if pr, err := x402.DecodePaymentRequired(h); err == nil {
			a.required, a.reason = pr, pr.Error
		}
	}
	if h := resp.Header.Get(x402.HeaderPaymentResponse); h != "" {
		if sr, err := x402.DecodeSettleResponse(h); err == nil {
			a.settled = sr
			if !sr.Success {
				a.reason = string(sr.ErrorReason)
			}
		}
	}
	if a.status != http.StatusOK {
		var e struct {
			Error struct {
				Code string `json:"code"`
			} `json:"error"`
		}
		if json.Unmarshal(a.body, &e) == nil {
			a.code = e.Error.Code
		}
	}
	return a
}

// newHTTPClient returns a client that keeps enough connections open for the
// concurrent copies of a trial.
func newHTTPClient(t *testing.T) *http.Client {
	t.Helper()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 64
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// envInt returns the integer in env, or def when it is unset.
func envInt(t *testing.T, env string, def int) int {
	t.Helper()
	v := os.Getenv(env)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q is not a positive integer", env, v)
	}
	return n
}

// skipShort skips a test that builds the binary and runs processes under
// -short (scripts/test -short).
func skipShort(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end: builds cmd/llm4agents and runs processes")
	}
}

// concurrently runs n subtests of t at once, named by name, and waits for
// them. Unlike t.Parallel it ignores -parallel: these tests mostly wait (for
// leases, for the chain), and -parallel is sized for the CPU.
func concurrently(t *testing.T, n int, name func(int) string, f func(t *testing.T, i int)) {
	t.Helper()
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { t.Run(name(i), func(t *testing.T) { f(t, i) }) })
	}
	wg.Wait()
}
