package redis_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/internal/store/redis"
	"github.com/llm4agents/llm4agents/internal/store/storetest"
)

func TestSignIns(t *testing.T) {
	storetest.RunSignIns(t, func(t *testing.T, now func() time.Time) (a, b store.SignIns) {
		return pair(t, now)
	})
}

const (
	signInNonce = "n0nce0000000000000001"
	signInOwner = "0x857b06519e91e3a54538791bdbb0e22373e36b66"
)

// hexSHA256 is s's SHA-256 in hex: a session hash, or a nonce's name.
func hexSHA256(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

var signInSession = hexSHA256("sess-l4a-token")

// sessionFields is a well-formed session record that expires far in the
// future.
func sessionFields() []any {
	return []any{"owner", signInOwner, "created_at_ms", "0", "expires_at_ms", "9000000000000"}
}

// TestSignInForeignValues writes values the store did not write at the keys
// sign-ins use, and checks that every operation touching them fails with an
// error that is no store sentinel (a foreign value at a session's key is no
// session) and changes no key.
func TestSignInForeignValues(t *testing.T) {
	type op struct {
		name string
		call func(ctx context.Context, tp *tamper) error
	}
	putNonce := op{"PutNonce", func(ctx context.Context, tp *tamper) error {
		return tp.db.PutNonce(ctx, signInNonce, time.Minute)
	}}
	consumeNonce := op{"ConsumeNonce", func(ctx context.Context, tp *tamper) error {
		return tp.db.ConsumeNonce(ctx, signInNonce)
	}}
	createSession := op{"CreateSession", func(ctx context.Context, tp *tamper) error {
		_, err := tp.db.CreateSession(ctx, signInSession, signInOwner, time.Minute)
		return err
	}}
	session := op{"Session", func(ctx context.Context, tp *tamper) error {
		_, err := tp.db.Session(ctx, signInSession)
		return err
	}}
	deleteSession := op{"DeleteSession", func(ctx context.Context, tp *tamper) error {
		return tp.db.DeleteSession(ctx, signInSession)
	}}
	sweep := op{"SweepAuth", func(ctx context.Context, tp *tamper) error {
		_, err := tp.db.SweepAuth(ctx, 10)
		return err
	}}
	sessionOps := []op{createSession, session, deleteSession}
	nonceOps := []op{putNonce, consumeNonce}
	plantSession := func(fields []any) func(t *testing.T, tp *tamper) {
		return func(t *testing.T, tp *tamper) {
			tp.do(t, append([]any{"HSET", tp.db.SignInKey("session", signInSession)}, fields...)...)
		}
	}

	tests := []struct {
		name  string
		plant func(t *testing.T, tp *tamper)
		ops   []op
	}{
		{"session record is a string", func(t *testing.T, tp *tamper) {
			tp.do(t, "SET", tp.db.SignInKey("session", signInSession), "foreign")
		}, sessionOps},
		{"session record is a list", func(t *testing.T, tp *tamper) {
			tp.do(t, "RPUSH", tp.db.SignInKey("session", signInSession), "foreign")
		}, sessionOps},
		{"session record is another program's hash", plantSession([]any{"user", "alice", "visits", "3"}), sessionOps},
		{"session record lacks its expiry", plantSession(without(sessionFields(), "expires_at_ms")), sessionOps},
		{"session record has an expiry that is no number", plantSession(with(sessionFields(), "expires_at_ms", "later")), sessionOps},
		{"session record has no owner", plantSession(with(sessionFields(), "owner", "")), sessionOps},
		// The script takes any owner; reading it back checks it.
		{"session record has an invalid owner", plantSession(with(sessionFields(), "owner", "0xABC")), []op{session}},
		{"nonce record is a string", func(t *testing.T, tp *tamper) {
			tp.do(t, "SET", tp.db.SignInKey("nonce", signInNonce), "foreign")
		}, nonceOps},
		{"nonce record is another program's hash", func(t *testing.T, tp *tamper) {
			tp.do(t, "HSET", tp.db.SignInKey("nonce", signInNonce), "user", "alice")
		}, nonceOps},
		{"nonce record has an expiry that is no number", func(t *testing.T, tp *tamper) {
			tp.do(t, "HSET", tp.db.SignInKey("nonce", signInNonce), "expires_at_ms", "soon")
		}, nonceOps},
		{"nonce index is a string", func(t *testing.T, tp *tamper) {
			tp.do(t, "SET", tp.db.SignInKey("nonces", ""), "foreign")
		}, []op{putNonce, sweep}},
		{"index of a live nonce is a string", func(t *testing.T, tp *tamper) {
			tp.do(t, "HSET", tp.db.SignInKey("nonce", signInNonce), "expires_at_ms", "9000000000000")
			tp.do(t, "SET", tp.db.SignInKey("nonces", ""), "foreign")
		}, []op{consumeNonce}},
		{"session index is a list", func(t *testing.T, tp *tamper) {
			tp.do(t, "RPUSH", tp.db.SignInKey("sessions", ""), "foreign")
		}, []op{createSession, deleteSession, sweep}},
		// A sweep checks every record before its first write: the expired
		// nonce named first is not deleted either.
		{"the sweep meets a foreign record after an expired nonce", func(t *testing.T, tp *tamper) {
			tp.do(t, "HSET", tp.db.SignInKey("nonce", signInNonce), "expires_at_ms", "0")
			tp.do(t, "ZADD", tp.db.SignInKey("nonces", ""), "0", hexSHA256(signInNonce))
			tp.do(t, "SET", tp.db.SignInKey("nonce", "foreign0nce"), "foreign")
			tp.do(t, "ZADD", tp.db.SignInKey("nonces", ""), "1", hexSHA256("foreign0nce"))
		}, []op{sweep}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tp := newTamper(t)
			tc.plant(t, tp)
			before := tp.snapshot(t)
			for _, o := range tc.ops {
				err := o.call(t.Context(), tp)
				wantForeign(t, o.name, err)
			}
			if diff := cmp.Diff(before, tp.snapshot(t)); diff != "" {
				t.Errorf("keys changed (-before +after):\n%s", diff)
			}
		})
	}
}

