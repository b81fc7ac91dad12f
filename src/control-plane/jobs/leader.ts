// One leader per database for the background jobs: a session-level advisory lock held on a dedicated
// connection. If the leader dies, its session ends, the lock is freed and another instance takes over.
import type { Sql } from '../../db/sql.ts'
import type { Logger } from '../../observability/logger.ts'
import { jobLeader } from '../../observability/metrics.ts'

const LEADER_LOCK_KEY = 7_301_002

export interface Leadership {
  isLeader(): boolean
  stop(): Promise<void>
}

/**
 * Tries for the lock every retryMs. The reserved connection keeps the session (and so the lock) alive;
 * the embedded database is a single session, so there the one process is always the leader.
 */
export async function startLeadership(
  sql: Sql,
  options: { embedded: boolean; retryMs: number; logger: Logger },
): Promise<Leadership> {
  if (options.embedded) {
    jobLeader.set(1)
    return { isLeader: () => true, stop: async () => jobLeader.set(0) }
  }
  let conn = await sql.reserve()
  let leader = false
  let stopped = false
  let checking = false
  const attempt = async () => {
    // A check can outlast the interval while the database is unreachable: one at a time.
    if (stopped || checking) return
    checking = true
    try {
      if (leader) {
        // The lock lives as long as the session: a database restart ends both. Step down at once (the
        // next attempt competes again on a fresh session) rather than run beside a new leader.
        await conn`SELECT 1`
        return
      }
      const [row] = await conn<{ ok: boolean }[]>`SELECT pg_try_advisory_lock(${LEADER_LOCK_KEY}) AS ok`
      if (row?.ok && !leader) {
        leader = true
        jobLeader.set(1)
        options.logger.info('background jobs: this instance is the leader')
      }
    } catch (err) {
      options.logger.warn('leadership check failed; the session is renewed', { err, was_leader: leader })
      if (leader) {
        leader = false
        jobLeader.set(0)
      }
      conn.release()
      conn = await sql.reserve()
    } finally {
      checking = false
    }
  }
  await attempt()
  const timer = setInterval(attempt, options.retryMs)
  timer.unref()
  return {
    isLeader: () => leader,
    async stop() {
      stopped = true
      clearInterval(timer)
      if (leader) {
        await conn`SELECT pg_advisory_unlock(${LEADER_LOCK_KEY})`.catch(() => {})
        leader = false
        jobLeader.set(0)
      }
      conn.release()
    },
  }
}
