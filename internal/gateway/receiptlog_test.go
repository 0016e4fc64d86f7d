package gateway_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	mrand "math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llm4agents/llm4agents/internal/chain"
	"github.com/llm4agents/llm4agents/internal/testchain"

	"golang.org/x/mod/sumdb/note"

	"github.com/ethereum/go-ethereum/common"
	"github.com/llm4agents/llm4agents/client"
	"github.com/llm4agents/llm4agents/internal/credits"
	"github.com/llm4agents/llm4agents/internal/gateway"
	"github.com/llm4agents/llm4agents/internal/receiptlog"
	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/x402"
	"github.com/llm4agents/llm4agents/x402/evm/exact"
	"github.com/llm4agents/llm4agents/x402/receipt"
)

// newLogKey is a new checkpoint key and its public key.
func newLogKey(t testing.TB) (note.Signer, string) {
	t.Helper()
	skey, vkey, err := note.GenerateKey(rand.Reader, "gateway.test/receipts")
	if err != nil {
		t.Fatal(err)
	}
	key, err := note.NewSigner(skey)
	if err != nil {
		t.Fatal(err)
	}
	return key, vkey
}

// withLog gives a credit env a receipt log on its store, and hands it back.
func withLog(t testing.TB, out **receiptlog.Log) func(db creditStore) *receiptlog.Log {
	return withLogDelay(t, out, time.Second)
}

// withLogDelay is withLog with a merge delay of its own.
func withLogDelay(t testing.TB, out **receiptlog.Log, delay time.Duration) func(db creditStore) *receiptlog.Log {
	return func(db creditStore) *receiptlog.Log {
		key, vkey := newLogKey(t)
		st, ok := db.(receiptlog.Store)
		if !ok {
			t.Fatalf("%T keeps no receipt log", db)
		}
		l, err := receiptlog.New(receiptlog.Config{Store: st, Key: key, VerifierKey: vkey, Holder: t.Name(), MaxMergeDelay: delay})
		if err != nil {
			t.Fatal(err)
		}
		*out = l
		return l
	}
}

