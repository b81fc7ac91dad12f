// The embedded database (PGlite) has no autovacuum: without the leader's job its tables keep every dead row.
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { loadConfig } from '../../src/config/load.ts'
import {
  createEmbeddedVacuumJobs,
  maintainEmbeddedTables,
} from '../../src/control-plane/jobs/embedded-vacuum.ts'
import { type EmbeddedDatabase, startEmbeddedDatabase } from '../../src/db/embedded.ts'
import { migrate } from '../../src/db/migrate.ts'
import { createSql, type Sql } from '../../src/db/sql.ts'
import { fundedAccount, payUsdc } from '../helpers/accounts.ts'
import { registerMerchant, startTestService } from '../helpers/service.ts'
import { startUpstream } from '../helpers/upstream.ts'
import { waitFor } from '../helpers/wait-for.ts'

let db: EmbeddedDatabase
let sql: Sql

beforeAll(async () => {
  db = await startEmbeddedDatabase({ dataDir: 'memory://' })
  sql = createSql(db.url, { max: 1 })
  await migrate(sql)
  // What the migrations left due (their own inserts) is done first, so each test sees only its own tables.
  await maintainEmbeddedTables({ sql })
})

afterAll(async () => {
  await sql?.end()
  await db?.stop()
})

async function stats(table: string) {
  await sql`SELECT pg_stat_force_next_flush()`
  const [row] = await sql<{ dead: bigint; vacuumed: boolean; analyzed: boolean }[]>`
    SELECT n_dead_tup AS dead, last_vacuum IS NOT NULL AS vacuumed, last_analyze IS NOT NULL AS analyzed
      FROM pg_stat_user_tables WHERE relname = ${table}`
  return { dead: Number(row!.dead), vacuumed: row!.vacuumed, analyzed: row!.analyzed }
}

async function bytes(table: string): Promise<number> {
  const [row] = await sql<{ size: bigint }[]>`SELECT pg_total_relation_size(${table}::regclass) AS size`
  return Number(row!.size)
}

describe('embedded database maintenance', () => {
  it('vacuums a table past autovacuum thresholds and leaves one below them alone', async () => {
    await sql`CREATE TABLE churned (id int PRIMARY KEY, n int NOT NULL)`
    await sql`CREATE TABLE quiet (id int PRIMARY KEY, n int NOT NULL)`
    await sql`INSERT INTO churned SELECT g, 0 FROM generate_series(1, 100) g`
    await sql`INSERT INTO quiet SELECT g, 0 FROM generate_series(1, 1000) g`
    await maintainEmbeddedTables({ sql })
    // 300 dead rows (less what page pruning takes as it goes) against a threshold of 50 + 20 % of 100
    // live rows; 10 against 50 + 20 % of 1,000.
    for (let i = 0; i < 3; i++) await sql`UPDATE churned SET n = n + 1`
    await sql`UPDATE quiet SET n = n + 1 WHERE id <= 10`
    expect((await stats('churned')).dead).toBeGreaterThan(70)

    const done = await maintainEmbeddedTables({ sql })

    expect(done.vacuumed).toEqual(['public.churned'])
    expect(done.analyzed).toEqual([])
    expect(await stats('churned')).toMatchObject({ dead: 0, vacuumed: true, analyzed: true })
    expect((await stats('quiet')).dead).toBe(10)
    expect(await maintainEmbeddedTables({ sql })).toMatchObject({ vacuumed: [], analyzed: [] })
  })

  it('keeps a table of claimed-then-settled rows at its size; without it the table grows every round', async () => {
    // Each round what the books do to claims: rows written, updated once (the capture), the oldest deleted
    // (retention). Both tables see the same work; only one is maintained.
    await sql`CREATE TABLE kept (id int PRIMARY KEY, settled boolean NOT NULL, pad text NOT NULL)`
    // Out of autovacuum (a storage parameter the job honours as autovacuum does): the database before this job.
    await sql`CREATE TABLE left_alone (id int PRIMARY KEY, settled boolean NOT NULL, pad text NOT NULL)
                WITH (autovacuum_enabled = false)`
    const sizes: Record<'kept' | 'left_alone', number[]> = { kept: [], left_alone: [] }
    for (let round = 0; round < 8; round++) {
      for (const table of ['kept', 'left_alone'] as const) {
        const t = sql(table)
        await sql`INSERT INTO ${t} SELECT g, false, repeat('x', 200)
                    FROM generate_series(${round * 5_000}::int, ${round * 5_000 + 4_999}::int) g`
        await sql`UPDATE ${t} SET settled = true WHERE NOT settled`
        await sql`DELETE FROM ${t} WHERE id < ${(round - 1) * 5_000}::int`
      }
      const done = await maintainEmbeddedTables({ sql })
      expect(done.vacuumed).not.toContain('public.left_alone')
      sizes.kept.push(await bytes('kept'))
      sizes.left_alone.push(await bytes('left_alone'))
    }
    // Two rounds of live rows at a time: flat once the first dead rows are reclaimed.
    expect(sizes.kept[7]!).toBeLessThanOrEqual(sizes.kept[2]! * 1.1)
    expect(sizes.left_alone[7]!).toBeGreaterThan(sizes.left_alone[2]! * 2)
    expect(sizes.left_alone[7]!).toBeGreaterThan(sizes.kept[7]! * 2)
  })

  it('runs only on the embedded database', () => {
    const config = loadConfig({ env: {} })
    const deps = { sql, config, logger: undefined!, chain: undefined!, publicUrl: () => '' }
    expect(createEmbeddedVacuumJobs({ ...deps, embedded: false }).jobs).toEqual([])
    expect(createEmbeddedVacuumJobs({ ...deps, embedded: true }).jobs.map((j) => j.name)).toEqual([
      'embedded-vacuum',
    ])
  })
})

