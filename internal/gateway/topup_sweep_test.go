package gateway_test

import (
	"context"
	"encoding/hex"
	"errors"
	"log/slog"
	"math/big"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"

	"github.com/llm4agents/llm4agents/internal/facilitator"
	"github.com/llm4agents/llm4agents/internal/gateway"
	"github.com/llm4agents/llm4agents/internal/ledger"
	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/internal/testchain"
	"github.com/llm4agents/llm4agents/x402"
	"github.com/llm4agents/llm4agents/x402/evm/exact"
)

// topUpMarker is the content type of a top-up claim's staged marker
// (topup.go).
const topUpMarker = "application/vnd.llm4agents.topup+json"

// sweepStore is what the sweep rig needs of a store: the credits, the
// facilitator's settlements, and the listing the sweep reads.
type sweepStore interface {
	creditStore
	store.Settlements
	StagedPayments(ctx context.Context, contentType string, afterCreated time.Time, afterKey string, limit int) ([]store.PaymentClaim, error)
}

type sweepOpts struct {
	// confirmations is the credits' N of D17.
	confirmations uint64
	// failCredits is how many ledger credits fail before they work: the
	// crash between settlement and credit.
	failCredits int
	// pending is how many paid settlements the facilitator answers
	// settlement_pending, naming the transaction (the buyer saw a 402 and
	// left).
	pending int
	// leaky makes the sweep's store list claims of every staged content
	// type, as a faulty store would: only the sweep's own marker check
	// stands between a chat's claim and a credit.
	leaky bool
}

// sweepEnv is the top-up rig (topUpEnv's helpers) on one credit backend,
// with the sweep of its gateway, whose log is kept.
type sweepEnv struct {
	*topUpEnv
	db    sweepStore
	fac   *facilitator.Facilitator
	sweep *gateway.TopUpSweep
	cfg   gateway.TopUpSweepConfig
	logs  *syncBuffer
}

func newSweepEnv(t *testing.T, b creditBackend, o sweepOpts) *sweepEnv {
	t.Helper()
	var db sweepStore
	rig := topUpRig{
		open: func(t *testing.T) topUpStore {
			t.Helper()
			var ok bool
			if db, ok = b.open(t, discard()).(sweepStore); !ok {
				t.Fatalf("the %s store cannot list staged payments", b.name)
			}
			return db
		},
		mod: func(c *gateway.Credits) { c.Confirmations = o.confirmations },
	}
	if o.pending > 0 {
		rig.wrap = func(fac *facilitator.Facilitator) gateway.Facilitator {
			lf := &lateFac{Facilitator: fac}
			lf.late.Store(int32(o.pending))
			return lf
		}
	}
	if o.failCredits > 0 {
		rig.ledger = func(l store.Ledger) store.Ledger { return &flakyCredits{Ledger: l, fail: o.failCredits} }
	}
	te, fac, cr := newTopUpRig(t, rig)
	var payments store.Payments = db
	if o.leaky {
		payments = leakyLister{db}
	}
	e := &sweepEnv{
		topUpEnv: te,
		db:       db, fac: fac, logs: &syncBuffer{},
		cfg: gateway.TopUpSweepConfig{
			Network: network, Asset: te.chain.Token.Hex(), PayTo: te.chain.Addr(payToIdx).Hex(), Credits: cr, Payments: payments,
		},
	}
	e.sweep = e.newSweep(t)
	return e
}

