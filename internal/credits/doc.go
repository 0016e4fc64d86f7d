// Package credits holds the account side of prepaid credits (docs/DESIGN.md
// D12, D18): API keys (`sk-l4a-...`, stored hashed, shown once,
// with caps, expiry, model scope and a rate limit), wallet sign-in with
// EIP-4361 messages and server-issued single-use nonces, the sessions that
// sign-in grants, the gateway's receipt signer, and the http.Handler for the
// account routes (/v1/auth/*, /v1/keys).
//
// Calls is the life of a call paid through a key, with no HTTP in it, as
// internal/paywall is for an x402 payment: Admit runs every step before the
// upstream (the key, its scope, the quote, its rate limits, the hold of the
// maximum cost) and returns the admitted *Call, whose Charge or Release ends
// it; a refusal is a *RefusalError naming its CallReason, which the gateway
// maps to an HTTP answer in one table.
//
// Keys live in a store.Keys, sign-in nonces and sessions in a
// store.SignIns (which every store.Keys is); the holds and captures of a
// key's calls are the ledger's (internal/ledger, with APIKey.Limits).
//
// Secrets handled here (API keys, session tokens, sign-in messages and their
// signatures, the receipt key) never appear in logs or error messages.
package credits
