package interop_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/accounts/abi/bind"
	"github.com/ethereum/go-ethereum/common"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/llm4agents/llm4agents/internal/facilitator"
	"github.com/llm4agents/llm4agents/internal/proctest"
	"github.com/llm4agents/llm4agents/internal/testchain"
	"github.com/llm4agents/llm4agents/internal/upstream/upstreamtest"
	"github.com/llm4agents/llm4agents/x402"
	"github.com/llm4agents/llm4agents/x402/evm/exact"
)

// TestMain removes the llm4agents builds of proctest.BuildBinary after the run.
func TestMain(m *testing.M) { proctest.Main(m) }

const (
	// remoteSettleTimeout is the gateway's settle_timeout in TestRemote*: far
	// shorter than the remote facilitator's own wait for a receipt
	// (remoteFacilitatorWait, viem's 180 s for the official one).
	remoteSettleTimeout   = 2 * time.Second
	remoteFacilitatorWait = 30 * time.Second
	// remoteChatBody is the paid request; quoted at one cent.
	remoteChatBody = `{"model":"demo","messages":[{"role":"user","content":"Say hello"}],"max_tokens":16}`
	// remoteCallTimeout bounds one request to the gateway.
	remoteCallTimeout = 30 * time.Second
)

// TestRemoteFacilitatorLostSettle checks that a payment is never offered twice
// (D29) when the settle answer is lost: `llm4agents serve` behind a remote
// facilitator, on anvil with automine off. The buyer's paid request reaches the
// upstream, the facilitator broadcasts the transfer, and the gateway's
// settle_timeout runs out while the transaction waits in the pool: no verdict,
// so the buyer gets a 409 (never a 402 offer, never the answer). Then a block
// is mined, and the remote facilitator's first /settle ends. The buyer's retry
// with the same PAYMENT-SIGNATURE gets the answer the upstream gave once, from
// the staged claim, with the one transfer as its PAYMENT-RESPONSE; a further
// retry replays that answer: no second upstream call, no second charge.
//
// Asked again, ours answers success: its one success:true (D5) is
// given only to a caller still waiting, so the first /settle, whose caller
// had left, did not take it. The official one verifies again and answers
// nonce_already_used without a transaction: with network.rpc_url the gateway
// confirms the payment from the chain (facilitator.ChainConfirmer) and
// serves the retry; without a node it cannot tell that answer from "not
// paid", and the buyer, who paid once, never gets the answer, though the
// payment is never served twice nor offered again (docs/CONFIG.md, "A remote
// facilitator and lost answers").
func TestRemoteFacilitatorLostSettle(t *testing.T) {
	requireTools(t)
	bin := proctest.BuildBinary(t)
	type refusal struct {
		status int
		code   string
	}
	cases := []struct {
		name     string
		official bool // the remote is ts-facilitator.mjs, else ours
		node     bool // the gateway has network.rpc_url
		// refused, when set, is the gateway's answer to every retry after the
		// block; otherwise the first retry is served.
		refused *refusal
	}{
		{name: "ours", node: true},
		{name: "ours without a node"},
		{name: "official", official: true, node: true},
		{name: "official without a node", official: true, refused: &refusal{http.StatusConflict, "settlement_pending"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := newChain(t)
			up := upstreamtest.NewServer(t, upstreamtest.Config{})
			// Every call to the remote facilitator is recorded.
			var fac *ourFacilitator
			if tc.official {
				ts := startTSFacilitator(t, c.anvil, testchain.DevKey(tsFacilitatorIdx))
				fac = recordedProxy(t, ts.URL)
				fac.Address = common.HexToAddress(ts.Ready.Address)
			} else {
				fac = startOurFacilitator(t, c, func(cfg *facilitator.Config) { cfg.SettleTimeout = remoteFacilitatorWait })
			}
			gw := proctest.Start(t, bin, proctest.Options{
				Name:       "gateway",
				ConfigYAML: remoteGatewayConfig(t, c, fac.URL, up.URL(), tc.node),
			})
			ctx, cancel := context.WithTimeout(t.Context(), chainTimeout)
			defer cancel()

			// The offer, and one payment for it.
			offer := postChat(t, gw.URL, "")
			if offer.status != http.StatusPaymentRequired || offer.required == nil {
				t.Fatalf("unpaid request: %s; want a 402 with PAYMENT-REQUIRED", offer)
			}
			p, err := exact.NewPaymentPayload(ctx, exact.NewKeySigner(testchain.DevKey(payerIdx)), offer.required, 0, exact.SignOptions{})
			if err != nil {
				t.Fatal(err)
			}
			sigHeader := encodeHeader(t, p)
			nonce := common.HexToHash(mustAuthorization(t, p.Payload).Nonce)
			payer := testchain.DevAddress(payerIdx)

			if err := c.anvil.SetAutomine(ctx, false); err != nil {
				t.Fatal(err)
			}
			mark := c.mark(t, fac.Address)

			// The settle answer is lost to the gateway's timeout.
			start := time.Now()
			first := postChat(t, gw.URL, sigHeader)
			if took := time.Since(start); took < remoteSettleTimeout {
				t.Errorf("paid request answered in %s, before the settle timeout %s", took, remoteSettleTimeout)
			}
			checkRefused(t, "paid request", first, http.StatusConflict, "settlement_pending")
			if n := up.Calls(); n != 1 {
				t.Fatalf("upstream called %d times by the paid request, want 1", n)
			}
			waitUntil(t, ctx, "the settlement in the pool", func() bool {
				pending, err := c.anvil.Client.PendingNonceAt(ctx, fac.Address)
				if err != nil {
					t.Fatal(err)
				}
				return pending > mark.facNonce
			})
			if uses := c.authorizationUses(t, payer, nonce); len(uses) != 0 {
				t.Fatalf("authorization used in %v before any block was mined", uses)
			}

			if err := c.anvil.Mine(ctx, 1); err != nil {
				t.Fatal(err)
			}
			uses := c.authorizationUses(t, payer, nonce)
			if len(uses) != 1 {
				t.Fatalf("authorization used %d times after the block, want 1", len(uses))
			}
			tx := uses[0].Hex()
			// The buyer retries after Retry-After seconds; by then the first
			// /settle has ended (ours: its answer went to a closed connection).
			waitUntil(t, ctx, "the first /settle to end", func() bool { return len(fac.rec.since(0, "/settle")) > 0 })

			second := postChat(t, gw.URL, sigHeader)
			third := postChat(t, gw.URL, sigHeader)
			if tc.refused == nil {
				if second.status != http.StatusOK || second.replay != "staged" || !hasChatCompletion(second.body) {
					t.Fatalf("retry after the block: %s; want 200 with the staged completion", second)
				}
				want := x402.SettleResponse{Success: true, Transaction: tx, Network: network, Payer: payer.Hex()}
				if second.settled == nil {
					t.Errorf("retry's answer has no PAYMENT-RESPONSE")
				} else if diff := cmp.Diff(want, *second.settled, cmpopts.IgnoreUnexported(x402.SettleResponse{})); diff != "" {
					t.Errorf("retry's PAYMENT-RESPONSE (-want +got):\n%s", diff)
				}
				// Once more: the recorded answer again (recovery_replays), from
				// the store alone.
				if third.status != http.StatusOK || third.replay != "promoted" || string(third.body) != string(second.body) {
					t.Errorf("retry after the answer: %s; want 200, the same answer replayed (promoted)", third)
				}
				if third.settled == nil || third.settled.Transaction != tx {
					t.Errorf("replay's PAYMENT-RESPONSE = %+v, want transaction %s", third.settled, tx)
				}
			} else {
				checkRefused(t, "retry after the block", second, tc.refused.status, tc.refused.code)
				checkRefused(t, "second retry", third, tc.refused.status, tc.refused.code)
			}

			// The first /settle, then one per retry that reached the
			// facilitator: ours gives the retry its success; the official one
			// refuses each, not a verdict the gateway could use without the
			// chain.
			settles := fac.rec.since(0, "/settle")
			wantSettles := 2
			if tc.refused != nil {
				wantSettles = 3
			}
			if len(settles) != wantSettles {
				t.Errorf("%d /settle calls, want %d", len(settles), wantSettles)
			}
			for i, e := range settles[1:] {
				var sr x402.SettleResponse
				if err := json.Unmarshal(e.Response, &sr); err != nil || e.Status != http.StatusOK {
					t.Errorf("/settle %d answered %d %s (%v)", i+2, e.Status, e.Response, err)
					continue
				}
				switch {
				case !tc.official && (!sr.Success || sr.Transaction != tx):
					t.Errorf("/settle %d answered %s; want success with transaction %s", i+2, e.Response, tx)
				case tc.official && (sr.Success || sr.ErrorReason != x402.ReasonEVMNonceAlreadyUsed || sr.Transaction != ""):
					// The official facilitator names no transaction.
					t.Errorf("/settle %d answered %s; want %s without a transaction", i+2, e.Response, x402.ReasonEVMNonceAlreadyUsed)
				}
			}

			if n := up.Calls(); n != 1 {
				t.Errorf("upstream called %d times, want 1", n)
			}
			if uses := c.authorizationUses(t, payer, nonce); len(uses) != 1 {
				t.Errorf("authorization used %d times, want 1", len(uses))
			}
			// One transfer to payTo, of the quote, in that transaction, sent by
			// the remote facilitator; payTo's balance rose by the quote.
			c.checkPaidOnChain(t, mark, fac.Address, []paidCall{{quote: offer.required.Accepts[0].Amount, settle: &x402.SettleResponse{Transaction: tx}}})

			logs := strings.ToLower(gw.Logs())
			sig := strings.TrimPrefix(strings.ToLower(mustSignature(t, p.Payload)), "0x")
			if strings.Contains(logs, strings.ToLower(sigHeader)) || strings.Contains(logs, sig) {
				t.Error("the gateway's output holds the PAYMENT-SIGNATURE or its signature")
			}
		})
	}
}

