// Package client is the buyer side of x402 v2: an http.RoundTripper that answers
// a 402 by paying one of the offered requirements, within a spend policy, and
// retrying the request once.
//
// It mirrors the official @x402/fetch 2.27 client (x402-v2.md §2.3, §9.1): the
// PAYMENT-REQUIRED header is authoritative, the chosen requirement and the
// resource are echoed verbatim, requirements with an unknown extra.paymentFlow
// are skipped, a request that already carries a payment header is never paid
// again, and a paid request that is answered 402 once more is returned as it is,
// never paid a second time.
//
// What it pays is bounded by a Policy: allowed (network, asset) pairs, a maximum
// per request and a budget across calls, in the asset's atomic units. The zero
// Policy pays nothing. Only the `exact` scheme on eip155 networks is paid (EIP-3009,
// through x402/evm/exact); `nvm:erc4337` and `nvm:card-delegation` are recognised
// and labelled "requires a Nevermined account", and any other scheme is foreign.
// Neither is ever paid (MISSION B2). When nothing is payable, RoundTrip fails with
// a *NoPayableOptionError that lists every option and why it was refused.
//
// Payment headers are secrets (MISSION W5): they are never logged and never part
// of an error, and a payment or sign-in header is never carried to an origin other
// than the one it was made for when an http.Client follows a redirect.
//
// The package imports no database driver and nothing under internal/, so a buyer
// who imports it inherits only x402, x402/evm/exact and go-ethereum.
package client
