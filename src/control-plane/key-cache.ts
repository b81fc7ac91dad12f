// API keys recently found valid, so an authenticated request does not read the database to learn who sent
// it. The look-up was one of the two statements of a payment's creation (the bench's payment-create: ~12 %
// of PostgreSQL's CPU and ~25 % of ours per creation went to it); a merchant's integration sends the same key
// thousands of times a second.
//
// What a cached key may do that the database would refuse is bounded: an entry lives at most `ttlMs` and
// never past its key's own expiry (as the database counted it when it was read, so no clock skew), and a
// roll forgets the account's keys at once in the process that rolled (a read begun before the roll is not
// remembered after it). A key rolled out in another process or instance keeps working there for at most
// `ttlMs` (250 ms by default; 0 turns the cache off). Unknown keys are never cached: a guessed key costs a
// look-up each time, as before, and the 401s are rate-limited.
import { LRUCache } from 'lru-cache'
import type { AccountRow } from '../db/accounts.ts'

export interface KeyCache {
  get(keyHash: string): AccountRow | undefined
  /** Taken before a key is read from the database, and handed back to set(). */
  readonly generation: number
  /**
   * expiresInMs: how long the key is still valid by the database's clock, null if it never expires. Nothing
   * is remembered if a roll was forgotten here since `readAt` was taken: the read may predate the roll.
   */
  set(keyHash: string, account: AccountRow, expiresInMs: number | null, readAt: number): void
  /** Drops every cached key of the account (its keys were rolled here). */
  forgetAccount(accountId: string): void
}

export function createKeyCache(o: { max: number; ttlMs: number }): KeyCache {
  if (o.ttlMs === 0) return { get: () => undefined, generation: 0, set() {}, forgetAccount() {} }
  const entries = new LRUCache<string, AccountRow>({ max: o.max, ttl: o.ttlMs })
  let generation = 0
  return {
    get: (keyHash) => entries.get(keyHash),
    get generation() {
      return generation
    },
    set(keyHash, account, expiresInMs, readAt) {
      if (readAt !== generation) return
      const ttl = expiresInMs === null ? o.ttlMs : Math.min(o.ttlMs, Math.floor(expiresInMs))
      if (ttl > 0) entries.set(keyHash, account, { ttl })
    },
    forgetAccount(accountId) {
      generation++
      // A roll is rare and the cache small: a walk beats keeping a second index per account.
      for (const [hash, account] of entries.entries()) if (account.id === accountId) entries.delete(hash)
    },
  }
}
