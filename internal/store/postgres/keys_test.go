package postgres

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/internal/store/storetest"
)

// TestKeys runs the keys conformance suite with two DB values (two pools)
// on one fresh schema, as two replicas would share it.
func TestKeys(t *testing.T) {
	storetest.RunKeys(t, func(t *testing.T, now func() time.Time) (a, b store.Keys) {
		_, dsn := freshSchema(t)
		return open(t, dsn, now, nil), open(t, dsn, now, nil)
	})
}

// TestKeysBoundaries checks what the shared suite leaves open: a name full
// of SQL comes back as written; keys created in one millisecond list by id
// byte by byte, whatever the database's collation; an expiry before 1970
// stays an expiry and never turns into "never"; and a cancelled context
// stores nothing.
func TestKeysBoundaries(t *testing.T) {
	ctx := t.Context()
	_, dsn := freshSchema(t)
	clk := &testClock{now: time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)}
	db := open(t, dsn, clk.Now, nil)
	const owner = "0x857b06519e91e3a54538791bdbb0e22373e36b66"
	key := func(id string) store.APIKey {
		sum := sha256.Sum256([]byte(id))
		return store.APIKey{ID: id, Hash: hex.EncodeToString(sum[:]), Owner: owner, TotalCap: store.NoCap, PeriodCap: store.NoCap}
	}

	// The test server's default collation (C.UTF-8 on Debian) orders ASCII
	// byte by byte anyway; a linguistic one, as a server initialized with
	// en_US.UTF-8 has, would not.
	var icu bool
	if err := db.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_collation WHERE collname = 'und-x-icu')`).Scan(&icu); err != nil {
		t.Fatal(err)
	}
	if icu {
		if _, err := db.pool.Exec(ctx, `ALTER TABLE api_keys ALTER COLUMN key_id TYPE TEXT COLLATE "und-x-icu"`); err != nil {
			t.Fatal(err)
		}
	} else {
		t.Log("no ICU collation on the server: the order is checked under the default collation only")
	}

	sneaky := key("sneaky")
	sneaky.Name = `x'); DROP TABLE api_keys; -- \'"`
	sneaky.ExpiresAt = time.Unix(-5, 0)
	got, err := db.CreateKey(ctx, sneaky)
	if err != nil {
		t.Fatal(err)
	}
	if got.Name != sneaky.Name {
		t.Errorf("name = %q, want %q", got.Name, sneaky.Name)
	}
	if got.ExpiresAt.IsZero() || !got.ExpiresAt.Before(clk.Now()) {
		t.Errorf("an expiry before 1970 came back as %v, want an expiry in the past", got.ExpiresAt)
	}

	ids := []string{"key-b", "KEY-A", "key-a", "Key_z", "key-B"}
	for _, id := range ids {
		if _, err := db.CreateKey(ctx, key(id)); err != nil {
			t.Fatal(err)
		}
	}
	list, err := db.KeysByOwner(ctx, owner)
	if err != nil {
		t.Fatal(err)
	}
	want := slices.Sorted(slices.Values(append([]string{"sneaky"}, ids...)))
	var gotIDs []string
	for _, k := range list {
		gotIDs = append(gotIDs, k.ID)
	}
	if !slices.Equal(gotIDs, want) {
		t.Errorf("KeysByOwner() ids = %q, want %q (bytewise, one millisecond)", gotIDs, want)
	}

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := db.CreateKey(cancelled, key("late")); !errors.Is(err, context.Canceled) {
		t.Errorf("CreateKey(cancelled) = %v, want a Canceled error", err)
	}
	if err := db.PutNonce(cancelled, "n0nce0000000000000001", time.Minute); !errors.Is(err, context.Canceled) {
		t.Errorf("PutNonce(cancelled) = %v, want a Canceled error", err)
	}
	if _, err := db.KeyByHash(ctx, key("late").Hash); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("KeyByHash(late) = %v, want ErrNotFound", err)
	}
	if err := db.ConsumeNonce(ctx, "n0nce0000000000000001"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("ConsumeNonce() of a nonce put with a cancelled context = %v, want ErrNotFound", err)
	}
}

// TestKeysServerClock checks the production path, DB.Now nil: the server's
// clock stamps keys and sessions and judges a nonce's expiry.
func TestKeysServerClock(t *testing.T) {
	ctx := t.Context()
	_, dsn := freshSchema(t)
	db := open(t, dsn, nil, nil)
	before := serverMs(t, db)
	k, err := db.CreateKey(ctx, store.APIKey{ID: "k1", Hash: strings.Repeat("ab", 32), Owner: "0xabc",
		TotalCap: store.NoCap, PeriodCap: store.NoCap})
	if err != nil {
		t.Fatal(err)
	}
	s, err := db.CreateSession(ctx, strings.Repeat("cd", 32), "0xabc", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	after := serverMs(t, db)
	for what, ts := range map[string]time.Time{"key": k.CreatedAt, "session": s.CreatedAt} {
		if ms := ts.UnixMilli(); ms < before || ms > after {
			t.Errorf("%s CreatedAt = %d, want the server's time, in [%d, %d]", what, ms, before, after)
		}
	}
	if !s.ExpiresAt.Equal(s.CreatedAt.Add(time.Minute)) {
		t.Errorf("session = %+v, want it to expire a minute after it was created", s)
	}
	// A nonce of one millisecond, consumed once the server's clock has
	// passed it.
	if err := db.PutNonce(ctx, "n0nce0000000000000001", time.Millisecond); err != nil {
		t.Fatal(err)
	}
	expiry := serverMs(t, db) + 1 // put no later than now, for a millisecond
	for serverMs(t, db) < expiry {
		time.Sleep(time.Millisecond)
	}
	if err := db.ConsumeNonce(ctx, "n0nce0000000000000001"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("ConsumeNonce() after its expiry by the server's clock = %v, want ErrNotFound", err)
	}
}
