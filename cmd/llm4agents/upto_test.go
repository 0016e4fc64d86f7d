package main

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"io"
	"math/big"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/accounts/abi/bind"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"

	"github.com/llm4agents/llm4agents/contracts"
	"github.com/llm4agents/llm4agents/internal/testchain"
	"github.com/llm4agents/llm4agents/x402"
	"github.com/llm4agents/llm4agents/x402/evm/upto"
)

// fakeFacilitator is the address the fake upto offers name.
const fakeFacilitator = "0x90F79bf6EB2c4f870365E785982E1f101E93b906"

// fakeUptoOffer is an upto offer of at most amount, as the official
// UptoEvmScheme server sends it.
func fakeUptoOffer(asset, amount string) x402.PaymentRequirements {
	r := fakeOffer(upto.Scheme, fakeNetwork, amount)
	r.Asset = asset
	r.Extra = json.RawMessage(`{"name":"USD Coin","version":"2","assetTransferMethod":"permit2","facilitatorAddress":"` + fakeFacilitator + `"}`)
	return r
}

// settledUpto is a successful PAYMENT-RESPONSE reporting amount ("" for none).
func settledUpto(tb testing.TB, amount string) string {
	tb.Helper()
	h, err := x402.EncodeHeader(x402.SettleResponse{Success: true, Transaction: fakeTx, Network: fakeNetwork, Amount: amount})
	if err != nil {
		tb.Fatal(err)
	}
	return h
}

// uptoSeller answers with a 402 offering accepts, and a paid request with
// body and a PAYMENT-RESPONSE reporting amount for an upto payment (the full
// amount for exact).
func uptoSeller(tb testing.TB, amount, body string, accepts ...x402.PaymentRequirements) func(http.ResponseWriter, *http.Request, bool) {
	return func(w http.ResponseWriter, r *http.Request, paid bool) {
		if !paid {
			w.Header().Set(x402.HeaderPaymentRequired, paymentRequired(tb, "http://"+r.Host+r.URL.Path, accepts...))
			w.WriteHeader(http.StatusPaymentRequired)
			return
		}
		p, err := x402.DecodePaymentPayload(r.Header.Get(x402.HeaderPaymentSignature))
		if err != nil {
			tb.Errorf("seller: %v", err)
			return
		}
		acc, err := p.AcceptedRequirements()
		if err != nil {
			tb.Errorf("seller: %v", err)
			return
		}
		if acc.Scheme == upto.Scheme {
			w.Header().Set(x402.HeaderPaymentResponse, settledUpto(tb, amount))
		} else {
			w.Header().Set(x402.HeaderPaymentResponse, settled(tb, true, ""))
		}
		_, _ = io.WriteString(w, body)
	}
}

