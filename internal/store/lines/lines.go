// Package lines sends concurrent writes to a store in batches: group commit
// on the client.
//
// A write to a shared store pays a round trip, and on a durable store a
// commit that waits for its disk flush; writes that each pay their own go
// no faster than those. A line is a named queue of writes that go to the
// store one batch at a time: while a batch of the line is in flight, the
// writes that arrive wait, and when it is done the first of them sends all
// of them (up to Set.Max) as the next batch. An idle line sends a write at
// once, so a line costs an uncontended write nothing. How a batch is sent
// (a PostgreSQL pipeline in one transaction, a Redis pipeline) is the
// store's; this package only forms the batches. SQLite batches its writes
// with a writer goroutine of its own (internal/store/sqlite/writer.go), for
// the reasons docs/BENCHMARKS.md gives under "Group commit".
package lines

import (
	"context"
	"errors"
	"hash/fnv"
	"slices"
	"strconv"
	"sync"
)

// ErrUnknownOutcome is what Write returns for a write whose batch was being
// sent when Send panicked: it may or may not have been applied, as after a
// lost connection.
var ErrUnknownOutcome = errors.New("lines: the batch of this write failed while being sent; its outcome is unknown")

// ByKey names one of n lines for key: the same key always gets the same
// line, so the writes of one record never wait on each other across batches
// of one Set, and keys spread over the n lines.
func ByKey(prefix, key string, n uint32) string {
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	return prefix + strconv.FormatUint(uint64(h.Sum32()%n), 10)
}

// Set is a set of named lines of writes of type W (usually a pointer to a
// struct carrying the statement and, once sent, its outcome). Its zero
// value is not usable: set Send (and Max, else batches are of one write). A
// Set holds a line only while one of its writes is in flight, so it is
// empty whenever the store is idle.
type Set[W any] struct {
	// Send sends one batch (at least one write, the leader's first) and
	// records each write's outcome in it. It gets a context that does not
	// end with the leader's: once sent, a batch runs to its end, since it
	// carries other callers' writes. Send must bound its own time.
	Send func(ctx context.Context, batch []W)
	// Max bounds the writes of one batch.
	Max int

	mu    sync.Mutex
	lines map[string]*line[W]
}

type line[W any] struct {
	queue []*entry[W] // waiting for the batch in flight, in arrival order
}

type entry[W any] struct {
	w W
	// wake is closed when the entry's caller is to act: to send batch, if
	// batch is set (the writes, this one first), else to return, the write
	// having been sent by another caller (failed if Send panicked on it).
	// Both fields are set before wake is closed.
	wake   chan struct{}
	batch  []*entry[W]
	failed bool
}

// Write sends w on the line called name: at once if the line is idle, else
// in the next batch, sent by whichever caller leads it. It returns once w
// has been sent and Send has recorded its outcome, with nil; or, if ctx
// ends while w is still queued, with ctx's error, and w was never sent; or,
// if Send panicked on another caller's batch holding w, ErrUnknownOutcome.
// Once sent, w runs to its end whatever becomes of ctx, so its outcome is
// known when Write returns.
func (s *Set[W]) Write(ctx context.Context, name string, w W) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	e := &entry[W]{w: w}
	s.mu.Lock()
	if s.lines == nil {
		s.lines = map[string]*line[W]{}
	}
	l := s.lines[name]
	if l == nil {
		s.lines[name] = &line[W]{}
		s.mu.Unlock()
		s.lead(ctx, name, []*entry[W]{e})
		return nil
	}
	e.wake = make(chan struct{})
	l.queue = append(l.queue, e)
	s.mu.Unlock()

	select {
	case <-e.wake:
		return s.woken(ctx, name, e)
	case <-ctx.Done():
	}
	s.mu.Lock()
	if i := slices.Index(l.queue, e); i >= 0 {
		l.queue = slices.Delete(l.queue, i, i+1)
		s.mu.Unlock()
		return ctx.Err()
	}
	s.mu.Unlock()
	<-e.wake // taken into a batch: wait for its outcome
	return s.woken(ctx, name, e)
}

// woken does what a queued entry was woken for: lead its batch, or return
// the outcome of the batch another caller sent.
func (s *Set[W]) woken(ctx context.Context, name string, e *entry[W]) error {
	switch {
	case e.batch != nil:
		s.lead(ctx, name, e.batch)
		return nil
	case e.failed:
		return ErrUnknownOutcome
	}
	return nil
}

// Len returns how many lines have a write in flight.
func (s *Set[W]) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.lines)
}

// lead sends batch, whose first entry is the caller's, then hands the line
// to the first entry queued meanwhile, with the entries it is to send, or
// retires the line if none is. If Send panics, the line is handed on all the
// same and the others of the batch get ErrUnknownOutcome, so one bad batch never
// stops a line; the panic goes on in the caller.
func (s *Set[W]) lead(ctx context.Context, name string, batch []*entry[W]) {
	ws := make([]W, len(batch))
	for i, e := range batch {
		ws[i] = e.w
	}
	sent := false
	defer func() { s.handOn(name, batch, !sent) }()
	s.Send(context.WithoutCancel(ctx), ws)
	sent = true
}

// handOn ends the batch sent on the line called name: it hands the line to
// the first entry queued meanwhile or retires it, then wakes the batch's
// other entries.
func (s *Set[W]) handOn(name string, batch []*entry[W], failed bool) {
	s.mu.Lock()
	l := s.lines[name]
	if len(l.queue) == 0 {
		delete(s.lines, name)
	} else {
		n := min(len(l.queue), max(s.Max, 1))
		next := l.queue[0]
		next.batch = slices.Clone(l.queue[:n])
		l.queue = slices.Clone(l.queue[n:])
		close(next.wake)
	}
	s.mu.Unlock()
	for _, e := range batch[1:] {
		e.failed = failed
		close(e.wake)
	}
}
