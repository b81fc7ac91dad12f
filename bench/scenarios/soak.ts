// The 60 s soak (in the full run, or alone with `npm run bench -- soak`): a tollgate instance of its own,
// warmed up for 5 s, at full load on the 402 path in six 10 s windows, its RSS sampled every 2 s throughout.
// The summary says whether RSS stayed flat (± 10 %) and whether p99 stayed within 2× of the first window's.
// The 402 path: a paid soak would need one on-chain transfer per request (~300k for 60 s).
import { readFileSync } from 'node:fs'
import { load } from '../load.ts'
import { type ScenarioResult, type SoakSummary, withRatio } from '../report.ts'
import { type Context, settings } from './context.ts'

const RSS_EVERY_MS = 2_000

export async function runSoak(ctx: Context): Promise<{ scenarios: ScenarioResult[]; soak: SoakSummary }> {
  const target = ctx.tollgates.soak!
  const url = await target.metered('/data')
  const windowS = Number(process.env.BENCH_SOAK_WINDOW_S ?? 10)
  const windows = Number(process.env.BENCH_SOAK_WINDOWS ?? 6)
  // A fresh instance: JIT and heap sizing first (5 s of the same load, not measured), then the soak.
  await load({ url, connections: settings.connections, durationS: 5, expectStatus: 402 })
  const started = performance.now()
  const rss: SoakSummary['rss_samples'] = []
  const sample = async () => {
    const t_s = Math.round((performance.now() - started) / 100) / 10
    const rss_mb = rssMb(target.pid!)
    rss.push({ t_s, rss_mb, ...(await heapMb(target.adminPort)) })
  }
  await sample()
  const sampler = setInterval(() => void sample(), RSS_EVERY_MS)
  const scenarios: ScenarioResult[] = []
  const done: SoakSummary['windows'] = []
  try {
    for (let w = 0; w < windows; w++) {
      const m = await load({ url, connections: settings.connections, durationS: windowS, expectStatus: 402 })
      const span = `${w * windowS}-${(w + 1) * windowS}`
      scenarios.push(withRatio(`soak ${span} s`, m, ctx.rps.get('direct') ?? null))
      done.push({ window_s: span, rps: m.rps, p99_us: m.p99_us, errors: m.errors })
      process.stdout.write(`  soak ${span} s: ${m.rps} req/s p99 ${m.p99_us} µs errors ${m.errors}\n`)
    }
  } finally {
    clearInterval(sampler)
  }
  await sample()
  const soak = summarize(windowS, rss, done)
  process.stdout.write(
    `soak: RSS ${soak.rss_first_mb} → max ${soak.rss_max_mb} → ${soak.rss_last_mb} MB (drift ${soak.rss_drift_pct} %, ${soak.rss_flat ? 'flat' : 'NOT flat'}); p99 first ${soak.p99_first_us} µs, worst after ${soak.p99_rest_worst_us} µs (${soak.p99_ratio}×, ${soak.p99_flat ? 'flat' : 'NOT flat'})\n`,
  )
  return { scenarios, soak }
}

function summarize(
  windowS: number,
  rss: SoakSummary['rss_samples'],
  windows: SoakSummary['windows'],
): SoakSummary {
  const first = rss[0]!.rss_mb
  const drift = Math.max(...rss.map((s) => Math.abs(s.rss_mb - first))) / first
  const p99First = windows[0]!.p99_us
  const p99Rest = Math.max(0, ...windows.slice(1).map((w) => w.p99_us))
  const p99Ratio = Math.round((p99Rest / p99First) * 100) / 100
  return {
    window_s: windowS,
    rss_samples: rss,
    windows,
    rss_first_mb: first,
    rss_max_mb: Math.max(...rss.map((s) => s.rss_mb)),
    rss_last_mb: rss.at(-1)!.rss_mb,
    rss_drift_pct: Math.round(drift * 1000) / 10,
    rss_flat: drift <= 0.1,
    p99_first_us: p99First,
    p99_rest_worst_us: p99Rest,
    p99_ratio: p99Ratio,
    p99_flat: p99Ratio <= 2,
  }
}

/** The instance's heap figures from its /metrics (prom-client's default Node.js metrics), in MB. */
async function heapMb(adminPort: number) {
  try {
    const text = await (await fetch(`http://127.0.0.1:${adminPort}/metrics`)).text()
    const mb = (name: string) => {
      const m = new RegExp(`^tollgate_nodejs_${name} (\\S+)$`, 'm').exec(text)
      return m ? Math.round(Number(m[1]) / 1048576) : undefined
    }
    return {
      heap_used_mb: mb('heap_size_used_bytes'),
      heap_total_mb: mb('heap_size_total_bytes'),
      external_mb: mb('external_memory_bytes'),
    }
  } catch {
    return {}
  }
}

function rssMb(pid: number): number {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8')
  const kb = Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? 0)
  return Math.round(kb / 1024)
}
