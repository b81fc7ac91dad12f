// Prints the scenario table (throughput, latency percentiles, ratio to the ceiling) and writes JSON.
import { mkdirSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import type { Result } from 'autocannon'

export interface ScenarioResult {
  name: string
  requests_per_sec: number
  latency_ms: { p50: number; p90: number; p99: number; max: number }
  requests: number
  errors: number
  non_2xx: number
  ratio_to_ceiling: number
}

export function summarize(name: string, r: Result, ceilingRps: number | null): ScenarioResult {
  // total / elapsed, not the mean of per-second samples: a run bounded by a number of requests ends
  // mid-second, and that last partial sample would drag the mean down.
  const elapsedS = (new Date(r.finish).getTime() - new Date(r.start).getTime()) / 1000
  const rps = r.requests.total / elapsedS
  return {
    name,
    requests_per_sec: Math.round(rps),
    latency_ms: { p50: r.latency.p50, p90: r.latency.p90, p99: r.latency.p99, max: r.latency.max },
    requests: r.requests.total,
    errors: r.errors + r.timeouts,
    non_2xx: r.non2xx,
    ratio_to_ceiling: ceilingRps ? Math.round((rps / ceilingRps) * 100) / 100 : 1,
  }
}

export function printTable(results: ScenarioResult[]): string {
  const rows = [
    '| scenario | req/s | p50 ms | p99 ms | ratio to upstream direct | non-2xx | errors |',
    '|---|---|---|---|---|---|---|',
    ...results.map(
      (r) =>
        `| ${r.name} | ${r.requests_per_sec} | ${r.latency_ms.p50} | ${r.latency_ms.p99} | ${r.ratio_to_ceiling.toFixed(2)} | ${r.non_2xx} | ${r.errors} |`,
    ),
  ]
  const text = rows.join('\n')
  process.stdout.write(`\n${text}\n\n`)
  return text
}

export function writeResults(dir: string, meta: Record<string, unknown>, results: ScenarioResult[]): string {
  mkdirSync(dir, { recursive: true })
  const file = join(dir, `bench-${new Date().toISOString().replace(/[:.]/g, '-')}.json`)
  writeFileSync(file, `${JSON.stringify({ ...meta, results }, null, 2)}\n`)
  writeFileSync(join(dir, 'latest.json'), `${JSON.stringify({ ...meta, results }, null, 2)}\n`)
  return file
}
