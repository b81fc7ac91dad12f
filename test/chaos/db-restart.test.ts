// The database client across a PostgreSQL restart (a private cluster, restarted for real): transactions
// and reserved sessions in flight fail with a catchable error instead of killing the process (postgres
// 3.4.9 throws from nextWrite on a null socket otherwise), and everything works again afterwards.
import { existsSync } from 'node:fs'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { startLeadership } from '../../src/control-plane/jobs/leader.ts'
import { createSql, SessionClosedError, type Sql } from '../../src/db/sql.ts'
import { isDatabaseUnavailable } from '../../src/db/unavailable.ts'
import { whenAvailable } from '../../src/db/when-available.ts'
import { createLogger } from '../../src/observability/logger.ts'
import { waitFor } from '../helpers/wait-for.ts'
import { type PgCluster, startPgCluster } from './pg-cluster.ts'

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))

describe.runIf(existsSync('/usr/lib/postgresql'))('database client across a PostgreSQL restart', () => {
  let cluster: PgCluster
  let sql: Sql
  const uncaught: unknown[] = []
  const onUncaught = (err: unknown) => uncaught.push(err)

  beforeAll(async () => {
    cluster = await startPgCluster()
    sql = createSql(cluster.url, { max: 4 })
    await sql`CREATE TABLE t (n int)`
    // Recorded, not fatal to the test runner: the assertion below names what escaped.
    process.on('uncaughtException', onUncaught)
  })
  afterAll(async () => {
    process.removeListener('uncaughtException', onUncaught)
    await sql?.end({ timeout: 1 })
    await cluster?.destroy()
  })

  it('transactions and reserved sessions in flight fail cleanly, nothing escapes, and all recovers', async () => {
    const reserved = await sql.reserve()
    await reserved`SELECT 1`
    const inTx = sql
      .begin(async (tx) => {
        await tx`INSERT INTO t VALUES (1)`
        await tx`SELECT pg_sleep(5)`
      })
      .then(
        () => null,
        (err: unknown) => err,
      )
    // Restarted while the transaction sits in pg_sleep(5): the timing is the fault under test.
    await sleep(300)
    await cluster.restart('fast')

    const txError = await inTx
    expect(isDatabaseUnavailable(txError), String(txError)).toBe(true)
    // The reserved session died with its connection: refused, never written on a dead socket.
    const first = await reserved`SELECT 1`.then(
      () => null,
      (err: unknown) => err,
    )
    expect(first).toBeInstanceOf(SessionClosedError)
    expect(isDatabaseUnavailable(first)).toBe(true)
    const second = await reserved`SELECT 1`.then(
      () => null,
      (err: unknown) => err,
    )
    expect(second).toBeInstanceOf(SessionClosedError)
    reserved.release()
    // Immediates (where the driver would have thrown) have run by now: a fixed wait on purpose, for a negative.
    await sleep(200)
    expect(uncaught).toEqual([])

    // The interrupted transaction left nothing behind; new ones and pooled queries work.
    await sql.begin(async (tx) => {
      await tx`INSERT INTO t VALUES (2)`
    })
    const rows = await sql<{ n: number }[]>`SELECT n FROM t ORDER BY n`
    expect(rows.map((r) => r.n)).toEqual([2])
    const again = await sql.reserve()
    expect(await again`SELECT 1 AS one`).toEqual([{ one: 1 }])
    again.release()
  })

  it('a transaction retried by whenAvailable lands once the server is back, after a crash', async () => {
    const write = () =>
      sql.begin(async (tx) => {
        await tx`INSERT INTO t VALUES (3)`
      })
    await cluster.stop('immediate')
    // Refused while the server is down: without the retry, the record would be dropped here.
    expect(
      isDatabaseUnavailable(
        await write().then(
          () => null,
          (err: unknown) => err,
        ),
      ),
    ).toBe(true)
    const retried = whenAvailable(write, { timeoutMs: 30_000 })
    // Down for a second more under the retry: the outage is the fault under test.
    await sleep(1_000)
    await cluster.start()
    await retried
    const rows = await sql<{ n: number }[]>`SELECT n FROM t WHERE n = 3`
    expect(rows).toHaveLength(1)
    // Not the database being away: thrown at once, not retried.
    await expect(whenAvailable(() => sql`SELECT nope`, { timeoutMs: 30_000 })).rejects.toThrow(/nope/)
  })

  it('the leader steps down when its session dies and competes again on a fresh one', async () => {
    const logger = createLogger('silent')
    const leadership = await startLeadership(sql, { embedded: false, retryMs: 200, logger })
    const other = createSql(cluster.url, { max: 2 })
    try {
      expect(leadership.isLeader()).toBe(true)
      // The lock went with the session: within a few checks the old leader knows it. Watched while the
      // server restarts: a reconnect is quick (its pause is capped), so the lock may be taken again by
      // the time the restart returns.
      const steppedDown = waitFor(() => !leadership.isLeader(), {
        timeoutMs: 10_000,
        intervalMs: 20,
        what: 'the step-down',
      })
      await cluster.restart('fast', 500)
      await steppedDown
      // Then it takes the lock again on a new session (nobody else is competing).
      await waitFor(() => leadership.isLeader(), {
        timeoutMs: 20_000,
        intervalMs: 100,
        what: 'the lock again',
      })
      // And the lock is really held: another session cannot take it.
      const [row] = await other<{ ok: boolean }[]>`SELECT pg_try_advisory_lock(7301002) AS ok`
      expect(row?.ok).toBe(false)
      expect(uncaught).toEqual([])
    } finally {
      await leadership.stop()
      await other.end({ timeout: 1 })
    }
  })
})
