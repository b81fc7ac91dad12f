// `npm run chaos`: the full chaos run (CHAOS_PROOFS, default 2,000, over the faults in CHAOS_FAULTS).
// Prints one row per fault, then the jobs-killed-mid-run report, and exits 1 when a proof was served twice,
// a payer was charged for a call that was not served, an instance crashed, or a killed job lost or doubled
// money, or the failover round under synchronous replication forgot a served proof. Everything it starts
// stops by itself (hard limit 30 min).

import { type FaultName, formatTable, runChaos } from './harness.ts'
import { formatJobKills, runJobKills } from './job-kills.ts'
import { runFailoverModes } from './run-failover.ts'

const ALL: FaultName[] = ['kill', 'pg-restart', 'rpc', 'upstream', 'pg-restart']

const HELP = `usage: npm run chaos [-- --help]

The full chaos run, about 20 minutes: a private PostgreSQL cluster, anvil behind a faulty proxy and two
tollgate processes; one fault per round, then background jobs killed mid-run. Exits 1 on a proof served
twice, a payer charged for a call not served, a crashed instance, or a killed job that lost or doubled money.

environment:
  CHAOS_PROOFS (2000)  CHAOS_FAULTS (${ALL.join(',')})  CHAOS_ROUND_MS (15000)
  CHAOS_CONCURRENCY (16)  CHAOS_JOB_KILLS (1; 0 skips the job kills)  CHAOS_AUTHORIZATIONS (40)
A bounded version runs in npm test (test/chaos/).
`
const args = process.argv.slice(2)
// `npm run chaos --help` (no --) reaches the script as npm_config_help on some npm versions.
if (args.includes('--help') || args.includes('-h') || process.env.npm_config_help === 'true') {
  process.stdout.write(HELP)
  process.exit(0)
}
if (args.length > 0) {
  process.stderr.write(`chaos: unknown argument ${args[0]} (settings are environment variables)\n\n${HELP}`)
  process.exit(2)
}
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
