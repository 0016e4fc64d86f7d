// The official TypeScript facilitator (x402Facilitator with the @x402/evm exact
// scheme, and its upto scheme when SCHEMES says so) as an HTTP service, the
// reference to measure ours against:
//   GET  /supported
//   POST /verify   {"x402Version":2,"paymentPayload":...,"paymentRequirements":...}
//   POST /settle   same body
// Verdicts are 200 JSON; a malformed body is 400 and a thrown error 500, both
// {"error": "..."}.
//
// Environment:
//   RPC_URL              JSON-RPC endpoint (required)
//   FACILITATOR_KEY      0x-prefixed key of the account that settles (required)
//   PORT                 port on 127.0.0.1 (default 0: any free port)
//   NETWORK              CAIP-2 network (default eip155:1337)
//   POLLING_INTERVAL_MS  receipt polling interval (default 100)
//   SCHEMES              "exact" (default) or "exact,upto"
//
// Once listening it prints one JSON line on stdout:
// {"ready":true,"port":N,"address":"0x..."}.
import { createServer } from "node:http";
import { env, newTsFacilitator } from "./ts-facilitator-lib.mjs";

const { facilitator, address } = newTsFacilitator({
  rpcUrl: env("ts-facilitator", "RPC_URL"),
  key: env("ts-facilitator", "FACILITATOR_KEY"),
  network: env("ts-facilitator", "NETWORK", "eip155:1337"),
  pollingIntervalMs: Number(env("ts-facilitator", "POLLING_INTERVAL_MS", "100")),
  upto: env("ts-facilitator", "SCHEMES", "exact").split(",").includes("upto"),
});

const maxBody = 64 << 10;

function send(res, status, value) {
  const body = JSON.stringify(value);
  res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(body) });
  res.end(body);
}

async function readJSON(req) {
  const chunks = [];
  let n = 0;
  for await (const c of req) {
    n += c.length;
    if (n > maxBody) throw new Error("body too large");
    chunks.push(c);
  }
  return JSON.parse(Buffer.concat(chunks).toString("utf8"));
}

async function handle(req, res) {
  const path = new URL(req.url, "http://localhost").pathname;
  if (req.method === "GET" && path === "/supported") {
    return send(res, 200, facilitator.getSupported());
  }
  if (req.method !== "POST" || (path !== "/verify" && path !== "/settle")) {
    return send(res, 404, { error: "not found" });
  }
  let body;
  try {
    body = await readJSON(req);
  } catch (err) {
    return send(res, 400, { error: `bad body: ${err.message}` });
  }
  const { paymentPayload, paymentRequirements } = body ?? {};
  if (!paymentPayload || !paymentRequirements) {
    return send(res, 400, { error: "paymentPayload and paymentRequirements are required" });
  }
  try {
    const out =
      path === "/verify"
        ? await facilitator.verify(paymentPayload, paymentRequirements)
        : await facilitator.settle(paymentPayload, paymentRequirements);
    return send(res, 200, out);
  } catch (err) {
    console.error(`ts-facilitator ${path}: ${err?.stack ?? err}`);
    return send(res, 500, { error: String(err?.message ?? err) });
  }
}

const server = createServer((req, res) => {
  handle(req, res).catch((err) => {
    console.error(`ts-facilitator: ${err?.stack ?? err}`);
    if (!res.headersSent) send(res, 500, { error: "internal error" });
  });
});
server.keepAliveTimeout = 30_000;
server.listen(Number(env("ts-facilitator", "PORT", "0")), "127.0.0.1", () => {
  console.log(JSON.stringify({ ready: true, port: server.address().port, address }));
});
for (const sig of ["SIGINT", "SIGTERM"]) {
  process.on(sig, () => server.close(() => process.exit(0)));
}
