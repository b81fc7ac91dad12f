import { readdirSync } from 'node:fs'
import { join } from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
import { startEmbeddedDatabase } from '../../src/db/embedded.ts'
import { migrate } from '../../src/db/migrate.ts'
import { createSql, type Sql } from '../../src/db/sql.ts'
import { freshDatabaseUrl, startEmbeddedDatabasesEmpty, usingServer } from '../helpers/database.ts'

// These tests apply the migrations themselves: their databases start from before the first.
startEmbeddedDatabasesEmpty()
const ALL = readdirSync(join(import.meta.dirname, '../../src/db/migrations'))
  .filter((f) => f.endsWith('.sql'))
  .sort()

const closers: Array<() => Promise<unknown>> = []
afterAll(async () => {
  for (const c of closers.reverse()) await c()
})

async function schemaOf(sql: Sql) {
  return sql`SELECT table_name, column_name, data_type FROM information_schema.columns
             WHERE table_schema = 'public' ORDER BY table_name, column_name`
}

describe('migrations', () => {
  it('applied twice leave one schema (embedded PGlite, kept across restarts)', async () => {
    const db = await startEmbeddedDatabase({ dataDir: 'memory://' })
    closers.push(() => db.stop())
    const sql = createSql(db.url, { max: 1 })
    closers.push(() => sql.end())
    expect((await migrate(sql)).applied).toEqual(ALL)
    const first = await schemaOf(sql)
    expect((await migrate(sql)).applied).toEqual([])
    expect(await schemaOf(sql)).toEqual(first)
    const money =
      await sql`SELECT data_type FROM information_schema.columns WHERE column_name LIKE '%_atomic'`
    expect(new Set(money.map((r) => r.data_type))).toEqual(new Set(['bigint']))
  })

  it.runIf(usingServer)('run by two processes at once on a server, one applies and one waits', async () => {
    const url = (await freshDatabaseUrl({ empty: true }))!
    const a = createSql(url, { max: 1 })
    const b = createSql(url, { max: 1 })
    closers.push(
      () => a.end(),
      () => b.end(),
    )
    const [ra, rb] = await Promise.all([migrate(a), migrate(b)])
    expect([...ra.applied, ...rb.applied]).toEqual(ALL)
    const rows = await a`SELECT name FROM schema_migrations`
    expect(rows.map((r) => r.name)).toEqual(ALL)
  })
})
