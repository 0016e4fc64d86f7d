package storetest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/llm4agents/llm4agents/internal/store"
)

// ReceiptLogStore is what RunReceiptLog tests: the receipt log, and the
// receipts whose leaves PutReceipt queues in it.
type ReceiptLogStore interface {
	store.Receipts
	store.ReceiptLog
}

// OpenReceiptLog opens two independent handles (separate connection pools,
// as two processes would have) on one new, empty database. Both must judge
// leases by now. It registers the handles' cleanup with t.Cleanup and stops
// the test with t.Fatal if anything fails.
type OpenReceiptLog func(t *testing.T, now func() time.Time) (a, b ReceiptLogStore)

// RunReceiptLog runs the store.ReceiptLog conformance suite, and the
// queuing of a receipt's leaf by store.Receipts.PutReceipt, against the
// backend that open opens. Every subtest opens a database of its own;
// handle a writes, handle b reads back, and the races split their callers
// between both.
//
// Beyond the interface's comments, the suite pins down: entries queued by
// one AppendLog are pending in the order given, after those of earlier
// calls; a new log's state is all zero (no checkpoint, no holder, fence 0,
// a zero LeaseUntil); a holder whose lease ended takes it again as a
// takeover, with a new fence; ReleaseLogLease of a lease that already
// ended, or twice, succeeds, leaving Holder and Fence, and the lease may be
// taken at once; IntegrateLog looks at the lease's fence, not its time;
// a hash index repeated in one IntegrateLog is refused like one already
// stored; LogHashes of no index is empty, and of a negative one
// ErrNotFound; LogEntry of an invalid request id is ErrNotFound;
// PutReceipt of a receipt kept without a leaf queues the leaf a later put
// of the same receipt carries, and a put without a leaf leaves the one
// queued; a put whose leaf conflicts keeps no receipt. Invalid arguments
// (see the Check functions of package store, and limits outside
// 1..MaxLogBatch) fail with an error that is no sentinel, changing
// nothing.
func RunReceiptLog(t *testing.T, open OpenReceiptLog) {
	tests := []struct {
		name string
		run  func(*logEnv)
	}{
		{"Append/PendingOldestFirst", testLogAppendPending},
		{"Append/Idempotent", testLogAppendIdempotent},
		{"Append/Conflict", testLogAppendConflict},
		{"Append/InvalidArguments", testLogAppendInvalid},
		{"PutReceipt/QueuesLeaf", testLogPutReceipt},
		{"PutReceipt/Conflict", testLogPutReceiptConflict},
		{"Lease/TakeRenewRelease", testLogLease},
		{"Lease/Takeover", testLogLeaseTakeover},
		{"Lease/InvalidArguments", testLogLeaseInvalid},
		{"Integrate", testLogIntegrate},
		{"Integrate/FullBatch", testLogIntegrateFull},
		{"Integrate/Refused", testLogIntegrateRefused},
		{"Integrate/InvalidArguments", testLogIntegrateInvalid},
		{"Reads/InvalidArguments", testLogReadsInvalid},
		{"Race/PutReceipt", testLogRacePut},
		{"Race/Integrate", testLogRaceIntegrate},
		{"Race/Lease", testLogRaceLease},
		{"Closed", testReceiptLogClosed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := &clock{now: start}
			a, b := open(t, c.Now)
			tc.run(&logEnv{t: t, ctx: t.Context(), clock: c, a: a, b: b})
		})
	}
}

type logEnv struct {
	t     *testing.T
	ctx   context.Context
	clock *clock
	a, b  ReceiptLogStore
}

const logLease = time.Minute

// logLeaf is the leaf the suite queues for id: binary bytes, as a tree's
// leaf hash input would be.
func logLeaf(id string) []byte { return append([]byte{0, 0xff, '\n'}, "leaf of "+id...) }

// logEntries are the entries of ids with their logLeaf.
func logEntries(ids ...string) []store.LogEntry {
	out := make([]store.LogEntry, len(ids))
	for i, id := range ids {
		out[i] = store.LogEntry{RequestID: id, Leaf: logLeaf(id)}
	}
	return out
}

// logIDs are n request ids with prefix.
func logIDs(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%d", prefix, i)
	}
	return out
}

// logHash is the hash the suite stores at index i.
func logHash(i int64) [32]byte { return sha256.Sum256(fmt.Appendf(nil, "hash %d", i)) }

// logHashes are the hashes at indexes from..from+n-1.
func logHashes(from, n int64) []store.LogHash {
	out := make([]store.LogHash, n)
	for i := range out {
		x := from + int64(i)
		out[i] = store.LogHash{Index: x, Hash: logHash(x)}
	}
	return out
}

// logCheckpoint is the checkpoint the suite stores for size.
func logCheckpoint(size int64) []byte {
	return fmt.Appendf(nil, "llm4agents.test/log\n%d\nroot\n", size)
}

func (e *logEnv) appendLog(h store.ReceiptLog, entries ...store.LogEntry) {
	e.t.Helper()
	if err := h.AppendLog(e.ctx, entries); err != nil {
		e.t.Fatalf("AppendLog(%d entries): %v", len(entries), err)
	}
}

// pending lists the request ids of every pending entry, oldest first.
func (e *logEnv) pending(h store.ReceiptLog) []string {
	e.t.Helper()
	got, err := h.PendingLog(e.ctx, store.MaxLogBatch)
	if err != nil {
		e.t.Fatalf("PendingLog: %v", err)
	}
	ids := []string{}
	for _, p := range got {
		if p.Index != -1 || !bytes.Equal(p.Leaf, logLeaf(p.RequestID)) {
			e.t.Errorf("PendingLog gave %+v, want index -1 and its leaf", p)
		}
		ids = append(ids, p.RequestID)
	}
	return ids
}

