// An @x402/express resource server whose routes offer schemes a buyer must not
// pay automatically, next to one it may. The schemes other than exact are
// registered with a minimal scheme server, so the 402s are built by the official
// middleware as a real seller's would be; the facilitator must list them in
// /supported (the Go test adds them in front of ours). Nothing on these routes
// is ever verified or settled unless a buyer pays the exact option.
//
//   GET /paid     exact only
//   GET /nvm      nvm:erc4337 only ("requires a Nevermined account")
//   GET /foreign  FOREIGN_SCHEME only (unknown to every buyer)
//   GET /mixed    nvm:erc4337, FOREIGN_SCHEME and exact, in that order
//
// Environment: as express-server.mjs (PORT, FACILITATOR_URL, TOKEN, PAY_TO,
// AMOUNT, NETWORK, TOKEN_NAME, TOKEN_VERSION, MAX_TIMEOUT_SECONDS), plus
//   FOREIGN_SCHEME   the unknown scheme's name (default "x-foreign")
//
// Once listening it prints one JSON line on stdout: {"ready":true,"port":N}.
import express from "express";
import { paymentMiddleware, x402ResourceServer } from "@x402/express";
import { HTTPFacilitatorClient } from "@x402/core/server";
import { ExactEvmScheme } from "@x402/evm/exact/server";

function env(name, fallback) {
  const v = process.env[name] ?? fallback;
  if (v === undefined || v === "") {
    console.error(`express-foreign: ${name} is required`);
    process.exit(2);
  }
  return v;
}

// ForeignScheme is the least a scheme server must be for the middleware to
// offer it: it passes the price through and adds nothing.
class ForeignScheme {
  constructor(scheme) {
    this.scheme = scheme;
    this.defaultAssetTransferMethod = "default";
    this.paymentFlows = { default: { supported: ["authorization"], default: "authorization" } };
  }
  async parsePrice(price) {
    return { amount: price.amount, asset: price.asset, extra: price.extra || {} };
  }
  enhancePaymentRequirements(requirements) {
    return Promise.resolve(requirements);
  }
}

const port = Number(env("PORT", "0"));
const network = env("NETWORK", "eip155:1337");
const foreign = env("FOREIGN_SCHEME", "x-foreign");
const facilitator = new HTTPFacilitatorClient({ url: env("FACILITATOR_URL") });
const server = new x402ResourceServer(facilitator)
  .register(network, new ExactEvmScheme())
  .register(network, new ForeignScheme("nvm:erc4337"))
  .register(network, new ForeignScheme(foreign));

const price = {
  amount: env("AMOUNT"),
  asset: env("TOKEN"),
  extra: { name: env("TOKEN_NAME", "USD Coin"), version: env("TOKEN_VERSION", "2") },
};
const option = (scheme) => ({
  scheme,
  network,
  payTo: env("PAY_TO"),
  maxTimeoutSeconds: Number(env("MAX_TIMEOUT_SECONDS", "60")),
  price,
});
const route = (accepts) => ({ accepts, description: "interop", mimeType: "application/json" });

const app = express();
app.use(
  paymentMiddleware(
    {
      "GET /paid": route(option("exact")),
      "GET /nvm": route(option("nvm:erc4337")),
      "GET /foreign": route(option(foreign)),
      "GET /mixed": route([option("nvm:erc4337"), option(foreign), option("exact")]),
    },
    server,
  ),
);
for (const path of ["/paid", "/nvm", "/foreign", "/mixed"]) {
  app.get(path, (_req, res) => res.json({ ok: true, path }));
}

const listener = app.listen(port, "127.0.0.1", () => {
  console.log(JSON.stringify({ ready: true, port: listener.address().port }));
});
for (const sig of ["SIGINT", "SIGTERM"]) {
  process.on(sig, () => listener.close(() => process.exit(0)));
}
