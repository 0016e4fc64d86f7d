// Package credits holds the account side of prepaid credits (docs/DESIGN.md
// D12, D18): API keys (`sk-l4a-...`, stored hashed, shown once,
// with caps, expiry, model scope and a rate limit), wallet sign-in with
// EIP-4361 messages and server-issued single-use nonces, the sessions that
// sign-in grants, the gateway's receipt signer, and the http.Handler for the
// account routes (/v1/auth/*, /v1/keys).
//
// Keys, nonces and sessions live in a store.Keys; spending through a key is
// the ledger's business (store.Ledger, with APIKey.Limits).
//
// Secrets handled here (API keys, session tokens, sign-in messages and their
// signatures, the receipt key) never appear in logs or error messages.
package credits