// lease takes the lease for holder through h and fails unless it is held.
func (e *logEnv) lease(h store.ReceiptLog, holder string) store.LogState {
	e.t.Helper()
	st, held, err := h.TakeLogLease(e.ctx, holder, logLease)
	if err != nil || !held {
		e.t.Fatalf("TakeLogLease(%s) = %+v, %v, %v; want it held", holder, st, held, err)
	}
	return st
}

func (e *logEnv) integrate(fence, from int64, ids []string, hashes []store.LogHash) {
	e.t.Helper()
	if err := e.a.IntegrateLog(e.ctx, fence, from, ids, hashes, logCheckpoint(from+int64(len(ids)))); err != nil {
		e.t.Fatalf("IntegrateLog(%d at %d): %v", len(ids), from, err)
	}
}

func (e *logEnv) state(h store.ReceiptLog) store.LogState {
	e.t.Helper()
	st, err := h.LogState(e.ctx)
	if err != nil {
		e.t.Fatalf("LogState: %v", err)
	}
	return st
}

// entryIndex is the index of id's entry: -1 pending, -2 never queued.
func (e *logEnv) entryIndex(id string) int64 {
	e.t.Helper()
	got, err := e.b.LogEntry(e.ctx, id)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return -2
	case err != nil:
		e.t.Fatalf("LogEntry(%s): %v", id, err)
	case got.RequestID != id || !bytes.Equal(got.Leaf, logLeaf(id)):
		e.t.Errorf("LogEntry(%s) = %+v, want its leaf", id, got)
	}
	return got.Index
}

// logSnapshot is what a refused call must leave as it was.
type logSnapshot struct {
	State   store.LogState
	Pending []string
	Indexes map[string]int64 // entryIndex of each id asked for
	Hashes  map[int64]bool   // whether each index asked for is stored
}

func (e *logEnv) snapshot(ids []string, hashIndexes []int64) logSnapshot {
	e.t.Helper()
	s := logSnapshot{State: e.state(e.b), Pending: e.pending(e.b), Indexes: map[string]int64{}, Hashes: map[int64]bool{}}
	for _, id := range ids {
		s.Indexes[id] = e.entryIndex(id)
	}
	for _, x := range hashIndexes {
		_, err := e.b.LogHashes(e.ctx, []int64{x})
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			e.t.Fatalf("LogHashes(%d): %v", x, err)
		}
		s.Hashes[x] = err == nil
	}
	return s
}

// unchanged fails the test if the log differs from before.
func (e *logEnv) unchanged(what string, before logSnapshot) {
	e.t.Helper()
	ids := make([]string, 0, len(before.Indexes))
	for id := range before.Indexes {
		ids = append(ids, id)
	}
	var xs []int64
	for x := range before.Hashes {
		xs = append(xs, x)
	}
	if diff := cmp.Diff(before, e.snapshot(ids, xs)); diff != "" {
		e.t.Errorf("%s changed the log (-before +after):\n%s", what, diff)
	}
}

func testLogAppendPending(e *logEnv) {
	if diff := cmp.Diff(store.LogState{}, e.state(e.b)); diff != "" {
		e.t.Errorf("a new log's state (-want +got):\n%s", diff)
	}
	if got := e.pending(e.b); len(got) != 0 {
		e.t.Errorf("a new log has pending entries %v", got)
	}
	// Within a call, the order given (not the ids'); across calls, the
	// order of the calls, whatever the clock says.
	e.appendLog(e.a, logEntries("req_c", "req_a")...)
	e.clock.Advance(time.Millisecond)
	e.appendLog(e.b, logEntries("req_b")...)
	e.appendLog(e.a, logEntries("req_e", "req_d")...)
	if err := e.a.AppendLog(e.ctx, nil); err != nil {
		e.t.Errorf("AppendLog of no entry: %v", err)
	}
	want := []string{"req_c", "req_a", "req_b", "req_e", "req_d"}
	if diff := cmp.Diff(want, e.pending(e.b)); diff != "" {
		e.t.Errorf("PendingLog (-want +got):\n%s", diff)
	}
	for _, limit := range []int{1, 2, 5, 6} {
		got, err := e.b.PendingLog(e.ctx, limit)
		if err != nil {
			e.t.Fatalf("PendingLog(%d): %v", limit, err)
		}
		var ids []string
		for _, p := range got {
			ids = append(ids, p.RequestID)
		}
		if diff := cmp.Diff(want[:min(limit, len(want))], ids); diff != "" {
			e.t.Errorf("PendingLog(%d) (-want +got):\n%s", limit, diff)
		}
	}
	got, err := e.b.LogEntry(e.ctx, "req_a")
	if diff := cmp.Diff(store.LogEntry{RequestID: "req_a", Leaf: logLeaf("req_a"), Index: -1}, got); err != nil || diff != "" {
		e.t.Errorf("LogEntry(req_a): %v (-want +got):\n%s", err, diff)
	}
	for _, id := range []string{"req_absent", "req a", ""} {
		if _, err := e.b.LogEntry(e.ctx, id); !errors.Is(err, store.ErrNotFound) {
			e.t.Errorf("LogEntry(%q): %v, want ErrNotFound", id, err)
		}
	}
	// The largest leaf comes back whole.
	big := store.LogEntry{RequestID: "req_big", Leaf: bytes.Repeat([]byte{0xab}, store.MaxLeafBytes)}
	e.appendLog(e.a, big)
	if got, err := e.b.LogEntry(e.ctx, "req_big"); err != nil || !bytes.Equal(got.Leaf, big.Leaf) {
		e.t.Errorf("LogEntry(req_big) = %d bytes, %v; want %d", len(got.Leaf), err, len(big.Leaf))
	}
	if s := e.state(e.b); s.Size != 0 || s.Fence != 0 {
		e.t.Errorf("queuing moved the log's state: %+v", s)
	}
}

