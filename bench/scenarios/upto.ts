// upto: the OpenAI-style stream sold per token, each call paid by the published x402 upto client
// (x402Client + UptoEvmScheme): one Permit2 permit for the ceiling per call, signed before the load from the
// requirements the 402 announces. Against tollgate (charge measured on the stream, settled after the call
// in batches) and against the x402 reference's upto server (the route reads the whole stream, declares the
// amount, and the in-process facilitator settles it before the answer leaves).
import { x402Client, x402HTTPClient } from '@x402/core/client'
import { createPermit2ApprovalTx, UptoEvmScheme } from '@x402/evm/upto/client'
import { type Chain, createWalletClient, type Hex, http, publicActions } from 'viem'
import { privateKeyToAccount } from 'viem/accounts'
import { baseSepolia } from 'viem/chains'
import { load, type Measured } from '../load.ts'
import { type Context, settings } from './context.ts'
import { inside, readCounters } from './inside.ts'

/** Tokens at $0.1 / $0.05 / $0.4 per million, ceiling $0.001: the usage-sse pricing, paid by upto. */
export const UPTO_PRICING = {
  model: 'usage',
  unit: 'tokens',
  max_price: 0.001,
  input_price_per_million: 0.1,
  cached_input_price_per_million: 0.05,
  output_price_per_million: 0.4,
}

/** The same request to both: it asks for the usage chunk (the reference cannot ask on the client's behalf). */
const REQUEST = {
  method: 'POST',
  headers: { 'content-type': 'application/json' },
  body: JSON.stringify({ model: 'm', stream: true, stream_options: { include_usage: true } }),
}

/** The payer approves Permit2 once (the transaction the published client's createPermit2ApprovalTx builds). */
async function approvePermit2(ctx: Context): Promise<void> {
  const wallet = createWalletClient({
    account: privateKeyToAccount(ctx.chain.payers[0]!.privateKey as Hex),
    chain: { ...baseSepolia, id: ctx.chain.chainId } as Chain,
    transport: http(ctx.chain.rpcUrl),
  }).extend(publicActions)
  const tx = createPermit2ApprovalTx(ctx.chain.usdcAddress)
  const hash = await wallet.sendTransaction({ to: tx.to, data: tx.data })
  await wallet.waitForTransactionReceipt({ hash })
}

/** `count` payment headers from the published upto client for the 402 `url` answers. */
async function signPermits(
  ctx: Context,
  url: string,
  count: number,
): Promise<{ header: string; values: string[] }> {
  const network = `eip155:${ctx.chain.chainId}` as const
  const client = new x402HTTPClient(
    x402Client.fromConfig({
      schemes: [
        { network, client: new UptoEvmScheme(privateKeyToAccount(ctx.chain.payers[0]!.privateKey as Hex)) },
      ],
      // The bench's token is no default asset of the client: allowed, capped at the ceiling, as an agent would.
      spendControls: {
        allowedAssets: [{ network, asset: ctx.chain.usdcAddress, maxAmountPerPayment: '1000' }],
      },
    }),
  )
  const r = await fetch(url, REQUEST)
  if (r.status !== 402) throw new Error(`${url} answered ${r.status} to an unpaid call, not 402`)
  const required = client.getPaymentRequiredResponse((name) => r.headers.get(name), await r.json())
  const started = performance.now()
  const encoded: Array<Record<string, string>> = []
  for (let i = 0; i < count; i += 100) {
    const batch = Array.from({ length: Math.min(100, count - i) }, () =>
      client.createPaymentPayload(required),
    )
    for (const payload of await Promise.all(batch)) encoded.push(client.encodePaymentSignatureHeader(payload))
  }
  process.stdout.write(`  signed ${count} upto permits in ${Math.round(performance.now() - started)} ms\n`)
  const header = Object.keys(encoded[0]!)[0]!
  return { header, values: encoded.map((h) => h[header]!) }
}

let approved = false

export async function runUpto(ctx: Context, count: number): Promise<Measured> {
  if (!approved) await approvePermit2(ctx)
  approved = true
  const t = ctx.tollgates.warm!
  const url = await t.metered('/v1/chat/completions', { pricing: UPTO_PRICING })
  const perRequest = await signPermits(ctx, url, count)
  const before = await readCounters(t.adminPort)
  const m = await load({
    ...REQUEST,
    url,
    connections: settings.connections,
    durationS: settings.durationS,
    perRequest,
    expectStatus: 200,
  })
  return { ...m, inside: inside(before, await readCounters(t.adminPort)) }
}

export async function runUptoReference(ctx: Context, count: number): Promise<Measured> {
  if (!approved) await approvePermit2(ctx)
  approved = true
  const url = `${ctx.x402Reference!.base}/v1/chat/completions`
  const perRequest = await signPermits(ctx, url, count)
  return load({
    ...REQUEST,
    url,
    connections: settings.connections,
    durationS: settings.durationS,
    perRequest,
    expectStatus: 200,
  })
}
