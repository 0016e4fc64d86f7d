//go:build l4a_unsafe_noclaim

package paywall

import (
	"errors"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/internal/store/sqlite"
)

// replaceNoClaim sets noClaim for the test (it is read from the environment
// once, at start).
func replaceNoClaim(t *testing.T, v bool) {
	old := noClaim
	noClaim = v
	t.Cleanup(func() { noClaim = old })
}

// TestNoClaimSwitch: in the l4a_unsafe_noclaim build, the switch off means
// the real store; on, every claim on one authorization is won, each with a
// fence of its own, and nothing is written.
func TestNoClaimSwitch(t *testing.T) {
	db, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "gw.db"), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	s := &Paywall{payments: db}
	c := store.PaymentClaim{Key: "eip155:1337/aa/bb/cc", Network: "eip155:1337", Payer: "0xbb", Amount: "10000", Owner: "a",
		ExpiresAt: time.Now().Add(time.Hour)}

	replaceNoClaim(t, false)
	if claimSwitchedOff() || s.claims() != store.Payments(db) {
		t.Fatalf("switch off: claims() = %T, want the paywall's own store", s.claims())
	}

	replaceNoClaim(t, true)
	if !claimSwitchedOff() {
		t.Fatal("claimSwitchedOff() = false with the switch on")
	}
	fences := map[int64]bool{}
	for range 3 {
		got, held, err := s.claims().ClaimPayment(t.Context(), c, time.Minute)
		if err != nil || !held || got.State != store.PaymentHeld || got.Key != c.Key {
			t.Fatalf("claim with the switch on: %+v, held %t, %v; want held", got, held, err)
		}
		if fences[got.Fence] {
			t.Fatalf("fence %d handed out twice", got.Fence)
		}
		fences[got.Fence] = true
		if err := s.claims().UpdatePayment(t.Context(), c.Key, got.Fence, store.PaymentSettled, "0x01"); err != nil {
			t.Fatalf("update: %v", err)
		}
		if err := s.claims().StagePayment(t.Context(), c.Key, got.Fence, store.StagedResponse{Status: 200}); err != nil {
			t.Fatalf("stage: %v", err)
		}
		if err := s.claims().ReleasePayment(t.Context(), c.Key, got.Fence); err != nil {
			t.Fatalf("release: %v", err)
		}
	}
	if _, err := db.Payment(t.Context(), c.Key); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the store holds a claim after the switched-off ones: %v", err)
	}
}
