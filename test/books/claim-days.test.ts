// Claims partitioned by the day of the proof's own time (migration 0055), at the SQL: each kind lands where
// its proof's time says, a replay computes the same key and meets its first claim wherever the row lives, a
// day below both stored horizons goes whole once nothing in it is owed (an open claim, a held payment
// proof keeps it), the inflows its claims resolved go with it, and vouchers and the default partition are
// never dropped by day.
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { claimAndCapture } from '../../src/books/claims.ts'
import { dropClaimDays } from '../../src/books/retention.ts'
import { migrate } from '../../src/db/migrate.ts'
import { claimDayPartitions, dayOf, ensureClaimPartitions } from '../../src/db/partitions.ts'
import { createSql, type Sql } from '../../src/db/sql.ts'
import { freshDatabaseUrl, migratedDatabase, usingServer } from '../helpers/database.ts'

const DAY = 86_400_000
let db: Awaited<ReturnType<typeof migratedDatabase>>
let sql: Sql

beforeAll(async () => {
  db = await migratedDatabase({ max: 1 })
  sql = db.sql
})
afterAll(async () => {
  await db?.stop()
})

const partitionOf = async (key: string) =>
  (
    await sql<
      { part: string }[]
    >`SELECT tableoid::regclass::text AS part FROM claims WHERE proof_key = ${key}`
  ).map((r) => r.part)

const dayName = (ms: number) => `claims_d${dayOf(ms).replaceAll('-', '')}`

/** A claim as the books write it: the key computed by claim_horizon_at, ON CONFLICT on (proof_key, horizon_at). */
async function claim(q: {
  key: string
  kind: 'tx' | 'eip3009' | 'batch'
  status?: string
  proofAt?: Date | null
  auth?: Record<string, string> | null
  targetType?: 'call' | 'payment'
  targetId?: string
  settled?: boolean
}): Promise<boolean> {
  const rows = await sql`
    INSERT INTO claims (proof_key, kind, target_type, target_id, account_id, payer, amount_atomic, status,
                        proof_at, authorization_payload, captured_at, settled_at, horizon_at)
    SELECT ${q.key}, ${q.kind}, ${q.targetType ?? 'call'}, ${q.targetId ?? 'ep_d'}, 'acct_d', '0xpayer', 1000,
           ${q.status ?? 'captured'}, v.at, v.auth, now(), ${q.settled ? sql`now()` : null},
           claim_horizon_at(${q.kind}, v.at, v.auth)
    FROM (SELECT ${q.proofAt ?? null}::timestamptz AS at, ${q.auth ? JSON.stringify(q.auth) : null}::text::jsonb AS auth) v
    ON CONFLICT (proof_key, horizon_at) DO NOTHING RETURNING 1`
  return rows.length === 1
}

