// Package testchain holds test helpers that run real Ethereum chains with
// llm4agents' test contracts deployed, for tests that pay and settle for real
// instead of faking the chain.
//
// Simulated is go-ethereum's in-process simulated backend (chain id 1337):
// fast enough for unit tests, with blocks sealed on demand or by an
// auto-commit loop. The same package also starts anvil for end-to-end tests
// that need a JSON-RPC node.
//
// Both use the well-known dev accounts of DevMnemonic (DevKey, DevAddress),
// so addresses match anvil's and hardhat's defaults. These keys are public:
// never send real funds to them.
package testchain
