// The scheme seam: a scheme registered through src/schemes/ alone (no line of the hot path changed) is
// offered in the 402, reads and verifies its own payments, is claimed, captured and released through its
// Payment, and writes its own receipt. And the hot path names no scheme.
import { readFileSync } from 'node:fs'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { registerScheme } from '../../src/schemes/index.ts'
import type { Payment, Scheme, ServedCall } from '../../src/schemes/scheme.ts'
import { registerMerchant, startTestService, type TestService } from '../helpers/service.ts'
import { startUpstream } from '../helpers/upstream.ts'

const FAKE = 'fake-token'

/** What the fake scheme saw: captured calls, releases, claims by key. */
const seen = { captured: [] as ServedCall[], released: [] as string[], claims: new Map<string, number>() }

/** Pays with `{"x402Version":2,"accepted":{"scheme":"fake-token"},"token":"…"}`: a token pays once. */
const fakeScheme: Scheme = {
  name: FAKE,
  offer: (q) => ({
    v2: {
      scheme: FAKE,
      network: 'test:0',
      amount: q.amountAtomic.toString(),
      asset: 'TOKEN',
      payTo: 'tollgate',
      maxTimeoutSeconds: q.maxTimeoutSeconds,
      extra: {},
    },
  }),
  reads: (proof) =>
    proof.kind === 'x402' && (proof.payload as { accepted?: { scheme?: string } }).accepted?.scheme === FAKE,
  verify: (proof, q) => {
    const token = (proof as { payload: { token?: unknown } }).payload.token
    if (typeof token !== 'string' || !token.startsWith('good-'))
      return { ok: false, reason: 'fake_bad_token' }
    const payment: Payment = {
      scheme: FAKE,
      proofKey: `fake:${token}`,
      payer: '0x000000000000000000000000000000000000fa4e',
      coversAtomic: q.quote.amountAtomic,
      transaction: null,
      claim: () => {
        const n = seen.claims.get(token) ?? 0
        seen.claims.set(token, n + 1)
        return n === 0 || seen.released.includes(token) ? 'won' : 'used'
      },
      drop: () => {},
      capture: (call) => {
        seen.captured.push(call)
      },
      release: () => {
        seen.released.push(token)
      },
      doubt: () => {},
      receipt: (served) => ['x-fake-receipt', `${token}:${served}`],
    }
    return Promise.resolve({ ok: true, payment })
  },
}

let svc: TestService
let upstream: Awaited<ReturnType<typeof startUpstream>>
let unregister: () => void
let meteredUrl: string

function fakeHeader(token: string): string {
  return Buffer.from(JSON.stringify({ x402Version: 2, accepted: { scheme: FAKE }, token })).toString('base64')
}

beforeAll(async () => {
  unregister = registerScheme(() => fakeScheme)
  svc = await startTestService()
  upstream = await startUpstream()
  const merchant = await registerMerchant(svc)
  const r = await svc.api('/api/v1/endpoints', {
    key: merchant.key,
    body: { upstream_url: `${upstream.url}/echo`, price: 0.02 },
  })
  meteredUrl = r.body.metered_url
})
afterAll(async () => {
  unregister?.()
  await svc?.stop()
  await upstream?.close()
})

describe('a scheme registered through the seam', () => {
  it('is offered in the 402 beside the built-in ones', async () => {
    const r = await fetch(meteredUrl)
    expect(r.status).toBe(402)
    const required = JSON.parse(Buffer.from(r.headers.get('payment-required')!, 'base64').toString())
    expect(required.accepts.map((a: { scheme: string }) => a.scheme)).toEqual([FAKE, 'exact'])
    expect(required.accepts[0]).toMatchObject({ scheme: FAKE, amount: '20000' })
  })

  it('verifies, claims and captures its payment and writes its own receipt', async () => {
    const before = upstream.count()
    const r = await fetch(meteredUrl, { headers: { 'payment-signature': fakeHeader('good-1') } })
    expect(r.status).toBe(200)
    await r.arrayBuffer()
    expect(r.headers.get('x-fake-receipt')).toBe('good-1:true')
    expect(upstream.count()).toBe(before + 1)
    expect(seen.captured).toHaveLength(1)
    expect(seen.captured[0]).toMatchObject({ status: 200, chargeAtomic: 20_000n, method: 'GET', usage: null })
  })

  it('refuses with its own reason, and a spent payment as used', async () => {
    const bad = await fetch(meteredUrl, { headers: { 'payment-signature': fakeHeader('bad') } })
    expect([bad.status, (await bad.json()).error]).toEqual([402, 'fake_bad_token'])
    const again = await fetch(meteredUrl, { headers: { 'payment-signature': fakeHeader('good-1') } })
    expect([again.status, (await again.json()).error]).toEqual([402, 'proof_already_used'])
  })

  it('is released when the upstream fails, and not captured', async () => {
    const down = await svc.api('/api/v1/endpoints', {
      key: (await registerMerchant(svc)).key,
      body: { upstream_url: `${upstream.url}/status/503`, price: 0.02 },
    })
    const r = await fetch(down.body.metered_url, { headers: { 'payment-signature': fakeHeader('good-2') } })
    expect(r.status).toBe(503)
    await r.arrayBuffer()
    expect(r.headers.get('x-fake-receipt')).toBe('good-2:false')
    expect(seen.released).toContain('good-2')
    expect(seen.captured).toHaveLength(1)
  })
})

describe('the hot path', () => {
  it('names no scheme and branches on no proof kind', () => {
    const source = readFileSync(new URL('../../src/data-plane/metered.ts', import.meta.url), 'utf8')
    // (ProxyOutcome's kind is the upstream's outcome, not a way to pay.)
    expect(source).not.toMatch(/\b(proof|paid|payment|result|verdict)\.kind\b/)
    expect(source).not.toMatch(/kind\s*[!=]==\s*'(tx|x402|eip3009|batch|invalid)'/)
    expect(source).not.toMatch(/'(tx|tx-hash|eip3009|exact|batch|batch-settlement|upto)'/)
  })
})
