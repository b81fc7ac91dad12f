// Two tollgate instances on one PostgreSQL database, one usage-priced endpoint: a payment is metered and
// charged once whichever instance serves it, a replay on the other is refused, and of many concurrent
// requests carrying one hash over both, exactly one streams and is charged.
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { type Funded, fundedAccount, payUsdc } from '../helpers/accounts.ts'
import { usingServer } from '../helpers/database.ts'
import type { OpenAiUpstream } from '../helpers/openai-upstream.ts'
import type { TestService } from '../helpers/service.ts'
import { startTokenPricedPair, type TokenPricedPair } from '../helpers/two-instances.ts'

describe.runIf(usingServer)('usage pricing over two instances on one database', () => {
  let a: TestService
  let b: TestService
  let upstream: OpenAiUpstream
  let payer: Funded
  let url: (s: TestService) => string

  let pair: TokenPricedPair

  beforeAll(async () => {
    pair = await startTokenPricedPair({ upstream: { events: 50 } })
    ;({ a, b, upstream, url } = pair)
    payer = await fundedAccount(100_000_000n)
  })
  afterAll(() => pair?.stop())

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
