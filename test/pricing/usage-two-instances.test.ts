// Two tollgate instances on one PostgreSQL database, one usage-priced endpoint: a payment is metered and
// charged once whichever instance serves it, a replay on the other is refused, and of many concurrent
// requests carrying one hash over both, exactly one streams and is charged.
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { type Funded, fundedAccount, payUsdc } from '../helpers/accounts.ts'
import { freshDatabaseUrl, usingServer } from '../helpers/database.ts'
import { type OpenAiUpstream, startOpenAiUpstream } from '../helpers/openai-upstream.ts'
import { registerMerchant, startTestService, type TestService } from '../helpers/service.ts'

describe.runIf(usingServer)('usage pricing over two instances on one database', () => {
  let a: TestService
  let b: TestService
  let upstream: OpenAiUpstream
  let payer: Funded
  let url: (s: TestService) => string

  beforeAll(async () => {
    const databaseUrl = await freshDatabaseUrl()
    a = await startTestService({ databaseUrl })
    b = await startTestService({ databaseUrl, treasury: a.treasury })
    upstream = await startOpenAiUpstream({ events: 50 })
    payer = await fundedAccount(100_000_000n)
    const merchant = await registerMerchant(a)
    const ep = await a.api('/api/v1/endpoints', {
      key: merchant.key,
      body: {
        upstream_url: `${upstream.url}/v1/chat/completions`,
        pricing: {
          model: 'usage',
          unit: 'tokens',
          max_price: 0.05,
          input_price_per_million: 2,
          cached_input_price_per_million: 1,
          output_price_per_million: 10,
        },
      },
    })
    url = (s) => `${s.url}/m/${ep.body.id}`
  })
  afterAll(async () => {
    await a?.stop()
    await b?.stop()
    await upstream?.close()
  })

  const post = (target: string, hash: string) =>
    fetch(target, {
      method: 'POST',
      headers: { 'x-payment': hash, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'gpt', stream: true }),
    })

  it('charges a payment once, measured by the instance that served it; the other refuses a replay', async () => {
    const hash = await payUsdc(payer, a.chain.treasury, 50_000n)
    const served = await post(url(b), hash)
    expect(served.status).toBe(200)
    await served.text()
    await b.flushCaptures()
    const replay = await post(url(a), hash)
    expect([replay.status, (await replay.json()).error]).toEqual([402, 'proof_already_used'])
    const rows = await a.sql<{ amount_atomic: bigint; refund_atomic: bigint; receipt_id: string }[]>`
      SELECT amount_atomic, refund_atomic, call_receipt_id(id, receipt_id) AS receipt_id FROM calls WHERE call_proof_key(proof_key, proof) = ${`tx:${hash.toLowerCase()}`}`
    expect(rows).toHaveLength(1)
    expect(rows[0]).toMatchObject({ amount_atomic: 2_700n, refund_atomic: 47_300n })
    // The receipt is readable on either instance.
    const receipt = await fetch(`${a.url}/receipts/${served.headers.get('x-receipt-id')}`)
    expect((await receipt.json()).usage.charge_atomic).toBe('2700')
  })

  it('streams and charges exactly one of 20 concurrent requests carrying one hash over both', async () => {
    const hash = await payUsdc(payer, a.chain.treasury, 50_000n)
    const before = upstream.bodies.length
    const answers = await Promise.all(
      Array.from({ length: 20 }, (_, i) =>
        post(url(i % 2 === 0 ? a : b), hash).then(async (r) => ({ status: r.status, text: await r.text() })),
      ),
    )
    expect(answers.filter((x) => x.status === 200)).toHaveLength(1)
    expect(upstream.bodies.length - before).toBe(1)
    await a.flushCaptures()
    await b.flushCaptures()
    const [row] = await a.sql<{ n: number; sum: bigint }[]>`
      SELECT count(*)::int AS n, sum(amount_atomic + refund_atomic)::bigint AS sum FROM calls
      WHERE call_proof_key(proof_key, proof) = ${`tx:${hash.toLowerCase()}`}`
    expect(row).toMatchObject({ n: 1, sum: 50_000n })
  })
})
