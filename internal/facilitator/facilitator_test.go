package facilitator_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/big"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/accounts/abi/bind"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/crypto"

	"github.com/llm4agents/llm4agents/contracts"
	"github.com/llm4agents/llm4agents/internal/chain"
	"github.com/llm4agents/llm4agents/internal/facilitator"
	"github.com/llm4agents/llm4agents/internal/store/sqlite"
	"github.com/llm4agents/llm4agents/internal/testchain"
	"github.com/llm4agents/llm4agents/x402"
	"github.com/llm4agents/llm4agents/x402/evm/exact"
)

const (
	network   = "eip155:1337"
	signerIdx = 8 // the facilitator's account on the simulated chain
	payToIdx  = 9
)

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

// env is a simulated chain with a facilitator on a temporary SQLite store.
type env struct {
	// schemes are the facilitator's Config.Schemes (default exact alone).
	schemes []string
	chain   *testchain.Simulated
	store   *sqlite.DB
	path    string
	fac     *facilitator.Facilitator
	sender  *chain.Sender
}

func newEnv(t *testing.T) *env {
	t.Helper()
	sim := testchain.NewSimulated(t)
	sim.StartAutoCommit(t, 20*time.Millisecond)
	e := &env{chain: sim, path: filepath.Join(t.TempDir(), "fac.db")}
	e.reopen(t)
	return e
}

// reopen builds a new facilitator and store handle on the same file, as a
// restarted process would.
func (e *env) reopen(t *testing.T) {
	t.Helper()
	db, err := sqlite.Open(context.Background(), e.path, discard())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := db.Close(); err != nil {
			t.Error(err)
		}
	})
	sender, err := chain.NewSender(e.chain.Client, e.chain.Keys[signerIdx], e.chain.ChainID,
		chain.SenderConfig{MaxFeePerGas: big.NewInt(1e12), PollInterval: 10 * time.Millisecond}, discard())
	if err != nil {
		t.Fatal(err)
	}
	fac, err := facilitator.New(facilitator.Config{
		Network: network,
		Assets:  []facilitator.Asset{{Address: e.chain.Token, Name: "USD Coin", Version: "2"}},
		Schemes: e.schemes,
	}, e.chain.Client, sender, db, discard())
	if err != nil {
		t.Fatal(err)
	}
	e.store, e.fac, e.sender = db, fac, sender
}

func (e *env) requirements(amount string) x402.PaymentRequirements {
	return x402.PaymentRequirements{
		Scheme: "exact", Network: network, Amount: amount, Asset: e.chain.Token.Hex(),
		PayTo: e.chain.Addr(payToIdx).Hex(), MaxTimeoutSeconds: 300,
		Extra: json.RawMessage(`{"name":"USD Coin","version":"2"}`),
	}
}

