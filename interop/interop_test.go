package interop_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/accounts/abi"
	"github.com/ethereum/go-ethereum/accounts/abi/bind"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/llm4agents/llm4agents/contracts"
	"github.com/llm4agents/llm4agents/internal/chain"
	"github.com/llm4agents/llm4agents/internal/facilitator"
	"github.com/llm4agents/llm4agents/internal/store/sqlite"
	"github.com/llm4agents/llm4agents/internal/testchain"
	"github.com/llm4agents/llm4agents/x402"
	"github.com/llm4agents/llm4agents/x402/evm/exact"
)

const (
	network      = "eip155:1337"
	tokenName    = "USD Coin"
	tokenVersion = "2"
	// amount is the price of the express server's GET /paid, in atomic units.
	amount = "10000"
	// maxTimeoutSeconds is what the express server and our requirements offer.
	maxTimeoutSeconds = 60
	payerFunds        = 1_000_000_000

	// requireToolsEnv turns a missing node or node_modules into a failure (CI).
	requireToolsEnv = "LLM4AGENTS_TEST_REQUIRE_TOOLS"
)

// Roles of the anvil dev accounts (testchain.DevKey).
const (
	deployerIdx      = 0 // deploys the token and Multicall3, mints
	payerIdx         = 1 // holds payerFunds tokens
	payToIdx         = 2 // the resource server's recipient
	facilitatorIdx   = 3 // our facilitator's account
	tsFacilitatorIdx = 4 // the official TypeScript facilitator's account
	unfundedIdx      = 5 // holds no tokens
	strangerIdx      = 6 // signs what it should not
)

const (
	startTimeout  = 30 * time.Second // a node service until its ready line
	scriptTimeout = 60 * time.Second // a one-shot node script
	stopTimeout   = 5 * time.Second  // from SIGKILL until the process is reaped
	chainTimeout  = 30 * time.Second // one chain operation
	pollInterval  = 20 * time.Millisecond
)

// multicall3Address is where the official facilitator expects Multicall3, as on
// every public chain. A bare anvil has none; newChain installs it so the official
// failure diagnosis works as it does in production.
var multicall3Address = common.HexToAddress("0xcA11bde05977b3631167028862bE2a173976CA11")

// npmPeers are the packages the scripts import; all are pinned in package.json.
var npmPeers = []string{"@x402/core", "@x402/evm", "@x402/express", "@x402/fetch", "express", "viem"}

// TestExpressServer runs the official @x402/express server with our facilitator
// behind it, and pays it with the official @x402/fetch client and with our Go
// buyer code.
func TestExpressServer(t *testing.T) {
	requireTools(t)
	c := newChain(t)
	fac := startOurFacilitator(t, c)
	payTo := testchain.DevAddress(payToIdx)
	srv := startNodeService(t, "express-server.mjs",
		"PORT=0",
		"FACILITATOR_URL="+fac.URL,
		"TOKEN="+c.token.Hex(),
		"PAY_TO="+payTo.Hex(),
		"AMOUNT="+amount,
		"MAX_TIMEOUT_SECONDS="+strconv.Itoa(maxTimeoutSeconds),
	)
	paidURL := srv.URL + "/paid"

	t.Run("fetch client", func(t *testing.T) {
		before := c.balance(t, payTo)
		calls := fac.rec.count()
		out := runNodeScript(t, "fetch-client.mjs", nil,
			"URL="+paidURL,
			"PAYER_KEY="+keyHex(testchain.DevKey(payerIdx)),
			"TOKEN="+c.token.Hex(),
		)
		var got struct {
			Exchanges []struct {
				Status int
				Paid   bool
			}
			Status          int
			Body            json.RawMessage
			PaymentResponse *x402.SettleResponse
		}
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatalf("fetch-client output %q: %v", out, err)
		}
		// One unpaid request answered 402, then one paid request answered 200.
		wantExchanges := []struct {
			Status int
			Paid   bool
		}{{http.StatusPaymentRequired, false}, {http.StatusOK, true}}
		if diff := cmp.Diff(wantExchanges, got.Exchanges); diff != "" {
			t.Errorf("requests the fetch client made (-want +got):\n%s", diff)
		}
		if got.Status != http.StatusOK || string(got.Body) != `{"ok":true}` {
			t.Fatalf("paid response: status %d, body %s", got.Status, got.Body)
		}
		if got.PaymentResponse == nil {
			t.Fatal("paid response has no PAYMENT-RESPONSE header")
		}
		c.checkSettled(t, fac, calls, before, got.PaymentResponse)
	})

	t.Run("go client", func(t *testing.T) {
		before := c.balance(t, payTo)
		calls := fac.rec.count()

		pr := fetchPaymentRequired(t, paidURL)
		want := x402.PaymentRequired{
			X402Version: 2,
			Error:       "Payment required",
			Resource:    &x402.ResourceInfo{URL: paidURL, Description: "interop", MimeType: "application/json"},
			Accepts:     []x402.PaymentRequirements{c.requirements(amount)},
		}
		if diff := cmp.Diff(want, *pr, cmpopts.IgnoreUnexported(x402.PaymentRequired{})); diff != "" {
			t.Errorf("PAYMENT-REQUIRED (-want +got):\n%s", diff)
		}

		p, err := exact.NewPaymentPayload(t.Context(), exact.NewKeySigner(testchain.DevKey(payerIdx)), pr, 0, exact.SignOptions{})
		if err != nil {
			t.Fatal(err)
		}
		resp, body := httpGet(t, paidURL, http.Header{x402.HeaderPaymentSignature: {encodeHeader(t, p)}})
		if resp.StatusCode != http.StatusOK || string(body) != `{"ok":true}` {
			t.Fatalf("paid GET: status %d, body %s, PAYMENT-RESPONSE %q", resp.StatusCode, body, resp.Header.Get(x402.HeaderPaymentResponse))
		}
		sr, err := x402.DecodeSettleResponse(resp.Header.Get(x402.HeaderPaymentResponse))
		if err != nil {
			t.Fatalf("decode PAYMENT-RESPONSE: %v", err)
		}
		c.checkSettled(t, fac, calls, before, sr)
	})
	// Our facilitator refuses the payment at /verify: the buyer gets a new 402
	// naming the reason, and nothing is settled.
	t.Run("go client, refused payment", func(t *testing.T) {
		before := c.balance(t, payTo)
		calls := fac.rec.count()
		pr := fetchPaymentRequired(t, paidURL)
		// Signed by a key that is not the payer's.
		p := c.sign(t, testchain.DevKey(strangerIdx), testchain.DevKey(payerIdx), pr.Accepts[0], nil)
		p.Resource = pr.Resource
		resp, body := httpGet(t, paidURL, http.Header{x402.HeaderPaymentSignature: {encodeHeader(t, p)}})
		if resp.StatusCode != http.StatusPaymentRequired {
			t.Fatalf("GET with a bad signature: status %d, body %s", resp.StatusCode, body)
		}
		again, err := x402.DecodePaymentRequired(resp.Header.Get(x402.HeaderPaymentRequired))
		if err != nil {
			t.Fatalf("decode PAYMENT-REQUIRED: %v", err)
		}
		if again.Error != string(x402.ReasonEVMSignature) {
			t.Errorf("PAYMENT-REQUIRED error = %q, want our verify reason %q", again.Error, x402.ReasonEVMSignature)
		}
		if n := len(fac.rec.since(calls, "/verify")); n != 1 {
			t.Errorf("%d /verify calls, want 1", n)
		}
		if n := len(fac.rec.since(calls, "/settle")); n != 0 {
			t.Errorf("%d /settle calls, want none", n)
		}
		c.checkBalanceRose(t, payTo, before, "0")
	})

	// A third party submits the authorization between /verify and /settle: our
	// facilitator answers success:false with that transaction, which the express
	// server must accept and pass on to the buyer as a 402 with PAYMENT-RESPONSE.
	t.Run("go client, front-run settlement", func(t *testing.T) {
		before := c.balance(t, payTo)
		calls := fac.rec.count()
		pr := fetchPaymentRequired(t, paidURL)
		p, err := exact.NewPaymentPayload(t.Context(), exact.NewKeySigner(testchain.DevKey(payerIdx)), pr, 0, exact.SignOptions{})
		if err != nil {
			t.Fatal(err)
		}
		frontRun := make(chan common.Hash, 1)
		hookErr := make(chan error, 1)
		fac.rec.setBefore(func(path string, _ []byte) {
			if path != "/settle" {
				return
			}
			hash, err := c.frontRun(context.Background(), p.Payload)
			if err != nil {
				hookErr <- err
				return
			}
			frontRun <- hash
		})
		t.Cleanup(func() { fac.rec.setBefore(nil) })

		resp, body := httpGet(t, paidURL, http.Header{x402.HeaderPaymentSignature: {encodeHeader(t, p)}})
		fac.rec.setBefore(nil)
		var hash common.Hash
		select {
		case hash = <-frontRun:
		case err := <-hookErr:
			t.Fatalf("front-run: %v", err)
		default:
			t.Fatalf("no /settle call to front-run; status %d, body %s", resp.StatusCode, body)
		}
		if resp.StatusCode != http.StatusPaymentRequired {
			t.Fatalf("front-run GET: status %d, body %s", resp.StatusCode, body)
		}
		sr, err := x402.DecodeSettleResponse(resp.Header.Get(x402.HeaderPaymentResponse))
		if err != nil {
			t.Fatalf("decode PAYMENT-RESPONSE %q: %v", resp.Header.Get(x402.HeaderPaymentResponse), err)
		}
		want := x402.SettleResponse{
			Success: false, ErrorReason: x402.ReasonEVMNonceAlreadyUsed, Payer: testchain.DevAddress(payerIdx).Hex(),
			Transaction: hash.Hex(), Network: network,
		}
		if diff := cmp.Diff(want, *sr, cmpopts.IgnoreFields(x402.SettleResponse{}, "ErrorMessage")); diff != "" {
			t.Errorf("PAYMENT-RESPONSE (-want +got):\n%s", diff)
		}
		if n := len(fac.rec.since(calls, "/settle")); n != 1 {
			t.Errorf("%d /settle calls, want 1", n)
		}
		// The third party's transaction paid; ours must not have paid again.
		c.checkBalanceRose(t, payTo, before, amount)
	})
}

