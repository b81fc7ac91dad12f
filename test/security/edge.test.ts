// Hostile input at the public port: request framing, header limits, slow and aborted uploads, and the rate
// limits of the unauthenticated surfaces. Raw sockets, because fetch() would never send these requests.
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { fundedAccount, payUsdc } from '../helpers/accounts.ts'
import { type PaidEcho, startPaidEcho } from '../helpers/paid-echo.ts'
import { jsonBody, raw } from '../helpers/raw-http.ts'
import { registerMerchant, startTestService, type TestService } from '../helpers/service.ts'
import { startUpstream, type Upstream } from '../helpers/upstream.ts'

describe('framing, header limits and slow clients', () => {
  let svc: TestService
  let upstream: Upstream
  let endpointPath: string
  let payer: Awaited<ReturnType<typeof fundedAccount>>
  let echo: PaidEcho
  beforeAll(async () => {
    echo = await startPaidEcho()
    ;({ svc, upstream, endpointPath, payer } = echo)
  })
  afterAll(() => echo?.stop())

  const claimOf = async (hash: string) =>
    svc.sql<{ status: string; lease_until: Date | null }[]>`
      SELECT status, lease_until FROM claims WHERE proof_key = ${`tx:${hash.toLowerCase()}`}`

  it('two different Content-Length headers: 400 invalid_framing, connection closed, nothing forwarded or claimed', async () => {
    const hash = await payUsdc(payer, svc.chain.treasury, 10_000n)
    const before = upstream.count()
    const r = await raw(
      svc.url,
      `POST ${endpointPath}/x HTTP/1.1\r\nHost: a\r\nx-payment: ${hash}\r\nContent-Length: 3\r\nContent-Length: 5\r\n\r\n`,
      'abcde',
    )
    expect(r.status).toBe(400)
    expect(jsonBody(r).error.code).toBe('invalid_framing')
    expect(r.closedAfterMs).not.toBeNull()
    const api = await raw(
      svc.url,
      'POST /api/v1/register HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\nContent-Length: 2\r\nContent-Length: 40\r\n\r\n',
      '{}',
    )
    expect(api.status).toBe(400)
    expect(api.closedAfterMs).not.toBeNull()
    expect(upstream.count()).toBe(before)
    expect(await claimOf(hash)).toHaveLength(0)
  })

  it('Content-Length with Transfer-Encoding: closed by uWS without an answer, nothing forwarded', async () => {
    const hash = await payUsdc(payer, svc.chain.treasury, 10_000n)
    const before = upstream.count()
    const r = await raw(
      svc.url,
      `POST ${endpointPath}/x HTTP/1.1\r\nHost: a\r\nx-payment: ${hash}\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n`,
      '3\r\nabc\r\n0\r\n\r\n',
    )
    expect(r.text).toBe('')
    expect(r.closedAfterMs).not.toBeNull()
    expect(upstream.count()).toBe(before)
    expect(await claimOf(hash)).toHaveLength(0)
  })

  it('a 64 KB header or 41 header fields: 431 headers_too_large, connection closed', async () => {
    const hash = await payUsdc(payer, svc.chain.treasury, 10_000n)
    const before = upstream.count()
    const big = await raw(
      svc.url,
      `GET ${endpointPath} HTTP/1.1\r\nHost: a\r\nx-payment: ${hash}\r\nX-Big: ${'a'.repeat(65_000)}\r\n\r\n`,
    )
    expect(big.status).toBe(431)
    expect(jsonBody(big).error.code).toBe('headers_too_large')
    expect(big.closedAfterMs).not.toBeNull()
    let many = ''
    for (let i = 0; i < 39; i++) many += `X-H${i}: v\r\n`
    const count = await raw(
      svc.url,
      `GET ${endpointPath} HTTP/1.1\r\nHost: a\r\nx-payment: ${hash}\r\n${many}\r\n`,
    )
    expect(count.status).toBe(431)
    expect(upstream.count()).toBe(before)
    expect(await claimOf(hash)).toHaveLength(0)
  })

  it('more header lines than uWS parses (60): no handler runs, the connection is closed when idle', async () => {
    const before = upstream.count()
    let many = ''
    for (let i = 0; i < 60; i++) many += `X-H${i}: v\r\n`
    const r = await raw(
      svc.url,
      `GET ${endpointPath} HTTP/1.1\r\nHost: a\r\nx-payment: 0x00\r\n${many}\r\n`,
      '',
      15_000,
    )
    expect(r.text).toBe('')
    // uWS's HTTP idle timeout is 10 s; it cannot be made to answer (the limit is compiled in).
    expect(r.closedAfterMs).not.toBeNull()
    expect(r.closedAfterMs!).toBeLessThan(13_000)
    expect(upstream.count()).toBe(before)
  }, 20_000)

  // A caller that leaves once its request reached the upstream leaves the call in doubt (docs/guarantees.md):
  // the proof is never served again (that could serve it twice), and it is refunded at the end of its window.
  it('a client that sends half its body and stalls is closed; the upstream is aborted; the proof is not served again', async () => {
    const hash = await payUsdc(payer, svc.chain.treasury, 10_000n)
    const r = await raw(
      svc.url,
      `POST ${endpointPath}/slow HTTP/1.1\r\nHost: a\r\nx-payment: ${hash}\r\nContent-Length: 1000\r\n\r\n`,
      'x'.repeat(500),
      15_000,
    )
    expect(r.closedAfterMs).not.toBeNull()
    const seen = upstream.requests.find((q) => q.url === '/echo/slow')
    // The upload was streamed: the upstream saw the request and then its abort, never a complete body.
    if (seen) expect(seen.bodyComplete).toBe(false)
    await expectNotServedAgain(hash)
  }, 30_000)

  it('a client that aborts mid-upload: the upstream is aborted at once; the proof is not served again', async () => {
    const hash = await payUsdc(payer, svc.chain.treasury, 10_000n)
    await raw(
      svc.url,
      `POST ${endpointPath}/abort HTTP/1.1\r\nHost: a\r\nx-payment: ${hash}\r\nContent-Length: 100000\r\n\r\n`,
      'y'.repeat(20_000),
      3000,
      // The client leaving mid-upload is the thing under test.
      (s) => setTimeout(() => s.destroy(), 300),
    )
    const seen = upstream.requests.find((q) => q.url === '/echo/abort')
    if (seen) expect(seen.bodyComplete).toBe(false)
    await expectNotServedAgain(hash)
  })

  async function expectNotServedAgain(hash: string): Promise<void> {
    const before = upstream.requests.filter((q) => q.url === '/echo/again').length
    const again = await fetch(`${svc.url}${endpointPath}/again`, {
      method: 'POST',
      headers: { 'x-payment': hash },
      body: 'ok',
    })
    // 409 while the in-doubt claim's lease runs, 402 proof_already_used after: never served.
    expect([402, 409]).toContain(again.status)
    expect(upstream.requests.filter((q) => q.url === '/echo/again').length).toBe(before)
    const [claim] = await claimOf(hash)
    expect(claim?.status).toBe('claimed')
  }
})