func testLogAppendIdempotent(e *logEnv) {
	e.appendLog(e.a, logEntries("req_a", "req_b")...)
	// Again from the other handle, in fresh slices, in another order and
	// with an id twice, and with a new entry: the new one is queued last,
	// the others stay where they were.
	e.clock.Advance(time.Second)
	e.appendLog(e.b, logEntries("req_b", "req_a", "req_c", "req_c")...)
	if diff := cmp.Diff([]string{"req_a", "req_b", "req_c"}, e.pending(e.b)); diff != "" {
		e.t.Errorf("PendingLog after a repeated append (-want +got):\n%s", diff)
	}
	// An integrated entry appended again stays integrated, at its index.
	fence := e.lease(e.a, "alice").Fence
	e.integrate(fence, 0, []string{"req_b"}, logHashes(0, 1))
	e.appendLog(e.b, logEntries("req_b")...)
	if got := e.entryIndex("req_b"); got != 0 {
		e.t.Errorf("req_b's index after appending it again = %d, want 0", got)
	}
	if diff := cmp.Diff([]string{"req_a", "req_c"}, e.pending(e.b)); diff != "" {
		e.t.Errorf("PendingLog after appending an integrated entry (-want +got):\n%s", diff)
	}
}

func testLogAppendConflict(e *logEnv) {
	e.appendLog(e.a, logEntries("req_a", "req_i")...)
	fence := e.lease(e.a, "alice").Fence
	e.integrate(fence, 0, []string{"req_i"}, logHashes(0, 1))
	other := func(id string) store.LogEntry { return store.LogEntry{RequestID: id, Leaf: []byte("another leaf")} }
	tests := []struct {
		name    string
		entries []store.LogEntry
	}{
		{"a pending id", []store.LogEntry{logEntries("req_n1")[0], other("req_a"), logEntries("req_n2")[0]}},
		{"an integrated id", []store.LogEntry{logEntries("req_n1")[0], other("req_i")}},
		{"an id twice in the call", []store.LogEntry{logEntries("req_n1")[0], other("req_n1")}},
		{"a longer leaf", []store.LogEntry{{RequestID: "req_a", Leaf: append(logLeaf("req_a"), 0)}}},
	}
	for _, tc := range tests {
		before := e.snapshot([]string{"req_a", "req_i", "req_n1", "req_n2"}, nil)
		if err := e.b.AppendLog(e.ctx, tc.entries); !errors.Is(err, store.ErrConflict) {
			e.t.Errorf("AppendLog with another leaf for %s: %v, want ErrConflict", tc.name, err)
		}
		e.unchanged("AppendLog with another leaf for "+tc.name, before)
	}
}

func testLogAppendInvalid(e *logEnv) {
	e.appendLog(e.a, logEntries("req_a")...)
	ok := logEntries("req_n1")[0]
	tests := []struct {
		name string
		bad  store.LogEntry
	}{
		{"an empty leaf", store.LogEntry{RequestID: "req_n2"}},
		{"a leaf over MaxLeafBytes", store.LogEntry{RequestID: "req_n2", Leaf: make([]byte, store.MaxLeafBytes+1)}},
		{"an empty request id", store.LogEntry{Leaf: []byte("x")}},
		{"a request id with a space", store.LogEntry{RequestID: "req n2", Leaf: []byte("x")}},
		// Invalid even though the id is queued with this very leaf.
		{"an invalid entry of a queued id", store.LogEntry{RequestID: "req_a"}},
	}
	for _, tc := range tests {
		before := e.snapshot([]string{"req_a", "req_n1", "req_n2"}, nil)
		noSentinel(e.t, "AppendLog with "+tc.name, e.b.AppendLog(e.ctx, []store.LogEntry{ok, tc.bad}))
		e.unchanged("AppendLog with "+tc.name, before)
	}
	over := logEntries(logIDs("req_over_", store.MaxLogBatch+1)...)
	before := e.snapshot([]string{"req_over_0"}, nil)
	noSentinel(e.t, "AppendLog over MaxLogBatch", e.b.AppendLog(e.ctx, over))
	e.unchanged("AppendLog over MaxLogBatch", before)
}

// logReceipt is a receipt whose leaf is logLeaf of its id.
func logReceipt(id string, seq int64) store.StoredReceipt {
	r := testReceipt(id, receiptOwner, seq)
	r.Leaf = logLeaf(id)
	return r
}

