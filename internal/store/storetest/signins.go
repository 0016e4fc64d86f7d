package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/llm4agents/llm4agents/internal/store"
)

// OpenSignIns opens two independent handles (separate connection pools or
// clients, as two processes would have) on one new, empty database. Both must
// take the time from now for every expiry and timestamp. It registers the
// handles' cleanup with t.Cleanup and stops the test with t.Fatal if
// anything fails.
type OpenSignIns func(t *testing.T, now func() time.Time) (a, b store.SignIns)

// RunSignIns runs the store.SignIns conformance suite against the backend
// that open opens (RunKeys runs it too). Every subtest opens a database of
// its own; handle a writes, handle b reads back.
//
// Beyond the interface's comments, the suite pins down: times are kept to the
// millisecond; a nonce or session expires at exactly its creation plus the
// TTL rounded up to the millisecond, by the store's clock, whether or not
// anything swept it yet; an expired nonce may be put again; invalid arguments
// fail with an error that is no sentinel (except ConsumeNonce and Session,
// which answer ErrNotFound for a value they could never have stored).
func RunSignIns(t *testing.T, open OpenSignIns) {
	tests := []struct {
		name string
		run  func(*signInEnv)
	}{
		{"Nonce/ConsumeOnce", testNonceOnce},
		{"Nonce/Expiry", testNonceExpiry},
		{"Nonce/InvalidArguments", testNonceInvalid},
		{"Session/Lifecycle", testSessionLifecycle},
		{"Sweep", testSweepAuth},
		{"Race/ConsumeNonce", testRaceConsumeNonce},
		{"SignIn/Closed", testSignInsClosed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := &clock{now: start}
			a, b := open(t, c.Now)
			tc.run(&signInEnv{t: t, ctx: t.Context(), clock: c, a: a, b: b})
		})
	}
}

type signInEnv struct {
	t     *testing.T
	ctx   context.Context
	clock *clock
	a, b  store.SignIns
}

const nonce1 = "n0nce0000000000000001"

func testNonceOnce(e *signInEnv) {
	if err := e.a.PutNonce(e.ctx, nonce1, 5*time.Minute); err != nil {
		e.t.Fatalf("PutNonce(): %v", err)
	}
	if err := e.a.PutNonce(e.ctx, nonce1, 5*time.Minute); !errors.Is(err, store.ErrConflict) {
		e.t.Errorf("PutNonce() again = %v, want ErrConflict", err)
	}
	if err := e.b.ConsumeNonce(e.ctx, "n0nce0000000000000002"); !errors.Is(err, store.ErrNotFound) {
		e.t.Errorf("ConsumeNonce(never issued) = %v, want ErrNotFound", err)
	}
	if err := e.b.ConsumeNonce(e.ctx, nonce1); err != nil {
		e.t.Fatalf("ConsumeNonce(): %v", err)
	}
	if err := e.a.ConsumeNonce(e.ctx, nonce1); !errors.Is(err, store.ErrNotFound) {
		e.t.Errorf("ConsumeNonce() again = %v, want ErrNotFound", err)
	}
}

func testNonceExpiry(e *signInEnv) {
	// The TTL is rounded up to the millisecond: the nonce is good until
	// start + 2 ms, exclusive.
	if err := e.a.PutNonce(e.ctx, nonce1, time.Millisecond+time.Nanosecond); err != nil {
		e.t.Fatal(err)
	}
	if err := e.a.PutNonce(e.ctx, "n0nce0000000000000002", time.Minute); err != nil {
		e.t.Fatal(err)
	}
	e.clock.Advance(time.Millisecond)
	if err := e.b.ConsumeNonce(e.ctx, "n0nce0000000000000002"); err != nil {
		e.t.Fatalf("ConsumeNonce() before expiry: %v", err)
	}
	e.clock.Advance(time.Millisecond)
	if err := e.b.ConsumeNonce(e.ctx, nonce1); !errors.Is(err, store.ErrNotFound) {
		e.t.Errorf("ConsumeNonce() at expiry = %v, want ErrNotFound", err)
	}
	// An expired nonce may be issued again.
	if err := e.a.PutNonce(e.ctx, nonce1, time.Minute); err != nil {
		e.t.Errorf("PutNonce() of an expired nonce: %v", err)
	}
}

func testNonceInvalid(e *signInEnv) {
	for _, n := range []string{"", "short", "has space in it", "n0nce-with-dash", string(make([]byte, 129))} {
		if err := e.a.PutNonce(e.ctx, n, time.Minute); err == nil || errors.Is(err, store.ErrConflict) {
			e.t.Errorf("PutNonce(%q) = %v, want an error that is no sentinel", n, err)
		}
		if err := e.a.ConsumeNonce(e.ctx, n); !errors.Is(err, store.ErrNotFound) {
			e.t.Errorf("ConsumeNonce(%q) = %v, want ErrNotFound", n, err)
		}
	}
	for _, ttl := range []time.Duration{0, -time.Second, store.MaxAuthTTL + time.Millisecond} {
		if err := e.a.PutNonce(e.ctx, nonce1, ttl); err == nil {
			e.t.Errorf("PutNonce(ttl %v) succeeded", ttl)
		}
	}
}

