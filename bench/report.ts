// Prints the scenario table (req/s, latency percentiles, errors, ratio to the upstream called directly) and
// writes bench/results/<date>.json as {"machine":{…},"scenarios":[…]}.
import { mkdirSync, writeFileSync } from 'node:fs'
import { cpus, freemem, loadavg, totalmem } from 'node:os'
import { join } from 'node:path'
import type { Measured } from './load.ts'

export interface ScenarioResult extends Measured {
  name: string
  ratio_to_direct: number | null
  note?: string
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

export function writeResults(
  dir: string,
  meta: Record<string, unknown>,
  scenarios: ScenarioResult[],
  extra: Record<string, unknown> = {},
): string {
  mkdirSync(dir, { recursive: true })
  const file = join(dir, `${new Date().toISOString().replace(/:/g, '-').replace(/\..*/, '')}.json`)
  writeFileSync(file, `${JSON.stringify({ machine: meta, scenarios, ...extra }, null, 2)}\n`)
  return file
}
