// The month partitions of the per-call history (migration 0041), on the leader: `partitions` makes the
// current and next two months and moves rows that fell into a default partition into their month, and the
// day partitions of claims (migration 0055) from the oldest accepted proof to one day ahead;
// `history-archive` (retention by partitions, retention.archive_after_months > 0) archives months older than
// that to files and drops them whole (src/books/archive.ts), never row by row. A month whose money is still
// open is left for a later run.
import { ArchiveRefused, archiveMonths } from '../../books/archive.ts'
import { addMonths, ensureClaimPartitions, ensurePartitions, monthOf } from '../../db/partitions.ts'
import type { BackgroundModule, JobDeps } from './runner.ts'

export async function archiveOldMonths(
  deps: Pick<JobDeps, 'sql' | 'config' | 'logger'>,
  nowMs: number,
): Promise<{ archived: string[]; refused: string | null }> {
  const keep = deps.config.retention.archive_after_months
  if (keep === 0) return { archived: [], refused: null }
  const before = addMonths(monthOf(nowMs), -keep)
  try {
    const done = await archiveMonths(deps.sql, { before, outDir: deps.config.retention.archive_dir, nowMs })
    return { archived: done.map((d) => d.month), refused: null }
  } catch (err) {
    if (!(err instanceof ArchiveRefused)) throw err
    deps.logger.warn('history archive refused', { before, reason: err.message })
    return { archived: [], refused: err.message }
  }
}

export function createPartitionJobs(deps: JobDeps, now: () => number = Date.now): BackgroundModule {
  const interval = deps.config.retention.partitions_interval_ms
  return {
    jobs: [
      {
        name: 'partitions',
        intervalMs: interval,
        run: async () => {
          const nowMs = now()
          const created = await ensurePartitions(deps.sql, { nowMs })
          // Claims by the day of their proof's time, from the oldest transaction still accepted.
          const { chain, retention } = deps.config
          const oldestMs = nowMs - chain.max_proof_age_ms - retention.claims_margin_ms
          created.push(...(await ensureClaimPartitions(deps.sql, { nowMs, oldestMs })))
          if (created.length > 0) deps.logger.info('history partitions created', { created })
          return { created }
        },
      },
      {
        name: 'history-archive',
        intervalMs: interval,
        run: async () => {
          const r = await archiveOldMonths(deps, now())
          if (r.archived.length > 0) deps.logger.info('history months archived', { months: r.archived })
          return r
        },
      },
    ],
  }
}
