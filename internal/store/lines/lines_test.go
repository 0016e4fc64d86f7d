package lines

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
)

// write is a test write: its batch number, set by send.
type write struct {
	id    int
	batch int
}

// recorder is a Send that numbers its batches, and blocks each until
// release is closed when gate is set.
type recorder struct {
	mu      sync.Mutex
	batches [][]int
	gate    chan struct{} // while not nil, Send waits on it
	entered chan struct{} // one value each time Send starts
}

func (r *recorder) send(_ context.Context, batch []*write) {
	if r.entered != nil {
		r.entered <- struct{}{}
	}
	if r.gate != nil {
		<-r.gate
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	ids := make([]int, len(batch))
	for i, w := range batch {
		ids[i] = w.id
		w.batch = len(r.batches) + 1
	}
	r.batches = append(r.batches, ids)
}

// TestWriteBatches checks that writes queued behind a batch in flight go as
// the next batch, led by the first of them, in arrival order and at most
// Max at a time; that every write is sent exactly once; and that the line
// is gone afterwards.
func TestWriteBatches(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := &recorder{gate: make(chan struct{}), entered: make(chan struct{}, 100)}
		s := &Set[*write]{Send: r.send, Max: 3}
		ctx := t.Context()
		writes := make([]*write, 6)
		for i := range writes {
			writes[i] = &write{id: i}
		}
		var wg sync.WaitGroup
		wg.Go(func() {
			if err := s.Write(ctx, "a", writes[0]); err != nil {
				t.Error(err)
			}
		})
		<-r.entered // the first write is in flight; queue the others behind it
		for _, w := range writes[1:] {
			wg.Go(func() {
				if err := s.Write(ctx, "a", w); err != nil {
					t.Error(err)
				}
			})
			queued(t, s, "a", w.id)
		}
		close(r.gate)
		wg.Wait()
		want := [][]int{{0}, {1, 2, 3}, {4, 5}}
		if fmt.Sprint(r.batches) != fmt.Sprint(want) {
			t.Errorf("batches %v, want %v", r.batches, want)
		}
		for _, w := range writes {
			if w.batch == 0 {
				t.Errorf("write %d was never sent", w.id)
			}
		}
		if n := s.Len(); n != 0 {
			t.Errorf("%d lines left behind", n)
		}
	})
}

// queued waits until every goroutine of the test's bubble is blocked, then
// checks that the line called name has n writes queued.
func queued(t *testing.T, s *Set[*write], name string, n int) {
	t.Helper()
	synctest.Wait()
	s.mu.Lock()
	got := 0
	if l := s.lines[name]; l != nil {
		got = len(l.queue)
	}
	s.mu.Unlock()
	if got != n {
		t.Fatalf("line %q has %d writes queued, want %d", name, got, n)
	}
}

// TestWriteWithdrawn checks that a write whose context ends while it is
// queued is never sent and returns the context's error, and that the
// others still go.
func TestWriteWithdrawn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := &recorder{gate: make(chan struct{}), entered: make(chan struct{}, 100)}
		s := &Set[*write]{Send: r.send, Max: 10}
		first, gone, last := &write{id: 1}, &write{id: 2}, &write{id: 3}
		var wg sync.WaitGroup
		wg.Go(func() { _ = s.Write(t.Context(), "a", first) })
		<-r.entered
		ctx, cancel := context.WithCancel(t.Context())
		errc := make(chan error, 1)
		go func() { errc <- s.Write(ctx, "a", gone) }()
		queued(t, s, "a", 1)
		wg.Go(func() { _ = s.Write(t.Context(), "a", last) })
		queued(t, s, "a", 2)
		cancel()
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Errorf("withdrawn write returned %v, want context.Canceled", err)
		}
		close(r.gate)
		wg.Wait()
		if gone.batch != 0 {
			t.Errorf("the withdrawn write was sent in batch %d", gone.batch)
		}
		if fmt.Sprint(r.batches) != "[[1] [3]]" {
			t.Errorf("batches %v, want [[1] [3]]", r.batches)
		}
	})
}

