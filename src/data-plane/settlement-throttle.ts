// The x402 intake throttle: while the settlement backlog (exact authorizations and upto permits: one
// treasury settles both) is past its limits, new x402 payloads are answered 503 settlement_backlog before
// anything is verified or claimed, so intake cannot outrun the validity windows. A timer refreshes one flag from the database; the hot path only reads it (no await, no query).
// The same flag holds while the token cannot move money to the treasury at all (`halted`: USDC paused, or the
// treasury blacklisted), answered 503 settlement_halted: every payment served then would settle never.
import { readSettlementBacklog } from '../books/settlement.ts'
import { readUptoSettlementBacklog } from '../books/upto-settlement.ts'
import type { TokenReads } from '../chain/token-reads.ts'
import type { Sql } from '../db/sql.ts'
import type { Logger } from '../observability/logger.ts'
import { settlementThrottled, tokenHalted } from '../observability/metrics.ts'

export interface SettlementThrottle {
  /** Read synchronously by the metered route for every x402 payload. */
  readonly engaged: boolean
  /** Why, while engaged: the backlog, or the token halted for the treasury. */
  readonly code: 'settlement_backlog' | 'settlement_halted'
  readonly retryAfterS: number
  /**
   * Reads the backlog now (tests, and the first value at start): resolves once a read that began after this
   * call has set the flag.
   */
  refresh(): Promise<void>
  stop(): void
}

/** How often the timer reads the token's state for the treasury (paused, blacklisted). */
const HALT_CHECK_MS = 10_000
/** Why the token cannot pay the treasury (the gauge's states), or null. */
type Halt = Awaited<ReturnType<TokenReads['halted']>>
const HALT_STATES = ['paused', 'blacklisted'] as const satisfies ReadonlyArray<Halt>

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
    /** Why the token cannot pay the treasury now ('paused', 'blacklisted'), or null; read beside the backlog. */
    halted?: () => Promise<Halt>
  },
): SettlementThrottle {
  let engaged = false
  let halt: Halt = null
  let reading: Promise<void> | null = null
  let again: Promise<void> | null = null
  let haltReadAt = Number.NEGATIVE_INFINITY
  const readHalt = async (fresh: boolean): Promise<Halt> => {
    if (!options.halted) return null
    // Two eth_calls: every HALT_CHECK_MS on the timer (a halt is rare, a provider's quota is not free);
    // at once when asked (refresh()).
    if (!fresh && performance.now() - haltReadAt < HALT_CHECK_MS) return halt
    haltReadAt = performance.now()
    try {
      return await options.halted()
    } catch (err) {
      // Not known: the last answer stands (a node that cannot be read fails the verifications anyway).
      options.logger.warn('x402 token state not read', { err })
      return halt
    }
  }
  const readOnce = async (fresh: boolean): Promise<void> => {
    try {
      const [b, nextHalt] = await Promise.all([read(), readHalt(fresh)])
      const backlogged = b.count >= options.maxBacklogCount || b.oldestAgeS >= options.maxOldestS
      const next = backlogged || nextHalt !== null
      if (nextHalt !== halt && nextHalt !== null)
        options.logger.error('x402 intake stopped: the token cannot move money to the treasury', {
          token_state: nextHalt,
        })
      if (next !== engaged)
        options.logger.warn(next ? 'x402 intake throttled' : 'x402 intake resumed', {
          backlog: b.count,
          oldest_s: Math.round(b.oldestAgeS),
          token_state: nextHalt,
        })
      engaged = next
      halt = nextHalt
      settlementThrottled.set(next ? 1 : 0)
      if (options.halted)
        for (const state of HALT_STATES) tokenHalted.labels(state).set(halt === state ? 1 : 0)
    } catch (err) {
      // Unknown backlog: keep the last answer; the database being down is answered elsewhere.
      options.logger.warn('x402 settlement backlog not read', { err })
    }
  }
  const refresh = (fresh = true): Promise<void> => {
    if (reading === null) {
      reading = readOnce(fresh).finally(() => {
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
  const timer = setInterval(() => void refresh(false), options.checkMs)
  timer.unref()
  void refresh()
  return {
    get engaged() {
      return engaged
    },
    get code() {
      return halt !== null ? 'settlement_halted' : 'settlement_backlog'
    },
    retryAfterS: options.retryAfterS,
    refresh,
    stop: () => clearInterval(timer),
  }
}
