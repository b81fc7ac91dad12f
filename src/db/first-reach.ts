// A worker's first statement to the parent's embedded database. PGlite's socket server serves one connection
// at a time, and a parent busy starting (two workers compiling and connecting at once, on a loaded machine)
// can take longer than the connect timeout to accept: the worker's start failed with CONNECT_TIMEOUT, it
// exited and the parent restarted it after a backoff (seen in CI, `test/data-plane/workers.test.ts`). The
// start now waits for the database instead, while it is only unreachable and within a budget; any other
// error still fails the start at once.
import { isDatabaseUnavailable } from './unavailable.ts'

export interface FirstReachOptions {
  /** How long the start may wait for the database in all. */
  budgetMs: number
  /** Pause between attempts. */
  pauseMs?: number
  onRetry?: (err: unknown, attempt: number) => void
}

export async function untilReachable<T>(run: () => Promise<T>, options: FirstReachOptions): Promise<T> {
  const deadline = Date.now() + options.budgetMs
  for (let attempt = 1; ; attempt++) {
    try {
      return await run()
    } catch (err) {
      const pauseMs = options.pauseMs ?? 250
      if (!isDatabaseUnavailable(err) || Date.now() + pauseMs >= deadline) throw err
      options.onRetry?.(err, attempt)
      await new Promise((r) => setTimeout(r, pauseMs))
    }
  }
}
