// Pays and settles one "upto" payment entirely with the official packages, on
// the chain where our Permit2 and X402UptoPermit2Proxy sit at the canonical
// addresses: the @x402/evm upto client (a viem local account) signs, and the
// official upto facilitator (x402Facilitator with @x402/evm/upto/facilitator)
// verifies for the maximum, settles the actual amount through our proxy, and
// then tries the same payment again.
//
// Environment:
//   RPC_URL          JSON-RPC endpoint (required)
//   PAYER_KEY        0x-prefixed private key of the payer (required)
//   FACILITATOR_KEY  0x-prefixed private key of the facilitator, whose address
//                    must be accepts[0].extra.facilitatorAddress (required)
//   SETTLE_AMOUNT    the actual charge in atomic units, at most the maximum (required)
//   NETWORK          CAIP-2 network (default eip155:1337)
//   PAYLOAD          a PaymentPayload JSON to verify and settle instead of one
//                    the official client signs (ours, signed in Go)
//
// stdin: a PaymentRequired JSON object whose accepts[0] is the upto offer.
// stdout: one JSON line: {payload, verify, settle, replay, proxyABI, addresses},
// proxyABI and addresses being what the official package has built in.
import { x402Client } from "@x402/core/client";
import { x402Facilitator } from "@x402/core/facilitator";
import { PERMIT2_ADDRESS, toFacilitatorEvmSigner, x402UptoPermit2ProxyABI, x402UptoPermit2ProxyAddress } from "@x402/evm";
import { UptoEvmScheme as UptoClient } from "@x402/evm/upto/client";
import { UptoEvmScheme as UptoFacilitator } from "@x402/evm/upto/facilitator";
import { createWalletClient, defineChain, http, publicActions } from "viem";
import { privateKeyToAccount } from "viem/accounts";
import { env, readStdin } from "./ts-facilitator-lib.mjs";

const rpcUrl = env("upto-official", "RPC_URL");
const network = env("upto-official", "NETWORK", "eip155:1337");
const settleAmount = env("upto-official", "SETTLE_AMOUNT");
const paymentRequired = JSON.parse(await readStdin());
const requirements = paymentRequired.accepts[0];

const client = new x402Client();
client.register(network, new UptoClient(privateKeyToAccount(env("upto-official", "PAYER_KEY"))));
client.setSpendControls({
  allowedAssets: [{ network, asset: requirements.asset, maxAmountPerPayment: requirements.amount }],
});

const chain = defineChain({
  id: Number(network.split(":")[1]),
  name: network,
  nativeCurrency: { name: "Ether", symbol: "ETH", decimals: 18 },
  rpcUrls: { default: { http: [rpcUrl] } },
});
const account = privateKeyToAccount(env("upto-official", "FACILITATOR_KEY"));
const wallet = createWalletClient({ account, chain, transport: http(rpcUrl), pollingInterval: 50 }).extend(publicActions);
const signer = toFacilitatorEvmSigner({
  address: account.address,
  getCode: (args) => wallet.getCode(args),
  readContract: (args) => wallet.readContract({ ...args, args: args.args ?? [] }),
  verifyTypedData: (args) => wallet.verifyTypedData(args),
  writeContract: (args) => wallet.writeContract({ ...args, args: args.args ?? [] }),
  sendTransaction: (args) => wallet.sendTransaction(args),
  waitForTransactionReceipt: (args) => wallet.waitForTransactionReceipt(args),
});
const facilitator = new x402Facilitator().register(network, new UptoFacilitator(signer));

try {
  const given = process.env.PAYLOAD;
  const payload = given ? JSON.parse(given) : await client.createPaymentPayload(paymentRequired);
  const verify = await facilitator.verify(payload, requirements);
  const charged = { ...requirements, amount: settleAmount };
  const settle = await facilitator.settle(payload, charged);
  const replay = await facilitator.settle(payload, charged);
  console.log(
    JSON.stringify({
      payload,
      verify,
      settle,
      replay,
      proxyABI: x402UptoPermit2ProxyABI,
      addresses: { permit2: PERMIT2_ADDRESS, uptoProxy: x402UptoPermit2ProxyAddress },
    }),
  );
} catch (err) {
  console.error(`upto-official: ${err?.stack ?? err}`);
  process.exit(1);
}
