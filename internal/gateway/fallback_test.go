package gateway_test

import (
	"bytes"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/llm4agents/llm4agents/internal/gateway"
	"github.com/llm4agents/llm4agents/internal/upstream"
	"github.com/llm4agents/llm4agents/internal/upstream/upstreamtest"
	"github.com/llm4agents/llm4agents/x402"
)

// withFallback serves the model from its provider ("a") and then from a
// second fake upstream ("b", which names the model "b-model"), counting
// attempts on metrics. It returns the second upstream.
func withFallback(t *testing.T, first gateway.Provider, metrics upstream.AttemptMetrics) (gateway.Provider, *upstreamtest.Server) {
	t.Helper()
	b := upstreamtest.NewServer(t, upstreamtest.Config{APIKey: "sk-upstream-b"})
	pb, err := upstream.NewOpenAI(upstream.OpenAIConfig{BaseURL: b.URL(), APIKey: "sk-upstream-b", Timeout: 5 * time.Second}, discard())
	if err != nil {
		t.Fatal(err)
	}
	p, err := upstream.NewFallback([]upstream.Route{
		{Name: "a", Provider: first, Health: upstream.NewHealth(upstream.HealthConfig{})},
		{Name: "b", Provider: pb, Model: "b-model", Health: upstream.NewHealth(upstream.HealthConfig{})},
	}, metrics, discard())
	if err != nil {
		t.Fatal(err)
	}
	return p, b
}

// TestFallbackPaysOnce: with the first provider failing before its answer,
// the second answers and the buyer pays the model's price once, for that
// answer; with every provider down the answer is a 502 and nothing is
// charged, and the same payment pays once a provider is back.
func TestFallbackPaysOnce(t *testing.T) {
	streamBody := `{"model":"demo","stream":true,"messages":[{"role":"user","content":"Say hello"}],"max_tokens":32}`
	for _, tc := range []struct {
		name string
		body string
	}{{"complete", chatBody}, {"stream", streamBody}} {
		t.Run(tc.name, func(t *testing.T) {
			metrics := gateway.NewMetrics()
			var second *upstreamtest.Server
			e := newEnvConfig(t, 10*time.Second, nil, func(c *gateway.Config) {
				c.Metrics = metrics
				c.Models[0].Provider, second = withFallback(t, c.Models[0].Provider, metrics)
			})
			e.up.SetFault(upstreamtest.Fault{Status: http.StatusServiceUnavailable})

			c, tr := e.payer(buyerIdx)
			resp := e.post(t, c, tc.body, nil)
			body := readAll(t, resp)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			if got := e.chain.BalanceOf(t, e.chain.Addr(payToIdx)); got.Int64() != 10000 || tr.Spent().Int64() != 10000 {
				t.Errorf("payTo received %s, the buyer spent %s: want the model's price, 10000, once", got, tr.Spent())
			}
			if e.up.Calls() != 1 || second.Calls() != 1 {
				t.Errorf("calls: first %d, second %d; want one each", e.up.Calls(), second.Calls())
			}
			if !bytes.Contains(second.LastRequest().Body, []byte(`"model":"b-model"`)) {
				t.Errorf("the second provider got %s, want its own model name", second.LastRequest().Body)
			}
			m := scrape(t, e.srv.URL)
			if m[`llm4agents_upstream_attempts_total{outcome="failed",provider="a"}`] != 1 || m[`llm4agents_upstream_attempts_total{outcome="ok",provider="b"}`] != 1 {
				t.Errorf("attempt metrics: %v", m)
			}

			// Every provider down: 502, nothing charged; the payment is not
			// spent, and pays once a provider is back.
			second.SetFault(upstreamtest.Fault{Status: http.StatusInternalServerError})
			h := e.signedHeader(t, tc.body, buyerIdx)
			resp = e.post(t, http.DefaultClient, tc.body, http.Header{x402.HeaderPaymentSignature: {h}})
			body = readAll(t, resp)
			if resp.StatusCode != http.StatusBadGateway || resp.Header.Get(x402.HeaderPaymentResponse) != "" {
				t.Fatalf("every provider down: %d %s", resp.StatusCode, body)
			}
			if got := e.chain.BalanceOf(t, e.chain.Addr(payToIdx)); got.Int64() != 10000 {
				t.Fatalf("payTo holds %s after a failed call, want 10000 still", got)
			}
			second.SetFault(upstreamtest.Fault{})
			resp = e.post(t, http.DefaultClient, tc.body, http.Header{x402.HeaderPaymentSignature: {h}})
			body = readAll(t, resp)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("a provider back: %d %s", resp.StatusCode, body)
			}
			if got := e.chain.BalanceOf(t, e.chain.Addr(payToIdx)); got.Int64() != 20000 {
				t.Errorf("payTo holds %s, want 20000: each answered call paid once", got)
			}
		})
	}
}

// TestFallbackCreditsChargeOnce: a credit call whose first provider fails is
// held once and charged once, for the answer the second gave; with every
// provider down nothing is charged and nothing stays held.
func TestFallbackCreditsChargeOnce(t *testing.T) {
	eachCreditBackend(t, func(t *testing.T, b creditBackend) {
		var second *upstreamtest.Server
		e := newCreditEnv(t, creditOpts{backend: b, provider: func(up gateway.Provider) gateway.Provider {
			p, s := withFallback(t, up, nil)
			second = s
			return p
		}})
		e.topUp(t, alice, 1_000_000)
		secret, _ := e.newKey(t, alice, nil)
		e.up.SetFault(upstreamtest.Fault{Status: http.StatusBadGateway})

		resp := e.chat(t, secret, chatBody)
		body := readAll(t, resp)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d: %s", resp.StatusCode, body)
		}
		charged := resp.Header.Get("X-Llm4agents-Charged")
		e.sync(t)
		bal := e.balance(t, alice)
		if charged == "" || bal.Available.String() != subtract(1_000_000, charged) || bal.Held.Sign() != 0 {
			t.Errorf("charged %q; balance %s, held %s", charged, bal.Available, bal.Held)
		}
		if e.up.Calls() != 1 || second.Calls() != 1 {
			t.Errorf("calls: first %d, second %d", e.up.Calls(), second.Calls())
		}

		second.SetFault(upstreamtest.Fault{Status: http.StatusServiceUnavailable})
		resp = e.chat(t, secret, chatBody)
		body = readAll(t, resp)
		if resp.StatusCode != http.StatusBadGateway {
			t.Fatalf("every provider down: %d %s", resp.StatusCode, body)
		}
		e.sync(t)
		if after := e.balance(t, alice); after.Available.Cmp(bal.Available) != 0 || after.Held.Sign() != 0 {
			t.Errorf("after a failed call: balance %s held %s, want %s and nothing held", after.Available, after.Held, bal.Available)
		}
	})
}

// subtract is from - amount, amount a decimal string ("" if it is not one).
func subtract(from int64, amount string) string {
	n, err := strconv.ParseInt(amount, 10, 64)
	if err != nil {
		return ""
	}
	return strconv.FormatInt(from-n, 10)
}
