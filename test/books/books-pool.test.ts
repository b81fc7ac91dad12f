// The books writer has connections of its own: a paid call's claim is never queued behind another
// subsystem's query. The driver pipelines a query on a busy connection once none of its pool is free, so
// on one shared pool a slow read (a job's first run on a cold cache after a restart) held every paid call
// of the process behind it until the claim deadline (claims.timeout_ms) answered 503. Here every main-pool
// connection is held by a slow statement while paid calls are made: they must be served at once.
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { fundedAccount, payUsdc } from '../helpers/accounts.ts'
import { usingServer } from '../helpers/database.ts'
import { registerMerchant, startTestService, type TestService } from '../helpers/service.ts'
import { startUpstream } from '../helpers/upstream.ts'

/** How long each slow statement holds its connection: past the claim deadline below. */
const HOLD_S = 4
const CLAIM_TIMEOUT_MS = 2_000

let svc: TestService
let upstream: Awaited<ReturnType<typeof startUpstream>>

describe.runIf(usingServer)('the books writer beside a busy main pool', () => {
  beforeAll(async () => {
    svc = await startTestService({
      overrides: { jobs: { enabled: false }, claims: { timeout_ms: CLAIM_TIMEOUT_MS } },
    })
    upstream = await startUpstream()
  })
  afterAll(async () => {
    await svc?.stop()
    await upstream?.close()
  })

  it('serves paid calls while every main-pool connection runs a slow statement', async () => {
    const { key } = await registerMerchant(svc)
    const ep = (
      await svc.api('/api/v1/endpoints', { key, body: { upstream_url: `${upstream.url}/echo`, price: 0.01 } })
    ).body
    const payer = await fundedAccount(1_000_000n)
    // One call first: the endpoint is then in the cache and the claim is the call's only database write.
    const warm = await fetch(ep.metered_url, {
      headers: { 'x-payment': await payUsdc(payer, svc.chain.treasury, 10_000n) },
    })
    expect(warm.status, await warm.text()).toBe(200)
    const hashes = [
      await payUsdc(payer, svc.chain.treasury, 10_000n),
      await payUsdc(payer, svc.chain.treasury, 10_000n),
    ]

    // Every connection of the main pool busy, and more queued behind them (a query of the driver runs
    // once it is awaited or executed).
    const held = Array.from({ length: svc.config.database.pool_max + 2 }, () =>
      svc.sql`SELECT pg_sleep(${HOLD_S})`.execute(),
    )
    const heldUntil = Date.now() + HOLD_S * 1000
    await new Promise((r) => setTimeout(r, 200))

    for (const hash of hashes) {
      const res = await fetch(ep.metered_url, { headers: { 'x-payment': hash } })
      // Answered before the slow statements end: the claim did not wait for a main-pool connection.
      expect(Date.now()).toBeLessThan(heldUntil)
      expect(res.status, await res.text()).toBe(200)
    }
    await Promise.all(held)
  })
})
