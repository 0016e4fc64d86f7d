package postgres

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llm4agents/llm4agents/internal/store"
)

// notifyWait bounds how long a test waits for a notification it expects.
const notifyWait = 2 * time.Second

// keyWatch is a running WatchKeys, recording what it is told.
type keyWatch struct {
	changed  chan string
	lost     chan struct{}
	overflow atomic.Bool // a callback found its channel full
	channel  string      // the schema's key channel
}

// watch runs db.WatchKeys until the test ends, waits until it listens, and
// then checks that it returned nil, promptly, once its context ended.
func watch(t *testing.T, db *DB) *keyWatch {
	t.Helper()
	w := &keyWatch{changed: make(chan string, 64), lost: make(chan struct{}, 8)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- db.WatchKeys(ctx, func(hash string) {
			select {
			case w.changed <- hash:
			default:
				w.overflow.Store(true)
			}
		}, func() {
			select {
			case w.lost <- struct{}{}:
			default:
				w.overflow.Store(true)
			}
		})
	}()
	t.Cleanup(func() {
		cancel()
		start := time.Now()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("WatchKeys() = %v after its context ended, want nil", err)
			}
			if d := time.Since(start); d > time.Second {
				t.Errorf("WatchKeys() returned %v after its context ended", d)
			}
		case <-time.After(10 * time.Second):
			t.Error("WatchKeys() did not return after its context ended")
		}
		if w.overflow.Load() {
			t.Error("more callbacks than the test reads")
		}
	})
	if err := db.pool.QueryRow(t.Context(), `SELECT `+keysChannel).Scan(&w.channel); err != nil {
		t.Fatal(err)
	}
	if len(w.channel) > 63 || !strings.HasPrefix(w.channel, "llm4agents_keys_") {
		t.Fatalf("channel %q: want llm4agents_keys_ and at most 63 bytes", w.channel)
	}
	w.listener(t, db)
	return w
}

