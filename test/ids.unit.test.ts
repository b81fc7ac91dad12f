import { describe, expect, it } from 'vitest'
import { API_KEY_FORMAT, hashApiKey, newApiKey, newId } from '../src/ids.ts'

describe('ids', () => {
  it('are prefixed, base62, and do not repeat', () => {
    const seen = new Set<string>()
    for (let i = 0; i < 20_000; i++) {
      const id = newId('call')
      expect(id).toMatch(/^call_[0-9A-Za-z]{18}$/)
      seen.add(id)
    }
    expect(seen.size).toBe(20_000)
  })
  it('API keys carry at least 128 bits, say their mode, and hash deterministically', () => {
    const live = newApiKey('live')
    const test = newApiKey('test')
    expect(live).toMatch(API_KEY_FORMAT)
    expect(live.startsWith('sk_live_')).toBe(true)
    expect(test.startsWith('sk_test_')).toBe(true)
    expect((live.length - 'sk_live_'.length) * Math.log2(62)).toBeGreaterThanOrEqual(128)
    expect(hashApiKey(live).equals(hashApiKey(live))).toBe(true)
    expect(hashApiKey(live).equals(hashApiKey(test))).toBe(false)
  })
})
