package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/llm4agents/llm4agents/internal/store"
)

// openTest opens a DB on a new file and closes it when the test ends.
func openTest(tb testing.TB) (*DB, string) {
	tb.Helper()
	path := filepath.Join(tb.TempDir(), "llm4agents.db")
	db, err := Open(tb.Context(), path, nil)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := db.Close(); err != nil {
			tb.Errorf("Close(): %v", err)
		}
	})
	return db, path
}

// batchWatch records the size of every batch that reaches COMMIT, and can
// hold the next such batch open just before its COMMIT.
type batchWatch struct {
	mu    sync.Mutex
	sizes []int
	gate  *gate // the batch to hold next, if any
}

type gate struct {
	held    chan struct{} // closed once the writer waits at the gate
	release chan struct{}
	once    sync.Once
}

func (g *gate) open() { g.once.Do(func() { close(g.release) }) }

// watchBatches installs a batchWatch on db. Call it before db's first write.
func watchBatches(db *DB) *batchWatch {
	w := &batchWatch{}
	db.beforeCommit = func(n int) {
		w.mu.Lock()
		w.sizes = append(w.sizes, n)
		g := w.gate
		w.gate = nil
		w.mu.Unlock()
		if g != nil {
			close(g.held)
			<-g.release
		}
	}
	return w
}

// Sizes returns the sizes of the batches so far, oldest first.
func (w *batchWatch) Sizes() []int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.sizes)
}

// holdNext makes the next batch wait before its COMMIT until the returned
// gate is opened; the test's cleanup opens it in any case.
func (w *batchWatch) holdNext(tb testing.TB) *gate {
	g := &gate{held: make(chan struct{}), release: make(chan struct{})}
	tb.Cleanup(g.open)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.gate = g
	return g
}

// holdWriter occupies db's writer with a batch of one empty op, held before
// its COMMIT, so that writes queue up behind it. Opening the gate lets it go;
// the op's error is reported when the test ends.
func holdWriter(t *testing.T, db *DB, w *batchWatch) *gate {
	t.Helper()
	g := w.holdNext(t)
	errc := make(chan error, 1)
	go func() { errc <- db.write(t.Context(), func(context.Context, *sql.Tx) error { return nil }) }()
	t.Cleanup(func() {
		if err := <-errc; err != nil {
			t.Errorf("holding write: %v", err)
		}
	})
	wait(t, "the writer to hold its batch", g.held)
	return g
}

