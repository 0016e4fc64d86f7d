// Package client is the buyer side of x402 v2: an http.RoundTripper that answers
// a 402 by paying one of the offered requirements, within a spend policy, and
// sending each logical call's payment once however often the call is retried;
// and the verification of the gateway's signed receipts.
//
// It mirrors the official @x402/fetch 2.27 client: the
// PAYMENT-REQUIRED header is authoritative, the chosen requirement and the
// resource are echoed verbatim, requirements with an unknown extra.paymentFlow
// are skipped, a request that already carries a payment header is never paid
// again, and a paid request that is answered 402 once more is returned as it is,
// never paid a second time.
//
// What it pays is bounded by a Policy: allowed (network, asset) pairs, a maximum
// per request and a budget across calls, in the asset's atomic units. The zero
// Policy pays nothing. The `exact` scheme on eip155 networks is paid (EIP-3009,
// through x402/evm/exact), and so is `upto` (a Permit2 witness transfer of at
// most the offer's amount, through x402/evm/upto), which is preferred when
// both are offered (Policy.Upto): it is held at its maximum against the
// budget until the server's PAYMENT-RESPONSE says what it charged, and only
// that stays spent. `nvm:erc4337` and `nvm:card-delegation` are recognised
// and labelled "requires a Nevermined account", and any other scheme is foreign.
// Neither is ever paid. When nothing is payable, RoundTrip fails with
// a *NoPayableOptionError that lists every option and why it was refused.
//
// Retries never pay twice: one logical call sends one payment. Each paying call has an
// entry in a Journal, keyed by its Idempotency-Key header or its request
// x402.Fingerprint, created before anything is signed. The authorization
// signed for the call is recorded there before it is sent, and sent again,
// unchanged, by the Transport's own retries (RetryPolicy: transport errors,
// settlement_pending, 409 with Retry-After), by an SDK that retries the call
// after a lost connection, and, with a FileJournal, by a new process after a
// crash. When the 402 declares the payment-identifier extension (x402 v2 spec,
// github.com/x402-foundation/x402 specs/extensions/payment_identifier.md) the
// payment carries the call's id, kept across every authorization
// signed for it. A 2xx completes the call.
//
// Payment headers, payment-identifier ids, sign-in headers and keys are
// secrets: they are never logged and never part of an error, and
// a payment or sign-in header is never carried to an origin other than the one
// it was made for when an http.Client follows a redirect.
//
// Receipts are EIP-712 typed data defined in x402/receipt, which the
// gateway signs with; ReceiptVerifier verifies them against the signer an
// origin publishes at /.well-known/llm4agents.json.
//
// Account calls an llm4agents gateway's account routes: it signs in with the
// wallet (EIP-4361), creates, lists and revokes sk-l4a- API keys, shows the
// credit balance, pays top-ups through a Transport and fetches the receipts of
// credit-paid calls. `llm4agents keys` and `llm4agents credits` are built on it.
//
// The package imports no database driver and nothing under internal/, so a buyer
// who imports it inherits only x402, its sub-packages and go-ethereum.
package client