// TestPayUpto: pay pays an upto offer, says the maximum and what was charged,
// counts only the charge, and fails loudly on a settlement that cannot be
// right, counting the maximum.
func TestPayUpto(t *testing.T) {
	up := fakeUptoOffer(fakeAsset, "50000")
	ex := fakeOffer("exact", fakeNetwork, "50000")
	asset := "--asset=" + fakeNetwork + "/" + fakeAsset
	tests := []struct {
		name       string
		amount     string
		accepts    []x402.PaymentRequirements
		args       []string
		wantErr    string
		wantStderr []string
		wantJSON   map[string]string // --json fields
	}{
		{
			name: "charged less than the maximum", amount: "12345", accepts: []x402.PaymentRequirements{up},
			wantStderr: []string{"200 OK; upto payment of at most 50000 atomic units = 0.05 to " + fakePayTo + " on eip155:1337: charged 12345 atomic units = 0.012345, settled in transaction " + fakeTx + "; spent 0.012345 of 1.00"},
		},
		{
			name: "prefers upto to exact", amount: "1", accepts: []x402.PaymentRequirements{ex, up},
			wantStderr: []string{"upto payment of at most 50000 atomic units = 0.05", "charged 1 atomic units = 0.000001", "spent 0.000001 of 1.00"},
		},
		{
			name: "upto refused", amount: "1", accepts: []x402.PaymentRequirements{up, ex}, args: []string{"--upto", "refuse"},
			wantStderr: []string{"200 OK; payment of 50000 atomic units = 0.05", "settled in transaction " + fakeTx + "; spent 0.05 of 1.00"},
		},
		{
			name: "upto as offered pays exact first", amount: "1", accepts: []x402.PaymentRequirements{ex, up}, args: []string{"--upto=as-offered"},
			wantStderr: []string{"200 OK; payment of 50000 atomic units = 0.05", "spent 0.05 of 1.00"},
		},
		{
			name: "no amount counts the maximum", amount: "", accepts: []x402.PaymentRequirements{up},
			wantStderr: []string{"settled in transaction " + fakeTx + " without saying how much; counted as the maximum; spent 0.05 of 1.00"},
		},
		{
			name: "amount above the maximum", amount: "50001", accepts: []x402.PaymentRequirements{up},
			wantErr:    "pay: the seller's settlement cannot be right: client: PAYMENT-RESPONSE amount is not within the authorized maximum: 50001 is above the maximum 50000",
			wantStderr: []string{"charged 50000 atomic units = 0.05", "WARNING: client: PAYMENT-RESPONSE amount is not within the authorized maximum: 50001 is above the maximum 50000; counting the maximum; spent 0.05 of 1.00"},
		},
		{
			name: "negative amount", amount: "-7", accepts: []x402.PaymentRequirements{up},
			wantErr:    `"-7" is not an amount`,
			wantStderr: []string{"WARNING:", "spent 0.05 of 1.00"},
		},
		{
			name: "json", amount: "12345", accepts: []x402.PaymentRequirements{up}, args: []string{"--json"},
			wantJSON: map[string]string{"charged": "12345", "spent": "12345"},
		},
		{
			name: "json, garbage amount", amount: "lots", accepts: []x402.PaymentRequirements{up}, args: []string{"--json"},
			wantErr:  "is not an amount",
			wantJSON: map[string]string{"charged": "50000", "spent": "50000", "chargeError": `client: PAYMENT-RESPONSE amount is not within the authorized maximum: "lots" is not an amount; counting the maximum 50000`},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv, rec := fakeSeller(t, uptoSeller(t, tc.amount, "the goods", tc.accepts...))
			args := append([]string{"pay", asset}, tc.args...)
			stdout, stderr, err := runBuyer(t, append(args, srv.URL+"/paid"), buyerEnv(), "")
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("pay: %v\nstderr:\n%s", err, stderr)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("err = %v, want it to contain %q", err, tc.wantErr)
			}
			for _, want := range tc.wantStderr {
				if !strings.Contains(stderr, want) {
					t.Errorf("stderr lacks %q:\n%s", want, stderr)
				}
			}
			if tc.wantJSON != nil {
				var res map[string]any
				if err := json.Unmarshal([]byte(stdout), &res); err != nil {
					t.Fatalf("stdout %q: %v", stdout, err)
				}
				for k, v := range tc.wantJSON {
					if res[k] != v {
						t.Errorf("--json %s = %v, want %q", k, res[k], v)
					}
				}
			} else if stdout != "the goods" {
				t.Errorf("stdout = %q", stdout)
			}
			if n := len(rec.payments()); n != 1 {
				t.Errorf("%d payments, want 1", n)
			}
			noSecrets(t, rec, stdout, stderr, err)
		})
	}
}

