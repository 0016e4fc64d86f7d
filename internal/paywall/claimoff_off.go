//go:build !l4a_unsafe_noclaim

package paywall

import "github.com/llm4agents/llm4agents/internal/store"

// claims returns the store the paywall claims authorizations in. In every
// build but the test-only l4a_unsafe_noclaim one (claimoff_on.go) it is the
// paywall's store, whatever the environment says: switching the claim off is
// not reachable from a production binary or its config.
func (p *Paywall) claims() store.Payments { return p.payments }

// claimSwitchedOff is false: only the l4a_unsafe_noclaim build can switch the
// claim off.
func claimSwitchedOff() bool { return false }
