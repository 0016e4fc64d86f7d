//go:build !l4a_unsafe_noclaim

package paywall

import (
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/internal/store/sqlite"
)

// TestClaimSwitchIsInertInTheDefaultBuild: LLM4AGENTS_UNSAFE_NO_CLAIM=1 only
// switches the claim off in a binary built with -tags l4a_unsafe_noclaim. In
// every other build the paywall claims in the real store, and a second claim
// on one authorization loses.
func TestClaimSwitchIsInertInTheDefaultBuild(t *testing.T) {
	t.Setenv("LLM4AGENTS_UNSAFE_NO_CLAIM", "1")
	db, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "gw.db"), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	s := &Paywall{payments: db}
	if claimSwitchedOff() {
		t.Fatal("claimSwitchedOff() = true in the default build")
	}
	if s.claims() != store.Payments(db) {
		t.Fatalf("claims() = %T, want the paywall's own store", s.claims())
	}
	c := store.PaymentClaim{Key: "eip155:1337/aa/bb/cc", Network: "eip155:1337", Payer: "0xbb", Amount: "10000", Owner: "a",
		ExpiresAt: time.Now().Add(time.Hour)}
	_, first, err := s.claims().ClaimPayment(t.Context(), c, time.Minute)
	if err != nil || !first {
		t.Fatalf("first claim: held %t, %v", first, err)
	}
	c.Owner = "b"
	got, second, err := s.claims().ClaimPayment(t.Context(), c, time.Minute)
	if err != nil || second || got.Owner != "a" {
		t.Fatalf("second claim: held %t, owner %q, %v; want it refused, held by a", second, got.Owner, err)
	}
}
