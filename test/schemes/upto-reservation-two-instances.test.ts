// The payer reservation for x402 upto across two instances on one PostgreSQL database: a payer holding
// 60,000 base units sends two permits of the published client, each for a 50,000 maximum, one to each
// instance, 8, 50 or 200 ms apart, to an endpoint whose upstream answers in 1 s with usage above the ceiling. One is
// served and charged its maximum; the other is refused 402 insufficient_funds before anything is forwarded,
// and the one settlement is mined: no served call is left unpaid.
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { reconcile } from '../../src/control-plane/jobs/reconcile.ts'
import { UPTO_SETTLEMENT_JOB } from '../../src/schemes/upto/settle-after.ts'
import { type Funded, usdcBalance } from '../helpers/accounts.ts'
import { usingServer } from '../helpers/database.ts'
import type { OpenAiUpstream } from '../helpers/openai-upstream.ts'
import type { TestService } from '../helpers/service.ts'
import { startTokenPricedPair, type TokenPricedPair } from '../helpers/two-instances.ts'
import { approvedPayer, publishedUptoHeader } from '../helpers/upto-payer.ts'

// Plain JSON with usage far above the ceiling: the charge is the signed maximum.
const BODY = JSON.stringify({ model: 'huge-usage' })
const MAX = 50_000n

describe.runIf(usingServer)('x402 upto payer reservation over two instances on one database', () => {
  let a: TestService
  let b: TestService
  let upstream: OpenAiUpstream
  let url: (s: TestService) => string

  let pair: TokenPricedPair

  beforeAll(async () => {
    pair = await startTokenPricedPair({ upto: true, upstream: { delayMs: 1_000 } })
    ;({ a, b, upstream, url } = pair)
  })
  afterAll(() => pair?.stop())

  /** One payment header of the published upto client (a fresh Permit2 nonce), for the 402 `s` answers. */
  async function permitHeader(s: TestService, payer: Funded): Promise<Record<string, string>> {
    const { header, required } = await publishedUptoHeader(s, url(s), BODY, payer)
    expect(BigInt(required.accepts.find((x) => x.scheme === 'upto')!.amount)).toBe(MAX)
    return header
  }

  const send = (s: TestService, header: Record<string, string>) =>
    fetch(url(s), {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...header },
      body: BODY,
    }).then(async (r) => ({ status: r.status, body: (await r.json()) as { error?: unknown } }))

  // The gaps the issue saw both served at (8–200 ms): the first is still at the upstream when the second comes.
  it.each([8, 50, 200])(
    'two permits past the balance, %i ms apart: one served, one insufficient_funds, none unpaid',
    async (gapMs) => {
      const payer = await approvedPayer(60_000n)
      const first = await permitHeader(a, payer)
      const second = await permitHeader(b, payer)
      const forwarded = upstream.bodies.length
      const answers = await Promise.all([
        send(a, first),
        new Promise((r) => setTimeout(r, gapMs)).then(() => send(b, second)),
      ])
      expect(answers.map((x) => x.status).sort()).toEqual([200, 402])
      expect(answers.find((x) => x.status === 402)!.body.error).toBe('insufficient_funds')
      expect(upstream.bodies.length - forwarded).toBe(1)

      await a.flushCaptures()
      await b.flushCaptures()
      await Promise.all([a.jobs.runNow(UPTO_SETTLEMENT_JOB), b.jobs.runNow(UPTO_SETTLEMENT_JOB)])
      await a.jobs.runNow(UPTO_SETTLEMENT_JOB)
      const claims = await a.sql<
        { status: string; settled_atomic: bigint | null; settlement_error: string | null }[]
      >`
      SELECT status, settled_atomic, settlement_error FROM claims WHERE kind = 'upto' AND payer = ${payer.address}`
      // The refused permit left no row; the served one settled for its charge, nothing failed.
      expect(claims).toEqual([{ status: 'captured', settled_atomic: MAX, settlement_error: null }])
      expect(await usdcBalance(payer.address)).toBe(60_000n - MAX)
      const report = await reconcile({ sql: a.sql, chain: a.chain, config: a.config })
      expect(report.differences).toEqual([])
    },
  )
})
