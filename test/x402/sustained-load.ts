// Measurement: x402 settlement keeps up with intake. Run: `npx tsx test/x402/sustained-load.ts [calls] [concurrency]`
// (DATABASE_URL for a PostgreSQL server, else embedded PGlite). Signs every header first (published x402
// client, one fresh authorization each), serves them, then waits for the backlog to drain and checks that
// every served call settled, none expired, revenue == settled × price, payers debited exactly, reconcile 0.
import { fire, startX402Setup, waitForDrain } from './harness.ts'

const calls = Number(process.argv[2] ?? 2000)
const concurrency = Number(process.argv[3] ?? 64)
const jobsIdle = process.env.SETTLE_IDLE === '1'
/** Authorizations per settlement transaction (1: one transaction each, as without the AuthorizationBatcher). */
const perTransaction = Number(process.env.SETTLE_PER_TX ?? 50)

const setup = await startX402Setup({
  overrides: { settlement: { interval_ms: jobsIdle ? 3_600_000 : 200, per_transaction: perTransaction } },
  logLevel: 'error',
})
let failed = false
try {
  const t0 = performance.now()
  const signed = await setup.sign(calls)
  const signMs = performance.now() - t0
  const payers = setup.chain.payers.slice(0, 4).map((p) => p.address)
  const before = await Promise.all(payers.map((p) => setup.balanceOf(p)))

  // Backlog sampled during the load too.
  let maxBacklog = 0
  let sampling = true
  const sampler = (async () => {
    while (sampling) {
      const s = await setup.settlementState()
      maxBacklog = Math.max(maxBacklog, s.backlog)
      // A sampling period, not a wait for a condition.
      await new Promise((r) => setTimeout(r, 250))
    }
  })()
  const load = await fire(
    setup,
    signed.map((s) => s.header),
    concurrency,
  )
  const atEnd = await setup.settlementState()
  const treasury = setup.chain.treasury.address
  const nonceBefore = await setup.svc.chain.publicClient.getTransactionCount({ address: treasury })
  const runStarted = performance.now()
  if (jobsIdle) await setup.svc.jobs.runNow('x402-settlement')
  const settleRunMs = performance.now() - runStarted
  const drain = await waitForDrain(setup, 300_000)
  sampling = false
  await sampler
  const totalS = (load.elapsedMs + drain.drainedMs) / 1000

  const after = await Promise.all(payers.map((p) => setup.balanceOf(p)))
  const debited = before.reduce((a, b) => a + b, 0n) - after.reduce((a, b) => a + b, 0n)
  const share = (setup.priceAtomic * BigInt(setup.svc.config.fees.owner_share_bps)) / 10_000n
  const served = load.statuses.get(200) ?? 0
  const s = drain.state
  const differences = await setup.reconcileDifferences()
  const checks = {
    all_served: served === calls,
    all_settled: s.settled === served && s.captured === served,
    zero_expired: s.expired === 0 && s.reverted === 0,
    revenue_only_settled:
      s.ownerShareAtomic === BigInt(s.settled) * share &&
      s.feeAtomic === BigInt(s.settled) * (setup.priceAtomic - share) &&
      s.unsettledBookedEntries === 0,
    payers_debited_exactly: debited === BigInt(s.settled) * setup.priceAtomic,
    reconcile_clean: differences.length === 0,
  }
  failed = Object.values(checks).some((ok) => !ok)
  console.log(
    JSON.stringify(
      {
        calls,
        concurrency,
        statuses: Object.fromEntries(load.statuses),
        sign_s: +(signMs / 1000).toFixed(1),
        served_per_s: Math.round(load.callsPerS),
        settled_at_load_end: atEnd.settled,
        per_transaction: perTransaction,
        ...(jobsIdle ? { settle_run_ms: Math.round(settleRunMs) } : {}),
        treasury_transactions_after_load:
          (await setup.svc.chain.publicClient.getTransactionCount({ address: treasury })) - nonceBefore,
        drain_after_load_ms: Math.round(drain.drainedMs),
        settled_per_s_overall: Math.round(s.settled / totalS),
        max_backlog: Math.max(maxBacklog, drain.maxBacklog),
        settled: s.settled,
        expired: s.expired,
        reverted: s.reverted,
        owner_share_atomic: s.ownerShareAtomic.toString(),
        fee_atomic: s.feeAtomic.toString(),
        debited_atomic: debited.toString(),
        reconcile_differences: differences,
        checks,
      },
      null,
      2,
    ),
  )
} finally {
  await setup.stop()
}
process.exit(failed ? 1 : 0)