// pay signs req as dev account i.
func (e *env) pay(t *testing.T, i int, req x402.PaymentRequirements) *x402.PaymentPayload {
	t.Helper()
	pr := &x402.PaymentRequired{X402Version: 2, Resource: &x402.ResourceInfo{URL: "http://127.0.0.1/paid"}, Accepts: []x402.PaymentRequirements{req}}
	p, err := exact.NewPaymentPayload(context.Background(), exact.NewKeySigner(e.chain.Keys[i]), pr, 0, exact.SignOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// both runs f against the in-process facilitator and the same facilitator
// behind the HTTP handler and client.
func both(t *testing.T, f func(t *testing.T, e *env, fac facilitator.API)) {
	bothOn(t, newEnv, f)
}

// bothOn is both on environments newEnv makes.
func bothOn(t *testing.T, newEnv func(*testing.T) *env, f func(t *testing.T, e *env, fac facilitator.API)) {
	t.Run("in-process", func(t *testing.T) {
		e := newEnv(t)
		f(t, e, e.fac)
	})
	t.Run("http", func(t *testing.T) {
		e := newEnv(t)
		srv := httptest.NewServer(facilitator.NewHandler(e.fac, discard()))
		t.Cleanup(srv.Close)
		f(t, e, facilitator.NewClient(srv.URL, nil))
	})
}

func TestSettleOnce(t *testing.T) {
	both(t, func(t *testing.T, e *env, fac facilitator.API) {
		ctx := context.Background()
		req := e.requirements("10000")
		p := e.pay(t, 1, req)
		before := e.chain.BalanceOf(t, e.chain.Addr(payToIdx))

		v, err := fac.Verify(ctx, p, req)
		if err != nil || !v.IsValid {
			t.Fatalf("verify = %+v, %v", v, err)
		}
		if v.Payer != e.chain.Addr(1).Hex() {
			t.Errorf("payer = %s", v.Payer)
		}
		s, err := fac.Settle(ctx, p, req)
		if err != nil || !s.Success {
			t.Fatalf("settle = %+v, %v", s, err)
		}
		if s.Transaction == "" || s.Network != network || s.Payer != e.chain.Addr(1).Hex() {
			t.Errorf("settle response = %+v", s)
		}
		after := e.chain.BalanceOf(t, e.chain.Addr(payToIdx))
		if got := new(big.Int).Sub(after, before); got.Cmp(big.NewInt(10000)) != 0 {
			t.Errorf("payTo balance rose by %s, want 10000", got)
		}
		// The same authorization again: never a second success.
		again, err := fac.Settle(ctx, p, req)
		if err != nil {
			t.Fatal(err)
		}
		if again.Success || again.ErrorReason != x402.ReasonEVMNonceAlreadyUsed || again.Transaction != s.Transaction {
			t.Errorf("second settle = %+v; want nonce_already_used with tx %s", again, s.Transaction)
		}
		if v, _ := fac.Verify(ctx, p, req); v.IsValid || v.InvalidReason != x402.ReasonEVMNonceAlreadyUsed {
			t.Errorf("verify after settle = %+v", v)
		}
	})
}

// TestConcurrentSameAuthorization presents one authorization, in several
// re-encodings, 16 times at once: exactly one success and one transfer.
func TestConcurrentSameAuthorization(t *testing.T) {
	both(t, func(t *testing.T, e *env, fac facilitator.API) {
		ctx := context.Background()
		req := e.requirements("20000")
		p := e.pay(t, 2, req)
		variants := reencodings(t, p)
		before := e.chain.BalanceOf(t, e.chain.Addr(payToIdx))

		const n = 16
		results := make(chan *x402.SettleResponse, n)
		errs := make(chan error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				r, err := fac.Settle(ctx, variants[i%len(variants)], req)
				if err != nil {
					errs <- err
					return
				}
				results <- r
			})
		}
		wg.Wait()
		close(results)
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		successes := 0
		for r := range results {
			if r.Success {
				successes++
			} else if r.ErrorReason != x402.ReasonEVMNonceAlreadyUsed && r.ErrorReason != x402.ReasonSettlementPending {
				t.Errorf("loser got %+v", r)
			}
		}
		if successes != 1 {
			t.Errorf("%d successes, want exactly 1", successes)
		}
		after := e.chain.BalanceOf(t, e.chain.Addr(payToIdx))
		if got := new(big.Int).Sub(after, before); got.Cmp(big.NewInt(20000)) != 0 {
			t.Errorf("payTo balance rose by %s, want 20000", got)
		}
	})
}

// reencodings returns p with its signature's v as 27/28 and as 0/1 and its
// addresses in lower case: one authorization, several byte forms.
func reencodings(t *testing.T, p *x402.PaymentPayload) []*x402.PaymentPayload {
	t.Helper()
	var w exact.PayloadJSON
	if err := json.Unmarshal(p.Payload, &w); err != nil {
		t.Fatal(err)
	}
	out := []*x402.PaymentPayload{p}
	low := w
	sig := common.FromHex(w.Signature)
	sig[64] -= 27
	low.Signature = "0x" + common.Bytes2Hex(sig)
	lower := w
	lower.Authorization.From = "0x" + common.Bytes2Hex(common.FromHex(w.Authorization.From))
	for _, v := range []exact.PayloadJSON{low, lower} {
		b, _ := json.Marshal(v)
		q := *p
		q.Payload = b
		out = append(out, &q)
	}
	return out
}

