// `npm run chaos:failover` (and the end of `npm run chaos`): the failover round once per replication mode
// (CHAOS_FAILOVER_MODES, default async, sync-on, sync-remote-apply), printing one row per mode. Exits 1 when
// the recommended mode (synchronous) served a proof twice or charged for a call not served.
import { type FailoverResult, formatFailover, runFailover } from './failover.ts'
import type { ReplicationMode } from './pg-standby.ts'

export async function runFailoverModes(log: (line: string) => void): Promise<{
  results: FailoverResult[]
  ok: boolean
}> {
  const modes = (process.env.CHAOS_FAILOVER_MODES?.split(',') as ReplicationMode[] | undefined) ?? [
    'async',
    'sync-on',
    'sync-remote-apply',
  ]
  const results: FailoverResult[] = []
  for (const mode of modes) {
    results.push(
      await runFailover({
        mode,
        steadyProofs: Number(process.env.CHAOS_FAILOVER_STEADY ?? 1_000),
        failoverProofs: Number(process.env.CHAOS_FAILOVER_PROOFS ?? 600),
        roundMs: Number(process.env.CHAOS_FAILOVER_ROUND_MS ?? 12_000),
        concurrency: Number(process.env.CHAOS_CONCURRENCY ?? 16),
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
  return { results, ok }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const hardLimit = setTimeout(() => {
    process.stderr.write('chaos failover: hard time limit reached\n')
    process.exit(2)
  }, 20 * 60_000)
  hardLimit.unref()
  const { results, ok } = await runFailoverModes((line) => process.stdout.write(`${line}\n`))
  process.stdout.write(`\n${formatFailover(results)}\n`)
  process.exit(ok ? 0 : 1)
}
