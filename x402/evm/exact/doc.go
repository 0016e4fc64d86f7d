// Package exact implements the x402 `exact` scheme on EVM chains with EIP-3009
// (`transferWithAuthorization`) tokens such as USDC.
//
// The buyer side builds and signs an authorization for one PaymentRequirements
// (CreatePayload). The facilitator side parses a payload once into typed values
// (common.Address, *big.Int), checks it offline and against a node (Verifier), and
// provides what a settler needs: the calldata of the on-chain call, the on-chain
// authorization state, and the log evidence that a transaction paid a given
// authorization (PaysAuthorization). Sending transactions and recording outcomes is the
// facilitator's job (internal/facilitator), not this package's.
//
// Reasons are those of the official facilitators (npm @x402/evm 2.27) wherever a
// payload has a single fault; checks of our own carry reasons of our own, listed in
// the x402 package.
package exact
