package client_test

import (
	"crypto/ecdsa"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"

	"github.com/llm4agents/llm4agents/client"
	"github.com/llm4agents/llm4agents/internal/testchain"
	"github.com/llm4agents/llm4agents/x402/receipt"
)

// paidReceipt is the receipt the test gateway signs for every answer.
func paidReceipt() *receipt.Receipt {
	return &receipt.Receipt{
		RequestID: common.HexToHash("0x01"), Account: testchain.DevAddress(0), Model: "gpt-4o-mini",
		InputTokens: big.NewInt(12), OutputTokens: big.NewInt(34), Amount: big.NewInt(10000),
		BalanceAfter: big.NewInt(0), LedgerSeq: big.NewInt(1), IssuedAt: 1_800_000_000,
		Rail: receipt.RailExact, Network: "eip155:8453", Payment: common.HexToHash("0x02"),
	}
}

// sign signs r in d with key as the gateway does: receipt.Digest, v 27 or 28.
// (x402/receipt checks that digest against an independent EIP-712
// implementation.)
func sign(tb testing.TB, key *ecdsa.PrivateKey, d receipt.Domain, r *receipt.Receipt) []byte {
	tb.Helper()
	digest, err := receipt.Digest(d, r)
	if err != nil {
		tb.Fatal(err)
	}
	sig, err := crypto.Sign(digest[:], key)
	if err != nil {
		tb.Fatal(err)
	}
	sig[64] += 27
	return sig
}

// gateway serves a well-known document and a receipted answer, as the
// gateway will.
type gateway struct {
	srv     *httptest.Server
	mu      sync.Mutex
	key     *ecdsa.PrivateKey // signs receipts
	doc     string            // well-known body; "" derives it from key
	status  int               // well-known status; 0 is 200
	fetches atomic.Int32
}

func newGateway(t *testing.T, key *ecdsa.PrivateKey) *gateway {
	g := &gateway{key: key}
	g.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.mu.Lock()
		key, doc, status := g.key, g.doc, g.status
		g.mu.Unlock()
		d := receipt.NewDomain(big.NewInt(1337))
		switch r.URL.Path {
		case receipt.WellKnownPath:
			g.fetches.Add(1)
			if doc == "" {
				b, err := json.Marshal(receipt.WellKnown{Receipts: receipt.WellKnownReceipts{Signer: crypto.PubkeyToAddress(key.PublicKey), Domain: d}})
				if err != nil {
					t.Error(err)
				}
				doc = string(b)
			}
			if status != 0 {
				w.WriteHeader(status)
			}
			_, _ = io.WriteString(w, doc)
		case "/v1/chat/completions":
			rc := paidReceipt()
			h, err := receipt.EncodeHeader(rc, sign(t, key, d, rc))
			if err != nil {
				t.Error(err)
			}
			w.Header().Set(receipt.Header, h)
			_, _ = io.WriteString(w, `{"id":"chatcmpl-1"}`)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(g.srv.Close)
	return g
}

func (g *gateway) set(f func(g *gateway)) {
	g.mu.Lock()
	defer g.mu.Unlock()
	f(g)
}

// verify gets path from g and verifies the answer's receipt with v.
func (g *gateway) verify(t *testing.T, v *client.ReceiptVerifier, path string) (*receipt.Receipt, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, g.srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := g.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	_, _ = io.Copy(io.Discard, resp.Body)
	return v.VerifyResponse(t.Context(), resp)
}

func TestReceiptVerifier(t *testing.T) {
	g := newGateway(t, testchain.DevKey(3))
	v := &client.ReceiptVerifier{Client: g.srv.Client()}
	for range 3 {
		r, err := g.verify(t, v, "/v1/chat/completions")
		if err != nil {
			t.Fatal(err)
		}
		if r.Account != testchain.DevAddress(0) || r.Amount.Int64() != 10000 {
			t.Errorf("receipt %+v", r)
		}
	}
	if n := g.fetches.Load(); n != 1 {
		t.Errorf("well-known fetched %d times, want once (cached)", n)
	}

	// The signer key rotates: the cached document is stale, fetched again.
	g.set(func(g *gateway) { g.key = testchain.DevKey(4) })
	if _, err := g.verify(t, v, "/v1/chat/completions"); err != nil {
		t.Fatalf("after rotation: %v", err)
	}
	if n := g.fetches.Load(); n != 2 {
		t.Errorf("well-known fetched %d times, want 2", n)
	}

	// Receipts signed by a key the origin does not publish.
	forger := testchain.DevKey(5)
	g.set(func(g *gateway) {
		g.doc = fmt.Sprintf(`{"receipts":{"signer":"%s","domain":{"name":"llm4agents","version":"1","chainId":1337}}}`, testchain.DevAddress(4).Hex())
		g.key = forger
	})
	if _, err := g.verify(t, v, "/v1/chat/completions"); !errors.Is(err, receipt.ErrSignature) {
		t.Errorf("forged receipt: %v, want receipt.ErrSignature", err)
	}
	// Published in another domain (chain): the signature does not recover
	// the signer.
	g.set(func(g *gateway) {
		g.key = testchain.DevKey(4)
		g.doc = fmt.Sprintf(`{"receipts":{"signer":"%s","domain":{"name":"llm4agents","version":"1","chainId":1}}}`, testchain.DevAddress(4).Hex())
	})
	v = &client.ReceiptVerifier{Client: g.srv.Client()}
	if _, err := g.verify(t, v, "/v1/chat/completions"); !errors.Is(err, receipt.ErrSignature) {
		t.Errorf("other domain: %v, want receipt.ErrSignature", err)
	}

	if _, err := g.verify(t, v, "/other"); !errors.Is(err, receipt.ErrMissing) {
		t.Errorf("no receipt: %v", err)
	}
	for name, f := range map[string]func(g *gateway){
		"404":      func(g *gateway) { g.doc, g.status = "", http.StatusNotFound },
		"garbage":  func(g *gateway) { g.doc, g.status = "<html>", 0 },
		"oversize": func(g *gateway) { g.doc = `{"x":"` + strings.Repeat("a", 1<<20) + `"}` },
	} {
		t.Run(name, func(t *testing.T) {
			g.set(f)
			v := &client.ReceiptVerifier{Client: g.srv.Client()}
			if _, err := g.verify(t, v, "/v1/chat/completions"); !errors.Is(err, receipt.ErrBadWellKnown) {
				t.Errorf("VerifyResponse = %v, want ErrBadWellKnown", err)
			}
		})
	}
	if _, err := client.FetchWellKnown(t.Context(), nil, "ftp://example.com"); !errors.Is(err, receipt.ErrBadWellKnown) {
		t.Errorf("ftp origin: %v", err)
	}
}
