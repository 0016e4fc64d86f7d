package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/llm4agents/llm4agents/x402"
)

// balanceOffers are two exact offers of 15 tokens: [0] on the approveChain's
// chain, where its wallet holds 10, and [1] on Base, which its node cannot
// read.
func balanceOffers(c *approveChain) []x402.PaymentRequirements {
	unfunded := fakeOffer("exact", fakeNetwork, "15000000")
	unfunded.Asset = c.asset.Hex()
	elsewhere := fakeOffer("exact", "eip155:8453", "15000000")
	elsewhere.Asset = c.asset.Hex()
	return []x402.PaymentRequirements{unfunded, elsewhere}
}

// balanceFlags allow both balanceOffers.
func balanceFlags(c *approveChain) []string {
	return []string{"--asset=" + fakeNetwork + "/" + c.asset.Hex(), "--asset=eip155:8453/" + c.asset.Hex(), "--max-per-payment", "20.00", "--budget", "100.00"}
}

// TestPayDryRunBalances: with --rpc, a dry run reads the wallet's balance on
// the node's chain and shows the offer it cannot cover refused, and the next
// one paid; without --rpc, or without what it needs to read, it judges as
// before and says why.
func TestPayDryRunBalances(t *testing.T) {
	c := newApproveChain(t)
	srv, rec := fakeSeller(t, uptoSeller(t, "", "the goods", balanceOffers(c)...))
	url := srv.URL + "/paid"
	tests := []struct {
		name string
		args []string
		env  func(string) string
		want []string // lines of stdout, in order
	}{
		{
			name: "the unfunded offer is refused",
			args: []string{"--rpc", c.a.URL}, env: c.env,
			want: []string{
				"[0] exact on eip155:1337",
				"    verdict  refused (balance): the payer holds 10000000 of the asset, less than the amount 15000000",
				"[1] exact on eip155:8453",
				"    verdict  PAY: would be paid",
				"balances: read on eip155:1337 for " + c.wallet.Hex() + ": an offer there over the wallet's balance is refused (balance); offers on other chains are judged without it",
				"dry run: nothing was signed or paid.",
			},
		},
		{
			name: "without --rpc",
			env:  c.env,
			want: []string{
				"[0] exact on eip155:1337",
				"    verdict  PAY: would be paid",
				"[1] exact on eip155:8453",
				"    verdict  refused (not_chosen): payable, but option [0] is preferred",
				"dry run: nothing was signed or paid.",
			},
		},
		{
			name: "without a key",
			args: []string{"--rpc", c.a.URL}, env: envMap(nil),
			want: []string{
				"    verdict  PAY: would be paid",
				"balances: the wallet's balances were not read, so no offer is refused for them: no wallet key to name the owner (--key-file or " + walletKeyEnv + ")",
			},
		},
		{
			name: "node down",
			args: []string{"--rpc", "http://127.0.0.1:1/secret-key"}, env: c.env,
			want: []string{
				"    verdict  PAY: would be paid",
				"balances: the wallet's balances were not read, so no offer is refused for them: --rpc: chain id: ",
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			args := append(append([]string{"pay", "--dry-run"}, balanceFlags(c)...), tc.args...)
			stdout, stderr, err := runBuyer(t, append(args, url), tc.env, "")
			if err != nil {
				t.Fatalf("pay --dry-run: %v\nstderr:\n%s", err, stderr)
			}
			checkLines(t, stdout, tc.want)
			if strings.Contains(stdout+stderr, "secret-key") {
				t.Errorf("the output repeats the --rpc URL:\n%s%s", stdout, stderr)
			}
		})
	}

	t.Run("json", func(t *testing.T) {
		args := append(append([]string{"pay", "--dry-run", "--json"}, balanceFlags(c)...), "--rpc", c.a.URL, url)
		stdout, stderr, err := runBuyer(t, args, c.env, "")
		if err != nil {
			t.Fatalf("pay --dry-run --json: %v\nstderr:\n%s", err, stderr)
		}
		var res struct {
			Options  []optionJSON  `json:"options"`
			Balances *balanceCheck `json:"balances"`
		}
		if err := json.Unmarshal([]byte(stdout), &res); err != nil {
			t.Fatal(err)
		}
		if len(res.Options) != 2 || res.Options[0].RefusalError != "balance" || res.Options[0].Pay || !res.Options[1].Pay {
			t.Errorf("options = %+v, want [0] refused for the balance and [1] paid", res.Options)
		}
		if res.Balances == nil || res.Balances.Network != fakeNetwork || res.Balances.Owner != c.wallet.Hex() {
			t.Errorf("balances = %+v", res.Balances)
		}
	})
	if n := len(rec.payments()); n != 0 {
		t.Errorf("a dry run sent %d payments", n)
	}
}

