// Signs a payment with the official client (x402Client and the @x402/evm exact
// client scheme), exactly as @x402/fetch would for a 402 answer.
//
// Environment:
//   PAYER_KEY  0x-prefixed private key of the payer (required)
//
// stdin: a PaymentRequired JSON object (the decoded PAYMENT-REQUIRED header).
// Spend controls allow every accepts entry's asset up to its amount.
// stdout: one JSON line, the PaymentPayload the client would send.
import { x402Client } from "@x402/core/client";
import { ExactEvmScheme } from "@x402/evm/exact/client";
import { privateKeyToAccount } from "viem/accounts";
import { env, readStdin } from "./ts-facilitator-lib.mjs";

const paymentRequired = JSON.parse(await readStdin());
const signer = privateKeyToAccount(env("sign", "PAYER_KEY"));
const client = new x402Client();
for (const network of new Set(paymentRequired.accepts.map((a) => a.network))) {
  client.register(network, new ExactEvmScheme(signer));
}
client.setSpendControls({
  allowedAssets: paymentRequired.accepts.map((a) => ({
    network: a.network,
    asset: a.asset,
    maxAmountPerPayment: a.amount,
  })),
});
try {
  console.log(JSON.stringify(await client.createPaymentPayload(paymentRequired)));
} catch (err) {
  console.error(`sign: ${err?.stack ?? err}`);
  process.exit(1);
}