// TestExpressSettlementPending: our facilitator's receipt wait runs out, so
// /settle answers settlement_pending with the broadcast transaction. The official
// resource server retries /settle once with the same body; by then the block is
// mined and our facilitator reconciles from its record, without a second
// broadcast, into the one success.
func TestExpressSettlementPending(t *testing.T) {
	requireTools(t)
	c := newChain(t)
	fac := startOurFacilitator(t, c, func(cfg *facilitator.Config) { cfg.SettleTimeout = 300 * time.Millisecond })
	payTo := testchain.DevAddress(payToIdx)
	srv := startNodeService(t, "express-server.mjs",
		"PORT=0",
		"FACILITATOR_URL="+fac.URL,
		"TOKEN="+c.token.Hex(),
		"PAY_TO="+payTo.Hex(),
		"AMOUNT="+amount,
		"MAX_TIMEOUT_SECONDS="+strconv.Itoa(maxTimeoutSeconds),
	)
	paidURL := srv.URL + "/paid"
	ctx, cancel := context.WithTimeout(t.Context(), chainTimeout)
	defer cancel()
	before := c.balance(t, payTo)
	facNonce, err := c.anvil.Client.NonceAt(ctx, fac.Address, nil)
	if err != nil {
		t.Fatal(err)
	}

	pr := fetchPaymentRequired(t, paidURL)
	p, err := exact.NewPaymentPayload(ctx, exact.NewKeySigner(testchain.DevKey(payerIdx)), pr, 0, exact.SignOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.anvil.SetAutomine(ctx, false); err != nil {
		t.Fatal(err)
	}
	var settles atomic.Int32
	mineErr := make(chan error, 1)
	fac.rec.setBefore(func(path string, _ []byte) {
		if path != "/settle" {
			return
		}
		if settles.Add(1) == 2 {
			mineErr <- c.anvil.Mine(ctx, 1) // the retry finds the transaction mined
		}
	})
	t.Cleanup(func() { fac.rec.setBefore(nil) })

	resp, body := httpGet(t, paidURL, http.Header{x402.HeaderPaymentSignature: {encodeHeader(t, p)}})
	fac.rec.setBefore(nil)
	select {
	case err := <-mineErr:
		if err != nil {
			t.Fatal(err)
		}
	default:
		t.Fatalf("express called /settle %d times, want a retry; status %d, body %s", settles.Load(), resp.StatusCode, body)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("paid GET: status %d, body %s, PAYMENT-RESPONSE %q", resp.StatusCode, body, resp.Header.Get(x402.HeaderPaymentResponse))
	}
	sr, err := x402.DecodeSettleResponse(resp.Header.Get(x402.HeaderPaymentResponse))
	if err != nil {
		t.Fatalf("decode PAYMENT-RESPONSE: %v", err)
	}

	calls := fac.rec.since(0, "/settle")
	if len(calls) != 2 {
		t.Fatalf("%d /settle calls, want 2", len(calls))
	}
	if !bytes.Equal(calls[0].Request, calls[1].Request) {
		t.Errorf("the retry's body differs from the first /settle's:\n%s\n%s", calls[0].Request, calls[1].Request)
	}
	var first, second x402.SettleResponse
	if err := json.Unmarshal(calls[0].Response, &first); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(calls[1].Response, &second); err != nil {
		t.Fatal(err)
	}
	if first.Success || first.ErrorReason != x402.ReasonSettlementPending || !txHashRE.MatchString(first.Transaction) {
		t.Errorf("first /settle = %+v; want settlement_pending with a transaction", first)
	}
	if !second.Success || second.Transaction != first.Transaction || sr.Transaction != first.Transaction || !sr.Success {
		t.Errorf("retry = %+v, PAYMENT-RESPONSE = %+v; want success with transaction %s", second, sr, first.Transaction)
	}
	n, err := c.anvil.Client.NonceAt(ctx, fac.Address, nil)
	if err != nil {
		t.Fatal(err)
	}
	if n != facNonce+1 {
		t.Errorf("our facilitator sent %d transactions, want 1", n-facNonce)
	}
	c.checkBalanceRose(t, payTo, before, amount)
}

// fetchPaymentRequired GETs url unpaid and decodes the 402's PAYMENT-REQUIRED.
func fetchPaymentRequired(t *testing.T, url string) *x402.PaymentRequired {
	t.Helper()
	resp, body := httpGet(t, url, nil)
	if resp.StatusCode != http.StatusPaymentRequired {
		t.Fatalf("unpaid GET: status %d, body %s", resp.StatusCode, body)
	}
	pr, err := x402.DecodePaymentRequired(resp.Header.Get(x402.HeaderPaymentRequired))
	if err != nil {
		t.Fatalf("decode PAYMENT-REQUIRED: %v", err)
	}
	return pr
}

func encodeHeader(t *testing.T, v any) string {
	t.Helper()
	h, err := x402.EncodeHeader(v)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// checkSettled asserts that exactly one payment of amount from the payer to
// payTo went through our facilitator since it had answered calls requests, and
// that resp, the PAYMENT-RESPONSE the buyer got, describes it.
func (c *testChain) checkSettled(t *testing.T, fac *ourFacilitator, calls int, before *big.Int, resp *x402.SettleResponse) {
	t.Helper()
	payer := testchain.DevAddress(payerIdx)
	if !resp.Success || resp.Network != network || resp.Payer != payer.Hex() || !txHashRE.MatchString(resp.Transaction) {
		t.Errorf("PAYMENT-RESPONSE = %+v; want success on %s by %s with a transaction hash", resp, network, payer.Hex())
	}

	settles := fac.rec.since(calls, "/settle")
	if len(settles) != 1 {
		t.Fatalf("our facilitator got %d /settle calls, want exactly 1", len(settles))
	}
	var sr x402.SettleResponse
	if err := json.Unmarshal(settles[0].Response, &sr); err != nil || settles[0].Status != http.StatusOK {
		t.Fatalf("/settle answered %d %s (%v)", settles[0].Status, settles[0].Response, err)
	}
	if !sr.Success || sr.Transaction != resp.Transaction {
		t.Errorf("/settle answered %+v; the buyer was told transaction %s", sr, resp.Transaction)
	}

	ctx, cancel := context.WithTimeout(t.Context(), chainTimeout)
	defer cancel()
	hash := common.HexToHash(resp.Transaction)
	receipt, err := c.anvil.Client.TransactionReceipt(ctx, hash)
	if err != nil {
		t.Fatalf("receipt of %s: %v", hash, err)
	}
	if receipt.Status != types.ReceiptStatusSuccessful {
		t.Errorf("settlement %s reverted", hash)
	}
	if from := c.sender(t, hash); from != fac.Address {
		t.Errorf("settlement %s sent by %s, want our facilitator %s", hash, from, fac.Address)
	}
	c.checkBalanceRose(t, testchain.DevAddress(payToIdx), before, amount)
}

// TestOfficialClientSignatureVerifiedByUs signs with the official client
// (x402Client + @x402/evm ExactEvmScheme) and verifies with our exact.Verifier.
// It also compares the official payload's shape with the one our Go client
// builds for the same PaymentRequired.
func TestOfficialClientSignatureVerifiedByUs(t *testing.T) {
	requireTools(t)
	c := newChain(t)
	ctx := t.Context()
	req := c.requirements(amount)
	pr := &x402.PaymentRequired{
		X402Version: 2, Error: "Payment required",
		Resource: &x402.ResourceInfo{URL: "http://127.0.0.1:4021/paid", Description: "interop", MimeType: "application/json"},
		Accepts:  []x402.PaymentRequirements{req},
	}
	prJSON, err := x402.Marshal(pr)
	if err != nil {
		t.Fatal(err)
	}
	out := runNodeScript(t, "sign.mjs", prJSON, "PAYER_KEY="+keyHex(testchain.DevKey(payerIdx)))
	p, err := x402.ParsePaymentPayload(bytes.TrimSpace(out))
	if err != nil {
		t.Fatalf("official payload %s: %v", out, err)
	}

	// The official client echoes accepts[0] and resource verbatim.
	raw, err := pr.RawAccepted(0)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(p.Accepted, raw) {
		t.Errorf("accepted = %s, want the offer verbatim %s", p.Accepted, raw)
	}
	if diff := cmp.Diff(pr.Resource, p.Resource); diff != "" {
		t.Errorf("resource (-offered +echoed):\n%s", diff)
	}
	if _, err := exact.ParsePayload(p.Payload); err != nil {
		t.Errorf("exact.ParsePayload refuses the official payload %s: %v", p.Payload, err)
	}

	// Our client builds the same payload, up to nonce, validBefore and signature.
	ours, err := exact.NewPaymentPayload(ctx, exact.NewKeySigner(testchain.DevKey(payerIdx)), pr, 0, exact.SignOptions{})
	if err != nil {
		t.Fatal(err)
	}
	theirShape := payloadShape(t, "official", p)
	if diff := cmp.Diff(theirShape, payloadShape(t, "ours", ours)); diff != "" {
		t.Errorf("PaymentPayload JSON (-official +ours):\n%s", diff)
	}

	v := c.verifier()
	vd, recovered, err := v.Check(p, req)
	if err != nil {
		t.Fatalf("Check: %v", err)
	}
	if !recovered || vd.Payer() != testchain.DevAddress(payerIdx) {
		t.Errorf("Check: recovered %t, payer %s; want the payer's ECDSA signature", recovered, vd.Payer())
	}
	vd, err = v.Verify(ctx, p, req)
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	if vd.Kind != exact.SignatureEOA {
		t.Errorf("signature kind = %d, want EOA", vd.Kind)
	}
}

// payloadShape returns p as generic JSON with the fields that differ per payment
// (nonce, validBefore, signature) checked for format and replaced by
// placeholders, so two clients' payloads for one offer compare equal.
func payloadShape(t *testing.T, who string, p *x402.PaymentPayload) map[string]any {
	t.Helper()
	b, err := x402.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	pl, _ := m["payload"].(map[string]any)
	auth, _ := pl["authorization"].(map[string]any)
	if auth == nil {
		t.Fatalf("%s payload has no authorization: %s", who, b)
	}
	check := func(obj map[string]any, key string, re *regexp.Regexp) {
		s, _ := obj[key].(string)
		if !re.MatchString(s) {
			t.Errorf("%s payload: %s = %q does not match %s", who, key, s, re)
		}
		obj[key] = "<" + key + ">"
	}
	check(auth, "nonce", txHashRE)
	check(pl, "signature", regexp.MustCompile(`^0x[0-9a-f]{130}$`))
	vb, err := strconv.ParseInt(fmt.Sprint(auth["validBefore"]), 10, 64)
	if want := time.Now().Unix() + maxTimeoutSeconds; err != nil || vb < want-10 || vb > want+1 {
		t.Errorf("%s payload: validBefore = %v, want about now + %d = %d", who, auth["validBefore"], maxTimeoutSeconds, want)
	}
	auth["validBefore"] = "<validBefore>"
	return m
}

// TestVerifiersAgree verifies payloads signed by our Go code with the official
// TypeScript facilitator (x402Facilitator + @x402/evm exact, viem on anvil) and
// with our exact.Verifier. Both must accept the valid one and refuse each
// single-fault one for the same reason.
func TestVerifiersAgree(t *testing.T) {
	requireTools(t)
	c := newChain(t)
	ctx := t.Context()
	payer := testchain.DevKey(payerIdx)
	req := c.requirements(amount)
	now := time.Now().Unix()

	// A payload exactly as our buyer code builds it from a 402.
	pr := &x402.PaymentRequired{X402Version: 2, Resource: &x402.ResourceInfo{URL: "http://127.0.0.1/paid"}, Accepts: []x402.PaymentRequirements{req}}
	goClient, err := exact.NewPaymentPayload(ctx, exact.NewKeySigner(payer), pr, 0, exact.SignOptions{})
	if err != nil {
		t.Fatal(err)
	}

	wrongName, wrongVersion := req, req
	wrongName.Extra = json.RawMessage(`{"name":"USDC","version":"2"}`)
	wrongVersion.Extra = json.RawMessage(`{"name":"USD Coin","version":"1"}`)
	otherNetwork := c.sign(t, payer, payer, req, nil)
	otherNetwork.Accepted = mustMarshal(t, withNetwork(req, "eip155:8453"))
	garbage := c.sign(t, payer, payer, req, nil)
	garbage.Payload = mustMarshal(t, exact.PayloadJSON{
		Authorization: mustAuthorization(t, garbage.Payload),
		Signature:     "0x" + strings.Repeat("11", 64) + "1b",
	})
	used := c.sign(t, payer, payer, req, nil)
	c.submit(t, used)
	// The same signature with v as 0/1 (yParity) instead of 27/28.
	yParity := c.sign(t, payer, payer, req, nil)
	{
		w := exact.PayloadJSON{Authorization: mustAuthorization(t, yParity.Payload)}
		sig := common.FromHex(mustSignature(t, yParity.Payload))
		sig[64] -= 27
		w.Signature = hexutil.Encode(sig)
		yParity.Payload = mustMarshal(t, w)
	}

	cases := []struct {
		name    string
		payload *x402.PaymentPayload
		req     x402.PaymentRequirements
		want    x402.Reason // "" means valid
		// official, when set, is a known, deliberate divergence: the official
		// verdict, which differs from want.
		official *x402.Reason
	}{
		{"go client payload", goClient, req, "", nil},
		{"signed by another key", c.sign(t, testchain.DevKey(strangerIdx), payer, req, nil), req, x402.ReasonEVMSignature, nil},
		{"garbage signature", garbage, req, x402.ReasonEVMSignature, nil},
		{"recipient mismatch", c.sign(t, payer, payer, req, func(a *exact.Authorization) { a.To = testchain.DevAddress(strangerIdx) }), req, x402.ReasonEVMRecipientMismatch, nil},
		{"value mismatch", c.sign(t, payer, payer, req, func(a *exact.Authorization) { a.Value = big.NewInt(10001) }), req, x402.ReasonEVMValueMismatch, nil},
		{"expires within 6s", c.sign(t, payer, payer, req, func(a *exact.Authorization) { a.ValidBefore = big.NewInt(now + 3) }), req, x402.ReasonEVMValidBefore, nil},
		{"not valid yet", c.sign(t, payer, payer, req, func(a *exact.Authorization) { a.ValidAfter = big.NewInt(now + 3600) }), req, x402.ReasonEVMValidAfter, nil},
		{"network mismatch", otherNetwork, req, x402.ReasonEVMNetworkMismatch, nil},
		{"insufficient balance", c.sign(t, testchain.DevKey(unfundedIdx), testchain.DevKey(unfundedIdx), req, nil), req, x402.ReasonEVMInsufficientBalance, nil},
		{"nonce already used", used, req, x402.ReasonEVMNonceAlreadyUsed, nil},
		{"token name mismatch", c.sign(t, payer, payer, wrongName, nil), wrongName, x402.ReasonEVMTokenNameMismatch, nil},
		{"token version mismatch", c.sign(t, payer, payer, wrongVersion, nil), wrongVersion, x402.ReasonEVMTokenVersionMismatch, nil},
		// We normalize v to 27/28 before the (v,r,s) call; the official
		// facilitator passes 0/1 through, the token's ECRecover reverts, and it
		// answers simulation_failed. No official client signs with v 0/1.
		{"v as 0/1", yParity, req, "", new(x402.ReasonEVMSimulationFailed)},
	}

	type facilitatorRequest struct {
		PaymentPayload      *x402.PaymentPayload     `json:"paymentPayload"`
		PaymentRequirements x402.PaymentRequirements `json:"paymentRequirements"`
	}
	batch := make([]facilitatorRequest, len(cases))
	for i, tc := range cases {
		batch[i] = facilitatorRequest{tc.payload, tc.req}
	}
	out := runNodeScript(t, "verify.mjs", mustMarshal(t, batch),
		"RPC_URL="+c.anvil.URL,
		"FACILITATOR_KEY="+keyHex(testchain.DevKey(tsFacilitatorIdx)),
	)
	var official []struct {
		x402.VerifyResponse
		Thrown string `json:"thrown"`
	}
	if err := json.Unmarshal(out, &official); err != nil || len(official) != len(cases) {
		t.Fatalf("verify.mjs output %s: %v", out, err)
	}

	v := c.verifier()
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ts := official[i]
			if ts.Thrown != "" {
				t.Fatalf("official facilitator threw: %s", ts.Thrown)
			}
			wantOfficial := tc.want
			if tc.official != nil {
				wantOfficial = *tc.official
			}
			if ts.IsValid != (wantOfficial == "") || ts.InvalidReason != wantOfficial {
				t.Errorf("official facilitator: isValid %t, reason %q (%s); want %q", ts.IsValid, ts.InvalidReason, ts.InvalidMessage, wantOfficial)
			}
			var ours x402.Reason
			_, err := v.Verify(t.Context(), tc.payload, tc.req)
			var verr *x402.VerifyError
			switch {
			case errors.As(err, &verr):
				ours = verr.Reason
			case err != nil:
				t.Fatalf("our Verify reached no verdict: %v", err)
			}
			if ours != tc.want {
				t.Errorf("our verifier: reason %q (%v); want %q", ours, err, tc.want)
			}
			if tc.official == nil && ours != ts.InvalidReason {
				t.Errorf("verdicts differ: ours %q, official %q", ours, ts.InvalidReason)
			}
		})
	}
}

