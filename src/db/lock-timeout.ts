// Catalog changes beside live traffic (making or dropping a partition of claims): the strong lock they need
// is waited for at most a moment. Queued, it would hold every paid call's claim statement behind it; given
// up, the leader's job simply tries again on its next run.
import type { Sql, Tx } from './sql.ts'

/** Runs `work` in a transaction whose locks wait at most `ms`; null if one was not had in time (55P03). */
export async function underLockTimeout<T>(
  sql: Sql,
  ms: number,
  work: (tx: Tx) => Promise<T>,
): Promise<T | null> {
  return sql
    .begin(async (tx) => {
      await tx`SELECT set_config('lock_timeout', ${`${ms}ms`}, true)`
      return work(tx)
    })
    .catch((err: { code?: string }) => {
      if (err.code === '55P03') return null
      throw err
    }) as Promise<T | null>
}