// TestCreditReceiptInLog: a credit-paid call's receipt promises the log by
// its logBy, its proof is "not logged yet" until the log integrates it and
// then verifies as a buyer checks it, against the key the well-known
// document publishes; another owner sees no proof, and the checkpoint and
// tiles are public.
func TestCreditReceiptInLog(t *testing.T) {
	eachCreditBackend(t, func(t *testing.T, b creditBackend) {
		var rl *receiptlog.Log
		e := newCreditEnv(t, creditOpts{backend: b, receiptLog: withLog(t, &rl)})
		e.topUp(t, alice, 1_000_000)
		e.topUp(t, bob, 1_000_000)
		aliceKey, _ := e.newKey(t, alice, nil)
		bobKey, _ := e.newKey(t, bob, nil)
		resp := e.chat(t, aliceKey, chatBody)
		if body := readAll(t, resp); resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d: %s", resp.StatusCode, body)
		}
		id := resp.Header.Get(gateway.HeaderRequestID)
		r, sig, err := receipt.DecodeHeader(resp.Header.Get(receipt.Header))
		if err != nil {
			t.Fatal(err)
		}
		e.verified(t, r, sig)
		if r.Rail != receipt.RailCredits || r.LogBy < r.IssuedAt+1 || r.LogBy > r.IssuedAt+2 || r.Salt == ([32]byte{}) {
			t.Errorf("receipt rail %q, issued %d, logBy %d, salt %x", r.Rail, r.IssuedAt, r.LogBy, r.Salt)
		}

		type answer struct {
			StatusCode int
			Header     http.Header
		}
		get := func(auth, path string) (answer, []byte) {
			resp := e.do(t, t.Context(), http.MethodGet, path, auth, "", nil)
			return answer{resp.StatusCode, resp.Header}, readAll(t, resp)
		}
		proofPath := "/v1/receipts/" + id + "/proof"
		if resp, body := get(aliceKey, proofPath); resp.StatusCode != 404 || errorCode(t, body) != "receipt_not_logged_yet" || resp.Header.Get("Retry-After") == "" {
			t.Fatalf("before integration: %d %s", resp.StatusCode, body)
		}
		if n, err := rl.Integrate(t.Context()); err != nil || n != 1 {
			t.Fatalf("Integrate = %d, %v", n, err)
		}

		ans, body := get("", "/.well-known/llm4agents.json")
		wk, err := receipt.ParseWellKnown(body)
		if err != nil || ans.StatusCode != 200 || wk.Log == nil {
			t.Fatalf("well-known %d %s: %v", ans.StatusCode, body, err)
		}
		v, err := wk.Log.Verifier()
		if err != nil || wk.Log.MaxMergeDelayMs != 1000 {
			t.Fatalf("log member %+v: %v", wk.Log, err)
		}
		ans, body = get(aliceKey, proofPath)
		if ans.StatusCode != 200 {
			t.Fatalf("proof: %d %s", ans.StatusCode, body)
		}
		var p receipt.Proof
		if err := json.Unmarshal(body, &p); err != nil {
			t.Fatal(err)
		}
		c, err := receipt.VerifyInclusion(&p, v, wk.Receipts.Domain, r)
		if err != nil || c.Size != 1 {
			t.Fatalf("VerifyInclusion = %+v, %v", c, err)
		}
		if _, err := receipt.VerifyInclusion(&p, v, receipt.NewDomain(wk.Receipts.Domain.ChainID), r); err != nil {
			t.Errorf("the receipt domain the signer publishes is not NewDomain's: %v", err)
		}

		for _, tc := range []struct {
			name, auth, path string
			status           int
			code             string
		}{
			{"another owner's key", bobKey, proofPath, 404, "receipt_not_found"},
			{"no credentials", "", proofPath, 401, "authentication_required"},
			{"not an id", aliceKey, "/v1/receipts/x%20y/proof", 404, "receipt_not_found"},
			{"no such receipt", aliceKey, "/v1/receipts/0x" + strings.Repeat("0", 64) + "/proof", 404, "receipt_not_found"},
			{"a tile past the log", "", "/log/tile/0/001", 404, "tile_not_found"},
			{"not a tile", "", "/log/tile/8/0/000", 404, "tile_not_found"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				ans, body := get(tc.auth, tc.path)
				if ans.StatusCode != tc.status || (tc.code != "" && errorCode(t, body) != tc.code) {
					t.Fatalf("status %d: %s; want %d %s", ans.StatusCode, body, tc.status, tc.code)
				}
			})
		}

		ans, body = get("", "/log/checkpoint")
		if got, err := receipt.OpenCheckpoint(body, v); ans.StatusCode != 200 || err != nil || got != c {
			t.Fatalf("checkpoint %d %s: %v", ans.StatusCode, body, err)
		}
		ans, body = get("", "/log/tile/entries/000.p/1")
		leaves, err := receipt.ParseEntryBundle(body, 1)
		if ans.StatusCode != 200 || err != nil || string(leaves[0]) != string(p.Leaf) {
			t.Fatalf("entry bundle %d %q: %v", ans.StatusCode, body, err)
		}
		if cc := ans.Header.Get("Cache-Control"); cc != "no-cache" {
			t.Errorf("a partial tile's Cache-Control %q", cc)
		}
		for _, s := range []string{strings.ToLower(alice.Hex()[2:]), id[2:], "sk-l4a"} {
			if strings.Contains(strings.ToLower(string(body)), s) {
				t.Errorf("the public entry bundle shows %q", s)
			}
		}
	})
}