// TestChatUpto: each turn paid with upto shows its maximum and what it was
// charged, and the total counts the charges.
func TestChatUpto(t *testing.T) {
	const completion = `{"choices":[{"message":{"content":"hi there"}}],"usage":{"prompt_tokens":3,"completion_tokens":2}}`
	up := fakeUptoOffer(fakeAsset, "50000")
	for _, tc := range []struct {
		name, amount string
		wantErr      string
		want         []string
	}{
		{name: "charged less", amount: "12345", want: []string{
			"[turn 1: upto: charged 0.012345 of at most 50000 atomic units = 0.05 in transaction " + fakeTx + "; total 0.012345 of 1.00; 3 prompt + 2 completion tokens]",
			"[turn 2: upto: charged 0.012345 of at most 50000 atomic units = 0.05 in transaction " + fakeTx + "; total 0.02469 of 1.00; 3 prompt + 2 completion tokens]",
			"chat: 2 turn(s); spent 0.02469 of 1.00",
		}},
		{name: "no amount", amount: "", want: []string{
			"[turn 1: upto: counted 0.05 of at most 50000 atomic units = 0.05 in transaction " + fakeTx + ", which did not say the amount; total 0.05 of 1.00",
		}},
		{name: "amount above the maximum", amount: "99999", want: []string{
			"[turn 1: upto: charged 0.05 of at most 50000 atomic units = 0.05 in transaction " + fakeTx + "; WARNING: client: PAYMENT-RESPONSE amount is not within the authorized maximum: 99999 is above the maximum 50000; counting the maximum; total 0.05 of 1.00",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, rec := fakeSeller(t, uptoSeller(t, tc.amount, completion, up))
			stdout, stderr, err := runBuyer(t, []string{"chat", "--url", srv.URL, "--model", "m", "--asset", fakeNetwork + "/" + fakeAsset}, buyerEnv(), "hello\nagain\n")
			if err != nil {
				t.Fatalf("chat: %v\nstderr:\n%s", err, stderr)
			}
			for _, want := range tc.want {
				if !strings.Contains(stderr, want) {
					t.Errorf("stderr lacks %q:\n%s", want, stderr)
				}
			}
			if !strings.Contains(stderr, "upto prefer") {
				t.Errorf("the policy line does not say upto is preferred:\n%s", stderr)
			}
			if n := len(rec.payments()); n != 2 {
				t.Errorf("%d payments, want 2", n)
			}
			noSecrets(t, rec, stdout, stderr, err)
		})
	}
}

// runApprove runs `wallet approve-permit2` with stdin, as a terminal when
// interactive.
func runApprove(tb testing.TB, args []string, getenv func(string) string, stdin string, interactive bool) (stdout, stderr string, err error) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(tb.Context(), 60*time.Second)
	defer cancel()
	var out, errOut syncBuffer
	err = runApprovePermit2(ctx, args, env{getenv: getenv, stdout: &out, stderr: &errOut}, strings.NewReader(stdin), interactive)
	return out.String(), errOut.String(), err
}

// TestWalletApprovePermit2BadInput: flags that are wrong fail before anything
// is read or sent, with an error naming the problem.
func TestWalletApprovePermit2BadInput(t *testing.T) {
	const rpc = "http://127.0.0.1:1/secret-key"
	asset := "--asset=" + fakeAsset
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		wantErr string
	}{
		{"no rpc", []string{asset}, nil, "--rpc is required"},
		{"no asset", []string{"--rpc", rpc}, nil, "--asset is required"},
		{"bad asset", []string{"--rpc", rpc, "--asset", "0x1234"}, nil, `--asset "0x1234"`},
		{"amount and unlimited", []string{"--rpc", rpc, asset, "--amount", "1", "--unlimited"}, nil, "give --amount or --unlimited, not both"},
		{"bad amount", []string{"--rpc", rpc, asset, "--amount", "1e6"}, nil, "--amount: amount"},
		{"negative amount", []string{"--rpc", rpc, asset, "--amount", "-1"}, nil, "--amount: amount"},
		{"too many decimals", []string{"--rpc", rpc, asset, "--amount", "0.0000001"}, nil, "has more than 6 decimals"},
		{"amount above uint256", []string{"--rpc", rpc, asset, "--amount", "1" + strings.Repeat("0", 78)}, nil, "does not fit in 256 bits"},
		{"bad decimals", []string{"--rpc", rpc, asset, "--decimals", "99"}, nil, "--decimals 99 is outside"},
		{"bad timeout", []string{"--rpc", rpc, asset, "--timeout", "0s"}, nil, "--timeout must be positive"},
		{"extra argument", []string{"--rpc", rpc, asset, "now"}, nil, "unexpected argument #1"},
		{"unknown flag", []string{"--rpc", rpc, asset, "--key", "0xabc"}, nil, "flag provided but not defined: -key"},
		{"no key", []string{"--rpc", rpc, asset, "--yes"}, nil, "no wallet key: use --key-file PATH or set LLM4AGENTS_WALLET_KEY"},
		{"bad key", []string{"--rpc", rpc, asset, "--yes"}, map[string]string{walletKeyEnv: "0x1234"}, "wallet key: not a 32-byte hex private key"},
		{"node down", []string{"--rpc", rpc, asset, "--yes", "--timeout", "5s"}, map[string]string{walletKeyEnv: buyerKeyHex}, "wallet approve-permit2: chain id:"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			stdout, stderr, err := runApprove(t, tc.args, envMap(tc.env), "y\n", true)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.wantErr)
			}
			for _, out := range []string{stdout, stderr, err.Error()} {
				if strings.Contains(out, "secret-key") {
					t.Errorf("the RPC URL was repeated: %q", out)
				}
				assertNoSecret(t, "output", out, devKeysHex()...)
			}
		})
	}
	for _, args := range [][]string{{"wallet"}, {"wallet", "approve"}} {
		_, _, err := runBounded(t, 10*time.Second, args, envMap(nil))
		if err == nil {
			t.Errorf("%q succeeded", args)
		}
	}
}

