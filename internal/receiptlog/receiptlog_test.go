package receiptlog_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"maps"
	"math/big"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/llm4agents/llm4agents/internal/receiptlog"
	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/internal/store/postgres"
	"github.com/llm4agents/llm4agents/internal/store/redis"
	"github.com/llm4agents/llm4agents/internal/store/sqlite"
	"github.com/llm4agents/llm4agents/internal/testdb"
	"github.com/llm4agents/llm4agents/x402/receipt"
)

// logStore is what the tests need of a backend: the log and its appends.
type logStore interface {
	receiptlog.Store
	AppendLog(ctx context.Context, entries []store.LogEntry) error
}

// backends open two handles on one new, empty database of each backend
// that keeps the log, as two replicas share it.
var backends = map[string]func(tb testing.TB) (logStore, logStore){"sqlite": openSQLite, "postgres": openPostgres, "redis": openRedis}

// eachBackend runs f on every backend.
func eachBackend(t *testing.T, f func(t *testing.T, a, b logStore)) {
	for name, open := range backends {
		t.Run(name, func(t *testing.T) {
			a, b := open(t)
			f(t, a, b)
		})
	}
}

func openPostgres(t testing.TB) (logStore, logStore) {
	t.Helper()
	dsn := testdb.PostgresDSN(t, "receiptlog")
	var out [2]logStore
	for i := range out {
		db, err := postgres.Open(t.Context(), dsn, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = db.Close() })
		out[i] = db
	}
	return out[0], out[1]
}

// openRedis opens two clients on one new key prefix of the Redis test
// server.
func openRedis(t testing.TB) (logStore, logStore) {
	t.Helper()
	url := testdb.RedisURL(t, "receiptlog")
	var out [2]logStore
	for i := range out {
		db, err := redis.Open(t.Context(), url, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = db.Close() })
		out[i] = db
	}
	return out[0], out[1]
}

// openSQLite opens two handles on one new SQLite database.
func openSQLite(t testing.TB) (logStore, logStore) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "log.db")
	var out [2]logStore
	for i := range out {
		db, err := sqlite.Open(t.Context(), path, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = db.Close() })
		out[i] = db
	}
	return out[0], out[1]
}

const origin = "gateway.test/receipts"

func newKey(t testing.TB) (note.Signer, string) {
	t.Helper()
	skey, vkey, err := note.GenerateKey(rand.Reader, origin)
	if err != nil {
		t.Fatal(err)
	}
	s, err := note.NewSigner(skey)
	if err != nil {
		t.Fatal(err)
	}
	return s, vkey
}

func newLog(t testing.TB, st receiptlog.Store, holder string, key note.Signer, vkey string) *receiptlog.Log {
	t.Helper()
	return newLogDelay(t, st, holder, key, vkey, 400*time.Millisecond)
}

