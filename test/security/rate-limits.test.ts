// Rate limits that hold: proofs that do not pay count against the unpaid limit, unknown transaction hashes
// are remembered and bounded per client, wrong API keys never lock out the right one, and only trusted
// proxies name the client. Each test speaks as its own client through X-Forwarded-For (127.0.0.1 is a
// trusted proxy here), so the buckets of one test are its own.
import { randomBytes } from 'node:crypto'
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest'
import { fundedAccount, payUsdc } from '../helpers/accounts.ts'
import { type RpcProxy, startRpcProxy } from '../helpers/rpc-proxy.ts'
import { registerMerchant, startTestService, type TestService } from '../helpers/service.ts'
import { startUpstream, type Upstream } from '../helpers/upstream.ts'

const LIMITS = {
  enabled: true,
  unpaid_metered: { burst: 5, per_minute: 1 },
  checkout: { burst: 5, per_minute: 1 },
  failed_api_keys: { burst: 20, per_minute: 1 },
  chain_lookups_per_client: 2,
}

let nextClient = 1
/** A fresh client address for one test (TEST-NET-3). */
const newClient = () => `203.0.113.${nextClient++}`
const randomHash = () => `0x${randomBytes(32).toString('hex')}`
const junk = () => randomBytes(48).toString('base64')