describe('rate limits on unauthenticated surfaces', () => {
  let svc: TestService
  let upstream: Upstream
  let merchant: Awaited<ReturnType<typeof registerMerchant>>
  let meteredUrl: string
  let paymentUrl: string
  beforeAll(async () => {
    svc = await startTestService({
      overrides: {
        rate_limits: {
          enabled: true,
          register: { burst: 3, per_minute: 1 },
          failed_api_keys: { burst: 3, per_minute: 1 },
          unpaid_metered: { burst: 3, per_minute: 1 },
          checkout: { burst: 3, per_minute: 1 },
        },
      },
    })
    upstream = await startUpstream()
    merchant = await registerMerchant(svc) // the first of three sign-ups
    const ep = await svc.api('/api/v1/endpoints', {
      key: merchant.key,
      body: { upstream_url: `${upstream.url}/echo`, price: 0.01 },
    })
    meteredUrl = ep.body.metered_url
    const pay = await svc.api('/api/v1/payments', {
      key: merchant.key,
      body: { amount: 0.01, description: 'limit test' },
    })
    paymentUrl = pay.body.payment_url
  })
  afterAll(async () => {
    await svc?.stop()
    await upstream?.close()
  })

  const expectLimited = (r: { status: number; headers: Headers }, name: string) => {
    expect(r.status).toBe(429)
    expect(Number(r.headers.get('retry-after'))).toBeGreaterThanOrEqual(1)
    expect(r.headers.get('ratelimit-policy')).toBe(`"${name}";q=1;w=60`)
    expect(r.headers.get('ratelimit')).toMatch(new RegExp(`^"${name}";r=0;t=\\d+$`))
  }

  it('register: the fourth sign-up in a minute from one address is 429 and creates nothing', async () => {
    await registerMerchant(svc)
    await registerMerchant(svc)
    const before = (await svc.sql<{ n: string }[]>`SELECT count(*)::text AS n FROM accounts`)[0]!.n
    const wallet = (await fundedAccount(0n)).address
    const r = await svc.api('/api/v1/register', { body: { wallet_address: wallet, business_name: 'Spam' } })
    expectLimited(r, 'register')
    expect(r.body.error.code).toBe('rate_limited')
    const after = (await svc.sql<{ n: string }[]>`SELECT count(*)::text AS n FROM accounts`)[0]!.n
    expect(after).toBe(before)
    // Authenticated calls are not sign-ups: still served.
    expect((await svc.api('/api/v1/account', { key: merchant.key })).status).toBe(200)
  })

  it('402 answers: a paid call spends nothing; the fourth unpaid or refused call is 429, proof or not', async () => {
    const before = upstream.count()
    const payer = await fundedAccount(1_000_000n)
    const paid = await fetch(meteredUrl, {
      headers: { 'x-payment': await payUsdc(payer, svc.chain.treasury, 10_000n) },
    })
    expect(paid.status).toBe(200)
    expect(upstream.count()).toBe(before + 1)
    for (let i = 0; i < 2; i++) expect((await fetch(meteredUrl)).status).toBe(402)
    // A proof that does not pay buys no exemption: it counts as unpaid.
    expect((await fetch(meteredUrl, { headers: { 'x-payment': 'nope' } })).status).toBe(402)
    expectLimited(await fetch(meteredUrl, { headers: { 'x-payment': 'nope' } }), 'unpaid_metered')
    // Once the address has spent its budget, a proof waits for Retry-After too; it is not claimed meanwhile.
    const hash = await payUsdc(payer, svc.chain.treasury, 10_000n)
    expectLimited(await fetch(meteredUrl, { headers: { 'x-payment': hash } }), 'unpaid_metered')
    expect(upstream.count()).toBe(before + 1)
    const claims = await svc.sql`SELECT 1 FROM claims WHERE proof_key = ${`tx:${hash.toLowerCase()}`}`
    expect(claims.length).toBe(0)
  })

  it('checkout: a payment with a proof that pays spends nothing; the fourth unpaid look-up is 429', async () => {
    const json = { accept: 'application/json' }
    const payer = await fundedAccount(1_000_000n)
    const hash = await payUsdc(payer, svc.chain.treasury, 10_000n)
    const paid = await fetch(paymentUrl, { method: 'POST', headers: { ...json, 'x-payment': hash } })
    expect(paid.status).toBeLessThan(300)
    for (let i = 0; i < 3; i++) expect((await fetch(paymentUrl, { headers: json })).status).not.toBe(429)
    expectLimited(await fetch(paymentUrl, { headers: json }), 'checkout')
  })

  it('wrong API keys: three 401s, then 429 for that address', async () => {
    const wrong = `sk_test_${'x'.repeat(40)}`
    for (let i = 0; i < 3; i++) expect((await svc.api('/api/v1/account', { key: wrong })).status).toBe(401)
    expectLimited(await svc.api('/api/v1/account', { key: wrong }), 'failed_api_keys')
  })
})
