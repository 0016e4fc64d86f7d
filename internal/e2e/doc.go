// Package e2e holds the end-to-end tests of exactly-once payment under
// replicas and crashes (docs/DESIGN.md D4, D5, D20, D21): real
// `llm4agents serve` processes built by internal/proctest, anvil as the chain
// with the test token of contracts/, a fake OpenAI upstream that counts
// calls, and a buyer that signs EIP-3009 authorizations with x402/evm/exact.
//
//   - TestReplicasOneAuthorizationOnce: three replicas on one store, each with
//     its own facilitator signer; the same PAYMENT-SIGNATURE sent 32 times at
//     once, spread over them, gets exactly one fresh 200, one upstream call and
//     one on-chain transfer, and clear refusals for every other copy. At least
//     200 trials (LLM4AGENTS_E2E_TRIALS overrides; scripts/soak-replicas runs
//     2000).
//   - TestReplicasControlClaimOff: the same with the gateway's claim switched
//     off (a binary built with -tags l4a_unsafe_noclaim): it must show the
//     double spend the claim prevents, or the first test proves nothing.
//   - TestCrashPoints: a replica dies at each crash point of
//     internal/crashpoint, restarts, and the buyer retries the same payment:
//     at most one on-chain settlement, records that agree with the chain, no
//     claim held past its lease.
//   - TestCrashAfterBroadcastUnmined (unmined_test.go): the after-broadcast
//     crash with the transaction still unmined, or dropped by the node, when
//     the restarted replica's reconciler looks: the record names the
//     transaction, outlives the claim's lease and is settled once it mines.
//
// The package has no code outside its tests, and they all skip under -short.
// They skip without anvil (run npm ci in interop/) unless
// LLM4AGENTS_TEST_REQUIRE_TOOLS=1, and skip the PostgreSQL and Redis variants
// without LLM4AGENTS_TEST_POSTGRES_DSN and LLM4AGENTS_TEST_REDIS_URL unless
// LLM4AGENTS_TEST_REQUIRE_BACKENDS=1.
package e2e
