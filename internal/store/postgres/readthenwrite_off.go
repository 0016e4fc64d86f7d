//go:build !l4a_unsafe_readthenwrite

package postgres

import (
	"context"

	"github.com/llm4agents/llm4agents/internal/store"
)

// unsafeHold does nothing: in every build but the test-only
// l4a_unsafe_readthenwrite one (readthenwrite_on.go), Hold checks the
// balance and the caps in the same step as it writes, whatever the
// environment says. The read-then-write control is not reachable from a
// production binary or its config.
func (db *DB) unsafeHold(context.Context, store.HoldRequest) (_ store.Hold, done bool, _ error) {
	return store.Hold{}, false, nil
}

// readThenWriteSwitchedOn is false: only the l4a_unsafe_readthenwrite build
// can switch it on.
func readThenWriteSwitchedOn() bool { return false }