// TestManyPaymentsConcurrently settles 32 different authorizations at once
// from one facilitator account: no nonce collisions, all settle.
func TestManyPaymentsConcurrently(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	const n = 32
	req := e.requirements("1000")
	payloads := make([]*x402.PaymentPayload, n)
	for i := range payloads {
		payloads[i] = e.pay(t, 1+i%testchain.SimulatedPayers, req)
	}
	before := e.chain.BalanceOf(t, e.chain.Addr(payToIdx))
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for _, p := range payloads {
		wg.Go(func() {
			r, err := e.fac.Settle(ctx, p, req)
			switch {
			case err != nil:
				errs <- err
			case !r.Success:
				errs <- fmt.Errorf("settle: %+v", r)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	after := e.chain.BalanceOf(t, e.chain.Addr(payToIdx))
	if got := new(big.Int).Sub(after, before); got.Cmp(big.NewInt(n*1000)) != 0 {
		t.Errorf("payTo balance rose by %s, want %d", got, n*1000)
	}
}

// TestRestartKeepsOneSuccess settles, restarts the facilitator on the same
// store, and settles again: the record survives, no second success.
func TestRestartKeepsOneSuccess(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	req := e.requirements("10000")
	p := e.pay(t, 3, req)
	s, err := e.fac.Settle(ctx, p, req)
	if err != nil || !s.Success {
		t.Fatalf("settle = %+v, %v", s, err)
	}
	e.reopen(t)
	again, err := e.fac.Settle(ctx, p, req)
	if err != nil || again.Success {
		t.Fatalf("settle after restart = %+v, %v; want a refusal", again, err)
	}
}

// TestThirdPartyUsedFirst: the payer's authorization is submitted on chain by
// someone else before it reaches us. We report it as already used, with the
// transaction that used it, never as our success.
func TestThirdPartyUsedFirst(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	req := e.requirements("10000")
	p := e.pay(t, 4, req)
	tx := submitDirectly(t, e.chain.TokenContract, e.chain.Transactor(t, 7), p)
	e.chain.Mine(t, tx)

	resp, err := e.fac.Settle(ctx, p, req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Success || resp.ErrorReason != x402.ReasonEVMNonceAlreadyUsed || resp.Transaction != tx.Hash().Hex() {
		t.Errorf("settle = %+v; want nonce_already_used with tx %s", resp, tx.Hash().Hex())
	}
}

func TestSupported(t *testing.T) {
	both(t, func(t *testing.T, e *env, fac facilitator.API) {
		s, err := fac.Supported(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if len(s.Kinds) != 1 || s.Kinds[0].Network != network || s.Kinds[0].Scheme != "exact" || s.Kinds[0].X402Version != 2 {
			t.Errorf("kinds = %+v", s.Kinds)
		}
		if got := s.Signers["eip155:*"]; len(got) != 1 || got[0] != crypto.PubkeyToAddress(e.chain.Keys[signerIdx].PublicKey).Hex() {
			t.Errorf("signers = %v", s.Signers)
		}
	})
}

// submitDirectly sends p's authorization to the token from someone else's
// account, as a third party who saw the payment header could.
func submitDirectly(t *testing.T, tok *contracts.EIP3009Token, auth *bind.TransactOpts, p *x402.PaymentPayload) *types.Transaction {
	t.Helper()
	var w exact.PayloadJSON
	if err := json.Unmarshal(p.Payload, &w); err != nil {
		t.Fatal(err)
	}
	pl, err := w.Parse()
	if err != nil {
		t.Fatal(err)
	}
	a := pl.Authorization
	var r, s [32]byte
	copy(r[:], pl.Signature[:32])
	copy(s[:], pl.Signature[32:64])
	tx, err := tok.TransferWithAuthorization(auth, a.From, a.To, a.Value, a.ValidAfter, a.ValidBefore, a.Nonce, pl.Signature[64], r, s)
	if err != nil {
		t.Fatal(err)
	}
	return tx
}

// TestSuccessOnlyToWaitingCaller (D5): a settle call whose caller left
// before the answer (a gateway's timeout, a dropped connection) settles all
// the same but takes no success: the next settle call of the authorization
// receives it, once, and every later one nonce_already_used.
func TestSuccessOnlyToWaitingCaller(t *testing.T) {
	e := newEnv(t)
	req := e.requirements("10000")
	p := e.pay(t, 1, req)
	gone, cancel := context.WithCancel(t.Context())
	cancel()
	if sr, err := e.fac.Settle(gone, p, req); err == nil {
		t.Fatalf("a caller that left was answered %+v", sr)
	}
	if got := e.chain.BalanceOf(t, e.chain.Addr(payToIdx)); got.Int64() != 10000 {
		t.Fatalf("payTo holds %s, want the 10000 settled after the caller left", got)
	}
	sr, err := e.fac.Settle(t.Context(), p, req)
	if err != nil || !sr.Success || sr.Transaction == "" {
		t.Fatalf("the next settle = %+v, %v; want the success", sr, err)
	}
	again, err := e.fac.Settle(t.Context(), p, req)
	if err != nil || again.Success || again.ErrorReason != x402.ReasonEVMNonceAlreadyUsed || again.Transaction != sr.Transaction {
		t.Errorf("a third settle = %+v, %v; want nonce_already_used naming %s", again, err, sr.Transaction)
	}
}