// TestWriteSentRunsToEnd checks that a write already sent when its context
// ends is not abandoned: Send gets a context that has not ended, and Write
// returns nil once the outcome is recorded.
func TestWriteSentRunsToEnd(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	var sendErr error
	s := &Set[*write]{Max: 1, Send: func(sctx context.Context, batch []*write) {
		cancel()
		sendErr = sctx.Err()
		batch[0].batch = 1
	}}
	w := &write{id: 1}
	if err := s.Write(ctx, "a", w); err != nil {
		t.Errorf("Write = %v, want nil: the write was sent", err)
	}
	if sendErr != nil || w.batch != 1 {
		t.Errorf("send saw context error %v, write batch %d; want a live context and the write sent", sendErr, w.batch)
	}
	if err := s.Write(ctx, "a", &write{id: 2}); !errors.Is(err, context.Canceled) {
		t.Errorf("Write with an ended context = %v, want context.Canceled", err)
	}
}

// TestWriteConcurrent sends many writes on a few lines from many goroutines
// (run it with -race): each is sent once, and no line is left behind.
func TestWriteConcurrent(t *testing.T) {
	var mu sync.Mutex
	sent := map[int]int{}
	s := &Set[*write]{Max: 8, Send: func(_ context.Context, batch []*write) {
		mu.Lock()
		defer mu.Unlock()
		for _, w := range batch {
			sent[w.id]++
		}
	}}
	const n = 2000
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			if err := s.Write(t.Context(), fmt.Sprint(i%3), &write{id: i}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	for i := range n {
		if sent[i] != 1 {
			t.Errorf("write %d sent %d times", i, sent[i])
		}
	}
	if l := s.Len(); l != 0 {
		t.Errorf("%d lines left behind", l)
	}
}

// TestSendPanics checks that a Send that panics does not stop its line: the
// leader's call panics on, the writes of its batch get ErrUnknownOutcome, and the
// next write goes through.
func TestSendPanics(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		gate, entered := make(chan struct{}), make(chan struct{}, 10)
		calls := 0
		s := &Set[*write]{Max: 10, Send: func(_ context.Context, batch []*write) {
			calls++
			if calls == 1 {
				entered <- struct{}{}
				<-gate
				return
			}
			if calls == 2 {
				panic("send failed")
			}
			batch[0].batch = calls
		}}
		var wg sync.WaitGroup
		wg.Go(func() { _ = s.Write(t.Context(), "a", &write{id: 1}) })
		<-entered
		panicked := make(chan any, 1)
		wg.Go(func() {
			defer func() { panicked <- recover() }()
			_ = s.Write(t.Context(), "a", &write{id: 2})
		})
		queued(t, s, "a", 1)
		followerErr := make(chan error, 1)
		wg.Go(func() { followerErr <- s.Write(t.Context(), "a", &write{id: 3}) })
		queued(t, s, "a", 2)
		close(gate) // write 2 leads the batch {2, 3}, whose Send panics
		wg.Wait()
		if p := <-panicked; p == nil {
			t.Error("the leader of the batch whose Send panicked did not panic")
		}
		if err := <-followerErr; !errors.Is(err, ErrUnknownOutcome) {
			t.Errorf("a write of the batch whose Send panicked = %v, want ErrUnknownOutcome", err)
		}
		next := &write{id: 4}
		if err := s.Write(t.Context(), "a", next); err != nil || next.batch != 3 {
			t.Errorf("the write after the panic = %v, batch %d; want it sent", err, next.batch)
		}
		if n := s.Len(); n != 0 {
			t.Errorf("%d lines left behind", n)
		}
	})
}

// TestByKey: one key always names the same line, and keys spread over all
// n lines.
func TestByKey(t *testing.T) {
	seen := map[string]bool{}
	for i := range 100 {
		key := fmt.Sprintf("key-%d", i)
		name := ByKey("claim-", key, 2)
		if again := ByKey("claim-", key, 2); again != name {
			t.Errorf("ByKey(%q) = %q, then %q", key, name, again)
		}
		seen[name] = true
	}
	if len(seen) != 2 || !seen["claim-0"] || !seen["claim-1"] {
		t.Errorf("100 keys went to lines %v, want claim-0 and claim-1", seen)
	}
}