func testLogPutReceipt(e *logEnv) {
	r := logReceipt("req_1", 1)
	if err := e.a.PutReceipt(e.ctx, r); err != nil {
		e.t.Fatalf("PutReceipt: %v", err)
	}
	if got := e.entryIndex("req_1"); got != -1 {
		e.t.Errorf("req_1's index after PutReceipt = %d, want -1 (pending)", got)
	}
	if got, err := e.b.Receipt(e.ctx, "req_1"); err != nil || got.Leaf != nil {
		e.t.Errorf("Receipt(req_1) = leaf %x, %v; want no leaf", got.Leaf, err)
	}
	// Replays, from the other handle, in fresh slices, with or without the
	// leaf: nothing changes.
	again := r
	again.Envelope, again.Leaf = bytes.Clone(r.Envelope), bytes.Clone(r.Leaf)
	noLeaf := r
	noLeaf.Leaf = nil
	for _, replay := range []store.StoredReceipt{again, noLeaf} {
		before := e.snapshot([]string{"req_1"}, nil)
		if err := e.b.PutReceipt(e.ctx, replay); err != nil {
			e.t.Errorf("PutReceipt again (leaf %t): %v", replay.Leaf != nil, err)
		}
		e.unchanged("PutReceipt again", before)
	}
	// A receipt kept without a leaf queues none; a later put of it with
	// its leaf queues it.
	r2 := logReceipt("req_2", 2)
	r2.Leaf = nil
	if err := e.a.PutReceipt(e.ctx, r2); err != nil {
		e.t.Fatalf("PutReceipt without a leaf: %v", err)
	}
	if got := e.entryIndex("req_2"); got != -2 {
		e.t.Errorf("req_2's index after PutReceipt without a leaf = %d, want none", got)
	}
	if err := e.b.PutReceipt(e.ctx, logReceipt("req_2", 2)); err != nil {
		e.t.Errorf("PutReceipt again with a leaf: %v", err)
	}
	// An entry queued by AppendLog first, with the same leaf: the receipt
	// is kept and the entry stays where it was.
	e.appendLog(e.a, logEntries("req_3")...)
	if err := e.b.PutReceipt(e.ctx, logReceipt("req_3", 3)); err != nil {
		e.t.Errorf("PutReceipt of an entry already queued: %v", err)
	}
	if diff := cmp.Diff([]string{"req_1", "req_2", "req_3"}, e.pending(e.b)); diff != "" {
		e.t.Errorf("PendingLog (-want +got):\n%s", diff)
	}
	// Integrated, a replay still changes nothing.
	fence := e.lease(e.a, "alice").Fence
	e.integrate(fence, 0, []string{"req_3", "req_1"}, logHashes(0, 2))
	before := e.snapshot([]string{"req_1", "req_2", "req_3"}, nil)
	if err := e.b.PutReceipt(e.ctx, logReceipt("req_1", 1)); err != nil {
		e.t.Errorf("PutReceipt of an integrated receipt again: %v", err)
	}
	e.unchanged("PutReceipt of an integrated receipt again", before)
	for _, id := range []string{"req_1", "req_2", "req_3"} {
		if _, err := e.b.Receipt(e.ctx, id); err != nil {
			e.t.Errorf("Receipt(%s): %v", id, err)
		}
	}
}

// otherLeafOf is r with a leaf other than logLeaf of its id.
func otherLeafOf(r store.StoredReceipt) store.StoredReceipt {
	r.Leaf = []byte("another leaf")
	return r
}

func testLogPutReceiptConflict(e *logEnv) {
	r := logReceipt("req_1", 1)
	if err := e.a.PutReceipt(e.ctx, r); err != nil {
		e.t.Fatalf("PutReceipt: %v", err)
	}
	e.appendLog(e.a, logEntries("req_2")...)
	otherEnvelope := r
	otherEnvelope.Envelope = append(bytes.Clone(r.Envelope), ' ')
	tests := []struct {
		name string
		r    store.StoredReceipt
	}{
		{"another leaf", otherLeafOf(r)},
		{"another envelope", otherEnvelope},
		// The receipt is new, its leaf conflicts with the one queued: the
		// receipt is not kept either.
		{"a new receipt whose id has another leaf queued", otherLeafOf(logReceipt("req_2", 2))},
	}
	for _, tc := range tests {
		before := e.snapshot([]string{"req_1", "req_2"}, nil)
		if err := e.b.PutReceipt(e.ctx, tc.r); !errors.Is(err, store.ErrConflict) {
			e.t.Errorf("PutReceipt with %s: %v, want ErrConflict", tc.name, err)
		}
		e.unchanged("PutReceipt with "+tc.name, before)
	}
	if _, err := e.b.Receipt(e.ctx, "req_2"); !errors.Is(err, store.ErrNotFound) {
		e.t.Errorf("Receipt(req_2) after a conflicting leaf: %v, want ErrNotFound", err)
	}
	if got, err := e.b.Receipt(e.ctx, "req_1"); err != nil || !bytes.Equal(got.Envelope, r.Envelope) {
		e.t.Errorf("Receipt(req_1) = %q, %v; want the first envelope", got.Envelope, err)
	}
	// A leaf over MaxLeafBytes is invalid, the receipt with it too.
	big := logReceipt("req_3", 3)
	big.Leaf = make([]byte, store.MaxLeafBytes+1)
	noSentinel(e.t, "PutReceipt with a leaf over MaxLeafBytes", e.b.PutReceipt(e.ctx, big))
	if _, err := e.b.Receipt(e.ctx, "req_3"); !errors.Is(err, store.ErrNotFound) {
		e.t.Errorf("Receipt(req_3) after an invalid leaf: %v, want ErrNotFound", err)
	}
}

