// Verifies the gateway's signed receipts (docs/DESIGN.md D18) with viem's
// verifyTypedData, as a buyer's JavaScript would: each receipt arrives as the
// JSON envelope {receipt, signature} and is parsed with JSON.parse.
//
// stdin: {"signer": "0x..", "domain": {"name", "version", "chainId": "<decimal>"},
//         "types": {"Receipt": [{name, type}, ...]},
//         "cases": [{"name": "...", "envelope": "<the envelope's JSON text>",
//                    "signer"?: "0x..", "domain"?: {...}}]}
// A case's own signer or domain, if given, replaces the input's.
// stdout: one JSON line, for each case in order
//         {"name", "valid": bool, "digest": "0x..", "recovered": "0x.."},
//         or {"name", "valid": false, "thrown": "<message>"} when viem throws.
import { hashTypedData, recoverTypedDataAddress, verifyTypedData } from "viem";
import { readStdin } from "./ts-facilitator-lib.mjs";

const input = JSON.parse(await readStdin());
const types = { Receipt: input.types.Receipt };
const toDomain = (d) => ({ ...d, chainId: BigInt(d.chainId) });
// The wire form carries uint256 values as decimal strings, issuedAt and logBy as
// numbers; viem encodes integers from bigints.
const ints = input.types.Receipt.filter((f) => f.type.startsWith("uint")).map((f) => f.name);

const out = [];
for (const c of input.cases) {
  try {
    const { receipt, signature } = JSON.parse(c.envelope);
    const message = { ...receipt };
    for (const name of ints) message[name] = BigInt(message[name]);
    const typed = { domain: toDomain(c.domain ?? input.domain), types, primaryType: "Receipt", message };
    out.push({
      name: c.name,
      valid: await verifyTypedData({ ...typed, address: c.signer ?? input.signer, signature }),
      digest: hashTypedData(typed),
      recovered: await recoverTypedDataAddress({ ...typed, signature }),
    });
  } catch (err) {
    out.push({ name: c.name, valid: false, thrown: String(err?.shortMessage ?? err?.message ?? err) });
  }
}
console.log(JSON.stringify(out));