// recordedProxy serves a reverse proxy to target on 127.0.0.1 that records
// every exchange, until the test ends: a remote facilitator recorded as
// startOurFacilitator's is. The caller sets Address.
func recordedProxy(t *testing.T, target string) *ourFacilitator {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{next: &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) { r.SetURL(u) },
		// A caller that gives up (the gateway's settle timeout) is recorded
		// as a 502, not logged.
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, _ error) { w.WriteHeader(http.StatusBadGateway) },
	}}
	srv := httptest.NewServer(rec)
	t.Cleanup(srv.Close)
	return &ourFacilitator{URL: srv.URL, rec: rec}
}

// checkRefused asserts that a is a refusal with status and code, which
// neither answers nor offers: no completion, no PAYMENT-REQUIRED. A 409 says
// when to retry; a 402 carries the failed PAYMENT-RESPONSE.
func checkRefused(t *testing.T, what string, a chatAnswer, status int, code string) {
	t.Helper()
	ok := a.status == status && a.code == code && a.required == nil && !hasChatCompletion(a.body)
	switch status {
	case http.StatusConflict:
		ok = ok && a.retryAfter != ""
	case http.StatusPaymentRequired:
		ok = ok && a.settled != nil && !a.settled.Success && string(a.settled.ErrorReason) == code
	}
	if !ok {
		t.Fatalf("%s: %s; want %d %s, without PAYMENT-REQUIRED or a completion", what, a, status, code)
	}
}