// listener waits until the watch's connection listens, and returns its
// backend's pid.
func (w *keyWatch) listener(t *testing.T, db *DB) int32 {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		// A session shows its last statement; LISTEN takes effect once it
		// is done (idle).
		var pids []int32
		rows, err := db.pool.Query(t.Context(), `SELECT pid FROM pg_stat_activity WHERE query = $1 AND state = 'idle'`,
			`LISTEN "`+w.channel+`"`)
		if err == nil {
			for rows.Next() {
				var pid int32
				if err = rows.Scan(&pid); err != nil {
					break
				}
				pids = append(pids, pid)
			}
			rows.Close()
			if err == nil {
				err = rows.Err()
			}
		}
		switch {
		case err != nil:
			t.Fatal(err)
		case len(pids) == 1:
			return pids[0]
		case len(pids) > 1:
			t.Fatalf("%d sessions listen on %s, want 1", len(pids), w.channel)
		case time.Now().After(deadline):
			t.Fatal("WatchKeys does not listen after 5s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// next returns the next hash the watch is told, failing the test after
// notifyWait.
func (w *keyWatch) next(t *testing.T) string {
	t.Helper()
	select {
	case h := <-w.changed:
		return h
	case <-time.After(notifyWait):
		t.Fatalf("no key change notified within %v", notifyWait)
		return ""
	}
}

// watchOwner owns the keys of these tests.
const watchOwner = "0x857b06519e91e3a54538791bdbb0e22373e36b66"

// newWatchKey stores a key with id on db.
func newWatchKey(t *testing.T, db *DB, id string) store.APIKey {
	t.Helper()
	sum := sha256.Sum256([]byte(id))
	k, err := db.CreateKey(t.Context(), store.APIKey{ID: id, Hash: hex.EncodeToString(sum[:]), Owner: watchOwner,
		TotalCap: store.NoCap, PeriodCap: store.NoCap})
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// revoke revokes k on db, checks that it was revoked and returns it.
func revoke(t *testing.T, db *DB, k store.APIKey) store.APIKey {
	t.Helper()
	got, err := db.RevokeKey(t.Context(), k.Owner, k.ID)
	if err != nil || !got.Revoked() {
		t.Fatalf("RevokeKey(%s) = %+v, %v", k.ID, got, err)
	}
	return got
}

// TestWatchKeys: a key revoked or changed through one DB (replica A) is
// notified to a watch on another DB on the same schema (replica B); a
// revocation of a revoked key and a refused update change nothing and
// notify nothing. A notification that must not come is checked without
// waiting: a change made after it is notified after it (PostgreSQL
// delivers notifications in commit order), so it must be the next one
// received.
func TestWatchKeys(t *testing.T) {
	ctx := t.Context()
	_, dsn := freshSchema(t)
	a, b := open(t, dsn, nil, nil), open(t, dsn, nil, nil)
	w := watch(t, b)

	k1 := newWatchKey(t, a, "k1")
	start := time.Now()
	revoked := revoke(t, a, k1)
	if h := w.next(t); h != k1.Hash {
		t.Fatalf("notified %q after a revocation, want %q", h, k1.Hash)
	}
	t.Logf("revocation notified in %v", time.Since(start))

	k2 := newWatchKey(t, a, "k2")
	lowered := k2
	lowered.TotalCap = 1000
	if _, err := a.UpdateKey(ctx, k2.Owner, k2.ID, k2, lowered); err != nil {
		t.Fatal(err)
	}
	if h := w.next(t); h != k2.Hash {
		t.Fatalf("notified %q after an update, want %q", h, k2.Hash)
	}

	// Changes that change nothing.
	if got, err := a.RevokeKey(ctx, k1.Owner, k1.ID); err != nil || !got.RevokedAt.Equal(revoked.RevokedAt) {
		t.Fatalf("RevokeKey() of a revoked key = %+v, %v", got, err)
	}
	stale := lowered
	stale.TotalCap = 5
	if _, err := a.UpdateKey(ctx, k2.Owner, k2.ID, k2, stale); !errors.Is(err, store.ErrConflict) { // from k2: stale
		t.Fatalf("UpdateKey() from stale limits = %v, want ErrConflict", err)
	}
	capped := k1
	capped.TotalCap = 5
	if _, err := a.UpdateKey(ctx, k1.Owner, k1.ID, k1, capped); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("UpdateKey() of a revoked key = %v, want ErrConflict", err)
	}
	theirs, theirsNow := lowered, stale
	theirs.Owner, theirsNow.Owner = "0xother", "0xother"
	if _, err := a.UpdateKey(ctx, "0xother", k2.ID, theirs, theirsNow); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("UpdateKey() of another owner's key = %v, want ErrNotFound", err)
	}
	if _, err := a.RevokeKey(ctx, "0xother", k2.ID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("RevokeKey() of another owner's key = %v, want ErrNotFound", err)
	}
	marker := newWatchKey(t, a, "marker")
	revoke(t, a, marker)
	if h := w.next(t); h != marker.Hash {
		t.Fatalf("notified %q after changes that changed nothing, want the next change's %q", h, marker.Hash)
	}
}

// TestWatchKeysHostilePayloads: anyone who may connect can notify on the
// channel; what is not a key hash is ignored, and the watch goes on.
func TestWatchKeysHostilePayloads(t *testing.T) {
	_, dsn := freshSchema(t)
	db := open(t, dsn, nil, nil)
	w := watch(t, db)
	for _, payload := range []string{
		"",
		"not a hash",
		strings.Repeat("A", 64), // upper case
		strings.Repeat("a", 63),
		strings.Repeat("a", 65),
		strings.Repeat("a", 64) + "\n",
		"'); DROP TABLE api_keys; --",
		strings.Repeat("x", 7999), // the largest payload the server sends
	} {
		admin(t, dsn, `SELECT pg_notify($1, $2)`, w.channel, payload)
	}
	// The server refuses a payload of 8000 bytes or more, so a 10 KB one
	// never reaches a listener.
	conn := rawConn(t, t.Context(), dsn)
	defer func() { _ = conn.Close(context.Background()) }()
	if _, err := conn.Exec(t.Context(), `SELECT pg_notify($1, $2)`, w.channel, strings.Repeat("x", 10_000)); err == nil ||
		!strings.Contains(err.Error(), "payload string too long") {
		t.Errorf("pg_notify() of 10 KB = %v, want the server's refusal", err)
	}
	marker := newWatchKey(t, db, "marker")
	revoke(t, db, marker)
	if h := w.next(t); h != marker.Hash {
		t.Fatalf("notified %q after hostile payloads, want the next change's %q", h, marker.Hash)
	}
}

// TestWatchKeysOtherSchema: each schema has a channel of its own, so a
// store does not hear the key changes of another schema on the database.
func TestWatchKeysOtherSchema(t *testing.T) {
	_, dsn := freshSchema(t)
	_, otherDSN := freshSchema(t)
	db, other := open(t, dsn, nil, nil), open(t, otherDSN, nil, nil)
	w, wo := watch(t, db), watch(t, other)
	if w.channel == wo.channel {
		t.Fatalf("two schemas share the channel %s", w.channel)
	}
	theirs := newWatchKey(t, other, "theirs")
	revoke(t, other, theirs)
	if h := wo.next(t); h != theirs.Hash { // it was notified, on its channel
		t.Fatalf("the other schema's watch was told %q, want %q", h, theirs.Hash)
	}
	ours := newWatchKey(t, db, "ours")
	revoke(t, db, ours)
	if h := w.next(t); h != ours.Hash {
		t.Fatalf("notified %q, want this schema's change %q only", h, ours.Hash)
	}
}

// TestWatchKeysReconnects: when the listening connection is killed, the
// watch connects again, says that notifications may have been lost, and
// goes on notifying.
func TestWatchKeysReconnects(t *testing.T) {
	_, dsn := freshSchema(t)
	a, b := open(t, dsn, nil, nil), open(t, dsn, nil, nil)
	w := watch(t, b)
	for round := range 2 {
		pid := w.listener(t, b)
		admin(t, dsn, `SELECT pg_terminate_backend($1)`, pid)
		select {
		case <-w.lost:
		case <-time.After(5 * time.Second):
			t.Fatalf("round %d: lost() not called within 5s of the listener's end", round)
		}
		if again := w.listener(t, b); again == pid {
			t.Fatalf("round %d: the killed session %d still listens", round, pid)
		}
		k := newWatchKey(t, a, "k"+string(rune('0'+round)))
		revoke(t, a, k)
		if h := w.next(t); h != k.Hash {
			t.Fatalf("round %d: notified %q after reconnecting, want %q", round, h, k.Hash)
		}
	}
	select {
	case <-w.lost:
		t.Error("lost() called without a broken connection")
	default:
	}
}
