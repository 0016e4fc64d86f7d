//go:build !l4a_unsafe_readthenwrite

package postgres

import (
	"testing"

	"github.com/llm4agents/llm4agents/internal/store/storetest"
)

// TestReadThenWriteSwitchIsInertInTheDefaultBuild:
// LLM4AGENTS_UNSAFE_READ_THEN_WRITE=1 only switches the holds to
// read-then-write in a binary built with -tags l4a_unsafe_readthenwrite. In
// every other build 200 concurrent holds through two handles (two pools) never take more
// than the key's cap, and take all of it.
func TestReadThenWriteSwitchIsInertInTheDefaultBuild(t *testing.T) {
	t.Setenv("LLM4AGENTS_UNSAFE_READ_THEN_WRITE", "1")
	if readThenWriteSwitchedOn() {
		t.Fatal("readThenWriteSwitchedOn() = true in the default build")
	}
	_, dsn := freshSchema(t)
	a, b := open(t, dsn, nil, nil), open(t, dsn, nil, nil)
	placed, held := storetest.KeyCapRace(t, a, b)
	if held != storetest.CapRaceCap || placed != storetest.CapRaceFits {
		t.Errorf("%d holds placed, %d held; want exactly the cap of %d", placed, held, storetest.CapRaceCap)
	}
}