// waitUntil polls cond every pollInterval until it holds, and fails the
// test, saying what it waited for, if ctx ends first.
func waitUntil(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", what, ctx.Err())
		case <-time.After(pollInterval):
		}
	}
}

// remoteGatewayConfig is `serve`'s config with facilitator.mode remote at
// facURL, the upstream at upstreamURL, a SQLite store, and network.rpc_url
// only when node is set.
func remoteGatewayConfig(t *testing.T, c *testChain, facURL, upstreamURL string, node bool) string {
	t.Helper()
	rpc := ""
	if node {
		rpc = "\n  rpc_url: " + c.anvil.URL
	}
	return fmt.Sprintf(`listen: 127.0.0.1:0
network:
  id: %s%s
  asset: %s
  asset_name: %s
  asset_version: "%s"
  decimals: 6
  pay_to: %s
facilitator:
  mode: remote
  url: %s
  settle_timeout: %s
store:
  dsn: sqlite://%s
upstreams:
  - name: fake
    base_url: %s
models:
  - id: demo
    upstream: fake
    price: { input: "1000000", output: "2000000" }
    max_output_tokens: 64
`, network, rpc, c.token.Hex(), tokenName, tokenVersion, testchain.DevAddress(payToIdx).Hex(),
		facURL, remoteSettleTimeout, filepath.Join(t.TempDir(), "gateway.db"), upstreamURL)
}