describe('claims by the day of their proof', () => {
  it('lands each kind where its proof time says; a replay meets its first claim there', async () => {
    const now = Date.now()
    const blockAt = new Date(now - 3_600_000)
    expect(await claim({ key: 'tx:d-block', kind: 'tx', proofAt: blockAt })).toBe(true)
    expect(await partitionOf('tx:d-block')).toEqual([dayName(blockAt.getTime())])
    const validBefore = Math.floor((now + DAY) / 1000)
    expect(
      await claim({ key: 'auth:d-vb', kind: 'eip3009', auth: { validBefore: String(validBefore) } }),
    ).toBe(true)
    expect(await partitionOf('auth:d-vb')).toEqual([dayName(validBefore * 1000)])
    expect(await claim({ key: 'batch:0xd:1000', kind: 'batch' })).toBe(true)
    expect(await partitionOf('batch:0xd:1000')).toEqual(['claims_vouchers'])
    // A validBefore no day was made for (here, any uint256): the default partition, the same key every time.
    const far = (2n ** 255n).toString()
    expect(await claim({ key: 'auth:d-far', kind: 'eip3009', auth: { validBefore: far } })).toBe(true)
    expect(await partitionOf('auth:d-far')).toEqual(['claims_default'])
    // Replays: the same proof computes the same horizon_at, so the second insert conflicts.
    expect(await claim({ key: 'tx:d-block', kind: 'tx', proofAt: blockAt })).toBe(false)
    expect(
      await claim({ key: 'auth:d-vb', kind: 'eip3009', auth: { validBefore: String(validBefore) } }),
    ).toBe(false)
    expect(await claim({ key: 'batch:0xd:1000', kind: 'batch' })).toBe(false)
    expect(await claim({ key: 'auth:d-far', kind: 'eip3009', auth: { validBefore: far } })).toBe(false)
  })

  it('a day made later takes its rows out of the default partition; the key still holds them once', async () => {
    const now = Date.now()
    const ahead = now + 10 * DAY
    const vb = String(Math.floor(ahead / 1000))
    expect(await claim({ key: 'auth:d-ahead', kind: 'eip3009', auth: { validBefore: vb } })).toBe(true)
    expect(await partitionOf('auth:d-ahead')).toEqual(['claims_default'])
    const created = await ensureClaimPartitions(sql, { nowMs: ahead - DAY, oldestMs: ahead - DAY })
    expect(created).toContain(dayName(ahead))
    expect(await partitionOf('auth:d-ahead')).toEqual([dayName(ahead)])
    expect(await claim({ key: 'auth:d-ahead', kind: 'eip3009', auth: { validBefore: vb } })).toBe(false)
    // Idempotent.
    expect(await ensureClaimPartitions(sql, { nowMs: ahead - DAY, oldestMs: ahead - DAY })).toEqual([])
  })

  it('drops a day below both horizons whole, unless something in it is still owed', async () => {
    const now = Date.now()
    const [closedDay, openDay, heldDay, settlingDay] = [9, 8, 7, 6].map((d) => now - d * DAY)
    for (const at of [closedDay!, openDay!, heldDay!, settlingDay!]) {
      await sql`SELECT claims_day_partition(${dayOf(at)}::date)`
    }
    const at = (ms: number) => new Date(ms)
    // The closed day: every state that is over, and an inflow its transaction claim resolved.
    await claim({ key: 'tx:0xd1', kind: 'tx', proofAt: at(closedDay!), status: 'captured' })
    await claim({ key: 'tx:0xd2', kind: 'tx', proofAt: at(closedDay!), status: 'refunded' })
    await claim({ key: 'tx:0xd3', kind: 'tx', proofAt: at(closedDay!), status: 'void' })
    await claim({
      key: 'auth:d-settled',
      kind: 'eip3009',
      auth: { validBefore: String(Math.floor(closedDay! / 1000)) },
      settled: true,
    })
    await sql`INSERT INTO unmatched_inflows (tx_hash, payer, amount_atomic, block_number)
              VALUES ('0xd1', '0xpayer', 1000, 1), ('0xnobody', '0xpayer', 1000, 2)`
    // An in-doubt call (claimed): its day stays.
    await claim({ key: 'tx:0xd4', kind: 'tx', proofAt: at(openDay!), status: 'claimed' })
    // An applied proof of a payment still pending: owed back if that payment expires, so its day stays.
    await sql`INSERT INTO payments (id, account_id, amount_atomic, amount_requested_atomic, status, description,
                                    expires_at)
              VALUES ('pay_d', 'acct_d', 5000, 5000, 'pending', 'held', now() + interval '1 hour')`
    await claim({
      key: 'tx:0xd5',
      kind: 'tx',
      proofAt: at(heldDay!),
      status: 'applied',
      targetType: 'payment',
      targetId: 'pay_d',
    })
    // An authorization captured and not settled yet.
    await claim({
      key: 'auth:d-unsettled',
      kind: 'eip3009',
      auth: { validBefore: String(Math.floor(settlingDay! / 1000)) },
    })

    // No horizon stored yet: nothing goes.
    expect(await dropClaimDays(sql, { txPrunableBeforeMs: null, authPrunableBeforeMs: now })).toEqual({
      dropped: [],
      held: [],
      inflows: 0,
    })
    // Both horizons past the four days, one of them only past the first: only what both refuse.
    const partial = await dropClaimDays(sql, {
      txPrunableBeforeMs: now,
      authPrunableBeforeMs: closedDay! - DAY,
    })
    expect(partial.dropped).toEqual([])

    const r = await dropClaimDays(sql, {
      txPrunableBeforeMs: now - 4 * DAY,
      authPrunableBeforeMs: now - 4 * DAY,
    })
    expect(r.dropped).toEqual([dayName(closedDay!)])
    expect(r.held).toEqual([dayName(openDay!), dayName(heldDay!), dayName(settlingDay!)])
    expect(r.inflows).toBe(1)
    const names = (await claimDayPartitions(sql)).map((p) => p.name)
    expect(names).not.toContain(dayName(closedDay!))
    expect(names).toContain(dayName(openDay!))
    expect(await partitionOf('tx:0xd1')).toEqual([])
    expect(await partitionOf('tx:0xd4')).toEqual([dayName(openDay!)])
    expect(await partitionOf('tx:0xd5')).toEqual([dayName(heldDay!)])
    expect(await partitionOf('auth:d-unsettled')).toEqual([dayName(settlingDay!)])
    expect((await sql`SELECT tx_hash FROM unmatched_inflows ORDER BY tx_hash`).map((x) => x.tx_hash)).toEqual(
      ['0xnobody'],
    )
    // Vouchers and the default partition are never dropped by day.
    expect(await partitionOf('batch:0xd:1000')).toEqual(['claims_vouchers'])
    expect(await partitionOf('auth:d-far')).toEqual(['claims_default'])

    // Once the payment is no longer pending and the others are over, their days go too.
    await sql`UPDATE payments SET status = 'paid' WHERE id = 'pay_d'`
    await sql`UPDATE claims SET status = 'captured', captured_at = now() WHERE proof_key = 'tx:0xd4'`
    await sql`UPDATE claims SET settled_at = now() WHERE proof_key = 'auth:d-unsettled'`
    const later = await dropClaimDays(sql, {
      txPrunableBeforeMs: now - 4 * DAY,
      authPrunableBeforeMs: now - 4 * DAY,
    })
    expect(later.dropped).toEqual([dayName(openDay!), dayName(heldDay!), dayName(settlingDay!)])
    expect(later.held).toEqual([])
  })
})