// approveChain is an anvil with Permit2 and a 6-decimal token, of which the
// wallet (dev account 1) holds 10 tokens.
type approveChain struct {
	a      *testchain.Anvil
	token  *contracts.EIP3009Token
	asset  common.Address
	wallet common.Address
	env    func(string) string
}

func newApproveChain(tb testing.TB) *approveChain {
	tb.Helper()
	a := testchain.StartAnvil(tb)
	ctx := tb.Context()
	auth, err := bind.NewKeyedTransactorWithChainID(testchain.DevKey(0), a.ChainID)
	if err != nil {
		tb.Fatal(err)
	}
	auth.Context = ctx
	addr, tx, token, err := contracts.DeployEIP3009Token(auth, a.Client, "USD Coin", "2", 6)
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := bind.WaitMined(ctx, a.Client, tx); err != nil {
		tb.Fatal(err)
	}
	wallet := testchain.DevAddress(1)
	if tx, err = token.Mint(auth, wallet, big.NewInt(10_000_000)); err != nil {
		tb.Fatal(err)
	}
	if _, err := bind.WaitMined(ctx, a.Client, tx); err != nil {
		tb.Fatal(err)
	}
	key := "0x" + hex.EncodeToString(crypto.FromECDSA(testchain.DevKey(1)))
	return &approveChain{a: a, token: token, asset: addr, wallet: wallet, env: envMap(map[string]string{walletKeyEnv: key})}
}

func (c *approveChain) allowance(tb testing.TB) *big.Int {
	tb.Helper()
	n, err := c.token.Allowance(&bind.CallOpts{Context: tb.Context()}, c.wallet, upto.Permit2Address)
	if err != nil {
		tb.Fatal(err)
	}
	return n
}

func (c *approveChain) nonce(tb testing.TB) uint64 {
	tb.Helper()
	n, err := c.a.Client.NonceAt(tb.Context(), c.wallet, nil)
	if err != nil {
		tb.Fatal(err)
	}
	return n
}

