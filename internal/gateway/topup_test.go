package gateway_test

import (
	"crypto/ecdsa"
	"encoding/json"
	"maps"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llm4agents/llm4agents/internal/receiptlog"

	"github.com/ethereum/go-ethereum/crypto"

	"github.com/llm4agents/llm4agents/internal/chain"
	"github.com/llm4agents/llm4agents/internal/credits"
	"github.com/llm4agents/llm4agents/internal/facilitator"
	"github.com/llm4agents/llm4agents/internal/gateway"
	"github.com/llm4agents/llm4agents/internal/ledger"
	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/internal/store/sqlite"
	"github.com/llm4agents/llm4agents/internal/testchain"
	"github.com/llm4agents/llm4agents/internal/upstream"
	"github.com/llm4agents/llm4agents/internal/upstream/upstreamtest"
	"github.com/llm4agents/llm4agents/x402"
	"github.com/llm4agents/llm4agents/x402/evm/exact"
	"github.com/llm4agents/llm4agents/x402/receipt"
)

// Top-up bounds of the tests: the minimum is a chat's one-cent quote, so a
// chat's authorization could be presented as a top-up.
const (
	topUpMin = 10_000
	topUpMax = 5_000_000
)

// topUpEnv is env with prepaid credits on: the ledger, keys and sessions on
// the same SQLite store, the chain read from the simulated backend.
type topUpEnv struct {
	*env
	ledger *ledger.Ledger
	// log is the gateway's receipt log, when the rig asked for one.
	log *receiptlog.Log
	// signer signs the gateway's receipts.
	signer *credits.Signer
}

// newTopUpEnv builds a topUpEnv; wrap wraps the gateway's facilitator and
// mod changes the credits config, each when not nil.
func newTopUpEnv(t *testing.T, wrap func(*facilitator.Facilitator) gateway.Facilitator, mod func(*gateway.Credits)) *topUpEnv {
	t.Helper()
	e, _, _ := newTopUpRig(t, topUpRig{wrap: wrap, mod: mod})
	return e
}

// topUpStore is what the top-up rig needs of its store: the credits and the
// facilitator's settlements.
type topUpStore interface {
	creditStore
	store.Settlements
}

// topUpRig says how newTopUpRig builds its gateway. Its zero value is the
// plain rig: a fresh SQLite store, no faults, the default credits config.
type topUpRig struct {
	// open opens the rig's store, closed when the test ends; nil: a fresh
	// SQLite file.
	open func(t *testing.T) topUpStore
	// wrap wraps the gateway's facilitator, to inject faults.
	wrap func(*facilitator.Facilitator) gateway.Facilitator
	// ledger wraps the ledger's store, to inject faults.
	ledger func(store.Ledger) store.Ledger
	// mod changes the credits config.
	mod func(*gateway.Credits)
	// receiptLog gives the gateway a receipt log on the rig's store.
	receiptLog bool
}

