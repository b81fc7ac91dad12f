// Prints the scenario table (req/s, latency percentiles, errors, ratio to the upstream called directly) and
// writes bench/results/<date>-<what>.json (resultsName) as {"machine":{…},"scenarios":[…]}.
import { mkdirSync, writeFileSync } from 'node:fs'
import { cpus, freemem, loadavg, totalmem } from 'node:os'
import { join } from 'node:path'
import type { Measured } from './load.ts'

export interface ScenarioResult extends Measured {
  name: string
  ratio_to_direct: number | null
  note?: string
  /** CPU µs per request of the proxy under test, the upstream and the PostgreSQL server (bench/cpu.ts). */
  cpu_us_per_req?: Record<string, number>
  /** How long the bench waited for the instances and their databases to go quiet before this scenario. */
  quiet_wait_ms?: number
}

export function withRatio(
  name: string,
  m: Measured,
  directRps: number | null,
  note?: string,
): ScenarioResult {
  return {
    name,
    ...m,
    ratio_to_direct: directRps ? Math.round((m.rps / directRps) * 1000) / 1000 : null,
    ...(note ? { note } : {}),
  }
}

export function formatRow(r: ScenarioResult): string {
  return `| ${r.name} | ${r.rps} | ${r.p50_ms} | ${r.p90_ms} | ${r.p99_ms} | ${r.p99_us} | ${r.max_ms} | ${r.errors} | ${r.ratio_to_direct ?? '–'} |${r.note ? ` ${r.note}` : ''}`
}

export function table(results: ScenarioResult[]): string {
  return [
    '| scenario | req/s | p50 ms | p90 ms | p99 ms | p99 µs | max ms | errors | ratio to direct |',
    '|---|---|---|---|---|---|---|---|---|',
    ...results.map(formatRow),
  ].join('\n')
}

export function machine(extra: Record<string, unknown>): Record<string, unknown> {
  const c = cpus()
  return {
    cpus: c.length,
    cpu_model: c[0]?.model ?? 'unknown',
    memory_gb: Math.round(totalmem() / 2 ** 30),
    free_memory_gb: Math.round(freemem() / 2 ** 30),
    node: process.version,
    // Other work on the machine during the run (1, 5, 15 min): figures are only comparable within one run.
    load_average: loadavg().map((x) => Math.round(x * 100) / 100),
    platform: `${process.platform} ${process.arch}`,
    date: new Date().toISOString(),
    ...extra,
  }
}

/** What the bench's soak measured: RSS and heap samples and its windows (bench/scenarios/soak.ts fills it). */
export interface SoakSummary {
  window_s: number
  /** heap_*: the V8 heap (used / reserved) and memory outside it, from the instance's own metrics. */
  rss_samples: Array<{
    t_s: number
    rss_mb: number
    heap_used_mb?: number
    heap_total_mb?: number
    external_mb?: number
  }>
  windows: Array<{ window_s: string; rps: number; p99_us: number; errors: number }>
  rss_first_mb: number
  rss_max_mb: number
  rss_last_mb: number
  /** Largest distance of any sample from the first, in % of the first. */
  rss_drift_pct: number
  rss_flat: boolean
  p99_first_us: number
  /** The worst p99 of the windows after the first. */
  p99_rest_worst_us: number
  p99_ratio: number
  p99_flat: boolean
}

/**
 * A results file is named for what it holds: `<date>-full.json` for a full run (the README's table reads the
 * newest of those), `<date>-<label>.json` for a labelled run (BENCH_LABEL, e.g. x402-before-6f4b488), and
 * `<date>-partial-<scenarios>.json` for a run of some scenarios, which is not committed.
 */
export function resultsName(
  date: Date,
  kind: { full: boolean; label?: string; scenarios: string[] },
): string {
  const stamp = date.toISOString().replace(/:/g, '-').replace(/\..*/, '')
  if (kind.label) return `${stamp}-${kind.label.replace(/[^a-z0-9.-]+/gi, '-')}.json`
  if (kind.full) return `${stamp}-full.json`
  return `${stamp}-partial-${kind.scenarios.filter((s) => s !== 'direct').join('-') || 'direct'}.json`
}

export function writeResults(
  dir: string,
  meta: Record<string, unknown>,
  scenarios: ScenarioResult[],
  extra: Record<string, unknown> = {},
  name = resultsName(new Date(), { full: true, scenarios: [] }),
): string {
  mkdirSync(dir, { recursive: true })
  const file = join(dir, name)
  writeFileSync(file, `${JSON.stringify({ machine: meta, scenarios, ...extra }, null, 2)}\n`)
  return file
}

export interface TargetCheck {
  name: string
  value: number
  target: string
  met: boolean
  /** What bounded the two runs: the machine's CPU busy in each (near 100 %: the cores were the limit). */
  limit?: string
}

/** The issue's targets that are ratios between two scenarios of this run (or a latency difference). */
const RATIO_TARGETS: Array<{ name: string; of: string; to: string; atLeast: number }> = [
  { name: 'paid-warm / nginx', of: 'paid-warm', to: 'nginx', atLeast: 0.5 },
  { name: 'challenge / bare-uws', of: 'challenge', to: 'bare-uws', atLeast: 0.8 },
  { name: 'x402 / x402-reference', of: 'x402', to: 'x402-reference', atLeast: 50 },
  { name: 'workers-2 / paid-warm', of: 'workers-2', to: 'paid-warm', atLeast: 1.5 },
]

