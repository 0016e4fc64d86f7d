// An @x402/express resource server in front of an OpenAI-compatible upstream:
// POST /v1/chat/completions, paid with the exact scheme (or upto, SCHEME=upto),
// proxied to UPSTREAM_URL.
// It is the official stack the gateway benchmarks (gateway_bench_test.go) compare
// our gateway with; its facilitator is reached over HTTP (HTTPFacilitatorClient),
// the official TypeScript one (ts-facilitator.mjs) or ours.
//
// The price is computed per request like our gateway's quote: prompt tokens x
// INPUT_PRICE + max_tokens (or MAX_OUTPUT_TOKENS when absent) x OUTPUT_PRICE, per
// million tokens, rounded up to the cent and never below one cent. Prompt tokens
// are estimated as ceil(characters / 4) + 4 per message, not counted with a
// tokenizer, which makes this server's quote cheaper to compute than ours.
//
// With SCHEME=upto the route offers upto alone (the official UptoEvmScheme
// server), the quote as its maximum, and charges each answer as our gateway
// does (pricing.Charge): the upstream's reported usage at the same prices,
// rounded up to the atomic unit, raised to MIN_CHARGE, capped at the quote,
// named with setSettlementOverrides; an answer without usage is charged the
// quote.
//
// Environment:
//   PORT                 port on 127.0.0.1 (default 0: any free port)
//   FACILITATOR_URL      base URL of the facilitator (required)
//   UPSTREAM_URL         OpenAI-compatible API root, such as http://127.0.0.1:N/v1 (required)
//   UPSTREAM_API_KEY     bearer sent upstream (default none)
//   TOKEN                EIP-3009 token address (required)
//   PAY_TO               recipient address (required)
//   NETWORK              CAIP-2 network (default eip155:1337)
//   TOKEN_NAME           EIP-712 domain name (default "USD Coin")
//   TOKEN_VERSION        EIP-712 domain version (default "2")
//   DECIMALS             token decimals (default 6)
//   INPUT_PRICE          atomic units per million prompt tokens (default 1000000)
//   OUTPUT_PRICE         atomic units per million output tokens (default 2000000)
//   MAX_OUTPUT_TOKENS    cap charged when max_tokens is absent (default 256)
//   MAX_TIMEOUT_SECONDS  (default 300, as our gateway offers)
//   SCHEME               exact (default) or upto
//   MIN_CHARGE           upto's minimum charge in atomic units (default one
//                        cent, as network.upto.min_charge; 0 turns it off)
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
    console.error(`express-llm: ${name} is required`);
    process.exit(2);
  }
  return v;
}

const port = Number(env("PORT", "0"));
const network = env("NETWORK", "eip155:1337");
const upstream = env("UPSTREAM_URL").replace(/\/+$/, "") + "/chat/completions";
const upstreamKey = process.env.UPSTREAM_API_KEY ?? "";
const token = env("TOKEN");
const extra = { name: env("TOKEN_NAME", "USD Coin"), version: env("TOKEN_VERSION", "2") };
const inputPrice = BigInt(env("INPUT_PRICE", "1000000"));
const outputPrice = BigInt(env("OUTPUT_PRICE", "2000000"));
const maxOutput = BigInt(env("MAX_OUTPUT_TOKENS", "256"));
const cent = 10n ** BigInt(Number(env("DECIMALS", "6")) - 2);
const scheme = env("SCHEME", "exact");
if (scheme !== "exact" && scheme !== "upto") {
  console.error(`express-llm: SCHEME ${scheme}: want exact or upto`);
  process.exit(2);
}
const minCharge = BigInt(env("MIN_CHARGE", cent.toString()));

// quote prices a chat request like our gateway: rounded up to the cent, at least
// one cent. A body it cannot read costs the minimum; the upstream judges it.
function quote(body) {
  let chars = 0;
  let messages = 0;
  for (const m of Array.isArray(body?.messages) ? body.messages : []) {
    messages++;
    chars += typeof m?.content === "string" ? m.content.length : JSON.stringify(m?.content ?? "").length;
  }
  const prompt = BigInt(Math.ceil(chars / 4) + 4 * messages);
  const output = Number.isInteger(body?.max_tokens) && body.max_tokens > 0 ? BigInt(body.max_tokens) : maxOutput;
  const micro = prompt * inputPrice + output * outputPrice; // atomic units x 1e6
  let amount = (micro + 999_999n) / 1_000_000n;
  amount = ((amount + cent - 1n) / cent) * cent;
  return amount < cent ? cent : amount;
}

// charge is what an upto payment settles for an answer: its reported usage at
// list price, rounded up to the atomic unit, raised to the minimum charge and
// capped at the quote, as pricing.Charge; without usage, the quote.
function charge(answer, max) {
  const u = answer?.usage;
  if (!Number.isInteger(u?.prompt_tokens) || !Number.isInteger(u?.completion_tokens)) return max;
  const micro = BigInt(Math.max(u.prompt_tokens, 0)) * inputPrice + BigInt(Math.max(u.completion_tokens, 0)) * outputPrice;
  let amount = (micro + 999_999n) / 1_000_000n;
  if (amount < minCharge) amount = minCharge;
  return amount > max ? max : amount;
}

const facilitator = new HTTPFacilitatorClient({ url: env("FACILITATOR_URL") });
const server = new x402ResourceServer(facilitator).register(
  network,
  scheme === "upto" ? new UptoEvmScheme() : new ExactEvmScheme(),
);

const app = express();
app.use(express.json({ limit: "1mb" }));
app.use(
  paymentMiddleware(
    {
      "POST /v1/chat/completions": {
        accepts: {
          scheme,
          network,
          payTo: env("PAY_TO"),
          maxTimeoutSeconds: Number(env("MAX_TIMEOUT_SECONDS", "300")),
          price: (ctx) => ({ amount: quote(ctx.adapter.getBody?.()).toString(), asset: token, extra }),
        },
        description: "chat completion",
        mimeType: "application/json",
      },
    },
    server,
  ),
);
app.post("/v1/chat/completions", async (req, res) => {
  const headers = { "content-type": "application/json", accept: "application/json" };
  if (upstreamKey) headers.authorization = `Bearer ${upstreamKey}`;
  try {
    const r = await fetch(upstream, { method: "POST", headers, body: JSON.stringify(req.body) });
    const text = await r.text();
    if (scheme === "upto" && r.ok) {
      let answer;
      try {
        answer = JSON.parse(text);
      } catch {
        answer = undefined;
      }
      setSettlementOverrides(res, { amount: charge(answer, quote(req.body)).toString() });
    }
    res.status(r.status).type("application/json").send(text);
  } catch (err) {
    res.status(502).json({ error: { message: `upstream: ${err?.message ?? err}`, type: "upstream_error", code: "upstream_error" } });
  }
});

const listener = app.listen(port, "127.0.0.1", () => {
  console.log(JSON.stringify({ ready: true, port: listener.address().port }));
});
listener.keepAliveTimeout = 30_000;
for (const sig of ["SIGINT", "SIGTERM"]) {
  process.on(sig, () => listener.close(() => process.exit(0)));
}
