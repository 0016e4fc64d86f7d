package storetest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/llm4agents/llm4agents/internal/store"
)

// OpenKeys opens two independent handles (separate connection pools or
// clients, as two processes would have) on one new, empty database. Both must
// take the time from now for every expiry and timestamp. It registers the
// handles' cleanup with t.Cleanup and stops the test with t.Fatal if
// anything fails.
type OpenKeys func(t *testing.T, now func() time.Time) (a, b store.Keys)

// RunKeys runs the store.Keys conformance suite against the backend that open
// opens: the subtests of API keys, then those of RunSignIns (a store.Keys is
// a store.SignIns), so a backend of store.Keys calls RunKeys alone. Every
// subtest opens a database of its own; handle a writes, handle b reads back.
//
// Beyond the interface's comments, the suite pins down: times are kept to the
// millisecond; a key's ExpiresAt, Models, caps and rate limit come back as
// stored; invalid arguments fail with an error that is no sentinel.
func RunKeys(t *testing.T, open OpenKeys) {
	tests := []struct {
		name string
		run  func(*keysEnv)
	}{
		{"Key/CreateAndRead", testKeyCreate},
		{"Key/Conflicts", testKeyConflicts},
		{"Key/PerOwnerLimit", testKeyPerOwnerLimit},
		{"Key/StoredLimit", testKeyStoredLimit},
		{"Key/Revoke", testKeyRevoke},
		{"Key/Update", testKeyUpdate},
		{"Key/InvalidArguments", testKeyInvalid},
		{"Key/Closed", testKeysClosed},
		{"Race/CreateKey", testRaceCreateKey},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := &clock{now: start}
			a, b := open(t, c.Now)
			tc.run(&keysEnv{t: t, ctx: t.Context(), clock: c, a: a, b: b})
		})
	}
	RunSignIns(t, func(t *testing.T, now func() time.Time) (a, b store.SignIns) { return open(t, now) })
}

type keysEnv struct {
	t     *testing.T
	ctx   context.Context
	clock *clock
	a, b  store.Keys
}

// hashOf is a test secret's hash, as the store keeps it.
func hashOf(secret string) string {
	h := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(h[:])
}

func testKey(id, owner string) store.APIKey {
	return store.APIKey{
		ID: id, Hash: hashOf("secret " + id), Owner: owner, Name: "agent " + id,
		TotalCap: 5 * dollar, PeriodCap: dollar, Period: 24 * time.Hour,
		ExpiresAt: start.Add(30 * 24 * time.Hour), Models: []string{"gpt-4o", "gpt-4o-mini"}, RatePerMinute: 60,
		TokensPerMinute: 90_000,
	}
}

func (e *keysEnv) create(k store.APIKey) store.APIKey {
	e.t.Helper()
	got, err := e.a.CreateKey(e.ctx, k)
	if err != nil {
		e.t.Fatalf("CreateKey(%q): %v", k.ID, err)
	}
	return got
}

func testKeyCreate(e *keysEnv) {
	k := testKey("key1", alice)
	got := e.create(k)
	want := k
	want.CreatedAt = start
	if diff := cmp.Diff(want, got); diff != "" {
		e.t.Errorf("CreateKey() mismatch (-want +got):\n%s", diff)
	}
	// A key with no caps, expiry, models or rate limit.
	bare := store.APIKey{ID: "key2", Hash: hashOf("bare"), Owner: alice, TotalCap: store.NoCap, PeriodCap: store.NoCap}
	e.clock.Advance(time.Millisecond)
	wantBare := bare
	wantBare.CreatedAt = start.Add(time.Millisecond)
	if diff := cmp.Diff(wantBare, e.create(bare)); diff != "" {
		e.t.Errorf("CreateKey(bare) mismatch (-want +got):\n%s", diff)
	}
	e.create(testKey("key3", bob))

	byHash, err := e.b.KeyByHash(e.ctx, k.Hash)
	if err != nil {
		e.t.Fatalf("KeyByHash(): %v", err)
	}
	if diff := cmp.Diff(want, byHash); diff != "" {
		e.t.Errorf("KeyByHash() mismatch (-want +got):\n%s", diff)
	}
	if _, err := e.b.KeyByHash(e.ctx, hashOf("unknown")); !errors.Is(err, store.ErrNotFound) {
		e.t.Errorf("KeyByHash(unknown) = %v, want ErrNotFound", err)
	}
	list, err := e.b.KeysByOwner(e.ctx, alice)
	if err != nil {
		e.t.Fatalf("KeysByOwner(): %v", err)
	}
	if diff := cmp.Diff([]store.APIKey{want, wantBare}, list); diff != "" {
		e.t.Errorf("KeysByOwner(alice) mismatch (-want +got):\n%s", diff)
	}
	if list, err := e.b.KeysByOwner(e.ctx, "0x0000000000000000000000000000000000000001"); err != nil || len(list) != 0 {
		e.t.Errorf("KeysByOwner(nobody) = %v, %v, want none", list, err)
	}
	if l := got.Limits(); l != (store.KeyLimits{ID: "key1", TotalCap: 5 * dollar, PeriodCap: dollar, Period: 24 * time.Hour}) {
		e.t.Errorf("Limits() = %+v", l)
	}
	if !got.AllowsModel("gpt-4o") || got.AllowsModel("gpt-4") || !wantBare.AllowsModel("anything") {
		e.t.Error("AllowsModel() does not follow Models")
	}
}

