// Pays one URL with @x402/fetch and reports what happened on the wire.
//
// Environment:
//   URL        the paid resource (required)
//   PAYER_KEY  0x-prefixed private key of the payer (required)
//   TOKEN      token address the client may pay in (required; spend controls)
//   NETWORK    CAIP-2 network (default eip155:1337)
//   MAX_AMOUNT largest payment allowed, atomic units (default 1000000)
//
// It prints one JSON line on stdout:
//   {"exchanges":[{"status":402,"paid":false},{"status":200,"paid":true}],
//    "status":200,"body":...,"paymentResponse":{...}|null}
// where exchanges lists every request the wrapped fetch made, paid meaning it
// carried a PAYMENT-SIGNATURE header. Failures go to stderr with exit code 1.
import { x402Client, wrapFetchWithPayment, decodePaymentResponseHeader } from "@x402/fetch";
import { ExactEvmScheme } from "@x402/evm/exact/client";
import { privateKeyToAccount } from "viem/accounts";

function env(name, fallback) {
  const v = process.env[name] ?? fallback;
  if (v === undefined || v === "") {
    console.error(`fetch-client: ${name} is required`);
    process.exit(2);
  }
  return v;
}

const network = env("NETWORK", "eip155:1337");
const signer = privateKeyToAccount(env("PAYER_KEY"));
const client = new x402Client().register(network, new ExactEvmScheme(signer)).setSpendControls({
  allowedAssets: [{ network, asset: env("TOKEN"), maxAmountPerPayment: env("MAX_AMOUNT", "1000000") }],
});

const exchanges = [];
async function recordingFetch(input, init) {
  const req = new Request(input, init);
  const res = await fetch(req);
  exchanges.push({ status: res.status, paid: req.headers.has("payment-signature") });
  return res;
}

try {
  const res = await wrapFetchWithPayment(recordingFetch, client)(env("URL"));
  const header = res.headers.get("payment-response");
  const text = await res.text();
  let body = text;
  try {
    body = JSON.parse(text);
  } catch {}
  console.log(
    JSON.stringify({
      exchanges,
      status: res.status,
      body,
      paymentResponse: header ? decodePaymentResponseHeader(header) : null,
    }),
  );
} catch (err) {
  console.error(`fetch-client: ${err?.stack ?? err}`);
  process.exit(1);
}
