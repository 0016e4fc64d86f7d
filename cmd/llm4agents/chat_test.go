package main

import (
	"encoding/json"
	"io"
	"math/big"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/llm4agents/llm4agents/x402"
)

var turnLine = regexp.MustCompile(`(?m)^\[turn (\d): paid 0\.01 in transaction 0x[0-9a-f]{64}; total (0\.0\d) of 1\.00; [1-9][0-9]* prompt \+ [1-9][0-9]* completion tokens\]$`)

// TestChatDemoGateway holds a two-turn conversation with the demo gateway,
// streamed and not, and checks the answers, the cost of each turn, the
// running total, the history sent and the chain.
func TestChatDemoGateway(t *testing.T) {
	g := startDemoGateway(t)
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"stream, model from /v1/models", []string{"--stream"}},
		{"no stream", []string{"--model", "demo", "--url", g.URL + "/v1/"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := g.balance(t, g.payTo)
			n := len(g.rec.requests())
			args := append([]string{"chat", "--url", g.URL, "--max-tokens", "32", "--system", "Be brief.", g.assetFlag()}, tc.args...)
			stdout, stderr, err := runBuyer(t, args, buyerEnv(), "What does x402 do?\n\n   \nAnd then?\n")
			if err != nil {
				t.Fatalf("chat: %v\nstderr:\n%s", err, stderr)
			}
			answers := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
			if len(answers) != 2 {
				t.Fatalf("stdout holds %d lines, want 2 answers:\n%s", len(answers), stdout)
			}
			for _, a := range answers {
				if !strings.HasPrefix(a, "This is the llm4agents demo model") {
					t.Errorf("answer %q is not the demo model's", a)
				}
			}
			if !strings.HasPrefix(stderr, "chat with demo at "+g.URL+"/v1/chat/completions\npolicy: at most 0.10 per payment, 1.00 in all;") {
				t.Errorf("stderr does not start with the banner:\n%s", stderr)
			}
			turns := turnLine.FindAllStringSubmatch(stderr, -1)
			if len(turns) != 2 || turns[0][1] != "1" || turns[0][2] != "0.01" || turns[1][1] != "2" || turns[1][2] != "0.02" {
				t.Errorf("stderr lacks two turn lines %s with totals 0.01 and 0.02:\n%s", turnLine, stderr)
			}
			if !strings.HasSuffix(stderr, "chat: 2 turn(s); spent 0.02 of 1.00\n") {
				t.Errorf("stderr does not end with the total:\n%s", stderr)
			}
			if got := new(big.Int).Sub(g.balance(t, g.payTo), before); got.Int64() != 20_000 {
				t.Errorf("payTo received %s, want 20000", got)
			}
			// The second paid request carries the whole conversation.
			var paid []recordedRequest
			for _, r := range g.rec.requests()[n:] {
				if r.Header.Get(x402.HeaderPaymentSignature) != "" {
					paid = append(paid, r)
				}
			}
			if len(paid) != 2 {
				t.Fatalf("%d paid requests, want 2", len(paid))
			}
			var body struct {
				Model    string        `json:"model"`
				Messages []chatMessage `json:"messages"`
				Stream   bool          `json:"stream"`
			}
			if err := json.Unmarshal(paid[1].Body, &body); err != nil {
				t.Fatal(err)
			}
			want := []chatMessage{{"system", "Be brief."}, {"user", "What does x402 do?"}, {"assistant", answers[0]}, {"user", "And then?"}}
			if body.Model != "demo" || len(body.Messages) != len(want) {
				t.Fatalf("second request: model %q, %d messages, want demo and %d", body.Model, len(body.Messages), len(want))
			}
			for i := range want {
				if body.Messages[i] != want[i] {
					t.Errorf("second request message %d = %+v, want %+v", i, body.Messages[i], want[i])
				}
			}
			if body.Stream != (tc.args[0] == "--stream") {
				t.Errorf("stream = %v", body.Stream)
			}
			noSecrets(t, g.rec, stdout, stderr, err)
		})
	}
}

