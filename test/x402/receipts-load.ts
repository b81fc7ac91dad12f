// Measurement: what settling before the answer costs against settling after. Run:
//   npx tsx test/x402/receipts-load.ts <after|before> [saturatedS] [pacedS] [connections]
// (DATABASE_URL for a PostgreSQL server, else embedded PGlite; `before` sets settlement.before_answer.enabled,
// the default of every endpoint that does not choose). One service on a private anvil (automine,
// AuthorizationBatcher present) per run: a closed-loop run at `connections` gives calls/s, then an open-loop
// run at half that rate gives the latency (bench/paced.ts: measured from when each request was due). Every
// request carries a fresh authorization signed beforehand by the published `x402` client. At the end: the
// transactions sent per call (treasury and settler nonces), and the books checked: every served call settled,
// payers debited exactly, reconcile clean.

import { load } from '../../bench/load.ts'
import { paced } from '../../bench/paced.ts'
import { devAccount } from '../../src/chain/dev-accounts.ts'
import { registry } from '../../src/observability/metrics.ts'
import { startX402Setup, waitForDrain } from './harness.ts'

// Where the paced run's time went, from the service's own histograms (same process): settle-before-answer's
// phases (absent in builds without them) and the claim/capture writes it waits behind.
const PROFILED = [
  'tollgate_x402_settle_before_answer_phase_seconds',
  'tollgate_x402_settle_before_answer_batch_size',
  'tollgate_books_write_duration_seconds',
]

function resetProfile(): void {
  for (const name of PROFILED)
    (registry.getSingleMetric(name) as { reset?: () => void } | undefined)?.reset?.()
}

/** Per label set: count, mean and the bucket bound holding the median (ms for durations). */
async function profile(): Promise<Record<string, unknown>> {
  const out: Record<string, unknown> = {}
  for (const name of PROFILED) {
    const metric = registry.getSingleMetric(name)
    if (metric === undefined) continue
    const { values } = await metric.get()
    const groups = new Map<string, { count: number; sum: number; buckets: Array<[number, number]> }>()
    for (const v of values as Array<(typeof values)[number] & { metricName?: string }>) {
      const labels = v.labels as Record<string, string | number>
      const key = String(labels.phase ?? 'all')
      const g = groups.get(key) ?? { count: 0, sum: 0, buckets: [] }
      if (v.metricName?.endsWith('_count')) g.count = v.value
      else if (v.metricName?.endsWith('_sum')) g.sum = v.value
      else if (labels.le !== undefined && labels.le !== '+Inf') g.buckets.push([Number(labels.le), v.value])
      groups.set(key, g)
    }
    const unit = name.endsWith('_seconds') ? 1000 : 1
    for (const [key, g] of groups) {
      if (g.count === 0) continue
      const median = g.buckets.find(([, c]) => c >= g.count / 2)?.[0] ?? null
      out[`${name.replace('tollgate_', '')}${key === 'all' ? '' : `{${key}}`}`] = {
        count: g.count,
        mean: +((g.sum / g.count) * unit).toFixed(2),
        median_at_most: median === null ? null : median * unit,
      }
    }
  }
  return out
}

const mode = process.argv[2] === 'before' ? 'before' : 'after'
const saturatedS = Number(process.argv[3] ?? 5)
const pacedS = Number(process.argv[4] ?? 5)
const connections = Number(process.argv[5] ?? 32)
const settler = devAccount(8)

const setup = await startX402Setup({
  overrides: {
    settlement: {
      interval_ms: 200,
      before_answer: { enabled: mode === 'before', window_ms: 3, wait_ms: 5_000 },
    },
  },
  env: { SETTLER_PRIVATE_KEY: settler.privateKey },
  logLevel: 'error',
})
let failed = false
try {
  const client = setup.svc.chain.publicClient
  const nonces = () =>
    Promise.all([
      client.getTransactionCount({ address: setup.chain.treasury.address }),
      client.getTransactionCount({ address: settler.address }),
    ])
  // Enough headers for the saturated run at a generous rate; the paced run gets its own.
  const sign = async (n: number) => (await setup.sign(n)).map((s) => s.header)
  const saturatedHeaders = await sign(Math.ceil(saturatedS * 600))
  const payers = setup.chain.payers.slice(0, 4).map((p) => p.address)
  const before = await Promise.all(payers.map((p) => setup.balanceOf(p)))
  const [t0, s0] = await nonces()

  const saturated = await load({
    url: setup.meteredUrl,
    connections,
    durationS: saturatedS,
    perRequest: { header: 'x-payment', values: saturatedHeaders },
    expectStatus: 200,
  })
  const rate = Math.max(1, Math.floor(saturated.rps / 2))
  const pacedHeaders = await sign(Math.ceil(rate * pacedS))
  resetProfile()
  const half = await paced({
    url: setup.meteredUrl,
    rate,
    durationS: pacedS,
    connections,
    warmupS: 1,
    perRequest: { header: 'x-payment', values: pacedHeaders },
    expectStatus: 200,
  })
  const pacedProfile = await profile()
  const drain = await waitForDrain(setup, 300_000)
  const [t1, s1] = await nonces()
  const after = await Promise.all(payers.map((p) => setup.balanceOf(p)))
  const debited = before.reduce((a, b) => a + b, 0n) - after.reduce((a, b) => a + b, 0n)
  const s = drain.state
  const differences = await setup.reconcileDifferences()
  const checks = {
    all_settled: s.settled === s.captured && s.expired === 0 && s.reverted === 0,
    payers_debited_exactly: debited === BigInt(s.settled) * setup.priceAtomic,
    reconcile_clean: differences.length === 0,
  }
  failed = Object.values(checks).some((ok) => !ok)
  const transactions = t1 - t0 + (s1 - s0)
  console.log(
    JSON.stringify(
      {
        mode,
        connections,
        saturated: {
          calls_per_s: Math.round(saturated.rps),
          p50_ms: saturated.p50_ms,
          p99_ms: saturated.p99_ms,
        },
        half_load: {
          rate,
          p50_ms: half.p50_ms,
          p90_ms: half.p90_ms,
          p99_ms: half.p99_ms,
          errors: half.errors,
          wrong_status: half.wrong_status,
        },
        served: s.captured,
        settled: s.settled,
        transactions: { treasury: t1 - t0, settler: s1 - s0 },
        transactions_per_call: +(transactions / Math.max(1, s.captured)).toFixed(4),
        half_load_profile: pacedProfile,
        checks,
        reconcile_differences: differences,
      },
      null,
      2,
    ),
  )
} finally {
  await setup.stop()
}
process.exit(failed ? 1 : 0)
