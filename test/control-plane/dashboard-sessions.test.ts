// Dashboard sessions as an /api/v1 credential, without a browser: the cookie acts for the account on every
// route, a state change needs the session's CSRF token, and a session ends at logout, at its expiry and with
// the key it was opened with. Every refusal is a clear 401/403 and changes nothing. Also: the calls filters
// and the revenue report the dashboard reads.
import { parseUnits } from 'viem'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { type Funded, fundedAccount, payUsdc } from '../helpers/accounts.ts'
import { registerMerchant, startTestService, type TestService } from '../helpers/service.ts'
import { startUpstream, type Upstream } from '../helpers/upstream.ts'

let svc: TestService
let upstream: Upstream
let payer: Funded
let merchant: Awaited<ReturnType<typeof registerMerchant>>

beforeAll(async () => {
  ;[svc, upstream, payer] = await Promise.all([
    startTestService(),
    startUpstream(),
    fundedAccount(10_000_000n),
  ])
  merchant = await registerMerchant(svc)
})
afterAll(async () => {
  await Promise.all([svc?.stop(), upstream?.close()])
})

async function signIn(apiKey: string) {
  const r = await svc.api('/api/v1/dashboard/sessions', { body: { api_key: apiKey } })
  expect(r.status).toBe(201)
  const setCookie = r.headers.get('set-cookie')!
  return { cookie: setCookie.split(';')[0]!, setCookie, csrf: r.body.csrf_token as string, body: r.body }
}

function as(
  s: { cookie: string },
  path: string,
  init: { method?: string; body?: unknown; csrf?: string } = {},
) {
  return svc.api(path, {
    method: init.method,
    body: init.body,
    headers: { cookie: s.cookie, ...(init.csrf ? { 'x-csrf-token': init.csrf } : {}) },
  })
}

const endpointCount = async () =>
  (await svc.api('/api/v1/endpoints', { key: merchant.key })).body.data.length as number