// authorizationUses returns the transactions whose AuthorizationUsed event
// names (from, nonce).
func (c *testChain) authorizationUses(t *testing.T, from common.Address, nonce common.Hash) []common.Hash {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), chainTimeout)
	defer cancel()
	it, err := c.tokenContract.FilterAuthorizationUsed(&bind.FilterOpts{Context: ctx}, []common.Address{from}, [][32]byte{nonce})
	if err != nil {
		t.Fatalf("filter AuthorizationUsed: %v", err)
	}
	defer func() { _ = it.Close() }()
	var out []common.Hash
	for it.Next() {
		out = append(out, it.Event.Raw.TxHash)
	}
	if err := it.Error(); err != nil {
		t.Fatalf("filter AuthorizationUsed: %v", err)
	}
	return out
}

// chatAnswer is the gateway's answer to one chat completion.
type chatAnswer struct {
	status     int
	code       string // the error JSON's code
	replay     string // X-Llm4agents-Replay
	retryAfter string
	body       []byte
	required   *x402.PaymentRequired // PAYMENT-REQUIRED, if any
	settled    *x402.SettleResponse  // PAYMENT-RESPONSE, if any
}

func (a chatAnswer) String() string {
	return fmt.Sprintf("status %d, code %q, replay %q, Retry-After %q, PAYMENT-REQUIRED %t, PAYMENT-RESPONSE %+v, body %.300s",
		a.status, a.code, a.replay, a.retryAfter, a.required != nil, a.settled, a.body)
}

// postChat POSTs remoteChatBody to the gateway's chat completions with
// payment as PAYMENT-SIGNATURE (none when empty) and reads the answer.
func postChat(t *testing.T, gatewayURL, payment string) chatAnswer {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), remoteCallTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, gatewayURL+"/v1/chat/completions", strings.NewReader(remoteChatBody))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if payment != "" {
		req.Header.Set(x402.HeaderPaymentSignature, payment)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", req.URL, err)
	}
	defer func() { _ = resp.Body.Close() }()
	a := chatAnswer{status: resp.StatusCode, replay: resp.Header.Get(replayHeader), retryAfter: resp.Header.Get("Retry-After")}
	if a.body, err = io.ReadAll(resp.Body); err != nil {
		t.Fatalf("read the %d answer: %v", resp.StatusCode, err)
	}
	if h := resp.Header.Get(x402.HeaderPaymentRequired); h != "" {
		if a.required, err = x402.DecodePaymentRequired(h); err != nil {
			t.Fatalf("decode PAYMENT-REQUIRED: %v", err)
		}
	}
	if h := resp.Header.Get(x402.HeaderPaymentResponse); h != "" {
		if a.settled, err = x402.DecodeSettleResponse(h); err != nil {
			t.Fatalf("decode PAYMENT-RESPONSE: %v", err)
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
	if a.retryAfter != "" {
		if _, err := strconv.Atoi(a.retryAfter); err != nil {
			t.Errorf("Retry-After %q is not a number of seconds", a.retryAfter)
		}
	}
	return a
}

// replayHeader marks an answer the gateway served from a staged or recorded
// one.
const replayHeader = "X-Llm4agents-Replay"

// hasChatCompletion reports whether body is a chat completion with content.
func hasChatCompletion(body []byte) bool {
	var c struct {
		Object  string `json:"object"`
		Choices []struct {
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
		} `json:"choices"`
	}
	return json.Unmarshal(body, &c) == nil && c.Object == "chat.completion" && len(c.Choices) == 1 && c.Choices[0].Message.Content != ""
}