// TestX402Receipts: an x402 payment's answer carries a signed receipt (rail
// exact, the network, the authorization's nonce, the payer's account), in
// the header and the body of a completion and in the usage chunk of a
// stream; a replay of the answer carries the same receipt, not a second
// one; the payer reads it and its proof through a wallet session, and the
// proof verifies against the published log key.
func TestX402Receipts(t *testing.T) {
	e, _, _ := newTopUpRig(t, topUpRig{receiptLog: true})
	payer := e.chain.Addr(buyerIdx)
	hdr := e.signedHeader(t, chatBody, buyerIdx)
	resp := e.post(t, http.DefaultClient, chatBody, http.Header{"Payment-Signature": {hdr}})
	body := readAll(t, resp)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("paid call: %d %s", resp.StatusCode, body)
	}
	r, _, err := receipt.DecodeHeader(resp.Header.Get(receipt.Header))
	if err != nil {
		t.Fatal(err)
	}
	pl, err := x402.DecodePaymentPayload(hdr)
	if err != nil {
		t.Fatal(err)
	}
	ep, err := exact.ParsePayload(pl.Payload)
	if err != nil {
		t.Fatal(err)
	}
	if r.Rail != receipt.RailExact || r.Network != network || r.Account != payer || r.Payment != ep.Authorization.Nonce ||
		r.KeyID != ([32]byte{}) || r.Amount.Sign() <= 0 || r.LogBy == 0 {
		t.Errorf("receipt %+v", r)
	}
	var ann struct {
		X struct {
			Receipt json.RawMessage `json:"receipt"`
			Charged string          `json:"charged"`
		} `json:"x_llm4agents"`
	}
	if err := json.Unmarshal(body, &ann); err != nil || len(ann.X.Receipt) == 0 || ann.X.Charged != r.Amount.String() {
		t.Fatalf("annotation %s: %v", body, err)
	}

	// A replay of the same payment: the answer as recorded, the same receipt.
	again := e.post(t, http.DefaultClient, chatBody, http.Header{"Payment-Signature": {hdr}})
	_ = readAll(t, again)
	if again.StatusCode != http.StatusOK || again.Header.Get(receipt.Header) != resp.Header.Get(receipt.Header) {
		t.Fatalf("replay %d: receipt %q, first %q", again.StatusCode, again.Header.Get(receipt.Header), resp.Header.Get(receipt.Header))
	}

	// A paid stream carries its receipt in the usage chunk.
	streamBody := `{"model":"demo","stream":true,"messages":[{"role":"user","content":"Say hello"}],"max_tokens":32}`
	c, _ := e.payer(buyerIdx)
	sresp := e.post(t, c, streamBody, nil)
	defer func() { _ = sresp.Body.Close() }()
	sse := readAll(t, sresp)
	var streamReceipt *receipt.Receipt
	for ev := range strings.SplitSeq(string(sse), "\n\n") {
		data, ok := strings.CutPrefix(ev, "data: ")
		if !ok || !strings.Contains(data, `"receipt"`) {
			continue
		}
		var chunk struct {
			X struct {
				Receipt json.RawMessage `json:"receipt"`
			} `json:"x_llm4agents"`
		}
		if err := json.Unmarshal([]byte(data), &chunk); err != nil {
			t.Fatal(err)
		}
		if streamReceipt, _, err = receipt.ParseEnvelope(chunk.X.Receipt); err != nil {
			t.Fatal(err)
		}
	}
	if streamReceipt == nil || streamReceipt.Account != payer || streamReceipt.RequestID == r.RequestID {
		t.Fatalf("stream receipt %+v in %s", streamReceipt, sse)
	}

	if n, err := e.log.Integrate(t.Context()); err != nil || n != 2 {
		t.Fatalf("Integrate = %d, %v; want the two payments' receipts", n, err)
	}
	sess := sessionToken()
	if _, err := e.db.CreateSession(t.Context(), credits.HashSecret(sess), strings.ToLower(payer.Hex()), time.Minute); err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(e.srv.URL)
	lg := &client.ReceiptLog{Account: &client.Account{Base: u, Token: client.Secret(sess)}}
	for _, rr := range []*receipt.Receipt{r, streamReceipt} {
		if _, err := lg.VerifyReceipt(t.Context(), rr, rr.RequestID.Hex()); err != nil {
			t.Errorf("receipt %s: %v", rr.RequestID.Hex(), err)
		}
	}
	other := sessionToken()
	if _, err := e.db.CreateSession(t.Context(), credits.HashSecret(other), strings.ToLower(e.chain.Addr(buyerIdx+1).Hex()), time.Minute); err != nil {
		t.Fatal(err)
	}
	stranger := &client.ReceiptLog{Account: &client.Account{Base: u, Token: client.Secret(other)}}
	if _, err := stranger.VerifyReceipt(t.Context(), r, r.RequestID.Hex()); err == nil || !strings.Contains(err.Error(), "receipt_not_found") {
		t.Errorf("another wallet's proof: %v, want receipt_not_found", err)
	}
}

