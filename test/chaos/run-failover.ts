// `npm run chaos:failover` (and the end of `npm run chaos`): what each replication mode costs (one rig, modes
// interleaved), the failover round once per mode (CHAOS_FAILOVER_MODES, default async, sync-on,
// sync-remote-apply), and the synchronous standby stopped under load; one table each. Exits 1 when a
// synchronous mode lost a claim or served a proof twice, someone was charged for a call not served, or an
// instance crashed.
import {
  type CostResult,
  type FailoverResult,
  formatCost,
  formatFailover,
  measureReplicationCost,
  runFailover,
  runStandbyOutage,
  type StandbyOutageResult,
} from './failover.ts'
import type { ReplicationMode } from './pg-standby.ts'

export async function runFailoverModes(log: (line: string) => void): Promise<{
  cost: CostResult[]
  results: FailoverResult[]
  outage: StandbyOutageResult | null
  ok: boolean
  report: string
}> {
  const modes = (process.env.CHAOS_FAILOVER_MODES?.split(',') as ReplicationMode[] | undefined) ?? [
    'async',
    'sync-on',
    'sync-remote-apply',
  ]
  const concurrency = Number(process.env.CHAOS_CONCURRENCY ?? 16)
  const proofsPerPhase = Number(process.env.CHAOS_COST_PROOFS ?? 500)
  // CHAOS_COST_ROUNDS=0 skips the cost measurement.
  const rounds = Number(process.env.CHAOS_COST_ROUNDS ?? 3)
  const cost =
    rounds > 0 ? await measureReplicationCost({ modes, rounds, proofsPerPhase, concurrency, log }) : []
  const results: FailoverResult[] = []
  // CHAOS_FAILOVER_PROOFS=0 skips the failover rounds (the cost measurement alone).
  const failoverProofs = Number(process.env.CHAOS_FAILOVER_PROOFS ?? 600)
  for (const mode of failoverProofs > 0 ? modes : []) {
    results.push(
      await runFailover({
        mode,
        steadyProofs: Number(process.env.CHAOS_FAILOVER_STEADY ?? 1_000),
        failoverProofs,
        roundMs: Number(process.env.CHAOS_FAILOVER_ROUND_MS ?? 12_000),
        concurrency,
        log,
      }),
    )
  }
  const ok = results.every(
    (r) =>
      (r.mode === 'async' || (r.servedTwice === 0 && r.claimsLost === 0)) &&
      r.chargedNotServed === 0 &&
      r.crashed === 0,
  )
  // The synchronous standby away for a while under load (CHAOS_STANDBY_OUTAGE_MS=0 skips it).
  const downMs = Number(process.env.CHAOS_STANDBY_OUTAGE_MS ?? 5_000)
  const outage =
    downMs > 0 ? await runStandbyOutage({ downMs, proofs: 400, roundMs: 15_000, concurrency, log }) : null
  const report = [
    ...(cost.length ? [formatCost(cost, concurrency, proofsPerPhase), ''] : []),
    ...(results.length ? [formatFailover(results)] : []),
    ...(outage
      ? [
          '',
          `synchronous standby down ${outage.downMs} ms under paid load: ${outage.served} of ${outage.proofs} served, ` +
            `${outage.gaveUp} gave up, ${outage.status503} 503s, ${outage.networkErrors} client timeouts (6 s), ` +
            `slowest served call ${outage.slowestMs} ms, crashed ${outage.crashed}`,
        ]
      : []),
  ].join('\n')
  return { cost, results, outage, ok: ok && (outage?.crashed ?? 0) === 0, report }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const hardLimit = setTimeout(() => {
    process.stderr.write('chaos failover: hard time limit reached\n')
    process.exit(2)
  }, 20 * 60_000)
  hardLimit.unref()
  const { report, ok } = await runFailoverModes((line) => process.stdout.write(`${line}\n`))
  process.stdout.write(`\n${report}\n`)
  process.exit(ok ? 0 : 1)
}
