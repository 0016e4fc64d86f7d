package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/llm4agents/llm4agents/internal/chain"
	"github.com/llm4agents/llm4agents/internal/facilitator"
	"github.com/llm4agents/llm4agents/internal/gateway"
	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/internal/testchain"
	"github.com/llm4agents/llm4agents/internal/upstream"
	"github.com/llm4agents/llm4agents/internal/upstream/upstreamtest"
	"github.com/llm4agents/llm4agents/x402"
	"github.com/llm4agents/llm4agents/x402/evm/exact"
)

// Recovery of paid answers whose response was lost (D14, D15). A rig is one
// simulated chain, one fake upstream and one database (SQLite unless
// rigOpts.backend names another; the tests here run on SQLite, PostgreSQL and
// Redis) shared by one or more gateway replicas, each with a handle of its own
// and a facilitator of its own signer whose settle calls are counted and can be
// made to fail, blank, block or cut the client off.

const (
	buyerB    = 2
	attacker  = 3
	testID    = "pay_0123456789abcdef0123456789abcdef"
	otherBody = `{"model":"demo","messages":[{"role":"user","content":"Say goodbye"}],"max_tokens":32}`
)

type rigOpts struct {
	backend  rigBackend // the database the replicas share; zero: SQLite
	replicas int
	required bool          // the model requires a payment identifier
	ttl      time.Duration // RecoveryTTL; 0: default
	replays  int           // RecoveryReplays; 0: default
	logs     *syncBuffer   // replica logs, when set
	// skews[i], when set, runs replica i's gateway and store clocks that far
	// ahead: leases another replica took end for it at once (orphan_test.go).
	// With skews, the claim lease is the shortest the config allows.
	skews []time.Duration
	// storeOnly runs only the stores' clocks ahead by skews, not the
	// gateways': a claim's expiry comes while payments stay fresh.
	storeOnly bool
	// noRecovery hides the stores' recovery records from the gateways.
	noRecovery bool
}

// rigPayments is st as a gateway sees it: without its recovery records
// when noRecovery is set.
func rigPayments(st *flakyStore, noRecovery bool) store.Payments {
	if noRecovery {
		return struct{ store.Payments }{st}
	}
	return st
}

type rig struct {
	chain    *testchain.Simulated
	up       *upstreamtest.Server
	replicas []*replica
}

type replica struct {
	db   rigStore
	gw   *gateway.Server
	srv  *httptest.Server
	fac  *hookFac
	tee  *tee
	down *atomic.Bool // the recovery store fails when set
}

// hookFac counts settle calls and, per call, may fail it, blank its
// transaction, or run a hook after a successful settle (to cut the client).
type hookFac struct {
	*facilitator.Facilitator
	mu      sync.Mutex
	settles int
	failFor map[string]bool // payer (lower-case hex) -> the next settle fails
	blankTx bool
	pending bool // the next settle answers settlement_pending, broadcasting nothing
	// minedPending: the next settle settles for real and answers
	// settlement_pending with its transaction, as when the receipt came
	// just after the settle timeout.
	minedPending bool
	after        func()
	before       func()        // when set, runs before each settle (orphan_test.go)
	beforeMu     chan struct{} // when set, settle waits on it
	// chainDown: reading an authorization from the chain fails, as with a
	// node that is down.
	chainDown bool
}

func (f *hookFac) ConfirmAuthorization(ctx context.Context, network string, asset common.Address, a exact.Authorization) (string, bool, error) {
	f.mu.Lock()
	down := f.chainDown
	f.mu.Unlock()
	if down {
		return "", false, errors.New("the node is down")
	}
	return f.Facilitator.ConfirmAuthorization(ctx, network, asset, a)
}

func (f *hookFac) Settle(ctx context.Context, p *x402.PaymentPayload, req x402.PaymentRequirements) (*x402.SettleResponse, error) {
	f.mu.Lock()
	f.settles++
	wait := f.beforeMu
	var payer string
	if a, err := exact.ParsePayload(p.Payload); err == nil {
		payer = strings.ToLower(a.Authorization.From.Hex())
	}
	fail := f.failFor[payer]
	delete(f.failFor, payer)
	blank, after, pending, before, minedPending := f.blankTx, f.after, f.pending, f.before, f.minedPending
	f.pending, f.minedPending = false, false
	f.mu.Unlock()
	if before != nil {
		before()
	}
	if pending {
		return &x402.SettleResponse{Success: false, ErrorReason: x402.ReasonSettlementPending, Network: req.Network}, nil
	}
	if wait != nil {
		<-wait
	}
	if fail {
		return &x402.SettleResponse{Success: false, ErrorReason: x402.ReasonInsufficientFunds, Network: req.Network, Payer: payer}, nil
	}
	sr, err := f.Facilitator.Settle(ctx, p, req)
	if err == nil && sr.Success && minedPending {
		return &x402.SettleResponse{Success: false, ErrorReason: x402.ReasonSettlementPending, Transaction: sr.Transaction, Network: req.Network}, nil
	}
	if err == nil && sr.Success {
		if blank {
			sr.Transaction = ""
		}
		if after != nil {
			after()
		}
	}
	return sr, err
}

func (f *hookFac) calls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.settles
}

func (f *hookFac) set(fn func(f *hookFac)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

// tee keeps what the gateway wrote for each paid answer, even to a client
// that is gone, by operation id.
type tee struct {
	mu     sync.Mutex
	bodies map[string][]byte
	last   context.Context // the context of the request served last
}

type teeWriter struct {
	http.ResponseWriter
	buf bytes.Buffer
}

func (w *teeWriter) Write(b []byte) (int, error) {
	w.buf.Write(b)
	return w.ResponseWriter.Write(b)
}

func (w *teeWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (t *tee) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tw := &teeWriter{ResponseWriter: w}
		t.mu.Lock()
		t.last = r.Context()
		t.mu.Unlock()
		h.ServeHTTP(tw, r)
		if op := tw.Header().Get("X-Llm4agents-Operation"); op != "" && tw.Header().Get("X-Llm4agents-Replay") == "" {
			t.mu.Lock()
			t.bodies[op] = tw.buf.Bytes()
			t.mu.Unlock()
		}
	})
}