// TestChatBudget: a turn over what is left of the budget is refused before
// anything is signed, the conversation goes on without it, and the run fails.
func TestChatBudget(t *testing.T) {
	g := startDemoGateway(t)
	n := len(g.rec.payments())
	stdout, stderr, err := runBuyer(t, []string{"chat", "--url", g.URL + "/v1", "--model", "demo", "--max-tokens", "32", "--budget", "0.015", g.assetFlag()},
		buyerEnv(), "one\ntwo\n/quit\nthree\n")
	if err == nil || err.Error() != "chat: 1 of 2 turn(s) failed" {
		t.Errorf("err = %v, want one failed turn of two", err)
	}
	for _, want := range []string{
		"[turn 1: paid 0.01 in transaction 0x",
		"    verdict  refused (over_budget): amount 10000 is over the remaining budget 5000",
		"chat: turn 2: pay: POST " + g.URL + "/v1/chat/completions: no payment option is allowed by the spending flags; nothing was signed or paid",
		"chat: 2 turn(s); spent 0.01 of 0.015",
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	if strings.Count(stdout, "This is the llm4agents demo model") != 1 {
		t.Errorf("stdout holds other than one answer:\n%s", stdout)
	}
	if got := len(g.rec.payments()) - n; got != 1 {
		t.Errorf("%d payments, want 1", got)
	}
	noSecrets(t, g.rec, stdout, stderr, err)
}

// TestChatHostileSellers: bad answers fail the turn they come in, with a
// message, and never pay twice.
func TestChatHostileSellers(t *testing.T) {
	offer := fakeOffer("exact", fakeNetwork, "10000")
	tests := []struct {
		name       string
		answer     func(w http.ResponseWriter, r *http.Request, paid bool)
		wantStderr []string
		payments   int
	}{
		{
			name: "an API error",
			answer: func(w http.ResponseWriter, _ *http.Request, _ bool) {
				w.WriteHeader(http.StatusBadRequest)
				_, _ = io.WriteString(w, `{"error":{"message":"model not found","type":"invalid_request_error"}}`)
			},
			wantStderr: []string{"chat: turn 1: 400 Bad Request: model not found"},
		},
		{
			name: "402 again after payment",
			answer: func(w http.ResponseWriter, r *http.Request, _ bool) {
				w.Header().Set(x402.HeaderPaymentRequired, paymentRequired(t, "http://"+r.Host+r.URL.Path, offer))
				w.WriteHeader(http.StatusPaymentRequired)
			},
			wantStderr: []string{"the server asked again after the payment, and it was not paid twice", "chat: turn 1: 402 Payment Required"},
			payments:   1,
		},
		{
			name: "a stream cut short",
			answer: func(w http.ResponseWriter, r *http.Request, paid bool) {
				if !paid {
					w.Header().Set(x402.HeaderPaymentRequired, paymentRequired(t, "http://"+r.Host+r.URL.Path, offer))
					w.WriteHeader(http.StatusPaymentRequired)
					return
				}
				w.Header().Set(x402.HeaderPaymentResponse, settled(t, true, ""))
				w.Header().Set("Content-Type", "text/event-stream")
				_, _ = io.WriteString(w, "data: {\"choices\":[{\"delta\":{\"content\":\"half an\"}}]}\n\n")
			},
			wantStderr: []string{"[turn 1: paid 0.01 in transaction " + fakeTx, "chat: turn 1: read the answer: the stream ended without [DONE]"},
			payments:   1,
		},
		{
			name: "an answer that is not a completion",
			answer: func(w http.ResponseWriter, r *http.Request, paid bool) {
				if !paid {
					w.Header().Set(x402.HeaderPaymentRequired, paymentRequired(t, "http://"+r.Host+r.URL.Path, offer))
					w.WriteHeader(http.StatusPaymentRequired)
					return
				}
				w.Header().Set(x402.HeaderPaymentResponse, "garbage")
				_, _ = io.WriteString(w, `{"not":"a completion"}`)
			},
			wantStderr: []string{"the PAYMENT-RESPONSE header does not decode", "chat: turn 1: read the answer: the answer is not a chat completion"},
			payments:   1,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv, rec := fakeSeller(t, tc.answer)
			args := []string{"chat", "--url", srv.URL, "--model", "m", "--asset", fakeNetwork + "/" + fakeAsset}
			if tc.name == "a stream cut short" {
				args = append(args, "--stream")
			}
			stdout, stderr, err := runBuyer(t, args, buyerEnv(), "hello\n")
			if err == nil || err.Error() != "chat: 1 of 1 turn(s) failed" {
				t.Errorf("err = %v, want the turn failed", err)
			}
			for _, want := range tc.wantStderr {
				if !strings.Contains(stderr, want) {
					t.Errorf("stderr lacks %q:\n%s", want, stderr)
				}
			}
			if n := len(rec.payments()); n != tc.payments {
				t.Errorf("%d payments, want %d", n, tc.payments)
			}
			noSecrets(t, rec, stdout, stderr, err)
		})
	}
}