// newTopUpRig starts a gateway with prepaid credits and the in-process
// facilitator on one store and a fresh simulated chain, and returns it with
// its facilitator and credits config. env.db is set when the store is
// SQLite's.
func newTopUpRig(t *testing.T, o topUpRig) (*topUpEnv, *facilitator.Facilitator, *gateway.Credits) {
	t.Helper()
	sim := testchain.NewSimulated(t)
	sim.StartAutoCommit(t, 10*time.Millisecond)
	open := o.open
	if open == nil {
		open = func(t *testing.T) topUpStore { return openCreditSQLite(t, discard()).(*sqlite.DB) }
	}
	db := open(t)
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
	var ls store.Ledger = db
	if o.ledger != nil {
		ls = o.ledger(db)
	}
	led, err := ledger.New(ls, ledger.Config{Asset: ledger.AssetID(network, sim.Token)}, discard())
	if err != nil {
		t.Fatal(err)
	}
	e := &env{chain: sim, up: up}
	if s, ok := db.(*sqlite.DB); ok {
		e.db = s
	}
	var gwFac gateway.Facilitator = fac
	if o.wrap != nil {
		gwFac = o.wrap(fac)
	}
	e.srv = httptest.NewUnstartedServer(nil)
	public := "http://" + e.srv.Listener.Addr().String()
	auth, err := credits.NewAuth(db, public, sim.ChainID.Uint64(), discard())
	if err != nil {
		t.Fatal(err)
	}
	signer, err := credits.NewSigner(receiptKey(t), sim.ChainID)
	if err != nil {
		t.Fatal(err)
	}
	cr := &gateway.Credits{
		Ledger: led, Keys: credits.NewKeys(db, discard()), Auth: auth,
		Account: credits.NewHandler(auth, db, discard()), Signer: signer, Receipts: db,
		TopUpMin: big.NewInt(topUpMin), TopUpMax: big.NewInt(topUpMax), Chain: sim.Client,
	}
	if o.mod != nil {
		o.mod(cr)
	}
	var rl *receiptlog.Log
	if o.receiptLog {
		withLog(t, &rl)(db)
	}
	gw, err := gateway.New(gateway.Config{
		PublicURL: public,
		Network:   network, Asset: sim.Token.Hex(), AssetName: "USD Coin", AssetVersion: "2", Decimals: 6,
		PayTo: sim.Addr(payToIdx).Hex(), UpstreamTimeout: 5 * time.Second, SettleTimeout: 10 * time.Second,
		Models:  []gateway.Model{{ID: "demo", UpstreamModel: "demo-upstream", Provider: prov, Price: price, MaxOutputTokens: 256}},
		Credits: cr, Log: rl,
	}, gwFac, db, discard())
	if err != nil {
		t.Fatal(err)
	}
	e.gw = gw
	e.srv.Config.Handler = gw
	e.srv.Start()
	t.Cleanup(e.srv.Close)
	return &topUpEnv{env: e, ledger: led, log: rl, signer: signer}, fac, cr
}

func receiptKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	k, err := crypto.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// reply is a response whose body was read and closed.
type reply struct {
	StatusCode int
	Header     http.Header
}

// do sends a request to the gateway with hdr.
func (e *topUpEnv) do(t *testing.T, method, path, body string, hdr http.Header) (reply, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, e.srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	maps.Copy(req.Header, hdr)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b := readAll(t, resp)
	return reply{StatusCode: resp.StatusCode, Header: resp.Header}, b
}

func topUpBody(amount string) string { return `{"amount":"` + amount + `"}` }

// topUpSigned asks for the top-up's 402 and signs it as dev account i,
// changing the offer with mod first when not nil.
func (e *topUpEnv) topUpSigned(t *testing.T, amount string, i int, mod func(*x402.PaymentRequirements)) string {
	t.Helper()
	resp, b := e.do(t, http.MethodPost, "/v1/credits/topup", topUpBody(amount), nil)
	if resp.StatusCode != http.StatusPaymentRequired {
		t.Fatalf("top-up without payment: %d %s", resp.StatusCode, b)
	}
	pr, err := x402.DecodePaymentRequired(resp.Header.Get(x402.HeaderPaymentRequired))
	if err != nil {
		t.Fatal(err)
	}
	if mod != nil {
		mod(&pr.Accepts[0])
	}
	p, err := exact.NewPaymentPayload(t.Context(), exact.NewKeySigner(e.chain.Keys[i]), pr, 0, exact.SignOptions{})
	if err != nil {
		t.Fatal(err)
	}
	h, err := x402.EncodeHeader(p)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func (e *topUpEnv) topUp(t *testing.T, amount, payment string) (reply, []byte) {
	t.Helper()
	return e.do(t, http.MethodPost, "/v1/credits/topup", topUpBody(amount), http.Header{x402.HeaderPaymentSignature: {payment}})
}

// credit is the ledger's view of dev account i: spendable and held.
func (e *topUpEnv) credit(t *testing.T, i int) (available, held int64) {
	t.Helper()
	b, err := e.ledger.Balance(t.Context(), e.chain.Addr(i))
	if err != nil {
		t.Fatal(err)
	}
	return b.Available.Int64(), b.Held.Int64()
}

// credits is the number of top-up entries of dev account i.
func (e *topUpEnv) credits(t *testing.T, i int) int {
	t.Helper()
	es, err := e.ledger.Statement(t.Context(), e.chain.Addr(i), 0, store.MaxEntries)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, en := range es {
		if en.Kind == store.EntryCredit {
			n++
		}
	}
	return n
}

type topUpResult struct {
	Account     string `json:"account"`
	Credited    string `json:"credited"`
	Balance     string `json:"balance"`
	Transaction string `json:"transaction"`
	LedgerSeq   int64  `json:"ledger_seq"`
	// Receipt is the envelope, as a string so that results compare.
	Receipt receiptText `json:"receipt"`
}

// receiptText is a JSON value kept as its text.
type receiptText string

func (r *receiptText) UnmarshalJSON(b []byte) error {
	*r = receiptText(b)
	return nil
}

func decodeTopUp(t *testing.T, b []byte) topUpResult {
	t.Helper()
	var r topUpResult
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		t.Fatalf("top-up answer %s: %v", b, err)
	}
	return r
}

