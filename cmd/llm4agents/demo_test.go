package main

import (
	"context"
	"encoding/hex"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/crypto"

	"github.com/llm4agents/llm4agents/internal/testchain"
)

// demoLines are what the demo must print, in order: the price of an unpaid
// call, a paid completion settled on chain, a paid stream with its usage, an
// upto call paying what it used (a few hundred atomic units of a one-cent
// maximum), a credit call whose receipt is in the log, the log's anchor on
// chain, and the totals.
var demoLines = []*regexp.Regexp{
	regexp.MustCompile(`(?m)^1\. local chain eip155:1337, test USDC \(EIP-3009\) at 0x[0-9a-fA-F]{40}; the buyer 0x[0-9a-fA-F]{40} holds 10\.00 USDC and approved Permit2 for 1\.00 \(for upto\)$`),
	regexp.MustCompile(`(?m)^2\. the gateway is serving on http://127\.0\.0\.1:[1-9][0-9]* with the demo model`),
	regexp.MustCompile(`(?m)^3\. unpaid call: 402 Payment Required, 10000 atomic units \(0\.010000 USDC\) to 0xa0Ee7A142d267C1f36714E4a8F75612F20a79720, valid 300s$`),
	regexp.MustCompile(`(?m)^4\. paid call: 200, settled in transaction (0x[0-9a-f]{64})$`),
	regexp.MustCompile(`(?m)^   answer: "This is the llm4agents demo model`),
	regexp.MustCompile(`(?m)^   usage: [1-9][0-9]* prompt \+ [1-9][0-9]* completion tokens; the seller's balance went 0\.000000 -> 0\.010000 USDC$`),
	regexp.MustCompile(`(?m)^5\. paid stream: settled in transaction (0x[0-9a-f]{64}) before the first byte; streaming:$`),
	regexp.MustCompile(`(?m)^   This is the llm4agents demo model`),
	regexp.MustCompile(`(?m)^   usage: [1-9][0-9]* prompt \+ [1-9][0-9]* completion tokens$`),
	regexp.MustCompile(`(?m)^6\. upto call: the buyer authorized up to 0\.010000 USDC \(the quote for 4096 tokens\);$`),
	regexp.MustCompile(`(?m)^   the call used fewer and paid 0\.000[1-9][0-9]{2} USDC \(the client counts 0\.000[1-9][0-9]{2}\), settled in transaction (0x[0-9a-f]{64})$`),
	regexp.MustCompile(`(?m)^7\. credits: the buyer topped up 0\.100000 USDC \(transaction 0x[0-9a-f]{64}\), signed in with the wallet and made an API key;$`),
	regexp.MustCompile(`(?m)^   a call paid from credit was charged 0\.0[0-9]{5} USDC, with a signed receipt \(request 0x[0-9a-f]{64}\)$`),
	regexp.MustCompile(`(?m)^8\. receipt log: all 5 receipts of the buyer \(exact 2, upto 1, credits 1, top-up 1\) are in the public log$`),
	regexp.MustCompile(`(?m)^   127\.0\.0\.1:[0-9]+/receipts \(5 receipts\), each inclusion proof checked against the checkpoint key the gateway$`),
	regexp.MustCompile(`(?m)^   anchored on chain: size 5, root 0x[0-9a-f]{64}, transaction 0x[0-9a-f]{64}$`),
	regexp.MustCompile(`(?m)^9\. the buyer paid 0\.120[1-9][0-9]{2} USDC in all; the seller holds 0\.120[1-9][0-9]{2} USDC\. done\.$`),
}

// devKeysHex are the dev keys as hex; none may ever be printed.
func devKeysHex() []string {
	var keys []string
	for i := range 10 {
		keys = append(keys, hex.EncodeToString(crypto.FromECDSA(testchain.DevKey(i))))
	}
	return keys
}

// TestDemo runs the embedded demo end to end: the whole gateway on a local
// chain, and a buyer that pays for one completion and one stream. With -v the
// gateway and the facilitator log to stderr, which must not carry any key.
func TestDemo(t *testing.T) {
	for _, args := range [][]string{{"demo"}, {"demo", "-v"}} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			tmp := t.TempDir()
			t.Setenv("TMPDIR", tmp) // where the demo's store goes, to see it removed
			stdout, stderr, err := runBounded(t, 60*time.Second, args, envMap(nil))
			if err != nil {
				t.Fatalf("demo: %v\nstdout:\n%s\nstderr:\n%s", err, stdout, stderr)
			}
			at := 0
			var txs []string
			for _, re := range demoLines {
				loc := re.FindStringSubmatchIndex(stdout[at:])
				if loc == nil {
					t.Errorf("stdout lacks, after what came before, %s\nstdout:\n%s", re, stdout)
					continue
				}
				if len(loc) == 4 {
					txs = append(txs, stdout[at+loc[2]:at+loc[3]])
				}
				at += loc[1]
			}
			if len(txs) == 3 && (txs[0] == txs[1] || txs[1] == txs[2] || txs[0] == txs[2]) {
				t.Errorf("the calls name transactions %v, want three settlements", txs)
			}
			if len(args) == 1 && stderr != "" {
				t.Errorf("stderr without -v = %q, want nothing", stderr)
			}
			if len(args) == 2 {
				for _, want := range []string{"component=gateway", "component=facilitator", "msg=settled"} {
					if !strings.Contains(stderr, want) {
						t.Errorf("stderr with -v lacks %q:\n%s", want, stderr)
					}
				}
			}
			keys := devKeysHex()
			assertNoSecret(t, "stdout", stdout, keys...)
			assertNoSecret(t, "stderr", stderr, keys...)
			if left, err := os.ReadDir(tmp); err != nil || len(left) != 0 {
				t.Errorf("the demo left %v in its temporary directory (%v)", left, err)
			}
		})
	}
}

// TestDemoCanceled: a demo whose context has already ended stops at once with
// an error instead of hanging or claiming success.
func TestDemoCanceled(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	var out, errOut syncBuffer
	done := make(chan error, 1)
	go func() { done <- run(ctx, []string{"demo"}, envMap(nil), &out, &errOut) }()
	select {
	case err := <-done:
		if err == nil {
			t.Errorf("demo with a canceled context returned nil; stdout:\n%s", out.String())
		}
		if strings.Contains(out.String(), "done.") {
			t.Errorf("canceled demo claims to be done:\n%s", out.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("demo with a canceled context still running after 30s")
	}
}

// TestDemoCanceledWhileServing: canceling the demo once its gateway serves
// stops it promptly with an error, not a claim of success.
func TestDemoCanceledWhileServing(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var out, errOut syncBuffer
	done := make(chan error, 1)
	go func() { done <- run(ctx, []string{"demo"}, envMap(nil), &out, &errOut) }()
	deadline := time.After(30 * time.Second)
	for !strings.Contains(out.String(), "2. the gateway is serving") {
		select {
		case err := <-done:
			t.Fatalf("demo ended before serving: %v\nstdout:\n%s", err, out.String())
		case <-deadline:
			t.Fatalf("demo not serving after 30s:\n%s", out.String())
		case <-time.After(time.Millisecond):
		}
	}
	cancel()
	start := time.Now()
	select {
	case err := <-done:
		if err == nil {
			t.Errorf("demo canceled while serving returned nil; stdout:\n%s", out.String())
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("demo took %s to stop after cancel", d)
		}
		if strings.Contains(out.String(), "done.") {
			t.Errorf("canceled demo claims to be done:\n%s", out.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("demo still running 30s after cancel")
	}
}
