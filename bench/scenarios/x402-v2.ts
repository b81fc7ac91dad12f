// x402 v2 (PAYMENT-SIGNATURE), each request a fresh `exact` authorization made before the load by the
// published @x402/core client, on an endpoint that settles after the answer (so the run measures the server,
// not the block time). With `identified`, each payment carries its own `payment-identifier` (appended by
// the published @x402/extensions code): the extension's cost against the same calls without it.
import { appendPaymentIdentifierToExtensions, generatePaymentId } from '@x402/extensions/payment-identifier'
import { load, type Measured } from '../load.ts'
import { type Context, settings } from './context.ts'
import { inside, readCounters, settlementOutcome } from './inside.ts'
import { publishedExactClient } from './x402-reference.ts'

export async function runX402V2(ctx: Context, count: number, identified: boolean): Promise<Measured> {
  const t = ctx.tollgates.warm!
  const url = await t.metered('/data', { settleAfter: true })
  const r = await fetch(url)
  const client = publishedExactClient(ctx.chain)
  const required = client.getPaymentRequiredResponse((name) => r.headers.get(name), await r.json())
  const sign = async () => {
    // Each payment its own id: the extension's object is filled in place, so each gets its own copy.
    const terms = identified ? structuredClone(required) : required
    if (identified) appendPaymentIdentifierToExtensions(terms.extensions!, generatePaymentId())
    return client.encodePaymentSignatureHeader(await client.createPaymentPayload(terms))
  }
  const first = await sign()
  const header = Object.keys(first)[0]!
  const values: string[] = []
  for (let i = 0; i < count; i += 100) {
    const n = Math.min(100, count - i)
    values.push(...(await Promise.all(Array.from({ length: n }, async () => (await sign())[header]!))))
  }
  const before = await readCounters(t.adminPort)
  const m = await load({
    url,
    connections: settings.connections,
    durationS: settings.durationS,
    perRequest: { header, values },
    expectStatus: 200,
  })
  return {
    ...m,
    inside: inside(before, await readCounters(t.adminPort)),
    afterLoad: async () => ({ settlement: await settlementOutcome(t.adminPort, before) }),
  }
}