// TestTopUpCredits: a top-up pays the amount on chain through x402 and
// credits the payer once with it; the answer names the settlement.
func TestTopUpCredits(t *testing.T) {
	e := newTopUpEnv(t, nil, nil)
	payTo0 := e.chain.BalanceOf(t, e.chain.Addr(payToIdx))
	buyer0 := e.chain.BalanceOf(t, e.chain.Addr(buyerIdx))

	// The 402 quotes the amount itself, for the top-up route.
	resp, b := e.do(t, http.MethodPost, "/v1/credits/topup", topUpBody("2500000"), nil)
	if resp.StatusCode != http.StatusPaymentRequired || errorCode(t, b) != "payment_required" || !strings.Contains(string(b), "2.50 USDC") {
		t.Fatalf("unpaid: %d %s", resp.StatusCode, b)
	}
	pr, err := x402.DecodePaymentRequired(resp.Header.Get(x402.HeaderPaymentRequired))
	if err != nil {
		t.Fatal(err)
	}
	if a := pr.Accepts[0]; len(pr.Accepts) != 1 || a.Amount != "2500000" || a.Scheme != "exact" || !strings.HasSuffix(pr.Resource.URL, "/v1/credits/topup") {
		t.Fatalf("offer %+v, resource %+v", pr.Accepts, pr.Resource)
	}

	h := e.topUpSigned(t, "2500000", buyerIdx, nil)
	resp, b = e.topUp(t, "2500000", h)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("top-up: %d %s", resp.StatusCode, b)
	}
	got := decodeTopUp(t, b)
	want := strings.ToLower(e.chain.Addr(buyerIdx).Hex())
	if got.Account != want || got.Credited != "2500000" || got.Balance != "2500000" || got.LedgerSeq <= 0 || len(got.Transaction) != 66 {
		t.Errorf("answer %+v", got)
	}
	sr, err := x402.DecodeSettleResponse(resp.Header.Get(x402.HeaderPaymentResponse))
	if err != nil || !sr.Success || sr.Transaction != got.Transaction {
		t.Errorf("PAYMENT-RESPONSE %+v, %v", sr, err)
	}
	// Its receipt: signed, the credit bought, the balance and entry after it.
	r, sig, err := receipt.DecodeHeader(resp.Header.Get(receipt.Header))
	if err != nil {
		t.Fatalf("receipt header: %v", err)
	}
	wk := e.signer.WellKnown()
	if addr, err := receipt.Verify(r, sig, wk.Receipts.Domain); err != nil || addr != wk.Receipts.Signer {
		t.Fatalf("receipt signed by %s (%v), want %s", addr, err, wk.Receipts.Signer)
	}
	if r.Model != receipt.ModelTopUp || r.Rail != receipt.RailExact || r.Amount.Int64() != 2_500_000 || r.BalanceAfter.Int64() != 2_500_000 ||
		r.LedgerSeq.Int64() != got.LedgerSeq || r.Account != e.chain.Addr(buyerIdx) || r.Network != network || got.Receipt == "" {
		t.Errorf("top-up receipt %+v", r)
	}
	if avail, held := e.credit(t, buyerIdx); avail != 2_500_000 || held != 0 {
		t.Errorf("ledger: %d available, %d held", avail, held)
	}
	if rcv, spent := e.moved(t, payTo0, buyer0); rcv != 2_500_000 || spent != 2_500_000 {
		t.Errorf("chain moved %d/%d", rcv, spent)
	}
	if e.up.Calls() != 0 {
		t.Errorf("a top-up called the upstream %d times", e.up.Calls())
	}
}

