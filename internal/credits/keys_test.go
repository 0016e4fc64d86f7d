package credits

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/llm4agents/llm4agents/internal/store"
)

func TestNewKey(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		secret, id, err := NewKey()
		if err != nil {
			t.Fatal(err)
		}
		if !IsKey(secret) || !wellFormed(secret, KeyPrefix) || len(secret) != len(KeyPrefix)+52 {
			t.Fatalf("NewKey() = %.10q..., not sk-l4a- and 52 base32 characters", secret)
		}
		if seen[secret] {
			t.Fatal("NewKey() repeated a secret")
		}
		seen[secret] = true
		if id != KeyID(secret) || !store.ValidID(id) || strings.Contains(id, secret[len(KeyPrefix):]) {
			t.Fatalf("KeyID() = %q", id)
		}
		if h := HashSecret(secret); !store.ValidHash(h) || "0x"+h == id {
			t.Fatalf("HashSecret() = %q: invalid, or the same as the public id", h)
		}
		if b, err := KeyIDBytes32(id); err != nil || b.Hex() != id {
			t.Fatalf("KeyIDBytes32(%q) = %v, %v", id, b, err)
		}
	}
	for _, bad := range []string{"", "0x", "0x" + strings.Repeat("g", 64), strings.Repeat("a", 66), "0x" + strings.Repeat("a", 63)} {
		if _, err := KeyIDBytes32(bad); err == nil {
			t.Errorf("KeyIDBytes32(%q) succeeded", bad)
		}
	}
}

// storeKey creates a key for owner with f applied, and returns its secret.
func storeKey(t *testing.T, st store.Keys, owner string, f func(*store.APIKey)) (string, store.APIKey) {
	t.Helper()
	secret, id, err := NewKey()
	if err != nil {
		t.Fatal(err)
	}
	k := store.APIKey{ID: id, Hash: HashSecret(secret), Owner: owner, TotalCap: store.NoCap, PeriodCap: store.NoCap}
	if f != nil {
		f(&k)
	}
	k, err = st.CreateKey(t.Context(), k)
	if err != nil {
		t.Fatal(err)
	}
	return secret, k
}

const owner = "0x857b06519e91e3a54538791bdbb0e22373e36b66"

func TestAuthenticate(t *testing.T) {
	clk := &testClock{now: t0}
	st := openStore(t, clk)
	keys := NewKeys(st, nil)
	keys.Now = clk.Now
	ctx := t.Context()

	good, k := storeKey(t, st, owner, func(k *store.APIKey) { k.ExpiresAt = t0.Add(time.Hour) })
	revoked, rk := storeKey(t, st, owner, nil)
	if _, err := st.RevokeKey(ctx, owner, rk.ID); err != nil {
		t.Fatal(err)
	}
	expired, _ := storeKey(t, st, owner, func(k *store.APIKey) { k.ExpiresAt = t0 })
	unknown, _, _ := NewKey()

	got, err := keys.Authenticate(ctx, good)
	if err != nil || got.ID != k.ID {
		t.Fatalf("Authenticate(good) = %+v, %v", got, err)
	}
	tests := []struct {
		name   string
		bearer string
		want   error
	}{
		{"unknown", unknown, ErrUnknownKey},
		{"revoked", revoked, ErrRevokedKey},
		{"expired", expired, ErrExpiredKey},
		{"empty", "", ErrUnknownKey},
		{"prefix only", KeyPrefix, ErrUnknownKey},
		{"upper case", strings.ToUpper(good), ErrUnknownKey},
		{"one char more", good + "a", ErrUnknownKey},
		{"one char less", good[:len(good)-1], ErrUnknownKey},
		{"not base32", good[:len(good)-1] + "1", ErrUnknownKey},
		{"session token", SessionPrefix + good[len(KeyPrefix):], ErrUnknownKey},
		{"sql", KeyPrefix + "' OR 1=1 --", ErrUnknownKey},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := keys.Authenticate(ctx, tc.bearer)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Authenticate() = %v, want %v", err, tc.want)
			}
			if tc.bearer != "" && len(tc.bearer) > len(KeyPrefix) {
				assertNoSecret(t, "error", err.Error(), tc.bearer, tc.bearer[len(KeyPrefix):])
			}
		})
	}
	// The key expires at ExpiresAt exactly.
	clk.Advance(time.Hour - time.Millisecond)
	if _, err := keys.Authenticate(ctx, good); err != nil {
		t.Errorf("Authenticate() just before expiry: %v", err)
	}
	clk.Advance(time.Millisecond)
	if _, err := keys.Authenticate(ctx, good); !errors.Is(err, ErrExpiredKey) {
		t.Errorf("Authenticate() at expiry = %v, want ErrExpiredKey", err)
	}
}

func TestAuthorize(t *testing.T) {
	keys := NewKeys(nil, nil)
	scoped := store.APIKey{ID: "k1", Models: []string{"gpt-4o", "gpt-4o-mini"}, RatePerMinute: 3}
	if err := keys.Authorize(scoped, "o1"); !errors.Is(err, ErrModelNotAllowed) {
		t.Errorf("Authorize(model outside scope) = %v, want ErrModelNotAllowed", err)
	}
	for _, m := range []string{"gpt-4o", "gpt-4o-mini"} {
		if err := keys.Authorize(scoped, m); err != nil {
			t.Errorf("Authorize(%s): %v", m, err)
		}
	}
	if err := keys.Authorize(store.APIKey{ID: "k2"}, "any"); err != nil {
		t.Errorf("Authorize(unscoped key): %v", err)
	}
}

func TestLimiterBounded(t *testing.T) {
	var l limiter
	now := t0
	for i := range maxBuckets {
		l.take(strconv.Itoa(i), 1, now)
	}
	now = now.Add(time.Minute)
	l.take("new", 1, now)
	if len(l.buckets) != 1 {
		t.Errorf("%d buckets after the idle ones were dropped, want 1", len(l.buckets))
	}
}
