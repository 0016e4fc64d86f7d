// Drives the gateway with the official `openai` npm client, paying with
// @x402/fetch: `new OpenAI({ fetch: wrapFetchWithPayment(fetch, x402Client) })`.
//
// Environment:
//   BASE_URL   the gateway's OpenAI base URL, http://127.0.0.1:<port>/v1 (required)
//   PAYER_KEY  0x-prefixed private key of the payer (required)
//   TOKEN      token address the client may pay in (required; spend controls)
//   NETWORK    CAIP-2 network (default eip155:1337)
//   MAX_AMOUNT largest payment allowed, atomic units (default 1000000)
//   MODEL      the paid model (default demo)
//   SCHEME     exact (default) or upto: the one scheme the client registers
//   RESPONSES_PASSTHROUGH  "1": the Responses API calls also send
//              truncation "auto", which the gateway passes through to an
//              upstream that speaks the API and refuses to translate to chat
//   EMBED_MODEL  an embeddings model (kind: embeddings); when set, two more
//              calls: embeddings.create with it, and with MODEL (refused)
//
// It makes seven calls, one after the other, and prints one JSON line on stdout:
//   {"nonStreaming": call, "streaming": call, "unknownModel": call, "maxTokensAboveCap": call,
//    "responses": call, "responsesStreaming": call, "responsesBuiltinTool": call}
// (the Responses API calls report their usage as chat usage)
// (with EMBED_MODEL also "embeddings": call and "embeddingsChatModel": call,
// where an embeddings call has "vectors" and "dimensions" instead of content)
// where a call is
//   {"wire": [exchange...], "status": 200, "content": "...", "chunks": n, "usageChunks": n, "usage": {...},
//    "cost": {...x_llm4agents...}, "paymentResponse": {...}, "code": "...", "type": "..."}
// and an exchange is one request the payment wrapper sent through fetch:
//   {"path","paid","bearer","retryCount","bodyKeys","status","quote","charged"}
// (paid: it carried PAYMENT-SIGNATURE; quote: a 402's PAYMENT-REQUIRED
// accepts[0].amount). A refused call has status, code and type from the
// client's APIError. Anything unexpected goes to stderr with exit code 1.
import OpenAI from "openai";
import { x402Client, wrapFetchWithPayment, decodePaymentResponseHeader } from "@x402/fetch";
import { ExactEvmScheme } from "@x402/evm/exact/client";
import { UptoEvmScheme } from "@x402/evm/upto/client";
import { privateKeyToAccount } from "viem/accounts";

function env(name, fallback) {
  const v = process.env[name] ?? fallback;
  if (v === undefined || v === "") {
    console.error(`openai-client: ${name} is required`);
    process.exit(2);
  }
  return v;
}

const network = env("NETWORK", "eip155:1337");
const model = env("MODEL", "demo");
const signer = privateKeyToAccount(env("PAYER_KEY"));
const embedModel = process.env.EMBED_MODEL ?? "";
const responsesExtra = process.env.RESPONSES_PASSTHROUGH === "1" ? { truncation: "auto" } : {};
const scheme = env("SCHEME", "exact") === "upto" ? new UptoEvmScheme(signer) : new ExactEvmScheme(signer);
const payer = new x402Client().register(network, scheme).setSpendControls({
  allowedAssets: [{ network, asset: env("TOKEN"), maxAmountPerPayment: env("MAX_AMOUNT", "1000000") }],
});

// Every request the payment wrapper sends, with what answered it.
let wire = [];
async function recordingFetch(input, init) {
  const req = new Request(input, init);
  let bodyKeys = [];
  if (req.body) {
    try {
      bodyKeys = Object.keys(JSON.parse(await req.clone().text())).sort();
    } catch {}
  }
  const res = await fetch(req);
  let quote = "";
  const pr = res.headers.get("payment-required");
  if (pr) {
    quote = JSON.parse(Buffer.from(pr, "base64").toString("utf8")).accepts?.[0]?.amount ?? "";
  }
  wire.push({
    path: new URL(req.url).pathname,
    paid: req.headers.has("payment-signature"),
    bearer: req.headers.get("authorization") ?? "",
    retryCount: req.headers.get("x-stainless-retry-count") ?? "",
    bodyKeys,
    status: res.status,
    quote,
    charged: res.headers.get("x-llm4agents-charged") ?? "",
  });
  return res;
}

const openai = new OpenAI({
  apiKey: "unused", // D12: a bearer without the sk-l4a- prefix is ignored
  baseURL: env("BASE_URL"),
  fetch: wrapFetchWithPayment(recordingFetch, payer),
});

const messages = [{ role: "user", content: "Say hello to the official OpenAI client" }];

function paymentResponse(response) {
  const h = response.headers.get("payment-response");
  return h ? decodePaymentResponseHeader(h) : null;
}

// takeWire returns the exchanges of the call that just ended.
function takeWire() {
  const w = wire;
  wire = [];
  return w;
}

