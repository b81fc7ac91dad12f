// `npm run chaos`: the full chaos run (CHAOS_PROOFS, default 2,000, over the faults in CHAOS_FAULTS).
// Prints one row per fault, then the jobs-killed-mid-run report, and exits 1 when a proof was served twice,
// a payer was charged for a call that was not served, an instance crashed, or a killed job lost or doubled
// money, or the failover round under synchronous replication forgot a served proof. Everything it starts
// stops by itself (hard limit 30 min).

import { type FaultName, formatTable, runChaos } from './harness.ts'
import { formatJobKills, runJobKills } from './job-kills.ts'
import { runFailoverModes } from './run-failover.ts'

const ALL: FaultName[] = ['kill', 'pg-restart', 'rpc', 'upstream', 'pg-restart']
const faults = (process.env.CHAOS_FAULTS?.split(',') as FaultName[] | undefined) ?? ALL
const hardLimit = setTimeout(() => {
  process.stderr.write('chaos: hard time limit reached\n')
  process.exit(2)
}, 30 * 60_000)
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
// Then the background jobs killed mid-run: x402 settlement after its first broadcast, a payout batch after
// its broadcast (CHAOS_JOB_KILLS=0 skips it).
let jobsOk = true
if (process.env.CHAOS_JOB_KILLS !== '0') {
  const kills = await runJobKills({
    authorizations: Number(process.env.CHAOS_AUTHORIZATIONS ?? 40),
    log: (line) => process.stdout.write(`${line}\n`),
  })
  process.stdout.write(`\n${formatJobKills(kills)}\n`)
  jobsOk = kills.ok
}
// Then the failover round once per replication mode (CHAOS_FAILOVER=0 skips it; `npm run chaos:failover`
// runs it alone): promote the standby under paid load, count what each mode forgot.
let failoverOk = true
if (process.env.CHAOS_FAILOVER !== '0') {
  const failover = await runFailoverModes((line) => process.stdout.write(`${line}\n`))
  process.stdout.write(`\n${failover.report}\n`)
  failoverOk = failover.ok
}
process.exit(result.ok && jobsOk && failoverOk ? 0 : 1)