// TestTSFacilitator starts the official facilitator as an HTTP service (the
// reference for side-by-side benchmarks) and settles through it with our
// facilitator client: one payment, a replay of it, and a few at once.
func TestTSFacilitator(t *testing.T) {
	requireTools(t)
	c := newChain(t)
	ctx := t.Context()
	ts := startTSFacilitator(t, c.anvil, testchain.DevKey(tsFacilitatorIdx))
	client := facilitator.NewClient(ts.URL, nil)
	payTo := testchain.DevAddress(payToIdx)
	req := c.requirements(amount)

	sup, err := client.Supported(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !containsKind(sup.Kinds, x402.SupportedKind{X402Version: 2, Scheme: "exact", Network: network}) {
		t.Errorf("supported kinds %+v lack exact on %s", sup.Kinds, network)
	}

	before := c.balance(t, payTo)
	p := c.sign(t, testchain.DevKey(payerIdx), testchain.DevKey(payerIdx), req, nil)
	v, err := client.Verify(ctx, p, req)
	if err != nil || !v.IsValid {
		t.Fatalf("verify = %+v, %v", v, err)
	}
	s, err := client.Settle(ctx, p, req)
	if err != nil || !s.Success || s.Network != network || !txHashRE.MatchString(s.Transaction) {
		t.Fatalf("settle = %+v, %v", s, err)
	}
	if from := c.sender(t, common.HexToHash(s.Transaction)); from != common.HexToAddress(ts.Ready.Address) {
		t.Errorf("settlement sent by %s, want the TS facilitator %s", from, ts.Ready.Address)
	}
	c.checkBalanceRose(t, payTo, before, amount)

	again, err := client.Settle(ctx, p, req)
	if err != nil || again.Success {
		t.Errorf("settle of a used authorization = %+v, %v; want a refusal", again, err)
	}

	// Concurrent settles from the one facilitator account need distinct nonces.
	const n = 8
	before = c.balance(t, payTo)
	payloads := make([]*x402.PaymentPayload, n)
	for i := range payloads {
		payloads[i] = c.sign(t, testchain.DevKey(payerIdx), testchain.DevKey(payerIdx), req, nil)
	}
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for _, p := range payloads {
		wg.Go(func() {
			s, err := client.Settle(ctx, p, req)
			switch {
			case err != nil:
				errs <- err
			case !s.Success:
				errs <- fmt.Errorf("settle: %+v", s)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	total := new(big.Int).Mul(big.NewInt(n), mustUint(t, amount))
	c.checkBalanceRose(t, payTo, before, total.String())
}

func containsKind(kinds []x402.SupportedKind, want x402.SupportedKind) bool {
	for _, k := range kinds {
		if k.X402Version == want.X402Version && k.Scheme == want.Scheme && k.Network == want.Network {
			return true
		}
	}
	return false
}

// TestFacilitatorsAnswerAlike sends the same requests to our facilitator and to
// the official one over HTTP, on one chain, and compares the JSON answers.
func TestFacilitatorsAnswerAlike(t *testing.T) {
	requireTools(t)
	c := newChain(t)
	ours := startOurFacilitator(t, c)
	ts := startTSFacilitator(t, c.anvil, testchain.DevKey(tsFacilitatorIdx))
	payer := testchain.DevKey(payerIdx)
	req := c.requirements(amount)

	t.Run("supported", func(t *testing.T) {
		mask := func(b []byte, signer string) string {
			return strings.ReplaceAll(string(b), signer, "<signer>")
		}
		got := mask(rawCall(t, ours.URL, "/supported", nil), ours.Address.Hex())
		want := mask(rawCall(t, ts.URL, "/supported", nil), ts.Ready.Address)
		if got != want {
			t.Errorf("GET /supported:\nofficial %s\nours     %s", want, got)
		}
	})

	// Verification is read-only: both judge the very same requests.
	verifyCases := []struct {
		name    string
		payload *x402.PaymentPayload
	}{
		{"verify valid", c.sign(t, payer, payer, req, nil)},
		{"verify bad signature", c.sign(t, testchain.DevKey(strangerIdx), payer, req, nil)},
		{"verify insufficient balance", c.sign(t, testchain.DevKey(unfundedIdx), testchain.DevKey(unfundedIdx), req, nil)},
	}
	for _, tc := range verifyCases {
		t.Run(tc.name, func(t *testing.T) {
			body := facilitatorBody(t, tc.payload, req)
			want := jsonMap(t, rawCall(t, ts.URL, "/verify", body), "invalidMessage")
			got := jsonMap(t, rawCall(t, ours.URL, "/verify", body), "invalidMessage")
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("POST /verify (-official +ours):\n%s", diff)
			}
		})
	}

	// An authorization settles once, so each facilitator gets its own.
	t.Run("settle, then replay", func(t *testing.T) {
		mine, theirs := c.sign(t, payer, payer, req, nil), c.sign(t, payer, payer, req, nil)
		for _, round := range []string{"settle", "replay"} {
			got := jsonMap(t, rawCall(t, ours.URL, "/settle", facilitatorBody(t, mine, req)), "errorMessage")
			want := jsonMap(t, rawCall(t, ts.URL, "/settle", facilitatorBody(t, theirs, req)), "errorMessage")
			for _, m := range []map[string]any{got, want} {
				if tx, _ := m["transaction"].(string); txHashRE.MatchString(tx) {
					m["transaction"] = "<tx>"
				}
			}
			if round == "replay" {
				// Ours names the transaction that used the authorization; the
				// official one sends "". Both are valid answers.
				delete(got, "transaction")
				delete(want, "transaction")
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("POST /settle, %s (-official +ours):\n%s", round, diff)
			}
		}
	})
}

// facilitatorBody is the /verify and /settle body the official resource server
// sends.
func facilitatorBody(t *testing.T, p *x402.PaymentPayload, req x402.PaymentRequirements) []byte {
	t.Helper()
	return mustMarshal(t, x402.FacilitatorRequest{X402Version: 2, PaymentPayload: *p, PaymentRequirements: req})
}

// rawCall GETs base+path, or POSTs body there as JSON when body is not nil,
// and returns the answer, which must be 200.
func rawCall(t *testing.T, base, path string, body []byte) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), scriptTimeout)
	defer cancel()
	method, rd := http.MethodGet, io.Reader(nil)
	if body != nil {
		method, rd = http.MethodPost, bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, base+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, base+path, err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("%s %s: status %d, body %s, %v", method, base+path, resp.StatusCode, b, err)
	}
	return b
}

// jsonMap decodes a JSON object and drops the given keys.
func jsonMap(t *testing.T, b []byte, drop ...string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	for _, k := range drop {
		delete(m, k)
	}
	return m
}

// BenchmarkConcurrentSettle settles settleBatch payments at once, over HTTP,
// through our facilitator and through the official one, side by side on one
// anvil. Each op is one batch; compare settles/s of the two in one run.
func BenchmarkConcurrentSettle(b *testing.B) {
	requireTools(b)
	sides := []struct {
		name  string
		start func(b *testing.B, c *testChain) (url string, signer common.Address)
	}{
		{"ours", func(b *testing.B, c *testChain) (string, common.Address) {
			return startOurFacilitator(b, c).URL, testchain.DevAddress(facilitatorIdx)
		}},
		{"official", func(b *testing.B, c *testChain) (string, common.Address) {
			return startTSFacilitator(b, c.anvil, testchain.DevKey(tsFacilitatorIdx)).URL, testchain.DevAddress(tsFacilitatorIdx)
		}},
	}
	for _, side := range sides {
		b.Run(side.name, func(b *testing.B) {
			// A fresh chain for each side and run: anvil slows down as its chain
			// grows, so one shared chain would favor whichever side runs first.
			c := newChain(b)
			url, signer := side.start(b, c)
			bc := struct {
				url    string
				signer common.Address
			}{url, signer}
			client := facilitator.NewClient(bc.url, nil)
			nonceBefore, err := c.anvil.Client.NonceAt(b.Context(), bc.signer, nil)
			if err != nil {
				b.Fatal(err)
			}
			req := c.requirements("1")
			payer := testchain.DevKey(payerIdx)
			for range b.N {
				b.StopTimer()
				batch := make([]*x402.PaymentPayload, settleBatch)
				for i := range batch {
					batch[i] = c.sign(b, payer, payer, req, nil)
				}
				b.StartTimer()
				errs := make(chan error, settleBatch)
				var wg sync.WaitGroup
				for _, p := range batch {
					wg.Go(func() {
						s, err := client.Settle(b.Context(), p, req)
						switch {
						case err != nil:
							errs <- err
						case !s.Success:
							errs <- fmt.Errorf("settle: %+v", s)
						}
					})
				}
				wg.Wait()
				close(errs)
				for err := range errs {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*settleBatch)/b.Elapsed().Seconds(), "settles/s")
			// Every settle is one transaction: more means a duplicate broadcast or
			// a replacement, fewer a lost one.
			nonceAfter, err := c.anvil.Client.NonceAt(b.Context(), bc.signer, nil)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(int64(nonceAfter-nonceBefore)-int64(b.N*settleBatch)), "extra-txs")
		})
	}
}