// TestWalletApprovePermit2: the approval is shown, asked for on a terminal,
// refused without one unless --yes, and sent once confirmed; what it sets is
// what Permit2 may then move.
func TestWalletApprovePermit2(t *testing.T) {
	c := newApproveChain(t)
	base := []string{"--rpc", c.a.URL, "--asset", c.asset.Hex()}
	steps := []struct {
		name          string
		args          []string
		stdin         string
		interactive   bool
		wantErr       string
		wantStdout    string
		wantStderr    []string
		wantAllowance *big.Int
		wantSent      bool
	}{
		{
			name: "no terminal, no --yes", interactive: false,
			wantErr:       "stdin is not a terminal to confirm on; run it in one, or pass --yes to send without asking; nothing was sent",
			wantStderr:    []string{"wallet     " + c.wallet.Hex(), "network    eip155:1337", "token      " + c.asset.Hex() + "\n", "spender    Permit2 0x000000000022D473030F116dDEE9F6B43aC78BA3", "amount     1000000 atomic units = 1.00", "allowance  0 atomic units = 0.00 today", "balance    10000000 atomic units = 10.00"},
			wantAllowance: big.NewInt(0),
		},
		{
			name: "declined", stdin: "n\n", interactive: true,
			wantErr: "not confirmed; nothing was sent", wantStderr: []string{"Send it? [y/N]"}, wantAllowance: big.NewInt(0),
		},
		{
			name: "empty answer", stdin: "", interactive: true,
			wantErr: "not confirmed; nothing was sent", wantAllowance: big.NewInt(0),
		},
		{
			name: "wrong decimals", args: []string{"--decimals", "18"}, stdin: "y\n", interactive: true,
			wantErr: "the token has 6 decimals, not 18; give --decimals 6", wantAllowance: big.NewInt(0),
		},
		{
			name: "confirmed", args: []string{"--amount", "0.5"}, stdin: "yes\n", interactive: true,
			wantStdout:    "approved in transaction 0x",
			wantStderr:    []string{"amount     500000 atomic units = 0.50", "Send it? [y/N] sent transaction 0x"},
			wantAllowance: big.NewInt(500_000), wantSent: true,
		},
		{
			name: "the same again", args: []string{"--amount", "500000"}, interactive: false,
			wantStdout: "Permit2 already has this allowance; nothing was sent.", wantAllowance: big.NewInt(500_000),
		},
		{
			name: "unlimited with --yes", args: []string{"--unlimited", "--yes"}, interactive: false,
			wantStdout:    "Permit2 may move unlimited (2^256-1) of " + c.asset.Hex(),
			wantStderr:    []string{"amount     unlimited (2^256-1)", "allowance  500000 atomic units = 0.50 today"},
			wantAllowance: maxUint256, wantSent: true,
		},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			before := c.nonce(t)
			stdout, stderr, err := runApprove(t, append(append([]string(nil), base...), st.args...), c.env, st.stdin, st.interactive)
			switch {
			case st.wantErr == "" && err != nil:
				t.Fatalf("approve-permit2: %v\nstderr:\n%s", err, stderr)
			case st.wantErr != "" && (err == nil || !strings.Contains(err.Error(), st.wantErr)):
				t.Errorf("err = %v, want it to contain %q", err, st.wantErr)
			}
			if !strings.Contains(stdout, st.wantStdout) {
				t.Errorf("stdout = %q, want it to contain %q", stdout, st.wantStdout)
			}
			for _, want := range st.wantStderr {
				if !strings.Contains(stderr, want) {
					t.Errorf("stderr lacks %q:\n%s", want, stderr)
				}
			}
			if got := c.allowance(t); got.Cmp(st.wantAllowance) != 0 {
				t.Errorf("allowance = %s, want %s", got, st.wantAllowance)
			}
			if sent := c.nonce(t) != before; sent != st.wantSent {
				t.Errorf("a transaction was sent: %v, want %v", sent, st.wantSent)
			}
			assertNoSecret(t, "output", stdout+stderr, devKeysHex()...)
		})
	}

	t.Run("no contract at the asset", func(t *testing.T) {
		_, _, err := runApprove(t, []string{"--rpc", c.a.URL, "--asset", fakePayTo, "--yes"}, c.env, "", false)
		if err == nil || !strings.Contains(err.Error(), "no contract at "+fakePayTo+" on chain 1337") {
			t.Errorf("err = %v", err)
		}
	})
}

