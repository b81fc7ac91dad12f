import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { fundedAccount, payUsdc } from '../helpers/accounts.ts'
import { registerMerchant, startTestService, type TestService } from '../helpers/service.ts'
import { startUpstream, type Upstream } from '../helpers/upstream.ts'

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

async function scrape(): Promise<string> {
  return (await fetch(`http://127.0.0.1:${svc.adminPort}/metrics`)).text()
}

/** The sample count of the upstream's time-to-headers histogram for 2xx answers (0 before the first). */
function upstreamAnswers(text: string): number {
  const m = /^tollgate_upstream_duration_seconds_count\{status_class="2xx"\} (\d+)$/m.exec(text)
  return m === null ? 0 : Number(m[1])
}

/** Claim/capture statements timed so far. */
function booksWritesTimed(text: string): number {
  const m = /^tollgate_books_write_duration_seconds_count (\d+)$/m.exec(text)
  return m === null ? 0 : Number(m[1])
}

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
    const text = await scrape()
    expect(text).toMatch(/tollgate_http_requests_total\{route="api",status_class="4xx"\} [1-9]/)
    expect(text).toContain('tollgate_http_request_duration_seconds_bucket')
    expect(text).toContain('tollgate_nodejs_eventloop_lag_p99_seconds')
  })

  it("times the upstream's answer of a paid call (time to response headers) and its claim's write", async () => {
    const first = await scrape()
    const before = upstreamAnswers(first)
    const writesBefore = booksWritesTimed(first)
    const merchant = await registerMerchant(svc)
    const ep = await svc.api('/api/v1/endpoints', {
      key: merchant.key,
      body: { upstream_url: `${upstream.url}/echo`, price: 0.01 },
    })
    expect(ep.status).toBe(201)
    const payer = await fundedAccount(10_000_000n)
    const hash = await payUsdc(payer, svc.chain.treasury, 10_000n)
    const paid = await fetch((ep.body as { metered_url: string }).metered_url, {
      headers: { 'x-payment': hash },
    })
    expect(paid.status).toBe(200)
    await paid.arrayBuffer()
    const text = await scrape()
    expect(upstreamAnswers(text)).toBe(before + 1)
    expect(text).toMatch(/^tollgate_upstream_duration_seconds_sum\{status_class="2xx"\} [0-9.e-]+$/m)
    // The claim's statement at least (its capture may ride with it or follow alone).
    expect(booksWritesTimed(text)).toBeGreaterThan(writesBefore)
  })

  it('every metric a Grafana panel queries is exported', async () => {
    const text = await scrape()
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