// settleBatch is how many settles BenchmarkConcurrentSettle sends at once.
const settleBatch = 32

// --- Chain ---

// testChain is an anvil node with our EIP-3009 token deployed by dev account 0,
// payerFunds minted to the payer, and Multicall3 at its usual address.
type testChain struct {
	anvil         *testchain.Anvil
	token         common.Address
	tokenContract *contracts.EIP3009Token
}

func newChain(tb testing.TB, opts ...testchain.AnvilOption) *testChain {
	tb.Helper()
	a := testchain.StartAnvil(tb, opts...)
	ctx, cancel := context.WithTimeout(tb.Context(), chainTimeout)
	defer cancel()
	auth := transactor(tb, ctx, a, deployerIdx)
	addr, tx, token, err := contracts.DeployEIP3009Token(auth, a.Client, tokenName, tokenVersion, 6)
	if err != nil {
		tb.Fatalf("deploy token: %v", err)
	}
	waitMined(tb, ctx, a, tx)
	tx, err = token.Mint(auth, testchain.DevAddress(payerIdx), big.NewInt(payerFunds))
	if err != nil {
		tb.Fatalf("mint: %v", err)
	}
	waitMined(tb, ctx, a, tx)
	installMulticall3(tb, ctx, a)
	return &testChain{anvil: a, token: addr, tokenContract: token}
}

