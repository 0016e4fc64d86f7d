// Builds the official TypeScript facilitator (x402Facilitator with the
// @x402/evm exact scheme, and optionally its upto scheme) on a viem
// wallet+public client, for verify.mjs and ts-facilitator.mjs.
import { x402Facilitator } from "@x402/core/facilitator";
import { toFacilitatorEvmSigner } from "@x402/evm";
import { ExactEvmScheme } from "@x402/evm/exact/facilitator";
import { UptoEvmScheme } from "@x402/evm/upto/facilitator";
import { createWalletClient, defineChain, http, publicActions } from "viem";
import { privateKeyToAccount } from "viem/accounts";
import { nonceManager } from "viem/nonce";

/**
 * Returns { facilitator, scheme, address } for one eip155 network.
 *
 * @param {object} opts
 * @param {string} opts.rpcUrl JSON-RPC endpoint of the chain
 * @param {string} opts.key 0x-prefixed private key of the facilitator account
 * @param {string} [opts.network] CAIP-2 network, default eip155:1337
 * @param {number} [opts.pollingIntervalMs] receipt polling interval, default 100
 * @param {boolean} [opts.upto] also serve the upto scheme (Permit2), default false
 */
export function newTsFacilitator({ rpcUrl, key, network = "eip155:1337", pollingIntervalMs = 100, upto = false }) {
  const chainId = Number(network.split(":")[1]);
  const chain = defineChain({
    id: chainId,
    name: network,
    nativeCurrency: { name: "Ether", symbol: "ETH", decimals: 18 },
    rpcUrls: { default: { http: [rpcUrl] } },
  });
  // The nonce manager lets concurrent settles from one account take distinct
  // nonces instead of all reading the same pending count.
  const account = privateKeyToAccount(key, { nonceManager });
  const client = createWalletClient({ account, chain, transport: http(rpcUrl), pollingInterval: pollingIntervalMs }).extend(
    publicActions,
  );
  const signer = toFacilitatorEvmSigner({
    address: account.address,
    getCode: (args) => client.getCode(args),
    readContract: (args) => client.readContract({ ...args, args: args.args ?? [] }),
    verifyTypedData: (args) => client.verifyTypedData(args),
    writeContract: (args) => client.writeContract({ ...args, args: args.args ?? [] }),
    sendTransaction: (args) => client.sendTransaction(args),
    waitForTransactionReceipt: (args) => client.waitForTransactionReceipt(args),
  });
  const scheme = new ExactEvmScheme(signer);
  const facilitator = new x402Facilitator().register(network, scheme);
  if (upto) {
    facilitator.register(network, new UptoEvmScheme(signer));
  }
  return { facilitator, scheme, address: account.address };
}

/** Reads all of stdin as a string. */
export async function readStdin() {
  const chunks = [];
  for await (const c of process.stdin) chunks.push(c);
  return Buffer.concat(chunks).toString("utf8");
}

/** Returns the environment variable name, or fallback, or exits if neither. */
export function env(script, name, fallback) {
  const v = process.env[name] ?? fallback;
  if (v === undefined || v === "") {
    console.error(`${script}: ${name} is required`);
    process.exit(2);
  }
  return v;
}
