// /readyz answers within its own deadline whatever a dependency does: a check that never settles (a query
// waiting on a database being restarted, a frozen server) is reported failed by name, in time. A degraded
// check (ok, but the operator must know) keeps it 200 and says so.
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { type AdminServer, READY_TIMEOUT_MS, startAdminServer } from '../../src/observability/admin.ts'
import { createLogger } from '../../src/observability/logger.ts'

describe('/readyz deadline', () => {
  let admin: AdminServer
  beforeAll(async () => {
    admin = await startAdminServer({
      host: '127.0.0.1',
      port: 0,
      logger: createLogger('silent'),
      readyTimeoutMs: 300,
      checks: [
        { name: 'database', check: () => new Promise(() => {}) },
        { name: 'chain', check: async () => ({ ok: true }) },
      ],
    })
  })
  afterAll(() => admin?.close())

  it('answers 503 in time naming the check that hung, the others as they are', async () => {
    const t = performance.now()
    const res = await fetch(`http://127.0.0.1:${admin.port}/readyz`, { signal: AbortSignal.timeout(10_000) })
    const took = performance.now() - t
    expect(res.status).toBe(503)
    const body = (await res.json()) as { checks: Array<{ name: string; ok: boolean; detail?: string }> }
    expect(body.checks).toEqual([
      { name: 'database', ok: false, detail: 'no answer within 300 ms' },
      { name: 'chain', ok: true },
    ])
    expect(took).toBeGreaterThanOrEqual(290)
    expect(took).toBeLessThan(3_000)
  })

  it('has a default deadline below a scrape sample and a typical probe timeout', () => {
    expect(READY_TIMEOUT_MS).toBeLessThanOrEqual(2_000)
  })
})

describe('/readyz with a degraded check', () => {
  it('stays 200, says degraded, and names the check and why', async () => {
    const admin = await startAdminServer({
      host: '127.0.0.1',
      port: 0,
      logger: createLogger('silent'),
      checks: [
        { name: 'database', check: async () => ({ ok: true }) },
        {
          name: 'replication',
          check: async () => ({ ok: true, degraded: true, detail: 'asynchronous_standbys: s1 (async)' }),
        },
      ],
    })
    try {
      const res = await fetch(`http://127.0.0.1:${admin.port}/readyz`)
      expect(res.status).toBe(200)
      expect(await res.json()).toEqual({
        status: 'degraded',
        checks: [
          { name: 'database', ok: true },
          { name: 'replication', ok: true, degraded: true, detail: 'asynchronous_standbys: s1 (async)' },
        ],
      })
    } finally {
      admin.close()
    }
  })
})
