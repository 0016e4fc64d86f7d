package gateway_test

import (
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/crypto"

	"github.com/llm4agents/llm4agents/internal/chat"
	"github.com/llm4agents/llm4agents/internal/credits"
	"github.com/llm4agents/llm4agents/internal/gateway"
	"github.com/llm4agents/llm4agents/internal/ledger"
	"github.com/llm4agents/llm4agents/internal/pricing"
	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/internal/upstream"
	"github.com/llm4agents/llm4agents/internal/upstream/upstreamtest"
	"github.com/llm4agents/llm4agents/x402/receipt"
)

// newEmbedCreditEnv is a credit gateway on backend b, as newCreditEnv makes
// one, that also sells embedModel; the fake upstream counts input tokens
// with tok (nil: as the gateway does, cl100k_base).
func newEmbedCreditEnv(t *testing.T, b creditBackend, tok upstream.Tokenizer) *creditEnv {
	t.Helper()
	log := discard()
	if tok == nil {
		c := pricing.NewCounter()
		tok = upstream.TokenizerFunc(func(s string) int { n, _ := c.Tokens(pricing.Cl100kBase, s); return int(n) })
	}
	db := b.open(t, log)
	up := upstreamtest.NewServer(t, upstreamtest.Config{APIKey: "sk-upstream-secret", Demo: upstream.DemoConfig{Tokenizer: tok}})
	prov, err := upstream.NewOpenAI(upstream.OpenAIConfig{BaseURL: up.URL(), APIKey: "sk-upstream-secret", Timeout: 5 * time.Second}, log)
	if err != nil {
		t.Fatal(err)
	}
	led, err := ledger.New(db, ledger.Config{Asset: ledger.AssetID(network, creditToken)}, log)
	if err != nil {
		t.Fatal(err)
	}
	var leases *ledger.Leases
	if b.leased {
		leases = startTestLeases(t, led, leaseStore{Ledger: db, Leases: db})
	}
	key, err := crypto.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	signer, err := credits.NewSigner(key, big.NewInt(1337))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(nil)
	gw, err := gateway.New(gateway.Config{
		PublicURL: "http://" + srv.Listener.Addr().String(), Network: network, Asset: creditToken.Hex(), AssetName: "USD Coin", AssetVersion: "2",
		Decimals: 6, PayTo: bob.Hex(), UpstreamTimeout: 5 * time.Second, SettleTimeout: 10 * time.Second,
		Models: []gateway.Model{
			{ID: "demo", UpstreamModel: "demo-upstream", Provider: prov, Price: price, MaxOutputTokens: 256},
			embedModel(prov),
		},
		Credits: &gateway.Credits{Ledger: led, Keys: credits.NewKeys(db, log), Signer: signer, Receipts: db, Leases: leases},
	}, nil, db, log)
	if err != nil {
		t.Fatal(err)
	}
	srv.Config.Handler = gw
	srv.Start()
	t.Cleanup(srv.Close)
	return &creditEnv{db: db, leases: leases, up: up, srv: srv, led: led, signer: signer}
}

func (e *creditEnv) embed(t *testing.T, secret, body string) *http.Response {
	t.Helper()
	return e.do(t, t.Context(), http.MethodPost, "/v1/embeddings", secret, body, nil)
}

// TestCreditEmbeddings: a key pays an embeddings call from credit: the hold
// of its quote, the charge of the upstream's prompt_tokens, a signed receipt.
func TestCreditEmbeddings(t *testing.T) {
	eachCreditBackend(t, func(t *testing.T, b creditBackend) {
		e := newEmbedCreditEnv(t, b, nil)
		e.topUp(t, alice, 1_000_000)
		secret, key := e.newKey(t, alice, nil)
		texts := []string{strings.Repeat("embeddings are priced by input ", 30), "short"}
		tokens, _ := embedQuote(t, texts...)

		resp := e.embed(t, secret, `{"model":"embed","input":["`+texts[0]+`","`+texts[1]+`"]}`)
		body := readAll(t, resp)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d: %s", resp.StatusCode, body)
		}
		a := decodeEmbed(t, body)
		if len(a.Data) != 2 || a.Usage.PromptTokens != tokens {
			t.Errorf("answer %s, want 2 vectors and %d prompt tokens", body, tokens)
		}
		cost := pricing.Cost(chatUsage(tokens), embedPrice)
		bal := e.balance(t, alice)
		if bal.Available.Int64() != 1_000_000-cost.Int64() || bal.Held.Sign() != 0 {
			t.Errorf("balance %v held %v after a charge of %v", bal.Available, bal.Held, cost)
		}
		id := resp.Header.Get(gateway.HeaderRequestID)
		if a.Cost.Charged != cost.String() || a.Cost.Balance != bal.Available.String() || a.Cost.RequestID != id {
			t.Errorf("x_llm4agents = %+v, want charged %v balance %v id %s", a.Cost, cost, bal.Available, id)
		}
		r, sig, err := receipt.DecodeHeader(resp.Header.Get(receipt.Header))
		if err != nil {
			t.Fatal(err)
		}
		e.verified(t, r, sig)
		keyID, err := credits.KeyIDBytes32(key.ID)
		if err != nil {
			t.Fatal(err)
		}
		if r.Model != "embed" || r.InputTokens.Int64() != tokens || r.OutputTokens.Sign() != 0 || r.Amount.Cmp(cost) != 0 ||
			r.KeyID != keyID || r.RequestID.Hex() != id || r.Rail != receipt.RailCredits {
			t.Errorf("receipt %+v, want embed, %d tokens in, none out, %v charged, key %s, id %s", r, tokens, cost, keyID.Hex(), id)
		}
		if e.receiptCount(t, alice) != 1 {
			t.Errorf("%d receipts stored, want 1", e.receiptCount(t, alice))
		}
	})
}