func transactor(tb testing.TB, ctx context.Context, a *testchain.Anvil, i int) *bind.TransactOpts {
	tb.Helper()
	auth, err := bind.NewKeyedTransactorWithChainID(testchain.DevKey(i), a.ChainID)
	if err != nil {
		tb.Fatal(err)
	}
	auth.Context = ctx
	return auth
}

// waitMined polls for tx's receipt (anvil mines each transaction as it arrives)
// and fails the test unless it succeeded.
func waitMined(tb testing.TB, ctx context.Context, a *testchain.Anvil, tx *types.Transaction) *types.Receipt {
	tb.Helper()
	for {
		r, err := a.Client.TransactionReceipt(ctx, tx.Hash())
		if err == nil {
			if r.Status != types.ReceiptStatusSuccessful {
				tb.Fatalf("transaction %s reverted", tx.Hash())
			}
			return r
		}
		if !errors.Is(err, ethereum.NotFound) {
			tb.Fatalf("receipt of %s: %v", tx.Hash(), err)
		}
		select {
		case <-ctx.Done():
			tb.Fatalf("transaction %s not mined: %v", tx.Hash(), ctx.Err())
		case <-time.After(pollInterval):
		}
	}
}

var multicall3BytecodeRE = regexp.MustCompile(`multicall3Bytecode = '(0x[0-9a-f]+)'`)