// Under intake: paid calls are claimed and captured in today's partition, on their own connections, while
// the leader drops old days beside them. Nothing of the intake fails or waits on the drop for long, and
// what is still owed stays.
describe.runIf(usingServer)('claims by day, dropped under intake', () => {
  it('a drop that cannot have its lock in time gives up and holds the day, nothing changed', async () => {
    const url = (await freshDatabaseUrl())!
    const holder = createSql(url, { max: 1 })
    const jobs = createSql(url, { max: 1 })
    try {
      await migrate(jobs)
      const at = Date.now() - 12 * DAY
      await jobs`SELECT claims_day_partition(${dayOf(at)}::date)`
      const done = holder.begin(async (tx) => {
        // A long statement on claims: the drop's ACCESS EXCLUSIVE lock cannot be had while it runs.
        await tx`SELECT count(*) FROM claims`
        await tx`SELECT pg_sleep(1)`
      })
      await new Promise((r) => setTimeout(r, 200))
      const r = await dropClaimDays(jobs, {
        txPrunableBeforeMs: Date.now() - 7 * DAY,
        authPrunableBeforeMs: Date.now() - 7 * DAY,
        lockTimeoutMs: 100,
      })
      expect(r.dropped).toEqual([])
      expect(r.held).toContain(dayName(at))
      await done
      expect((await claimDayPartitions(jobs)).map((x) => x.name)).toContain(dayName(at))
    } finally {
      await holder.end({ timeout: 1 })
      await jobs.end({ timeout: 1 })
    }
  })

  it('drops closed days while claims are written; nothing open goes, no claim fails', async () => {
    const url = (await freshDatabaseUrl())!
    const intake = createSql(url, { max: 4 })
    const jobs = createSql(url, { max: 1 })
    try {
      await migrate(jobs)
      const now = Date.now()
      const days = [12, 11, 10, 9, 8].map((d) => now - d * DAY)
      for (const at of days) await jobs`SELECT claims_day_partition(${dayOf(at)}::date)`
      // 2,000 closed claims a day, and one in-doubt claim on the last day.
      for (const at of days) {
        await jobs`
          INSERT INTO claims (proof_key, kind, target_type, target_id, account_id, payer, amount_atomic, status,
                              proof_at, captured_at, horizon_at)
          SELECT 'tx:old' || ${at} || ':' || g, 'tx', 'call', 'ep_i', 'acct_i', '0xpayer', 1000, 'captured',
                 ${new Date(at)}, now(), ${new Date(at)}
          FROM generate_series(1, 2000) g`
      }
      const held = days.at(-1)!
      await jobs`
        INSERT INTO claims (proof_key, kind, target_type, target_id, account_id, payer, amount_atomic, status,
                            proof_at, retry_until, horizon_at)
        VALUES ('tx:in-doubt', 'tx', 'call', 'ep_i', 'acct_i', '0xpayer', 1000, 'claimed', ${new Date(held)},
                now() + interval '10 minutes', ${new Date(held)})`

      let stop = false
      let written = 0
      let slowest = 0
      const errors: unknown[] = []
      const writer = async (w: number) => {
        for (let i = 0; !stop; i++) {
          const keys = Array.from({ length: 20 }, (_, j) => `tx:new:${w}:${i}:${j}`)
          const blockAt = now - 60_000
          const t0 = performance.now()
          try {
            const claimed = await claimAndCapture(intake, {
              claims: keys.map((proofKey) => ({
                proofKey,
                kind: 'tx' as const,
                proofAtMs: blockAt,
                targetType: 'call' as const,
                targetId: 'ep_i',
                accountId: 'acct_i',
                payer: '0xpayer',
                amountAtomic: 1000n,
                retryWindowMs: 600_000,
                leaseMs: 30_000,
                authorization: null,
              })),
              captures: [],
            })
            await claimAndCapture(intake, {
              claims: [],
              captures: keys.map((proofKey, j) => ({
                callId: `call_${w}_${i}_${j}`,
                proofKey,
                endpointId: 'ep_i',
                accountId: 'acct_i',
                ownerWallet: '0x1111111111111111111111111111111111111111',
                payer: '0xpayer',
                amountAtomic: 1000n,
                ownerShareAtomic: 950n,
                feeAtomic: 50n,
                upstreamStatus: 200,
                method: 'GET',
                horizonAt: (claimed.claims[j] as { horizonAt?: string }).horizonAt ?? null,
              })),
            })
            written += keys.length
          } catch (err) {
            errors.push(err)
          }
          slowest = Math.max(slowest, performance.now() - t0)
        }
      }
      const writers = [0, 1, 2].map(writer)
      const dropped: string[] = []
      const heldDays: string[] = []
      for (let round = 0; round < 5; round++) {
        await new Promise((r) => setTimeout(r, 200))
        const r = await dropClaimDays(jobs, {
          txPrunableBeforeMs: now - 7 * DAY,
          authPrunableBeforeMs: now - 7 * DAY,
        })
        dropped.push(...r.dropped)
        heldDays.push(...r.held)
      }
      stop = true
      await Promise.all(writers)

      expect(errors).toEqual([])
      expect(written).toBeGreaterThan(0)
      expect(new Set(dropped)).toEqual(new Set(days.slice(0, 4).map(dayName)))
      expect(heldDays).toContain(dayName(held))
      // Every claim of the intake is there and captured, with its one call.
      const [n] = await jobs<{ claims: number; captured: number; calls: number }[]>`
        SELECT (SELECT count(*) FROM claims WHERE proof_key LIKE 'tx:new:%')::int AS claims,
               (SELECT count(*) FROM claims WHERE proof_key LIKE 'tx:new:%' AND status = 'captured')::int AS captured,
               (SELECT count(*) FROM calls WHERE call_proof_key(proof_key, proof) LIKE 'tx:new:%')::int AS calls`
      expect(n).toEqual({ claims: written, captured: written, calls: written })
      expect(await jobs`SELECT 1 FROM claims WHERE proof_key = 'tx:in-doubt'`).toHaveLength(1)
      // The drop waits for a lock at most its 200 ms timeout and holds it for catalog changes only.
      expect(slowest).toBeLessThan(2_000)
    } finally {
      await intake.end({ timeout: 1 })
      await jobs.end({ timeout: 1 })
    }
  })
})