// TestPayDryRunPermit2: a dry run says whether the upto option it would pay
// needs the Permit2 approval first, reading the allowance with --rpc, and
// says when it cannot tell.
func TestPayDryRunPermit2(t *testing.T) {
	c := newApproveChain(t)
	up := fakeUptoOffer(c.asset.Hex(), "50000")
	srv, rec := fakeSeller(t, uptoSeller(t, "1", "the goods", up))
	asset := "--asset=" + fakeNetwork + "/" + c.asset.Hex()
	url := srv.URL + "/paid"
	run := func(t *testing.T, args []string, getenv func(string) string) string {
		t.Helper()
		stdout, stderr, err := runBuyer(t, append(append([]string{"pay", "--dry-run", asset}, args...), url), getenv, "")
		if err != nil {
			t.Fatalf("pay --dry-run: %v\nstderr:\n%s", err, stderr)
		}
		for _, want := range []string{
			"[0] upto on eip155:1337",
			"    maximum  50000 atomic units = 0.05 (upto: the server charges what the call costs, at most this)",
			"    settles  through Permit2, by facilitator " + fakeFacilitator + " only",
			"    verdict  PAY: would be paid",
			"dry run: nothing was signed or paid.",
		} {
			if !strings.Contains(stdout, want) {
				t.Errorf("stdout lacks %q:\n%s", want, stdout)
			}
		}
		return stdout
	}
	hint := "run llm4agents wallet approve-permit2 --rpc URL --asset " + c.asset.Hex()

	t.Run("without --rpc", func(t *testing.T) {
		out := run(t, nil, envMap(nil))
		if !strings.Contains(out, "permit2: upto pays through Permit2, which needs the wallet's one-time approval of the token; cannot tell whether it is there: give --rpc to read the allowance; if it is not, "+hint) {
			t.Errorf("stdout:\n%s", out)
		}
	})
	t.Run("without a key", func(t *testing.T) {
		out := run(t, []string{"--rpc", c.a.URL}, envMap(nil))
		if !strings.Contains(out, "cannot tell whether it is there: no wallet key to name the owner") {
			t.Errorf("stdout:\n%s", out)
		}
	})
	t.Run("node down", func(t *testing.T) {
		out := run(t, []string{"--rpc", "http://127.0.0.1:1/secret-key"}, c.env)
		if !strings.Contains(out, "cannot tell whether it is there: --rpc:") || strings.Contains(out, "secret-key") {
			t.Errorf("stdout:\n%s", out)
		}
	})
	t.Run("needs the approval", func(t *testing.T) {
		out := run(t, []string{"--rpc", c.a.URL}, c.env)
		want := "permit2: the upto option needs a Permit2 approval first: " + c.wallet.Hex() + " may move 0 atomic units = 0.00 of " + c.asset.Hex() + ", less than the maximum 50000 atomic units = 0.05; " + hint
		if !strings.Contains(out, want) {
			t.Errorf("stdout lacks %q:\n%s", want, out)
		}
		stdout, _, err := runBuyer(t, []string{"pay", "--dry-run", "--json", asset, "--rpc", c.a.URL, url}, c.env, "")
		if err != nil {
			t.Fatal(err)
		}
		var res struct {
			Permit2 approvalCheck `json:"permit2"`
		}
		if err := json.Unmarshal([]byte(stdout), &res); err != nil {
			t.Fatal(err)
		}
		if res.Permit2.Needed == nil || !*res.Permit2.Needed || res.Permit2.Allowance != "0" || res.Permit2.Maximum != "50000" || res.Permit2.Owner != c.wallet.Hex() {
			t.Errorf("--json permit2 = %+v", res.Permit2)
		}
	})
	t.Run("covered after the approval", func(t *testing.T) {
		if _, stderr, err := runApprove(t, []string{"--rpc", c.a.URL, "--asset", c.asset.Hex(), "--amount", "0.05", "--yes"}, c.env, "", false); err != nil {
			t.Fatalf("approve: %v\n%s", err, stderr)
		}
		out := run(t, []string{"--rpc", c.a.URL}, c.env)
		want := "permit2: Permit2 may move 50000 atomic units = 0.05 of " + c.asset.Hex() + " from " + c.wallet.Hex() + ", which covers the maximum 50000 atomic units = 0.05"
		if !strings.Contains(out, want) {
			t.Errorf("stdout lacks %q:\n%s", want, out)
		}
	})
	t.Run("another chain", func(t *testing.T) {
		other := fakeUptoOffer(c.asset.Hex(), "50000")
		other.Network = "eip155:8453"
		srv, _ := fakeSeller(t, uptoSeller(t, "1", "", other))
		stdout, stderr, err := runBuyer(t, []string{"pay", "--dry-run", "--asset=eip155:8453/" + c.asset.Hex(), "--rpc", c.a.URL, srv.URL}, c.env, "")
		if err != nil || !strings.Contains(stdout, "cannot tell whether it is there: the --rpc node is chain 1337, the offer is on eip155:8453") {
			t.Errorf("pay --dry-run: %v\nstdout:\n%s\nstderr:\n%s", err, stdout, stderr)
		}
	})
	t.Run("--rpc without --dry-run, node down", func(t *testing.T) {
		_, _, err := runBuyer(t, []string{"pay", asset, "--rpc", "http://127.0.0.1:1/secret-path", url}, c.env, "")
		if err == nil || !strings.Contains(err.Error(), "pay: --rpc:") || strings.Contains(err.Error(), "secret-path") {
			t.Errorf("err = %v, want a --rpc error that does not repeat the URL's path", err)
		}
	})
	if n := len(rec.payments()); n != 0 {
		t.Errorf("a dry run sent %d payments", n)
	}
}