func testKeyConflicts(e *keysEnv) {
	e.create(testKey("key1", alice))
	sameID := testKey("key1", bob)
	sameID.Hash = hashOf("other")
	sameHash := testKey("key2", bob)
	sameHash.Hash = hashOf("secret key1")
	for name, k := range map[string]store.APIKey{"same id": sameID, "same hash": sameHash} {
		if _, err := e.a.CreateKey(e.ctx, k); !errors.Is(err, store.ErrConflict) {
			e.t.Errorf("CreateKey(%s) = %v, want ErrConflict", name, err)
		}
	}
	if list, _ := e.b.KeysByOwner(e.ctx, bob); len(list) != 0 {
		e.t.Errorf("a refused key was stored: %+v", list)
	}
}

func testKeyPerOwnerLimit(e *keysEnv) {
	for i := range store.MaxKeysPerOwner {
		k := testKey(fmt.Sprintf("key%d", i), alice)
		if _, err := e.a.CreateKey(e.ctx, k); err != nil {
			e.t.Fatalf("CreateKey(%d): %v", i, err)
		}
	}
	if _, err := e.a.CreateKey(e.ctx, testKey("one-too-many", alice)); !errors.Is(err, store.ErrConflict) {
		e.t.Errorf("CreateKey() past MaxKeysPerOwner = %v, want ErrConflict", err)
	}
	e.create(testKey("bobs", bob)) // other owners are not affected
	// A revoked key no longer counts against the live bound: an owner who
	// rotates keys revokes one and creates the next.
	if _, err := e.a.RevokeKey(e.ctx, alice, "key0"); err != nil {
		e.t.Fatalf("RevokeKey(): %v", err)
	}
	e.create(testKey("rotated", alice))
	if _, err := e.a.CreateKey(e.ctx, testKey("one-too-many-again", alice)); !errors.Is(err, store.ErrConflict) {
		e.t.Errorf("CreateKey() past MaxKeysPerOwner after a rotation = %v, want ErrConflict", err)
	}
}

// testKeyStoredLimit: revoked keys stay (receipts name them) and count
// against MaxStoredKeysPerOwner, which bounds an owner's rows.
func testKeyStoredLimit(e *keysEnv) {
	for i := range store.MaxStoredKeysPerOwner {
		id := fmt.Sprintf("k%d", i)
		e.create(testKey(id, alice))
		if _, err := e.a.RevokeKey(e.ctx, alice, id); err != nil {
			e.t.Fatalf("RevokeKey(%s): %v", id, err)
		}
	}
	if _, err := e.a.CreateKey(e.ctx, testKey("past-the-rows", alice)); !errors.Is(err, store.ErrConflict) {
		e.t.Errorf("CreateKey() past MaxStoredKeysPerOwner = %v, want ErrConflict", err)
	}
}

func testKeyRevoke(e *keysEnv) {
	k := e.create(testKey("key1", alice))
	if _, err := e.a.RevokeKey(e.ctx, bob, "key1"); !errors.Is(err, store.ErrNotFound) {
		e.t.Errorf("RevokeKey(another owner) = %v, want ErrNotFound", err)
	}
	if _, err := e.a.RevokeKey(e.ctx, alice, "nokey"); !errors.Is(err, store.ErrNotFound) {
		e.t.Errorf("RevokeKey(unknown) = %v, want ErrNotFound", err)
	}
	got, _ := e.b.KeyByHash(e.ctx, k.Hash)
	if got.Revoked() {
		e.t.Fatal("another owner revoked the key")
	}
	at := e.clock.Advance(time.Second)
	r, err := e.a.RevokeKey(e.ctx, alice, "key1")
	if err != nil {
		e.t.Fatalf("RevokeKey(): %v", err)
	}
	want := k
	want.RevokedAt = at
	if diff := cmp.Diff(want, r); diff != "" {
		e.t.Errorf("RevokeKey() mismatch (-want +got):\n%s", diff)
	}
	e.clock.Advance(time.Second)
	again, err := e.a.RevokeKey(e.ctx, alice, "key1")
	if err != nil || !again.RevokedAt.Equal(at) {
		e.t.Errorf("RevokeKey() again = %+v, %v, want the first revocation", again, err)
	}
	got, err = e.b.KeyByHash(e.ctx, k.Hash)
	if err != nil || !got.Revoked() {
		e.t.Errorf("KeyByHash() after revoke = %+v, %v, want it revoked", got, err)
	}
}

