// Settler slots on one PostgreSQL database: each process (here, each pool) gets its own slot, none is shared,
// a process finding every slot held gets none, and a released slot is free again. The embedded database
// hands out the worker index (one session: locks cannot separate its processes).
import postgres from 'postgres'
import { afterAll, describe, expect, it } from 'vitest'
import { claimSettlerSlot } from '../../src/db/settler-slots.ts'
import type { Sql } from '../../src/db/sql.ts'
import { freshDatabaseUrl } from '../helpers/database.ts'

const options = (slots: number) => ({
  embedded: false,
  workerIndex: 0,
  slots,
  keepaliveMs: 60_000,
  onLost: () => {},
  onRegained: () => {},
})

describe('settler slots, embedded', () => {
  it('a worker takes its index; past the slots, none', async () => {
    const sql = null as unknown as Sql
    const one = await claimSettlerSlot(sql, { ...options(2), embedded: true, workerIndex: 1 })
    expect(one?.slot).toBe(1)
    expect(await claimSettlerSlot(sql, { ...options(2), embedded: true, workerIndex: 2 })).toBeNull()
  })
})

describe.skipIf(!process.env.DATABASE_URL)('settler slots on a PostgreSQL server', () => {
  const pools: Array<ReturnType<typeof postgres>> = []
  afterAll(async () => {
    for (const p of pools) await p.end()
  })

  it('three processes get slots 0, 1, 2 in turn; a fourth gets none; a released slot is taken again', async () => {
    const url = (await freshDatabaseUrl())!
    const pool = () => {
      const p = postgres(url, { max: 2, onnotice: () => {} })
      pools.push(p)
      return p as unknown as Sql
    }
    const a = await claimSettlerSlot(pool(), options(3))
    const b = await claimSettlerSlot(pool(), options(3))
    const c = await claimSettlerSlot(pool(), options(3))
    expect([a?.slot, b?.slot, c?.slot]).toEqual([0, 1, 2])
    expect(await claimSettlerSlot(pool(), options(3))).toBeNull()
    await b!.release()
    const d = await claimSettlerSlot(pool(), options(3))
    expect(d?.slot).toBe(1)
    expect([a!.held(), c!.held(), d!.held(), b!.held()]).toEqual([true, true, true, false])
    for (const s of [a, c, d]) await s!.release()
  })
})
