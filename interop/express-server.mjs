// An @x402/express resource server with one paid route, GET /paid, whose
// facilitator is reached over HTTP (HTTPFacilitatorClient). The tests point it at
// our facilitator.
//
// Environment:
//   PORT             port to listen on, on 127.0.0.1 (default 0: any free port)
//   FACILITATOR_URL  base URL of the facilitator (required)
//   TOKEN            EIP-3009 token address (required)
//   PAY_TO           recipient address (required)
//   AMOUNT           price in atomic units (required)
//   NETWORK          CAIP-2 network (default eip155:1337)
//   TOKEN_NAME       EIP-712 domain name (default "USD Coin")
//   TOKEN_VERSION    EIP-712 domain version (default "2")
//   MAX_TIMEOUT_SECONDS  (default 60)
//
// Once listening it prints one JSON line on stdout: {"ready":true,"port":N}.
import express from "express";
import { paymentMiddleware, x402ResourceServer } from "@x402/express";
import { HTTPFacilitatorClient } from "@x402/core/server";
import { ExactEvmScheme } from "@x402/evm/exact/server";

function env(name, fallback) {
  const v = process.env[name] ?? fallback;
  if (v === undefined || v === "") {
    console.error(`express-server: ${name} is required`);
    process.exit(2);
  }
  return v;
}

const port = Number(env("PORT", "0"));
const network = env("NETWORK", "eip155:1337");
const facilitator = new HTTPFacilitatorClient({ url: env("FACILITATOR_URL") });
const server = new x402ResourceServer(facilitator).register(network, new ExactEvmScheme());

const app = express();
app.use(
  paymentMiddleware(
    {
      "GET /paid": {
        accepts: {
          scheme: "exact",
          network,
          payTo: env("PAY_TO"),
          maxTimeoutSeconds: Number(env("MAX_TIMEOUT_SECONDS", "60")),
          // eip155:1337 has no default asset, so the price names the token.
          price: {
            amount: env("AMOUNT"),
            asset: env("TOKEN"),
            extra: { name: env("TOKEN_NAME", "USD Coin"), version: env("TOKEN_VERSION", "2") },
          },
        },
        description: "interop",
        mimeType: "application/json",
      },
    },
    server,
  ),
);
app.get("/paid", (_req, res) => res.json({ ok: true }));

const listener = app.listen(port, "127.0.0.1", () => {
  console.log(JSON.stringify({ ready: true, port: listener.address().port }));
});
for (const sig of ["SIGINT", "SIGTERM"]) {
  process.on(sig, () => listener.close(() => process.exit(0)));
}
