// What the upstream learns about the caller: from a peer that is not a trusted proxy, only what tollgate saw
// (the caller's X-Forwarded-For, Forwarded, X-Real-IP and the like are its own word and are dropped); from a
// trusted proxy, its headers as it wrote them, with x-forwarded-for appended to.
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { type Funded, fundedAccount, payUsdc } from '../helpers/accounts.ts'
import { registerMerchant, startTestService, type TestService } from '../helpers/service.ts'
import { startUpstream, type Upstream } from '../helpers/upstream.ts'

/** What a caller claims about itself, as a proxy in front would write it. */
const CLAIMS = {
  'x-forwarded-for': '1.2.3.4',
  'x-forwarded-host': 'evil.example',
  'x-forwarded-proto': 'https',
  'x-forwarded-port': '443',
  forwarded: 'for=1.2.3.4;host=evil.example;proto=https',
  'x-real-ip': '1.2.3.4',
  'true-client-ip': '1.2.3.4',
  'cf-connecting-ip': '1.2.3.4',
}

async function paidEndpoint(svc: TestService, upstream: Upstream): Promise<string> {
  const merchant = await registerMerchant(svc)
  const r = await svc.api('/api/v1/endpoints', {
    key: merchant.key,
    body: { upstream_url: `${upstream.url}/echo`, price: 0.01 },
  })
  return `${svc.url}/m/${r.body.id}`
}

describe('forwarding headers toward the upstream', () => {
  let plain: TestService
  let behindProxy: TestService
  let upstream: Upstream
  let payer: Funded
  beforeAll(async () => {
    upstream = await startUpstream()
    plain = await startTestService()
    behindProxy = await startTestService({ overrides: { server: { trusted_proxies: ['127.0.0.1', '::1'] } } })
    payer = await fundedAccount(10_000_000n)
  })
  afterAll(async () => {
    await plain?.stop()
    await behindProxy?.stop()
    await upstream?.close()
  })

  /** A paid call carrying `headers`; returns the headers the upstream received. */
  async function seenUpstream(svc: TestService, path: string, headers: Record<string, string>) {
    const endpoint = await paidEndpoint(svc, upstream)
    const hash = await payUsdc(payer, svc.chain.treasury, 10_000n)
    const r = await fetch(`${endpoint}/${path}`, { headers: { ...headers, 'x-payment': hash } })
    expect(r.status).toBe(200)
    await r.arrayBuffer()
    const seen = upstream.requests.findLast((q) => q.url === `/echo/${path}`)
    expect(seen).toBeDefined()
    return seen!.headers
  }

  it('an untrusted peer: its forwarding headers are replaced by what tollgate saw', async () => {
    const seen = await seenUpstream(plain, 'untrusted', CLAIMS)
    const { host } = new URL(plain.url)
    expect(seen['x-forwarded-for']).toBe('127.0.0.1')
    expect(seen['x-forwarded-host']).toBe(host)
    expect(seen['x-forwarded-proto']).toBe('http')
    for (const name of ['forwarded', 'x-real-ip', 'x-forwarded-port', 'true-client-ip', 'cf-connecting-ip'])
      expect(seen[name], name).toBeUndefined()
    expect(JSON.stringify(seen)).not.toContain('1.2.3.4')
    expect(JSON.stringify(seen)).not.toContain('evil.example')
  })

  it('a trusted proxy: x-forwarded-for is appended to, Forwarded and X-Real-IP relayed as it wrote them', async () => {
    const seen = await seenUpstream(behindProxy, 'trusted', CLAIMS)
    expect(seen['x-forwarded-for']).toBe('1.2.3.4, 127.0.0.1')
    expect(seen.forwarded).toBe(CLAIMS.forwarded)
    expect(seen['x-real-ip']).toBe('1.2.3.4')
    expect(seen['true-client-ip']).toBe('1.2.3.4')
    // Rebuilt from what tollgate saw, as before: tollgate is reached over plain HTTP.
    expect(seen['x-forwarded-proto']).toBe('http')
  })
})