describe('rate limits behind a trusted proxy', () => {
  let svc: TestService
  let upstream: Upstream
  let rpc: RpcProxy
  let endpoint: string
  let merchantKey: string
  beforeAll(async () => {
    rpc = await startRpcProxy(inject('rpcUrl'))
    svc = await startTestService({
      rpcUrl: rpc.url,
      overrides: {
        server: { trusted_proxies: ['127.0.0.1', '::1'] },
        rate_limits: LIMITS,
        verify: { wait_ms: 10_000, unseen_wait_ms: 1000, not_found_ttl_ms: 60_000 },
      },
    })
    upstream = await startUpstream()
    const merchant = await registerMerchant(svc)
    merchantKey = merchant.key
    const r = await svc.api('/api/v1/endpoints', {
      key: merchant.key,
      body: { upstream_url: `${upstream.url}/echo`, price: 0.01 },
    })
    endpoint = `${svc.url}/m/${r.body.id}`
  })
  afterAll(async () => {
    await svc?.stop()
    await upstream?.close()
    await rpc?.close()
  })

  const call = (client: string, payment?: string, extra: Record<string, string> = {}) =>
    fetch(endpoint, {
      headers: { 'x-forwarded-for': client, ...(payment ? { 'x-payment': payment } : {}), ...extra },
    })
  const api = (client: string, key: string) =>
    fetch(`${svc.url}/api/v1/endpoints`, {
      headers: { 'x-forwarded-for': client, authorization: `Bearer ${key}` },
    })

  it('random base64 in x-payment counts against the unpaid limit', async () => {
    const client = newClient()
    for (let i = 0; i < LIMITS.unpaid_metered.burst; i++) {
      const r = await call(client, junk())
      expect(r.status).toBe(402)
      expect((await r.json()).error).toBe('invalid_proof')
    }
    const limited = await call(client, junk())
    expect(limited.status).toBe(429)
    expect((await limited.json()).error.code).toBe('rate_limited')
    expect(Number(limited.headers.get('retry-after'))).toBeGreaterThan(0)
    // A proof-shaped x402 payload that does not verify counts the same.
    const other = newClient()
    const payload = Buffer.from(JSON.stringify({ x402Version: 1, scheme: 'exact', payload: {} })).toString(
      'base64',
    )
    for (let i = 0; i < LIMITS.unpaid_metered.burst; i++)
      expect((await call(other, payload)).status).toBe(402)
    expect((await call(other, payload)).status).toBe(429)
  })

  it('checkout: random proofs count against the checkout limit', async () => {
    const client = newClient()
    const pay = await svc.api('/api/v1/payments', {
      key: merchantKey,
      body: { amount: 0.5, description: 'junk proofs' },
    })
    const post = (payment: string) =>
      fetch(pay.body.payment_url, {
        method: 'POST',
        headers: { accept: 'application/json', 'x-forwarded-for': client, 'x-payment': payment },
      })
    for (let i = 0; i < LIMITS.checkout.burst; i++) expect((await post(junk())).status).toBe(402)
    const limited = await post(junk())
    expect(limited.status).toBe(429)
    expect((await limited.json()).error.code).toBe('rate_limited')
  })

  it('a payer whose proofs pay is never charged', async () => {
    const client = newClient()
    const payer = await fundedAccount(1_000_000n)
    for (let i = 0; i < LIMITS.unpaid_metered.burst + 2; i++) {
      const hash = await payUsdc(payer, svc.chain.treasury, 10_000n)
      expect((await call(client, hash)).status).toBe(200)
    }
  })

  it('an unknown hash answers transaction_not_found, final, and is not looked up again', async () => {
    const client = newClient()
    const hash = randomHash()
    // The transfer watcher polls the chain meanwhile (eth_blockNumber, eth_getLogs, and the receipts of the
    // transfers earlier tests made): count the calls that name this hash only.
    rpc.bodies = []
    const needle = hash.toLowerCase()
    const lookups = () => rpc.bodies!.reduce((n, b) => n + b.toLowerCase().split(needle).length - 1, 0)
    const started = performance.now()
    const cold = lookups()
    const first = await call(client, hash)
    expect(first.status).toBe(402)
    expect((await first.json()).error).toBe('transaction_not_found')
    expect(first.headers.get('retry-after')).toBeNull()
    // Never seen by the node: given up after verify.unseen_wait_ms (1 s here), not wait_ms (10 s), having
    // looked at 0, 0.25, 0.75 and 1 s (a receipt and a mempool look-up each).
    expect(performance.now() - started).toBeLessThan(2500)
    expect(lookups() - cold).toBeLessThanOrEqual(8)
    const before = lookups()
    const again = await call(client, hash)
    expect(again.status).toBe(402)
    expect((await again.json()).error).toBe('transaction_not_found')
    expect(again.headers.get('retry-after')).toBeNull()
    // Answered from the negative cache: the chain was not asked again.
    expect(lookups()).toBe(before)
    rpc.bodies = null
  })

  it('a client gets at most chain_lookups_per_client look-ups in flight', async () => {
    const client = newClient()
    const answers = await Promise.all(
      [randomHash(), randomHash(), randomHash()].map(async (hash) => {
        const r = await call(client, hash)
        return { status: r.status, body: await r.json(), retryAfter: r.headers.get('retry-after') }
      }),
    )
    const statuses = answers.map((a) => a.status).sort()
    expect(statuses).toEqual([402, 402, 429])
    const limited = answers.find((a) => a.status === 429)!
    expect(limited.body.error.code).toBe('rate_limited')
    expect(limited.retryAfter).toBe('1')
    // Another client is not held up by this one's look-ups.
    expect((await call(newClient(), randomHash())).status).toBe(402)
  })

  it('20 wrong API keys from an address, then the right key still works', async () => {
    const client = newClient()
    expect((await api(client, merchantKey)).status).toBe(200)
    for (let i = 0; i < 20; i++) {
      const wrong = `sk_test_${randomBytes(24).toString('hex').slice(0, 32)}`
      expect((await api(client, wrong)).status).toBe(401)
    }
    const limited = await api(client, `sk_test_${'x'.repeat(32)}`)
    expect(limited.status).toBe(429)
    expect((await limited.json()).error.code).toBe('rate_limited')
    // The valid key is not locked out of its own address.
    expect((await api(client, merchantKey)).status).toBe(200)
  })

  it("50 wrong keys under the right key's prefix from other addresses: the right key works at once", async () => {
    // A fresh merchant: its key has never authenticated in this process, so nothing remembers it as good.
    const { key } = await registerMerchant(svc)
    const prefix = key.slice(0, 16)
    const guess = () => `${prefix}${randomBytes(16).toString('hex').slice(0, 24)}`
    const attackers = Array.from({ length: 50 }, newClient)
    for (const address of attackers) expect((await api(address, guess())).status).toBe(401)
    // No bucket is keyed by the prefix: the owner is served from a fresh address and from an attacker's.
    expect((await api(newClient(), key)).status).toBe(200)
    expect((await api(attackers[0]!, key)).status).toBe(200)
  })

  it('an address over its failure budget: a key not yet used here waits; other addresses are untouched', async () => {
    const { key } = await registerMerchant(svc)
    const client = newClient()
    for (let i = 0; i < LIMITS.failed_api_keys.burst; i++)
      expect((await api(client, `${key.slice(0, 16)}${'0'.repeat(24)}${i}`)).status).toBe(401)
    // The rule: a look-up budget on an address is shared by everyone behind it.
    expect((await api(client, key)).status).toBe(429)
    expect((await api(newClient(), key)).status).toBe(200)
    // Having authenticated in this process, the key now passes its address's spent budget too.
    expect((await api(client, key)).status).toBe(200)
  })

  it('only the nearest hop a trusted proxy wrote names the client: spoofed entries further left do not help', async () => {
    const client = newClient()
    for (let i = 0; i < LIMITS.unpaid_metered.burst; i++) expect((await call(client)).status).toBe(402)
    expect((await call(client)).status).toBe(429)
    // A spoofed first entry: the proxy appended the real address last.
    expect((await call(`198.51.100.9, ${client}`)).status).toBe(429)
    // Another address behind the same proxy has its own bucket, through either header.
    expect((await call(newClient())).status).toBe(402)
    const forwarded = await fetch(endpoint, { headers: { forwarded: 'for="[2001:db8:1::7]:4711"' } })
    expect(forwarded.status).toBe(402)
  })
})

describe('rate limits behind an untrusted peer', () => {
  let svc: TestService
  let endpoint: string
  beforeAll(async () => {
    svc = await startTestService({ overrides: { rate_limits: LIMITS } })
    const merchant = await registerMerchant(svc)
    const r = await svc.api('/api/v1/endpoints', {
      key: merchant.key,
      body: { upstream_url: 'http://127.0.0.1:9/x', price: 0.01 },
    })
    endpoint = `${svc.url}/m/${r.body.id}`
  })
  afterAll(() => svc?.stop())

  it('X-Forwarded-For and Forwarded are ignored: every request counts against the peer', async () => {
    for (let i = 0; i < LIMITS.unpaid_metered.burst; i++) {
      const r = await fetch(endpoint, { headers: { 'x-forwarded-for': `203.0.113.${100 + i}` } })
      expect(r.status).toBe(402)
    }
    expect((await fetch(endpoint, { headers: { 'x-forwarded-for': '203.0.113.200' } })).status).toBe(429)
    expect((await fetch(endpoint, { headers: { forwarded: 'for=198.51.100.1' } })).status).toBe(429)
  })
})
