// A claim statement that committed but whose answer was lost (the connection dropped between the commit
// and the reply): its request was answered 503 and forwarded nothing, so the batch writer releases that
// attempt by its token once the database answers again, and the payer's retry of the same proof wins at once
// instead of meeting `payment_in_progress` until the lease runs out and then `proof_already_used` (the proof
// held by nobody, refunded only at the end of its window). Found by the MCP chaos run (PostgreSQL
// crash-restarted under load). A real PostgreSQL server behind a proxy that loses the one answer.
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { BatchWriter, type BatchWriterOptions } from '../../src/books/batch-writer.ts'
import { type ClaimRequest, releaseUnacknowledgedClaims } from '../../src/books/claims.ts'
import { migrate } from '../../src/db/migrate.ts'
import { createSql, type Sql } from '../../src/db/sql.ts'
import { freshDatabaseUrl, usingServer } from '../helpers/database.ts'
import { type PgAnswerCut, startPgAnswerCut } from '../helpers/pg-answer-cut.ts'
import { waitFor } from '../helpers/wait-for.ts'

const ACCOUNT = 'acct_unacknowledged'

const BLOCK_AT_MS = Date.now() - 60_000

function request(proofKey: string): ClaimRequest {
  return {
    proofKey,
    kind: 'tx',
    targetType: 'call',
    targetId: 'ep_1',
    accountId: ACCOUNT,
    payer: '0x2222222222222222222222222222222222222222',
    amountAtomic: 10_000n,
    retryWindowMs: 600_000,
    leaseMs: 30_000,
    authorization: null,
    // The proof's block time: the same for every presentation of one proof, as the chain says.
    proofAtMs: BLOCK_AT_MS,
  }
}

