// The settler's group commit rule as arithmetic: calls arriving at a steady rate, each asking when the next
// group is cut (as the settler does on every call handed over, a timer kept for the earliest), and the groups
// that come out. What matters: the settler of one of two workers, seeing half the calls, still cuts groups
// big enough for at most 0.04 transactions a call at 500 calls/s in all (with one process's 50 ms window it
// cut half-size groups); a full transaction is cut at once; an idle settler waits window_ms only.
import { describe, expect, it } from 'vitest'
import { GROUP_EVERY_MS, groupCutDueMs } from '../../src/schemes/exact/group-cut.ts'

const WINDOW_MS = 3
const PER_TRANSACTION = 50

/** Calls at `rate` a second for `seconds`: the groups cut (sizes) and each call's wait for its cut. */
function simulate(rate: number, processes = 1, seconds = 4): { groups: number[]; meanWaitMs: number } {
  const arrivals = Array.from({ length: Math.round(rate * seconds) }, (_, i) => (i * 1000) / rate)
  const groups: number[] = []
  let waiting: number[] = []
  let lastCutMs = Number.NEGATIVE_INFINITY
  let timerMs: number | null = null
  let waited = 0
  const cut = (atMs: number) => {
    groups.push(waiting.length)
    for (const a of waiting) waited += atMs - a
    waiting = []
    lastCutMs = atMs
    timerMs = null
  }
  const ask = (nowMs: number) => {
    const due = groupCutDueMs({
      count: waiting.length,
      lastCutMs,
      nowMs,
      windowMs: WINDOW_MS,
      perTransaction: PER_TRANSACTION,
      processes,
    })
    if (due <= nowMs) cut(nowMs)
    else if (timerMs === null || due < timerMs) timerMs = due
  }
  for (const at of arrivals) {
    while (timerMs !== null && timerMs <= at) cut(timerMs)
    waiting.push(at)
    ask(at)
  }
  while (waiting.length > 0) cut(timerMs ?? lastCutMs)
  return { groups, meanWaitMs: waited / arrivals.length }
}

/** The groups of the steady part (the first, cut idle, and the last, the remainder, left out). */
const steady = (groups: number[]) => groups.slice(1, -1)

describe('the settler cuts its groups by size or by a bounded wait', () => {
  it('cuts an idle call after window_ms', () => {
    expect(
      groupCutDueMs({
        count: 1,
        lastCutMs: Number.NEGATIVE_INFINITY,
        nowMs: 1_000,
        windowMs: WINDOW_MS,
        perTransaction: PER_TRANSACTION,
        processes: 1,
      }),
    ).toBe(1_000 + WINDOW_MS)
  })

  it('cuts a full transaction at once', () => {
    expect(
      groupCutDueMs({
        count: PER_TRANSACTION,
        lastCutMs: 999,
        nowMs: 1_000,
        windowMs: WINDOW_MS,
        perTransaction: PER_TRANSACTION,
        processes: 1,
      }),
    ).toBe(1_000)
  })

  it('keeps the groups of one of two workers big: 250 calls/s each, 0.04 transactions a call at most', () => {
    const one = simulate(500)
    const half = simulate(250, 2)
    // One process at 500/s cuts every GROUP_EVERY_MS; each of two workers at 250/s every 2 × GROUP_EVERY_MS:
    // the same groups.
    for (const g of [...steady(one.groups), ...steady(half.groups)])
      expect(Math.abs(g - (500 * GROUP_EVERY_MS) / 1000)).toBeLessThanOrEqual(1)
    // One transaction a group below per_transaction: 0.04 a call, and the first group (cut idle) beside.
    expect(half.groups.length / (250 * 4)).toBeLessThanOrEqual(0.042)
    // The wait a call adds: half the cut window on average, a small part of a 2 s block.
    expect(half.meanWaitMs).toBeLessThanOrEqual(GROUP_EVERY_MS + 1)
    // With one process's window, a worker's groups were half the size.
    const alone = simulate(250)
    expect(alone.groups.length / (250 * 4)).toBeGreaterThan(0.07)
  })

  it('cuts a full transaction as soon as it is there under load', () => {
    const heavy = simulate(2_000)
    for (const g of steady(heavy.groups)) expect(g).toBe(PER_TRANSACTION)
    // 50 calls arrive in 25 ms: the window shrinks with the rate.
    expect(heavy.meanWaitMs).toBeLessThan(15)
  })

  it('waits at most GROUP_EVERY_MS after the last cut at a low rate', () => {
    const slow = simulate(100)
    for (const g of steady(slow.groups))
      expect(Math.abs(g - (100 * GROUP_EVERY_MS) / 1000)).toBeLessThanOrEqual(1)
  })
})