// installMulticall3 deploys viem's Multicall3 creation code and copies the
// resulting runtime code to multicall3Address (anvil_setCode).
func installMulticall3(tb testing.TB, ctx context.Context, a *testchain.Anvil) {
	tb.Helper()
	src, err := os.ReadFile(filepath.Join("node_modules", "viem", "_esm", "constants", "contracts.js"))
	if err != nil {
		tb.Fatalf("Multicall3 bytecode: %v", err)
	}
	m := multicall3BytecodeRE.FindSubmatch(src)
	if m == nil {
		tb.Fatal("Multicall3 bytecode: not found in viem's constants/contracts.js")
	}
	addr, tx, _, err := bind.DeployContract(transactor(tb, ctx, a, deployerIdx), abi.ABI{}, common.FromHex(string(m[1])), a.Client)
	if err != nil {
		tb.Fatalf("deploy Multicall3: %v", err)
	}
	waitMined(tb, ctx, a, tx)
	code, err := a.Client.CodeAt(ctx, addr, nil)
	if err != nil || len(code) == 0 {
		tb.Fatalf("Multicall3 runtime code: %d bytes, %v", len(code), err)
	}
	if err := a.RPC.CallContext(ctx, nil, "anvil_setCode", multicall3Address, hexutil.Bytes(code)); err != nil {
		tb.Fatalf("install Multicall3: %v", err)
	}
}

// requirements is what the express server offers for a price of amt.
func (c *testChain) requirements(amt string) x402.PaymentRequirements {
	return x402.PaymentRequirements{
		Scheme: "exact", Network: network, Amount: amt, Asset: c.token.Hex(),
		PayTo: testchain.DevAddress(payToIdx).Hex(), MaxTimeoutSeconds: maxTimeoutSeconds,
		Extra: json.RawMessage(`{"name":"` + tokenName + `","version":"` + tokenVersion + `"}`),
	}
}

func (c *testChain) verifier() *exact.Verifier {
	return &exact.Verifier{Chain: c.anvil.Client, ChainID: c.anvil.ChainID, Caller: testchain.DevAddress(facilitatorIdx)}
}

func (c *testChain) balance(tb testing.TB, addr common.Address) *big.Int {
	tb.Helper()
	ctx, cancel := context.WithTimeout(tb.Context(), chainTimeout)
	defer cancel()
	b, err := c.tokenContract.BalanceOf(&bind.CallOpts{Context: ctx}, addr)
	if err != nil {
		tb.Fatalf("balanceOf %s: %v", addr, err)
	}
	return b
}

func (c *testChain) checkBalanceRose(tb testing.TB, addr common.Address, before *big.Int, by string) {
	tb.Helper()
	got := new(big.Int).Sub(c.balance(tb, addr), before)
	if got.String() != by {
		tb.Errorf("balance of %s rose by %s, want exactly %s", addr, got, by)
	}
}

// sender returns the account that sent transaction hash.
func (c *testChain) sender(tb testing.TB, hash common.Hash) common.Address {
	tb.Helper()
	ctx, cancel := context.WithTimeout(tb.Context(), chainTimeout)
	defer cancel()
	tx, _, err := c.anvil.Client.TransactionByHash(ctx, hash)
	if err != nil {
		tb.Fatalf("transaction %s: %v", hash, err)
	}
	from, err := types.Sender(types.LatestSignerForChainID(c.anvil.ChainID), tx)
	if err != nil {
		tb.Fatalf("sender of %s: %v", hash, err)
	}
	return from
}

