// Grouped nonce claims (src/db/identity-nonces.ts) on two instances sharing one database: under a burst of
// concurrent claims, each nonce is granted exactly once across both; an expired one may be used again.
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { NonceClaims } from '../../src/db/identity-nonces.ts'
import { createSql, type Sql } from '../../src/db/sql.ts'
import { freshDatabaseUrl, migratedDatabase } from '../helpers/database.ts'

describe('NonceClaims', () => {
  let first: Sql
  let second: Sql
  let stop: () => Promise<void>
  beforeAll(async () => {
    const url = await freshDatabaseUrl()
    if (url) {
      first = createSql(url, { max: 2 })
      const { migrate } = await import('../../src/db/migrate.ts')
      await migrate(first)
      second = createSql(url, { max: 2 })
      stop = async () => {
        await second.end()
        await first.end()
      }
    } else {
      // The embedded database is one session: both "instances" share it (the table is still the judge).
      const db = await migratedDatabase({ max: 1 })
      first = db.sql
      second = db.sql
      stop = async () => {
        await db.sql.end()
        await db.stop()
      }
    }
  })
  afterAll(async () => stop?.())

  it('grants each nonce once across two instances under concurrent claims', async () => {
    const a = new NonceClaims(first, { maxBatch: 16, maxHeld: 1_000 })
    const b = new NonceClaims(second, { maxBatch: 16, maxHeld: 1_000 })
    const expiresAtMs = Date.now() + 60_000
    const keys = Array.from({ length: 100 }, (_, i) => `k|burst|${i}`)
    // Every key three times: twice on one instance (the second refused from memory), once on the other.
    const tries = keys.flatMap((key) => [
      a.claim({ key, expiresAtMs }),
      b.claim({ key, expiresAtMs }),
      a.claim({ key, expiresAtMs }),
    ])
    const granted = await Promise.all(tries)
    for (let i = 0; i < keys.length; i++) {
      expect(granted.slice(3 * i, 3 * i + 3).filter(Boolean)).toHaveLength(1)
    }
    const rows = await first<Array<{ n: number }>>`
      SELECT count(*)::int AS n FROM identity_nonces WHERE nonce_key LIKE 'k|burst|%'`
    expect(rows[0]!.n).toBe(100)
  })

  it('a nonce whose row has expired may be claimed again; a live one may not', async () => {
    const a = new NonceClaims(first)
    const b = new NonceClaims(second)
    expect(await a.claim({ key: 'k|old', expiresAtMs: Date.now() - 1_000 })).toBe(true)
    expect(await b.claim({ key: 'k|old', expiresAtMs: Date.now() + 60_000 })).toBe(true)
    expect(await a.claim({ key: 'k|old', expiresAtMs: Date.now() + 60_000 })).toBe(false)
  })
})