// TestSignInLayout checks what the store writes for a nonce and a session:
// four keys under the prefix's hash tag, none holding the nonce's text.
func TestSignInLayout(t *testing.T) {
	tp := newTamper(t)
	ctx := t.Context()
	if err := tp.db.PutNonce(ctx, signInNonce, time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := tp.db.CreateSession(ctx, signInSession, signInOwner, time.Minute); err != nil {
		t.Fatal(err)
	}
	keys := tp.snapshot(t)
	var got []string
	for k := range keys {
		got = append(got, k)
		if tag := hashTag(k); tag != tp.prefix {
			t.Errorf("key %q has hash tag %q, want the prefix %q", k, tag, tp.prefix)
		}
	}
	want := []string{
		tp.db.SignInKey("nonce", signInNonce), tp.db.SignInKey("nonces", ""),
		tp.db.SignInKey("session", signInSession), tp.db.SignInKey("sessions", ""),
	}
	slices.Sort(got)
	slices.Sort(want)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("keys (-want +got):\n%s", diff)
	}
	for _, k := range want {
		if strings.Contains(k, signInNonce) {
			t.Errorf("key %q holds the nonce", k)
		}
	}
	members, err := tp.raw.ZRange(ctx, tp.db.SignInKey("nonces", ""), 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{hexSHA256(signInNonce)}, members); diff != "" {
		t.Errorf("nonce index (-want +got):\n%s", diff)
	}
}