describe('embedded database maintenance in the service', () => {
  it('vacuums or analyzes the claims and calls partitions paid calls wrote', async () => {
    const svc = await startTestService({ databaseUrl: null })
    const upstream = await startUpstream()
    try {
      const merchant = await registerMerchant(svc)
      const ep = await svc.api('/api/v1/endpoints', {
        key: merchant.key,
        body: { upstream_url: `${upstream.url}/echo`, price: 0.01 },
      })
      const payer = await fundedAccount(10_000_000n)
      const [{ t: since } = { t: new Date() }] = await svc.sql<{ t: Date }[]>`SELECT now() AS t`
      // 80 calls: each partition is past the analyze threshold (50 + 10 % of its rows changed) at least.
      const hashes: string[] = []
      for (let i = 0; i < 80; i++) hashes.push(await payUsdc(payer, svc.chain.treasury, 10_000n))
      const answers = await Promise.all(
        hashes.map((h) => fetch(ep.body.metered_url, { headers: { 'x-payment': h } })),
      )
      expect(answers.map((a) => a.status)).toEqual(hashes.map(() => 200))
      await waitFor(
        async () => {
          const [r] = await svc.sql<{ n: number }[]>`SELECT count(*)::int AS n FROM calls`
          return r!.n === hashes.length
        },
        { what: 'the captures', timeoutMs: 15_000 },
      )
      // Maintained since the calls: by this run, or by the job's own schedule on a slow machine (the
      // embedded database has no autovacuum, so nothing else does it).
      const maintained = () => svc.sql<{ relname: string }[]>`
        SELECT s.relname FROM pg_stat_user_tables s JOIN pg_inherits i ON i.inhrelid = s.relid
         WHERE i.inhparent IN ('claims'::regclass, 'calls'::regclass) AND s.n_live_tup > 0
           AND greatest(s.last_vacuum, s.last_analyze) >= ${since}`

      await svc.jobs.runNow('embedded-vacuum')

      // The day's claims partition and the month's calls partition, both with the service's rows.
      const names = (await maintained()).map((r) => r.relname).sort()
      expect(names).toHaveLength(2)
      expect(names[0]).toMatch(/^calls_\d{4}_\d{2}$/)
      expect(names[1]).toMatch(/^claims_d\d{8}$/)
    } finally {
      await svc.stop()
      await upstream.close()
    }
  }, 120_000)
})
