// Package receipt is the one definition of the gateway's signed receipts,
// which let a buyer prove what it was charged without trusting the gateway's API,
// shared by the seller that signs them and the buyer that
// checks them: the EIP-712 types and domain, the digest, the
// X-Llm4agents-Receipt header and JSON envelope codecs, signature recovery,
// and the well-known document at /.well-known/llm4agents.json that names the
// signer.
//
// The gateway signs Digest and sends EncodeHeader's value, or the envelope
// in a stream's final usage chunk; a buyer decodes with DecodeHeader or
// ParseEnvelope and checks the signature with Verify against the signer the
// origin publishes (client.ReceiptVerifier fetches and caches that document).
//
// Every receipt is also a leaf of the gateway's public receipt log (docs/DESIGN.md D30):
// Leaf is its public part and a commitment to the rest; Checkpoint, Proof,
// VerifyInclusion and CheckConsistency check that the log includes it and
// never rewrote its history, in the formats of C2SP tlog-checkpoint,
// signed-note and tlog-tiles (TilePath, EntryBundle). A gateway that anchors
// its log writes checkpoints on chain: ParseAnchored decodes the contract's
// Anchored events, and ParseAnchors the gateway's list of what it sent.
// Everything here is a pure function of its arguments: no I/O.
package receipt