describe.runIf(usingServer)('a claim written without an answer', () => {
  let direct: Sql
  let viaProxy: Sql
  let proxy: PgAnswerCut
  let released = 0

  beforeAll(async () => {
    const url = (await freshDatabaseUrl())!
    direct = createSql(url, { max: 1 })
    await migrate(direct)
    await direct`INSERT INTO accounts (id, wallet_address, business_name, mode)
      VALUES (${ACCOUNT}, '0x1111111111111111111111111111111111111111', 'B', 'test')`
    proxy = await startPgAnswerCut(url)
    viaProxy = createSql(proxy.url, { max: 1 })
  })
  afterAll(async () => {
    await viaProxy?.end({ timeout: 1 })
    await direct?.end({ timeout: 1 })
    await proxy?.close()
  })

  const claimRow = async (key: string) =>
    (
      await direct<{ status: string; attempts: number; releases: number }[]>`
        SELECT status, attempts, releases FROM claims WHERE proof_key = ${key}`
    )[0]

  /** A writer of the tests' batches; `options` on top (backoff, grace). */
  const writerOn = (sql: Sql, options: Partial<BatchWriterOptions> = {}) =>
    new BatchWriter(sql, { batchMax: 10, concurrency: 1, flushIntervalMs: 5, ...options })

  /** `writer` (through the proxy) claims and loses the answer of its committed statement: the error it saw. */
  async function claimUnanswered(writer: BatchWriter, claim: ClaimRequest): Promise<unknown> {
    // The connection is open and idle: the cut lands on the claim's own statement.
    await viaProxy`SELECT 1`
    const cut = proxy.cutNextAnswer()
    const failed = await writer.claim(claim).then(
      () => null,
      (err: unknown) => err,
    )
    await cut
    return failed
  }

  it('is released once the database answers, and the retry of the proof wins', async () => {
    const writer = new BatchWriter(viaProxy, {
      batchMax: 10,
      concurrency: 1,
      flushIntervalMs: 5,
      retryMinMs: 20,
      onUnacknowledgedReleased: (n) => {
        released += n
      },
    })
    // The connection is open and idle: the cut lands on the claim's own statement.
    await viaProxy`SELECT 1`
    const key = `tx:0x${'ab'.repeat(32)}`
    const cut = proxy.cutNextAnswer()
    const first = await writer.claim(request(key)).then(
      () => null,
      (err: unknown) => err,
    )
    await cut
    // The request saw a failure (answered 503 upstream of here), yet the claim committed and is held.
    expect(first).toBeInstanceOf(Error)
    // The release may already have landed: it needs only the database back, which it never left.
    await waitFor(() => released === 1, { what: 'the unanswered claim released', timeoutMs: 10_000 })
    expect(await claimRow(key)).toEqual({ status: 'claimed', attempts: 1, releases: 1 })
    // The payer's retry takes the proof over at once.
    expect(await writer.claim(request(key))).toEqual({
      outcome: 'won',
      attempt: 2,
      horizonAt: expect.any(String),
    })
    await writer.drain()
  })

  it('is released before its writer writes again: the retry there wins though the lease ran out', async () => {
    // Releases retried a second apart: the retry below comes first, and its own write releases the claim.
    const writer = writerOn(viaProxy, { retryMinMs: 5_000 })
    const key = `tx:0x${'a1'.repeat(32)}`
    expect(await claimUnanswered(writer, { ...request(key), leaseMs: 1 })).toBeInstanceOf(Error)
    expect(await claimRow(key)).toEqual({ status: 'claimed', attempts: 1, releases: 0 })
    // Its lease has run out (1 ms): without the release first, this retry would meet its own forgotten claim.
    expect(await writer.claim(request(key))).toMatchObject({ outcome: 'won', attempt: 2 })
    await writer.drain()
  })

  it('answers another writer busy, not used, until the holder released it', async () => {
    const holder = writerOn(viaProxy, { retryMinMs: 300 })
    const other = writerOn(direct)
    const key = `tx:0x${'b2'.repeat(32)}`
    expect(await claimUnanswered(holder, { ...request(key), leaseMs: 1 })).toBeInstanceOf(Error)
    // Another instance's retry, the lease run out: the holder may still release it (DOUBT_GRACE_MS).
    expect(await other.claim(request(key))).toEqual({ outcome: 'busy' })
    await holder.drain()
    expect(await claimRow(key)).toEqual({ status: 'claimed', attempts: 1, releases: 1 })
    expect(await other.claim(request(key))).toMatchObject({ outcome: 'won', attempt: 2 })
    await other.drain()
  })

  it('widens the grace by an outage its writer saw, for leases that ran out while it lasted', async () => {
    const writer = writerOn(viaProxy, { doubtGraceMs: 2_000 })
    // Held by an instance that never came back, its lease run out a second before the database went away.
    const key = `tx:0x${'c3'.repeat(32)}`
    await direct`INSERT INTO claims (proof_key, kind, target_type, target_id, account_id, payer, amount_atomic,
                                     status, retry_until, lease_until, attempts, releases, attempt_token, horizon_at)
      VALUES (${key}, 'tx', 'call', 'ep_1', ${ACCOUNT}, '0x22', 10000, 'claimed', now() + interval '10 minutes',
              now() - interval '1 second', 1, 0, 'gone', claim_horizon_at('tx', to_timestamp(${BLOCK_AT_MS} / 1000.0), NULL))`
    expect(await claimUnanswered(writer, request(`tx:0x${'c4'.repeat(32)}`))).toBeInstanceOf(Error)
    // Back: the unanswered claim released, the outage over.
    await writer.drain()
    const upAt = Date.now()
    await new Promise((r) => setTimeout(r, 1_300))
    // 2.3 s past its lease, more than the grace; but it ran out within the grace before the outage this writer
    // saw, which ended less than the grace ago: busy.
    expect(await writer.claim(request(key))).toEqual({ outcome: 'busy' })
    await new Promise((r) => setTimeout(r, Math.max(0, upAt + 2_300 - Date.now())))
    // The grace has passed since the database came back: in doubt for good.
    expect(await writer.claim(request(key))).toEqual({ outcome: 'used' })
    await writer.drain()
  })

  it('leaves alone a claim taken over since, and one that was never written', async () => {
    const key = `tx:0x${'cd'.repeat(32)}`
    await direct`INSERT INTO claims (proof_key, kind, target_type, target_id, account_id, payer, amount_atomic,
                                     status, retry_until, lease_until, attempts, releases, attempt_token, horizon_at)
      VALUES (${key}, 'tx', 'call', 'ep_1', ${ACCOUNT}, '0x22', 10000, 'claimed', now() + interval '10 minutes',
              now() + interval '30 seconds', 2, 1, 'later-attempt', now())`
    const n = await releaseUnacknowledgedClaims(direct, [
      { proofKey: key, token: 'earlier-attempt' },
      { proofKey: 'tx:never-written', token: 'earlier-attempt' },
    ])
    expect(n).toBe(0)
    expect(await claimRow(key)).toEqual({ status: 'claimed', attempts: 2, releases: 1 })
  })
})
