// The stored retention horizons, cached for the verifier: read once before the first request and again
// every refresh period, so the hot path never queries for them. The prune job deletes below a horizon only
// after it was announced for longer than two refresh periods (src/db/proof-horizons.ts), so this copy
// always knew a horizon before any claim under it was gone.
import { type HorizonKind, loadRefusedBefore, type RefusedBefore } from '../db/proof-horizons.ts'
import type { Sql } from '../db/sql.ts'
import type { Logger } from '../observability/logger.ts'

export interface ProofHorizons {
  /** Proofs dated before this (ms) may have lost their claim: refuse them. */
  refusedBeforeMs(kind: HorizonKind): number
  refresh(): Promise<void>
  stop(): void
}

export async function startProofHorizons(
  sql: Sql,
  options: { refreshMs: number; logger: Logger },
): Promise<ProofHorizons> {
  let current: RefusedBefore = await loadRefusedBefore(sql)
  const refresh = async () => {
    const next = await loadRefusedBefore(sql)
    // Only ever raised: a read that raced a change never lowers what is refused.
    current = {
      tx: Math.max(current.tx, next.tx),
      eip3009: Math.max(current.eip3009, next.eip3009),
    }
  }
  const timer = setInterval(() => {
    refresh().catch((err) => options.logger.warn('proof horizons not refreshed', { err }))
  }, options.refreshMs)
  timer.unref()
  return {
    refusedBeforeMs: (kind) => current[kind],
    refresh,
    stop: () => clearInterval(timer),
  }
}
