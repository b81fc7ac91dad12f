// When the settle-before-answer settler cuts its next group: the group commit's rule, apart from the settler
// so that it can be reasoned about (and tested) as arithmetic.
//
// Idle, the first call waits window_ms for the calls served beside it. Busy (a group was cut lately), a group
// is cut once a full transaction (settlement.per_transaction authorizations) waits, or GROUP_EVERY_MS × the
// data-plane processes after the last cut, whichever comes first. Under load the groups grow, not the wait.
//
// Why the window grows with the processes: the settler of one of N workers sees 1/N of the calls, and with
// one process's 50 ms window it cut groups 1/N the size: N times the transactions, each with its signature,
// broadcast, receipt and block space (measured with two workers at 500 calls/s: 0.073 transactions a call,
// against 0.041 with one process and 0.020 for settle-after's batches). Why not one longer window for all:
// measured on the capacity bench (2 s blocks, one process), a 150 ms window held 750 calls/s where 50 ms held
// 1,250 (the longer wait puts a group's broadcast later against the block it must reach, and the groups that
// come out of a saturated pipe are bigger and slower to write).

/**
 * A busy settler of a single process cuts a group at most this often unless a full transaction is ready:
 * at 500 calls/s, 25 authorizations a group (0.04 transactions a call), a wait of at most 50 ms (25 on
 * average) beside an answer that waits for a block (2 s on Base). N processes wait N times as long.
 */
export const GROUP_EVERY_MS = 50

export interface Waiting {
  /** Calls waiting for the next group. */
  count: number
  /** When the last group was cut (performance.now(); -Infinity: never). */
  lastCutMs: number
  nowMs: number
  windowMs: number
  /** Authorizations a transaction carries: this many waiting are cut at once. */
  perTransaction: number
  /** Data-plane processes sharing the calls, each with its own settler (1: one process). */
  processes: number
}

/** When to cut the group of the calls waiting (at or before `nowMs`: now). */
export function groupCutDueMs(w: Waiting): number {
  if (w.count >= w.perTransaction) return w.nowMs
  return Math.max(w.nowMs + w.windowMs, w.lastCutMs + GROUP_EVERY_MS * Math.max(1, w.processes))
}
