package sqlite_test

import (
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/llm4agents/llm4agents/internal/store"
)

// testClock is a settable clock for the store, safe for concurrent use.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *testClock) Advance(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	return c.now
}

func paymentRows(tb testing.TB, path string) int {
	tb.Helper()
	var n int
	if err := raw(tb, path).QueryRowContext(tb.Context(), `SELECT COUNT(*) FROM payments`).Scan(&n); err != nil {
		tb.Fatal(err)
	}
	return n
}

// TestPurgeExpiredPayments checks that the purge deletes expired records only,
// soonest expired first, at most limit at a time, and that fences stay unique
// for a key claimed again after its record was purged.
func TestPurgeExpiredPayments(t *testing.T) {
	ctx := t.Context()
	clk := &testClock{now: time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)}
	path := filepath.Join(t.TempDir(), "llm4agents.db")
	db := open(t, path, clk.Now)
	t0 := clk.Now()

	var maxFence int64
	claim := func(key string, expires time.Time) store.PaymentClaim {
		t.Helper()
		c, ok, err := db.ClaimPayment(ctx, store.PaymentClaim{Key: key, Amount: "1", Owner: "o", ExpiresAt: expires}, time.Minute)
		if err != nil || !ok {
			t.Fatalf("ClaimPayment(%q) = %v, %v", key, ok, err)
		}
		maxFence = max(maxFence, c.Fence)
		return c
	}
	// k1..k5 expire a minute apart, in states held, pending, settled, ...
	states := []store.PaymentState{store.PaymentHeld, store.PaymentPending, store.PaymentSettled}
	for i := 1; i <= 5; i++ {
		key := fmt.Sprintf("k%d", i)
		c := claim(key, t0.Add(time.Duration(i)*time.Minute))
		if st := states[i%len(states)]; st != store.PaymentHeld {
			if err := db.UpdatePayment(ctx, key, c.Fence, st, ""); err != nil {
				t.Fatal(err)
			}
		}
	}
	claim("live", t0.Add(time.Hour))

	if n, err := db.PurgeExpiredPayments(ctx, 10); n != 0 || err != nil {
		t.Errorf("PurgeExpiredPayments() before any expiry = %d, %v; want 0, nil", n, err)
	}
	// k1, k2 and k3 (which expires at this very millisecond) have expired,
	// and count as absent before they are purged.
	clk.Advance(3 * time.Minute)
	if _, err := db.Payment(ctx, "k3"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Payment(expired k3) = %v, want ErrNotFound", err)
	}
	if got := paymentRows(t, path); got != 6 {
		t.Errorf("%d rows before the purge, want 6", got)
	}
	if n, err := db.PurgeExpiredPayments(ctx, 2); n != 2 || err != nil {
		t.Errorf("PurgeExpiredPayments(2) = %d, %v; want 2, nil", n, err)
	}
	// Soonest expired first: k3 is the one left.
	for _, key := range []string{"k1", "k2"} {
		var one int
		if err := raw(t, path).QueryRowContext(ctx, `SELECT 1 FROM payments WHERE payment_key = ?`, key).Scan(&one); err == nil {
			t.Errorf("%s still in the table after the first purge", key)
		}
	}
	if n, err := db.PurgeExpiredPayments(ctx, 2); n != 1 || err != nil {
		t.Errorf("second PurgeExpiredPayments(2) = %d, %v; want 1, nil", n, err)
	}
	if n, err := db.PurgeExpiredPayments(ctx, 2); n != 0 || err != nil {
		t.Errorf("third PurgeExpiredPayments(2) = %d, %v; want 0, nil", n, err)
	}
	if got := paymentRows(t, path); got != 3 {
		t.Errorf("%d rows after the purge, want 3 (k4, k5, live)", got)
	}
	for _, key := range []string{"k4", "k5", "live"} {
		if _, err := db.Payment(ctx, key); err != nil {
			t.Errorf("Payment(%q) after the purge: %v", key, err)
		}
	}
	// A purged key claimed again gets a fence never handed out before.
	before := maxFence
	if c := claim("k1", clk.Now().Add(time.Hour)); c.Fence <= before {
		t.Errorf("claim after purge got fence %d, want more than every earlier one (%d)", c.Fence, before)
	}

	for _, limit := range []int{0, -1} {
		if n, err := db.PurgeExpiredPayments(ctx, limit); err == nil {
			t.Errorf("PurgeExpiredPayments(%d) = %d, nil; want an error", limit, n)
		}
	}
}

// TestClaimPaymentRoundsExpiryUp checks that an expiry between two
// milliseconds is kept to the later one, so a record never expires early.
func TestClaimPaymentRoundsExpiryUp(t *testing.T) {
	ctx := t.Context()
	clk := &testClock{now: time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)}
	db := open(t, filepath.Join(t.TempDir(), "llm4agents.db"), clk.Now)
	for i, tc := range []struct{ after, want time.Duration }{
		{1500 * time.Microsecond, 2 * time.Millisecond},
		{500 * time.Microsecond, time.Millisecond}, // after now, if by less than a millisecond
		{time.Nanosecond, time.Millisecond},
		{3 * time.Millisecond, 3 * time.Millisecond},
	} {
		key := fmt.Sprintf("k%d", i)
		c, ok, err := db.ClaimPayment(ctx, store.PaymentClaim{Key: key, Amount: "1", ExpiresAt: clk.Now().Add(tc.after)}, time.Minute)
		if err != nil || !ok {
			t.Fatalf("ClaimPayment(expires in %v) = %v, %v", tc.after, ok, err)
		}
		if want := clk.Now().Add(tc.want); !c.ExpiresAt.Equal(want) {
			t.Errorf("expires in %v: ExpiresAt = %v, want %v", tc.after, c.ExpiresAt, want)
		}
	}
}
