// server.workers: 2 on the embedded database (no NOTIFY between processes): an endpoint changed through one
// worker is served at its new terms by every worker as soon as the change's API call answers, and the
// Grafana dashboard's variables and panels find their series in the parent's aggregated /metrics.
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { fundedAccount } from '../helpers/accounts.ts'
import { callApi } from '../helpers/api.ts'
import { type ChildService, startChildService } from '../helpers/child-service.ts'
import { startUpstream, type Upstream } from '../helpers/upstream.ts'
import { waitFor } from '../helpers/wait-for.ts'

const DASHBOARD = join(import.meta.dirname, '../../grafana/dashboards/tollgate.json')

/**
 * Unpaid calls, each on a fresh connection so the kernel (SO_REUSEPORT) picks a worker per call: with 2
 * workers, 24 calls all landing on one worker has probability 2^-23.
 */
async function probe(service: ChildService, endpointId: string, n = 24) {
  return Promise.all(
    Array.from({ length: n }, async () => {
      const r = await fetch(`${service.url}/m/${endpointId}/echo`, { headers: { connection: 'close' } })
      const body = (await r.json()) as { price?: number }
      return { status: r.status, price: body.price ?? null }
    }),
  )
}

interface Readyz {
  status: string
  checks: Array<{ pids: number[] }>
}

describe('two workers on the embedded database', () => {
  let service: ChildService
  let upstream: Upstream
  let key: string

  // The start is the slow part, not what is tested: three processes compiling src/ with tsx and a fresh
  // embedded database migrated from nothing. 36 s alone on a slow machine of this kind, and past the 60 s
  // hook budget there under CI's two test lanes side by side (the server lane's copy: 51 s); given 180 s.
  beforeAll(async () => {
    const owner = await fundedAccount(0n)
    upstream = await startUpstream()
    service = await startChildService({
      databaseUrl: null,
      treasuryKey: owner.privateKey,
      env: { WORKERS: '2' },
      settings: { jobs: { enabled: false } },
      startTimeoutMs: 150_000,
    })
    await waitFor(
      async () => {
        const r = await fetch(`${service.adminUrl}/readyz`).catch(() => null)
        const body = (await r?.json()) as Readyz | undefined
        return body?.status === 'ready' && body.checks[0]!.pids.length === 2
      },
      { timeoutMs: 60_000, intervalMs: 50, what: 'both workers ready' },
    )
    const reg = await callApi(service.url, '/api/v1/register', {
      body: { wallet_address: owner.address, business_name: 'Workers' },
    })
    expect(reg.status).toBe(201)
    key = reg.body.api_key
  }, 180_000)
  afterAll(async () => {
    await service?.kill()
    await upstream?.close()
  })

  it('a repriced, then disabled endpoint is served at its new terms by every worker at once', async () => {
    const ep = await callApi(service.url, '/api/v1/endpoints', {
      key,
      body: { upstream_url: upstream.url, price: 0.01 },
    })
    expect(ep.status).toBe(201)
    const id = ep.body.id as string
    // Both workers load it into their caches (TTL 60 s): from here a stale worker would answer from memory.
    expect(await probe(service, id)).toEqual(Array(24).fill({ status: 402, price: 0.01 }))

    const repriced = await callApi(service.url, `/api/v1/endpoints/${id}`, {
      method: 'PATCH',
      key,
      body: { price: 0.02 },
    })
    expect(repriced.status).toBe(200)
    expect(await probe(service, id)).toEqual(Array(24).fill({ status: 402, price: 0.02 }))

    const disabled = await callApi(service.url, `/api/v1/endpoints/${id}`, {
      method: 'PATCH',
      key,
      body: { status: 'disabled' },
    })
    expect(disabled.status).toBe(200)
    expect((await probe(service, id)).map((r) => r.status)).toEqual(Array(24).fill(404))
    // Nothing was forwarded: every call above was unpaid.
    expect(upstream.count()).toBe(0)
  })

  it("every dashboard variable and panel query names a series the parent's /metrics exports", async () => {
    const text = await (await fetch(`${service.adminUrl}/metrics`)).text()
    // Series with at least one sample (a # TYPE line alone gives Grafana's label_values nothing).
    const sampled = new Set(
      [...text.matchAll(/^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{[^}]*\})? /gm)].map((m) => m[1]!),
    )
    const dashboard = JSON.parse(readFileSync(DASHBOARD, 'utf8'))
    const variables: Array<{ name: string; query: { query: string } | string }> = dashboard.templating.list
    expect(variables.length).toBeGreaterThan(0)
    for (const v of variables) {
      const query = typeof v.query === 'string' ? v.query : v.query.query
      const m = /^label_values\((\w+),\s*(\w+)\)$/.exec(query)
      expect(m, `${v.name}: ${query}`).not.toBeNull()
      // The label itself (instance) is Prometheus's, added at scrape: the series must exist to carry it.
      expect(sampled, `variable ${v.name} reads ${m![1]}`).toContain(m![1])
    }
    const used = new Set<string>()
    for (const panel of dashboard.panels) {
      for (const t of panel.targets ?? []) {
        for (const m of (t.expr as string).matchAll(/\b(tollgate_[a-z0-9_]+)/g)) used.add(m[1]!)
      }
    }
    expect(used.size).toBeGreaterThan(25)
    const exported = new Set([...text.matchAll(/^# TYPE (\S+) /gm)].map((m) => m[1]!))
    for (const name of used) {
      const family = exported.has(name) ? name : name.replace(/_(bucket|sum|count)$/, '')
      expect(exported, `panel metric ${name}`).toContain(family)
    }
  })
})