func testKeyUpdate(e *keysEnv) {
	k := e.create(testKey("key1", alice))
	// Every mutable field changes, caps removed; Hash, CreatedAt and
	// RevokedAt sent are not stored.
	u := k
	u.Name, u.TotalCap, u.PeriodCap, u.Period = "renamed", store.NoCap, store.NoCap, 0
	u.ExpiresAt, u.Models, u.RatePerMinute, u.TokensPerMinute = time.Time{}, nil, 0, 0
	u.Hash, u.CreatedAt, u.RevokedAt = hashOf("another secret"), start.Add(time.Hour), start.Add(time.Hour)
	want := u
	want.Hash, want.CreatedAt, want.RevokedAt = k.Hash, k.CreatedAt, time.Time{}

	bobs := u
	bobs.Owner = bob
	if _, err := e.a.UpdateKey(e.ctx, bob, "key1", k, bobs); !errors.Is(err, store.ErrNotFound) {
		e.t.Errorf("UpdateKey(another owner) = %v, want ErrNotFound", err)
	}
	unknown := u
	unknown.ID = "nokey"
	if _, err := e.a.UpdateKey(e.ctx, alice, "nokey", k, unknown); !errors.Is(err, store.ErrNotFound) {
		e.t.Errorf("UpdateKey(unknown) = %v, want ErrNotFound", err)
	}
	// A change made to a key that changed since it was read is refused,
	// and changes nothing: two racing changes cannot lose one.
	stale := k
	stale.Name = "read before another change"
	if _, err := e.a.UpdateKey(e.ctx, alice, "key1", stale, u); !errors.Is(err, store.ErrConflict) {
		e.t.Errorf("UpdateKey(from a stale read) = %v, want ErrConflict", err)
	}
	if got, err := e.b.KeyByHash(e.ctx, k.Hash); err != nil || !cmp.Equal(k, got) {
		e.t.Errorf("KeyByHash() after a stale update = %+v, %v, want it unchanged %+v", got, err, k)
	}
	got, err := e.a.UpdateKey(e.ctx, alice, "key1", k, u)
	if err != nil {
		e.t.Fatalf("UpdateKey(): %v", err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		e.t.Errorf("UpdateKey() mismatch (-want +got):\n%s", diff)
	}
	if got, err := e.b.KeyByHash(e.ctx, k.Hash); err != nil || !cmp.Equal(want, got) {
		e.t.Errorf("KeyByHash() after update = %+v, %v, want %+v", got, err, want)
	}
	// And back: caps, expiry, models and rates set again.
	back := k
	back.Name = "restored"
	if _, err := e.a.UpdateKey(e.ctx, alice, "key1", k, back); !errors.Is(err, store.ErrConflict) {
		e.t.Errorf("UpdateKey(from the key before the update) = %v, want ErrConflict", err)
	}
	got, err = e.a.UpdateKey(e.ctx, alice, "key1", want, back)
	if err != nil || !cmp.Equal(back, got) {
		e.t.Errorf("UpdateKey(caps again) = %+v, %v, want %+v", got, err, back)
	}

	bad := back
	bad.TotalCap = -1
	if _, err := e.a.UpdateKey(e.ctx, alice, "key1", back, bad); err == nil || errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrConflict) {
		e.t.Errorf("UpdateKey(negative cap) = %v, want an error that is no sentinel", err)
	}
	if _, err := e.a.UpdateKey(e.ctx, alice, "key2", back, back); err == nil || errors.Is(err, store.ErrNotFound) {
		e.t.Errorf("UpdateKey(k.ID is not id) = %v, want an error that is no sentinel", err)
	}

	at := e.clock.Advance(time.Second)
	if _, err := e.a.RevokeKey(e.ctx, alice, "key1"); err != nil {
		e.t.Fatalf("RevokeKey(): %v", err)
	}
	if _, err := e.a.UpdateKey(e.ctx, alice, "key1", back, u); !errors.Is(err, store.ErrConflict) {
		e.t.Errorf("UpdateKey(revoked) = %v, want ErrConflict", err)
	}
	revoked := back
	revoked.RevokedAt = at
	if got, err := e.b.KeyByHash(e.ctx, k.Hash); err != nil || !cmp.Equal(revoked, got) {
		e.t.Errorf("KeyByHash() after a refused update = %+v, %v, want %+v", got, err, revoked)
	}
}

