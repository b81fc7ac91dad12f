// Database outages answer fast (a private cluster, stopped and started for real): while the server is away a
// query fails at once with an error the callers answer 503 for, never after a growing reconnect pause; once
// it is back, queries work again within a second; a statement held too long (a lock, a stalled server) is
// cut by the statement timeout, also as "unavailable"; a claim stuck behind a locked table is answered
// (rejected) at the books writer's deadline, and if it wins afterwards it is released, never left held.
import { existsSync } from 'node:fs'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { BatchWriter, ClaimTimeoutError } from '../../src/books/batch-writer.ts'
import type { ClaimRequest } from '../../src/books/claims.ts'
import { migrate } from '../../src/db/migrate.ts'
import { createSql, type Sql } from '../../src/db/sql.ts'
import { isDatabaseUnavailable } from '../../src/db/unavailable.ts'
import { waitFor } from '../helpers/wait-for.ts'
import { type PgCluster, startPgCluster } from './pg-cluster.ts'

const BLOCK_AT_MS = Date.now() - 60_000

function claimRequest(proofKey: string): ClaimRequest {
  return {
    proofKey,
    kind: 'tx',
    targetType: 'call',
    targetId: 'ep_outage',
    accountId: 'acct_outage',
    payer: '0xpayer',
    amountAtomic: 1000n,
    retryWindowMs: 600_000,
    leaseMs: 30_000,
    authorization: null,
    // The proof's block time: the same for every presentation of one proof, as the chain says.
    proofAtMs: BLOCK_AT_MS,
  }
}

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

  it('a claim behind a locked table is rejected at its deadline; won later, it is released', async () => {
    await migrate(sql)
    // Without a statement timeout here: the lock, not the server, decides how long the batch waits.
    const books = createSql(cluster.url, { max: 2 })
    const released: boolean[] = []
    const writer = new BatchWriter(books, {
      batchMax: 16,
      concurrency: 1,
      flushIntervalMs: 10,
      claimTimeoutMs: 300,
      onAbandonedRelease: (ok) => released.push(ok),
    })
    let unlock: () => void = () => {}
    const locked = new Promise<void>((resolve) => {
      unlock = resolve
    })
    let holding: () => void = () => {}
    const held = new Promise<void>((resolve) => {
      holding = resolve
    })
    const locker = books.begin(async (tx) => {
      await tx`LOCK TABLE claims IN ACCESS EXCLUSIVE MODE`
      holding()
      await locked
    })
    try {
      await held
      const t = performance.now()
      // The first is sent and waits on the lock; the second queues behind it.
      const inFlight = writer.claim(claimRequest('tx:outage-in-flight')).then(
        () => null,
        (e: unknown) => e,
      )
      const queued = writer.claim(claimRequest('tx:outage-queued')).then(
        () => null,
        (e: unknown) => e,
      )
      for (const err of [await inFlight, await queued]) {
        expect(err).toBeInstanceOf(ClaimTimeoutError)
        expect(isDatabaseUnavailable(err)).toBe(true)
      }
      expect(performance.now() - t).toBeLessThan(2_000)
    } finally {
      unlock()
      await locker
    }
    // The sent one won once the lock went, and was released at once: the proof may be presented again.
    await waitFor(() => released.length === 1, { timeoutMs: 5_000, what: 'the release' })
    expect(released).toEqual([true])
    const rows = await books<{ proof_key: string; attempts: number; releases: number }[]>`
      SELECT proof_key, attempts, releases FROM claims WHERE proof_key LIKE 'tx:outage-%'`
    // The queued one was never written.
    expect(rows).toEqual([{ proof_key: 'tx:outage-in-flight', attempts: 1, releases: 1 }])
    await writer.drain(1_000)
    await books.end({ timeout: 1 })
  })
})
