package sqlite

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/llm4agents/llm4agents/internal/store"
)

// sqliteWatch is a running WatchKeys, recording what it is told.
type sqliteWatch struct {
	changed chan string
	lost    chan struct{}
	cancel  context.CancelFunc
	done    chan error // WatchKeys' result
}

// startWatch runs db.WatchKeys until stopped or the test ends, and waits
// until its watch is registered.
func startWatch(t *testing.T, db *DB) *sqliteWatch {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w := &sqliteWatch{changed: make(chan string, 2048), lost: make(chan struct{}, 8), cancel: cancel, done: make(chan error, 1)}
	before := watchCount(db)
	go func() {
		w.done <- db.WatchKeys(ctx, func(h string) { w.changed <- h }, func() { w.lost <- struct{}{} })
	}()
	t.Cleanup(func() {
		if err := w.stop(t); err != nil && !errors.Is(err, store.ErrClosed) {
			t.Errorf("WatchKeys() = %v after its context ended, want nil", err)
		}
	})
	for deadline := time.Now().Add(5 * time.Second); watchCount(db) == before; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("WatchKeys did not register within 5s")
		}
	}
	return w
}

// stop ends the watch and returns what WatchKeys returned.
func (w *sqliteWatch) stop(t *testing.T) error {
	t.Helper()
	w.cancel()
	select {
	case err := <-w.done:
		w.done <- err // for the next stop
		return err
	case <-time.After(5 * time.Second):
		t.Fatal("WatchKeys did not return within 5s of its context's end")
		return nil
	}
}

func watchCount(db *DB) int {
	db.watches.mu.Lock()
	defer db.watches.mu.Unlock()
	return len(db.watches.set)
}

// next returns the next hash the watch is told; the writer tells it before
// the change's caller returns, so it is there at once.
func (w *sqliteWatch) next(t *testing.T) string {
	t.Helper()
	select {
	case h := <-w.changed:
		return h
	case <-time.After(2 * time.Second):
		t.Fatal("no key change told within 2s")
		return ""
	}
}

const watchOwner = "0x857b06519e91e3a54538791bdbb0e22373e36b66"

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

func revokeKey(t *testing.T, db *DB, k store.APIKey) {
	t.Helper()
	if got, err := db.RevokeKey(t.Context(), k.Owner, k.ID); err != nil || !got.Revoked() {
		t.Fatalf("RevokeKey(%s) = %+v, %v", k.ID, got, err)
	}
}

// TestWatchKeys: a key revoked or changed through the DB is told to its
// watches once the change committed; a revocation of a revoked key and a
// refused update are not. What must not be told is checked without waiting:
// changes are told in commit order, so a later change must come next.
func TestWatchKeys(t *testing.T) {
	ctx := t.Context()
	db := openTemp(t)
	w1, w2 := startWatch(t, db), startWatch(t, db)

	k1 := newWatchKey(t, db, "k1")
	revokeKey(t, db, k1)
	for i, w := range []*sqliteWatch{w1, w2} {
		if h := w.next(t); h != k1.Hash {
			t.Fatalf("watch %d told %q after a revocation, want %q", i, h, k1.Hash)
		}
	}
	k2 := newWatchKey(t, db, "k2")
	lowered := k2
	lowered.TotalCap = 1000
	if _, err := db.UpdateKey(ctx, k2.Owner, k2.ID, k2, lowered); err != nil {
		t.Fatal(err)
	}
	for i, w := range []*sqliteWatch{w1, w2} {
		if h := w.next(t); h != k2.Hash {
			t.Fatalf("watch %d told %q after an update, want %q", i, h, k2.Hash)
		}
	}
	if err := w2.stop(t); err != nil {
		t.Fatalf("WatchKeys() = %v after its context ended, want nil", err)
	}

	// Changes that change nothing.
	revokeKey(t, db, k1) // revoked already
	stale := lowered
	stale.TotalCap = 5
	if _, err := db.UpdateKey(ctx, k2.Owner, k2.ID, k2, stale); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("UpdateKey() from stale limits = %v, want ErrConflict", err)
	}
	capped := k1
	capped.TotalCap = 5
	if _, err := db.UpdateKey(ctx, k1.Owner, k1.ID, k1, capped); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("UpdateKey() of a revoked key = %v, want ErrConflict", err)
	}
	marker := newWatchKey(t, db, "marker")
	revokeKey(t, db, marker)
	if h := w1.next(t); h != marker.Hash {
		t.Fatalf("told %q after changes that changed nothing, want the next change's %q", h, marker.Hash)
	}

	// The stopped watch was told nothing more, and is gone.
	select {
	case h := <-w2.changed:
		t.Errorf("a watch whose context ended was told %q", h)
	default:
	}
	if n := watchCount(db); n != 1 {
		t.Errorf("%d watches registered, want 1 (the stopped one unregistered)", n)
	}
	select {
	case <-w1.lost:
		t.Error("lost() called though nothing was dropped")
	default:
	}
}

