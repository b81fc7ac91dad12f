// The x402 intake throttle's flag after refresh(): set by a read that began after the call, never by one
// already in flight whose snapshot may predate what the caller wants counted.
import { describe, expect, it } from 'vitest'
import { type Backlog, startSettlementThrottle } from '../../src/data-plane/settlement-throttle.ts'
import { createLogger } from '../../src/observability/logger.ts'

/** A backlog source whose reads the test answers by hand, each with the backlog as it was when it began. */
function manualBacklog(initial: number) {
  let now = initial
  const pending: Array<() => void> = []
  let reads = 0
  const read = (): Promise<Backlog> => {
    reads++
    const seen = now
    return new Promise((resolve) => pending.push(() => resolve({ count: seen, oldestAgeS: 0 })))
  }
  return {
    read,
    set: (count: number) => {
      now = count
    },
    /** Answers the oldest read in flight. */
    answer: async () => {
      pending.shift()?.()
      await new Promise((r) => setImmediate(r))
    },
    get reads() {
      return reads
    },
  }
}

const options = {
  maxBacklogCount: 25,
  maxOldestS: 120,
  retryAfterS: 5,
  checkMs: 3_600_000,
  logger: createLogger('silent'),
}

describe('settlement throttle', () => {
  it('a refresh while a read is in flight waits for a read of its own', async () => {
    const backlog = manualBacklog(30)
    const throttle = startSettlementThrottle(backlog.read, options)
    try {
      // The start's read is in flight, taken while 30 were unsettled; then they settle.
      backlog.set(0)
      let done = false
      const refreshed = throttle.refresh().then(() => {
        done = true
      })
      await backlog.answer()
      // The first read's answer (30) engaged the flag, and the caller is still waiting.
      expect(throttle.engaged).toBe(true)
      expect(done).toBe(false)
      expect(backlog.reads).toBe(2)
      await backlog.answer()
      await refreshed
      expect(throttle.engaged).toBe(false)
    } finally {
      throttle.stop()
    }
  })

  it('callers that ask during one read share the one read after it', async () => {
    const backlog = manualBacklog(0)
    const throttle = startSettlementThrottle(backlog.read, options)
    try {
      const all = Promise.all([throttle.refresh(), throttle.refresh(), throttle.refresh()])
      backlog.set(40)
      await backlog.answer()
      await backlog.answer()
      await all
      expect(backlog.reads).toBe(2)
      expect(throttle.engaged).toBe(true)
    } finally {
      throttle.stop()
    }
  })

  it('engages while the token cannot pay the treasury, whatever the backlog, and says why', async () => {
    const backlog = manualBacklog(0)
    let halted: 'blacklisted' | null = 'blacklisted'
    const throttle = startSettlementThrottle(backlog.read, { ...options, halted: async () => halted })
    try {
      await backlog.answer()
      expect(throttle.engaged).toBe(true)
      expect(throttle.code).toBe('settlement_halted')
      halted = null
      const cleared = throttle.refresh()
      await backlog.answer()
      await cleared
      expect(throttle.engaged).toBe(false)
      // The backlog alone: its own code.
      backlog.set(40)
      const backlogged = throttle.refresh()
      await backlog.answer()
      await backlogged
      expect([throttle.engaged, throttle.code]).toEqual([true, 'settlement_backlog'])
    } finally {
      throttle.stop()
    }
  })

  it('a token state that cannot be read keeps the last answer', async () => {
    const backlog = manualBacklog(0)
    let halted: () => Promise<'paused' | null> = async () => 'paused'
    const throttle = startSettlementThrottle(backlog.read, { ...options, halted: () => halted() })
    try {
      await backlog.answer()
      expect(throttle.code).toBe('settlement_halted')
      halted = async () => {
        throw new Error('node down')
      }
      const again = throttle.refresh()
      await backlog.answer()
      await again
      expect([throttle.engaged, throttle.code]).toEqual([true, 'settlement_halted'])
    } finally {
      throttle.stop()
    }
  })
})
