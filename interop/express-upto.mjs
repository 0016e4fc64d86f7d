// An @x402/express resource server with one metered route, GET /metered, that
// offers both exact (the full price) and upto (at most the same price, with the
// official UptoEvmScheme server of @x402/evm/upto/server), and charges less than
// the maximum after serving: the handler names the actual charge with
// setSettlementOverrides(res, {amount}). Its facilitator is reached over HTTP
// (HTTPFacilitatorClient); the tests point it at ours, which must list upto with
// its facilitatorAddress in /supported.
//
// Environment:
//   PORT             port to listen on, on 127.0.0.1 (default 0: any free port)
//   FACILITATOR_URL  base URL of the facilitator (required)
//   TOKEN            token address (required)
//   PAY_TO           recipient address (required)
//   AMOUNT           price of exact and maximum of upto, in atomic units (required)
//   CHARGE           what an upto payment is charged, in atomic units (required)
//   NETWORK          CAIP-2 network (default eip155:1337)
//   TOKEN_NAME       EIP-712 domain name (default "USD Coin")
//   TOKEN_VERSION    EIP-712 domain version (default "2")
//   MAX_TIMEOUT_SECONDS  (default 60)
//
// Once listening it prints one JSON line on stdout: {"ready":true,"port":N}.
import express from "express";
import { paymentMiddleware, setSettlementOverrides, x402ResourceServer } from "@x402/express";
import { HTTPFacilitatorClient } from "@x402/core/server";
import { ExactEvmScheme } from "@x402/evm/exact/server";
import { UptoEvmScheme } from "@x402/evm/upto/server";

function env(name, fallback) {
  const v = process.env[name] ?? fallback;
  if (v === undefined || v === "") {
    console.error(`express-upto: ${name} is required`);
    process.exit(2);
  }
  return v;
}

const port = Number(env("PORT", "0"));
const network = env("NETWORK", "eip155:1337");
const charge = env("CHARGE");
const facilitator = new HTTPFacilitatorClient({ url: env("FACILITATOR_URL") });
const server = new x402ResourceServer(facilitator)
  .register(network, new ExactEvmScheme())
  .register(network, new UptoEvmScheme());

// eip155:1337 has no default asset, so each price names the token.
const price = {
  amount: env("AMOUNT"),
  asset: env("TOKEN"),
  extra: { name: env("TOKEN_NAME", "USD Coin"), version: env("TOKEN_VERSION", "2") },
};
const common = {
  network,
  payTo: env("PAY_TO"),
  maxTimeoutSeconds: Number(env("MAX_TIMEOUT_SECONDS", "60")),
  price,
};

const app = express();
app.use(
  paymentMiddleware(
    {
      "GET /metered": {
        accepts: [
          { scheme: "exact", ...common },
          { scheme: "upto", ...common },
        ],
        description: "interop upto",
        mimeType: "application/json",
      },
    },
    server,
  ),
);
// paidScheme is the scheme of the payment the request carries, as it echoes
// the option it accepted.
function paidScheme(req) {
  try {
    return JSON.parse(Buffer.from(req.get("payment-signature") ?? "", "base64").toString()).accepted.scheme;
  } catch {
    return undefined;
  }
}

app.get("/metered", (req, res) => {
  // The middleware applies an override whatever the scheme, and an exact
  // payment settles only for its full amount: charge less for upto alone.
  const scheme = paidScheme(req);
  if (scheme === "upto") {
    setSettlementOverrides(res, { amount: charge });
  }
  res.json({ ok: true, scheme });
});

const listener = app.listen(port, "127.0.0.1", () => {
  console.log(JSON.stringify({ ready: true, port: listener.address().port }));
});
for (const sig of ["SIGINT", "SIGTERM"]) {
  process.on(sig, () => listener.close(() => process.exit(0)));
}