describe('dashboard sessions', () => {
  it('sets an HttpOnly, Secure, SameSite=Strict cookie scoped to /api/v1 and stores only its hash', async () => {
    const s = await signIn(merchant.key)
    expect(s.setCookie).toMatch(/^__Secure-tollgate_session=[\w-]{43}; Path=\/api\/v1; Max-Age=43200; /)
    expect(s.setCookie).toContain('HttpOnly')
    expect(s.setCookie).toContain('Secure')
    expect(s.setCookie).toContain('SameSite=Strict')
    expect(s.body.account.id).toBe(merchant.account.id)
    const token = s.cookie.split('=')[1]!
    const rows = await svc.sql<{ token_hash: Buffer }[]>`SELECT token_hash FROM dashboard_sessions`
    expect(rows.some((r) => r.token_hash.toString('base64url') === token)).toBe(false)
    expect(JSON.stringify(rows)).not.toContain(token)
  })

  it('acts for the account through the same routes; a change needs the CSRF token', async () => {
    const s = await signIn(merchant.key)
    expect((await as(s, '/api/v1/account')).body.id).toBe(merchant.account.id)
    const before = await endpointCount()
    const body = { upstream_url: upstream.url, price: 0.1, name: 'by session' }

    const none = await as(s, '/api/v1/endpoints', { body })
    expect(none.status).toBe(403)
    expect(none.body.error.code).toBe('invalid_csrf_token')
    const forged = await as(s, '/api/v1/endpoints', { body, csrf: 'A'.repeat(43) })
    expect(forged.status).toBe(403)
    // Another session's token does not fit this one.
    const other = await signIn(merchant.key)
    expect((await as(s, '/api/v1/endpoints', { body, csrf: other.csrf })).status).toBe(403)
    expect(await endpointCount()).toBe(before)

    const made = await as(s, '/api/v1/endpoints', { body, csrf: s.csrf })
    expect(made.status).toBe(201)
    expect(await endpointCount()).toBe(before + 1)
  })

  it('refuses no credential, a bad key at sign-in, an unknown token; an API key still works beside a cookie', async () => {
    const noCookie = await svc.api('/api/v1/account')
    expect(noCookie.status).toBe(401)
    expect(noCookie.body.error.code).toBe('missing_api_key')
    const bad = await svc.api('/api/v1/dashboard/sessions', {
      body: { api_key: 'sk_test_notakeyatallnotakey' },
    })
    expect(bad.status).toBe(401)
    expect(bad.body.error.code).toBe('invalid_api_key')
    expect(bad.headers.get('set-cookie')).toBeNull()
    const unknown = await as({ cookie: `__Secure-tollgate_session=${'B'.repeat(43)}` }, '/api/v1/account')
    expect(unknown.status).toBe(401)
    expect(unknown.body.error.code).toBe('invalid_session')
    const malformed = await as({ cookie: '__Secure-tollgate_session=short' }, '/api/v1/account')
    expect(malformed.body.error.code).toBe('invalid_session')
    // The Authorization header wins (no CSRF needed for a key, which a page cannot send by itself).
    const keyed = await svc.api('/api/v1/account', {
      key: merchant.key,
      headers: { cookie: `__Secure-tollgate_session=${'B'.repeat(43)}` },
    })
    expect(keyed.status).toBe(200)
  })

  it('ends at logout, at its expiry, and with the key it was opened with', async () => {
    const s = await signIn(merchant.key)
    const out = await as(s, '/api/v1/dashboard/session', { method: 'DELETE', csrf: s.csrf })
    expect(out.status).toBe(200)
    expect(out.headers.get('set-cookie')).toMatch(/^__Secure-tollgate_session=; Path=\/api\/v1; Max-Age=0/)
    const after = await as(s, '/api/v1/account')
    expect(after.status).toBe(401)
    expect(after.body.error.code).toBe('invalid_session')

    const e = await signIn(merchant.key)
    const hash = (
      await svc.sql<{ h: Buffer }[]>`SELECT token_hash AS h FROM dashboard_sessions
                                                  ORDER BY created_at DESC LIMIT 1`
    )[0]!.h
    await svc.sql`UPDATE dashboard_sessions SET expires_at = now() - interval '1 ms' WHERE token_hash = ${hash}`
    const expired = await as(e, '/api/v1/endpoints', {
      body: { upstream_url: upstream.url, price: 1 },
      csrf: e.csrf,
    })
    expect(expired.status).toBe(401)
    expect(expired.body.error.code).toBe('session_expired')

    // Rolling the key (no grace) ends the sessions opened with it; one opened with the new key works.
    const r = await signIn(merchant.key)
    const rolled = await as(r, '/api/v1/account/api-keys/roll', {
      body: { grace_period_ms: 0 },
      csrf: r.csrf,
    })
    expect(rolled.status).toBe(201)
    expect((await as(r, '/api/v1/account')).body.error.code).toBe('session_expired')
    const fresh = await signIn(rolled.body.api_key)
    expect((await as(fresh, '/api/v1/account')).status).toBe(200)
    merchant.key = rolled.body.api_key

    // Sessions ended more than a week ago are deleted at the account's next sign-in; newer ones stay.
    const count = async () =>
      (await svc.sql<{ n: number }[]>`SELECT count(*)::int AS n FROM dashboard_sessions`)[0]!.n
    await svc.sql`UPDATE dashboard_sessions SET revoked_at = now() - interval '8 days' WHERE token_hash = ${hash}`
    const before = await count()
    await signIn(merchant.key)
    expect(await count()).toBe(before)
  })
})

