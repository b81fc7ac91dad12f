import { describe, expect, it } from 'vitest'
import { formatDollars, parseDollars, splitOwnerShare, toDollars } from '../src/money.ts'

describe('parseDollars with a maximum', () => {
  it('says the maximum for an amount above it, in any notation', () => {
    const max = 1000_000_000n // $1000
    for (const input of [1e30, '1e30', '1E+30', '1e400', 1001, '1000.000001', 1e21])
      expect(parseDollars(input, max), String(input)).toEqual({ ok: false, reason: 'must be at most 1000' })
    expect(parseDollars(1000, max)).toEqual({ ok: true, atomic: max })
    // Exponent notation within the limit is still not a decimal amount.
    expect(parseDollars('1e2', max)).toEqual({
      ok: false,
      reason: 'must be a decimal amount of dollars, e.g. 0.01',
    })
    expect(parseDollars('abc', max)).toEqual({
      ok: false,
      reason: 'must be a decimal amount of dollars, e.g. 0.01',
    })
  })
})

describe('parseDollars', () => {
  it('reads numbers and decimal strings without floating-point error', () => {
    expect(parseDollars(100)).toEqual({ ok: true, atomic: 100_000_000n })
    expect(parseDollars(0.1)).toEqual({ ok: true, atomic: 100_000n })
    expect(parseDollars(0.29)).toEqual({ ok: true, atomic: 290_000n })
    expect(parseDollars('1.000001')).toEqual({ ok: true, atomic: 1_000_001n })
    expect(parseDollars(0.000001)).toEqual({ ok: true, atomic: 1n })
    expect(parseDollars(0.0000001)).toEqual({ ok: false, reason: 'must have at most 6 decimal places' })
    expect(parseDollars('0.000001')).toEqual({ ok: true, atomic: 1n })
  })
  it('refuses zero, negatives, more than 6 decimals and non-numbers', () => {
    expect(parseDollars(0).ok).toBe(false)
    expect(parseDollars(-1).ok).toBe(false)
    expect(parseDollars('0.0000001').ok).toBe(false)
    expect(parseDollars(1.0000001).ok).toBe(false)
    expect(parseDollars('abc').ok).toBe(false)
    expect(parseDollars(null).ok).toBe(false)
    expect(parseDollars(Number.NaN).ok).toBe(false)
    expect(parseDollars(true).ok).toBe(false)
  })
})

describe('formatDollars / toDollars', () => {
  it('round-trips base units', () => {
    expect(formatDollars(10_000n)).toBe('0.01')
    expect(formatDollars(1_500_000n)).toBe('1.5')
    expect(formatDollars(3_000_000n)).toBe('3')
    expect(toDollars(1n)).toBe(0.000001)
  })
})

describe('splitOwnerShare', () => {
  it('rounds the owner share down and gives the rest to the fee, summing exactly', () => {
    expect(splitOwnerShare(10_000n, 9500)).toEqual({ owner: 9_500n, fee: 500n })
    expect(splitOwnerShare(1n, 9500)).toEqual({ owner: 0n, fee: 1n })
    expect(splitOwnerShare(12_345n, 9500)).toEqual({ owner: 11_727n, fee: 618n })
    for (const amount of [1n, 7n, 19n, 999_999n, 123_456_789n]) {
      const s = splitOwnerShare(amount, 9500)
      expect(s.owner + s.fee).toBe(amount)
      expect(s.owner).toBe((amount * 9500n) / 10_000n)
    }
  })
})
