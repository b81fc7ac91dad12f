// npm run bench -- --readme [results.json]: the README's front table from a committed results file (the
// newest in bench/results by default), peers' rows beside ours, with the command that produced it.
import { readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import type { ScenarioResult } from './report.ts'

const ROWS: Array<[string, string]> = [
  ['direct', 'upstream called directly (the ceiling)'],
  ['nginx', '**peer:** nginx, plain keep-alive reverse proxy, no payment'],
  ['bare-uws', '**peer:** bare uWS app answering the same static 402'],
  ['x402-reference', '**peer:** x402 reference (`@x402/express` + in-process facilitator), paid'],
  ['challenge', 'tollgate 402 path (no proof)'],
  ['paid-warm', 'tollgate paid, pre-verified proofs (built, 1 process)'],
  ['paid-warm-tsx', 'same on tsx instead of the build'],
  ['workers-2', 'same with `server.workers: 2`'],
  ['paid-cold', 'tollgate paid, cold verification (RPC per proof)'],
  ['x402', 'tollgate x402, fresh EIP-3009 authorization per call'],
  ['x402-batch', 'tollgate x402 batch-settlement, one channel per connection, a voucher per call'],
  ['paid-256k', 'tollgate paid, 256 KB answers'],
  ['payment-create', '`POST /api/v1/payments`'],
  ['checkout-page', 'hosted checkout page'],
]

export function readmeTable(dir: string, file?: string): string {
  const path =
    file ??
    join(
      dir,
      readdirSync(dir)
        .filter((f) => f.endsWith('.json'))
        .sort()
        .at(-1)!,
    )
  const run = JSON.parse(readFileSync(path, 'utf8')) as {
    machine: { command?: string; database?: string }
    scenarios: ScenarioResult[]
  }
  const by = new Map(run.scenarios.map((s) => [s.name, s]))
  const n = (x: number) => x.toLocaleString('en-US')
  const lines = [
    `| scenario (one run, \`${run.machine.command ?? 'npm run bench'}\`, ${run.machine.database ?? ''}) | req/s | p50 ms | p99 ms | errors | ratio to direct | machine CPU busy |`,
    '|---|---|---|---|---|---|---|',
  ]
  for (const [name, label] of ROWS) {
    const r = by.get(name)
    if (!r) continue
    lines.push(
      `| ${label} | ${n(r.rps)} | ${r.p50_ms.toFixed(1)} | ${r.p99_ms.toFixed(1)} | ${r.errors} | ${r.ratio_to_direct?.toFixed(2) ?? '–'} | ${r.machine_cpu_pct === undefined ? '–' : `${r.machine_cpu_pct} %`} |`,
    )
  }
  return `${lines.join('\n')}\n\nFrom [\`${path.slice(path.lastIndexOf('bench/results'))}\`](${path.slice(path.lastIndexOf('bench/results'))}).`
}
