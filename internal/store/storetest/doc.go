// Package storetest is the conformance suite every store backend runs: the
// semantics of the contracts in package store, written once as table
// subtests, so that SQLite, PostgreSQL and Redis cannot drift apart.
//
// A backend's test calls RunSettlements, RunPayments and RunRecoveries, and
// the SQL backends also RunLedger, RunKeys (which runs RunSignIns too),
// RunReceipts, RunReceiptLog, RunLogAnchors and RunStagedPayments; Redis,
// which keeps no API keys, calls RunSignIns. Each gets a function that opens
// two independent handles (separate connection pools or clients) on one new,
// empty database. Most subtests use the first handle and read back through
// the second; the race subtests split concurrent callers between both, the
// way two gateway processes share one database.
//
// Leases are judged by the store's clock, which the suite controls: the open
// function receives a now func that both handles must use for every lease
// decision and timestamp. Expiry tests advance that clock instead of sleeping,
// so the suite is fast and deterministic. The clock starts on a whole
// millisecond and moves in whole milliseconds, so a backend storing times to
// the millisecond (or finer) returns exactly the times the suite expects.
package storetest
