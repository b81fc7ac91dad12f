// Every connection of the service plans row at a time (src/db/sql.ts ROW_AT_A_TIME): no JIT compilation and
// no parallel workers, whatever a plan's estimate says. On a server both start once an estimate crosses
// their threshold, which grown tables reach while the work stays small (reconcile's claims check at 10 M
// history rows: 600 ms, 110 without them). The embedded database has neither (no LLVM, one process).
import postgres from 'postgres'
import { beforeAll, describe, expect, it } from 'vitest'
import { createSql, type Sql } from '../../src/db/sql.ts'
import { freshDatabaseUrl, usingServer } from '../helpers/database.ts'

// A function the planner takes for 100 M rows (a cost in the millions, far above jit_above_cost's default
// 100,000) that returns one: a costly estimate, cheap to run.
const COSTLY_ESTIMATE = 'SELECT sum(x) FROM seemingly_many() x'
const SEEMINGLY_MANY = `CREATE OR REPLACE FUNCTION seemingly_many() RETURNS SETOF int LANGUAGE plpgsql ROWS 100000000
  AS $$ BEGIN RETURN NEXT 1; END $$`

async function plan(sql: Sql | postgres.Sql, query: string): Promise<string> {
  const rows = await sql.unsafe(`EXPLAIN (ANALYZE, TIMING OFF, SUMMARY OFF) ${query}`)
  return rows.map((r) => (r as Record<string, string>)['QUERY PLAN']).join('\n')
}

/** Parallel plans made cheap for this session: a Gather is chosen wherever workers are allowed. */
async function cheapParallel(sql: Sql | postgres.Sql): Promise<void> {
  await sql.unsafe('SET parallel_setup_cost = 0')
  await sql.unsafe('SET parallel_tuple_cost = 0')
  await sql.unsafe('SET min_parallel_table_scan_size = 0')
}

describe.runIf(usingServer)('row-at-a-time plans on a server', () => {
  let url: string
  beforeAll(async () => {
    url = (await freshDatabaseUrl({ empty: true }))!
    // A plain table: temporary ones are never scanned in parallel.
    const admin = postgres(url, { max: 1, onnotice: () => {} })
    await admin.unsafe('CREATE TABLE many AS SELECT g AS n FROM generate_series(1, 50000) g')
    await admin.unsafe('ANALYZE many')
    await admin.unsafe(SEEMINGLY_MANY)
    await admin.end()
  })

  it('a costly estimate is not compiled, where the server default compiles it', async () => {
    const bare = postgres(url, { max: 1, onnotice: () => {}, connection: { jit_above_cost: '100000' } })
    const ours = createSql(url, { max: 1 })
    try {
      // Where the server has JIT (an LLVM build): the default compiles it, ours does not.
      const [jit] = await bare<{ available: boolean }[]>`SELECT pg_jit_available() AS available`
      if (jit!.available) expect(await plan(bare, COSTLY_ESTIMATE)).toContain('JIT')
      expect(await plan(ours, COSTLY_ESTIMATE)).not.toContain('JIT')
      expect((await ours`SHOW jit`)[0]!.jit).toBe('off')
    } finally {
      await Promise.all([bare.end(), ours.end()])
    }
  })

  it('no Gather, where the same settings give the default one', async () => {
    const bare = postgres(url, { max: 1, onnotice: () => {} })
    const ours = createSql(url, { max: 1 })
    try {
      for (const sql of [bare, ours]) await cheapParallel(sql)
      expect(await plan(bare, 'SELECT count(*) FROM many')).toContain('Gather')
      expect(await plan(ours, 'SELECT count(*) FROM many')).not.toContain('Gather')
    } finally {
      await Promise.all([bare.end(), ours.end()])
    }
  })
})