// TestTopUpSamePaymentTwice: one payment presented again, later or 16 times
// at once, is credited once; every answer is the credit or a 409.
func TestTopUpSamePaymentTwice(t *testing.T) {
	e := newTopUpEnv(t, nil, nil)
	h := e.topUpSigned(t, "1000000", buyerIdx, nil)
	resp, b := e.topUp(t, "1000000", h)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("first: %d %s", resp.StatusCode, b)
	}
	first := decodeTopUp(t, b)
	resp, b = e.topUp(t, "1000000", h)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Llm4agents-Replay") != "credited" {
		t.Fatalf("again: %d %s", resp.StatusCode, b)
	}
	if again := decodeTopUp(t, b); again != first {
		t.Errorf("again %+v, first %+v", again, first)
	}
	if avail, _ := e.credit(t, buyerIdx); avail != 1_000_000 || e.credits(t, buyerIdx) != 1 {
		t.Fatalf("after two presentations: %d available, %d credits", avail, e.credits(t, buyerIdx))
	}
	m := scrape(t, e.srv.URL)
	if c, p := m[`llm4agents_topups_total{outcome="credited"}`], m[`llm4agents_topups_total{outcome="presented_again"}`]; c != 1 || p != 1 {
		t.Errorf("top-up metrics: credited %v, presented_again %v; want 1 and 1", c, p)
	}

	// 16 copies of a new payment at once.
	payTo0 := e.chain.BalanceOf(t, e.chain.Addr(payToIdx))
	h = e.topUpSigned(t, "300000", buyerIdx, nil)
	const n = 16
	codes := make(chan int, n)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, e.srv.URL+"/v1/credits/topup", strings.NewReader(topUpBody("300000")))
			if err != nil {
				codes <- -1
				return
			}
			req.Header.Set(x402.HeaderPaymentSignature, h)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				codes <- -1
				return
			}
			_ = resp.Body.Close() // the status is what counts here
			codes <- resp.StatusCode
		})
	}
	wg.Wait()
	close(codes)
	ok := 0
	for c := range codes {
		switch c {
		case http.StatusOK:
			ok++
		case http.StatusConflict:
		default:
			t.Errorf("a concurrent copy got %d", c)
		}
	}
	if ok == 0 {
		t.Error("no copy was answered with the credit")
	}
	// A late copy finds it settled: credited, once.
	if resp, b := e.topUp(t, "300000", h); resp.StatusCode != http.StatusOK {
		t.Errorf("late copy: %d %s", resp.StatusCode, b)
	}
	if avail, _ := e.credit(t, buyerIdx); avail != 1_300_000 || e.credits(t, buyerIdx) != 2 {
		t.Errorf("after 16 copies: %d available, %d credits; want 1300000, 2", avail, e.credits(t, buyerIdx))
	}
	if rcv := new(big.Int).Sub(e.chain.BalanceOf(t, e.chain.Addr(payToIdx)), payTo0).Int64(); rcv != 300_000 {
		t.Errorf("payTo received %d for 16 copies", rcv)
	}
}

