// A paid metered call may only reach paths under its endpoint's base path: every escaping form is refused
// with 400 invalid_path before the proof is verified or claimed, and the proof stays usable.
import { request } from 'node:http'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { listen } from '../../src/data-plane/app.ts'
import {
  type AbortState,
  createRequestBody,
  createUpstreamDispatcher,
  isConfinedSubPath,
  type ProxyOutcome,
  proxy,
} from '../../src/data-plane/proxy.ts'
import { uws } from '../../src/data-plane/uws.ts'
import { fundedAccount, payUsdc } from '../helpers/accounts.ts'
import { registerMerchant, startTestService, type TestService } from '../helpers/service.ts'
import { startUpstream, type Upstream } from '../helpers/upstream.ts'

const ESCAPING = [
  '/../admin',
  '/..',
  '/%2e%2e/admin',
  '/%2E%2E/admin',
  '/.%2e/admin',
  '/..%2fadmin',
  '/..%2Fadmin',
  '/a%2fb',
  '/a%5c..%5cadmin',
  '/a\\..\\admin',
  '/a/../../x',
  '/./admin',
  '/.',
  '/..;/admin',
  '/%252e%252e/admin',
  '/a%00b',
  // Percent-encoded bytes that are not UTF-8: overlong dots and slashes, invalid bytes, truncated sequences.
  '/%c0%ae%c0%ae/admin',
  '/%C0%AE%C0%AE/admin',
  '/%c0%af',
  '/%e0%80%ae',
  '/%f0%80%80%ae',
  '/%c1%9c',
  '/%ff',
  '/a%fe',
  '/%80',
  '/%c3',
  '/%c3/x',
  '/%e2%82',
  '/%e2%82x',
  '/%f0%9f%98',
  '/%ed%a0%80',
  '/%f4%90%80%80',
  '/%c3%28',
  // Malformed escapes.
  '/a%',
  '/a%2',
  '/a%zz',
  '/a%g0',
  '/%25c0%25ae%25c0%25ae/admin',
]

/** Raw request: fetch() and URL would resolve the dot segments before sending. */
function rawRequest(
  base: string,
  path: string,
  headers: Record<string, string>,
): Promise<{ status: number; body: string }> {
  const url = new URL(base)
  return new Promise((resolve, reject) => {
    const req = request({ host: url.hostname, port: url.port, path, method: 'GET', headers }, (res) => {
      let body = ''
      res.setEncoding('utf8')
      res.on('data', (d: string) => {
        body += d
      })
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }))
    })
    req.on('error', reject)
    req.end()
  })
}

describe('isConfinedSubPath', () => {
  it('refuses every escaping form', () => {
    for (const p of ESCAPING) expect(isConfinedSubPath(p), p).toBe(false)
  })
  it('accepts ordinary paths with dots inside names', () => {
    for (const p of ['', '/', '/v1.2/file.json', '/a..b', '/...', '/.well-known/x', '/a/b%20c', '/%41'])
      expect(isConfinedSubPath(p), p).toBe(true)
  })
  it('accepts percent-encoded UTF-8 in its shortest form', () => {
    // é, €, U+FFFF, 😀, U+10FFFF, U+0080, U+D7FF, U+E000, and raw (unencoded) non-ASCII.
    for (const p of [
      '/caf%C3%A9',
      '/%e2%82%ac',
      '/%ef%bf%bf',
      '/%f0%9f%98%80',
      '/%f4%8f%bf%bf',
      '/%c2%80',
      '/%ed%9f%bf',
      '/%ee%80%80',
      '/café',
    ])
      expect(isConfinedSubPath(p), p).toBe(true)
  })
})

describe('escaping metered paths', () => {
  let svc: TestService
  let upstream: Upstream
  beforeAll(async () => {
    svc = await startTestService()
    upstream = await startUpstream()
  })
  afterAll(async () => {
    await svc?.stop()
    await upstream?.close()
  })

  it('are refused with 400 before anything is verified, claimed or forwarded; the proof stays usable', async () => {
    const merchant = await registerMerchant(svc)
    const created = await svc.api('/api/v1/endpoints', {
      key: merchant.key,
      body: {
        upstream_url: `${upstream.url}/echo/base`,
        price: 0.01,
        upstream_headers: { 'x-key': 'owner' },
      },
    })
    expect(created.status).toBe(201)
    const id = created.body.id as string
    const payer = await fundedAccount(1_000_000n)
    const hash = await payUsdc(payer, svc.chain.treasury, 10_000n)
    const before = upstream.count()
    for (const form of ESCAPING) {
      const r = await rawRequest(svc.url, `/m/${id}${form}`, { 'x-payment': hash })
      expect(r.status, form).toBe(400)
      expect(JSON.parse(r.body).error.code, form).toBe('invalid_path')
    }
    expect(upstream.count()).toBe(before)
    const claims = await svc.sql`SELECT 1 FROM claims WHERE proof_key = ${`tx:${hash.toLowerCase()}`}`
    expect(claims.length).toBe(0)

    // The same proof still pays one call under the base path.
    const ok = await rawRequest(svc.url, `/m/${id}/ok?x=1`, { 'x-payment': hash })
    expect(ok.status).toBe(200)
    expect(JSON.parse(ok.body).url).toBe('/echo/base/ok?x=1')
    expect(upstream.count()).toBe(before + 1)
  })
})

describe('proxy() itself', () => {
  it('never joins an escaping path onto the base path, whoever calls it', async () => {
    const upstream = await startUpstream()
    const dispatcher = createUpstreamDispatcher({ allowPrivate: true })
    const outcomes: ProxyOutcome[] = []
    const app = uws.App()
    app.any('/*', (res, req) => {
      const abort: AbortState = { aborted: false, onAbort: null }
      res.onAborted(() => {
        abort.aborted = true
        abort.onAbort?.()
      })
      // The route hands the raw URL over unchecked, as a careless caller would.
      const forward = {
        method: 'GET',
        pathAndQuery: req.getUrl(),
        headers: [],
        remoteAddress: '127.0.0.1',
        peerTrusted: false,
        requestId: 'req_confinement',
        traceparent: null,
      }
      const body = createRequestBody(res, 1024)
      const target = {
        origin: upstream.url,
        basePath: '/echo/base',
        host: new URL(upstream.url).host,
        injectHeaders: [['x-key', 'owner'] as [string, string]],
        timeoutMs: 5000,
        allowPrivate: true,
      }
      proxy(dispatcher, res, forward, body, target, abort, {
        onResponseHead: () => undefined,
        onDone: (o) => outcomes.push(o),
      })
    })
    const listening = await listen(app, '127.0.0.1', 0)
    try {
      const base = `http://127.0.0.1:${listening.port}`
      for (const form of ['/../admin', '/%2e%2e/admin', '/a%2fb', '/a\\..\\admin']) {
        const r = await rawRequest(base, form, {})
        expect(r.status, form).toBe(400)
        expect(JSON.parse(r.body).error.code).toBe('invalid_path')
      }
      expect(upstream.count()).toBe(0)
      expect(outcomes.every((o) => o.kind === 'upstream_error' && o.code === 'invalid_path')).toBe(true)
      const ok = await rawRequest(base, '/fine', {})
      expect(JSON.parse(ok.body).url).toBe('/echo/base/fine')
    } finally {
      listening.close()
      await dispatcher.close()
      await upstream.close()
    }
  })
})
