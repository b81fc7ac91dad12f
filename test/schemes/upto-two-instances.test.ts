// Two tollgate instances on one PostgreSQL database, one token-priced endpoint paid by x402 upto: of 20
// concurrent requests carrying one permit (the published client's) over both instances, exactly one streams
// and is charged; the permit is settled once, for that charge, whichever instance's job runs.
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { reconcile } from '../../src/control-plane/jobs/reconcile.ts'
import { UPTO_SETTLEMENT_JOB } from '../../src/schemes/upto/settle-after.ts'
import { type Funded, usdcBalance } from '../helpers/accounts.ts'
import { usingServer } from '../helpers/database.ts'
import type { OpenAiUpstream } from '../helpers/openai-upstream.ts'
import type { TestService } from '../helpers/service.ts'
import { startTokenPricedPair, type TokenPricedPair } from '../helpers/two-instances.ts'
import { approvedPayer, publishedUptoHeader } from '../helpers/upto-payer.ts'

const BODY = JSON.stringify({ model: 'gpt', stream: true })

describe.runIf(usingServer)('x402 upto over two instances on one database', () => {
  let a: TestService
  let b: TestService
  let upstream: OpenAiUpstream
  let payer: Funded
  let url: (s: TestService) => string

  let pair: TokenPricedPair

  beforeAll(async () => {
    pair = await startTokenPricedPair({ upto: true, upstream: { events: 50 } })
    ;({ a, b, upstream, url } = pair)
    payer = await approvedPayer()
  })
  afterAll(() => pair?.stop())

  /** One payment header of the published upto client, for the 402 instance `s` answers. */
  async function permitHeader(s: TestService): Promise<Record<string, string>> {
    return (await publishedUptoHeader(s, url(s), BODY, payer)).header
  }

  it('streams and charges exactly one of 20 concurrent requests carrying one permit, settled once', async () => {
    const header = await permitHeader(a)
    const before = upstream.bodies.length
    const balanceBefore = await usdcBalance(payer.address)
    const answers = await Promise.all(
      Array.from({ length: 20 }, (_, i) =>
        fetch(url(i % 2 === 0 ? a : b), {
          method: 'POST',
          headers: { 'content-type': 'application/json', ...header },
          body: BODY,
        }).then(async (r) => ({ status: r.status, text: await r.text() })),
      ),
    )
    expect(answers.filter((x) => x.status === 200)).toHaveLength(1)
    expect(upstream.bodies.length - before).toBe(1)
    await a.flushCaptures()
    await b.flushCaptures()
    const calls = await a.sql<{ amount_atomic: bigint }[]>`
      SELECT c.amount_atomic FROM calls c JOIN claims k ON k.proof_key = call_proof_key(c.proof_key, c.proof)
      WHERE k.kind = 'upto' AND k.payer = ${payer.address}`
    expect(calls).toHaveLength(1)
    const charge = calls[0]!.amount_atomic
    expect(charge).toBeGreaterThan(0n)
    // Both instances run the job: the claim's precondition lets the permit be sent and booked once.
    await Promise.all([a.jobs.runNow(UPTO_SETTLEMENT_JOB), b.jobs.runNow(UPTO_SETTLEMENT_JOB)])
    await a.jobs.runNow(UPTO_SETTLEMENT_JOB)
    expect(balanceBefore - (await usdcBalance(payer.address))).toBe(charge)
    const report = await reconcile({ sql: a.sql, chain: a.chain, config: a.config })
    expect(report.differences).toEqual([])
  })
})
