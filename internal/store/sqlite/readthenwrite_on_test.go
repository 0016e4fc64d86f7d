//go:build l4a_unsafe_readthenwrite

package sqlite

import (
	"context"
	"path/filepath"
	"sync"
	"testing"

	"github.com/llm4agents/llm4agents/internal/store/storetest"
)

// TestReadThenWriteControl: in the l4a_unsafe_readthenwrite build, with the
// switch off, 200 concurrent holds through two handles take exactly the key's
// cap; with it on, they take more. Every read is lined up before any write
// (readThenWriteGap), so the overspend is certain, not a matter of timing.
func TestReadThenWriteControl(t *testing.T) {
	for _, on := range []bool{false, true} {
		t.Run(map[bool]string{false: "SwitchOff", true: "SwitchOn"}[on], func(t *testing.T) {
			replaceReadThenWrite(t, on, storetest.CapRaceHolds)
			if readThenWriteSwitchedOn() != on {
				t.Fatalf("readThenWriteSwitchedOn() = %t, want %t", !on, on)
			}
			path := filepath.Join(t.TempDir(), "llm4agents.db")
			a, b := openHandle(t, path), openHandle(t, path)
			placed, held := storetest.KeyCapRace(t, a, b)
			switch {
			case !on && (held != storetest.CapRaceCap || placed != storetest.CapRaceFits):
				t.Errorf("switch off: %d holds placed, %d held; want exactly the cap of %d", placed, held, storetest.CapRaceCap)
			case on && held <= storetest.CapRaceCap:
				t.Errorf("switch on: %d holds placed, %d held; want more than the cap of %d (the control shows no overspend)",
					placed, held, storetest.CapRaceCap)
			}
		})
	}
}

func openHandle(t *testing.T, path string) *DB {
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

// replaceReadThenWrite sets the switch for the test and, when on, a gap that
// holds every read-then-write hold after its read until n holds have read.
func replaceReadThenWrite(t *testing.T, on bool, n int) {
	oldOn, oldGap := readThenWrite, readThenWriteGap
	t.Cleanup(func() { readThenWrite, readThenWriteGap = oldOn, oldGap })
	readThenWrite, readThenWriteGap = on, nil
	if on {
		readThenWriteGap = barrier(n)
	}
}

// barrier returns a gap that returns once n callers have reached it, or when
// a caller's context ends (a hold that failed before its read never arrives).
func barrier(n int) func(ctx context.Context) {
	var mu sync.Mutex
	arrived := 0
	all := make(chan struct{})
	return func(ctx context.Context) {
		mu.Lock()
		arrived++
		if arrived == n {
			close(all)
		}
		mu.Unlock()
		select {
		case <-all:
		case <-ctx.Done():
		}
	}
}
