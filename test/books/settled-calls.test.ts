// Booking settled calls from what their settlement statement returned (bookSettledCalls): each call its claim
// names, found in its month by the claim's capture time, is booked once in one settlement batch; a call not
// found at that time is still booked, from its proof; nothing is booked twice.
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { takeChannelLease, writeChannelVouchers } from '../../src/books/channels.ts'
import { bookSettledCalls, SETTLED_CALL, type SettledCall, settledCalls } from '../../src/books/ledger.ts'
import type { Sql } from '../../src/db/sql.ts'
import { CHANNEL_OWNER, depositedChannel, servedCall } from '../helpers/channel-books.ts'
import { migratedDatabase } from '../helpers/database.ts'

let sql: Sql
let db: Awaited<ReturnType<typeof migratedDatabase>> | undefined
const ACCOUNT = 'acct_settled'
const PRICE = 1000n

beforeAll(async () => {
  db = await migratedDatabase({ max: 2 })
  sql = db.sql
  await sql`INSERT INTO accounts (id, wallet_address, business_name, mode)
            VALUES (${ACCOUNT}, ${CHANNEL_OWNER}, 'B', 'test')`
})
afterAll(async () => {
  await db?.stop()
})

let n = 0
/** A channel with `calls` served calls written (captured claims and their call rows), none settled. */
async function servedCalls(calls: number): Promise<SettledCall[]> {
  const id = await depositedChannel(sql, `0x${(++n).toString(16).padStart(64, '0')}`, BigInt(calls) * PRICE)
  const reserve = BigInt(calls) * PRICE
  const lease = (await takeChannelLease(sql, { channelId: id, holder: 'a', ttlMs: 60_000, reserve }))!
  const served = Array.from({ length: calls }, (_, i) =>
    servedCall({ channelId: id, calls: BigInt(i + 1), price: PRICE, accountId: ACCOUNT }),
  )
  const mark = {
    channelId: id,
    epoch: lease.lease_epoch,
    cumulative: BigInt(calls) * PRICE,
    signature: `0x${'ab'.repeat(65)}`,
    release: false,
  }
  const written = await writeChannelVouchers(sql, {
    holder: 'a',
    ttlMs: 60_000,
    reserve,
    marks: [mark],
    calls: served,
  })
  expect(written.written.size).toBe(calls)
  const rows = await sql<{ proof_key: string; call_id: string | null; captured_utc: string | null }[]>`
    SELECT k.proof_key, ${sql.unsafe(SETTLED_CALL)} FROM claims k WHERE split_part(k.proof_key, ':', 2) = ${id}`
  return settledCalls(rows)
}

/** The calls booked, the batches that booked them, and those batches' entries in all. */
async function booked(calls: SettledCall[]) {
  const ids = calls.map((c) => c.callId)
  const [r] = await sql<{ booked: number; batches: number; entries: bigint }[]>`
    WITH b AS (SELECT DISTINCT ledger_batch_id FROM calls WHERE id = ANY(${ids}::text[]) AND ledger_batch_id IS NOT NULL)
    SELECT (SELECT count(*)::int FROM calls WHERE id = ANY(${ids}::text[]) AND ledger_batch_id IS NOT NULL) AS booked,
           (SELECT count(*)::int FROM b) AS batches,
           (SELECT coalesce(sum(e.amount_atomic), 0)::bigint FROM ledger_entries e
            WHERE e.source_type = 'settlement_batch' AND e.source_id IN (SELECT ledger_batch_id::text FROM b)) AS entries`
  return r!
}

describe('bookSettledCalls', () => {
  it('books each call once, in one batch whose entries are the calls’ sum', async () => {
    const calls = await servedCalls(5)
    expect(calls).toHaveLength(5)
    // The capture time is the call row's own, to the microsecond.
    const [row] = await sql<{ same: boolean }[]>`
      SELECT bool_and(c.created_at = t.at::timestamptz) AS same
      FROM unnest(${calls.map((c) => c.callId)}::text[], ${calls.map((c) => c.capturedAt)}::text[]) AS t(id, at)
      JOIN calls c ON c.id = t.id`
    expect(row!.same).toBe(true)
    expect(await sql.begin((tx) => bookSettledCalls(tx as never, calls))).toBe(5)
    expect(await booked(calls)).toEqual({ booked: 5, batches: 1, entries: 5n * PRICE })
    // Again: nothing left to book, nothing booked twice.
    expect(await sql.begin((tx) => bookSettledCalls(tx as never, calls))).toBe(0)
    expect(await booked(calls)).toEqual({ booked: 5, batches: 1, entries: 5n * PRICE })
  })

  it('a call not found at the time given is booked from its proof, once', async () => {
    const calls = await servedCalls(3)
    // A capture time that is not the call row's: the named booking misses it, the proof finds it.
    const off = calls.map((c, i) => (i === 1 ? { ...c, capturedAt: '2020-01-01T00:00:00.000000Z' } : c))
    expect(await sql.begin((tx) => bookSettledCalls(tx as never, off))).toBe(3)
    const b = await booked(calls)
    expect(b.booked).toBe(3)
    expect(b.entries).toBe(3n * PRICE)
    expect(await sql.begin((tx) => bookSettledCalls(tx as never, off))).toBe(0)
    expect((await booked(calls)).entries).toBe(3n * PRICE)
  })
})