// newLogDelay is newLog with a merge delay of its own (the lease lasts half
// of it).
func newLogDelay(t testing.TB, st receiptlog.Store, holder string, key note.Signer, vkey string, delay time.Duration) *receiptlog.Log {
	t.Helper()
	l, err := receiptlog.New(receiptlog.Config{Store: st, Key: key, VerifierKey: vkey, Holder: holder,
		MaxMergeDelay: delay})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

var domain = receipt.NewDomain(big.NewInt(8453))

// testReceipt is the i-th receipt of a test.
func testReceipt(i int) (*receipt.Receipt, string) {
	id := fmt.Sprintf("0x%064x", i+1)
	r := &receipt.Receipt{RequestID: common.HexToHash(id), Model: "demo", InputTokens: big.NewInt(int64(i)),
		OutputTokens: big.NewInt(5), Amount: big.NewInt(int64(100 + i)), BalanceAfter: big.NewInt(0),
		LedgerSeq: big.NewInt(int64(i + 1)), IssuedAt: 1_800_000_000, Rail: receipt.RailCredits}
	_, _ = rand.Read(r.Salt[:])
	return r, id
}

func appendReceipts(t *testing.T, st logStore, from, n int) map[string]*receipt.Receipt {
	t.Helper()
	out := map[string]*receipt.Receipt{}
	var entries []store.LogEntry
	for i := from; i < from+n; i++ {
		r, id := testReceipt(i)
		l, err := receipt.NewLeaf(domain, r)
		if err != nil {
			t.Fatal(err)
		}
		entries = append(entries, store.LogEntry{RequestID: id, Leaf: l.Marshal()})
		out[id] = r
	}
	if err := st.AppendLog(t.Context(), entries); err != nil {
		t.Fatal(err)
	}
	return out
}

// tiles reads a log's tiles as a remote verifier would, through Tile.
type tiles struct {
	t   *testing.T
	log *receiptlog.Log
}

func (r tiles) Height() int { return receipt.TileHeight }

func (r tiles) ReadTiles(ts []tlog.Tile) ([][]byte, error) {
	out := make([][]byte, len(ts))
	for i, tile := range ts {
		b, _, err := r.log.Tile(r.t.Context(), receipt.TilePath(tile))
		if err != nil {
			return nil, err
		}
		out[i] = b
	}
	return out, nil
}

func (tiles) SaveTiles([]tlog.Tile, [][]byte) {}

func checkpoint(t *testing.T, l *receiptlog.Log) receipt.Checkpoint {
	t.Helper()
	b, err := l.Checkpoint(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	c, err := receipt.OpenCheckpoint(b, l.Verifier())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestLog: leaves queued are integrated, each proof verifies as a buyer
// checks it, and a later checkpoint is consistent with an earlier one by
// the log's own tiles.
func TestLog(t *testing.T) { eachBackend(t, testLog) }

func testLog(t *testing.T, a, _ logStore) {
	key, vkey := newKey(t)
	l := newLog(t, a, "replica-1", key, vkey)
	if c := checkpoint(t, l); c.Size != 0 {
		t.Fatalf("a new log's checkpoint has size %d", c.Size)
	}
	first := appendReceipts(t, a, 0, 300)
	for id := range first {
		if _, err := l.Proof(t.Context(), id); !errors.Is(err, receiptlog.ErrPending) {
			t.Fatalf("a queued leaf's proof: %v, want ErrPending", err)
		}
		break
	}
	if n, err := l.Integrate(t.Context()); err != nil || n != 300 {
		t.Fatalf("Integrate = %d, %v; want 300", n, err)
	}
	old := checkpoint(t, l)
	rest := appendReceipts(t, a, 300, 700)
	if n, err := l.Integrate(t.Context()); err != nil || n != 700 {
		t.Fatalf("Integrate = %d, %v; want 700", n, err)
	}
	cur := checkpoint(t, l)
	if old.Size != 300 || cur.Size != 1000 {
		t.Fatalf("sizes %d then %d, want 300 then 1000", old.Size, cur.Size)
	}
	seen := map[int64]bool{}
	for _, all := range []map[string]*receipt.Receipt{first, rest} {
		for id, r := range all {
			p, err := l.Proof(t.Context(), id)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := receipt.VerifyInclusion(&p, l.Verifier(), domain, r); err != nil {
				t.Fatalf("receipt %s: %v", id, err)
			}
			if seen[p.Index] {
				t.Fatalf("index %d given twice", p.Index)
			}
			seen[p.Index] = true
		}
	}
	thr := tlog.TileHashReader(cur.Tree(), tiles{t, l})
	proof, err := tlog.ProveTree(cur.Size, old.Size, thr)
	if err != nil {
		t.Fatal(err)
	}
	if err := receipt.CheckConsistency(old, cur, proof); err != nil {
		t.Errorf("the log's own checkpoints: %v", err)
	}
	// The entry bundles hold the leaves, in order.
	b, full, err := l.Tile(t.Context(), "tile/entries/000")
	if err != nil || !full {
		t.Fatalf("entry bundle 0: full %t, %v", full, err)
	}
	leaves, err := receipt.ParseEntryBundle(b, 256)
	if err != nil {
		t.Fatal(err)
	}
	for i, leaf := range leaves {
		if got := tlog.RecordHash(leaf); got != mustHash(t, thr, int64(i)) {
			t.Fatalf("entry %d does not hash to the tree's leaf %d", i, i)
		}
	}
}

func mustHash(t *testing.T, r tlog.HashReader, i int64) tlog.Hash {
	t.Helper()
	hs, err := r.ReadHashes([]int64{tlog.StoredHashIndex(0, i)})
	if err != nil {
		t.Fatal(err)
	}
	return hs[0]
}

// TestTiles: a tile past the log's size, or a path that is not one, is
// ErrNotFound; a partial tile is served for the log's last leaves and is
// not full.
func TestTiles(t *testing.T) {
	a, _ := openSQLite(t)
	key, vkey := newKey(t)
	l := newLog(t, a, "replica-1", key, vkey)
	appendReceipts(t, a, 0, 260)
	if _, err := l.Integrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]bool{
		"tile/0/000": true, "tile/0/001.p/4": false, "tile/entries/001.p/4": false, "tile/0/000.p/10": false,
		"tile/1/000.p/1": false,
	} {
		if _, full, err := l.Tile(t.Context(), path); err != nil || full != want {
			t.Errorf("%s: full %t, %v; want full %t", path, full, err, want)
		}
	}
	for _, path := range []string{"tile/0/001", "tile/0/001.p/5", "tile/entries/002", "tile/1/000", "tile/0/x999/x999/x999/x999/x999/x999/000",
		"tile/7/000.p/1", "tile/9/000", "tile/0/-1", "tile/../0/000", "log/tile/0/000", ""} {
		if _, _, err := l.Tile(t.Context(), path); !errors.Is(err, receiptlog.ErrNotFound) {
			t.Errorf("%q: %v, want ErrNotFound", path, err)
		}
	}
}

// TestLeaseTakeover: a replica that took the lease and died stops the log
// only until its lease expires; the next replica then integrates what
// waited, and no leaf is integrated twice.
func TestLeaseTakeover(t *testing.T) { eachBackend(t, testLeaseTakeover) }

func testLeaseTakeover(t *testing.T, a, b logStore) {
	key, vkey := newKey(t)
	// A lease of a second: the test's own writes before the check that the
	// lease still binds must take less than that, even on a loaded machine.
	const delay = 2 * time.Second
	dead := newLogDelay(t, a, "replica-dead", key, vkey, delay)
	next := newLogDelay(t, b, "replica-next", key, vkey, delay)
	appendReceipts(t, a, 0, 10)
	if n, err := dead.Integrate(t.Context()); err != nil || n != 10 {
		t.Fatalf("Integrate = %d, %v", n, err)
	}
	// The first replica dies holding the lease; leaves keep coming.
	more := appendReceipts(t, b, 10, 5)
	if n, err := next.Integrate(t.Context()); err != nil || n != 0 {
		t.Fatalf("while the dead replica's lease runs: Integrate = %d, %v; want 0", n, err)
	}
	deadline := time.Now().Add(5 * delay)
	for {
		n, err := next.Integrate(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if n == 5 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the next replica never took the lease over")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if c := checkpoint(t, next); c.Size != 15 {
		t.Fatalf("size %d, want 15", c.Size)
	}
	for id, r := range more {
		p, err := next.Proof(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := receipt.VerifyInclusion(&p, next.Verifier(), domain, r); err != nil || p.Index < 10 {
			t.Fatalf("receipt %s at %d: %v", id, p.Index, err)
		}
	}
	// The dead replica, back, finds its lease gone: it integrates nothing.
	appendReceipts(t, a, 15, 1)
	if n, err := dead.Integrate(t.Context()); n != 0 || err != nil {
		t.Errorf("the old holder integrated %d after a takeover (err %v)", n, err)
	}
}

// TestReplicasRun: two replicas run their integrators while leaves arrive
// through both; every leaf ends in the log exactly once, within the merge
// delay of its arrival once arrivals stop.
func TestReplicasRun(t *testing.T) { eachBackend(t, testReplicasRun) }

func testReplicasRun(t *testing.T, a, b logStore) {
	key, vkey := newKey(t)
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	logs := []*receiptlog.Log{newLog(t, a, "replica-a", key, vkey), newLog(t, b, "replica-b", key, vkey)}
	for _, l := range logs {
		wg.Go(func() { l.Run(ctx) })
	}
	all := map[string]*receipt.Receipt{}
	var mu sync.Mutex
	var writers sync.WaitGroup
	for w, st := range []logStore{a, b} {
		writers.Go(func() {
			for i := range 20 {
				got := appendReceipts(t, st, w*1000+i*10, 10)
				mu.Lock()
				maps.Copy(all, got)
				mu.Unlock()
				time.Sleep(5 * time.Millisecond)
			}
		})
	}
	writers.Wait()
	time.Sleep(logs[0].MaxMergeDelay())
	cancel()
	wg.Wait()
	if c := checkpoint(t, logs[0]); c.Size != int64(len(all)) {
		t.Fatalf("size %d after the merge delay, want %d", c.Size, len(all))
	}
	seen := map[int64]bool{}
	for id, r := range all {
		p, err := logs[1].Proof(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := receipt.VerifyInclusion(&p, logs[1].Verifier(), domain, r); err != nil || seen[p.Index] {
			t.Fatalf("receipt %s at %d (seen %t): %v", id, p.Index, seen[p.Index], err)
		}
		seen[p.Index] = true
	}
}

func TestNewRefuses(t *testing.T) {
	a, _ := openSQLite(t)
	key, vkey := newKey(t)
	_, otherVkey := newKey(t)
	for name, cfg := range map[string]receiptlog.Config{
		"no store":         {Key: key, VerifierKey: vkey, Holder: "h"},
		"no key":           {Store: a, VerifierKey: vkey, Holder: "h"},
		"another verifier": {Store: a, Key: key, VerifierKey: otherVkey, Holder: "h"},
		"a bad verifier":   {Store: a, Key: key, VerifierKey: "not a key", Holder: "h"},
		"no holder":        {Store: a, Key: key, VerifierKey: vkey},
		"a negative delay": {Store: a, Key: key, VerifierKey: vkey, Holder: "h", MaxMergeDelay: -time.Second},
	} {
		if _, err := receiptlog.New(cfg); err == nil {
			t.Errorf("%s: New accepted it", name)
		}
	}
}

func TestLogBy(t *testing.T) {
	a, _ := openSQLite(t)
	key, vkey := newKey(t)
	l := newLog(t, a, "h", key, vkey) // 400 ms
	for issued, want := range map[time.Time]uint64{
		time.Unix(100, 0):           101, // 100.4 rounds up
		time.Unix(100, 600_000_000): 101, // 101.0 exactly
		time.Unix(100, 700_000_000): 102,
	} {
		if got := l.LogBy(issued); got != want {
			t.Errorf("LogBy(%v) = %d, want %d", issued, got, want)
		}
	}
}

// TestFullBatches: a backlog of several full batches is integrated in one
// round, across batch boundaries where a batch stores more than twice its
// leaves in hashes (the subtrees its last leaf completes).
func TestFullBatches(t *testing.T) {
	a, _ := openSQLite(t)
	key, vkey := newKey(t)
	l := newLog(t, a, "replica-1", key, vkey)
	const n = 4*store.MaxLogBatch + 7
	for from := 0; from < n; from += store.MaxLogBatch {
		appendReceipts(t, a, from, min(store.MaxLogBatch, n-from))
	}
	if got, err := l.Integrate(t.Context()); err != nil || got != n {
		t.Fatalf("Integrate = %d, %v; want %d", got, err, n)
	}
	if c := checkpoint(t, l); c.Size != n {
		t.Fatalf("size %d, want %d", c.Size, n)
	}
}

// swapStore is a log store whose backing store the test replaces: a store
// that lost writes, as a Redis failover or a restored backup would leave it.
type swapStore struct {
	mu sync.Mutex
	logStore
}

func (s *swapStore) set(st logStore) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.logStore = st
}

func (s *swapStore) cur() logStore {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.logStore
}

func (s *swapStore) TakeLogLease(ctx context.Context, holder string, ttl time.Duration) (store.LogState, bool, error) {
	return s.cur().TakeLogLease(ctx, holder, ttl)
}

func (s *swapStore) LogState(ctx context.Context) (store.LogState, error) {
	return s.cur().LogState(ctx)
}

func (s *swapStore) PendingLog(ctx context.Context, limit int) ([]store.LogEntry, error) {
	return s.cur().PendingLog(ctx, limit)
}

func (s *swapStore) IntegrateLog(ctx context.Context, fence, from int64, ids []string, hashes []store.LogHash, checkpoint []byte) error {
	return s.cur().IntegrateLog(ctx, fence, from, ids, hashes, checkpoint)
}

// TestRolledBackStore: an integrator that finds the store's log shorter than
// one it integrated (the store lost acknowledged writes) signs nothing on
// it, since a checkpoint of a size it already signed, with other leaves,
// is a fork; the store is left as it was.
func TestRolledBackStore(t *testing.T) {
	for name, open := range backends {
		t.Run(name, func(t *testing.T) {
			before, _ := open(t)
			lost, _ := open(t)
			key, vkey := newKey(t)
			sw := &swapStore{logStore: before}
			l := newLog(t, sw, "replica", key, vkey)
			appendReceipts(t, before, 0, 3)
			if n, err := l.Integrate(t.Context()); err != nil || n != 3 {
				t.Fatalf("Integrate = %d, %v", n, err)
			}
			// What the store kept of the log: its first leaf, and leaves
			// that came after.
			appendReceipts(t, lost, 0, 1)
			if n, err := newLog(t, lost, "earlier", key, vkey).Integrate(t.Context()); err != nil || n != 1 {
				t.Fatalf("Integrate the kept leaf = %d, %v", n, err)
			}
			st, err := lost.LogState(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if err := lost.ReleaseLogLease(t.Context(), "earlier", st.Fence); err != nil {
				t.Fatal(err)
			}
			appendReceipts(t, lost, 3, 2)
			sw.set(lost)
			n, err := l.Integrate(t.Context())
			if !errors.Is(err, receiptlog.ErrRolledBack) || n != 0 {
				t.Fatalf("Integrate on a store that lost leaves = %d, %v; want ErrRolledBack", n, err)
			}
			if st, err := lost.LogState(t.Context()); err != nil || st.Size != 1 {
				t.Errorf("the store's log: size %d, %v; want 1, untouched", st.Size, err)
			}
		})
	}
}
