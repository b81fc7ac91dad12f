// A real Prometheus scrapes a live tollgate; every dashboard panel expression, the dashboard's instance
// variable and every alert rule evaluate through Prometheus' HTTP API without error, on real samples.
import { type ChildProcess, execFileSync, spawn } from 'node:child_process'
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { createServer } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { startTestService, type TestService } from '../helpers/service.ts'
import { waitFor } from '../helpers/wait-for.ts'

const ROOT = join(import.meta.dirname, '../..')

function hasPrometheus(): boolean {
  try {
    execFileSync('prometheus', ['--version'], { stdio: 'ignore' })
    return true
  } catch {
    return false
  }
}

const available = hasPrometheus()
if (!available) {
  console.warn(
    '[test/observability/prometheus-live] skipped: the prometheus binary is not on PATH. Install it with `apt-get install -y prometheus` (Debian/Ubuntu) to check every dashboard and alert expression against a live scrape.',
  )
}

interface PanelTarget {
  panel: string
  expr: string
}

function dashboardTargets(): PanelTarget[] {
  const dashboard = JSON.parse(readFileSync(join(ROOT, 'grafana/dashboards/tollgate.json'), 'utf8'))
  const out: PanelTarget[] = []
  for (const panel of dashboard.panels) {
    for (const t of panel.targets ?? []) out.push({ panel: panel.title, expr: t.expr })
  }
  return out
}

/** Alert names in the rules file; their expressions are read back from Prometheus' own parse (/api/v1/rules). */
function alertNames(): string[] {
  const text = readFileSync(join(ROOT, 'deploy/alerts.yml'), 'utf8')
  return [...text.matchAll(/- alert: (\w+)/g)].map((m) => m[1]!)
}

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer()
    server.once('error', reject)
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number }
      server.close(() => resolve(port))
    })
  })
}