func wait(t *testing.T, what string, c <-chan struct{}) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// waitFor polls cond under db.mu until it holds.
func waitFor(t *testing.T, db *DB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		db.mu.Lock()
		ok := cond()
		db.mu.Unlock()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func waitQueued(t *testing.T, db *DB, n int) {
	t.Helper()
	waitFor(t, db, fmt.Sprintf("%d queued writes", n), func() bool { return len(db.queue) == n })
}

func fenceCounter(t *testing.T, db *DB) int64 {
	t.Helper()
	var last int64
	if err := db.ro.QueryRowContext(t.Context(), `SELECT last FROM settlement_fences WHERE id = 1`).Scan(&last); err != nil {
		t.Fatal(err)
	}
	return last
}

// result is what one concurrent call got; workers send results to the test
// goroutine, which alone fails the test.
type result struct {
	name string
	s    store.Settlement
	ok   bool
	err  error
}

// goCall runs fn on a goroutine of its own and sends its result to out.
func goCall(out chan<- result, name string, fn func() (store.Settlement, bool, error)) {
	go func() {
		s, ok, err := fn()
		out <- result{name: name, s: s, ok: ok, err: err}
	}()
}

func collect(t *testing.T, in <-chan result, n int) map[string]result {
	t.Helper()
	got := map[string]result{}
	for range n {
		select {
		case r := <-in:
			got[r.name] = r
		case <-time.After(10 * time.Second):
			t.Fatalf("timed out with %d of %d results", len(got), n)
		}
	}
	return got
}

func claimInput(key string) store.Settlement {
	return store.Settlement{Key: key, Network: "eip155:8453", Asset: "0xa", Payer: "0xb", PayTo: "0xc", Amount: "1", Owner: "a"}
}

// TestGroupCommitBatchesConcurrentWrites checks that concurrent writes share
// commits: 64 concurrent claims take fewer than 64 batches, and each still
// gets a fence of its own.
func TestGroupCommitBatchesConcurrentWrites(t *testing.T) {
	db, _ := openTest(t)
	w := watchBatches(db)
	const n = 64
	startGun := make(chan struct{})
	out := make(chan result, n)
	for i := range n {
		key := fmt.Sprintf("k%02d", i)
		goCall(out, key, func() (store.Settlement, bool, error) {
			<-startGun
			return db.ClaimSettlement(t.Context(), claimInput(key), time.Minute)
		})
	}
	close(startGun)
	got := collect(t, out, n)
	fences := map[int64]string{}
	for key, r := range got {
		if r.err != nil || !r.ok {
			t.Errorf("ClaimSettlement(%q) = %v, %v; want true, nil", key, r.ok, r.err)
		}
		if other, dup := fences[r.s.Fence]; dup {
			t.Errorf("%q and %q got the same fence %d", key, other, r.s.Fence)
		}
		fences[r.s.Fence] = key
	}
	sizes := w.Sizes()
	total := 0
	for _, s := range sizes {
		total += s
	}
	t.Logf("%d claims committed in %d batches of sizes %v", n, len(sizes), sizes)
	if total != n {
		t.Errorf("batches hold %d ops in all, want %d", total, n)
	}
	if len(sizes) >= n {
		t.Errorf("%d concurrent claims took %d batches, want fewer", n, len(sizes))
	}
}

// TestGroupCommitIsolatesFailedOps checks that ops failing in a batch, with a
// stale fence, a missing record, or after writing something, leave the other
// ops of the same batch alone, and that a failed op's writes are rolled back,
// the fence it drew included.
func TestGroupCommitIsolatesFailedOps(t *testing.T) {
	ctx := t.Context()
	db, _ := openTest(t)
	w := watchBatches(db)
	keys := []string{"k0", "k1", "k2", "k3"}
	claimed := map[string]store.Settlement{}
	for _, key := range append(slices.Clone(keys), "stale") {
		s, ok, err := db.ClaimSettlement(ctx, claimInput(key), time.Minute)
		if err != nil || !ok {
			t.Fatalf("ClaimSettlement(%q) = %v, %v", key, ok, err)
		}
		claimed[key] = s
	}
	counter := fenceCounter(t, db)
	before := len(w.Sizes())

	g := holdWriter(t, db, w)
	out := make(chan result, 8)
	for _, key := range keys {
		goCall(out, key, func() (store.Settlement, bool, error) {
			return store.Settlement{}, false, db.UpdateSettlement(ctx, key, claimed[key].Fence, store.StateBroadcast, "0xhash", "")
		})
	}
	goCall(out, "stale", func() (store.Settlement, bool, error) {
		return store.Settlement{}, false, db.UpdateSettlement(ctx, "stale", claimed["stale"].Fence+100, store.StateBroadcast, "0xhash", "")
	})
	goCall(out, "absent", func() (store.Settlement, bool, error) {
		set, err := db.MarkSuccessReported(ctx, "absent")
		return store.Settlement{}, set, err
	})
	// An op that writes, then fails: its writes must vanish, whether it runs
	// before or after the update of k0 in the batch.
	goCall(out, "partial", func() (store.Settlement, bool, error) {
		return store.Settlement{}, false, db.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
			if _, err := nextFence(ctx, tx); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, `UPDATE settlements SET owner = 'intruder' WHERE settlement_key = 'k0'`); err != nil {
				return err
			}
			return fmt.Errorf("gave up after writing: %w", store.ErrFenced)
		})
	})
	goCall(out, "fresh", func() (store.Settlement, bool, error) {
		return db.ClaimSettlement(ctx, claimInput("fresh"), time.Minute)
	})
	const ops = 8
	waitQueued(t, db, ops)
	g.open()
	got := collect(t, out, ops)

	if diff := cmp.Diff([]int{1, ops}, w.Sizes()[before:]); diff != "" {
		t.Fatalf("batch sizes after the setup (-want +got):\n%s", diff)
	}
	for _, key := range keys {
		if err := got[key].err; err != nil {
			t.Errorf("UpdateSettlement(%q) = %v, want nil", key, err)
		}
		s, err := db.Settlement(ctx, key)
		if err != nil || s.State != store.StateBroadcast || s.Owner != "a" {
			t.Errorf("Settlement(%q) = state %s, owner %q, %v; want broadcast, owner a", key, s.State, s.Owner, err)
		}
	}
	if err := got["stale"].err; !errors.Is(err, store.ErrFenced) {
		t.Errorf("UpdateSettlement(stale fence) = %v, want ErrFenced", err)
	}
	if s, err := db.Settlement(ctx, "stale"); err != nil || !cmp.Equal(s, claimed["stale"]) {
		t.Errorf("Settlement(stale) = %+v, %v; want it unchanged", s, err)
	}
	if r := got["absent"]; r.ok || !errors.Is(r.err, store.ErrNotFound) {
		t.Errorf("MarkSuccessReported(absent) = %v, %v; want false, ErrNotFound", r.ok, r.err)
	}
	if err := got["partial"].err; !errors.Is(err, store.ErrFenced) {
		t.Errorf("partial op = %v, want its ErrFenced", err)
	}
	// Exactly one fence was drawn in the batch: fresh's.
	if r := got["fresh"]; r.err != nil || !r.ok || r.s.Fence != counter+1 {
		t.Errorf("ClaimSettlement(fresh) = fence %d, %v, %v; want fence %d, true, nil", r.s.Fence, r.ok, r.err, counter+1)
	}
	if c := fenceCounter(t, db); c != counter+1 {
		t.Errorf("fence counter = %d after the batch, want %d (the failed op's draw rolled back)", c, counter+1)
	}
}

