// The background subsystem's start(deps): leadership, every module's periodic jobs, their readiness checks
// and admin routes. Jobs that send from the treasury say so (usesTreasury) and run one at a time.
import type { ChainContext } from '../../chain/connect.ts'
import type { Config } from '../../config/schema.ts'
import type { Sql } from '../../db/sql.ts'
import type { Logger } from '../../observability/logger.ts'
import type { Started } from '../../subsystem.ts'
import { expireUncapturedClaims } from './claim-expiry.ts'
import { startLeadership } from './leader.ts'
import { createOperationalGauges } from './ops-gauges.ts'
import { createPaymentJobs } from './payment-expiry.ts'
import { createPayoutJobs } from './payout-batcher.ts'
import { type BackgroundModule, type Job, type JobDeps, type JobRunner, startJobs } from './runner.ts'
import { createSettlementJobs } from './settlement-batcher.ts'
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
    createPayoutJobs(jobDeps),
    // Settlement takes the treasury lock only around its nonce assignment and broadcasts.
    createSettlementJobs(jobDeps, { treasuryLock: treasurySends }),
    createOperationalGauges(jobDeps),
  ]
  const enabled = config.jobs.enabled && deps.runJobs !== false
  const jobs = startJobs(
    enabled
      ? serializeTreasuryJobs(
          modules.flatMap((m) => m.jobs),
          treasurySends,
        )
      : [],
    {
      leadership,
      logger,
    },
  )
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

/** Payouts and settlements both send from the treasury: one at a time, so their nonces never collide. */
function serializeTreasuryJobs(jobs: Job[], treasurySends: ReturnType<typeof createMutex>): Job[] {
  return jobs.map((job) => (job.usesTreasury ? { ...job, run: () => treasurySends(() => job.run()) } : job))
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
