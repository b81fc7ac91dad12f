// The latency histogram: buckets add up across hours and instances, and quantiles read as bucket bounds.
import { describe, expect, it } from 'vitest'
import { LATENCY_BUCKETS, latencyBucket, presentObserved, quantileMs } from '../../src/discovery/observed.ts'

describe('observed figures', () => {
  it('puts a latency in the first bucket whose bound holds it, the slowest in the overflow', () => {
    expect([latencyBucket(0.3), latencyBucket(5), latencyBucket(5.1), latencyBucket(60_000)]).toEqual([
      0,
      0,
      1,
      LATENCY_BUCKETS - 1,
    ])
  })

  it('reads p50 and p99 as the bound of the bucket the rank falls in', () => {
    const counts = new Array(LATENCY_BUCKETS).fill(0)
    counts[latencyBucket(20)] = 98 // ≤ 25 ms
    counts[latencyBucket(400)] = 1 // ≤ 500 ms
    counts[latencyBucket(3000)] = 1 // ≤ 5000 ms
    expect(quantileMs(counts, 0.5)).toBe(25)
    expect(quantileMs(counts, 0.99)).toBe(500)
    expect(quantileMs(counts, 1)).toBe(5000)
    expect(quantileMs(new Array(LATENCY_BUCKETS).fill(0), 0.5)).toBeNull()
  })

  it('rates are shares of paid calls, null without any', () => {
    const r = presentObserved(
      { paid_calls: 3, succeeded: 2, unserved: 1, latency_buckets: [3], repeat_payers: 1 },
      7,
    )
    expect(r).toMatchObject({ paid_calls: 3, success_rate: 0.6667, refund_rate: 0.3333, repeat_payers: 1 })
    expect(presentObserved(undefined, 7).success_rate).toBeNull()
  })
})