async function nonStreaming() {
  // No max_tokens: the gateway quotes and injects the model's cap (D13).
  const { data, response } = await openai.chat.completions.create({ model, messages }).withResponse();
  return {
    wire: takeWire(),
    status: response.status,
    content: data.choices[0]?.message?.content ?? "",
    usage: data.usage ?? null,
    cost: data.x_llm4agents ?? null,
    paymentResponse: paymentResponse(response),
  };
}

async function streaming() {
  // No stream_options: the gateway asks the upstream for usage itself.
  const { data: stream, response } = await openai.chat.completions
    .create({ model, messages, max_tokens: 64, stream: true })
    .withResponse();
  let content = "";
  let chunks = 0;
  let usageChunks = 0;
  let usage = null;
  let cost = null;
  for await (const chunk of stream) {
    chunks++;
    for (const choice of chunk.choices ?? []) {
      content += choice.delta?.content ?? "";
    }
    if (chunk.usage) {
      usageChunks++;
      usage = chunk.usage;
    }
    if (chunk.x_llm4agents) cost = chunk.x_llm4agents;
  }
  return {
    wire: takeWire(),
    status: response.status,
    content,
    chunks,
    usageChunks,
    usage,
    cost,
    paymentResponse: paymentResponse(response),
  };
}

// responses pays for a Responses API call (responses.create), its usage
// read as chat usage so the Go side checks it as a chat call's.
async function responses() {
  const { data, response } = await openai.responses
    .create({ model, input: messages[0].content, max_output_tokens: 64, ...responsesExtra })
    .withResponse();
  return {
    wire: takeWire(),
    status: response.status,
    content: data.output_text ?? "",
    usage: chatUsage(data.usage),
    cost: data.x_llm4agents ?? null,
    paymentResponse: paymentResponse(response),
  };
}

// responsesStreaming pays for a streamed Responses API call and reads its
// events as the SDK yields them: text deltas, and the final response.
async function responsesStreaming() {
  const { data: stream, response } = await openai.responses
    .create({ model, input: messages[0].content, max_output_tokens: 64, stream: true, ...responsesExtra })
    .withResponse();
  let content = "";
  let chunks = 0;
  let usageChunks = 0;
  let usage = null;
  let cost = null;
  for await (const event of stream) {
    chunks++;
    if (event.type === "response.output_text.delta") content += event.delta;
    if (event.type === "response.completed" || event.type === "response.incomplete") {
      if (event.response.usage) {
        usageChunks++;
        usage = chatUsage(event.response.usage);
      }
      cost = event.response.x_llm4agents ?? null;
    }
  }
  return { wire: takeWire(), status: response.status, content, chunks, usageChunks, usage, cost, paymentResponse: paymentResponse(response) };
}

function chatUsage(u) {
  return u ? { prompt_tokens: u.input_tokens, completion_tokens: u.output_tokens, total_tokens: u.total_tokens } : null;
}

// embeddings pays for two vectors. The client asks for base64 and decodes
// it itself unless encoding_format is given: the vectors it returns are
// what the gateway relayed, decoded.
async function embeddings() {
  const input = ["Embed me with the official OpenAI client", "and me too"];
  const { data, response } = await openai.embeddings.create({ model: embedModel, input }).withResponse();
  return {
    wire: takeWire(),
    status: response.status,
    vectors: data.data.length,
    dimensions: data.data[0]?.embedding?.length ?? 0,
    usage: data.usage ?? null,
    cost: data.x_llm4agents ?? null,
    paymentResponse: paymentResponse(response),
  };
}

// refused makes a call the gateway must refuse before any payment.
async function refused(params, create = (p) => openai.chat.completions.create(p)) {
  try {
    await create(params);
  } catch (err) {
    if (!(err instanceof OpenAI.APIError) || err.status === undefined) throw err;
    return { wire: takeWire(), status: err.status, code: err.code ?? "", type: err.type ?? "" };
  }
  throw new Error(`${JSON.stringify(params)} succeeded; want an APIError`);
}

try {
  const out = {
    nonStreaming: await nonStreaming(),
    streaming: await streaming(),
    unknownModel: await refused({ model: "no-such-model", messages }),
    maxTokensAboveCap: await refused({ model, messages, max_tokens: 100000 }),
    responses: await responses(),
    responsesStreaming: await responsesStreaming(),
    responsesBuiltinTool: await refused({ model, input: "search", tools: [{ type: "web_search_preview" }] }, (p) => openai.responses.create(p)),
  };
  if (embedModel !== "") {
    out.embeddings = await embeddings();
    out.embeddingsChatModel = await refused({ model, input: "a chat model" }, (p) => openai.embeddings.create(p));
  }
  console.log(JSON.stringify(out));
} catch (err) {
  console.error(`openai-client: ${err?.stack ?? err}`);
  console.error(`openai-client: exchanges so far: ${JSON.stringify(wire)}`);
  process.exit(1);
}