func testLogLease(e *logEnv) {
	for _, fence := range []int64{0, 1, notIssued} {
		if err := e.a.ReleaseLogLease(e.ctx, "", fence); !errors.Is(err, store.ErrFenced) {
			e.t.Errorf("ReleaseLogLease(\"\", %d) of a lease never taken: %v, want ErrFenced", fence, err)
		}
	}
	t0 := e.clock.Now()
	got := e.lease(e.a, "alice")
	f1 := got.Fence
	want := store.LogState{Holder: "alice", Fence: f1, LeaseUntil: t0.Add(logLease)}
	if diff := cmp.Diff(want, got); f1 <= 0 || diff != "" {
		e.t.Errorf("TakeLogLease (-want +got, fence > 0):\n%s", diff)
	}
	// Refused while held, however often, and the refusal shows the holder.
	for range 2 {
		st, held, err := e.b.TakeLogLease(e.ctx, "bob", logLease)
		if diff := cmp.Diff(want, st); err != nil || held || diff != "" {
			e.t.Errorf("TakeLogLease(bob) while alice holds it = %v, %v (-want +got):\n%s", held, err, diff)
		}
	}
	// Renewed by its holder, through any handle, with the lease rounded up
	// to the millisecond; the fence stays.
	t1 := e.clock.Advance(30 * time.Second)
	st, held, err := e.b.TakeLogLease(e.ctx, "alice", logLease+time.Microsecond)
	want = store.LogState{Holder: "alice", Fence: f1, LeaseUntil: t1.Add(logLease + time.Millisecond)}
	if diff := cmp.Diff(want, st); err != nil || !held || diff != "" {
		e.t.Errorf("renewal = %v, %v (-want +got):\n%s", held, err, diff)
	}
	if diff := cmp.Diff(want, e.state(e.a)); diff != "" {
		e.t.Errorf("LogState after the renewal (-want +got):\n%s", diff)
	}
	// Released under the wrong fence or by another holder: refused.
	for _, tc := range []struct {
		holder string
		fence  int64
	}{{"alice", f1 + 1}, {"alice", 0}, {"bob", f1}} {
		if err := e.b.ReleaseLogLease(e.ctx, tc.holder, tc.fence); !errors.Is(err, store.ErrFenced) {
			e.t.Errorf("ReleaseLogLease(%s, %d): %v, want ErrFenced", tc.holder, tc.fence, err)
		}
	}
	// Released: ended now, holder and fence kept; again, nothing changes;
	// and anyone may take it at once, with a new fence.
	t2 := e.clock.Advance(time.Second)
	for range 2 {
		if err := e.b.ReleaseLogLease(e.ctx, "alice", f1); err != nil {
			e.t.Fatalf("ReleaseLogLease: %v", err)
		}
		want = store.LogState{Holder: "alice", Fence: f1, LeaseUntil: t2}
		if diff := cmp.Diff(want, e.state(e.a)); diff != "" {
			e.t.Errorf("LogState after the release (-want +got):\n%s", diff)
		}
	}
	got = e.lease(e.b, "bob")
	if got.Fence <= f1 || got.Holder != "bob" || !got.LeaseUntil.Equal(t2.Add(logLease)) {
		e.t.Errorf("TakeLogLease(bob) after the release = %+v, want a fence above %d until %v", got, f1, t2.Add(logLease))
	}
}

func testLogLeaseTakeover(e *logEnv) {
	f1 := e.lease(e.a, "alice").Fence
	until := e.clock.Now().Add(logLease)
	// A millisecond before the lease ends, it is still alice's.
	e.clock.Advance(logLease - time.Millisecond)
	if st, held, err := e.b.TakeLogLease(e.ctx, "bob", logLease); err != nil || held || st.Holder != "alice" {
		e.t.Errorf("TakeLogLease(bob) before the lease ends = %+v, %v, %v; want alice's", st, held, err)
	}
	// When it ends, bob takes it over with a new fence.
	now := e.clock.Advance(time.Millisecond)
	if !now.Equal(until) {
		e.t.Fatalf("clock at %v, want %v", now, until)
	}
	st, held, err := e.b.TakeLogLease(e.ctx, "bob", logLease)
	if err != nil || !held || st.Holder != "bob" || st.Fence <= f1 || !st.LeaseUntil.Equal(now.Add(logLease)) {
		e.t.Fatalf("TakeLogLease(bob) once the lease ended = %+v, %v, %v; want bob's with a fence above %d", st, held, err, f1)
	}
	f2 := st.Fence
	// alice, late, can neither take it back nor release it.
	if st, held, err := e.a.TakeLogLease(e.ctx, "alice", logLease); err != nil || held || st.Holder != "bob" || st.Fence != f2 {
		e.t.Errorf("TakeLogLease(alice) after the takeover = %+v, %v, %v; want bob's", st, held, err)
	}
	if err := e.a.ReleaseLogLease(e.ctx, "alice", f1); !errors.Is(err, store.ErrFenced) {
		e.t.Errorf("ReleaseLogLease(alice, %d) after the takeover: %v, want ErrFenced", f1, err)
	}
	// A holder whose lease ended takes it again with a new fence, even
	// when nobody took it meanwhile: it cannot tell.
	e.clock.Advance(logLease)
	st = e.lease(e.a, "bob")
	if st.Fence <= f2 {
		e.t.Errorf("TakeLogLease(bob) after its own lease ended: fence %d, want one above %d", st.Fence, f2)
	}
	// A lease ended long ago is released all the same, and stays ended.
	e.clock.Advance(2 * logLease)
	if err := e.b.ReleaseLogLease(e.ctx, "bob", st.Fence); err != nil {
		e.t.Errorf("ReleaseLogLease of an ended lease: %v", err)
	}
	if got := e.state(e.b); !got.LeaseUntil.Equal(st.LeaseUntil) {
		e.t.Errorf("LeaseUntil after releasing an ended lease = %v, want %v", got.LeaseUntil, st.LeaseUntil)
	}
}

func testLogLeaseInvalid(e *logEnv) {
	e.lease(e.a, "alice")
	before := e.state(e.b)
	for _, tc := range []struct {
		holder string
		ttl    time.Duration
	}{{"", logLease}, {"bob", 0}, {"bob", -time.Second}, {"alice", 0}} {
		_, _, err := e.b.TakeLogLease(e.ctx, tc.holder, tc.ttl)
		noSentinel(e.t, fmt.Sprintf("TakeLogLease(%q, %v)", tc.holder, tc.ttl), err)
	}
	if diff := cmp.Diff(before, e.state(e.b)); diff != "" {
		e.t.Errorf("invalid TakeLogLease calls changed the state (-before +after):\n%s", diff)
	}
}

