// The x402 intake throttle: while the settlement backlog (exact authorizations and upto permits: one
// treasury settles both) is past its limits, new x402 payloads are answered 503 settlement_backlog before
// anything is verified or claimed, so intake cannot outrun the validity windows. A timer refreshes one flag from the database; the hot path only reads it (no await, no query).
import { readSettlementBacklog } from '../books/settlement.ts'
import { readUptoSettlementBacklog } from '../books/upto-settlement.ts'
import type { Sql } from '../db/sql.ts'
import type { Logger } from '../observability/logger.ts'
import { settlementThrottled } from '../observability/metrics.ts'

export interface SettlementThrottle {
  /** Read synchronously by the metered route for every x402 payload. */
  readonly engaged: boolean
  readonly retryAfterS: number
  /**
   * Reads the backlog now (tests, and the first value at start): resolves once a read that began after this
   * call has set the flag.
   */
  refresh(): Promise<void>
  stop(): void
}

export interface Backlog {
  count: number
  oldestAgeS: number
}

/** Exact authorizations and upto permits not settled yet: one treasury settles both. */
export async function readBacklog(sql: Sql): Promise<Backlog> {
  const [exact, upto] = await Promise.all([readSettlementBacklog(sql), readUptoSettlementBacklog(sql)])
  return { count: exact.count + upto.count, oldestAgeS: Math.max(exact.oldestAgeS, upto.oldestAgeS) }
}

export function startSettlementThrottle(
  read: () => Promise<Backlog>,
  options: {
    maxBacklogCount: number
    maxOldestS: number
    retryAfterS: number
    checkMs: number
    logger: Logger
  },
): SettlementThrottle {
  let engaged = false
  let reading: Promise<void> | null = null
  let again: Promise<void> | null = null
  const readOnce = async (): Promise<void> => {
    try {
      const b = await read()
      const next = b.count >= options.maxBacklogCount || b.oldestAgeS >= options.maxOldestS
      if (next !== engaged)
        options.logger.warn(next ? 'x402 intake throttled: settlement backlog' : 'x402 intake resumed', {
          backlog: b.count,
          oldest_s: Math.round(b.oldestAgeS),
        })
      engaged = next
      settlementThrottled.set(next ? 1 : 0)
    } catch (err) {
      // Unknown backlog: keep the last answer; the database being down is answered elsewhere.
      options.logger.warn('x402 settlement backlog not read', { err })
    }
  }
  const refresh = (): Promise<void> => {
    if (reading === null) {
      reading = readOnce().finally(() => {
        reading = null
      })
      return reading
    }
    // A read in flight may have taken its snapshot before what this caller wants counted (a settlement that
    // just committed): it would leave the flag engaged for another tick. One more read after it, shared by
    // every caller that asks meanwhile.
    again ??= reading.then(() => {
      again = null
      return refresh()
    })
    return again
  }
  const timer = setInterval(() => void refresh(), options.checkMs)
  timer.unref()
  void refresh()
  return {
    get engaged() {
      return engaged
    },
    retryAfterS: options.retryAfterS,
    refresh,
    stop: () => clearInterval(timer),
  }
}