// TestTopUpBounds: an amount that is malformed or out of bounds is a 400
// stating the bounds, before any payment is asked for or used.
func TestTopUpBounds(t *testing.T) {
	e := newTopUpEnv(t, nil, nil)
	h := e.topUpSigned(t, "100000", buyerIdx, nil)
	for _, tc := range []struct{ name, body string }{
		{"empty", ``},
		{"not an object", `["100000"]`},
		{"no amount", `{}`},
		{"number", `{"amount":100000}`},
		{"null", `{"amount":null}`},
		{"negative", `{"amount":"-100000"}`},
		{"plus sign", `{"amount":"+100000"}`},
		{"decimal point", `{"amount":"100000.0"}`},
		{"exponent", `{"amount":"1e6"}`},
		{"hex", `{"amount":"0x186a0"}`},
		{"spaces", `{"amount":" 100000"}`},
		{"leading zero", `{"amount":"0100000"}`},
		{"zero", `{"amount":"0"}`},
		{"below the minimum", `{"amount":"9999"}`},
		{"above the maximum", `{"amount":"5000001"}`},
		{"above 2^256", `{"amount":"` + strings.Repeat("9", 100) + `"}`},
		{"unknown field", `{"amount":"100000","to":"0xabc"}`},
		{"other case", `{"Amount":"100000"}`},
		{"twice", `{"amount":"100000","amount":"5000000"}`},
		{"trailing data", `{"amount":"100000"}{}`},
		{"truncated", `{"amount":"100000"`},
		{"too large", `{"amount":"100000"` + strings.Repeat(" ", 2000) + `}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, b := e.do(t, http.MethodPost, "/v1/credits/topup", tc.body, http.Header{x402.HeaderPaymentSignature: {h}})
			if resp.StatusCode != http.StatusBadRequest || errorCode(t, b) != "invalid_top_up" {
				t.Fatalf("%d %s", resp.StatusCode, b)
			}
			if !strings.Contains(string(b), "10000 (0.01 USDC) and 5000000 (5.00 USDC)") {
				t.Errorf("the error does not state the bounds: %s", b)
			}
			if resp.Header.Get(x402.HeaderPaymentRequired) != "" {
				t.Error("a bad top-up asks for payment")
			}
		})
	}
	// The bounds themselves are sold.
	for _, a := range []string{"10000", "5000000"} {
		if resp, b := e.do(t, http.MethodPost, "/v1/credits/topup", topUpBody(a), nil); resp.StatusCode != http.StatusPaymentRequired {
			t.Errorf("amount %s: %d %s", a, resp.StatusCode, b)
		}
	}
	if avail, _ := e.credit(t, buyerIdx); avail != 0 {
		t.Errorf("bad top-ups credited %d", avail)
	}
	// The payment sent along with every bad request is still unspent.
	if resp, b := e.topUp(t, "100000", h); resp.StatusCode != http.StatusOK {
		t.Errorf("the payment after the bad requests: %d %s", resp.StatusCode, b)
	}
}

// TestTopUpMismatch: a payment for another amount, asset or payee, or one
// that paid for a chat completion, credits nothing.
func TestTopUpMismatch(t *testing.T) {
	e := newTopUpEnv(t, nil, nil)
	payTo0 := e.chain.BalanceOf(t, e.chain.Addr(payToIdx))
	for _, tc := range []struct {
		name string
		mod  func(*x402.PaymentRequirements)
		body string // the amount presented
		code string // the 402's reason
	}{
		{"another amount", nil, "200000", "invalid_exact_evm_accepted_mismatch"},
		{"another asset", func(r *x402.PaymentRequirements) { r.Asset = e.chain.Addr(3).Hex() }, "100000", "invalid_exact_evm_signature"},
		{"another payee", func(r *x402.PaymentRequirements) { r.PayTo = e.chain.Addr(3).Hex() }, "100000", "invalid_exact_evm_accepted_mismatch"},
		{"another network", func(r *x402.PaymentRequirements) { r.Network = "eip155:1" }, "100000", "invalid_exact_evm_signature"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := e.topUpSigned(t, "100000", buyerIdx, tc.mod)
			resp, b := e.topUp(t, tc.body, h)
			if resp.StatusCode != http.StatusPaymentRequired || errorCode(t, b) != tc.code {
				t.Fatalf("%d %s", resp.StatusCode, b)
			}
		})
	}

	// A chat completion's payment, presented as a top-up of its amount.
	h := e.signedHeader(t, chatBody, buyerIdx)
	resp := e.post(t, http.DefaultClient, chatBody, http.Header{x402.HeaderPaymentSignature: {h}})
	if b := readAll(t, resp); resp.StatusCode != http.StatusOK {
		t.Fatalf("chat: %d %s", resp.StatusCode, b)
	}
	if resp, b := e.topUp(t, "10000", h); resp.StatusCode != http.StatusConflict {
		t.Errorf("a chat's payment as a top-up: %d %s", resp.StatusCode, b)
	}
	if avail, _ := e.credit(t, buyerIdx); avail != 0 {
		t.Errorf("mismatched payments credited %d", avail)
	}
	if rcv := new(big.Int).Sub(e.chain.BalanceOf(t, e.chain.Addr(payToIdx)), payTo0).Int64(); rcv != 10_000 {
		t.Errorf("payTo received %d, want the chat's 10000 only", rcv)
	}
}

// TestTopUpPending (D3): a settlement answered pending credits nothing; the
// same payment presented again settles it and credits once.
func TestTopUpPending(t *testing.T) {
	var pf *pendingFac
	e := newTopUpEnv(t, func(f *facilitator.Facilitator) gateway.Facilitator {
		pf = &pendingFac{Facilitator: f, pending: 1}
		return pf
	}, nil)
	h := e.topUpSigned(t, "700000", buyerIdx, nil)
	resp, b := e.topUp(t, "700000", h)
	if resp.StatusCode != http.StatusPaymentRequired || errorCode(t, b) != "settlement_pending" {
		t.Fatalf("first: %d %s", resp.StatusCode, b)
	}
	if sr, err := x402.DecodeSettleResponse(resp.Header.Get(x402.HeaderPaymentResponse)); err != nil || sr.ErrorReason != x402.ReasonSettlementPending {
		t.Fatalf("first PAYMENT-RESPONSE %+v, %v", sr, err)
	}
	c, err := e.db.Payment(t.Context(), e.claimKey(t, h))
	if err != nil || c.State != store.PaymentPending {
		t.Fatalf("claim %+v, %v", c, err)
	}
	if avail, _ := e.credit(t, buyerIdx); avail != 0 {
		t.Fatalf("a pending top-up credited %d", avail)
	}
	resp, b = e.topUp(t, "700000", h)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("retry: %d %s", resp.StatusCode, b)
	}
	if got := decodeTopUp(t, b); got.Balance != "700000" {
		t.Errorf("retry answer %+v", got)
	}
	if resp, b := e.topUp(t, "700000", h); resp.StatusCode != http.StatusOK {
		t.Errorf("third: %d %s", resp.StatusCode, b)
	}
	if avail, _ := e.credit(t, buyerIdx); avail != 700_000 || e.credits(t, buyerIdx) != 1 {
		t.Errorf("after the retries: %d available, %d credits", avail, e.credits(t, buyerIdx))
	}
	if pf.calls() != 2 {
		t.Errorf("settle calls = %d, want 2 (pending, then the retry)", pf.calls())
	}
}

// TestTopUpBalance: the balance answers a key or a session of the account,
// and 401 to anything else, never naming the credential.
func TestTopUpBalance(t *testing.T) {
	e := newTopUpEnv(t, nil, nil)
	h := e.topUpSigned(t, "400000", buyerIdx, nil)
	if resp, b := e.topUp(t, "400000", h); resp.StatusCode != http.StatusOK {
		t.Fatalf("top-up: %d %s", resp.StatusCode, b)
	}
	owner := strings.ToLower(e.chain.Addr(buyerIdx).Hex())
	secret, id, err := credits.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.db.CreateKey(t.Context(), store.APIKey{ID: id, Hash: credits.HashSecret(secret), Owner: owner, Name: "agent",
		TotalCap: 150_000, PeriodCap: store.NoCap}); err != nil {
		t.Fatal(err)
	}
	other, _, err := credits.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	session := credits.SessionPrefix + strings.TrimPrefix(other, credits.KeyPrefix)
	if _, err := e.db.CreateSession(t.Context(), credits.HashSecret(session), owner, time.Hour); err != nil {
		t.Fatal(err)
	}
	unknownSession := credits.SessionPrefix + strings.TrimPrefix(secret, credits.KeyPrefix)

	type balance struct {
		Account, Asset, Network, Balance, Held string
		Key                                    *struct {
			ID, Spent, Held string
			TotalCap        *string `json:"total_cap"`
			Remaining       *string
			PeriodCap       *string `json:"period_cap"`
		}
	}
	for _, tc := range []struct {
		name   string
		auth   []string
		status int
		key    bool
	}{
		{"no credentials", nil, http.StatusUnauthorized, false},
		{"not a bearer", []string{"Basic " + secret}, http.StatusUnauthorized, false},
		{"two bearers", []string{"Bearer " + secret, "Bearer " + session}, http.StatusUnauthorized, false},
		{"unknown key", []string{"Bearer " + other}, http.StatusUnauthorized, false},
		{"malformed key", []string{"Bearer sk-l4a-nope"}, http.StatusUnauthorized, false},
		{"unknown session", []string{"Bearer " + unknownSession}, http.StatusUnauthorized, false},
		{"OpenAI placeholder", []string{"Bearer unused"}, http.StatusUnauthorized, false},
		{"key", []string{"Bearer " + secret}, http.StatusOK, true},
		{"session", []string{"Bearer " + session}, http.StatusOK, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, b := e.do(t, http.MethodGet, "/v1/credits/balance", "", http.Header{"Authorization": tc.auth})
			if resp.StatusCode != tc.status {
				t.Fatalf("%d %s", resp.StatusCode, b)
			}
			for _, v := range tc.auth {
				if tok := strings.TrimPrefix(v, "Bearer "); strings.Contains(string(b), tok) {
					t.Errorf("the answer names the credential: %s", b)
				}
			}
			if tc.status != http.StatusOK {
				return
			}
			var got balance
			if err := json.Unmarshal(b, &got); err != nil {
				t.Fatal(err)
			}
			if got.Account != owner || got.Balance != "400000" || got.Held != "0" || !strings.EqualFold(got.Asset, e.chain.Token.Hex()) {
				t.Errorf("balance %s", b)
			}
			switch {
			case tc.key && (got.Key == nil || got.Key.ID != id || got.Key.Spent != "0" || *got.Key.TotalCap != "150000" ||
				*got.Key.Remaining != "150000" || got.Key.PeriodCap != nil):
				t.Errorf("key usage %s", b)
			case !tc.key && got.Key != nil:
				t.Errorf("a session's balance names a key: %s", b)
			}
		})
	}
	// A revoked key is refused.
	if _, err := e.db.RevokeKey(t.Context(), owner, id); err != nil {
		t.Fatal(err)
	}
	if resp, b := e.do(t, http.MethodGet, "/v1/credits/balance", "", http.Header{"Authorization": {"Bearer " + secret}}); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("revoked key: %d %s", resp.StatusCode, b)
	}
	// A payment sent to the balance is refused and never used.
	if resp, b := e.do(t, http.MethodGet, "/v1/credits/balance", "", http.Header{"Authorization": {"Bearer " + session},
		x402.HeaderPaymentSignature: {h}}); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("balance with a payment: %d %s", resp.StatusCode, b)
	}
}

// TestTopUpNotFinal (D17): a settlement with fewer confirmations than
// configured is not credited; the claim stays settled, and every later
// presentation says so until it is final.
func TestTopUpNotFinal(t *testing.T) {
	e := newTopUpEnv(t, nil, func(c *gateway.Credits) { c.Confirmations = 1 << 40 })
	h := e.topUpSigned(t, "200000", buyerIdx, nil)
	for i := range 2 {
		resp, b := e.topUp(t, "200000", h)
		if resp.StatusCode != http.StatusConflict || errorCode(t, b) != "settlement_not_final" {
			t.Fatalf("presentation %d: %d %s", i, resp.StatusCode, b)
		}
	}
	if avail, _ := e.credit(t, buyerIdx); avail != 0 {
		t.Errorf("a settlement not final credited %d", avail)
	}
	if c, err := e.db.Payment(t.Context(), e.claimKey(t, h)); err != nil || c.State != store.PaymentSettled {
		t.Errorf("claim %+v, %v", c, err)
	}
}