func testLogIntegrate(e *logEnv) {
	ids := logIDs("req_", 5)
	e.appendLog(e.a, logEntries(ids...)...)
	fence := e.lease(e.a, "alice").Fence
	page, err := e.b.PendingLog(e.ctx, 3)
	if err != nil || len(page) != 3 {
		e.t.Fatalf("PendingLog(3) = %d entries, %v", len(page), err)
	}
	e.integrate(fence, 0, []string{page[0].RequestID, page[1].RequestID, page[2].RequestID}, logHashes(0, 4))
	want := store.LogState{Size: 3, Checkpoint: logCheckpoint(3), Holder: "alice", Fence: fence, LeaseUntil: start.Add(logLease)}
	if diff := cmp.Diff(want, e.state(e.b)); diff != "" {
		e.t.Errorf("LogState after integrating (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"req_3", "req_4"}, e.pending(e.b)); diff != "" {
		e.t.Errorf("PendingLog after integrating (-want +got):\n%s", diff)
	}
	// The integrator picks the order: here not the queue's. The lease's
	// time does not matter, only its fence: alice's ended, nobody took it.
	e.clock.Advance(2 * logLease)
	e.integrate(fence, 3, []string{"req_4", "req_3"}, logHashes(4, 3))
	// A batch may store no hash; the checkpoint is kept whole at its limit.
	e.appendLog(e.a, logEntries("req_5")...)
	largest := bytes.Repeat([]byte{'c'}, store.MaxCheckpointBytes)
	if err := e.a.IntegrateLog(e.ctx, fence, 5, []string{"req_5"}, nil, largest); err != nil {
		e.t.Fatalf("IntegrateLog with no hash: %v", err)
	}
	if got := e.state(e.b); got.Size != 6 || !bytes.Equal(got.Checkpoint, largest) {
		e.t.Errorf("LogState = size %d, checkpoint of %d bytes; want 6, %d", got.Size, len(got.Checkpoint), len(largest))
	}

	order := []string{"req_0", "req_1", "req_2", "req_4", "req_3", "req_5"}
	for i, id := range order {
		if got := e.entryIndex(id); got != int64(i) {
			e.t.Errorf("%s's index = %d, want %d", id, got, i)
		}
	}
	for _, r := range []struct{ from, to int64 }{{0, 6}, {0, 1}, {3, 5}, {5, 6}} {
		got, err := e.b.LogLeaves(e.ctx, r.from, r.to)
		if err != nil {
			e.t.Errorf("LogLeaves(%d, %d): %v", r.from, r.to, err)
			continue
		}
		var wantLeaves [][]byte
		for _, id := range order[r.from:r.to] {
			wantLeaves = append(wantLeaves, logLeaf(id))
		}
		if diff := cmp.Diff(wantLeaves, got); diff != "" {
			e.t.Errorf("LogLeaves(%d, %d) (-want +got):\n%s", r.from, r.to, diff)
		}
	}
	for _, r := range []struct{ from, to int64 }{{5, 7}, {6, 7}, {100, 101}} {
		if _, err := e.b.LogLeaves(e.ctx, r.from, r.to); !errors.Is(err, store.ErrNotFound) {
			e.t.Errorf("LogLeaves(%d, %d) past the log: %v, want ErrNotFound", r.from, r.to, err)
		}
	}
	for _, xs := range [][]int64{{2, 0, 6}, {1, 1}, {}, {6, 5, 4, 3, 2, 1, 0}} {
		got, err := e.b.LogHashes(e.ctx, xs)
		wantHashes := [][32]byte{}
		for _, x := range xs {
			wantHashes = append(wantHashes, logHash(x))
		}
		if diff := cmp.Diff(wantHashes, got); err != nil || diff != "" {
			e.t.Errorf("LogHashes(%v): %v (-want +got):\n%s", xs, err, diff)
		}
	}
	for _, xs := range [][]int64{{7}, {0, 7}, {-1}} {
		if _, err := e.b.LogHashes(e.ctx, xs); !errors.Is(err, store.ErrNotFound) {
			e.t.Errorf("LogHashes(%v): %v, want ErrNotFound", xs, err)
		}
	}
}

// testLogIntegrateFull integrates the largest batch, and reads it back with
// the largest reads.
func testLogIntegrateFull(e *logEnv) {
	ids := logIDs("req_", store.MaxLogBatch)
	e.appendLog(e.a, logEntries(ids...)...)
	fence := e.lease(e.a, "alice").Fence
	if got := e.pending(e.b); !slices.Equal(got, ids) {
		e.t.Fatalf("PendingLog(MaxLogBatch) = %d entries, want %d in queue order", len(got), len(ids))
	}
	e.integrate(fence, 0, ids, logHashes(0, store.MaxLogHashes))
	leaves, err := e.b.LogLeaves(e.ctx, 0, store.MaxLogBatch)
	if err != nil || len(leaves) != store.MaxLogBatch {
		e.t.Fatalf("LogLeaves(0, MaxLogBatch) = %d leaves, %v", len(leaves), err)
	}
	for i, leaf := range leaves {
		if !bytes.Equal(leaf, logLeaf(ids[i])) {
			e.t.Fatalf("leaf %d = %q, want %s's", i, leaf, ids[i])
		}
	}
	xs := make([]int64, store.MaxLogHashes)
	for i := range xs {
		xs[i] = int64(len(xs) - 1 - i)
	}
	hashes, err := e.b.LogHashes(e.ctx, xs)
	if err != nil || len(hashes) != len(xs) {
		e.t.Fatalf("LogHashes(MaxLogHashes) = %d hashes, %v", len(hashes), err)
	}
	for i, h := range hashes {
		if h != logHash(xs[i]) {
			e.t.Fatalf("hash %d is not the one stored", xs[i])
		}
	}
}

func testLogIntegrateRefused(e *logEnv) {
	ids := []string{"req_0", "req_1", "req_2", "req_3"}
	e.appendLog(e.a, logEntries(ids...)...)
	fence := e.lease(e.a, "alice").Fence
	e.integrate(fence, 0, []string{"req_0"}, logHashes(0, 2))
	tests := []struct {
		name   string
		fence  int64
		from   int64
		ids    []string
		hashes []store.LogHash
		fenced bool // ErrFenced, else an error that is no sentinel
	}{
		{"a stale fence", fence - 1, 1, []string{"req_1"}, logHashes(2, 2), true},
		{"a fence never issued", notIssued, 1, []string{"req_1"}, logHashes(2, 2), true},
		{"a size behind the log's", fence, 0, []string{"req_1"}, logHashes(2, 2), true},
		{"a size past the log's", fence, 2, []string{"req_1"}, logHashes(2, 2), true},
		{"an integrated entry", fence, 1, []string{"req_0"}, logHashes(2, 2), true},
		{"an integrated entry after a pending one", fence, 1, []string{"req_1", "req_0"}, logHashes(2, 2), true},
		{"an entry never queued", fence, 1, []string{"req_1", "req_absent"}, logHashes(2, 2), true},
		{"a hash index already stored", fence, 1, []string{"req_1"}, logHashes(1, 2), false},
		{"a hash index stored after new ones", fence, 1, []string{"req_1"}, append(logHashes(2, 2), logHashes(0, 1)...), false},
		{"a hash index twice", fence, 1, []string{"req_1"}, append(logHashes(2, 2), logHashes(2, 1)...), false},
	}
	for _, tc := range tests {
		var xs []int64
		for _, h := range tc.hashes {
			xs = append(xs, h.Index)
		}
		before := e.snapshot(append(ids, "req_absent"), xs)
		err := e.b.IntegrateLog(e.ctx, tc.fence, tc.from, tc.ids, tc.hashes, logCheckpoint(tc.from+int64(len(tc.ids))))
		if tc.fenced && !errors.Is(err, store.ErrFenced) {
			e.t.Errorf("IntegrateLog with %s: %v, want ErrFenced", tc.name, err)
		}
		if !tc.fenced {
			noSentinel(e.t, "IntegrateLog with "+tc.name, err)
		}
		e.unchanged("IntegrateLog with "+tc.name, before)
	}
	// Taken over: the old fence is stale, the new one integrates.
	e.clock.Advance(logLease)
	next := e.lease(e.b, "bob").Fence
	before := e.snapshot(ids, []int64{2, 3})
	if err := e.a.IntegrateLog(e.ctx, fence, 1, []string{"req_1"}, logHashes(2, 2), logCheckpoint(2)); !errors.Is(err, store.ErrFenced) {
		e.t.Errorf("IntegrateLog under the fence taken over: %v, want ErrFenced", err)
	}
	e.unchanged("IntegrateLog under the fence taken over", before)
	e.integrate(next, 1, []string{"req_1"}, logHashes(2, 2))
}

func testLogIntegrateInvalid(e *logEnv) {
	ids := []string{"req_0", "req_1"}
	e.appendLog(e.a, logEntries(ids...)...)
	fence := e.lease(e.a, "alice").Fence
	cp := logCheckpoint(1)
	one := []string{"req_0"}
	tests := []struct {
		name   string
		from   int64
		ids    []string
		hashes []store.LogHash
		cp     []byte
	}{
		{"a negative size", -1, one, logHashes(0, 1), cp},
		{"no entry", 0, nil, logHashes(0, 1), cp},
		{"an empty list of entries", 0, []string{}, logHashes(0, 1), cp},
		{"entries over MaxLogBatch", 0, append(one, logIDs("req_x", store.MaxLogBatch)...), logHashes(0, 1), cp},
		{"hashes over MaxLogHashes", 0, one, logHashes(0, store.MaxLogHashes+1), cp},
		{"a negative hash index", 0, one, []store.LogHash{{Index: -1}}, cp},
		{"no checkpoint", 0, one, logHashes(0, 1), nil},
		{"a checkpoint over MaxCheckpointBytes", 0, one, logHashes(0, 1), make([]byte, store.MaxCheckpointBytes+1)},
		{"an invalid request id", 0, []string{"req_0", "req 1"}, logHashes(0, 1), cp},
		{"a request id twice", 0, []string{"req_0", "req_1", "req_0"}, logHashes(0, 1), cp},
	}
	for _, tc := range tests {
		before := e.snapshot(ids, []int64{0})
		noSentinel(e.t, "IntegrateLog with "+tc.name, e.b.IntegrateLog(e.ctx, fence, tc.from, tc.ids, tc.hashes, tc.cp))
		e.unchanged("IntegrateLog with "+tc.name, before)
	}
}

func testLogReadsInvalid(e *logEnv) {
	for _, limit := range []int{0, -1, store.MaxLogBatch + 1} {
		_, err := e.b.PendingLog(e.ctx, limit)
		noSentinel(e.t, fmt.Sprintf("PendingLog(%d)", limit), err)
	}
	for _, r := range []struct{ from, to int64 }{{-1, 1}, {1, 1}, {2, 1}, {0, store.MaxLogBatch + 1}, {-5, -1}} {
		_, err := e.b.LogLeaves(e.ctx, r.from, r.to)
		noSentinel(e.t, fmt.Sprintf("LogLeaves(%d, %d)", r.from, r.to), err)
	}
	_, err := e.b.LogHashes(e.ctx, make([]int64, store.MaxLogHashes+1))
	noSentinel(e.t, "LogHashes over MaxLogHashes", err)
}

// testLogRacePut puts one receipt from both handles at once, half with
// one leaf and half with another: exactly one leaf is queued, every put of
// it succeeds, every put of the other is ErrConflict, and the receipt is
// kept once.
func testLogRacePut(e *logEnv) {
	const racers = 16
	r1 := logReceipt("req_race", 5)
	r2 := otherLeafOf(r1)
	errs := make([]error, racers)
	var wg sync.WaitGroup
	begin := make(chan struct{})
	for i := range racers {
		h, r := e.a, r1
		if i%2 == 1 {
			h = e.b
		}
		if i%4 >= 2 {
			r = r2
		}
		wg.Go(func() {
			<-begin
			errs[i] = h.PutReceipt(e.ctx, r)
		})
	}
	close(begin)
	wg.Wait()
	got, err := e.b.LogEntry(e.ctx, "req_race")
	if err != nil {
		e.t.Fatalf("LogEntry: %v", err)
	}
	winner := 0
	if bytes.Equal(got.Leaf, r2.Leaf) {
		winner = 1
	}
	for i, err := range errs {
		switch which := i % 4 / 2; {
		case which == winner && err != nil:
			e.t.Errorf("a put of the queued leaf failed: %v", err)
		case which != winner && !errors.Is(err, store.ErrConflict):
			e.t.Errorf("a put of the other leaf: %v, want ErrConflict", err)
		}
	}
	if rs, err := e.b.ReceiptsOf(e.ctx, store.ReceiptsQuery{Owner: receiptOwner, Limit: 10}); err != nil || len(rs) != 1 {
		e.t.Errorf("ReceiptsOf = %d receipts, %v; want 1", len(rs), err)
	}
}

// testLogRaceIntegrate has integrators on both handles, all under one
// fence (as after a split brain, the worst the store must survive), race
// to integrate the same pending entries from the same size, each in an
// order of its own, round after round: each round exactly one wins, the
// others are ErrFenced, and the entries get the winner's order.
func testLogRaceIntegrate(e *logEnv) {
	const (
		rounds  = 20
		batch   = 16
		racers  = 8
		perHash = 2
	)
	fence := e.lease(e.a, "alice").Fence
	var all []string
	for round := range rounds {
		ids := logIDs(fmt.Sprintf("req_r%d_", round), batch)
		all = append(all, ids...)
		e.appendLog(e.a, logEntries(ids...)...)
		from := e.state(e.b).Size
		orders := make([][]string, racers)
		errs := make([]error, racers)
		var wg sync.WaitGroup
		begin := make(chan struct{})
		for i := range racers {
			orders[i] = slices.Clone(ids)
			rng := rand.New(rand.NewPCG(uint64(round), uint64(i))) //nolint:gosec // G404: a seeded test workload, reproducible by design
			rng.Shuffle(batch, func(x, y int) {
				orders[i][x], orders[i][y] = orders[i][y], orders[i][x]
			})
			h := e.a
			if i%2 == 1 {
				h = e.b
			}
			wg.Go(func() {
				<-begin
				errs[i] = h.IntegrateLog(e.ctx, fence, from, orders[i], logHashes(perHash*from, perHash*batch), logCheckpoint(from+batch))
			})
		}
		close(begin)
		wg.Wait()
		winner := -1
		for i, err := range errs {
			switch {
			case err == nil && winner >= 0:
				e.t.Errorf("round %d: racers %d and %d both integrated", round, winner, i)
			case err == nil:
				winner = i
			case !errors.Is(err, store.ErrFenced):
				e.t.Errorf("round %d: racer %d: %v, want ErrFenced", round, i, err)
			}
		}
		if winner < 0 {
			e.t.Fatalf("round %d: no racer integrated: %v", round, errs)
		}
		for i, id := range orders[winner] {
			if got := e.entryIndex(id); got != from+int64(i) {
				e.t.Errorf("round %d: %s's index = %d, want %d (the winner's order)", round, id, got, from+int64(i))
			}
		}
	}
	st := e.state(e.b)
	if st.Size != rounds*batch || !bytes.Equal(st.Checkpoint, logCheckpoint(rounds*batch)) {
		e.t.Errorf("LogState = size %d, checkpoint %q; want %d", st.Size, st.Checkpoint, rounds*batch)
	}
	if got := e.pending(e.b); len(got) != 0 {
		e.t.Errorf("pending after every round: %v", got)
	}
	// Every entry once, every index once.
	seen := map[int64]string{}
	for _, id := range all {
		x := e.entryIndex(id)
		if prev, ok := seen[x]; ok || x < 0 || x >= st.Size {
			e.t.Errorf("%s has index %d (also %q's), want a unique one in 0..%d", id, x, prev, st.Size-1)
		}
		seen[x] = id
	}
	xs := make([]int64, perHash*st.Size)
	for i := range xs {
		xs[i] = int64(i)
	}
	if _, err := e.b.LogHashes(e.ctx, xs); err != nil {
		e.t.Errorf("LogHashes of every index stored: %v", err)
	}
}

// testLogRaceLease has holders on both handles take a free lease at once,
// round after round, each round once the last one's lease ended: each
// round exactly one holds it, everyone sees that one, and no fence is
// given twice.
func testLogRaceLease(e *logEnv) {
	const rounds, racers = 10, 8
	var last int64
	for round := range rounds {
		type result struct {
			st   store.LogState
			held bool
			err  error
		}
		results := make([]result, racers)
		var wg sync.WaitGroup
		begin := make(chan struct{})
		for i := range racers {
			h := e.a
			if i%2 == 1 {
				h = e.b
			}
			wg.Go(func() {
				<-begin
				st, held, err := h.TakeLogLease(e.ctx, fmt.Sprintf("holder-%d", i), logLease)
				results[i] = result{st, held, err}
			})
		}
		close(begin)
		wg.Wait()
		var winner *store.LogState
		for i, r := range results {
			switch {
			case r.err != nil:
				e.t.Fatalf("round %d: racer %d: %v", round, i, r.err)
			case r.held && winner != nil:
				e.t.Errorf("round %d: %s and %s both hold the lease", round, winner.Holder, r.st.Holder)
			case r.held:
				winner = &results[i].st
			}
		}
		if winner == nil {
			e.t.Fatalf("round %d: nobody holds the lease", round)
		}
		if winner.Fence <= last {
			e.t.Errorf("round %d: fence %d, want one above %d", round, winner.Fence, last)
		}
		last = winner.Fence
		for i, r := range results {
			if r.st.Holder != winner.Holder || r.st.Fence != winner.Fence {
				e.t.Errorf("round %d: racer %d sees %s under %d, want %s under %d", round, i, r.st.Holder, r.st.Fence, winner.Holder, winner.Fence)
			}
		}
		e.clock.Advance(logLease)
	}
}
