// The admin port: loopback by default in every environment, operator routes behind ADMIN_TOKEN, /reconcile
// rate limited; /metrics, /healthz and /readyz stay open (Prometheus and probes carry no token).
import { describe, expect, it } from 'vitest'
import { ConfigError, loadConfig } from '../../src/config/load.ts'
import { startAdminServer } from '../../src/observability/admin.ts'
import { createLogger } from '../../src/observability/logger.ts'
import { RateLimiter } from '../../src/rate-limit.ts'

const TOKEN = 'admin-token-0123456789abcdef'

async function adminWith(token: string | null, limiter: RateLimiter | null = null) {
  let calls = 0
  const server = await startAdminServer({
    host: '127.0.0.1',
    port: 0,
    checks: [{ name: 'always', check: async () => ({ ok: true }) }],
    logger: createLogger('silent'),
    token,
    routeLimiter: limiter,
    routes: {
      '/reconcile': async () => {
        calls++
        return { status: 200, body: { treasury: 'secret-ish totals' } }
      },
    },
  })
  return { server, url: `http://127.0.0.1:${server.port}`, calls: () => calls }
}

describe('admin configuration', () => {
  it('binds the admin server to loopback in production while the public server listens on all addresses', () => {
    const c = loadConfig({
      env: {
        NODE_ENV: 'production',
        TREASURY_PRIVATE_KEY: `0x${'1'.repeat(64)}`,
        RPC_URL: 'http://rpc.invalid',
        NETWORK: 'base-sepolia',
      },
    })
    expect(c.server.host).toBe('0.0.0.0')
    expect(c.admin.host).toBe('127.0.0.1')
    expect(loadConfig({ env: {} }).admin.host).toBe('127.0.0.1')
    expect(loadConfig({ env: { ADMIN_HOST: '10.0.0.5' } }).admin.host).toBe('10.0.0.5')
  })

  it('takes ADMIN_TOKEN from the environment only, never enumerable, and refuses a short one', () => {
    const c = loadConfig({ env: { ADMIN_TOKEN: TOKEN } })
    expect(c.secrets.admin_token).toBe(TOKEN)
    expect(JSON.stringify(c)).not.toContain(TOKEN)
    expect(loadConfig({ env: {} }).secrets.admin_token).toBeNull()
    expect(() => loadConfig({ env: { ADMIN_TOKEN: 'short' } })).toThrow(ConfigError)
  })
})

describe('admin routes', () => {
  it('without a token the operator routes are off; metrics and probes stay open', async () => {
    const admin = await adminWith(null)
    try {
      const r = await fetch(`${admin.url}/reconcile`)
      expect(r.status).toBe(404)
      expect((await r.json()).error.code).toBe('admin_route_disabled')
      expect(admin.calls()).toBe(0)
      for (const path of ['/metrics', '/healthz', '/readyz'])
        expect((await fetch(admin.url + path)).status).toBe(200)
    } finally {
      admin.server.close()
    }
  })

  it('with a token: 401 without it or with a wrong one, 200 with it; nothing runs for a refused call', async () => {
    const admin = await adminWith(TOKEN)
    try {
      const none = await fetch(`${admin.url}/reconcile`)
      expect(none.status).toBe(401)
      expect(none.headers.get('www-authenticate')).toBe('Bearer')
      expect((await none.json()).error.code).toBe('admin_unauthorized')
      const wrong = await fetch(`${admin.url}/reconcile`, { headers: { authorization: `Bearer ${TOKEN}x` } })
      expect(wrong.status).toBe(401)
      expect(await wrong.text()).not.toContain(TOKEN)
      expect(admin.calls()).toBe(0)
      const ok = await fetch(`${admin.url}/reconcile`, { headers: { authorization: `Bearer ${TOKEN}` } })
      expect(ok.status).toBe(200)
      expect(admin.calls()).toBe(1)
    } finally {
      admin.server.close()
    }
  })

  it('/reconcile is rate limited even for the operator, with Retry-After', async () => {
    const limiter = new RateLimiter('admin', { burst: 2, per_minute: 6 }, { maxKeys: 10 })
    const admin = await adminWith(TOKEN, limiter)
    const auth = { authorization: `Bearer ${TOKEN}` }
    try {
      expect((await fetch(`${admin.url}/reconcile`, { headers: auth })).status).toBe(200)
      expect((await fetch(`${admin.url}/reconcile`, { headers: auth })).status).toBe(200)
      const third = await fetch(`${admin.url}/reconcile`, { headers: auth })
      expect(third.status).toBe(429)
      expect(third.headers.get('retry-after')).toBe('10')
      expect(third.headers.get('ratelimit-policy')).toBe('"admin";q=6;w=60')
      expect(admin.calls()).toBe(2)
      // Unauthenticated calls do not spend the operator's bucket: they are refused before it.
      expect((await fetch(`${admin.url}/reconcile`)).status).toBe(401)
    } finally {
      admin.server.close()
    }
  })
})
