// `npm run chaos`: the full chaos run (CHAOS_PROOFS, default 2,000, over the faults in CHAOS_FAULTS).
// Prints one row per fault and exits 1 when a proof was served twice, a payer was charged for a call
// that was not served, or an instance crashed. Everything it starts stops by itself (hard limit 20 min).
import { type FaultName, formatTable, runChaos } from './harness.ts'

const ALL: FaultName[] = ['kill', 'pg-restart', 'rpc', 'upstream', 'pg-restart']
const faults = (process.env.CHAOS_FAULTS?.split(',') as FaultName[] | undefined) ?? ALL
const hardLimit = setTimeout(() => {
  process.stderr.write('chaos: hard time limit reached\n')
  process.exit(2)
}, 20 * 60_000)
hardLimit.unref()

const result = await runChaos({
  proofs: Number(process.env.CHAOS_PROOFS ?? 2_000),
  faults,
  roundMs: Number(process.env.CHAOS_ROUND_MS ?? 15_000),
  concurrency: Number(process.env.CHAOS_CONCURRENCY ?? 16),
  log: (line) => process.stdout.write(`${line}\n`),
})
process.stdout.write(`\n${formatTable(result)}\n`)
for (const out of result.crashOutput) process.stdout.write(`\n--- crashed instance ---\n${out}\n`)
process.exit(result.ok ? 0 : 1)