describe.skipIf(!available)('dashboards and alerts against a live Prometheus scrape', () => {
  let svc: TestService
  let prom: ChildProcess | null = null
  let promLog = ''
  let dir = ''
  let base = ''
  let instance = ''

  const query = async (expr: string) => {
    const res = await fetch(`${base}/api/v1/query?query=${encodeURIComponent(expr)}`)
    return (await res.json()) as {
      status: string
      error?: string
      data?: {
        resultType: string
        result: Array<{ metric: Record<string, string>; value: [number, string] }>
      }
    }
  }

  beforeAll(async () => {
    svc = await startTestService()
    instance = `127.0.0.1:${svc.adminPort}`
    // Some traffic on every route group the panels split by.
    await svc.api('/api/v1/account')
    await fetch(`${svc.url}/m/ep_doesnotexist`)
    await fetch(`${svc.url}/pay/pay_doesnotexist`, { headers: { accept: 'application/json' } })

    dir = mkdtempSync(join(tmpdir(), 'tollgate-prom-'))
    const port = await freePort()
    base = `http://127.0.0.1:${port}`
    writeFileSync(
      join(dir, 'prometheus.yml'),
      [
        'global:',
        '  scrape_interval: 1s',
        '  evaluation_interval: 1s',
        'rule_files:',
        `  - ${join(ROOT, 'deploy/alerts.yml')}`,
        'scrape_configs:',
        '  - job_name: tollgate',
        '    static_configs:',
        `      - targets: ['${instance}']`,
        '',
      ].join('\n'),
    )
    prom = spawn(
      'prometheus',
      [
        `--config.file=${join(dir, 'prometheus.yml')}`,
        `--storage.tsdb.path=${join(dir, 'data')}`,
        `--web.listen-address=127.0.0.1:${port}`,
        '--storage.tsdb.retention.time=1h',
      ],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    )
    prom.stdout?.on('data', (b) => {
      promLog += b
    })
    prom.stderr?.on('data', (b) => {
      promLog += b
    })
    await waitFor(async () => ((await fetch(`${base}/-/ready`)).ok ? true : null), {
      what: 'Prometheus to be ready',
      timeoutMs: 20_000,
      intervalMs: 250,
      retryErrors: true,
    })
    // Two scrapes at least, so rate() over the panels' windows has samples to work on.
    await waitFor(
      async () => {
        const r = await query(`count_over_time(up{job="tollgate",instance="${instance}"}[1m])`)
        const n = Number(r.data?.result[0]?.value[1] ?? 0)
        return n >= 2 ? n : null
      },
      { what: 'two scrapes of the admin port', timeoutMs: 20_000, intervalMs: 250, retryErrors: true },
    )
  }, 60_000)

  afterAll(async () => {
    if (prom && prom.exitCode === null) {
      const exited = new Promise((r) => prom!.once('exit', r))
      process.kill(prom.pid!, 'SIGTERM')
      await Promise.race([exited, new Promise((r) => setTimeout(r, 5_000))])
      if (prom.exitCode === null) process.kill(prom.pid!, 'SIGKILL')
    }
    await svc?.stop()
    if (dir) rmSync(dir, { recursive: true, force: true })
  })

  it('scrapes the admin port and sees the sampled operational gauges', async () => {
    const up = await query(`up{job="tollgate",instance="${instance}"}`)
    expect(up.data?.result[0]?.value[1], promLog).toBe('1')
    const ready = await query(`tollgate_readiness_check_ok{instance="${instance}"}`)
    const checks = Object.fromEntries(ready.data!.result.map((r) => [r.metric.check, r.value[1]]))
    expect(checks).toMatchObject({ database: '1', chain: '1' })
    for (const name of [
      'tollgate_webhooks_backlog_count',
      'tollgate_x402_settlement_backlog_count',
      'tollgate_payouts_owed_atomic',
      'tollgate_treasury_gas_wei',
    ]) {
      const r = await query(`${name}{instance="${instance}"}`)
      expect(r.data?.result.length, name).toBe(1)
    }
    // The test treasury is funded with gas (native currency) by the helpers.
    const gas = await query(`tollgate_treasury_gas_wei{instance="${instance}"}`)
    expect(Number(gas.data!.result[0]!.value[1])).toBeGreaterThan(0)
  })

  it('the instance variable lists this instance', async () => {
    // The series the dashboard's variable reads (one every instance exports, with or without workers).
    const dashboard = JSON.parse(readFileSync(join(ROOT, 'grafana/dashboards/tollgate.json'), 'utf8'))
    const variable = dashboard.templating.list.find((v: { name: string }) => v.name === 'instance')
    const series = /^label_values\((\w+), instance\)$/.exec(variable.query.query)![1]!
    const res = await fetch(`${base}/api/v1/label/instance/values?match[]=${encodeURIComponent(series)}`)
    const body = (await res.json()) as { status: string; data: string[] }
    expect(body.status).toBe('success')
    expect(body.data).toContain(instance)
  })

  it('every dashboard panel expression evaluates without error, for all instances and for this one', async () => {
    const targets = dashboardTargets()
    expect(targets.length).toBeGreaterThan(25)
    const withData: string[] = []
    for (const { panel, expr } of targets) {
      for (const value of ['.*', instance.replaceAll('.', '\\\\.')]) {
        const r = await query(expr.replaceAll('$instance', value))
        expect(r.status, `${panel}: ${expr}: ${r.error}`).toBe('success')
        if (value === '.*' && (r.data?.result.length ?? 0) > 0) withData.push(panel)
      }
    }
    // Not only syntax: panels on the metrics this instance has produced show series.
    for (const panel of [
      'Requests by route and status',
      'Readiness checks (1 = ok)',
      'Webhook backlog',
      'x402 settlement backlog',
      'Treasury USDC vs owed',
      'Job leader and DB pool',
    ])
      expect(withData, panel).toContain(panel)
  })

  it('every alert rule is loaded and evaluates on the live series without error', async () => {
    const names = alertNames()
    type Rule = { name: string; query: string; health: string; lastError?: string; lastEvaluation: string }
    const rules = await waitFor(
      async () => {
        const res = await fetch(`${base}/api/v1/rules?type=alert`)
        const body = (await res.json()) as { data: { groups: Array<{ rules: Rule[] }> } }
        const all = body.data.groups.flatMap((g) => g.rules)
        return all.length === names.length && all.every((r) => r.health !== 'unknown') ? all : null
      },
      { what: 'every alert rule evaluated', timeoutMs: 15_000, intervalMs: 250, retryErrors: true },
    )
    expect(rules.map((r) => r.name).sort()).toEqual([...names].sort())
    for (const r of rules) {
      expect(r.health, `${r.name}: ${r.lastError}`).toBe('ok')
      // And through the query API, as an operator pasting it would.
      const q = await query(r.query)
      expect(q.status, `${r.name}: ${q.error}`).toBe('success')
    }
  })
})