// failingReceipts is a receipts store whose puts fail: the store went down
// between a call's capture and its receipt.
type failingReceipts struct{ creditStore }

func (failingReceipts) PutReceipt(context.Context, store.StoredReceipt) error {
	return errors.New("store down")
}

// TestReceiptNotKept: a credit call whose receipt cannot be kept still
// answers with its signed receipt (it was charged), counts the failure, and
// the buyer's check of the log reports the broken promise, never silence.
// The ledger's store is hidden behind store.Ledger alone, so the receipt is
// put in a write of its own after the capture (as on PostgreSQL), where the
// store can go down between the two.
func TestReceiptNotKept(t *testing.T) {
	var rl *receiptlog.Log
	e := newCreditEnv(t, creditOpts{backend: creditBackends[0], receiptLog: withLog(t, &rl), receipts: func(db creditStore) creditStore {
		return failingReceipts{db}
	}, wrap: func(l store.Ledger) store.Ledger { return struct{ store.Ledger }{l} }})
	e.topUp(t, alice, 1_000_000)
	key, _ := e.newKey(t, alice, nil)
	resp := e.chat(t, key, chatBody)
	if body := readAll(t, resp); resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	r, _, err := receipt.DecodeHeader(resp.Header.Get(receipt.Header))
	if err != nil {
		t.Fatalf("the answer lacks its receipt: %v", err)
	}
	if n, err := rl.Integrate(t.Context()); err != nil || n != 0 {
		t.Fatalf("Integrate = %d, %v; want nothing to integrate", n, err)
	}
	u, _ := url.Parse(e.srv.URL)
	lg := &client.ReceiptLog{Account: &client.Account{Base: u, Token: client.Secret(key)}}
	if _, err := lg.VerifyReceipt(t.Context(), r, r.RequestID.Hex()); !errors.Is(err, client.ErrNotLogged) {
		t.Errorf("VerifyReceipt = %v, want ErrNotLogged", err)
	}
	// The operator's reconciliation sees the capture no receipt accounts for.
	rec, err := receiptlog.Reconcile(t.Context(), e.led, e.db, e.db.(receiptlog.EntryReader), e.signer.Domain(), alice)
	if err != nil || rec.OK() || rec.Captured.Cmp(r.Amount) != 0 || rec.Receipted.Sign() != 0 {
		t.Errorf("Reconcile = %+v, %v; want the capture of %s with no receipt", rec, err, r.Amount)
	}
}

