// The /settle requests of this process waiting for their payload's outcome, read together: one query every
// tick for all of them (not one per request), and at once when this process's facilitator settler or
// anything else here says a settlement just changed (wake). A request whose wait runs out gets the latest
// state it was given. Works across instances (the database is read), whoever sent the transaction.
import { type FacilitatorSettlementState, readFacilitatorSettlements } from '../books/facilitator.ts'
import type { Sql } from '../db/sql.ts'

/** Whether a settlement's state is its outcome (the wait for it ends): applied, settled or failed. */
export function isFinalSettlement(s: FacilitatorSettlementState): boolean {
  return s.claim_status === 'applied' || s.settled_at !== null || s.settlement_error !== null
}

/** How often the waiting settlements are read when nothing woke the wait sooner. */
const TICK_MS = 100

interface Waiter {
  accountId: string
  untilMs: number
  last: FacilitatorSettlementState | null
  resolve(s: FacilitatorSettlementState | null): void
}

export class FacilitatorWaits {
  private readonly waiting = new Map<string, Waiter[]>()
  private timer: NodeJS.Timeout | null = null
  private reading: Promise<void> | null = null
  private again = false

  constructor(
    private readonly sql: Sql,
    private readonly final: (s: FacilitatorSettlementState) => boolean = isFinalSettlement,
  ) {}

  /**
   * The payload's settlement once final, or its latest state when `untilMs` (performance.now()) passes;
   * null if it has no settlement row for this account.
   */
  wait(accountId: string, proofKey: string, untilMs: number): Promise<FacilitatorSettlementState | null> {
    return new Promise((resolve) => {
      const list = this.waiting.get(proofKey) ?? []
      list.push({ accountId, untilMs, last: null, resolve })
      this.waiting.set(proofKey, list)
      // Read at the next tick with the others (a burst of retries is one query, not one each).
      if (this.reading === null) this.schedule()
    })
  }

  /** Reads the waiting settlements now (a settlement changed), or right after the read in progress. */
  wake(): void {
    if (this.reading !== null) {
      this.again = true
      return
    }
    if (this.timer !== null) clearTimeout(this.timer)
    this.timer = null
    this.reading = this.read().finally(() => {
      this.reading = null
      if (this.again) {
        this.again = false
        this.wake()
      } else this.schedule()
    })
  }

  private schedule(): void {
    if (this.waiting.size === 0 || this.timer !== null) return
    this.timer = setTimeout(() => {
      this.timer = null
      this.wake()
    }, TICK_MS)
  }

  private async read(): Promise<void> {
    if (this.waiting.size === 0) return
    const keys = [...this.waiting.keys()]
    const rows = await readFacilitatorSettlements(this.sql, keys).catch(() => null)
    const byKey = new Map(rows?.map((r) => [r.proof_key, r]) ?? [])
    const now = performance.now()
    for (const key of keys) {
      const list = this.waiting.get(key)
      if (!list) continue
      const row = byKey.get(key)
      const left = list.filter((w) => {
        const s = row && row.account_id === w.accountId ? row : null
        // A failed read keeps the last state; a read that found nothing for this account ends the wait.
        if (rows !== null) w.last = s
        if ((rows !== null && (s === null || this.final(s))) || now >= w.untilMs) {
          w.resolve(w.last)
          return false
        }
        return true
      })
      if (left.length === 0) this.waiting.delete(key)
      else this.waiting.set(key, left)
    }
  }
}
