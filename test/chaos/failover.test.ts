// The bounded failover checks for CI: a private primary with a streaming standby. The multi-host
// DATABASE_URL with target_session_attrs=read-write reaches the primary (never the standby, listed first) and
// follows the promotion; under paid load with synchronous replication, promoting the standby and stopping
// the old primary serves no proof twice (replayed on a fresh instance) and charges nobody for a call not
// served. The asynchronous figure and the cost of each mode are measured by `npm run chaos`.
import { existsSync } from 'node:fs'
import { describe, expect, it } from 'vitest'
import { createSql } from '../../src/db/sql.ts'
import { formatFailover, runFailover } from './failover.ts'
import { startPgCluster } from './pg-cluster.ts'
import { startStandby, waitForStreaming } from './pg-standby.ts'

describe.runIf(existsSync('/usr/lib/postgresql'))('failover to a streaming standby (bounded)', () => {
  it('read-write on a multi-host URL skips the standby, then finds it once promoted', async () => {
    const primary = await startPgCluster()
    const standby = await startStandby(primary).catch(async (err) => {
      await primary.destroy()
      throw err
    })
    const url = `postgres://postgres@127.0.0.1:${standby.port},127.0.0.1:${primary.port}/postgres?target_session_attrs=read-write`
    const sql = createSql(url, { max: 2 })
    try {
      await waitForStreaming(primary, standby, false)
      const where = async () =>
        (
          await sql<{ port: number; recovery: boolean }[]>`
          SELECT inet_server_port() AS port, pg_is_in_recovery() AS recovery`
        )[0]
      // The standby answers first in the list: a session there could not write.
      expect(await where()).toEqual({ port: primary.port, recovery: false })
      await sql`CREATE TABLE t (n int)`
      await standby.promote()
      await primary.stop('immediate')
      // The pool's connections to the old primary are gone: the next query reconnects to the new one.
      let after: { port: number; recovery: boolean } | undefined
      for (let i = 0; i < 50 && after === undefined; i++) {
        after = await where().catch(() => undefined)
        if (after === undefined) await new Promise((r) => setTimeout(r, 200))
      }
      expect(after).toEqual({ port: standby.port, recovery: false })
      await sql`INSERT INTO t VALUES (1)`
      await sql.begin(async (tx) => {
        await tx`INSERT INTO t VALUES (2)`
      })
      expect((await sql<{ n: number }[]>`SELECT count(*)::int AS n FROM t`)[0]!.n).toBe(2)
    } finally {
      await sql.end({ timeout: 1 })
      await standby.destroy()
      await primary.destroy()
    }
  })

  it('synchronous replication: promote the standby under paid load, nothing served twice', async ({
    onTestFailed,
  }) => {
    const lines: string[] = []
    // A run cut short by the timeout never reaches the assertions that carry the log: print it then too.
    onTestFailed(() => {
      process.stderr.write(`\n${lines.join('\n')}\n`)
    })
    const result = await runFailover({
      mode: 'sync-on',
      steadyProofs: 100,
      failoverProofs: 200,
      roundMs: 6_000,
      concurrency: 8,
      log: (line) => lines.push(line),
    })
    const table = formatFailover([result])
    process.stdout.write(`\n${table}\n`)
    const context = `${lines.join('\n')}\n${table}`
    expect(result.crashed, context).toBe(0)
    // Every claim an instance acted on was on the standby before it was acknowledged.
    expect(result.claimsLost, context).toBe(0)
    expect(result.servedTwice, context).toBe(0)
    expect(result.replayServedAgain, context).toBe(0)
    expect(result.chargedNotServed, context).toBe(0)
    expect(result.capturedNotServed, context).toBe(0)
    // Every proof ended served, or refused on an in-doubt claim (refunded once its retry window closes).
    expect(result.gaveUp, context).toBe(0)
    expect(result.served + result.inDoubt, context).toBe(result.proofs)
    // Paid calls resumed on the new primary by themselves, within seconds.
    expect(result.outageMs, context).toBeGreaterThan(0)
    expect(result.outageMs, context).toBeLessThan(15_000)
    expect(result.reconcileExit, context).toBe(0)
    expect(result.balanceDrift, context).toBe(0)
  })
})