// sign builds an authorization from payer to req's payTo for req's amount,
// valid from 0 until now + maxTimeoutSeconds with a random nonce, lets mutate
// change it, and signs it with signer over req's domain. The payload echoes req
// as accepted.
func (c *testChain) sign(tb testing.TB, signer, payer *ecdsa.PrivateKey, req x402.PaymentRequirements, mutate func(*exact.Authorization)) *x402.PaymentPayload {
	tb.Helper()
	extra, err := exact.ParseExtra(req.Extra)
	if err != nil {
		tb.Fatal(err)
	}
	a := exact.Authorization{
		From:        crypto.PubkeyToAddress(payer.PublicKey),
		To:          common.HexToAddress(req.PayTo),
		Value:       mustUint(tb, req.Amount),
		ValidAfter:  new(big.Int),
		ValidBefore: big.NewInt(time.Now().Unix() + req.MaxTimeoutSeconds),
	}
	if _, err := rand.Read(a.Nonce[:]); err != nil {
		tb.Fatal(err)
	}
	if mutate != nil {
		mutate(&a)
	}
	d := exact.Domain{Name: extra.Name, Version: extra.Version, ChainID: c.anvil.ChainID, VerifyingContract: common.HexToAddress(req.Asset)}
	sig, err := exact.NewKeySigner(signer).SignDigest(tb.Context(), exact.Digest(d, &a))
	if err != nil {
		tb.Fatal(err)
	}
	pl := exact.Payload{Authorization: a, Signature: sig}
	return &x402.PaymentPayload{
		X402Version: 2,
		Resource:    &x402.ResourceInfo{URL: "http://127.0.0.1/paid"},
		Accepted:    mustMarshal(tb, req),
		Payload:     mustMarshal(tb, pl.JSON()),
	}
}

// submit uses p's authorization on chain directly, as a third party could.
func (c *testChain) submit(tb testing.TB, p *x402.PaymentPayload) {
	tb.Helper()
	if _, err := c.frontRun(tb.Context(), p.Payload); err != nil {
		tb.Fatal(err)
	}
}

// frontRun sends the authorization of an exact payload on chain from the
// deployer's account and waits until it is mined. It may run outside the test
// goroutine.
func (c *testChain) frontRun(ctx context.Context, payload json.RawMessage) (common.Hash, error) {
	pl, err := exact.ParsePayload(payload)
	if err != nil {
		return common.Hash{}, err
	}
	if len(pl.Signature) != 65 {
		return common.Hash{}, fmt.Errorf("signature is %d bytes, want 65", len(pl.Signature))
	}
	ctx, cancel := context.WithTimeout(ctx, chainTimeout)
	defer cancel()
	auth, err := bind.NewKeyedTransactorWithChainID(testchain.DevKey(deployerIdx), c.anvil.ChainID)
	if err != nil {
		return common.Hash{}, err
	}
	auth.Context = ctx
	a := pl.Authorization
	var r, s [32]byte
	copy(r[:], pl.Signature[:32])
	copy(s[:], pl.Signature[32:64])
	tx, err := c.tokenContract.TransferWithAuthorization(auth, a.From, a.To, a.Value, a.ValidAfter, a.ValidBefore, a.Nonce, pl.Signature[64], r, s)
	if err != nil {
		return common.Hash{}, fmt.Errorf("transferWithAuthorization: %w", err)
	}
	receipt, err := bind.WaitMined(ctx, c.anvil.Client, tx)
	if err != nil {
		return common.Hash{}, fmt.Errorf("wait for %s: %w", tx.Hash(), err)
	}
	if receipt.Status != types.ReceiptStatusSuccessful {
		return common.Hash{}, fmt.Errorf("transferWithAuthorization %s reverted", tx.Hash())
	}
	return tx.Hash(), nil
}

// --- Facilitators ---

// ourFacilitator is our facilitator (internal/facilitator on a temporary SQLite
// store) served over HTTP on 127.0.0.1, with every call recorded.
type ourFacilitator struct {
	URL     string
	Address common.Address // the account that settles
	rec     *recorder
}

func startOurFacilitator(tb testing.TB, c *testChain, opts ...func(*facilitator.Config)) *ourFacilitator {
	tb.Helper()
	ctx, cancel := context.WithTimeout(tb.Context(), chainTimeout)
	defer cancel()
	log := slog.New(slog.NewTextHandler(newLogBuffer(tb, "our facilitator"), &slog.HandlerOptions{Level: slog.LevelDebug}))
	db, err := sqlite.Open(ctx, filepath.Join(tb.TempDir(), "facilitator.db"), log)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := db.Close(); err != nil {
			tb.Errorf("close store: %v", err)
		}
	})
	key := testchain.DevKey(facilitatorIdx)
	sender, err := chain.NewSender(c.anvil.Client, key, c.anvil.ChainID,
		chain.SenderConfig{MaxFeePerGas: big.NewInt(1e12), PollInterval: pollInterval}, log)
	if err != nil {
		tb.Fatal(err)
	}
	cfg := facilitator.Config{
		Network: network,
		Assets:  []facilitator.Asset{{Address: c.token, Name: tokenName, Version: tokenVersion}},
	}
	for _, opt := range opts {
		opt(&cfg)
	}
	fac, err := facilitator.New(cfg, c.anvil.Client, sender, db, log)
	if err != nil {
		tb.Fatal(err)
	}
	rec := &recorder{next: facilitator.NewHandler(fac, log)}
	srv := httptest.NewServer(rec)
	tb.Cleanup(srv.Close)
	return &ourFacilitator{URL: srv.URL, Address: sender.Address(), rec: rec}
}

// startTSFacilitator starts the official TypeScript facilitator
// (ts-facilitator.mjs) on a free loopback port, settling from key's account on
// a. Benchmarks use it as the reference. env adds to its environment or
// overrides it (SCHEMES=exact,upto).
func startTSFacilitator(tb testing.TB, a *testchain.Anvil, key *ecdsa.PrivateKey, env ...string) *nodeService {
	tb.Helper()
	return startNodeService(tb, "ts-facilitator.mjs", append([]string{
		"PORT=0",
		"RPC_URL=" + a.URL,
		"FACILITATOR_KEY=" + keyHex(key),
		"NETWORK=" + network,
		// Poll receipts as often as our Sender does, for a fair comparison.
		"POLLING_INTERVAL_MS=" + strconv.FormatInt(pollInterval.Milliseconds(), 10),
	}, env...)...)
}

// exchange is one request to our facilitator and its answer.
type exchange struct {
	Path     string
	Status   int
	Request  []byte
	Response []byte
}

// recorder is an http.Handler that records every exchange with next.
type recorder struct {
	next   http.Handler
	mu     sync.Mutex
	log    []exchange
	before func(path string, body []byte) // runs before next sees a request
}

// setBefore installs f to run before next sees each request, or removes the
// hook when f is nil.
func (r *recorder) setBefore(f func(path string, body []byte)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.before = f
}

