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
