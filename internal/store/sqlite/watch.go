package sqlite

import (
	"context"
	"sync"

	"github.com/llm4agents/llm4agents/internal/store"
)

// maxPendingChanges bounds the key changes kept for one watch that has not
// taken them yet; past it they are dropped and the watch calls lost.
const maxPendingChanges = 1024

// keyWatches are a DB's running WatchKeys.
type keyWatches struct {
	mu  sync.Mutex
	set map[*keyWatch]struct{}
}

// keyWatch is one WatchKeys: the hashes changed since it last looked, and
// whether some were dropped.
type keyWatch struct {
	mu      sync.Mutex
	pending []string
	missed  bool
	wake    chan struct{} // capacity 1: something is pending
}

// keyChanged tells every watch of db that the key of hash changed. The
// writer calls it once the change has committed; it never blocks.
func (db *DB) keyChanged(hash string) {
	db.watches.mu.Lock()
	defer db.watches.mu.Unlock()
	for w := range db.watches.set {
		w.mu.Lock()
		if len(w.pending) < maxPendingChanges {
			w.pending = append(w.pending, hash)
		} else {
			w.missed = true
		}
		w.mu.Unlock()
		select {
		case w.wake <- struct{}{}:
		default: // already woken
		}
	}
}

// WatchKeys calls changed with the hash of each API key that RevokeKey or
// UpdateKey of this DB value changes, once the change has committed, until
// ctx ends (it then returns nil) or the DB is closed (store.ErrClosed).
// Changes made through other DB values, in this process or in others that
// share the file, are not told: a cache of keys (credits.Keys) bounds them
// by its TTL only. lost is called when more than maxPendingChanges changes
// came before the watch could take them, and those were dropped. changed
// and lost run on WatchKeys' goroutine, one at a time.
//
// A change committed before WatchKeys has registered its watch (on entry)
// is not told.
func (db *DB) WatchKeys(ctx context.Context, changed func(hash string), lost func()) error {
	if db.gate.Closed() {
		return store.ErrClosed
	}
	w := &keyWatch{wake: make(chan struct{}, 1)}
	db.watches.mu.Lock()
	if db.watches.set == nil {
		db.watches.set = map[*keyWatch]struct{}{}
	}
	db.watches.set[w] = struct{}{}
	db.watches.mu.Unlock()
	defer func() {
		db.watches.mu.Lock()
		delete(db.watches.set, w)
		db.watches.mu.Unlock()
	}()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-db.writerDone: // closed: no change comes any more
			return store.ErrClosed
		case <-w.wake:
		}
		w.mu.Lock()
		hashes, missed := w.pending, w.missed
		w.pending, w.missed = nil, false
		w.mu.Unlock()
		if missed {
			lost()
		}
		for _, h := range hashes {
			changed(h)
		}
	}
}