// TestGroupCommitFailedCommit checks that when COMMIT fails, no op of the
// batch is told it succeeded, not even those whose statements all ran, and
// that none of their writes stays.
func TestGroupCommitFailedCommit(t *testing.T) {
	ctx := t.Context()
	db, _ := openTest(t)
	w := watchBatches(db)
	// A deferred foreign key is checked at COMMIT, which then fails.
	if _, err := db.rw.ExecContext(ctx, `CREATE TABLE parent (id INTEGER PRIMARY KEY);
CREATE TABLE child (parent_id INTEGER REFERENCES parent (id) DEFERRABLE INITIALLY DEFERRED)`); err != nil {
		t.Fatal(err)
	}
	held, ok, err := db.ClaimSettlement(ctx, claimInput("held"), time.Minute)
	if err != nil || !ok {
		t.Fatalf("ClaimSettlement(held) = %v, %v", ok, err)
	}
	counter := fenceCounter(t, db)

	g := holdWriter(t, db, w)
	out := make(chan result, 4)
	goCall(out, "claim", func() (store.Settlement, bool, error) {
		return db.ClaimSettlement(ctx, claimInput("k"), time.Minute)
	})
	goCall(out, "update", func() (store.Settlement, bool, error) {
		return store.Settlement{}, false, db.UpdateSettlement(ctx, "held", held.Fence, store.StateBroadcast, "0xhash", "")
	})
	goCall(out, "stale", func() (store.Settlement, bool, error) {
		return store.Settlement{}, false, db.UpdateSettlement(ctx, "held", held.Fence+1, store.StateBroadcast, "0xhash", "")
	})
	goCall(out, "orphan", func() (store.Settlement, bool, error) {
		return store.Settlement{}, false, db.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, `INSERT INTO child (parent_id) VALUES (42)`)
			return err
		})
	})
	waitQueued(t, db, 4)
	g.open()
	for name, r := range collect(t, out, 4) {
		if r.err == nil || r.ok || !strings.Contains(r.err.Error(), "commit") {
			t.Errorf("%s: = %v, %v; want the COMMIT's error", name, r.ok, r.err)
		}
		if errors.Is(r.err, store.ErrFenced) {
			t.Errorf("%s: error %q matches ErrFenced; an uncommitted batch decides nothing", name, r.err)
		}
	}
	if s, err := db.Settlement(ctx, "k"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Settlement(k) = %+v, %v; want ErrNotFound", s, err)
	}
	if s, err := db.Settlement(ctx, "held"); err != nil || !cmp.Equal(s, held) {
		t.Errorf("Settlement(held) = %+v, %v; want it unchanged", s, err)
	}
	if c := fenceCounter(t, db); c != counter {
		t.Errorf("fence counter = %d, want %d", c, counter)
	}
	// The writer goes on with a clean connection.
	if _, ok, err := db.ClaimSettlement(ctx, claimInput("after"), time.Minute); err != nil || !ok {
		t.Errorf("ClaimSettlement(after) = %v, %v; want true, nil", ok, err)
	}
}

