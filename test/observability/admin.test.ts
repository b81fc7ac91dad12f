import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { startTestService, type TestService } from '../helpers/service.ts'

let svc: TestService
beforeAll(async () => {
  svc = await startTestService()
})
afterAll(() => svc?.stop())

describe('admin port', () => {
  it('says healthy and ready when the database and the chain answer', async () => {
    const health = await fetch(`http://127.0.0.1:${svc.adminPort}/healthz`)
    expect(health.status).toBe(200)
    const ready = await fetch(`http://127.0.0.1:${svc.adminPort}/readyz`)
    expect(ready.status).toBe(200)
    const body = await ready.json()
    expect(body.status).toBe('ready')
    expect(body.checks.map((c: { name: string }) => c.name)).toEqual(
      expect.arrayContaining(['database', 'chain']),
    )
  })

  it('exports request counts by route group and status class, and the process metrics', async () => {
    await svc.api('/api/v1/account')
    const text = await (await fetch(`http://127.0.0.1:${svc.adminPort}/metrics`)).text()
    expect(text).toMatch(/tollgate_http_requests_total\{route="api",status_class="4xx"\} [1-9]/)
    expect(text).toContain('tollgate_http_request_duration_seconds_bucket')
    expect(text).toContain('tollgate_nodejs_eventloop_lag_p99_seconds')
  })

  it('every metric a Grafana panel queries is exported', async () => {
    const text = await (await fetch(`http://127.0.0.1:${svc.adminPort}/metrics`)).text()
    const exported = new Set([...text.matchAll(/^# TYPE (\S+) (\S+)/gm)].map((m) => m[1]!))
    const dashboard = JSON.parse(
      readFileSync(join(import.meta.dirname, '../../grafana/dashboards/tollgate.json'), 'utf8'),
    )
    const used = new Set<string>()
    for (const panel of dashboard.panels) {
      for (const t of panel.targets ?? []) {
        for (const m of t.expr.matchAll(/\b(tollgate_[a-z0-9_]+)/g)) used.add(m[1])
      }
    }
    expect(used.size).toBeGreaterThan(5)
    // A histogram's series carry _bucket/_sum/_count; a gauge may be named …_count itself.
    for (const name of used) {
      const family = exported.has(name) ? name : name.replace(/_(bucket|sum|count)$/, '')
      expect(exported, name).toContain(family)
    }
  })
})
