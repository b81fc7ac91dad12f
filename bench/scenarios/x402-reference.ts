// x402-reference: the reference middleware paid by the reference's own client flow (@x402/core's
// x402Client with @x402/evm's exact scheme): one fresh EIP-3009 authorization per call, signed before
// the load from the requirements its 402 announces, sent in the header the client names.
import { x402Client, x402HTTPClient } from '@x402/core/client'
import { registerExactEvmScheme } from '@x402/evm/exact/client'
import type { Hex } from 'viem'
import { privateKeyToAccount } from 'viem/accounts'
import type { DevChain } from '../../src/chain/dev-chain.ts'
import { load, type Measured } from '../load.ts'
import { type Context, settings } from './context.ts'

/**
 * The published v2 client (@x402/core with @x402/evm's `exact`), paying as the bench's first payer. The
 * bench's token is no default asset of the client: allowed, capped at the price, as an agent would.
 */
export function publishedExactClient(chain: DevChain): x402HTTPClient {
  return new x402HTTPClient(
    registerExactEvmScheme(new x402Client(), {
      signer: privateKeyToAccount(chain.payers[0]!.privateKey as Hex),
    }).setSpendControls({
      allowedAssets: [
        { network: `eip155:${chain.chainId}`, asset: chain.usdcAddress, maxAmountPerPayment: '1000' },
      ],
    }),
  )
}

export async function runX402Reference(ctx: Context, count: number): Promise<Measured | { skipped: string }> {
  const url = `${ctx.x402Reference!.base}/data`
  const r = await fetch(url)
  if (r.status !== 402) return { skipped: `the reference answered ${r.status} to an unpaid call, not 402` }
  const client = publishedExactClient(ctx.chain)
  const required = client.getPaymentRequiredResponse((name) => r.headers.get(name), await r.json())
  const started = performance.now()
  const encoded: Array<Record<string, string>> = []
  for (let i = 0; i < count; i += 100) {
    const batch = Array.from({ length: Math.min(100, count - i) }, () =>
      client.createPaymentPayload(required),
    )
    for (const payload of await Promise.all(batch)) encoded.push(client.encodePaymentSignatureHeader(payload))
  }
  process.stdout.write(
    `  signed ${count} reference x402 authorizations in ${Math.round(performance.now() - started)} ms\n`,
  )
  const header = Object.keys(encoded[0]!)[0]!
  return load({
    url,
    connections: settings.connections,
    durationS: settings.durationS,
    perRequest: { header, values: encoded.map((h) => h[header]!) },
    expectStatus: 200,
  })
}
