package credits

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
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

// countingKeys counts the key lookups that reach the store.
type countingKeys struct {
	KeyStore
	reads atomic.Int64
}

func (c *countingKeys) KeyByHash(ctx context.Context, hash string) (store.APIKey, error) {
	c.reads.Add(1)
	return c.KeyStore.KeyByHash(ctx, hash)
}

// TestKeyCache: with CacheTTL a key is read from the store once per TTL; a
// revocation in the store binds when the TTL ends, at once through Forget;
// expiry is judged on every call; the TTL is bounded by MaxKeyCacheTTL.
func TestKeyCache(t *testing.T) {
	clk := &testClock{now: t0}
	st := &countingKeys{KeyStore: openStore(t, clk)}
	keys := NewKeys(st, nil)
	keys.Now, keys.CacheTTL = clk.Now, 10*time.Second // bounded to 1s
	secret, k := storeKey(t, st, owner, func(k *store.APIKey) { k.ExpiresAt = t0.Add(5 * time.Second) })
	for range 5 {
		if _, err := keys.Authenticate(t.Context(), secret); err != nil {
			t.Fatal(err)
		}
	}
	if n := st.reads.Load(); n != 1 {
		t.Fatalf("%d store reads for 5 calls within the TTL, want 1", n)
	}
	if _, err := st.RevokeKey(t.Context(), owner, k.ID); err != nil {
		t.Fatal(err)
	}
	clk.Advance(999 * time.Millisecond)
	if _, err := keys.Authenticate(t.Context(), secret); err != nil {
		t.Fatalf("within the TTL the cached key serves: %v", err)
	}
	clk.Advance(time.Millisecond) // MaxKeyCacheTTL after the read
	if _, err := keys.Authenticate(t.Context(), secret); !errors.Is(err, ErrRevokedKey) {
		t.Fatalf("after the TTL: %v, want ErrRevokedKey", err)
	}

	// Forget drops a key at once; an unknown key is never cached.
	secret2, k2 := storeKey(t, st, owner, nil)
	if _, err := keys.Authenticate(t.Context(), secret2); err != nil {
		t.Fatal(err)
	}
	if _, err := st.RevokeKey(t.Context(), owner, k2.ID); err != nil {
		t.Fatal(err)
	}
	keys.Forget(k2.Hash)
	if _, err := keys.Authenticate(t.Context(), secret2); !errors.Is(err, ErrRevokedKey) {
		t.Fatalf("after Forget: %v, want ErrRevokedKey", err)
	}
	before := st.reads.Load()
	unknown := "sk-l4a-" + strings.Repeat("a", 52)
	for range 3 {
		if _, err := keys.Authenticate(t.Context(), unknown); !errors.Is(err, ErrUnknownKey) {
			t.Fatalf("unknown key: %v", err)
		}
	}
	if st.reads.Load()-before != 3 {
		t.Error("an unknown key was cached")
	}

	// Expiry is judged at each call, cached or not.
	secret3, _ := storeKey(t, st, owner, func(k *store.APIKey) { k.ExpiresAt = clk.Now().Add(500 * time.Millisecond) })
	if _, err := keys.Authenticate(t.Context(), secret3); err != nil {
		t.Fatal(err)
	}
	clk.Advance(500 * time.Millisecond)
	if _, err := keys.Authenticate(t.Context(), secret3); !errors.Is(err, ErrExpiredKey) {
		t.Fatalf("an expired cached key: %v, want ErrExpiredKey", err)
	}
}