// gone waits until the server has seen the client of the last request leave,
// so that nothing after the cut reaches it: a client's cancel closes its
// connection asynchronously, and under load a short answer could otherwise
// be written and read whole first.
func (t *tee) gone(tb testing.TB) {
	t.mu.Lock()
	ctx := t.last
	t.mu.Unlock()
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		tb.Error("the server never saw the client leave")
	}
}

func (t *tee) body(op string) []byte {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.bodies[op]
}

// flakyStore is a replica's store whose recovery half fails while down is
// set.
type flakyStore struct {
	rigStore
	down *atomic.Bool
}

var errDown = errors.New("recovery store down (test)")

func (f *flakyStore) Recovery(ctx context.Context, key string) (store.Recovery, error) {
	if f.down.Load() {
		return store.Recovery{}, errDown
	}
	return f.rigStore.Recovery(ctx, key)
}

func (f *flakyStore) BeginRecovery(ctx context.Context, r store.Recovery, l time.Duration) (store.Recovery, bool, error) {
	if f.down.Load() {
		return store.Recovery{}, false, errDown
	}
	return f.rigStore.BeginRecovery(ctx, r, l)
}

func (f *flakyStore) TakeReplay(ctx context.Context, key, op string) (store.Recovery, bool, error) {
	if f.down.Load() {
		return store.Recovery{}, false, errDown
	}
	return f.rigStore.TakeReplay(ctx, key, op)
}

