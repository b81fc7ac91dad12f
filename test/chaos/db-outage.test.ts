// Database outages answer fast (a private cluster, stopped and started for real): while the server is away a
// query fails at once with an error the callers answer 503 for, never after a growing reconnect pause; once
// it is back, queries work again within a second; a statement held too long (a lock, a stalled server) is
// cut by the statement timeout, also as "unavailable".
import { existsSync } from 'node:fs'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createSql, type Sql } from '../../src/db/sql.ts'
import { isDatabaseUnavailable } from '../../src/db/unavailable.ts'
import { type PgCluster, startPgCluster } from './pg-cluster.ts'

/** One query's outcome and how long it took. */
async function timed(sql: Sql): Promise<{ ok: boolean; ms: number; err?: unknown }> {
  const t = performance.now()
  return sql`SELECT 1`.then(
    () => ({ ok: true, ms: performance.now() - t }),
    (err: unknown) => ({ ok: false, ms: performance.now() - t, err }),
  )
}

describe.runIf(existsSync('/usr/lib/postgresql'))('database outage', () => {
  let cluster: PgCluster
  let sql: Sql
  beforeAll(async () => {
    cluster = await startPgCluster()
    sql = createSql(cluster.url, { max: 4, statementTimeoutMs: 500, connectTimeoutMs: 2_000 })
    await sql`SELECT 1`
  })
  afterAll(async () => {
    await sql?.end({ timeout: 1 })
    await cluster?.destroy()
  })

  it('fails fast while the server is down and resumes within a second of its return', async () => {
    await cluster.stop('immediate')
    // Many failed connects in a row: with the driver's default back-off the pause would now be 7–20 s.
    const during: Array<{ ok: boolean; ms: number; err?: unknown }> = []
    for (let i = 0; i < 25; i++) during.push(await timed(sql))
    for (const d of during) {
      expect(d.ok).toBe(false)
      expect(isDatabaseUnavailable(d.err), String(d.err)).toBe(true)
      // The capped pause (250 ms) plus one refused connect, with room for a loaded machine.
      expect(d.ms).toBeLessThan(1_000)
    }
    await cluster.start()
    const back = performance.now()
    let first: { ok: boolean; ms: number } = { ok: false, ms: 0 }
    while (!first.ok && performance.now() - back < 5_000) first = await timed(sql)
    expect(first.ok).toBe(true)
    expect(performance.now() - back).toBeLessThan(1_000)
  })

  it('a statement held past the statement timeout fails as unavailable', async () => {
    const err = await sql`SELECT pg_sleep(3)`.then(
      () => null,
      (e: unknown) => e,
    )
    expect((err as { code?: string }).code).toBe('57014')
    expect(isDatabaseUnavailable(err)).toBe(true)
    // The connection is fine afterwards.
    expect((await timed(sql)).ok).toBe(true)
  })
})
