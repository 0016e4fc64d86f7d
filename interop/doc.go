// Package interop holds the tests that run our code against the official x402 npm packages.
//
// The peers are pinned in package.json and package-lock.json (npm ci installs
// them, with anvil, under node_modules); the .mjs scripts next to this file drive
// them: an @x402/express server, an @x402/fetch client, the official client's
// signer, and the official facilitator both as a verifier and as an HTTP service.
// See README.md.
package interop
