// Package redis is the Redis store backend (github.com/redis/go-redis/v9):
// store.Settlements, store.Payments, store.Recoveries, store.SignIns
// (wallet sign-in), store.Receipts, store.ReceiptLog and store.LogAnchors
// with the semantics their interfaces give, pinned down by the conformance
// suites (storetest). It holds no credits ledger and no API keys: a gateway
// on Redis sells x402 calls, with their receipts and the receipt log.
//
// # Atomicity
//
// Every operation, reads included, is one Lua script (EVALSHA, falling back
// to EVAL when the server lost its script cache). Redis runs a script to its
// end before any other command, so a claim, a takeover after the lease, a
// fenced write, a release and the success mark are each atomic against every
// other client: of any number of concurrent callers on any number of DB
// values, exactly one wins a claim, and exactly one call ever gets true from
// MarkSuccessReported. Fences come from an INCR counter per record type and
// are never reused, not across release, takeover or expiry. The reconcilers'
// lists (UnresolvedSettlements, oldest first; RecentSettlements) are sorted
// sets, one per network and one of every network, that the same scripts
// keep in step with the records.
//
// Scripts check everything they depend on before their first write, because
// Redis does not roll back a failed script: a key that holds something the
// store did not write (another program's string at a record's name, a
// counter that is not a number, a hash with missing fields) makes the
// operation fail with an error, never a wrong claim.
//
// # Clock
//
// Leases and expiries are judged by the Redis server's clock: each script
// reads TIME itself, so replicas whose clocks disagree still agree on who
// holds a claim. Setting DB.Now replaces it (tests do); the script
// then receives that time as an argument. Times are kept to the millisecond.
//
// # Keys
//
// Every key starts with the hash tag "{" + key prefix + "}" (the prefix comes
// from the URL option key_prefix, default "l4a:"): "{l4a:}settlement:<key>",
// "{l4a:}settlement-fence", "{l4a:}settlement-unresolved:<network>",
// "{l4a:}settlement-unresolved-all", "{l4a:}settlement-recent:<network>",
// "{l4a:}settlement-recent-all", "{l4a:}payment:<key>",
// "{l4a:}payment-fence". All keys of one store thus hash to one cluster slot
// and every script is single-slot (a listing reads records named in its
// set, and a script that resolves a record finds its network's set from
// the record, which a cluster allows only because they share the slot).
// "{l4a:}settlement-unresolved" and "{l4a:}settlement-recent" are the sets
// of every network that versions before per-network sets kept: the
// listings move what they find there into the sets above, so a store
// upgraded with records in flight, or beside such a version still running,
// finds them. Open itself connects to one server (a standalone
// Redis, or a primary behind a proxy); the layout is ready for a cluster
// client. Several stores may share one Redis database under different
// prefixes. Payment claims carry a TTL that ends five minutes
// after their ExpiresAt, so Redis forgets them by itself and
// PurgeExpiredPayments has nothing to do. Settlement records and the two
// counters have no TTL: the success mark must outlive every retry (D5), and
// a counter that restarted could hand out a fence again (the scripts
// still keep each key's fences growing if a counter is deleted by hand).
// Never evict these keys: run the server with maxmemory-policy noeviction.
// Recovery records are "{l4a:}recovery:<key>", found for promotion through
// "{l4a:}recovery-op:<operation id>", with fences from
// "{l4a:}recovery-fence" (no TTL, like the other counters); a record and its
// index carry a TTL ending at the record's ExpiresAt. Sign-in nonces are
// "{l4a:}signin-nonce:<SHA-256 of the nonce>" and sessions
// "{l4a:}signin-session:<hash>", each with a TTL ending at its expiry,
// indexed for SweepAuth by the sorted sets "{l4a:}signin-nonces" and
// "{l4a:}signin-sessions". The receipt log's anchors are
// "{l4a:}log-anchor:<tx hash>", listed newest first by the lexicographic
// sorted set "{l4a:}log-anchors"; receipts and the log itself are laid out
// in receipts.go and receiptlog.go. None of those three has a TTL: they are
// evidence, kept as the SQL stores keep them. Only the listing of recent
// receipts, "{l4a:}receipts-recent", an index of request ids, forgets
// what is older than store.RecentRetention and expires after that long.
//
// # Errors
//
// No go-redis type leaves the package: errors are the store sentinels, the
// caller's context error (wrapped, with the driver's text), or text naming
// the operation. The URL's password never appears in an error or a log line.
// Each call runs within its context's deadline or store.DefaultTimeout,
// whichever comes first; a claim, once sent in its pipeline with other
// callers' claims (lines.go), runs to its end within store.DefaultTimeout
// even if its caller's context ends, so its outcome is known. A script that
// the server no longer has (NOSCRIPT) did not run and is sent again with its
// body. A script is never retried after its reply was lost
// (max_retries is refused in the URL): it may have run, and resending could
// make a caller believe it lost a claim it holds, or that a release it made
// found nothing. The caller gets an error and fails closed.
//
// # Durability: what this backend does not guarantee
//
// Redis acknowledges a write before it is on disk or on a replica. An
// acknowledged claim can be lost on a crash (unless appendonly yes with
// appendfsync always) and on a failover to a replica that had not received it
// yet (replication is asynchronous; WAIT does not make a failover safe
// either). A lost payment claim can let a second presentation of the same
// authorization through to the upstream: that costs an upstream call, never a
// second payment, because the chain is the backstop: an EIP-3009
// authorization can be used once, the facilitator reads authorizationState
// before it broadcasts, and its own settlement claim is a separate record. A
// lost settlement record is resolved from the chain the same way, so it cannot
// become a second settlement either. What the chain cannot restore is a lost
// success mark: a second settle call could then be answered success:true for
// the one transfer that happened (D5 asks for exactly one).
//
// For recovery records a lost write costs the buyer, never the seller: it
// can lose an answer that was paid for, it cannot hand one out unpaid. A
// replica, and so the primary after a failover, holds an earlier state of the
// primary (replication ships the scripts' effects in order), and a record is
// promoted only after its settlement was seen (by the after-settle step, or
// from a settled payment claim): a lost write takes writes away, it never adds
// a promotion. So a lost record leaves nothing to replay: the retry is a new
// purchase, and its authorization, already used, cannot pay again (the
// payment claim says so, or, if that was lost too, the chain). A lost promotion
// leaves the record staged, and a staged record is never replayed: the retry
// gets a conflict (settlement pending) until it is promoted again from the
// settled claim or expires. A lost abandon leaves a staged record whose
// payment never settled, which the next lookup abandons again. A lost replay
// count gives one more replay of a paid answer, still only to a caller with
// proof of control (D15). A lost write to "{l4a:}recovery-fence" may hand a
// fence out twice for one record key; both holders are requests under that
// key, so of one payer, and neither can promote the other's operation id.
//
// A lost sign-in write costs a payer a new sign-in; a consumed nonce lost in
// a failover could be used once more within its life, but only by whoever
// holds the message already signed with it, for a second session of the
// same account.
//
// For the settlement store, run Redis with appendonly yes and appendfsync
// always, and maxmemory-policy noeviction; Open logs a warning when it can
// read the server's settings and they differ. Where an acknowledged write
// must survive any single failure, use PostgreSQL: it is the durable choice.
//
// Tested with Redis 7.0. Scripts that read TIME and then write need
// replication of script effects, the default since Redis 5.
package redis