func (r *recorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	req.Body = io.NopCloser(bytes.NewReader(body))
	r.mu.Lock()
	before := r.before
	r.mu.Unlock()
	if before != nil {
		before(req.URL.Path, body)
	}
	cw := &captureWriter{ResponseWriter: w, status: http.StatusOK}
	r.next.ServeHTTP(cw, req)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.log = append(r.log, exchange{Path: req.URL.Path, Status: cw.status, Request: body, Response: cw.body.Bytes()})
}

// count returns how many exchanges were recorded so far.
func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.log)
}

// since returns the exchanges on path after the first n.
func (r *recorder) since(n int, path string) []exchange {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []exchange
	for _, e := range r.log[n:] {
		if e.Path == path {
			out = append(out, e)
		}
	}
	return out
}

type captureWriter struct {
	http.ResponseWriter
	status int
	body   bytes.Buffer
}

func (w *captureWriter) WriteHeader(status int) {
	w.status = status
	w.ResponseWriter.WriteHeader(status)
}

func (w *captureWriter) Write(b []byte) (int, error) {
	w.body.Write(b)
	return w.ResponseWriter.Write(b)
}

func (w *captureWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// --- Node processes ---

// requireTools returns the node binary, or skips the test when node or the
// pinned npm packages are missing (fails with LLM4AGENTS_TEST_REQUIRE_TOOLS=1).
func requireTools(tb testing.TB) string {
	tb.Helper()
	node, err := exec.LookPath("node")
	for _, pkg := range npmPeers {
		if err != nil {
			break
		}
		_, err = os.Stat(filepath.Join("node_modules", pkg, "package.json"))
	}
	if err != nil {
		if os.Getenv(requireToolsEnv) == "1" {
			tb.Fatalf("interop tools: %v", err)
		}
		tb.Skipf("interop tools: %v (run npm ci in interop/; set %s=1 to fail instead)", err, requireToolsEnv)
	}
	return node
}

// nodeService is a long-running node script that printed its ready line.
type nodeService struct {
	URL   string // http://127.0.0.1:<port>
	Ready readyLine
}

// readyLine is the JSON line a service script prints once it listens.
type readyLine struct {
	Ready   bool   `json:"ready"`
	Port    int    `json:"port"`
	Address string `json:"address"` // ts-facilitator.mjs: its settling account
}

// startNodeService runs script with env added to ours and waits for its ready
// line. The process is killed when the test ends; its output is shown if the
// test fails.
func startNodeService(tb testing.TB, script string, env ...string) *nodeService {
	tb.Helper()
	node := requireTools(tb)
	logs := newLogBuffer(tb, script)
	cmd := exec.Command(node, script) // stopped by the cleanup, not by a context
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = logs
	cmd.SysProcAttr = killWithParent()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatalf("start %s: %v", script, err)
	}
	ready := make(chan readyLine, 1)
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		sc := bufio.NewScanner(stdout)
		announced := false
		for sc.Scan() {
			_, _ = fmt.Fprintf(logs, "%s\n", sc.Bytes())
			var r readyLine
			if !announced && json.Unmarshal(sc.Bytes(), &r) == nil && r.Ready {
				announced = true
				ready <- r
			}
		}
		_, _ = io.Copy(logs, stdout) // after an overlong line: keep the pipe drained
		_ = cmd.Wait()
	}()
	tb.Cleanup(func() {
		if err := cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
			tb.Errorf("kill %s: %v", script, err)
		}
		select {
		case <-exited:
		case <-time.After(stopTimeout):
			tb.Errorf("%s (pid %d) still running %s after kill", script, cmd.Process.Pid, stopTimeout)
		}
	})
	select {
	case r := <-ready:
		return &nodeService{URL: "http://127.0.0.1:" + strconv.Itoa(r.Port), Ready: r}
	case <-exited:
		tb.Fatalf("%s exited before it was ready: %s", script, cmd.ProcessState)
	case <-time.After(startTimeout):
		tb.Fatalf("%s not ready after %s", script, startTimeout)
	}
	return nil
}

// runNodeScript runs a one-shot script with stdin and env added to ours, and
// returns its stdout.
func runNodeScript(tb testing.TB, script string, stdin []byte, env ...string) []byte {
	tb.Helper()
	node := requireTools(tb)
	ctx, cancel := context.WithTimeout(tb.Context(), scriptTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, script)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdin = bytes.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.SysProcAttr = killWithParent()
	cmd.WaitDelay = stopTimeout
	if err := cmd.Run(); err != nil {
		tb.Fatalf("node %s: %v\nstderr:\n%s\nstdout:\n%s", script, err, stderr.Bytes(), stdout.Bytes())
	}
	return stdout.Bytes()
}

// killWithParent asks Linux to SIGKILL the child when the test binary dies
// without running its cleanups (a go test -timeout panic skips them).
// SysProcAttr.Pdeathsig exists only on Linux, hence the reflection.
func killWithParent() *syscall.SysProcAttr {
	attr := new(syscall.SysProcAttr)
	if f := reflect.ValueOf(attr).Elem().FieldByName("Pdeathsig"); f.IsValid() && f.CanSet() {
		f.Set(reflect.ValueOf(syscall.SIGKILL))
	}
	return attr
}

// logBuffer collects a component's output and logs it if the test fails.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func newLogBuffer(tb testing.TB, name string) *logBuffer {
	b := new(logBuffer)
	tb.Cleanup(func() {
		if tb.Failed() {
			tb.Logf("%s output:\n%s", name, b.String())
		}
	})
	return b
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// --- Small helpers ---

var txHashRE = regexp.MustCompile(`^0x[0-9a-f]{64}$`)

// gotResponse is the status and header of a response whose body httpGet
// has read and closed.
type gotResponse struct {
	StatusCode int
	Header     http.Header
}

func httpGet(tb testing.TB, url string, h http.Header) (gotResponse, []byte) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(tb.Context(), scriptTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		tb.Fatal(err)
	}
	maps.Copy(req.Header, h)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatalf("GET %s: %v", url, err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		tb.Fatalf("GET %s: %v", url, err)
	}
	return gotResponse{StatusCode: resp.StatusCode, Header: resp.Header}, body
}

func keyHex(key *ecdsa.PrivateKey) string { return hexutil.Encode(crypto.FromECDSA(key)) }

func mustMarshal(tb testing.TB, v any) []byte {
	tb.Helper()
	b, err := x402.Marshal(v)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

func mustUint(tb testing.TB, s string) *big.Int {
	tb.Helper()
	n, err := exact.ParseUint256(s)
	if err != nil {
		tb.Fatalf("%q: %v", s, err)
	}
	return n
}

func mustAuthorization(tb testing.TB, payload json.RawMessage) exact.AuthorizationJSON {
	tb.Helper()
	var w exact.PayloadJSON
	if err := json.Unmarshal(payload, &w); err != nil {
		tb.Fatal(err)
	}
	return w.Authorization
}

func mustSignature(tb testing.TB, payload json.RawMessage) string {
	tb.Helper()
	var w exact.PayloadJSON
	if err := json.Unmarshal(payload, &w); err != nil {
		tb.Fatal(err)
	}
	return w.Signature
}

func withNetwork(req x402.PaymentRequirements, n string) x402.PaymentRequirements {
	req.Network = n
	return req
}
