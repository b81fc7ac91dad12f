// Runs the periodic background jobs on the leader only. Each job runs alone (never overlapping itself).
import type { ChainContext } from '../../chain/connect.ts'
import type { Config } from '../../config/schema.ts'
import type { Sql } from '../../db/sql.ts'
import type { ReadinessCheck } from '../../observability/admin.ts'
import type { Logger } from '../../observability/logger.ts'
import { traced } from '../../observability/tracing.ts'
import type { Leadership } from './leader.ts'

/** What every background module is given by the wiring. */
export interface JobDeps {
  sql: Sql
  config: Config
  logger: Logger
  chain: ChainContext
  /** Whether the database is the embedded single-session one (no LISTEN, one connection). */
  embedded: boolean
  /** Base of payment_url and metered_url. */
  publicUrl(): string
}

/** A background feature: its periodic jobs, readiness checks and admin-port routes. */
export interface BackgroundModule {
  jobs: Job[]
  readiness?: ReadinessCheck[]
  adminRoutes?: Record<string, () => Promise<{ status: number; body: unknown }>>
  /** Called on shutdown, after the jobs stopped. */
  stop?(): Promise<void>
}

export interface Job {
  name: string
  intervalMs: number
  run(): Promise<unknown>
}

/**
 * Runs its function alone among the treasury's senders: payouts and x402 settlements share one nonce
 * sequence, so each holds this from its nonce read to its broadcasts (never while awaiting receipts).
 */
export type TreasuryLock = <T>(fn: () => Promise<T>) => Promise<T>
export const unlocked: TreasuryLock = (fn) => fn()

export interface JobRunner {
  /** Runs a job now (tests, and early triggers such as a payout threshold). */
  runNow(name: string): Promise<void>
  stop(): Promise<void>
}

export function startJobs(jobs: Job[], options: { leadership: Leadership; logger: Logger }): JobRunner {
  const running = new Map<string, Promise<void>>()
  const timers: NodeJS.Timeout[] = []
  let stopped = false

  const runJob = (job: Job): Promise<void> => {
    const current = running.get(job.name)
    if (current) return current
    const p = (async () => {
      try {
        // A span per run when tracing is on (payout batch, settlement batch, …); a plain call otherwise.
        await traced(`job ${job.name}`, () => job.run(), { 'tollgate.job': job.name })
      } catch (err) {
        options.logger.error('background job failed', { job: job.name, err })
      } finally {
        running.delete(job.name)
      }
    })()
    running.set(job.name, p)
    return p
  }

  for (const job of jobs) {
    const timer = setInterval(() => {
      if (!stopped && options.leadership.isLeader()) void runJob(job)
    }, job.intervalMs)
    timer.unref()
    timers.push(timer)
  }

  return {
    async runNow(name) {
      const job = jobs.find((j) => j.name === name)
      if (!job) throw new Error(`no job ${name}`)
      await runJob(job)
    },
    async stop() {
      stopped = true
      for (const t of timers) clearInterval(t)
      await Promise.allSettled([...running.values()])
      await options.leadership.stop()
    },
  }
}
