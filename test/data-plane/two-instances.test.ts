// Guarantees that must hold with several instances on one database (needs a PostgreSQL server:
// embedded PGlite is a single session; CI runs this suite against a server).
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { type Funded, fundedAccount, payUsdc } from '../helpers/accounts.ts'
import { freshDatabaseUrl, usingServer } from '../helpers/database.ts'
import { registerMerchant, startTestService, type TestService } from '../helpers/service.ts'
import { startUpstream } from '../helpers/upstream.ts'
import { waitFor } from '../helpers/wait-for.ts'

describe.runIf(usingServer)('two instances on one database', () => {
  let a: TestService
  let b: TestService
  let upstream: Awaited<ReturnType<typeof startUpstream>>
  let payer: Funded
  let key: string

  beforeAll(async () => {
    const databaseUrl = await freshDatabaseUrl()
    a = await startTestService({ databaseUrl })
    b = await startTestService({ databaseUrl, treasury: a.treasury })
    upstream = await startUpstream()
    payer = await fundedAccount(100_000_000n)
    ;({ key } = await registerMerchant(a))
  })
  afterAll(async () => {
    await a?.stop()
    await b?.stop()
    await upstream?.close()
  })

  it('forwards exactly one of 50 concurrent requests with one hash spread over both', async () => {
    const ep = (
      await a.api('/api/v1/endpoints', { key, body: { upstream_url: `${upstream.url}/echo`, price: 0.01 } })
    ).body
    const hash = await payUsdc(payer, a.chain.treasury, 10_000n)
    const before = upstream.count()
    const results = await Promise.all(
      Array.from({ length: 50 }, (_, i) =>
        fetch(`${(i % 2 ? a : b).url}/m/${ep.id}`, { headers: { 'x-payment': hash } }).then((r) => r.status),
      ),
    )
    expect(results.filter((s) => s === 200)).toHaveLength(1)
    expect(results.filter((s) => s === 402 || s === 409)).toHaveLength(49)
    expect(upstream.count() - before).toBe(1)
  })

  it('payments of one price created on both instances at once each get their own figure', async () => {
    // 120 at once, half on each instance: more than the lowest window holds, so later creations look at
    // random windows too, and both instances reserve from the same figures.
    const created = await Promise.all(
      Array.from({ length: 120 }, (_, i) =>
        (i % 2 ? a : b).api('/api/v1/payments', { key, body: { amount: 7, description: `both ${i}` } }),
      ),
    )
    expect(created.map((r) => r.status)).toEqual(Array(120).fill(201))
    const figures = created.map((r) => BigInt(r.body.amount_requested_atomic))
    expect(new Set(figures).size).toBe(120)
    for (const f of figures) {
      expect(f).toBeGreaterThan(7_000_000n)
      expect(f).toBeLessThanOrEqual(7_009_999n)
    }
    // Each figure is bound to its own payment in the database, which asks for that figure.
    const rows = await a.sql<{ n: number }[]>`
      SELECT count(*)::int AS n FROM checkout_amounts c JOIN payments p ON p.id = c.payment_id
      WHERE p.amount_atomic = 7000000 AND p.amount_requested_atomic = c.amount_atomic AND c.held_until IS NULL`
    expect(rows[0]!.n).toBe(120)
  })

  it("a key rolled on one instance stops on the other within the key cache's TTL", async () => {
    const m = await registerMerchant(a)
    // Both instances remember the key as valid.
    expect((await a.api('/api/v1/account', { key: m.key })).status).toBe(200)
    expect((await b.api('/api/v1/account', { key: m.key })).status).toBe(200)
    const rolled = await a.api('/api/v1/account/api-keys/roll', { key: m.key, method: 'POST' })
    expect(rolled.status).toBe(201)
    const rolledAt = Date.now()
    expect((await a.api('/api/v1/account', { key: m.key })).status).toBe(401)
    // caches.api_keys_ttl_ms is 250: the entry b made before the roll has ended once that much has passed
    // since the roll answered, so a request b receives after it is refused (however long requests take).
    await new Promise((r) => setTimeout(r, Math.max(0, rolledAt + 250 + 20 - Date.now())))
    expect((await b.api('/api/v1/account', { key: m.key })).status).toBe(401)
    expect((await b.api('/api/v1/account', { key: rolled.body.api_key })).status).toBe(200)
  })

  it('a price change or a delete on one instance takes effect on the other within a second', async () => {
    const ep = (
      await a.api('/api/v1/endpoints', { key, body: { upstream_url: `${upstream.url}/echo`, price: 0.01 } })
    ).body
    // Warm b's cache.
    expect((await (await fetch(`${b.url}/m/${ep.id}`)).json()).price).toBe(0.01)
    await a.api(`/api/v1/endpoints/${ep.id}`, { key, method: 'PATCH', body: { price: 0.07 } })
    await waitFor(async () => (await (await fetch(`${b.url}/m/${ep.id}`)).json()).price === 0.07, {
      timeoutMs: 1000,
      intervalMs: 25,
      what: "b's new price",
    })
    await a.api(`/api/v1/endpoints/${ep.id}`, { key, method: 'DELETE' })
    await waitFor(async () => (await fetch(`${b.url}/m/${ep.id}`)).status === 404, {
      timeoutMs: 1000,
      intervalMs: 25,
      what: 'a 404 from b',
    })
  })
})
