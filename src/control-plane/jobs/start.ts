// The background subsystem's start(deps): leadership, every module's periodic jobs, their readiness checks
// and admin routes. Jobs that send from the treasury share one lock, held around nonces and broadcasts only.
import type { ChainContext } from '../../chain/connect.ts'
import type { Config } from '../../config/schema.ts'
import type { Sql } from '../../db/sql.ts'
import type { Logger } from '../../observability/logger.ts'
import type { Started } from '../../subsystem.ts'
import { expireUncapturedClaims } from './claim-expiry.ts'
import { createEmbeddedVacuumJobs } from './embedded-vacuum.ts'
import { startLeadership } from './leader.ts'
import { createOperationalGauges } from './ops-gauges.ts'
import { createPartitionJobs } from './partitions.ts'
import { createPaymentJobs } from './payment-expiry.ts'
import { createPayoutJobs } from './payout-batcher.ts'
import { createRetentionJobs } from './retention.ts'
import { type BackgroundModule, type JobDeps, type JobRunner, startJobs } from './runner.ts'
import { createSettleAfterCallJobs } from './settle-after-call.ts'
import { createVoucherClaimerJobs } from './voucher-claimer.ts'
import { createWebhookJobs } from './webhook-dispatcher.ts'

export interface Background extends Started {
  jobs: JobRunner
}

export async function startBackground(deps: {
  sql: Sql
  config: Config
  logger: Logger
  chain: ChainContext
  /** The embedded single-session database: this process is the leader without a lock. */
  embedded: boolean
  publicUrl(): string
  /** false: this process never runs the jobs (every worker but the first on an embedded database). */
  runJobs?: boolean
}): Promise<Background> {
  const { sql, config, logger } = deps
  const leadership = await startLeadership(sql, { embedded: deps.embedded, retryMs: 2_000, logger })
  const jobDeps: JobDeps = {
    sql,
    config,
    logger,
    chain: deps.chain,
    embedded: deps.embedded,
    publicUrl: deps.publicUrl,
  }
  // Payouts and settlements both send from the treasury: one sender at a time, so their nonces never collide.
  const treasurySends = createMutex()
  const modules: BackgroundModule[] = [
    {
      jobs: [
        {
          name: 'claim-expiry',
          intervalMs: config.jobs.expiry_interval_ms,
          run: () => expireUncapturedClaims(sql),
        },
      ],
    },
    createPaymentJobs(jobDeps),
    createWebhookJobs(jobDeps),
    // Payouts and settlement take the treasury lock only around nonce assignment, signing and broadcasts.
    createPayoutJobs(jobDeps, { treasuryLock: treasurySends }),
    // x402 exact authorizations and upto permits (for their calls' charges), each scheme its job, same lock.
    createSettleAfterCallJobs(jobDeps, { treasuryLock: treasurySends }),
    // x402 batch-settlement: channel deposits/refunds and batched voucher claims, same lock.
    createVoucherClaimerJobs(jobDeps, { treasuryLock: treasurySends }),
    createOperationalGauges(jobDeps),
    createRetentionJobs(jobDeps),
    createPartitionJobs(jobDeps),
    // The embedded database has no autovacuum: its tables are vacuumed here (nothing on a server).
    createEmbeddedVacuumJobs(jobDeps),
  ]
  const enabled = config.jobs.enabled && deps.runJobs !== false
  const jobs = startJobs(enabled ? modules.flatMap((m) => m.jobs) : [], {
    leadership,
    logger,
  })
  return {
    jobs,
    readiness: modules.flatMap((m) => m.readiness ?? []),
    adminRoutes: Object.assign({}, ...modules.map((m) => m.adminRoutes ?? {})),
    async stop() {
      await jobs.stop()
      for (const m of modules) await m.stop?.()
    },
  }
}

/** Runs the functions it is given one after another (a promise-chain mutex). */
function createMutex(): <T>(fn: () => Promise<T>) => Promise<T> {
  let tail: Promise<unknown> = Promise.resolve()
  return (fn) => {
    const run = tail.then(fn, fn)
    tail = run.catch(() => {})
    return run
  }
}