// TestLedgerTiesToLog: after random credit calls (completions and streams,
// several keys, concurrent), each account's receipts add up to what the
// ledger captured from it, and each is the leaf the log holds for it
// (receiptlog.Reconcile), on every store.
func TestLedgerTiesToLog(t *testing.T) {
	eachCreditBackend(t, func(t *testing.T, b creditBackend) {
		var rl *receiptlog.Log
		e := newCreditEnv(t, creditOpts{backend: b, receiptLog: withLog(t, &rl)})
		accounts := []common.Address{alice, bob}
		var keys []string
		for _, a := range accounts {
			e.topUp(t, a, 10_000_000)
			for range 2 {
				k, _ := e.newKey(t, a, nil)
				keys = append(keys, k)
			}
		}
		rng := mrand.New(mrand.NewPCG(uint64(time.Now().UnixNano()), 1))
		type call struct {
			key  string
			body string
		}
		var calls []call
		for range 24 {
			stream := ""
			if rng.IntN(2) == 0 {
				stream = `,"stream":true`
			}
			calls = append(calls, call{keys[rng.IntN(len(keys))],
				fmt.Sprintf(`{"model":"demo","messages":[{"role":"user","content":"call %d"}],"max_tokens":%d%s}`, rng.IntN(1000), 1+rng.IntN(200), stream)})
		}
		var wg sync.WaitGroup
		work := make(chan call)
		for range 4 {
			wg.Go(func() {
				for c := range work {
					resp := e.chat(t, c.key, c.body)
					if body := readAll(t, resp); resp.StatusCode != http.StatusOK {
						t.Errorf("call: %d %s", resp.StatusCode, body)
					}
				}
			})
		}
		for _, c := range calls {
			work <- c
		}
		close(work)
		wg.Wait()
		if e.leases != nil && !e.leases.Flush(t.Context()) { // the draws written, their leases left open
			t.Fatal("flush the draws")
		}
		if _, err := rl.Integrate(t.Context()); err != nil {
			t.Fatal(err)
		}
		total := 0
		for _, a := range accounts {
			rec, err := receiptlog.Reconcile(t.Context(), e.led, e.db, e.db.(receiptlog.EntryReader), e.signer.Domain(), a)
			if err != nil {
				t.Fatal(err)
			}
			if !rec.OK() || rec.Logged != rec.Receipts || rec.Captured.Sign() <= 0 {
				t.Errorf("%s: captured %s, receipted %s, %d receipts, %d logged, problems %v",
					a.Hex(), rec.Captured, rec.Receipted, rec.Receipts, rec.Logged, rec.Problems)
			}
			total += rec.Receipts
		}
		if total != len(calls) {
			t.Errorf("%d receipts for %d calls", total, len(calls))
		}
	})
}

// withAnchoredLog is withLog with the log anchored on a simulated chain, as
// the gateway's in-process facilitator signer would anchor it.
func withAnchoredLog(t *testing.T, out **receiptlog.Log) (func(db creditStore) *receiptlog.Log, *anchorChain) {
	c := &anchorChain{sim: testchain.NewSimulated(t)}
	c.contract, _ = c.sim.DeployReceiptLogAnchor(t)
	c.sim.StartAutoCommit(t, 10*time.Millisecond)
	var err error
	c.sender, err = chain.NewSender(c.sim.Client, c.sim.Keys[signerIdx], c.sim.ChainID,
		chain.SenderConfig{MaxFeePerGas: big.NewInt(1e12), PollInterval: 10 * time.Millisecond}, discard())
	if err != nil {
		t.Fatal(err)
	}
	return func(db creditStore) *receiptlog.Log {
		key, vkey := newLogKey(t)
		st, ok := db.(interface {
			receiptlog.Store
			store.LogAnchors
		})
		if !ok {
			t.Fatalf("%T keeps no anchored receipt log", db)
		}
		l, err := receiptlog.New(receiptlog.Config{Store: st, Key: key, VerifierKey: vkey, Holder: t.Name(), MaxMergeDelay: time.Second,
			Anchor: &receiptlog.Anchoring{Network: network, Contract: c.contract, Every: time.Hour, Sender: c.sender, Node: c.sim.Client, Store: st}})
		if err != nil {
			t.Fatal(err)
		}
		*out = l
		return l
	}, c
}

type anchorChain struct {
	sim      *testchain.Simulated
	contract common.Address
	sender   *chain.Sender
}