// newSweep is a new sweep of the rig's gateway: a restarted process, which
// remembers nothing.
func (e *sweepEnv) newSweep(t *testing.T) *gateway.TopUpSweep {
	t.Helper()
	log := slog.New(slog.NewTextHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	w, err := gateway.NewTopUpSweep(e.cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// swept runs the sweep w and returns how many it credited.
func (e *sweepEnv) swept(t *testing.T, w *gateway.TopUpSweep) int {
	t.Helper()
	n, err := w.SweepTopUps(t.Context())
	if err != nil {
		t.Fatalf("SweepTopUps: %v", err)
	}
	return n
}

// ledgerOf checks the buyer's spendable balance and number of credits.
func (e *sweepEnv) ledgerOf(t *testing.T, what string, balance int64, n int) {
	t.Helper()
	if avail, _ := e.credit(t, buyerIdx); avail != balance || e.credits(t, buyerIdx) != n {
		t.Errorf("%s: %d available in %d credits; want %d in %d", what, avail, e.credits(t, buyerIdx), balance, n)
	}
}

// claim reads the claim of a PAYMENT-SIGNATURE.
func (e *sweepEnv) claim(t *testing.T, h string) store.PaymentClaim {
	t.Helper()
	c, err := e.db.Payment(t.Context(), e.claimKey(t, h))
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	return c
}

// flakyCredits fails the first `fail` ledger credits, as a process that
// died between a settlement and its credit would leave them.
type flakyCredits struct {
	store.Ledger
	mu   sync.Mutex
	fail int
}

func (f *flakyCredits) Credit(ctx context.Context, opID, owner, asset string, amount int64) (store.Entry, error) {
	f.mu.Lock()
	if f.fail > 0 {
		f.fail--
		f.mu.Unlock()
		return store.Entry{}, errors.New("ledger down (injected)")
	}
	f.mu.Unlock()
	return f.Ledger.Credit(ctx, opID, owner, asset, amount)
}

// lateFac settles for real but answers the first `late` paid settlements
// settlement_pending with their transaction: broadcast, confirmed only
// after the buyer was answered.
type lateFac struct {
	*facilitator.Facilitator
	late atomic.Int32
}

func (f *lateFac) Settle(ctx context.Context, p *x402.PaymentPayload, req x402.PaymentRequirements) (*x402.SettleResponse, error) {
	sr, err := f.Facilitator.Settle(ctx, p, req)
	if err == nil && sr.Success && f.late.Add(-1) >= 0 {
		return &x402.SettleResponse{Success: false, ErrorReason: x402.ReasonSettlementPending,
			Transaction: sr.Transaction, Network: sr.Network, Payer: sr.Payer}, nil
	}
	return sr, err
}

// leakyLister lists the claims of every staged content type the gateway
// writes, whatever it is asked for, on the first page.
type leakyLister struct{ sweepStore }

func (l leakyLister) StagedPayments(ctx context.Context, _ string, after time.Time, afterKey string, limit int) ([]store.PaymentClaim, error) {
	if !after.IsZero() || afterKey != "" {
		return nil, nil
	}
	var out []store.PaymentClaim
	for _, kind := range []string{topUpMarker, "application/json", "text/event-stream"} {
		page, err := l.sweepStore.StagedPayments(ctx, kind, time.Time{}, "", limit)
		if err != nil {
			return nil, err
		}
		out = append(out, page...)
	}
	return out, nil
}

// TestTopUpSweepCrash: a top-up settled on chain and recorded, but never
// credited (the ledger failed, as after a crash between the two), is
// credited by the sweep exactly once; a second sweep, or a restarted one,
// credits nothing more, and the buyer's later retry with the same
// PAYMENT-SIGNATURE is answered credited without a second credit.
func TestTopUpSweepCrash(t *testing.T) {
	eachCreditBackend(t, func(t *testing.T, b creditBackend) {
		e := newSweepEnv(t, b, sweepOpts{failCredits: 1})
		h := e.topUpSigned(t, "1500000", buyerIdx, nil)
		resp, body := e.topUp(t, "1500000", h)
		if resp.StatusCode != http.StatusServiceUnavailable || errorCode(t, body) != "ledger_unavailable" {
			t.Fatalf("top-up with the ledger down: %d %s", resp.StatusCode, body)
		}
		if c := e.claim(t, h); c.State != store.PaymentSettled || c.TxHash == "" {
			t.Fatalf("claim after the failed credit: %+v", c)
		}
		e.ledgerOf(t, "before the sweep", 0, 0)

		if n := e.swept(t, e.sweep); n != 1 {
			t.Errorf("first sweep credited %d, want 1", n)
		}
		e.ledgerOf(t, "after the sweep", 1_500_000, 1)
		if n := e.swept(t, e.sweep); n != 0 {
			t.Errorf("second sweep credited %d, want 0", n)
		}
		// A restarted process checks the claim once more: ledger.TopUp
		// answers it with the first credit.
		e.swept(t, e.newSweep(t))
		e.ledgerOf(t, "after a restarted sweep", 1_500_000, 1)

		resp, body = e.topUp(t, "1500000", h)
		if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Llm4agents-Replay") != "credited" {
			t.Fatalf("retry after the sweep: %d %s", resp.StatusCode, body)
		}
		if got := decodeTopUp(t, body); got.Credited != "1500000" || got.Balance != "1500000" {
			t.Errorf("retry answer %+v", got)
		}
		e.ledgerOf(t, "after the retry", 1_500_000, 1)
		if s := e.logs.String(); !strings.Contains(s, "credited a settled top-up") || strings.Contains(s, h) {
			t.Errorf("sweep log:\n%s", s)
		}
	})
}

// TestTopUpSweepNotFinal (D17): the sweep leaves a settlement with fewer
// confirmations than configured, and credits it once they are mined.
func TestTopUpSweepNotFinal(t *testing.T) {
	eachCreditBackend(t, func(t *testing.T, b creditBackend) {
		e := newSweepEnv(t, b, sweepOpts{confirmations: 3})
		h := e.topUpSigned(t, "200000", buyerIdx, nil)
		if resp, body := e.topUp(t, "200000", h); resp.StatusCode != http.StatusConflict || errorCode(t, body) != "settlement_not_final" {
			t.Fatalf("top-up: %d %s", resp.StatusCode, body)
		}
		for i := range 2 {
			if n := e.swept(t, e.sweep); n != 0 {
				t.Fatalf("sweep %d of a settlement not final credited %d", i, n)
			}
			e.ledgerOf(t, "not final", 0, 0)
			e.chain.Commit() // one more confirmation; the third comes below
		}
		if n := e.swept(t, e.sweep); n != 1 {
			t.Errorf("sweep once final credited %d, want 1", n)
		}
		e.ledgerOf(t, "final", 200_000, 1)
		if resp, body := e.topUp(t, "200000", h); resp.StatusCode != http.StatusOK {
			t.Errorf("retry: %d %s", resp.StatusCode, body)
		}
		e.ledgerOf(t, "after the retry", 200_000, 1)
	})
}

// TestTopUpSweepPending (D3): a top-up answered settlement_pending whose
// transaction was mined is recorded settled by the sweep and credited once;
// the buyer's retry then only reads the credit.
func TestTopUpSweepPending(t *testing.T) {
	eachCreditBackend(t, func(t *testing.T, b creditBackend) {
		e := newSweepEnv(t, b, sweepOpts{pending: 1})
		h := e.topUpSigned(t, "700000", buyerIdx, nil)
		if resp, body := e.topUp(t, "700000", h); resp.StatusCode != http.StatusPaymentRequired || errorCode(t, body) != "settlement_pending" {
			t.Fatalf("top-up: %d %s", resp.StatusCode, body)
		}
		before := e.claim(t, h)
		if before.State != store.PaymentPending || before.TxHash == "" {
			t.Fatalf("claim %+v", before)
		}
		if n := e.swept(t, e.sweep); n != 1 {
			t.Errorf("sweep credited %d, want 1", n)
		}
		if c := e.claim(t, h); c.State != store.PaymentSettled || c.TxHash != before.TxHash || c.Fence != before.Fence {
			t.Errorf("claim after the sweep %+v; want settled with %s under fence %d", c, before.TxHash, before.Fence)
		}
		e.ledgerOf(t, "after the sweep", 700_000, 1)
		resp, body := e.topUp(t, "700000", h)
		if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Llm4agents-Replay") != "credited" {
			t.Fatalf("retry: %d %s", resp.StatusCode, body)
		}
		e.ledgerOf(t, "after the retry", 700_000, 1)
	})
}

// settleDirect pays amount to payTo through the facilitator, outside the
// gateway (a chat's payment, as far as the chain can tell), and returns the
// payment's claim key, its transaction and its header.
func (e *sweepEnv) settleDirect(t *testing.T, amount string) (key, tx, h string) {
	t.Helper()
	h = e.topUpSigned(t, amount, buyerIdx, nil)
	p, err := x402.DecodePaymentPayload(h)
	if err != nil {
		t.Fatal(err)
	}
	req, err := p.AcceptedRequirements()
	if err != nil {
		t.Fatal(err)
	}
	sr, err := e.fac.Settle(t.Context(), p, req)
	if err != nil || !sr.Success {
		t.Fatalf("settle: %+v, %v", sr, err)
	}
	return e.claimKey(t, h), sr.Transaction, h
}

// craft writes a claim as the hostile case wants it: staged with kind and
// body (nothing staged when kind is ""), then moved to state with tx.
func (e *sweepEnv) craft(t *testing.T, c store.PaymentClaim, kind, body string, state store.PaymentState, tx string) {
	t.Helper()
	ctx := t.Context()
	c.ExpiresAt = time.Now().Add(time.Hour)
	got, held, err := e.db.ClaimPayment(ctx, c, time.Minute)
	if err != nil || !held {
		t.Fatalf("claim %q: %+v, %v, %v", c.Key, got, held, err)
	}
	if kind != "" {
		if err := e.db.StagePayment(ctx, c.Key, got.Fence, store.StagedResponse{Status: http.StatusOK, ContentType: kind, Body: []byte(body)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.db.UpdatePayment(ctx, c.Key, got.Fence, state, tx); err != nil {
		t.Fatal(err)
	}
}

// TestTopUpSweepSkips: the sweep credits only a top-up claim whose key names
// this gateway's network and token and whose transaction pays it: never a
// chat's claim, a payment made outside a top-up, a claim naming another
// network, token, payer or amount, a key that does not parse or a
// transaction that is not a hash. Each is logged at Warn, once, naming no
// secret.
func TestTopUpSweepSkips(t *testing.T) {
	eachCreditBackend(t, func(t *testing.T, b creditBackend) {
		e := newSweepEnv(t, b, sweepOpts{leaky: true})
		// A chat completion paid through the gateway.
		ch := e.signedHeader(t, chatBody, buyerIdx)
		resp := e.post(t, http.DefaultClient, chatBody, http.Header{x402.HeaderPaymentSignature: {ch}})
		if body := readAll(t, resp); resp.StatusCode != http.StatusOK {
			t.Fatalf("chat: %d %s", resp.StatusCode, body)
		}
		// A payment to us settled outside any top-up: the chain shows it
		// paid, the claims below carry it.
		key, tx, h := e.settleDirect(t, "300000")
		p, err := x402.DecodePaymentPayload(h)
		if err != nil {
			t.Fatal(err)
		}
		auth, err := exact.ParsePayload(p.Payload)
		if err != nil {
			t.Fatal(err)
		}
		a := auth.Authorization
		buyer := e.chain.Addr(buyerIdx)
		other := common.HexToAddress("0x00000000000000000000000000000000000000aa")
		nonce2 := common.HexToHash("0x" + strings.Repeat("42", 32))
		good := func(k string) store.PaymentClaim {
			return store.PaymentClaim{Key: k, Network: network, Payer: buyer.Hex(), Amount: "300000", Owner: "crafted"}
		}
		marker := `{"amount":"300000"}`
		upper := network + "/" + strings.ToUpper(hex.EncodeToString(e.chain.Token[:])) + "/" + hex.EncodeToString(buyer[:]) + "/" + hex.EncodeToString(nonce2[:])

		type crafted struct {
			name  string
			claim store.PaymentClaim
			kind  string
			body  string
			state store.PaymentState
			tx    string
			warn  bool // logged at Warn (a transaction not found is only not final)
		}
		cases := []crafted{
			{"paid, no marker", good(key), "application/json", marker, store.PaymentSettled, tx, true},
			{"paid, nothing staged", good(exact.Key(network, e.chain.Token, buyer, common.HexToHash("0x01"))), "", "", store.PaymentSettled, tx, false},
			{"another network", func() store.PaymentClaim {
				c := good(exact.Key("eip155:8453", e.chain.Token, a.From, common.HexToHash("0x09")))
				c.Network = "eip155:8453"
				return c
			}(), topUpMarker, marker, store.PaymentSettled, tx, true},
			{"key of another network", good(exact.Key("eip155:8453", e.chain.Token, a.From, a.Nonce)), topUpMarker, marker, store.PaymentSettled, tx, true},
			{"key of another token", good(exact.Key(network, other, a.From, a.Nonce)), topUpMarker, marker, store.PaymentSettled, tx, true},
			{"another payer", func() store.PaymentClaim {
				c := good(exact.Key(network, e.chain.Token, a.From, common.HexToHash("0x02")))
				c.Payer = other.Hex()
				return c
			}(), topUpMarker, marker, store.PaymentSettled, tx, true},
			{"marker of another amount", good(exact.Key(network, e.chain.Token, a.From, common.HexToHash("0x03"))), topUpMarker, `{"amount":"3000000"}`, store.PaymentSettled, tx, true},
			{"marker not JSON", good(exact.Key(network, e.chain.Token, a.From, common.HexToHash("0x04"))), topUpMarker, `amount=300000`, store.PaymentSettled, tx, true},
			{"amount not digits", func() store.PaymentClaim {
				c := good(exact.Key(network, e.chain.Token, a.From, common.HexToHash("0x05")))
				c.Amount = "3e5"
				return c
			}(), topUpMarker, `{"amount":"3e5"}`, store.PaymentSettled, tx, true},
			{"key garbage", good("not a key"), topUpMarker, marker, store.PaymentSettled, tx, true},
			{"key upper-case hex", good(upper), topUpMarker, marker, store.PaymentSettled, tx, true},
			{"key with 0x", good(network + "/0x" + hex.EncodeToString(e.chain.Token[:]) + "/" + hex.EncodeToString(buyer[:]) + "/" + hex.EncodeToString(nonce2[:])), topUpMarker, marker, store.PaymentSettled, tx, true},
			{"key with a part more", good(exact.Key(network, e.chain.Token, buyer, nonce2) + "/00"), topUpMarker, marker, store.PaymentSettled, tx, true},
			{"key of a short nonce", good(network + "/" + hex.EncodeToString(e.chain.Token[:]) + "/" + hex.EncodeToString(buyer[:]) + "/42"), topUpMarker, marker, store.PaymentSettled, tx, true},
			{"key of the zero payer", func() store.PaymentClaim {
				c := good(exact.Key(network, e.chain.Token, common.Address{}, nonce2))
				c.Payer = common.Address{}.Hex()
				return c
			}(), topUpMarker, marker, store.PaymentSettled, tx, true},
			{"tx not a hash", good(exact.Key(network, e.chain.Token, a.From, common.HexToHash("0x06"))), topUpMarker, marker, store.PaymentSettled, "0x1234", true},
			{"tx garbage", good(exact.Key(network, e.chain.Token, a.From, common.HexToHash("0x07"))), topUpMarker, marker, store.PaymentPending, "'; DROP TABLE payments; --", true},
			{"tx of another authorization", good(exact.Key(network, e.chain.Token, a.From, nonce2)), topUpMarker, marker, store.PaymentSettled, tx, true},
			{"tx never mined", good(exact.Key(network, e.chain.Token, a.From, common.HexToHash("0x08"))), topUpMarker, marker, store.PaymentPending, "0x" + strings.Repeat("ab", 32), false},
		}
		for _, c := range cases {
			e.craft(t, c.claim, c.kind, c.body, c.state, c.tx)
		}
		for i := range 2 {
			if n := e.swept(t, e.sweep); n != 0 {
				t.Errorf("sweep %d credited %d hostile claims", i, n)
			}
		}
		e.ledgerOf(t, "after the sweeps", 0, 0)
		logs := e.logs.String()
		for _, c := range cases {
			n := 0
			for line := range strings.SplitSeq(logs, "\n") {
				named := strings.Contains(line, " key="+c.claim.Key+" ") || strings.Contains(line, " key="+strconv.Quote(c.claim.Key)+" ")
				if strings.Contains(line, "level=WARN") && named {
					n++
				}
			}
			switch {
			case c.warn && n != 1:
				t.Errorf("%s: %d Warn lines over two sweeps, want 1", c.name, n)
			case !c.warn && n != 0:
				t.Errorf("%s: %d Warn lines, want none", c.name, n)
			}
		}
		sig := hex.EncodeToString(auth.Signature)
		for _, secret := range []string{h, ch, sig} {
			if strings.Contains(logs, secret) {
				t.Errorf("the sweep's log holds a payment secret:\n%s", logs)
			}
		}
		// The payment made outside a top-up stays uncredited after a
		// restart too.
		if n := e.swept(t, e.newSweep(t)); n != 0 {
			t.Errorf("restarted sweep credited %d", n)
		}
		e.ledgerOf(t, "after a restarted sweep", 0, 0)
	})
}

// TestNewTopUpSweepRefuses: a sweep without a ledger, a chain or a store
// that lists staged claims is refused at construction.
func TestNewTopUpSweepRefuses(t *testing.T) {
	db := openCreditSQLite(t, discard())
	led, err := ledger.New(db, ledger.Config{Asset: ledger.AssetID(network, creditToken)}, discard())
	if err != nil {
		t.Fatal(err)
	}
	sim := testchain.NewSimulated(t)
	ok := func() gateway.TopUpSweepConfig {
		return gateway.TopUpSweepConfig{Network: network, Asset: creditToken.Hex(), PayTo: bob.Hex(),
			Credits: &gateway.Credits{Ledger: led, Chain: sim.Client}, Payments: db}
	}
	if _, err := gateway.NewTopUpSweep(ok(), discard()); err != nil {
		t.Fatalf("a good config: %v", err)
	}
	type onlyPayments struct{ store.Payments } // what Redis offers
	for _, tc := range []struct {
		name string
		mod  func(*gateway.TopUpSweepConfig)
	}{
		{"no credits", func(c *gateway.TopUpSweepConfig) { c.Credits = nil }},
		{"no ledger", func(c *gateway.TopUpSweepConfig) { c.Credits.Ledger = nil }},
		{"no chain", func(c *gateway.TopUpSweepConfig) { c.Credits.Chain = nil }},
		{"no network", func(c *gateway.TopUpSweepConfig) { c.Network = "" }},
		{"bad asset", func(c *gateway.TopUpSweepConfig) { c.Asset = "0x1234" }},
		{"bad payTo", func(c *gateway.TopUpSweepConfig) { c.PayTo = "bob" }},
		{"no store", func(c *gateway.TopUpSweepConfig) { c.Payments = nil }},
		{"store without the listing", func(c *gateway.TopUpSweepConfig) { c.Payments = onlyPayments{db} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := ok()
			tc.mod(&cfg)
			if w, err := gateway.NewTopUpSweep(cfg, discard()); err == nil {
				t.Errorf("NewTopUpSweep() = %v, nil; want an error", w)
			}
		})
	}
}

// poisonChain fails every receipt read of the transactions in bad, as a
// node would for a receipt it cannot serve, and reads the others from the
// chain.
type poisonChain struct {
	gateway.ChainReader
	bad map[common.Hash]bool
}

func (p poisonChain) TransactionReceipt(ctx context.Context, tx common.Hash) (*types.Receipt, error) {
	if p.bad[tx] {
		return nil, errors.New("malformed receipt (injected)")
	}
	return p.ChainReader.TransactionReceipt(ctx, tx)
}

// TestTopUpSweepPoisonedClaim: a claim whose receipt cannot be read, listed
// first (the oldest), is logged and left for the next sweep; the good claim
// listed after it is credited in the same sweep. Only sweepMaxFailures (3)
// failures in a row stop the sweep, with an error.
func TestTopUpSweepPoisonedClaim(t *testing.T) {
	for _, tc := range []struct {
		name     string
		poisoned int
		credited int
		fails    bool
	}{
		{"one poisoned claim", 1, 1, false},
		{"two poisoned claims", 2, 1, false},
		{"three in a row: the chain is down", 3, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newSweepEnv(t, creditBackends[0], sweepOpts{failCredits: 1})
			bad := map[common.Hash]bool{}
			buyer := e.chain.Addr(buyerIdx)
			for i := range tc.poisoned {
				nonce := common.BigToHash(big.NewInt(int64(1000 + i)))
				tx := common.BigToHash(big.NewInt(int64(2000 + i)))
				bad[tx] = true
				c := store.PaymentClaim{Key: exact.Key(network, e.chain.Token, buyer, nonce), Network: network,
					Payer: buyer.Hex(), Amount: "300000", Owner: "crafted"}
				e.craft(t, c, topUpMarker, `{"amount":"300000"}`, store.PaymentPending, tx.Hex())
			}
			h := e.topUpSigned(t, "400000", buyerIdx, nil)
			if resp, body := e.topUp(t, "400000", h); resp.StatusCode != http.StatusServiceUnavailable {
				t.Fatalf("top-up with the ledger down: %d %s", resp.StatusCode, body)
			}
			cr := *e.cfg.Credits
			cr.Chain = poisonChain{ChainReader: cr.Chain, bad: bad}
			e.cfg.Credits = &cr
			n, err := e.newSweep(t).SweepTopUps(t.Context())
			if (err != nil) != tc.fails || n != tc.credited {
				t.Fatalf("SweepTopUps() = %d, %v; want %d credited, failing %v", n, err, tc.credited, tc.fails)
			}
			if tc.credited > 0 {
				e.ledgerOf(t, "after the sweep", 400_000, 1)
			}
			logs := e.logs.String()
			if !strings.Contains(logs, "a top-up claim failed") || strings.Contains(logs, h) {
				t.Errorf("sweep log:\n%s", logs)
			}
		})
	}
}

// TestTopUpSweepAmountAboveLedger: a top-up claim for more than the ledger
// takes is never creditable: skipped at once, logged at Warn, never read from
// the chain nor counted as a failure.
func TestTopUpSweepAmountAboveLedger(t *testing.T) {
	e := newSweepEnv(t, creditBackends[0], sweepOpts{})
	buyer := e.chain.Addr(buyerIdx)
	amount := strconv.FormatInt(store.MaxAmount, 10) + "0"
	c := store.PaymentClaim{Key: exact.Key(network, e.chain.Token, buyer, common.HexToHash("0x77")), Network: network,
		Payer: buyer.Hex(), Amount: amount, Owner: "crafted"}
	tx := common.HexToHash("0x99")
	e.craft(t, c, topUpMarker, `{"amount":"`+amount+`"}`, store.PaymentSettled, tx.Hex())
	cr := *e.cfg.Credits
	cr.Chain = poisonChain{ChainReader: cr.Chain, bad: map[common.Hash]bool{tx: true}}
	e.cfg.Credits = &cr
	w := e.newSweep(t)
	for range 2 {
		if n := e.swept(t, w); n != 0 {
			t.Errorf("credited %d", n)
		}
	}
	logs := e.logs.String()
	if strings.Count(logs, "above the ledger's bound") != 1 || strings.Contains(logs, "a top-up claim failed") {
		t.Errorf("sweep log:\n%s", logs)
	}
}

// TestTopUpSweepBeforePurge: an expired top-up claim whose settlement is not
// final holds back the purge (SweepBeforePurge counts it) until it is
// credited, or until a week past its expiry, when it is given up, logged at
// Error with its key and transaction only.
func TestTopUpSweepBeforePurge(t *testing.T) {
	e := newSweepEnv(t, creditBackends[0], sweepOpts{confirmations: 3})
	var offset atomic.Int64 // the sweep's clock, ahead of the wall clock
	e.cfg.Now = func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	w := e.newSweep(t)
	h := e.topUpSigned(t, "250000", buyerIdx, nil)
	if resp, body := e.topUp(t, "250000", h); resp.StatusCode != http.StatusConflict {
		t.Fatalf("top-up: %d %s", resp.StatusCode, body)
	}
	c := e.claim(t, h)
	waiting := func(w *gateway.TopUpSweep, want int, what string) {
		t.Helper()
		if n, err := w.SweepBeforePurge(t.Context()); n != want || err != nil {
			t.Errorf("%s: SweepBeforePurge() = %d, %v; want %d, nil", what, n, err, want)
		}
	}
	at := func(d time.Duration) { offset.Store(int64(time.Until(c.ExpiresAt) + d)) }

	waiting(w, 0, "before expiry")
	at(-time.Minute)
	waiting(w, 1, "a minute before expiry")
	at(time.Minute)
	waiting(w, 1, "expired, not final")
	at(6 * 24 * time.Hour)
	waiting(w, 1, "six days past expiry")
	at(7*24*time.Hour + time.Minute)
	waiting(w, 0, "a week past expiry")
	waiting(w, 0, "given up, again")
	logs := e.logs.String()
	var gaveUp []string
	for line := range strings.SplitSeq(logs, "\n") {
		if strings.Contains(line, "gave up a top-up claim") {
			gaveUp = append(gaveUp, line)
		}
	}
	if len(gaveUp) != 1 || !strings.Contains(gaveUp[0], "level=ERROR") || !strings.Contains(gaveUp[0], c.Key) ||
		!strings.Contains(gaveUp[0], c.TxHash) || strings.Contains(logs, h) {
		t.Errorf("gave up %d times; log:\n%s", len(gaveUp), logs)
	}
	e.ledgerOf(t, "given up", 0, 0)

	// Final now: a restarted process credits the expired claim, and nothing
	// waits any more.
	e.chain.Commit()
	e.chain.Commit()
	at(time.Minute)
	w = e.newSweep(t)
	waiting(w, 0, "credited")
	e.ledgerOf(t, "credited", 250_000, 1)
}

// TestTopUpSweepReplacedTransaction (D19): a pending top-up claim whose
// transaction was replaced keeps a hash the node does not know; the sweep
// finds the transaction that used the authorization by its
// AuthorizationUsed log, credits it once, and records the claim settled
// with it under its fence. A claim whose authorization is unused stays
// pending.
func TestTopUpSweepReplacedTransaction(t *testing.T) {
	e := newSweepEnv(t, creditBackends[0], sweepOpts{})
	key, tx, _ := e.settleDirect(t, "600000")
	buyer := e.chain.Addr(buyerIdx)
	dead := "0x" + strings.Repeat("cd", 32)
	c := store.PaymentClaim{Key: key, Network: network, Payer: buyer.Hex(), Amount: "600000", Owner: "crafted"}
	e.craft(t, c, topUpMarker, `{"amount":"600000"}`, store.PaymentPending, dead)
	unused := store.PaymentClaim{Key: exact.Key(network, e.chain.Token, buyer, common.HexToHash("0x5151")), Network: network,
		Payer: buyer.Hex(), Amount: "600000", Owner: "crafted"}
	e.craft(t, unused, topUpMarker, `{"amount":"600000"}`, store.PaymentPending, dead)
	before, err := e.db.Payment(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}

	if n := e.swept(t, e.sweep); n != 1 {
		t.Errorf("sweep credited %d, want 1", n)
	}
	e.ledgerOf(t, "after the sweep", 600_000, 1)
	got, err := e.db.Payment(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != store.PaymentSettled || got.TxHash != tx || got.Fence != before.Fence {
		t.Errorf("claim after the sweep %+v; want settled with %s under fence %d", got, tx, before.Fence)
	}
	if u, err := e.db.Payment(t.Context(), unused.Key); err != nil || u.State != store.PaymentPending || u.TxHash != dead {
		t.Errorf("unused claim %+v, %v; want pending with %s", u, err, dead)
	}
	if n := e.swept(t, e.newSweep(t)); n != 1 { // found credited: counted, not credited again
		t.Errorf("restarted sweep counted %d, want 1", n)
	}
	e.ledgerOf(t, "after a restarted sweep", 600_000, 1)

	// Past its expiry, the unused claim holds back the purge until the
	// chain is unusableAfter (an hour) past it: then its authorization can
	// never be used, and it is skipped for good, once, at Warn.
	e.cfg.Now = func() time.Time { return unused.ExpiresAt.Add(time.Minute) }
	unused, err = e.db.Payment(t.Context(), unused.Key)
	if err != nil {
		t.Fatal(err)
	}
	w := e.newSweep(t)
	if n, err := w.SweepBeforePurge(t.Context()); n != 1 || err != nil {
		t.Errorf("expired, chain not past it: SweepBeforePurge() = %d, %v; want 1, nil", n, err)
	}
	e.chain.AdjustTime(t, time.Until(unused.ExpiresAt)+time.Hour+time.Minute)
	for range 2 {
		if n, err := w.SweepBeforePurge(t.Context()); n != 0 || err != nil {
			t.Errorf("expired unused: SweepBeforePurge() = %d, %v; want 0, nil", n, err)
		}
	}
	if n := strings.Count(e.logs.String(), "authorization expired unused"); n != 1 {
		t.Errorf("%d warnings of the unusable claim; log:\n%s", n, e.logs.String())
	}
	e.ledgerOf(t, "at the end", 600_000, 1)
}