/** Each target whose scenarios both ran, with its figure and whether it is met. */
export function targetChecks(results: ScenarioResult[], soak?: SoakSummary): TargetCheck[] {
  const by = new Map(results.map((r) => [r.name, r]))
  const checks: TargetCheck[] = []
  for (const t of RATIO_TARGETS) {
    const a = by.get(t.of)
    const b = by.get(t.to)
    if (!a || !b || b.rps === 0) continue
    const value = Math.round((a.rps / b.rps) * 1000) / 1000
    checks.push({
      name: t.name,
      value,
      target: `≥ ${t.atLeast}`,
      met: value >= t.atLeast,
      ...(a.machine_cpu_pct !== undefined && b.machine_cpu_pct !== undefined
        ? { limit: `machine CPU busy ${a.machine_cpu_pct} % / ${b.machine_cpu_pct} %` }
        : {}),
    })
  }
  const x402 = by.get('x402')
  if (x402?.settlement) {
    const { settled, failed, drain_ms } = x402.settlement
    checks.push({
      name: 'x402 failed settlements',
      value: failed,
      target: '= 0',
      met: failed === 0 && settled >= x402.requests,
      limit: `${settled} of ${x402.requests} settled, backlog drained ${drain_ms} ms after the load`,
    })
  }
  const cold = by.get('paid-cold')
  if (cold?.rpc_per_proof !== undefined) {
    const value = cold.rpc_per_proof
    checks.push({ name: 'paid-cold RPC requests per proof', value, target: '≤ 1', met: value <= 1 })
  }
  const paid = by.get('half-load-paid')
  const direct = by.get('half-load-direct')
  if (paid && direct) {
    const value = paid.p99_us - direct.p99_us
    // The paid path adds work to the direct one: a negative difference means the reference run was disturbed
    // (a stall of the machine or the load generator), not that paying is free. It is reported, never met.
    checks.push({
      name: 'added p99 µs at half load',
      value,
      target: '≤ 1000',
      met: value >= 0 && value <= 1000,
      limit:
        value < 0
          ? `not measured: the direct reference's p99 (${direct.p99_us} µs) is above the paid path's (${paid.p99_us} µs)`
          : `p99 ${paid.p99_us} µs paid / ${direct.p99_us} µs direct`,
    })
  }
  if (soak) {
    checks.push({ name: 'soak RSS drift %', value: soak.rss_drift_pct, target: '≤ 10', met: soak.rss_flat })
    checks.push({ name: 'soak p99 / first 10 s', value: soak.p99_ratio, target: '≤ 2', met: soak.p99_flat })
  }
  return checks
}

export function formatChecks(checks: TargetCheck[]): string {
  return checks
    .map(
      (c) =>
        `${c.name}: ${c.value} (target ${c.target}) ${c.met ? 'met' : 'NOT met'}${c.limit ? `; ${c.limit}` : ''}`,
    )
    .join('\n')
}

/** What one feature cost a paid call in this run: its scenario against its baseline (bench/scenarios/features.ts). */
export interface FeatureCost {
  feature: string
  scenario: string
  baseline: string
  /** Calls a second with the feature, over the baseline's (closed loop: both saturate the machine). */
  rps_ratio: number
  /** CPU µs a call added by the feature: the proxy (tollgate), and its PostgreSQL backends (server runs). */
  proxy_us_added: number | null
  database_us_added: number | null
  note?: string
}

/** Each feature whose scenario and baseline both ran, with what it added. */
export function featureCosts(
  results: ScenarioResult[],
  pairs: ReadonlyArray<{ feature: string; scenario: string; baseline: string; note?: string }>,
): FeatureCost[] {
  const by = new Map(results.map((r) => [r.name, r]))
  const added = (a: ScenarioResult, b: ScenarioResult, key: string) => {
    const x = a.cpu_us_per_req?.[key]
    const y = b.cpu_us_per_req?.[key]
    return x === undefined || y === undefined ? null : Math.round(x - y)
  }
  const costs: FeatureCost[] = []
  for (const p of pairs) {
    const a = by.get(p.scenario)
    const b = by.get(p.baseline)
    if (!a || !b || b.rps === 0) continue
    costs.push({
      ...p,
      rps_ratio: Math.round((a.rps / b.rps) * 1000) / 1000,
      proxy_us_added: added(a, b, 'proxy'),
      database_us_added: added(a, b, 'database'),
    })
  }
  return costs
}

export function formatFeatureCosts(costs: FeatureCost[]): string {
  if (costs.length === 0) return ''
  const rows = costs.map(
    (c) =>
      `| ${c.feature} | ${c.scenario} | ${c.baseline} | ${c.rps_ratio} | ${c.proxy_us_added ?? '–'} | ${c.database_us_added ?? '–'} |`,
  )
  return [
    '| feature | scenario | against | calls/s ratio | tollgate µs added | PostgreSQL µs added |',
    '|---|---|---|---|---|---|',
    ...rows,
    '',
  ].join('\n')
}
