// Verifies payments with the official TypeScript facilitator (x402Facilitator
// and the @x402/evm exact scheme) against a real node.
//
// Environment:
//   RPC_URL          JSON-RPC endpoint (required)
//   FACILITATOR_KEY  0x-prefixed key of the facilitator account, the from of
//                    simulations (required)
//   NETWORK          CAIP-2 network (default eip155:1337)
//
// stdin: a JSON array of {"paymentPayload":..., "paymentRequirements":...}.
// stdout: one JSON line, the array of VerifyResponse in the same order; a
// verification that throws gives {"isValid":false,"thrown":"<message>"}.
import { env, newTsFacilitator, readStdin } from "./ts-facilitator-lib.mjs";

const { facilitator } = newTsFacilitator({
  rpcUrl: env("verify", "RPC_URL"),
  key: env("verify", "FACILITATOR_KEY"),
  network: env("verify", "NETWORK", "eip155:1337"),
});

const cases = JSON.parse(await readStdin());
const out = [];
for (const c of cases) {
  try {
    out.push(await facilitator.verify(c.paymentPayload, c.paymentRequirements));
  } catch (err) {
    out.push({ isValid: false, thrown: String(err?.message ?? err) });
  }
}
console.log(JSON.stringify(out));
