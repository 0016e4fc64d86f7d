// Package upto implements the x402 `upto` scheme on EVM chains: a Permit2
// witness transfer for a maximum amount, of which the facilitator later charges
// what the request actually cost.
//
// The buyer signs a PermitWitnessTransferFrom whose spender is the
// x402UptoPermit2Proxy and whose witness binds the recipient (payTo), the one
// facilitator allowed to settle, and a validAfter time (CreatePayload). The
// facilitator side parses a payload once into typed values (common.Address,
// *big.Int), checks it offline and against a node (Verifier), and provides what
// a settler needs: the calldata of proxy.settle, the Permit2 nonce state, and
// the log evidence that a transaction paid a given permit (PaysPermit, FindUse).
// Sending transactions is the facilitator's job (internal/facilitator), not this
// package's.
//
// The amount is phase dependent. At verify time requirements.amount is the
// maximum and must equal the permit's amount; at settle time it is the charge,
// which must not exceed the permit's amount (CheckSettle).
//
// Reasons are those of the official facilitator (npm @x402/evm 2.27) wherever a
// payload has a single fault; checks of our own carry reasons of our own, listed
// in the x402 package.
package upto