describe('the dashboard page', () => {
  it('is static HTML under a strict CSP with content-hashed assets; nothing else answers under /dashboard', async () => {
    const page = await fetch(`${svc.url}/dashboard`)
    expect(page.status).toBe(200)
    expect(page.headers.get('content-type')).toMatch(/^text\/html/)
    expect(page.headers.get('cache-control')).toBe('no-store')
    const csp = page.headers.get('content-security-policy')!
    expect(csp).toMatch(/^default-src 'none'; style-src 'self'; script-src 'self'; connect-src 'self'/)
    expect(csp).not.toContain('unsafe')
    const html = await page.text()
    expect(html).not.toMatch(/<script>|<style|style="|\son[a-z]+="/)
    const assets = [...html.matchAll(/"(\/dashboard\/assets\/[\w.-]+)"/g)].map((m) => m[1]!)
    expect(assets).toHaveLength(2)
    for (const a of assets) {
      expect(a).toMatch(/\.[0-9a-f]{12}\.(js|css)$/)
      const r = await fetch(`${svc.url}${a}`)
      expect(r.status).toBe(200)
      expect(r.headers.get('cache-control')).toBe('public, max-age=31536000, immutable')
      expect(r.headers.get('x-content-type-options')).toBe('nosniff')
    }
    // The page's ES modules: each import names a sibling by its content hash, served like the rest.
    const modules = assets.filter((a) => /\/dashboard\.[0-9a-f]+\.js$/.test(a))
    for (let i = 0; i < modules.length; i++) {
      const text = await (await fetch(`${svc.url}${modules[i]}`)).text()
      for (const [, dep] of text.matchAll(/from '\.\/([\w.-]+)'/g)) {
        expect(dep).toMatch(/\.[0-9a-f]{12}\.js$/)
        const r = await fetch(`${svc.url}/dashboard/assets/${dep}`)
        expect(r.status, dep).toBe(200)
        expect(r.headers.get('content-type')).toMatch(/^text\/javascript/)
        if (!modules.includes(`/dashboard/assets/${dep}`)) modules.push(`/dashboard/assets/${dep}`)
      }
    }
    expect(modules.length).toBeGreaterThan(5)
    expect((await fetch(`${svc.url}/dashboard/`)).status).toBe(200)
    for (const [method, path] of [
      ['GET', '/dashboard/assets/dashboard.000000000000.js'],
      ['GET', '/dashboard/assets/api.js'],
      ['GET', '/dashboard/index.html'],
      ['POST', '/dashboard'],
    ] as const) {
      const r = await fetch(`${svc.url}${path}`, { method })
      expect(r.status, `${method} ${path}`).toBe(404)
      expect((await r.json()).error.code).toBe('route_not_found')
    }
  })
})

describe('what the dashboard reads', () => {
  it('filters calls by upstream status and time, and reports revenue per day and top endpoints', async () => {
    const ep = await svc.api('/api/v1/endpoints', {
      key: merchant.key,
      body: { upstream_url: upstream.url, price: 0.5, name: 'report me' },
    })
    for (const path of ['/echo', '/status/404']) {
      const hash = await payUsdc(payer, svc.chain.treasury, parseUnits('0.5', 6))
      const r = await fetch(`${ep.body.metered_url}${path}`, { headers: { 'x-payment': hash } })
      await r.arrayBuffer()
    }
    await svc.flushCaptures()
    const calls = (q: string) => svc.api(`/api/v1/calls?endpoint_id=${ep.body.id}${q}`, { key: merchant.key })
    expect((await calls('')).body.data).toHaveLength(2)
    expect((await calls('&upstream_status=2xx')).body.data.map((c: any) => c.upstream_status)).toEqual([200])
    expect((await calls('&upstream_status=404')).body.data.map((c: any) => c.upstream_status)).toEqual([404])
    const today = new Date().toISOString().slice(0, 10)
    const tomorrow = new Date(Date.now() + 86_400_000).toISOString().slice(0, 10)
    expect((await calls(`&created_gte=${today}&created_lt=${tomorrow}`)).body.data).toHaveLength(2)
    expect((await calls(`&created_gte=${tomorrow}`)).body.data).toHaveLength(0)
    for (const bad of ['&upstream_status=6xx', '&created_gte=yesterday', '&created_lt=2026-13-45']) {
      const r = await calls(bad)
      expect(r.status, bad).toBe(400)
      expect(r.body.error.code).toBe('invalid_parameter')
    }

    const report = (await svc.api('/api/v1/reports/revenue?days=3', { key: merchant.key })).body
    expect(report.days.map((d: any) => d.date)).toHaveLength(3)
    expect(report.days[2]).toMatchObject({ date: today, calls: 2, amount: 1, amount_atomic: '1000000' })
    expect(report.days[0].amount_atomic).toBe('0')
    expect(report.top_endpoints[0]).toMatchObject({ endpoint_id: ep.body.id, name: 'report me', calls: 2 })
    expect((await svc.api('/api/v1/reports/revenue?days=91', { key: merchant.key })).status).toBe(400)
  })
})
