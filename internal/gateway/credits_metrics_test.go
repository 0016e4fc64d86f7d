package gateway_test

import (
	"bufio"
	"bytes"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/llm4agents/llm4agents/internal/credits"
	"github.com/llm4agents/llm4agents/internal/store"
)

// TestCreditMetrics: every credit-paid call is counted once under its
// outcome, the ledger writes it waited for are timed, and no label carries a
// key, a payer or an amount.
func TestCreditMetrics(t *testing.T) {
	eachCreditBackend(t, func(t *testing.T, b creditBackend) {
		e := newCreditEnv(t, creditOpts{backend: b})
		maxCost := maxCostOf(t, chatBody)
		// Enough for one call at its maximum, not for two.
		e.topUp(t, alice, maxCost+maxCost/2)
		good, _ := e.newKey(t, alice, nil)
		scoped, _ := e.newKey(t, alice, func(k *store.APIKey) { k.Models = []string{"other-model"} })
		unknown, _, err := credits.NewKey()
		if err != nil {
			t.Fatal(err)
		}

		for _, tc := range []struct {
			name, secret string
			status       int
		}{
			{"charged", good, http.StatusOK},
			{"unknown key", unknown, http.StatusUnauthorized},
			{"out of scope", scoped, http.StatusForbidden},
		} {
			resp := e.chat(t, tc.secret, chatBody)
			if body := readAll(t, resp); resp.StatusCode != tc.status {
				t.Fatalf("%s: status %d: %s", tc.name, resp.StatusCode, body)
			}
		}
		// The first call left less than one maximum cost.
		if resp := e.chat(t, good, chatBody); resp.StatusCode != http.StatusPaymentRequired {
			t.Fatalf("short call: status %d: %s", resp.StatusCode, readAll(t, resp))
		}

		m := scrape(t, e.srv.URL)
		for outcome, want := range map[string]float64{
			"charged": 1, "invalid_key": 1, "not_allowed": 1, "insufficient": 1,
			"released": 0, "unbilled": 0, "charged_no_receipt": 0, "store_down": 0,
		} {
			if got := m[`llm4agents_credit_calls_total{outcome="`+outcome+`"}`]; got != want {
				t.Errorf("credit calls %s = %v, want %v", outcome, got, want)
			}
		}
		// Two holds were tried (one placed, one refused), one capture and one
		// receipt written: in one write on a store that keeps the receipt
		// with the capture (SQLite). Leased: two admissions timed, and no
		// store write on the call's path but the lease's.
		timings := map[string]float64{"hold": 2, "capture": 1, "receipt": 1, "lease": 0}
		if _, ok := e.db.(store.ReceiptCapturer); ok {
			timings["receipt"] = 0
		}
		if b.leased {
			timings = map[string]float64{"hold": 0, "capture": 0, "receipt": 0, "lease": 2}
			if got := m[`llm4agents_credit_leases_total{event="opened"}`]; got != 1 {
				t.Errorf("leases opened = %v, want 1", got)
			}
			// The lease was placed with its first issued mark: no call
			// waited for one.
			if got, ok := m[`llm4agents_credit_lease_issue_waits_total{outcome="waited"}`]; !ok || got != 0 {
				t.Errorf("calls that waited for an issued mark = %v (exported: %v), want 0", got, ok)
			}
		}
		// No lease ended by the sweep: nothing lost.
		if got, ok := m[`llm4agents_credit_lost_calls_bound_total`]; !ok || got != 0 {
			t.Errorf("lost calls bound = %v (exported: %v), want 0", got, ok)
		}
		for op, want := range timings {
			if got := m[`llm4agents_credit_ledger_duration_seconds_count{op="`+op+`"}`]; got != want {
				t.Errorf("ledger %s timings = %v, want %v", op, got, want)
			}
		}
		for series := range m {
			if strings.Contains(series, "sk-l4a-") || strings.Contains(strings.ToLower(series), strings.ToLower(alice.Hex()[2:])) {
				t.Errorf("a metric names a key or the payer: %s", series)
			}
		}
	})
}

// scrape reads the gateway's /metrics into series -> value.
func scrape(t *testing.T, base string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(base + "/metrics") // #nosec G107 -- a test server's URL
	if err != nil {
		t.Fatal(err)
	}
	body := readAll(t, resp)
	out := map[string]float64{}
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("metric line %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	return out
}