// TestChatBalances: chat --rpc passes over the offer on the node's chain
// that the wallet cannot cover and pays the next one; without --rpc it pays
// the first.
func TestChatBalances(t *testing.T) {
	const completion = `{"choices":[{"message":{"content":"hi there"}}],"usage":{"prompt_tokens":3,"completion_tokens":2}}`
	c := newApproveChain(t)
	offers := balanceOffers(c)
	tests := []struct {
		name        string
		args        []string
		wantNetwork string // of the offer paid
		wantLine    string // in stderr; "" for none
	}{
		{name: "with --rpc", args: []string{"--rpc", c.a.URL}, wantNetwork: "eip155:8453",
			wantLine: "balances: read on eip155:1337 before each payment; an offer there the wallet cannot cover is passed over"},
		{name: "without", wantNetwork: fakeNetwork},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv, rec := fakeSeller(t, uptoSeller(t, "", completion, offers...))
			args := append(append([]string{"chat", "--url", srv.URL, "--model", "m"}, balanceFlags(c)...), tc.args...)
			stdout, stderr, err := runBuyer(t, args, c.env, "hello\n")
			if err != nil {
				t.Fatalf("chat: %v\nstderr:\n%s", err, stderr)
			}
			if tc.wantLine != "" && !strings.Contains(stderr, tc.wantLine+"\n") {
				t.Errorf("stderr lacks %q:\n%s", tc.wantLine, stderr)
			}
			pays := rec.payments()
			if len(pays) != 1 {
				t.Fatalf("%d payments, want 1", len(pays))
			}
			p, err := x402.DecodePaymentPayload(pays[0])
			if err != nil {
				t.Fatal(err)
			}
			if acc, _ := p.AcceptedRequirements(); acc.Network != tc.wantNetwork {
				t.Errorf("paid the offer on %s, want the one on %s", acc.Network, tc.wantNetwork)
			}
			noSecrets(t, rec, stdout, stderr, err)
		})
	}
}

// TestPayBalances: pay --rpc, paying for real, passes over the offer on the
// node's chain that the wallet cannot cover and pays the next one; without
// --rpc it pays the first.
func TestPayBalances(t *testing.T) {
	c := newApproveChain(t)
	offers := balanceOffers(c)
	for _, tc := range []struct {
		name        string
		args        []string
		wantNetwork string // of the offer paid
	}{
		{name: "with --rpc", args: []string{"--rpc", c.a.URL}, wantNetwork: "eip155:8453"},
		{name: "without", wantNetwork: fakeNetwork},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, rec := fakeSeller(t, uptoSeller(t, "", "the goods", offers...))
			args := append(append([]string{"pay"}, balanceFlags(c)...), tc.args...)
			stdout, stderr, err := runBuyer(t, append(args, srv.URL+"/paid"), c.env, "")
			if err != nil {
				t.Fatalf("pay: %v\nstderr:\n%s", err, stderr)
			}
			pays := rec.payments()
			if len(pays) != 1 {
				t.Fatalf("%d payments, want 1", len(pays))
			}
			p, err := x402.DecodePaymentPayload(pays[0])
			if err != nil {
				t.Fatal(err)
			}
			if acc, _ := p.AcceptedRequirements(); acc.Network != tc.wantNetwork {
				t.Errorf("paid the offer on %s, want the one on %s", acc.Network, tc.wantNetwork)
			}
			noSecrets(t, rec, stdout, stderr, err)
		})
	}
}

// TestChatRPCBadInput: --rpc is refused with an API key, and a node that
// cannot be reached stops chat before anything is sent, without repeating
// its URL.
func TestChatRPCBadInput(t *testing.T) {
	srv, rec := fakeSeller(t, uptoSeller(t, "", "", fakeOffer("exact", fakeNetwork, "10000")))
	tests := []struct {
		name    string
		args    []string
		env     func(string) string
		wantErr string
	}{
		{name: "with an API key", args: []string{"--rpc", "http://127.0.0.1:1"},
			env: envMap(map[string]string{apiKeyEnv: "sk-l4a-0000000000000000000000000000000000000000"}), wantErr: "chat: --rpc reads the wallet's balances for per-turn payments"},
		{name: "node down", args: []string{"--rpc", "http://127.0.0.1:1/secret-key"}, env: buyerEnv(), wantErr: "chat: --rpc: chain id: "},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"chat", "--url", srv.URL, "--model", "m", "--asset", fakeNetwork + "/" + fakeAsset}, tc.args...)
			stdout, stderr, err := runBuyer(t, args, tc.env, "hello\n")
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("chat: %v, want an error with %q\nstderr:\n%s", err, tc.wantErr, stderr)
			}
			if strings.Contains(err.Error()+stdout+stderr, "secret-key") {
				t.Errorf("the --rpc URL is repeated: %v\n%s%s", err, stdout, stderr)
			}
		})
	}
	if n := len(rec.requests()); n != 0 {
		t.Errorf("the seller saw %d requests, want none", n)
	}
}