// TestKeyCacheForgetAll: ForgetAll drops every cached key, so each is
// read again at its next call.
func TestKeyCacheForgetAll(t *testing.T) {
	clk := &testClock{now: t0}
	st := &countingKeys{KeyStore: openStore(t, clk)}
	keys := NewKeys(st, nil)
	keys.Now, keys.CacheTTL = clk.Now, time.Second
	s1, _ := storeKey(t, st, owner, nil)
	s2, k2 := storeKey(t, st, owner, nil)
	for _, s := range []string{s1, s2, s1, s2} {
		if _, err := keys.Authenticate(t.Context(), s); err != nil {
			t.Fatal(err)
		}
	}
	if n := st.reads.Load(); n != 2 {
		t.Fatalf("%d store reads for two keys cached, want 2", n)
	}
	if _, err := st.RevokeKey(t.Context(), owner, k2.ID); err != nil {
		t.Fatal(err)
	}
	keys.ForgetAll()
	if _, err := keys.Authenticate(t.Context(), s2); !errors.Is(err, ErrRevokedKey) {
		t.Fatalf("after ForgetAll: %v, want ErrRevokedKey", err)
	}
	if _, err := keys.Authenticate(t.Context(), s1); err != nil {
		t.Fatal(err)
	}
	if n := st.reads.Load(); n != 4 {
		t.Errorf("%d store reads, want 4: both keys read again after ForgetAll", n)
	}
}

// blockingKeys holds KeyByHash after its read until release is closed,
// telling read (buffered) that it read.
type blockingKeys struct {
	KeyStore
	read, release chan struct{}
}

func (b *blockingKeys) KeyByHash(ctx context.Context, hash string) (store.APIKey, error) {
	k, err := b.KeyStore.KeyByHash(ctx, hash)
	b.read <- struct{}{}
	<-b.release
	return k, err
}

// TestKeyCacheForgetDuringLookup: a lookup that read the key before a
// change that Forget (or ForgetAll) was told of while it ran does not cache
// what it read, which would serve the key as it was before the change for
// a whole TTL.
func TestKeyCacheForgetDuringLookup(t *testing.T) {
	for _, tc := range []struct {
		name   string
		forget func(k *Keys, hash string)
	}{
		{"Forget", func(k *Keys, hash string) { k.Forget(hash) }},
		{"ForgetAll", func(k *Keys, _ string) { k.ForgetAll() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := &testClock{now: t0}
			db := openStore(t, clk)
			st := &blockingKeys{KeyStore: db, read: make(chan struct{}, 1), release: make(chan struct{})}
			keys := NewKeys(st, nil)
			keys.Now, keys.CacheTTL = clk.Now, time.Second
			secret, k := storeKey(t, db, owner, nil)
			errc := make(chan error, 1)
			go func() {
				_, err := keys.Authenticate(context.Background(), secret)
				errc <- err
			}()
			<-st.read // the key as it was, before the revocation
			if _, err := db.RevokeKey(t.Context(), owner, k.ID); err != nil {
				t.Fatal(err)
			}
			tc.forget(keys, k.Hash)
			close(st.release)
			if err := <-errc; err != nil {
				t.Fatalf("the lookup that read before the revocation: %v", err)
			}
			if _, err := keys.Authenticate(t.Context(), secret); !errors.Is(err, ErrRevokedKey) {
				t.Fatalf("after a revocation told during a lookup: %v, want ErrRevokedKey (the stale key was cached)", err)
			}
		})
	}
}

// TestKeyCacheForgottenOnRevoke: a key revoked through this replica's
// account routes is refused by its next call, cache or not.
func TestKeyCacheForgottenOnRevoke(t *testing.T) {
	s := newServer(t)
	keys := NewKeys(s.h.st.(KeyStore), nil)
	keys.Now, keys.CacheTTL = s.clk.Now, time.Second
	s.h.KeyChanged = keys.Forget
	token := s.signIn(newWallet(t))
	created := s.createKey(token, `{"name":"agent"}`)
	if _, err := keys.Authenticate(t.Context(), created.Key); err != nil {
		t.Fatal(err)
	}
	if status, _, body := s.do(http.MethodDelete, PathKeys+"/"+created.ID, "", "", bearer(token)); status != http.StatusOK {
		t.Fatalf("revoke: %d %s", status, body)
	}
	if _, err := keys.Authenticate(t.Context(), created.Key); !errors.Is(err, ErrRevokedKey) {
		t.Fatalf("the next call after a revocation here: %v, want ErrRevokedKey", err)
	}
}
