package main

import (
	"context"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/crypto"

	"github.com/llm4agents/llm4agents/internal/testchain"
)

// TestDemo runs the embedded demo end to end: one payment succeeds and its
// replay is refused. With -v the facilitator logs to stderr, which must not
// carry the buyer's or the facilitator's key.
func TestDemo(t *testing.T) {
	for _, args := range [][]string{{"demo"}, {"demo", "-v"}} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			stdout, stderr, err := runBounded(t, 60*time.Second, args, envMap(nil))
			if err != nil {
				t.Fatalf("demo: %v\nstdout:\n%s\nstderr:\n%s", err, stdout, stderr)
			}
			for _, want := range []string{
				"/verify: valid",
				"/settle: success",
				"the seller received 0.010000 USDC",
				"refused (invalid_exact_evm_nonce_already_used)",
				"done.",
			} {
				if !strings.Contains(stdout, want) {
					t.Errorf("stdout lacks %q:\n%s", want, stdout)
				}
			}
			if len(args) == 1 && stderr != "" {
				t.Errorf("stderr without -v = %q, want nothing", stderr)
			}
			if len(args) == 2 && !strings.Contains(stderr, "component=facilitator") {
				t.Errorf("stderr with -v lacks the facilitator's logs:\n%s", stderr)
			}
			for _, i := range []int{demoBuyer, demoFacilitator} {
				key := hex.EncodeToString(crypto.FromECDSA(testchain.DevKey(i)))
				assertNoSecret(t, "stdout", stdout, key)
				assertNoSecret(t, "stderr", stderr, key)
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