func testSessionLifecycle(e *signInEnv) {
	h := hashOf("session token")
	s, err := e.a.CreateSession(e.ctx, h, alice, 15*time.Minute)
	if err != nil {
		e.t.Fatalf("CreateSession(): %v", err)
	}
	want := store.Session{Hash: h, Owner: alice, CreatedAt: start, ExpiresAt: start.Add(15 * time.Minute)}
	if diff := cmp.Diff(want, s); diff != "" {
		e.t.Errorf("CreateSession() mismatch (-want +got):\n%s", diff)
	}
	if _, err := e.a.CreateSession(e.ctx, h, bob, time.Minute); !errors.Is(err, store.ErrConflict) {
		e.t.Errorf("CreateSession(same hash) = %v, want ErrConflict", err)
	}
	got, err := e.b.Session(e.ctx, h)
	if err != nil {
		e.t.Fatalf("Session(): %v", err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		e.t.Errorf("Session() mismatch (-want +got):\n%s", diff)
	}
	for _, bad := range []string{"", "nothex", hashOf("other")} {
		if _, err := e.b.Session(e.ctx, bad); !errors.Is(err, store.ErrNotFound) {
			e.t.Errorf("Session(%q) = %v, want ErrNotFound", bad, err)
		}
	}
	e.clock.Advance(15*time.Minute - time.Millisecond)
	if _, err := e.b.Session(e.ctx, h); err != nil {
		e.t.Errorf("Session() just before expiry: %v", err)
	}
	e.clock.Advance(time.Millisecond)
	if _, err := e.b.Session(e.ctx, h); !errors.Is(err, store.ErrNotFound) {
		e.t.Errorf("Session() at expiry = %v, want ErrNotFound", err)
	}

	h2 := hashOf("second")
	if _, err := e.a.CreateSession(e.ctx, h2, alice, time.Minute); err != nil {
		e.t.Fatal(err)
	}
	if err := e.a.DeleteSession(e.ctx, h2); err != nil {
		e.t.Fatalf("DeleteSession(): %v", err)
	}
	if _, err := e.b.Session(e.ctx, h2); !errors.Is(err, store.ErrNotFound) {
		e.t.Errorf("Session() after delete = %v, want ErrNotFound", err)
	}
	if err := e.a.DeleteSession(e.ctx, h2); err != nil {
		e.t.Errorf("DeleteSession() again: %v", err)
	}
	for name, f := range map[string]func() error{
		"bad hash":  func() error { _, err := e.a.CreateSession(e.ctx, "x", alice, time.Minute); return err },
		"bad owner": func() error { _, err := e.a.CreateSession(e.ctx, hashOf("y"), "0xABC", time.Minute); return err },
		"zero ttl":  func() error { _, err := e.a.CreateSession(e.ctx, hashOf("z"), alice, 0); return err },
		"long ttl": func() error {
			_, err := e.a.CreateSession(e.ctx, hashOf("z"), alice, store.MaxAuthTTL+time.Millisecond)
			return err
		},
	} {
		if err := f(); err == nil || errors.Is(err, store.ErrConflict) {
			e.t.Errorf("CreateSession(%s) = %v, want an error that is no sentinel", name, err)
		}
	}
}

func testSweepAuth(e *signInEnv) {
	for i := range 5 {
		if err := e.a.PutNonce(e.ctx, fmt.Sprintf("expiring%04d", i), time.Minute); err != nil {
			e.t.Fatal(err)
		}
		if _, err := e.a.CreateSession(e.ctx, hashOf(fmt.Sprint("expiring", i)), alice, time.Minute); err != nil {
			e.t.Fatal(err)
		}
	}
	if err := e.a.PutNonce(e.ctx, "keeping0001", time.Hour); err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.a.CreateSession(e.ctx, hashOf("keeping"), alice, time.Hour); err != nil {
		e.t.Fatal(err)
	}
	if n, err := e.b.SweepAuth(e.ctx, 10); err != nil || n != 0 {
		e.t.Errorf("SweepAuth() before expiry = %d, %v, want 0", n, err)
	}
	e.clock.Advance(time.Minute)
	if n, err := e.b.SweepAuth(e.ctx, 3); err != nil || n != 6 {
		e.t.Errorf("SweepAuth(3) = %d, %v, want 3 nonces + 3 sessions", n, err)
	}
	if n, err := e.b.SweepAuth(e.ctx, 3); err != nil || n != 4 {
		e.t.Errorf("SweepAuth(3) again = %d, %v, want 4", n, err)
	}
	if err := e.a.ConsumeNonce(e.ctx, "keeping0001"); err != nil {
		e.t.Errorf("the sweep took an unexpired nonce: %v", err)
	}
	if _, err := e.b.Session(e.ctx, hashOf("keeping")); err != nil {
		e.t.Errorf("the sweep took an unexpired session: %v", err)
	}
	if _, err := e.b.SweepAuth(e.ctx, 0); err == nil {
		e.t.Error("SweepAuth(0) succeeded")
	}
}

// testRaceConsumeNonce: workers on both handles consume one nonce; exactly
// one may succeed, the others get ErrNotFound.
func testRaceConsumeNonce(e *signInEnv) {
	if err := e.a.PutNonce(e.ctx, nonce1, time.Minute); err != nil {
		e.t.Fatal(err)
	}
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for i := range workers {
		h := e.a
		if i%2 == 1 {
			h = e.b
		}
		wg.Go(func() { errs <- h.ConsumeNonce(e.ctx, nonce1) })
	}
	wg.Wait()
	close(errs)
	won := 0
	for err := range errs {
		switch {
		case err == nil:
			won++
		case !errors.Is(err, store.ErrNotFound):
			e.t.Errorf("ConsumeNonce() = %v, want nil or ErrNotFound", err)
		}
	}
	if won != 1 {
		e.t.Errorf("%d workers consumed the nonce, want exactly 1", won)
	}
}