func newRig(t *testing.T, o rigOpts) *rig {
	t.Helper()
	if o.replicas == 0 {
		o.replicas = 1
	}
	sim := testchain.NewSimulated(t)
	sim.StartAutoCommit(t, 10*time.Millisecond)
	up := upstreamtest.NewServer(t, upstreamtest.Config{APIKey: "sk-upstream-secret"})
	prov, err := upstream.NewOpenAI(upstream.OpenAIConfig{BaseURL: up.URL(), APIKey: "sk-upstream-secret", Timeout: 5 * time.Second}, discard())
	if err != nil {
		t.Fatal(err)
	}
	rg := &rig{chain: sim, up: up}
	if o.backend.fresh == nil {
		o.backend = sqliteBackend
	}
	open := o.backend.fresh(t)
	for i := range o.replicas {
		var skewed func() time.Time
		if i < len(o.skews) && o.skews[i] != 0 {
			d := o.skews[i]
			skewed = func() time.Time { return time.Now().Add(d) }
		}
		db := open(t, skewed)
		sender, err := chain.NewSender(sim.Client, sim.Keys[signerIdx-i], sim.ChainID,
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
		log := discard()
		if o.logs != nil {
			log = slog.New(slog.NewJSONHandler(o.logs, nil))
		}
		rp := &replica{db: db, fac: &hookFac{Facilitator: fac, failFor: map[string]bool{}}, tee: &tee{bodies: map[string][]byte{}}, down: &atomic.Bool{}}
		rp.srv = httptest.NewUnstartedServer(nil)
		var lease time.Duration
		if len(o.skews) > 0 {
			lease = 5*time.Second + 10*time.Second + gateway.MinClaimLeaseMargin
		}
		gw, err := gateway.New(gateway.Config{
			PublicURL: "http://" + rp.srv.Listener.Addr().String(),
			Network:   network, Asset: sim.Token.Hex(), AssetName: "USD Coin", AssetVersion: "2", Decimals: 6,
			PayTo: sim.Addr(payToIdx).Hex(), UpstreamTimeout: 5 * time.Second, SettleTimeout: 10 * time.Second,
			Owner: "replica-" + string(rune('a'+i)), RecoveryTTL: o.ttl, RecoveryReplays: o.replays, ClaimLease: lease,
			Models: []gateway.Model{{ID: "demo", UpstreamModel: "demo-upstream", Provider: prov, Price: price,
				MaxOutputTokens: 256, PaymentIDRequired: o.required}},
		}, rp.fac, rigPayments(&flakyStore{rigStore: db, down: rp.down}, o.noRecovery), log)
		if err != nil {
			t.Fatal(err)
		}
		if skewed != nil && !o.storeOnly {
			gw.SetNow(skewed)
		}
		rp.gw = gw
		rp.srv.Config.Handler = rp.tee.wrap(gw)
		rp.srv.Start()
		t.Cleanup(rp.srv.Close)
		rg.replicas = append(rg.replicas, rp)
	}
	return rg
}

func (rg *rig) r(i int) *replica { return rg.replicas[i] }

func (rp *replica) post(t *testing.T, ctx context.Context, body string, payment string) (*http.Response, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, rp.srv.URL+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if payment != "" {
		req.Header.Set(x402.HeaderPaymentSignature, payment)
	}
	return http.DefaultClient.Do(req)
}

// answer is a response read in full.
type answer struct {
	StatusCode int
	Header     http.Header
}

// do posts and reads the whole answer.
func (rp *replica) do(t *testing.T, body, payment string) (answer, []byte) {
	t.Helper()
	resp, err := rp.post(t, t.Context(), body, payment)
	if err != nil {
		t.Fatal(err)
	}
	b := readAll(t, resp)
	return answer{StatusCode: resp.StatusCode, Header: resp.Header}, b
}

// challenge returns the 402 of body.
func (rp *replica) challenge(t *testing.T, body string) *x402.PaymentRequired {
	t.Helper()
	resp, b := rp.do(t, body, "")
	if resp.StatusCode != http.StatusPaymentRequired {
		t.Fatalf("unpaid: %d %s", resp.StatusCode, b)
	}
	pr, err := x402.DecodePaymentRequired(resp.Header.Get(x402.HeaderPaymentRequired))
	if err != nil {
		t.Fatal(err)
	}
	return pr
}

// pay signs a PAYMENT-SIGNATURE for body as dev account i, with payment id id
// ("" for none); mod may change the 402 before signing.
func (rg *rig) pay(t *testing.T, body string, i int, id string, mod func(*x402.PaymentRequired)) string {
	t.Helper()
	pr := rg.r(0).challenge(t, body)
	if mod != nil {
		mod(pr)
	}
	p, err := exact.NewPaymentPayload(t.Context(), exact.NewKeySigner(rg.chain.Keys[i]), pr, 0, exact.SignOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if id != "" {
		ext, err := x402.AppendPaymentID(pr.Extensions, id)
		if err != nil {
			t.Fatal(err)
		}
		if p.Extensions, err = x402.Marshal(ext); err != nil {
			t.Fatal(err)
		}
	}
	h, err := x402.EncodeHeader(p)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// withExtensions returns payment h with its extensions replaced by raw.
func withExtensions(t *testing.T, h string, raw string) string {
	t.Helper()
	p, err := x402.DecodePaymentPayload(h)
	if err != nil {
		t.Fatal(err)
	}
	p.Extensions = json.RawMessage(raw)
	out, err := x402.EncodeHeader(p)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func (rg *rig) received(t *testing.T) int64 {
	t.Helper()
	return rg.chain.BalanceOf(t, rg.chain.Addr(payToIdx)).Int64()
}

func (rg *rig) settles() int {
	n := 0
	for _, rp := range rg.replicas {
		n += rp.fac.calls()
	}
	return n
}

// paid posts a paid request and requires a live 200; it returns the body and
// the operation id.
func (rp *replica) paid(t *testing.T, body, payment string) ([]byte, string) {
	t.Helper()
	resp, b := rp.do(t, body, payment)
	op := resp.Header.Get("X-Llm4agents-Operation")
	if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Llm4agents-Replay") != "" || op == "" {
		t.Fatalf("paid: %d replay=%q op=%q %s", resp.StatusCode, resp.Header.Get("X-Llm4agents-Replay"), op, b)
	}
	return b, op
}

// replayed posts and requires a promoted replay; it returns the body.
func (rp *replica) replayed(t *testing.T, body, payment string) []byte {
	t.Helper()
	resp, b := rp.do(t, body, payment)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Llm4agents-Replay") != "promoted" {
		t.Fatalf("want a promoted replay, got %d replay=%q %s", resp.StatusCode, resp.Header.Get("X-Llm4agents-Replay"), b)
	}
	return b
}

// refused posts and requires status and, when code is set, that error code;
// never a replay.
func (rp *replica) refused(t *testing.T, body, payment string, status int, code string) answer {
	t.Helper()
	resp, b := rp.do(t, body, payment)
	if resp.StatusCode != status || resp.Header.Get("X-Llm4agents-Replay") != "" || (code != "" && errorCode(t, b) != code) {
		t.Fatalf("want %d %s, got %d replay=%q %s", status, code, resp.StatusCode, resp.Header.Get("X-Llm4agents-Replay"), b)
	}
	return resp
}

// opOf returns x_llm4agents.operation_id of a JSON answer.
func opOf(t *testing.T, b []byte) string {
	t.Helper()
	var v struct {
		X struct {
			Op string `json:"operation_id"`
		} `json:"x_llm4agents"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("not JSON: %s", b)
	}
	return v.X.Op
}

// lostAfterSettle sends a paid request whose client is cut off right after
// the settlement succeeded, and returns the operation id the gateway wrote.
func (rp *replica) lostAfterSettle(t *testing.T, body, payment string) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	rp.fac.set(func(f *hookFac) {
		f.after = func() {
			cancel()
			rp.tee.gone(t)
		}
	})
	defer rp.fac.set(func(f *hookFac) { f.after = nil })
	resp, err := rp.post(t, ctx, body, payment)
	if err == nil {
		// Headers may have made it: the body must not.
		_, rerr := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if rerr == nil {
			t.Fatalf("the client was not cut off: %d", resp.StatusCode)
		}
	}
}

// onlyOp returns the one operation id a replica's tee holds, once the
// handler that wrote it returned (after its promotion).
func (rp *replica) onlyOp(t *testing.T) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		rp.tee.mu.Lock()
		n := len(rp.tee.bodies)
		var op string
		for k := range rp.tee.bodies {
			op = k
		}
		rp.tee.mu.Unlock()
		if n == 1 {
			return op
		}
		if n > 1 {
			t.Fatalf("%d answers written", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("no answer written")
	return ""
}

// TestLostResponseReplayed: the client is cut off after the settlement; the
// retry with the same id and PAYMENT-SIGNATURE (what our client does, D26)
// receives the byte-identical answer, with zero extra settlements and zero
// extra upstream calls.
func TestLostResponseReplayed(t *testing.T) {
	eachRigBackend(t, func(t *testing.T, be rigBackend) {
		for _, tc := range []struct{ name, body string }{{"json", chatBody}, {"stream", streamBody}} {
			t.Run(tc.name, func(t *testing.T) {
				rg := newRig(t, rigOpts{backend: be})
				rp := rg.r(0)
				h := rg.pay(t, tc.body, buyerIdx, testID, nil)
				rp.lostAfterSettle(t, tc.body, h)
				op := rp.onlyOp(t) // written once the record was promoted
				lost := rp.tee.body(op)
				if rg.up.Calls() != 1 || rg.settles() != 1 || rg.received(t) != 10000 {
					t.Fatalf("after the cut: upstream %d, settles %d, received %d", rg.up.Calls(), rg.settles(), rg.received(t))
				}
				got := rp.replayed(t, tc.body, h)
				if tc.name == "json" && !bytes.Equal(got, lost) {
					t.Errorf("replay is not byte-identical:\nlost   %s\nreplay %s", lost, got)
				}
				// A stream stops being written once its client is gone, and is
				// still read to its end and recorded (D2): what was written is a
				// prefix of the replay, which is whole.
				if tc.name == "stream" && (!bytes.HasPrefix(got, lost) || len(lost) == 0 || !bytes.HasSuffix(got, []byte("data: [DONE]\n\n"))) {
					t.Errorf("replay does not continue what was written:\nlost   %s\nreplay %s", lost, got)
				}
				if again := rp.replayed(t, tc.body, h); !bytes.Equal(again, got) {
					t.Errorf("two replays differ:\n%s\n%s", got, again)
				}
				if !bytes.Contains(got, []byte(`"operation_id":"`+op+`"`)) {
					t.Errorf("replay lacks the operation id %s", op)
				}
				if rg.up.Calls() != 1 || rg.settles() != 1 || rg.received(t) != 10000 {
					t.Errorf("after the replay: upstream %d, settles %d, received %d; want 1, 1, 10000", rg.up.Calls(), rg.settles(), rg.received(t))
				}
			})
		}
	})
}

// recordOf reads the recovery record of (payer, id) from a replica's store.
func (rg *rig) recordOf(t *testing.T, rp *replica, payer int, id, claimKey string) (store.Recovery, error) {
	t.Helper()
	return rp.db.Recovery(t.Context(), gateway.RecordKey(network, rg.chain.Addr(payer).Hex(), id, claimKey))
}

// TestR3IdenticalOutputNeverCrossPromotes: two buyers send the same request
// under the same id, so the answers and the fingerprints are identical; B's
// settlement fails, A's succeeds. A's settlement never makes B's record
// replayable: B's retry meets the paywall, and B's next payment is a purchase
// of its own.
func TestR3IdenticalOutputNeverCrossPromotes(t *testing.T) {
	eachRigBackend(t, func(t *testing.T, be rigBackend) {
		rg := newRig(t, rigOpts{backend: be})
		rp := rg.r(0)
		hB := rg.pay(t, chatBody, buyerB, testID, nil)
		hA := rg.pay(t, chatBody, buyerIdx, testID, nil)
		rp.fac.set(func(f *hookFac) { f.failFor[strings.ToLower(rg.chain.Addr(buyerB).Hex())] = true })
		rp.refused(t, chatBody, hB, http.StatusPaymentRequired, "")
		bodyA, _ := rp.paid(t, chatBody, hA)
		if rg.up.Calls() != 2 {
			t.Fatalf("upstream calls = %d, want 2", rg.up.Calls())
		}
		if _, err := rg.recordOf(t, rp, buyerB, testID, ""); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("B's record after its failed settlement: %v, want none", err)
		}
		if r, err := rg.recordOf(t, rp, buyerIdx, testID, ""); err != nil || r.State != store.RecoveryPromoted {
			t.Errorf("A's record = %+v, %v", r, err)
		}
		// B without a payment: the paywall.
		rp.refused(t, chatBody, "", http.StatusPaymentRequired, "payment_required")
		// B with a new payment and the same id: a new purchase, never A's answer.
		hB2 := rg.pay(t, chatBody, buyerB, testID, nil)
		bodyB, _ := rp.paid(t, chatBody, hB2)
		if opOf(t, bodyB) == opOf(t, bodyA) || rg.up.Calls() != 3 {
			t.Errorf("B got A's operation (%s) or no upstream call (%d)", opOf(t, bodyA), rg.up.Calls())
		}
		// A still replays its own.
		if got := rp.replayed(t, chatBody, hA); !bytes.Equal(got, bodyA) {
			t.Errorf("A's replay differs")
		}
	})
}

// TestR3NoSettlementRefNeverPromotes: a settle answer with
// success and no transaction serves the live answer but records nothing
// replayable.
func TestR3NoSettlementRefNeverPromotes(t *testing.T) {
	eachRigBackend(t, func(t *testing.T, be rigBackend) {
		rg := newRig(t, rigOpts{backend: be})
		rp := rg.r(0)
		rp.fac.set(func(f *hookFac) { f.blankTx = true })
		h := rg.pay(t, chatBody, buyerIdx, testID, nil)
		rp.paid(t, chatBody, h)
		if _, err := rg.recordOf(t, rp, buyerIdx, testID, ""); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("record without a settlement reference: %v, want none", err)
		}
		rp.fac.set(func(f *hookFac) { f.blankTx = false })
		// The same payment again: spent on chain, so 409 payment_already_used;
		// no replay, and no 402 that would invite the client to pay again.
		rp.refused(t, chatBody, h, http.StatusConflict, "payment_already_used")
		if rg.up.Calls() != 1 {
			t.Errorf("upstream calls = %d, want 1", rg.up.Calls())
		}
	})
}

// TestR3NoOperationIDNeverPromotes: a staged record (its
// request settling) is promoted by its operation id and by nothing else:
// not an empty id, not the fingerprint, not another record's id; meanwhile a
// retry is 409 operation_in_flight (its request still holds the payment),
// never a replay.
func TestR3NoOperationIDNeverPromotes(t *testing.T) {
	eachRigBackend(t, func(t *testing.T, be rigBackend) {
		rg := newRig(t, rigOpts{backend: be})
		rp := rg.r(0)
		block := make(chan struct{})
		rp.fac.set(func(f *hookFac) { f.beforeMu = block })
		h := rg.pay(t, chatBody, buyerIdx, testID, nil)
		done := make(chan []byte)
		go func() {
			resp, err := rp.post(t, context.Background(), chatBody, h)
			if err != nil {
				done <- nil
				return
			}
			b, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			done <- b
		}()
		// Wait for the record to be staged (the handler stages before settling).
		var rec store.Recovery
		deadline := time.Now().Add(10 * time.Second)
		for {
			r, err := rg.recordOf(t, rp, buyerIdx, testID, "")
			if err == nil && r.State == store.RecoveryStaged {
				rec = r
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("never staged: %+v, %v", r, err)
			}
			time.Sleep(5 * time.Millisecond)
		}
		ref := store.SettlementRef{Network: network, TxHash: "0x" + strings.Repeat("ab", 32)}
		for _, op := range []string{"", rec.Fingerprint, rec.Key, "op_00000000000000000000000000000000"} {
			if _, err := rp.db.PromoteRecovery(t.Context(), op, rec.Fingerprint, ref, time.Hour, 1); err == nil {
				t.Errorf("promoted by %q", op)
			}
		}
		if r, _ := rg.recordOf(t, rp, buyerIdx, testID, ""); r.State != store.RecoveryStaged {
			t.Fatalf("record = %+v", r)
		}
		// A twin with a fresh payment from the same buyer while it is staged:
		// 409 with Retry-After, not a replay, no upstream call.
		h2 := rg.pay(t, chatBody, buyerIdx, testID, nil)
		resp := rp.refused(t, chatBody, h2, http.StatusConflict, "operation_in_flight")
		if resp.Header.Get("Retry-After") == "" {
			t.Error("no Retry-After")
		}
		rp.fac.set(func(f *hookFac) { f.beforeMu = nil })
		close(block)
		if b := <-done; opOf(t, b) != rec.OperationID {
			t.Errorf("live answer's operation %q, record's %q", opOf(t, b), rec.OperationID)
		}
		if rg.up.Calls() != 1 {
			t.Errorf("upstream calls = %d, want 1", rg.up.Calls())
		}
	})
}

// TestR3ChangedRequestConflicts: the same id with another
// request is 409 idempotency_conflict, never an answer, never the upstream;
// the same request re-encoded (whitespace, key order) is the same request.
func TestR3ChangedRequestConflicts(t *testing.T) {
	eachRigBackend(t, func(t *testing.T, be rigBackend) {
		rg := newRig(t, rigOpts{backend: be})
		rp := rg.r(0)
		body, _ := rp.paid(t, chatBody, rg.pay(t, chatBody, buyerIdx, testID, nil))
		h := rg.pay(t, otherBody, buyerIdx, testID, nil)
		rp.refused(t, otherBody, h, http.StatusConflict, "idempotency_conflict")
		if rg.up.Calls() != 1 || rg.settles() != 1 {
			t.Errorf("upstream %d, settles %d; want 1, 1", rg.up.Calls(), rg.settles())
		}
		reencoded := "{ \"max_tokens\" : 32,\n\t\"messages\":[{\"content\":\"Say hello\",\"role\":\"user\"}], \"model\":\"demo\" }\n"
		fresh := rg.pay(t, reencoded, buyerIdx, testID, nil)
		if got := rp.replayed(t, reencoded, fresh); !bytes.Equal(got, body) {
			t.Errorf("re-encoded request got another answer")
		}
		// A value change is another request.
		changed := strings.Replace(chatBody, `"max_tokens":32`, `"max_tokens":31`, 1)
		rp.refused(t, changed, rg.pay(t, changed, buyerIdx, testID, nil), http.StatusConflict, "idempotency_conflict")
		if rg.up.Calls() != 1 || rg.settles() != 1 {
			t.Errorf("upstream %d, settles %d; want 1, 1", rg.up.Calls(), rg.settles())
		}
	})
}

// forge returns a payment whose authorization names from as its payer but is
// signed by another key, with nonce (nil: a fresh one).
func (rg *rig) forge(t *testing.T, body string, from, signer int, id string, nonce *string) string {
	t.Helper()
	h := rg.pay(t, body, signer, id, nil)
	p, err := x402.DecodePaymentPayload(h)
	if err != nil {
		t.Fatal(err)
	}
	var pj map[string]any
	if err := json.Unmarshal(p.Payload, &pj); err != nil {
		t.Fatal(err)
	}
	auth := pj["authorization"].(map[string]any)
	auth["from"] = rg.chain.Addr(from).Hex()
	if nonce != nil {
		auth["nonce"] = *nonce
	}
	if p.Payload, err = json.Marshal(pj); err != nil {
		t.Fatal(err)
	}
	out, err := x402.EncodeHeader(p)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestR3AddressWithoutProofNeverReplays (D15): the right id and
// payer address without the payer's signature get the normal 402: a forged
// fresh authorization (facilitator verify refuses it), and a forged one that
// reuses the paying authorization's public nonce (not the paying signature).
func TestR3AddressWithoutProofNeverReplays(t *testing.T) {
	eachRigBackend(t, func(t *testing.T, be rigBackend) {
		rg := newRig(t, rigOpts{backend: be})
		rp := rg.r(0)
		h := rg.pay(t, chatBody, buyerIdx, testID, nil)
		rp.paid(t, chatBody, h)
		p, _ := x402.DecodePaymentPayload(h)
		var pj struct {
			Authorization struct {
				Nonce string `json:"nonce"`
			} `json:"authorization"`
		}
		if err := json.Unmarshal(p.Payload, &pj); err != nil {
			t.Fatal(err)
		}
		// Each 402 names its reason: a forged fresh authorization fails
		// verify; the paying one's copy proves nothing.
		for name, tc := range map[string]struct{ forged, code string }{
			"fresh nonce":  {rg.forge(t, chatBody, buyerIdx, attacker, testID, nil), "invalid_exact_evm_signature"},
			"paying nonce": {rg.forge(t, chatBody, buyerIdx, attacker, testID, &pj.Authorization.Nonce), "payment_not_proven"},
		} {
			t.Run(name, func(t *testing.T) {
				rp.refused(t, chatBody, tc.forged, http.StatusPaymentRequired, tc.code)
			})
		}
		// The attacker's own payment with the victim's id: its own record, a
		// purchase of its own.
		b, _ := rp.paid(t, chatBody, rg.pay(t, chatBody, attacker, testID, nil))
		if rg.up.Calls() != 2 || !bytes.Contains(b, []byte(`"operation_id"`)) {
			t.Errorf("upstream calls = %d", rg.up.Calls())
		}
	})
}

// TestSeed002SettleFailsNoFreeAnswer: the settlement
// fails after the handler ran; a retry with the same id and no payment gets
// the paywall, and nothing replayable was left behind.
func TestSeed002SettleFailsNoFreeAnswer(t *testing.T) {
	eachRigBackend(t, func(t *testing.T, be rigBackend) {
		rg := newRig(t, rigOpts{backend: be})
		rp := rg.r(0)
		h := rg.pay(t, chatBody, buyerIdx, testID, nil)
		rp.fac.set(func(f *hookFac) { f.failFor[strings.ToLower(rg.chain.Addr(buyerIdx).Hex())] = true })
		rp.refused(t, chatBody, h, http.StatusPaymentRequired, string(x402.ReasonInsufficientFunds))
		if rg.up.Calls() != 1 {
			t.Fatalf("upstream calls = %d", rg.up.Calls())
		}
		resp := rp.refused(t, chatBody, "", http.StatusPaymentRequired, "payment_required")
		if resp.Header.Get(x402.HeaderPaymentRequired) == "" {
			t.Error("no PAYMENT-REQUIRED on the retry")
		}
		if _, err := rg.recordOf(t, rp, buyerIdx, testID, ""); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("record after a failed settlement: %v", err)
		}
		// The same, unspent payment again is a purchase, paid this time.
		rp.paid(t, chatBody, h)
		if rg.up.Calls() != 2 || rg.received(t) != 10000 {
			t.Errorf("upstream %d, received %d", rg.up.Calls(), rg.received(t))
		}
	})
}

// TestRecoveryAcrossReplicas: recorded on one replica, replayed by the other
// (each with its own facilitator signer and store handle, one database); a
// twin sent to the other replica while the first is in flight is 409 with
// Retry-After.
func TestRecoveryAcrossReplicas(t *testing.T) {
	eachRigBackend(t, func(t *testing.T, be rigBackend) {
		rg := newRig(t, rigOpts{backend: be, replicas: 2})
		a, b := rg.r(0), rg.r(1)
		h := rg.pay(t, chatBody, buyerIdx, testID, nil)
		a.lostAfterSettle(t, chatBody, h)
		op := a.onlyOp(t)
		if got := b.replayed(t, chatBody, h); !bytes.Equal(got, a.tee.body(op)) {
			t.Errorf("replay on b differs:\n%s\n%s", a.tee.body(op), got)
		}
		// With a fresh authorization as proof, on b: verified, never settled.
		fresh := rg.pay(t, chatBody, buyerIdx, testID, nil)
		if got := b.replayed(t, chatBody, fresh); !bytes.Equal(got, a.tee.body(op)) {
			t.Errorf("replay with a fresh proof differs")
		}
		if rg.up.Calls() != 1 || rg.settles() != 1 || rg.received(t) != 10000 {
			t.Errorf("upstream %d, settles %d, received %d", rg.up.Calls(), rg.settles(), rg.received(t))
		}

		// A concurrent twin: hold a's settlement, send the twin to b.
		const id2 = "pay_twin_0123456789abcdef"
		block := make(chan struct{})
		a.fac.set(func(f *hookFac) { f.beforeMu = block })
		h1 := rg.pay(t, otherBody, buyerIdx, id2, nil)
		done := make(chan int)
		go func() {
			resp, err := a.post(t, context.Background(), otherBody, h1)
			if err != nil {
				done <- -1
				return
			}
			_, _ = io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			done <- resp.StatusCode
		}()
		deadline := time.Now().Add(10 * time.Second)
		for rg.up.Calls() != 2 && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		for _, twin := range []string{h1, rg.pay(t, otherBody, buyerIdx, id2, nil)} {
			resp := b.refused(t, otherBody, twin, http.StatusConflict, "")
			if resp.Header.Get("Retry-After") == "" {
				t.Error("twin's 409 has no Retry-After")
			}
		}
		a.fac.set(func(f *hookFac) { f.beforeMu = nil })
		close(block)
		if code := <-done; code != http.StatusOK {
			t.Errorf("first: %d", code)
		}
		if rg.up.Calls() != 2 {
			t.Errorf("upstream calls = %d, want 2", rg.up.Calls())
		}
		b.replayed(t, otherBody, h1)
	})
}

// TestRecoveryBadInput: hostile and malformed input is refused before the
// upstream and nothing is charged.
func TestRecoveryBadInput(t *testing.T) {
	eachRigBackend(t, func(t *testing.T, be rigBackend) {
		logs := &syncBuffer{}
		rg := newRig(t, rigOpts{backend: be, logs: logs})
		rp := rg.r(0)
		h := rg.pay(t, chatBody, buyerIdx, "", nil)
		for name, tc := range map[string]struct{ ext, msg string }{
			"too short":   {`{"payment-identifier":{"info":{"required":false,"id":"pay_short"}}}`, string(x402.ErrPaymentIDFormat)},
			"too long":    {`{"payment-identifier":{"info":{"required":false,"id":"` + strings.Repeat("a", 129) + `"}}}`, string(x402.ErrPaymentIDFormat)},
			"non-ASCII":   {`{"payment-identifier":{"info":{"required":false,"id":"pay_ééééééééééééééé"}}}`, string(x402.ErrPaymentIDFormat)},
			"bad charset": {`{"payment-identifier":{"info":{"required":false,"id":"pay_0123456789/abcdef"}}}`, string(x402.ErrPaymentIDFormat)},
			"id a number": {`{"payment-identifier":{"info":{"required":false,"id":1234567890123456789}}}`, string(x402.ErrPaymentIDMalformed)},
			"info array":  {`{"payment-identifier":{"info":[]}}`, string(x402.ErrPaymentIDMalformed)},
			"extensions":  {`[1,2]`, string(x402.ErrPaymentIDMalformed)},
		} {
			t.Run(name, func(t *testing.T) {
				_, b := rp.do(t, chatBody, withExtensions(t, h, tc.ext))
				if errorCode(t, b) != "invalid_payment_identifier" || !strings.Contains(string(b), tc.msg) {
					t.Errorf("%s", b)
				}
			})
		}
		if rg.up.Calls() != 0 || rg.settles() != 0 {
			t.Errorf("upstream %d, settles %d after bad ids", rg.up.Calls(), rg.settles())
		}
		// The 402 declares the extension, optional here.
		pr := rp.challenge(t, chatBody)
		if declared, required := x402.PaymentIDDeclared(pr.Extensions); !declared || required {
			t.Errorf("402 extensions %s: declared %v required %v", pr.Extensions, declared, required)
		}

		// Another amount as proof: the normal 402 (D7 refuses it before anything).
		rp.paid(t, chatBody, rg.pay(t, chatBody, buyerIdx, testID, nil))
		cheaper := rg.pay(t, chatBody, buyerIdx, testID, func(pr *x402.PaymentRequired) { pr.Accepts[0].Amount = "9999" })
		rp.refused(t, chatBody, cheaper, http.StatusPaymentRequired, "payment_not_proven")
		// Another payer's fresh authorization: its own record, a new purchase.
		rp.paid(t, chatBody, rg.pay(t, chatBody, buyerB, testID, nil))
		if rg.up.Calls() != 2 {
			t.Errorf("upstream calls = %d, want 2", rg.up.Calls())
		}
		// The id never reaches the logs.
		if strings.Contains(logs.String(), testID) || strings.Contains(logs.String(), "pay_short") {
			t.Errorf("a payment id was logged:\n%s", logs.String())
		}
	})
}

// TestRecoveryRequiredID: a model that requires the id declares it and refuses
// a payment without one with the TS text.
func TestRecoveryRequiredID(t *testing.T) {
	eachRigBackend(t, func(t *testing.T, be rigBackend) {
		rg := newRig(t, rigOpts{backend: be, required: true})
		rp := rg.r(0)
		pr := rp.challenge(t, chatBody)
		if declared, required := x402.PaymentIDDeclared(pr.Extensions); !declared || !required {
			t.Errorf("402 extensions: declared %v required %v", declared, required)
		}
		_, b := rp.do(t, chatBody, rg.pay(t, chatBody, buyerIdx, "", nil))
		if errorCode(t, b) != "invalid_payment_identifier" || !strings.Contains(string(b), string(x402.ErrPaymentIDRequired)) {
			t.Errorf("no id: %s", b)
		}
		rp.paid(t, chatBody, rg.pay(t, chatBody, buyerIdx, testID, nil))
		if rg.up.Calls() != 1 {
			t.Errorf("upstream calls = %d", rg.up.Calls())
		}
	})
}

// TestRecoveryProofExpiry: the same PAYMENT-SIGNATURE proves control until its
// validBefore, even with less time left than a fresh request needs (D6's
// mid-request margin is for the fresh path only); after it, the normal 402.
func TestRecoveryProofExpiry(t *testing.T) {
	eachRigBackend(t, func(t *testing.T, be rigBackend) {
		rg := newRig(t, rigOpts{backend: be})
		rp := rg.r(0)
		h := rg.pay(t, chatBody, buyerIdx, testID, nil)
		body, _ := rp.paid(t, chatBody, h)
		p, _ := x402.DecodePaymentPayload(h)
		auth, err := exact.ParsePayload(p.Payload)
		if err != nil {
			t.Fatal(err)
		}
		vb := time.Unix(auth.Authorization.ValidBefore.Int64(), 0)

		// 10 s left: too little for a fresh request (5 s upstream + 10 s settle)...
		rp.gw.SetNow(func() time.Time { return vb.Add(-10 * time.Second) })
		if got := rp.replayed(t, chatBody, h); !bytes.Equal(got, body) {
			t.Error("replay differs")
		}
		fresh := rg.pay(t, otherBody, buyerIdx, "", nil)
		p2, _ := x402.DecodePaymentPayload(fresh)
		a2, _ := exact.ParsePayload(p2.Payload)
		rp.gw.SetNow(func() time.Time { return time.Unix(a2.Authorization.ValidBefore.Int64(), 0).Add(-10 * time.Second) })
		// ...which a fresh request with as little left is refused.
		rp.refused(t, otherBody, fresh, http.StatusPaymentRequired, "invalid_exact_evm_payload_authorization_valid_before")
		// Past validBefore: the same signature proves nothing any more.
		rp.gw.SetNow(func() time.Time { return vb.Add(time.Second) })
		rp.refused(t, chatBody, h, http.StatusPaymentRequired, "invalid_exact_evm_payload_authorization_valid_before")
		if rg.up.Calls() != 1 || rg.settles() != 1 {
			t.Errorf("upstream %d, settles %d", rg.up.Calls(), rg.settles())
		}
	})
}

// TestRecoveryBudgetAndExpiry: a record replays its budget, then a retry is a
// new purchase; an expired record too.
func TestRecoveryBudgetAndExpiry(t *testing.T) {
	eachRigBackend(t, func(t *testing.T, be rigBackend) {
		rg := newRig(t, rigOpts{backend: be, replays: 2, ttl: time.Second})
		rp := rg.r(0)
		h := rg.pay(t, chatBody, buyerIdx, testID, nil)
		rp.paid(t, chatBody, h)
		rp.replayed(t, chatBody, h)
		rp.replayed(t, chatBody, h)
		// Spent: the same signature is no new payment (spent on chain: 409)...
		rp.refused(t, chatBody, h, http.StatusConflict, "payment_already_used")
		// ...a fresh one is a new purchase under the same id.
		h2 := rg.pay(t, chatBody, buyerIdx, testID, nil)
		rp.paid(t, chatBody, h2)
		if rg.up.Calls() != 2 || rg.received(t) != 20000 {
			t.Fatalf("upstream %d, received %d", rg.up.Calls(), rg.received(t))
		}
		time.Sleep(1100 * time.Millisecond)
		rp.paid(t, chatBody, rg.pay(t, chatBody, buyerIdx, testID, nil))
		if rg.up.Calls() != 3 {
			t.Errorf("after expiry: upstream %d", rg.up.Calls())
		}
	})
}

// TestRecoveryStoreDownFailsClosed: with the recovery store down, no replay
// and no free answer: 503, nothing settled, no upstream call.
func TestRecoveryStoreDownFailsClosed(t *testing.T) {
	eachRigBackend(t, func(t *testing.T, be rigBackend) {
		rg := newRig(t, rigOpts{backend: be})
		rp := rg.r(0)
		h := rg.pay(t, chatBody, buyerIdx, testID, nil)
		rp.paid(t, chatBody, h)
		rp.down.Store(true)
		rp.refused(t, chatBody, h, http.StatusServiceUnavailable, "store_unavailable")
		rp.refused(t, chatBody, rg.pay(t, chatBody, buyerIdx, "", nil), http.StatusServiceUnavailable, "store_unavailable")
		if rg.up.Calls() != 1 || rg.settles() != 1 {
			t.Errorf("upstream %d, settles %d", rg.up.Calls(), rg.settles())
		}
		rp.down.Store(false)
		rp.replayed(t, chatBody, h)
	})
}

// TestRecoveryFingerprintAgreesWithClient: the record's fingerprint is the
// buyer's x402.Fingerprint of the request (D14), so the two never disagree.
func TestRecoveryFingerprintAgreesWithClient(t *testing.T) {
	eachRigBackend(t, func(t *testing.T, be rigBackend) {
		rg := newRig(t, rigOpts{backend: be})
		rp := rg.r(0)
		rp.paid(t, chatBody, rg.pay(t, chatBody, buyerIdx, testID, nil))
		r, err := rg.recordOf(t, rp, buyerIdx, testID, "")
		if err != nil {
			t.Fatal(err)
		}
		if want := x402.Fingerprint(http.MethodPost, "/v1/chat/completions", "demo", []byte(chatBody)); r.Fingerprint != want {
			t.Errorf("record fingerprint %s, client's %s", r.Fingerprint, want)
		}
	})
}

// FuzzFingerprint: any re-encoding of a JSON body (key order, whitespace) has
// the body's fingerprint; a body that differs in a value does not.
func FuzzFingerprint(f *testing.F) {
	for _, s := range []string{chatBody, streamBody, `{"a":1.0,"b":[1,2,{"c":"\u00e9"}]}`, `{"n":1e400}`, `[]`, `"x"`, `{"a":"<>&"}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		var v any
		dec := json.NewDecoder(strings.NewReader(body))
		dec.UseNumber()
		if dec.Decode(&v) != nil || dec.More() || !json.Valid([]byte(body)) {
			return
		}
		fp := x402.Fingerprint("POST", "/v1/chat/completions", "m", []byte(body))
		indented, err := json.MarshalIndent(v, "  ", "\t")
		if err != nil {
			return
		}
		if got := x402.Fingerprint("POST", "/v1/chat/completions", "m", indented); got != fp {
			t.Errorf("re-encoded %q -> %q: fingerprint changed", body, indented)
		}
		if x402.Fingerprint("POST", "/v1/chat/completions", "m2", []byte(body)) == fp {
			t.Error("the model is not part of the fingerprint")
		}
		if m, ok := v.(map[string]any); ok {
			m["x_fuzz_extra"] = "1"
			changed, _ := json.Marshal(m)
			if x402.Fingerprint("POST", "/v1/chat/completions", "m", changed) == fp {
				t.Errorf("an added key kept the fingerprint of %q", body)
			}
		}
	})
}

// TestRecoveryPendingPromotedOnceSettled (D3): a pending settlement leaves the
// record staged; a retry with a fresh authorization is 409 settlement_pending
// until the claim is seen settled (as the reconciler records it), and then the
// record is promoted by its operation id and replayed with the fresh proof,
// never settled.
func TestRecoveryPendingPromotedOnceSettled(t *testing.T) {
	eachRigBackend(t, func(t *testing.T, be rigBackend) {
		rg := newRig(t, rigOpts{backend: be})
		rp := rg.r(0)
		rp.fac.set(func(f *hookFac) { f.pending = true })
		h := rg.pay(t, chatBody, buyerIdx, testID, nil)
		rp.refused(t, chatBody, h, http.StatusPaymentRequired, "settlement_pending")
		r, err := rg.recordOf(t, rp, buyerIdx, testID, "")
		if err != nil || r.State != store.RecoveryStaged {
			t.Fatalf("record after pending = %+v, %v", r, err)
		}
		fresh := rg.pay(t, chatBody, buyerIdx, testID, nil)
		resp := rp.refused(t, chatBody, fresh, http.StatusConflict, "settlement_pending")
		if resp.Header.Get("Retry-After") == "" {
			t.Error("no Retry-After")
		}
		// The reconciler finds it mined.
		c, err := rp.db.Payment(t.Context(), r.PaymentKey)
		if err != nil || c.State != store.PaymentPending {
			t.Fatalf("claim = %+v, %v", c, err)
		}
		tx := "0x" + strings.Repeat("cd", 32)
		if err := rp.db.UpdatePayment(t.Context(), c.Key, c.Fence, store.PaymentSettled, tx); err != nil {
			t.Fatal(err)
		}
		settles := rg.settles()
		b := rp.replayed(t, chatBody, fresh)
		if opOf(t, b) != r.OperationID || !bytes.Contains(b, []byte(tx)) {
			t.Errorf("replay of the wrong operation or settlement: %s", b)
		}
		if rg.settles() != settles || rg.up.Calls() != 1 {
			t.Errorf("settles %d -> %d, upstream %d", settles, rg.settles(), rg.up.Calls())
		}
	})
}