// TestWatchKeysOtherHandle: another DB value on the same file, as another
// process would have, is not told (documented: the cache TTL bounds it).
func TestWatchKeysOtherHandle(t *testing.T) {
	path := filepath.Join(t.TempDir(), "llm4agents.db")
	a, b := openAt(t, path), openAt(t, path)
	w := startWatch(t, b)
	revokeKey(t, a, newWatchKey(t, a, "elsewhere"))
	marker := newWatchKey(t, b, "here")
	revokeKey(t, b, marker)
	if h := w.next(t); h != marker.Hash {
		t.Fatalf("told %q, want only this handle's change %q", h, marker.Hash)
	}
}

func openAt(t *testing.T, path string) *DB {
	t.Helper()
	db, err := Open(t.Context(), path, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := db.Close(); err != nil {
			t.Error(err)
		}
	})
	return db
}

// TestWatchKeysEnds: a watch returns at once for an ended context, and with
// ErrClosed when its DB closes; neither leaves a watch registered.
func TestWatchKeysEnds(t *testing.T) {
	db := openTemp(t)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := db.WatchKeys(ctx, func(string) { t.Error("changed called") }, func() { t.Error("lost called") }); err != nil {
		t.Errorf("WatchKeys(ended context) = %v, want nil", err)
	}

	closing, err := Open(t.Context(), filepath.Join(t.TempDir(), "closing.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	w := startWatch(t, closing)
	if err := closing.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-w.done:
		if !errors.Is(err, store.ErrClosed) {
			t.Errorf("WatchKeys() = %v when its DB closed, want ErrClosed", err)
		}
		w.done <- err
	case <-time.After(5 * time.Second):
		t.Fatal("WatchKeys did not return when its DB closed")
	}
	if n := watchCount(closing) + watchCount(db); n != 0 {
		t.Errorf("%d watches left registered", n)
	}
	if err := closing.WatchKeys(t.Context(), nil, nil); !errors.Is(err, store.ErrClosed) {
		t.Errorf("WatchKeys() on a closed DB = %v, want ErrClosed", err)
	}
}

// TestWatchKeysOverflow: a watch that cannot keep up is told that changes
// were dropped, never blocks the writer, and goes on.
func TestWatchKeysOverflow(t *testing.T) {
	db := openTemp(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	release := make(chan struct{})
	got, lost := make(chan string, 2*maxPendingChanges), make(chan struct{}, 1)
	done := make(chan error, 1)
	go func() {
		done <- db.WatchKeys(ctx, func(h string) { <-release; got <- h }, func() { lost <- struct{}{} })
	}()
	for watchCount(db) == 0 {
		time.Sleep(time.Millisecond)
	}
	db.keyChanged("first") // taken, then held in changed until release
	for pending(db) != 0 {
		time.Sleep(time.Millisecond)
	}
	for i := range maxPendingChanges + 10 {
		db.keyChanged(hex.EncodeToString([]byte{byte(i >> 8), byte(i)}))
	}
	close(release)
	select {
	case <-lost:
	case <-time.After(5 * time.Second):
		t.Fatal("lost() not called after changes were dropped")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := len(got); n != maxPendingChanges+1 {
		t.Errorf("%d changes told, want %d (the first, then the pending bound)", n, maxPendingChanges+1)
	}
}

// pending is how many changes the watches of db have not taken.
func pending(db *DB) int {
	db.watches.mu.Lock()
	defer db.watches.mu.Unlock()
	n := 0
	for w := range db.watches.set {
		w.mu.Lock()
		n += len(w.pending)
		w.mu.Unlock()
	}
	return n
}
