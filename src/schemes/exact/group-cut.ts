// When the settle-before-answer settler cuts its next group: the group commit's rule, apart from the settler
// so that it can be reasoned about (and tested) as arithmetic.
//
// Idle, the first call waits window_ms for the calls served beside it. Busy (a group was cut lately), a group
// is cut once a full transaction (settlement.per_transaction authorizations) waits, or GROUP_EVERY_MS after
// the last cut, whichever comes first. So the cut window follows this process's arrival rate:
// per_transaction / rate, at most GROUP_EVERY_MS. Under load the groups grow, not the wait.
//
// Why a full transaction and not a fixed short window: the settler of one of N workers sees 1/N of the calls,
// and with the 50 ms window it had, cut groups 1/N the size: N times the transactions, each with its
// signature, broadcast, receipt and block space (measured with two workers at 500 calls/s: 0.073
// transactions a call, against 0.041 with one process and 0.020 for settle-after's batches).

/**
 * A busy settler cuts a group at most this often unless a full transaction is ready: the longest a call waits
 * for the calls that will share its transaction (75 ms on average), beside an answer that waits for a block
 * (2 s on Base). A process taking 333 calls/s or more fills a transaction sooner; two workers at 500 calls/s
 * in all (250/s each) cut groups of 37 (0.027 transactions a call).
 */
export const GROUP_EVERY_MS = 150

export interface Waiting {
  /** Calls waiting for the next group. */
  count: number
  /** When the last group was cut (performance.now(); -Infinity: never). */
  lastCutMs: number
  nowMs: number
  windowMs: number
  /** Authorizations a transaction carries: this many waiting are cut at once. */
  perTransaction: number
}

/** When to cut the group of the calls waiting (at or before `nowMs`: now). */
export function groupCutDueMs(w: Waiting): number {
  if (w.count >= w.perTransaction) return w.nowMs
  return Math.max(w.nowMs + w.windowMs, w.lastCutMs + GROUP_EVERY_MS)
}
