import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { fundedAccount, payUsdc, usdcBalance } from '../helpers/accounts.ts'
import { freePort } from '../helpers/child-service.ts'
import { registerMerchant, startTestService, type TestService } from '../helpers/service.ts'
import { waitFor } from '../helpers/wait-for.ts'

let svc: TestService

beforeAll(async () => {
  svc = await startTestService({
    overrides: {
      chain: { poll_interval_ms: 100 },
      proxy: { retry_window_ms: 1_000, upstream_timeout_ms: 1_000 },
    },
  })
})
afterAll(async () => {
  await svc?.stop()
})

describe('a proof never captured', () => {
  it('is refunded to its payer in the next batch, with call.refunded', async () => {
    const merchant = await registerMerchant(svc)
    // Nothing listens there: the upstream is down for the whole retry window.
    const deadPort = await freePort()
    const ep = await svc.api('/api/v1/endpoints', {
      key: merchant.key,
      body: { upstream_url: `http://127.0.0.1:${deadPort}/api`, price: 0.02 },
    })
    expect(ep.status).toBe(201)
    const payer = await fundedAccount(1_000_000n)
    const hash = await payUsdc(payer, svc.chain.treasury, 20_000n)
    const r = await fetch(ep.body.metered_url, { headers: { 'x-payment': hash } })
    expect(r.status).toBeGreaterThanOrEqual(502)
    await r.arrayBuffer()
    expect(await usdcBalance(payer.address)).toBe(980_000n)

    // The sweep runs until the retry window has run out and it marks the claim.
    await waitFor(
      async () => {
        await svc.jobs.runNow('claim-expiry')
        const [claim] = await svc.sql<{ status: string }[]>`
          SELECT status FROM claims WHERE proof_key = ${`tx:${hash.toLowerCase()}`}`
        return claim!.status === 'refund_due'
      },
      { timeoutMs: 10_000, intervalMs: 100, what: 'the claim marked refund_due' },
    )

    await svc.jobs.runNow('payout-batch')
    expect(await usdcBalance(payer.address)).toBe(1_000_000n)
    const [after] = await svc.sql<{ status: string }[]>`
      SELECT status FROM claims WHERE proof_key = ${`tx:${hash.toLowerCase()}`}`
    expect(after!.status).toBe('refunded')
    const events = await svc.sql<{ account_id: string; data: Record<string, unknown> }[]>`
      SELECT account_id, data FROM events WHERE type = 'call.refunded'`
    expect(events).toHaveLength(1)
    expect(events[0]!.account_id).toBe(merchant.account.id)
    expect(events[0]!.data).toMatchObject({
      proof: hash.toLowerCase(),
      payer: payer.address,
      amount_atomic: '20000',
      endpoint_id: ep.body.id,
      // Which protocol paid: a transaction hash.
      scheme: 'tx-hash',
      protocol: 'tx-hash',
    })
    const [payout] = await svc.sql<
      { kind: string; status: string; wallet: string }[]
    >`SELECT kind, status, wallet FROM payouts`
    expect(payout).toEqual({ kind: 'refund', status: 'confirmed', wallet: payer.address })
    // The merchant sees the refund among its payouts; no payout.sent (nothing was paid to it).
    const list = await svc.api('/api/v1/payouts', { key: merchant.key })
    expect(list.body.data[0]).toMatchObject({ kind: 'refund', amount_atomic: '20000' })
    expect(await svc.sql`SELECT id FROM events WHERE type = 'payout.sent'`).toHaveLength(0)
  })
})
