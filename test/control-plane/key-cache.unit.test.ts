import { describe, expect, it } from 'vitest'
import { createKeyCache } from '../../src/control-plane/key-cache.ts'
import type { AccountRow } from '../../src/db/accounts.ts'

const account = (id: string): AccountRow => ({
  id,
  wallet_address: '0x0000000000000000000000000000000000000001',
  business_name: 'Acme',
  mode: 'test',
  created_at: new Date(0),
})
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))

describe('API key cache', () => {
  it('remembers a key for its TTL, then reads again', async () => {
    const keys = createKeyCache({ max: 10, ttlMs: 60 })
    keys.set('k1', account('acct_a'), null, keys.generation)
    expect(keys.get('k1')?.id).toBe('acct_a')
    await sleep(90)
    expect(keys.get('k1')).toBeUndefined()
  })

  it('never remembers a key past its own expiry', async () => {
    const keys = createKeyCache({ max: 10, ttlMs: 10_000 })
    keys.set('graced', account('acct_a'), 40, keys.generation)
    keys.set('spent', account('acct_a'), 0.4, keys.generation)
    expect(keys.get('graced')?.id).toBe('acct_a')
    expect(keys.get('spent')).toBeUndefined()
    await sleep(70)
    expect(keys.get('graced')).toBeUndefined()
  })

  it('forgets every key of a rolled account, and only those', () => {
    const keys = createKeyCache({ max: 10, ttlMs: 10_000 })
    keys.set('a1', account('acct_a'), null, keys.generation)
    keys.set('a2', account('acct_a'), 5_000, keys.generation)
    keys.set('b1', account('acct_b'), null, keys.generation)
    keys.forgetAccount('acct_a')
    expect(keys.get('a1')).toBeUndefined()
    expect(keys.get('a2')).toBeUndefined()
    expect(keys.get('b1')?.id).toBe('acct_b')
  })

  it('does not remember a key read before a roll forgotten meanwhile', () => {
    const keys = createKeyCache({ max: 10, ttlMs: 10_000 })
    const readAt = keys.generation
    keys.forgetAccount('acct_a')
    keys.set('a1', account('acct_a'), null, readAt)
    expect(keys.get('a1')).toBeUndefined()
    keys.set('a1', account('acct_a'), null, keys.generation)
    expect(keys.get('a1')?.id).toBe('acct_a')
  })

  it('with a TTL of 0 remembers nothing', () => {
    const keys = createKeyCache({ max: 10, ttlMs: 0 })
    keys.set('k1', account('acct_a'), null, keys.generation)
    expect(keys.get('k1')).toBeUndefined()
  })
})