// TestLogAnchors: GET /log/anchors lists what the log anchored, newest
// first, as the buyer's parser reads it, and the well-known document names
// where and from whom; a page is bounded; a log not anchored says so.
func TestLogAnchors(t *testing.T) {
	eachCreditBackend(t, func(t *testing.T, b creditBackend) {
		var rl *receiptlog.Log
		build, c := withAnchoredLog(t, &rl)
		e := newCreditEnv(t, creditOpts{backend: b, receiptLog: build})
		type answer struct {
			StatusCode int
			Header     http.Header
		}
		get := func(path string) (answer, []byte) {
			resp := e.do(t, t.Context(), http.MethodGet, path, "", "", nil)
			return answer{resp.StatusCode, resp.Header}, readAll(t, resp)
		}
		if resp, body := get("/log/anchors"); resp.StatusCode != 200 || string(body) != "{\"anchors\":[]}\n" {
			t.Fatalf("no anchor yet: %d %s", resp.StatusCode, body)
		}
		e.topUp(t, alice, 1_000_000)
		aliceKey, _ := e.newKey(t, alice, nil)
		var roots []receipt.Checkpoint
		for range 2 {
			if resp := e.chat(t, aliceKey, chatBody); resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d: %s", resp.StatusCode, readAll(t, resp))
			}
			e.sync(t)
			if _, err := rl.Integrate(t.Context()); err != nil {
				t.Fatal(err)
			}
			if err := rl.Anchor(t.Context()); err != nil {
				t.Fatal(err)
			}
			b, err := rl.Checkpoint(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			cp, err := receipt.OpenCheckpoint(b, rl.Verifier())
			if err != nil {
				t.Fatal(err)
			}
			roots = append(roots, cp)
		}
		resp, body := get("/log/anchors")
		as, err := receipt.ParseAnchors(body)
		if resp.StatusCode != 200 || err != nil || len(as) != 1 {
			t.Fatalf("anchors %d %s: %v; want one (the second is not due within the hour)", resp.StatusCode, body, err)
		}
		if a := as[0]; a.Size != 1 || a.Root != roots[0].Root || a.Network != network || a.Contract != c.contract ||
			a.Sender != c.sender.Address() || a.Block == 0 {
			t.Errorf("anchor = %+v, want size 1 with its root, from %s at %s, mined", a, c.sender.Address(), c.contract)
		}
		if cc := resp.Header.Get("Cache-Control"); cc != "no-cache" || resp.Header.Get("Content-Type") != "application/json" {
			t.Errorf("headers %v", resp.Header)
		}
		_, body = get("/.well-known/llm4agents.json")
		wk, err := receipt.ParseWellKnown(body)
		if err != nil || wk.Log == nil || wk.Log.Network != network || wk.Log.AnchorContract != c.contract || wk.Log.AnchorSender != c.sender.Address() {
			t.Fatalf("well-known %s: %v", body, err)
		}
		for _, q := range []string{"0", "-1", "101", "x", "1.5", "99999999999999999999"} {
			if resp, body := get("/log/anchors?limit=" + q); resp.StatusCode != 400 || errorCode(t, body) != "invalid_request" {
				t.Errorf("limit=%s: %d %s, want 400", q, resp.StatusCode, body)
			}
		}
		if resp, body := get("/log/anchors?limit=1"); resp.StatusCode != 200 || !strings.Contains(string(body), c.contract.Hex()) {
			t.Errorf("limit=1: %d %s", resp.StatusCode, body)
		}
	})
	var rl *receiptlog.Log
	e := newCreditEnv(t, creditOpts{backend: creditBackends[0], receiptLog: withLog(t, &rl)})
	get := func(path string) (int, []byte) {
		resp := e.do(t, t.Context(), http.MethodGet, path, "", "", nil)
		return resp.StatusCode, readAll(t, resp)
	}
	if status, body := get("/log/anchors"); status != 404 || errorCode(t, body) != "log_not_anchored" {
		t.Errorf("a log not anchored: %d %s", status, body)
	}
	_, body := get("/.well-known/llm4agents.json")
	if wk, err := receipt.ParseWellKnown(body); err != nil || wk.Log == nil || wk.Log.Anchored() {
		t.Errorf("well-known of a log not anchored: %+v, %v", wk, err)
	}
}