// TestSignInTTL checks that Redis forgets nonces and sessions by itself at
// their expiry, measured on the store's clock whichever clock that is, that
// an index outlives the records it names, and that on the server's clock a
// sweep counts the members that records Redis dropped left behind.
func TestSignInTTL(t *testing.T) {
	ctx := t.Context()
	near := func(t *testing.T, what string, got, want time.Duration) {
		t.Helper()
		// As TestPaymentTTL: a second above, five below.
		if got > want+time.Second || got < want-5*time.Second {
			t.Errorf("%s: PTTL = %v, want about %v", what, got, want)
		}
	}
	// The tamper clock is months away from the server's.
	tp := newTamper(t)
	pttl := func(t *testing.T, key string) time.Duration {
		t.Helper()
		d, err := tp.raw.PTTL(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	if err := tp.db.PutNonce(ctx, signInNonce, 5*time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := tp.db.CreateSession(ctx, signInSession, signInOwner, 15*time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := tp.db.PutNonce(ctx, "n0nce0000000000000002", time.Minute); err != nil {
		t.Fatal(err)
	}
	near(t, "nonce", pttl(t, tp.db.SignInKey("nonce", signInNonce)), 5*time.Minute)
	near(t, "shorter nonce", pttl(t, tp.db.SignInKey("nonce", "n0nce0000000000000002")), time.Minute)
	near(t, "nonce index", pttl(t, tp.db.SignInKey("nonces", "")), 5*time.Minute)
	near(t, "session", pttl(t, tp.db.SignInKey("session", signInSession)), 15*time.Minute)
	near(t, "session index", pttl(t, tp.db.SignInKey("sessions", "")), 15*time.Minute)
	// An expired nonce put again gets the new TTL.
	tp.clock.Advance(5 * time.Minute)
	if err := tp.db.PutNonce(ctx, signInNonce, 2*time.Minute); err != nil {
		t.Fatalf("PutNonce() of an expired nonce: %v", err)
	}
	near(t, "nonce put again", pttl(t, tp.db.SignInKey("nonce", signInNonce)), 2*time.Minute)

	// On the server's clock Redis drops the records at their expiry, and an
	// index with them once it names no live record (store a). Where a
	// longer-lived record keeps the index (store b), the sweep finds the
	// members the dropped records left behind and counts them, once.
	a, _ := pair(t, nil)
	b, _ := pair(t, nil)
	raw := rawClient(t, testURL(t))
	for _, db := range []*redis.DB{a, b} {
		if err := db.PutNonce(ctx, signInNonce, 100*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		if _, err := db.CreateSession(ctx, signInSession, signInOwner, 100*time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.PutNonce(ctx, "n0nce0000000000000002", time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := b.CreateSession(ctx, hexSHA256("second"), signInOwner, time.Minute); err != nil {
		t.Fatal(err)
	}
	time.Sleep(250 * time.Millisecond)
	for _, db := range []*redis.DB{a, b} {
		records := []string{db.SignInKey("nonce", signInNonce), db.SignInKey("session", signInSession)}
		if n, err := raw.Exists(ctx, records...).Result(); err != nil || n != 0 {
			t.Errorf("EXISTS of the records after their TTL = %d, %v; want 0", n, err)
		}
		if err := db.ConsumeNonce(ctx, signInNonce); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("ConsumeNonce() after expiry = %v, want ErrNotFound", err)
		}
	}
	if n, err := raw.Exists(ctx, a.SignInKey("nonces", ""), a.SignInKey("sessions", "")).Result(); err != nil || n != 0 {
		t.Errorf("EXISTS of the indexes of expired records = %d, %v; want 0", n, err)
	}
	if n, err := a.SweepAuth(ctx, 10); err != nil || n != 0 {
		t.Errorf("SweepAuth() with no index = %d, %v; want 0", n, err)
	}
	if n, err := b.SweepAuth(ctx, 10); err != nil || n != 2 {
		t.Errorf("SweepAuth() = %d, %v; want the 2 members the dropped records left", n, err)
	}
	if n, err := b.SweepAuth(ctx, 10); err != nil || n != 0 {
		t.Errorf("SweepAuth() again = %d, %v; want 0", n, err)
	}
	for _, index := range []string{b.SignInKey("nonces", ""), b.SignInKey("sessions", "")} {
		if n, err := raw.ZCard(ctx, index).Result(); err != nil || n != 1 {
			t.Errorf("ZCARD %s after the sweep = %d, %v; want the live record's member", index, n, err)
		}
	}
	if err := b.ConsumeNonce(ctx, "n0nce0000000000000002"); err != nil {
		t.Errorf("ConsumeNonce() of the live nonce after the sweep: %v", err)
	}
}

// TestSweepMovesEarlyMember checks that a member scored before its record's
// expiry (edited by hand) is neither swept nor counted, and is moved to the
// record's expiry.
func TestSweepMovesEarlyMember(t *testing.T) {
	tp := newTamper(t)
	ctx := t.Context()
	if err := tp.db.PutNonce(ctx, signInNonce, time.Hour); err != nil {
		t.Fatal(err)
	}
	index, name := tp.db.SignInKey("nonces", ""), hexSHA256(signInNonce)
	tp.do(t, "ZADD", index, "0", name)
	if n, err := tp.db.SweepAuth(ctx, 10); err != nil || n != 0 {
		t.Errorf("SweepAuth() = %d, %v; want 0", n, err)
	}
	score, err := tp.raw.ZScore(ctx, index, name).Result()
	if want := tp.clock.Now().Add(time.Hour).UnixMilli(); err != nil || int64(score) != want {
		t.Errorf("score after the sweep = %s, %v; want the nonce's expiry %d", strconv.FormatFloat(score, 'f', -1, 64), err, want)
	}
	if err := tp.db.ConsumeNonce(ctx, signInNonce); err != nil {
		t.Errorf("ConsumeNonce() after the sweep: %v", err)
	}
}