// TestWriteContextEnds checks what a caller whose context ends gets, by where
// its op is: still queued (the context's error, and the op never runs), or
// already run in a batch that has not committed yet (the commit's outcome).
func TestWriteContextEnds(t *testing.T) {
	t.Run("Queued", func(t *testing.T) {
		db, _ := openTest(t)
		w := watchBatches(db)
		g := holdWriter(t, db, w)
		ctx, cancel := context.WithCancel(t.Context())
		out := make(chan result, 1)
		goCall(out, "q", func() (store.Settlement, bool, error) {
			return db.ClaimSettlement(ctx, claimInput("q"), time.Minute)
		})
		waitQueued(t, db, 1)
		cancel()
		// Answered at once, while the writer is still held.
		r := collect(t, out, 1)["q"]
		if !errors.Is(r.err, context.Canceled) || r.ok {
			t.Errorf("ClaimSettlement() = %v, %v; want context.Canceled", r.ok, r.err)
		}
		g.open()
		// The writer drops the abandoned op; the next write proves it is done with it.
		if _, ok, err := db.ClaimSettlement(t.Context(), claimInput("next"), time.Minute); err != nil || !ok {
			t.Fatalf("ClaimSettlement(next) = %v, %v", ok, err)
		}
		if _, err := db.Settlement(t.Context(), "q"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("Settlement(q) = %v, want ErrNotFound: an abandoned op must not run", err)
		}
		if diff := cmp.Diff([]int{1, 1}, w.Sizes()); diff != "" {
			t.Errorf("batch sizes (-want +got):\n%s", diff)
		}
	})
	t.Run("Running", func(t *testing.T) {
		db, _ := openTest(t)
		w := watchBatches(db)
		g := w.holdNext(t)
		ctx, cancel := context.WithCancel(t.Context())
		out := make(chan result, 1)
		goCall(out, "r", func() (store.Settlement, bool, error) {
			return db.ClaimSettlement(ctx, claimInput("r"), time.Minute)
		})
		wait(t, "the batch to be held", g.held) // the claim ran; COMMIT is next
		cancel()
		select {
		case r := <-out:
			t.Fatalf("ClaimSettlement() = %v, %v before its batch committed", r.ok, r.err)
		case <-time.After(50 * time.Millisecond):
		}
		g.open()
		if r := collect(t, out, 1)["r"]; r.err != nil || !r.ok {
			t.Errorf("ClaimSettlement() = %v, %v; want true, nil: it committed", r.ok, r.err)
		}
		if _, err := db.Settlement(t.Context(), "r"); err != nil {
			t.Errorf("Settlement(r) = %v", err)
		}
	})
	t.Run("NoOutcome", func(t *testing.T) {
		db, _ := openTest(t)
		db.commitWait = 20 * time.Millisecond
		w := watchBatches(db)
		g := w.holdNext(t)
		ctx, cancel := context.WithCancel(t.Context())
		out := make(chan result, 1)
		goCall(out, "u", func() (store.Settlement, bool, error) {
			return db.ClaimSettlement(ctx, claimInput("u"), time.Minute)
		})
		wait(t, "the batch to be held", g.held)
		cancel()
		r := collect(t, out, 1)["u"]
		if r.ok || !errors.Is(r.err, context.Canceled) || !strings.Contains(r.err.Error(), "may or may not be durable") {
			t.Errorf("ClaimSettlement() = %v, %v; want an unknown-outcome error", r.ok, r.err)
		}
		g.open()
		// And rightly so: the write committed after the caller left. The
		// next write is answered only after the held batch is done.
		if _, ok, err := db.ClaimSettlement(t.Context(), claimInput("next"), time.Minute); err != nil || !ok {
			t.Fatalf("ClaimSettlement(next) = %v, %v", ok, err)
		}
		if _, err := db.Settlement(t.Context(), "u"); err != nil {
			t.Errorf("Settlement(u) = %v, want the record committed after its caller gave up", err)
		}
	})
}

