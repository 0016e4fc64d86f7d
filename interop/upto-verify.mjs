// Checks upto payments with the official code, without a node:
//   - viem's verifyTypedData (ECDSA) with the official uptoPermit2WitnessTypes
//     and Permit2's domain, and viem's hashTypedData of the same message;
//   - the official facilitator scheme (@x402/evm/upto/facilitator
//     UptoEvmScheme.verify) on a stub signer: the asset and the proxy have
//     code, payers have none, and every eth_call (the settle simulation)
//     succeeds, so its verdict is that of its checks before the simulation.
//
// stdin: {"facilitators": ["0x..."], "contracts": ["0x..."], "cases":
//         [{"paymentPayload": ..., "paymentRequirements": ...}]}
//        contracts are the addresses that have code.
// stdout: one JSON line, an array in the order of cases of
//         {"signatureValid": bool, "digest": "0x..." | null,
//          "verify": <VerifyResponse> | {"isValid": false, "thrown": "..."}}.
import { PERMIT2_ADDRESS, uptoPermit2WitnessTypes } from "@x402/evm";
import { UptoEvmScheme } from "@x402/evm/upto/facilitator";
import { hashTypedData, verifyTypedData } from "viem";
import { readStdin } from "./ts-facilitator-lib.mjs";

const input = JSON.parse(await readStdin());
const withCode = new Set(input.contracts.map((a) => a.toLowerCase()));
const signer = {
  getAddresses: () => input.facilitators,
  getCode: async ({ address }) => (withCode.has(address.toLowerCase()) ? "0x6000" : "0x"),
  readContract: async () => undefined,
};
const scheme = new UptoEvmScheme(signer);

// typedData is the message as the official facilitator rebuilds it: on the
// chain of the requirements' network.
function typedData(paymentPayload, paymentRequirements) {
  const a = paymentPayload.payload.permit2Authorization;
  return {
    domain: { name: "Permit2", chainId: Number(paymentRequirements.network.split(":")[1]), verifyingContract: PERMIT2_ADDRESS },
    types: uptoPermit2WitnessTypes,
    primaryType: "PermitWitnessTransferFrom",
    message: {
      permitted: { token: a.permitted.token, amount: BigInt(a.permitted.amount) },
      spender: a.spender,
      nonce: BigInt(a.nonce),
      deadline: BigInt(a.deadline),
      witness: { to: a.witness.to, facilitator: a.witness.facilitator, validAfter: BigInt(a.witness.validAfter) },
    },
  };
}

const out = [];
for (const c of input.cases) {
  const r = { signatureValid: false, digest: null };
  try {
    const td = typedData(c.paymentPayload, c.paymentRequirements);
    r.digest = hashTypedData(td);
    r.signatureValid = await verifyTypedData({
      ...td,
      address: c.paymentPayload.payload.permit2Authorization.from,
      signature: c.paymentPayload.payload.signature,
    });
  } catch {
    // A payload viem cannot read has no digest and no valid signature.
  }
  try {
    r.verify = await scheme.verify(c.paymentPayload, c.paymentRequirements);
  } catch (err) {
    r.verify = { isValid: false, thrown: String(err?.message ?? err) };
  }
  out.push(r);
}
console.log(JSON.stringify(out));
