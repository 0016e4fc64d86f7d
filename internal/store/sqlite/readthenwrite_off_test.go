//go:build !l4a_unsafe_readthenwrite

package sqlite

import (
	"path/filepath"
	"testing"

	"github.com/llm4agents/llm4agents/internal/store/storetest"
)

// TestReadThenWriteSwitchIsInertInTheDefaultBuild:
// LLM4AGENTS_UNSAFE_READ_THEN_WRITE=1 only switches the holds to
// read-then-write in a binary built with -tags l4a_unsafe_readthenwrite. In
// every other build 200 concurrent holds through two handles never take more
// than the key's cap, and take all of it.
func TestReadThenWriteSwitchIsInertInTheDefaultBuild(t *testing.T) {
	t.Setenv("LLM4AGENTS_UNSAFE_READ_THEN_WRITE", "1")
	if readThenWriteSwitchedOn() {
		t.Fatal("readThenWriteSwitchedOn() = true in the default build")
	}
	a, b := twoHandles(t)
	placed, held := storetest.KeyCapRace(t, a, b)
	if held != storetest.CapRaceCap || placed != storetest.CapRaceFits {
		t.Errorf("%d holds placed, %d held; want exactly the cap of %d", placed, held, storetest.CapRaceCap)
	}
}

// twoHandles opens two DB values on one new file, as two processes would.
func twoHandles(t *testing.T) (a, b *DB) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "llm4agents.db")
	for _, p := range []**DB{&a, &b} {
		db, err := Open(t.Context(), path, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := db.Close(); err != nil {
				t.Error(err)
			}
		})
		*p = db
	}
	return a, b
}