// TestCloseAnswersQueuedWrites checks that Close runs and answers the writes
// queued before it, waits for the writer goroutine, and that writes after
// Close fail with an error saying why.
func TestCloseAnswersQueuedWrites(t *testing.T) {
	ctx := t.Context()
	db, path := openTest(t)
	w := watchBatches(db)
	g := holdWriter(t, db, w)
	const n = 8
	out := make(chan result, n)
	for i := range n {
		key := fmt.Sprintf("k%d", i)
		goCall(out, key, func() (store.Settlement, bool, error) {
			return db.ClaimSettlement(ctx, claimInput(key), time.Minute)
		})
	}
	waitQueued(t, db, n)

	closed := make(chan error, 1)
	go func() { closed <- db.Close() }()
	waitFor(t, db, "Close to begin", func() bool { return db.closing })
	_, _, err := db.ClaimSettlement(ctx, claimInput("late"), time.Minute)
	if !errors.Is(err, store.ErrClosed) || !strings.Contains(err.Error(), "database is closed") {
		t.Errorf("ClaimSettlement() during Close = %v, want store.ErrClosed", err)
	}
	select {
	case err := <-closed:
		t.Fatalf("Close() = %v while writes were still queued", err)
	default:
	}

	g.open()
	for key, r := range collect(t, out, n) {
		if r.err != nil || !r.ok {
			t.Errorf("queued ClaimSettlement(%q) = %v, %v; want true, nil", key, r.ok, r.err)
		}
	}
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("Close() = %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close() did not return")
	}
	select {
	case <-db.writerDone:
	default:
		t.Error("Close() returned before the writer goroutine")
	}

	// Every write after Close fails the same way, without waiting.
	for name, err := range map[string]error{
		"UpdateSettlement":  db.UpdateSettlement(ctx, "k0", 1, store.StateBroadcast, "0xhash", ""),
		"ReleaseSettlement": db.ReleaseSettlement(ctx, "k0", 1),
		"MarkSuccessReported": func() error {
			_, err := db.MarkSuccessReported(ctx, "k0")
			return err
		}(),
	} {
		if !errors.Is(err, store.ErrClosed) {
			t.Errorf("%s() after Close = %v, want store.ErrClosed", name, err)
		}
	}

	// What was answered is on disk.
	reopened, err := Open(ctx, path, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := reopened.Close(); err != nil {
			t.Errorf("Close(): %v", err)
		}
	})
	for i := range n {
		if _, err := reopened.Settlement(ctx, fmt.Sprintf("k%d", i)); err != nil {
			t.Errorf("after reopening: Settlement(k%d) = %v", i, err)
		}
	}
	if _, err := reopened.Settlement(ctx, "late"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("after reopening: Settlement(late) = %v, want ErrNotFound", err)
	}
}