// TestPayUptoWithoutApproval: the official server answers an upto payment
// whose Permit2 allowance is missing with 412 and permit2_allowance_required;
// pay and chat say so, and how to fix it, and count nothing.
func TestPayUptoWithoutApproval(t *testing.T) {
	up := fakeUptoOffer(fakeAsset, "50000")
	answer := func(w http.ResponseWriter, r *http.Request, paid bool) {
		h, err := x402.EncodeHeader(x402.PaymentRequired{X402Version: 2, Error: "permit2_allowance_required",
			Resource: &x402.ResourceInfo{URL: "http://" + r.Host + r.URL.Path}, Accepts: []x402.PaymentRequirements{up}})
		if err != nil {
			t.Error(err)
		}
		w.Header().Set(x402.HeaderPaymentRequired, h)
		if paid {
			w.WriteHeader(http.StatusPreconditionFailed)
			return
		}
		w.WriteHeader(http.StatusPaymentRequired)
	}
	hint := "the wallet has not approved Permit2 to move this token (permit2_allowance_required); nothing was charged; run llm4agents wallet approve-permit2 --rpc URL --asset " + fakeAsset
	srv, rec := fakeSeller(t, answer)
	stdout, stderr, err := runBuyer(t, []string{"pay", "--asset=" + fakeNetwork + "/" + fakeAsset, srv.URL}, buyerEnv(), "")
	if err == nil || err.Error() != "pay: the server answered 412 Precondition Failed: "+hint {
		t.Errorf("err = %v", err)
	}
	if want := "412 Precondition Failed; upto payment of at most 50000 atomic units = 0.05 to " + fakePayTo + " on eip155:1337: not settled (no PAYMENT-RESPONSE); " + hint + "; spent 0.00 of 1.00"; !strings.Contains(stderr, want) {
		t.Errorf("stderr lacks %q:\n%s", want, stderr)
	}
	noSecrets(t, rec, stdout, stderr, err)

	_, stderr, err = runBuyer(t, []string{"chat", "--url", srv.URL, "--model", "m", "--asset", fakeNetwork + "/" + fakeAsset}, buyerEnv(), "hello\n")
	if err == nil || !strings.Contains(stderr, hint) || !strings.Contains(stderr, "chat: turn 1: 412 Precondition Failed") {
		t.Errorf("chat: %v\nstderr:\n%s", err, stderr)
	}
}