func testKeyInvalid(e *keysEnv) {
	mod := func(f func(*store.APIKey)) store.APIKey {
		k := testKey("key1", alice)
		f(&k)
		return k
	}
	bad := map[string]store.APIKey{
		"empty id":             mod(func(k *store.APIKey) { k.ID = "" }),
		"id with space":        mod(func(k *store.APIKey) { k.ID = "a b" }),
		"short hash":           mod(func(k *store.APIKey) { k.Hash = "abcd" }),
		"upper-case hash":      mod(func(k *store.APIKey) { k.Hash = "AB" + k.Hash[2:] }),
		"mixed-case owner":     mod(func(k *store.APIKey) { k.Owner = "0xABC" }),
		"control in name":      mod(func(k *store.APIKey) { k.Name = "a\nb" }),
		"long name":            mod(func(k *store.APIKey) { k.Name = string(make([]byte, store.MaxKeyName+1)) }),
		"negative cap":         mod(func(k *store.APIKey) { k.TotalCap = -1 }),
		"period cap no period": mod(func(k *store.APIKey) { k.Period = 0 }),
		"period no period cap": mod(func(k *store.APIKey) { k.PeriodCap = store.NoCap }),
		"sub-ms period":        mod(func(k *store.APIKey) { k.Period = time.Microsecond }),
		"negative rate":        mod(func(k *store.APIKey) { k.RatePerMinute = -1 }),
		"negative token rate":  mod(func(k *store.APIKey) { k.TokensPerMinute = -1 }),
		"huge token rate":      mod(func(k *store.APIKey) { k.TokensPerMinute = store.MaxRateLimit + 1 }),
		"unsorted models":      mod(func(k *store.APIKey) { k.Models = []string{"b", "a"} }),
		"duplicate models":     mod(func(k *store.APIKey) { k.Models = []string{"a", "a"} }),
		"model with space":     mod(func(k *store.APIKey) { k.Models = []string{"a b"} }),
		"too many models": mod(func(k *store.APIKey) {
			k.Models = nil
			for i := range store.MaxKeyModels + 1 {
				k.Models = append(k.Models, fmt.Sprintf("m%03d", i))
			}
		}),
	}
	for name, k := range bad {
		_, err := e.a.CreateKey(e.ctx, k)
		if err == nil || errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrNotFound) {
			e.t.Errorf("CreateKey(%s) = %v, want an error that is no sentinel", name, err)
		}
	}
	if list, _ := e.b.KeysByOwner(e.ctx, alice); len(list) != 0 {
		e.t.Errorf("invalid keys were stored: %+v", list)
	}
	if _, err := e.b.KeysByOwner(e.ctx, "0xABC"); err == nil {
		e.t.Error("KeysByOwner(invalid owner) succeeded")
	}
	if _, err := e.b.KeyByHash(e.ctx, "' OR 1=1 --"); err == nil || errors.Is(err, store.ErrNotFound) {
		e.t.Errorf("KeyByHash(invalid) = %v, want an error that is no sentinel", err)
	}
	if _, err := e.a.RevokeKey(e.ctx, "0xABC", "key1"); err == nil || errors.Is(err, store.ErrNotFound) {
		e.t.Errorf("RevokeKey(invalid owner) = %v, want an error that is no sentinel", err)
	}
}

// testRaceCreateKey: workers on both handles create keys for one owner, each
// key once from each handle; every id is stored once and the per-owner limit
// holds.
func testRaceCreateKey(e *keysEnv) {
	n := store.MaxKeysPerOwner + 10
	errs := make(chan error, 2*n)
	var wg sync.WaitGroup
	for i := range n {
		for _, h := range []store.Keys{e.a, e.b} {
			wg.Go(func() {
				_, err := h.CreateKey(e.ctx, testKey(fmt.Sprintf("key%d", i), alice))
				errs <- err
			})
		}
	}
	wg.Wait()
	close(errs)
	created := 0
	for err := range errs {
		switch {
		case err == nil:
			created++
		case !errors.Is(err, store.ErrConflict):
			e.t.Errorf("CreateKey() = %v, want nil or ErrConflict", err)
		}
	}
	list, err := e.b.KeysByOwner(e.ctx, alice)
	if err != nil {
		e.t.Fatal(err)
	}
	if created != store.MaxKeysPerOwner || len(list) != store.MaxKeysPerOwner {
		e.t.Errorf("%d created, %d stored, want %d", created, len(list), store.MaxKeysPerOwner)
	}
}
