// Signs an upto payment with the official client (x402Client and the
// @x402/evm upto client scheme on a viem local account), as @x402/fetch would
// for a 402 answer, and computes with viem the EIP-712 digest it signed.
//
// Environment:
//   PAYER_KEY  0x-prefixed private key of the payer (required)
//
// stdin: a PaymentRequired JSON object whose accepts are upto requirements.
// Spend controls allow every accepts entry's asset up to its amount.
// stdout: one JSON line, {"paymentPayload": <PaymentPayload>, "digest": "0x..."}.
import { x402Client } from "@x402/core/client";
import { PERMIT2_ADDRESS, uptoPermit2WitnessTypes } from "@x402/evm";
import { UptoEvmScheme } from "@x402/evm/upto/client";
import { hashTypedData } from "viem";
import { privateKeyToAccount } from "viem/accounts";
import { env, readStdin } from "./ts-facilitator-lib.mjs";

const paymentRequired = JSON.parse(await readStdin());
const signer = privateKeyToAccount(env("upto-sign", "PAYER_KEY"));
const client = new x402Client();
for (const network of new Set(paymentRequired.accepts.map((a) => a.network))) {
  client.register(network, new UptoEvmScheme(signer));
}
client.setSpendControls({
  allowedAssets: paymentRequired.accepts.map((a) => ({
    network: a.network,
    asset: a.asset,
    maxAmountPerPayment: a.amount,
  })),
});
try {
  const paymentPayload = await client.createPaymentPayload(paymentRequired);
  const a = paymentPayload.payload.permit2Authorization;
  const digest = hashTypedData({
    domain: { name: "Permit2", chainId: Number(paymentPayload.accepted.network.split(":")[1]), verifyingContract: PERMIT2_ADDRESS },
    types: uptoPermit2WitnessTypes,
    primaryType: "PermitWitnessTransferFrom",
    message: {
      permitted: { token: a.permitted.token, amount: BigInt(a.permitted.amount) },
      spender: a.spender,
      nonce: BigInt(a.nonce),
      deadline: BigInt(a.deadline),
      witness: { to: a.witness.to, facilitator: a.witness.facilitator, validAfter: BigInt(a.witness.validAfter) },
    },
  });
  console.log(JSON.stringify({ paymentPayload, digest }));
} catch (err) {
  console.error(`upto-sign: ${err?.stack ?? err}`);
  process.exit(1);
}