// TestCreditEmbeddingsCapped: an upstream that reports more prompt tokens
// than were quoted is charged the quote's cost, no more (D16).
func TestCreditEmbeddingsCapped(t *testing.T) {
	b := creditBackends[0]
	tenfold := upstream.TokenizerFunc(func(s string) int { return 10 * len(s) })
	e := newEmbedCreditEnv(t, b, tenfold)
	e.topUp(t, alice, 1_000_000)
	secret, _ := e.newKey(t, alice, nil)
	const text = "count me more than I am"
	tokens, _ := embedQuote(t, text)
	resp := e.embed(t, secret, `{"model":"embed","input":"`+text+`"}`)
	body := readAll(t, resp)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	a := decodeEmbed(t, body)
	quoted := pricing.Cost(chatUsage(tokens), embedPrice)
	if a.Usage.PromptTokens != 10*int64(len(text)) || a.Cost.Charged != quoted.String() {
		t.Errorf("upstream reported %d tokens, charged %s; want %d and the quote's %v", a.Usage.PromptTokens, a.Cost.Charged, 10*len(text), quoted)
	}
	if bal := e.balance(t, alice); bal.Available.Int64() != 1_000_000-quoted.Int64() {
		t.Errorf("balance %v, want %d", bal.Available, 1_000_000-quoted.Int64())
	}
}

// TestCreditEmbeddingsNothingCharged: refusals before the hold and upstream
// failures after it leave the balance whole and nothing held.
func TestCreditEmbeddingsNothingCharged(t *testing.T) {
	eachCreditBackend(t, func(t *testing.T, b creditBackend) {
		e := newEmbedCreditEnv(t, b, nil)
		e.topUp(t, alice, 1_000_000)
		secret, _ := e.newKey(t, alice, nil)
		limited, _ := e.newKey(t, alice, func(k *store.APIKey) { k.Models = []string{"demo"} })
		// Rate limits count an embeddings call's input tokens.
		fewTokens, _ := e.newKey(t, alice, func(k *store.APIKey) { k.TokensPerMinute = 3 })
		capped, _ := e.newKey(t, alice, func(k *store.APIKey) { k.TotalCap = 1 })
		tests := []struct {
			name   string
			secret string
			body   string
			fault  upstreamtest.Fault
			status int
			code   string
		}{
			{"empty input", secret, `{"model":"embed","input":[]}`, upstreamtest.Fault{}, 400, "invalid_request"},
			{"too many inputs", secret, `{"model":"embed","input":[` + strings.TrimSuffix(strings.Repeat(`"a",`, 2049), ",") + `]}`, upstreamtest.Fault{}, 400, "invalid_request"},
			{"chat model", secret, `{"model":"demo","input":"a"}`, upstreamtest.Fault{}, 400, "model_not_supported"},
			{"model not allowed", limited, `{"model":"embed","input":"a"}`, upstreamtest.Fault{}, 403, "model_not_allowed"},
			{"above the key's tokens per minute", fewTokens, `{"model":"embed","input":"one two three four five six seven"}`, upstreamtest.Fault{}, 400, "rate_limit_too_small"},
			{"above the key's cap", capped, `{"model":"embed","input":"a"}`, upstreamtest.Fault{}, 402, "insufficient_credit"},
			{"unknown key", "sk-l4a-unknown", `{"model":"embed","input":"a"}`, upstreamtest.Fault{}, 401, "invalid_api_key"},
			{"upstream 500", secret, `{"model":"embed","input":"a"}`, upstreamtest.Fault{Status: 500}, 502, "upstream_error"},
			{"wrong shape", secret, `{"model":"embed","input":["a","b"]}`,
				upstreamtest.Fault{Status: 200, Body: `{"object":"list","data":[{"index":0,"embedding":[1]}],"usage":{"prompt_tokens":2,"total_tokens":2}}`}, 502, "upstream_bad_response"},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				e.up.SetFault(tc.fault)
				defer e.up.SetFault(upstreamtest.Fault{})
				resp := e.embed(t, tc.secret, tc.body)
				body := readAll(t, resp)
				if resp.StatusCode != tc.status || errorCode(t, body) != tc.code {
					t.Errorf("%d %s, want %d %s", resp.StatusCode, body, tc.status, tc.code)
				}
				// An embeddings request has no max_tokens to lower.
				if strings.Contains(string(body), "max_tokens") {
					t.Errorf("the refusal names max_tokens: %s", body)
				}
			})
		}
		bal := e.balance(t, alice)
		if bal.Available.Int64() != 1_000_000 || bal.Held.Sign() != 0 {
			t.Errorf("balance %v held %v, want 1000000 and nothing held", bal.Available, bal.Held)
		}
		if n := e.receiptCount(t, alice); n != 0 {
			t.Errorf("%d receipts, want none", n)
		}
	})
}

// chatUsage is a usage of prompt tokens alone, as the ledger prices it.
func chatUsage(prompt int64) chat.Usage {
	return chat.Usage{PromptTokens: prompt, TotalTokens: prompt}
}
