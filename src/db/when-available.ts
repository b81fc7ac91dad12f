// Retries a write while the database cannot be reached (a restart, a failover, a lost connection), for
// writes that record what already happened elsewhere and must not be dropped: a confirmed transaction's
// outcome, read from its receipt, exists nowhere else once the job that read it has given up.
import { isDatabaseUnavailable } from './unavailable.ts'

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))

/**
 * Runs `write` until it succeeds; an error that is not the database being unreachable, or one still
 * failing after `timeoutMs`, is thrown. The write must be idempotent: a commit whose answer was lost with
 * the connection runs again.
 */
export async function whenAvailable<T>(write: () => Promise<T>, q: { timeoutMs: number }): Promise<T> {
  const deadline = Date.now() + q.timeoutMs
  // Back-off from 100 ms to 2 s: a restarted server is back within seconds; no tight loop meanwhile.
  for (let waitMs = 100; ; waitMs = Math.min(waitMs * 2, 2_000)) {
    try {
      return await write()
    } catch (err) {
      if (!isDatabaseUnavailable(err) || Date.now() + waitMs > deadline) throw err
      await sleep(waitMs)
    }
  }
}
