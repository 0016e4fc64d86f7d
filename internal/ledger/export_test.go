package ledger

import "context"

// WaitOpenings waits for the leases being opened now (ahead of need, in
// the background) to be placed or fail: a test that kills a replica waits
// for them so that what it left in the store does not change after.
func (ls *Leases) WaitOpenings(ctx context.Context) bool { return ls.waitOpenings(ctx) }

// MinHeadroom is the fewest positions a lease is issued ahead of its calls.
const MinHeadroom = minHeadroom
