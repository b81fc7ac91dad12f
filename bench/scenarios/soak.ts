// npm run bench -- soak: 60 s on one tollgate in six 10 s windows, its RSS sampled after each window.
// The 402 path, at full load: a paid soak would need one on-chain transfer per request (~300k for 60 s).
import { readFileSync } from 'node:fs'
import { load } from '../load.ts'
import { type ScenarioResult, withRatio } from '../report.ts'
import { type Context, settings } from './context.ts'

export async function runSoak(ctx: Context): Promise<{
  scenarios: ScenarioResult[]
  samples: Array<{ window_s: string; rss_mb: number; p99_us: number; rps: number }>
}> {
  const warm = ctx.tollgates.warm!
  const url = await warm.metered('/data')
  for (let i = 0; i < 200; i++) await fetch(url).then((r) => r.arrayBuffer())
  const windowS = Number(process.env.BENCH_SOAK_WINDOW_S ?? 10)
  const windows = Number(process.env.BENCH_SOAK_WINDOWS ?? 6)
  const scenarios: ScenarioResult[] = []
  const samples: Array<{ window_s: string; rss_mb: number; p99_us: number; rps: number }> = []
  for (let w = 0; w < windows; w++) {
    const m = await load({ url, connections: settings.connections, durationS: windowS, expectStatus: 402 })
    const rss = rssMb(warm.pid!)
    const name = `soak ${w * windowS}-${(w + 1) * windowS} s`
    scenarios.push(withRatio(name, m, null, `rss ${rss} MB`))
    samples.push({
      window_s: `${w * windowS}-${(w + 1) * windowS}`,
      rss_mb: rss,
      p99_us: m.p99_us,
      rps: m.rps,
    })
    process.stdout.write(`  ${name}: ${m.rps} req/s p99 ${m.p99_us} µs rss ${rss} MB errors ${m.errors}\n`)
  }
  const first = samples[0]!
  const last = samples.at(-1)!
  const rssDrift = (last.rss_mb - first.rss_mb) / first.rss_mb
  const p99Ratio = Math.max(...samples.map((s) => s.p99_us)) / first.p99_us
  process.stdout.write(
    `soak: RSS ${first.rss_mb} → ${last.rss_mb} MB (${(rssDrift * 100).toFixed(1)} %, target ±10 %), worst p99 ${p99Ratio.toFixed(2)}× the first window (target ≤ 2×)\n`,
  )
  return { scenarios, samples }
}

function rssMb(pid: number): number {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8')
  const kb = Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? 0)
  return Math.round(kb / 1024)
}
