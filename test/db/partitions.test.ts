// The month partitions of calls, ledger entries and call deliveries (migration 0041): a row dated in a
// month without a partition lands in the default one and the partitions job moves it into a month it
// creates, without moving a balance; the months ahead exist; and the time-ranged reads (GET /calls with a
// created range, reconcile's ranged read of calls) touch only the partitions of their range.
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { listCalls } from '../../src/db/calls.ts'
import { addObserved } from '../../src/db/discovery.ts'
import {
  addMonths,
  defaultPartitionRows,
  ensurePartitions,
  MONTHS_AHEAD,
  monthBounds,
  monthOf,
  monthPartitions,
} from '../../src/db/partitions.ts'
import type { Sql } from '../../src/db/sql.ts'
import { migratedDatabase } from '../helpers/database.ts'

let db: Awaited<ReturnType<typeof migratedDatabase>>
let sql: Sql
const now = Date.now()
const current = monthOf(now)
// Far enough back that the migration made no partition for it.
const old = addMonths(current, -14)

beforeAll(async () => {
  db = await migratedDatabase({ max: 1 })
  sql = db.sql
})
afterAll(async () => {
  await db?.stop()
})

async function insertCall(id: string, at: Date) {
  await sql`
    INSERT INTO calls (id, proof_key, endpoint_id, account_id, payer, amount_atomic, owner_share_atomic,
                       fee_atomic, upstream_status, method, created_at)
    VALUES (${id}, ${`tx:${id}`}, 'ep_p', 'acct_p', '0xpayer', 100, 95, 5, 200, 'GET', ${at})`
  await sql`
    INSERT INTO ledger_entries (account_id, kind, wallet, amount_atomic, source_type, source_id, created_at)
    VALUES ('acct_p', 'owner_share', '0xowner', 95, 'call', ${id}, ${at}), ('acct_p', 'fee', NULL, 5, 'call', ${id}, ${at})`
}

describe('history partitions', () => {
  it('the migration made the current month and the next two', async () => {
    for (const table of ['calls', 'ledger_entries', 'call_deliveries'] as const) {
      const months = (await monthPartitions(sql, table)).map((p) => p.month)
      for (let i = 0; i <= MONTHS_AHEAD; i++) expect(months).toContain(addMonths(current, i))
    }
  })

  it('an insert into a month without a partition lands in the default one; the job moves it, balances unmoved', async () => {
    const at = new Date(monthBounds(old).from.getTime() + 86_400_000)
    await insertCall('call_old_1', at)
    await sql`
      INSERT INTO call_deliveries (receipt_id, body_sha256, body_bytes, created_at)
      VALUES ('rcpt_old_1', 'ab', 1, ${at})`
    expect(await defaultPartitionRows(sql, 'calls')).toBe(1)
    expect(await defaultPartitionRows(sql, 'ledger_entries')).toBe(2)
    const balance = async () =>
      (
        await sql`SELECT owner_share_atomic, fees_atomic FROM account_balance_totals WHERE account_id = 'acct_p'`
      )[0]
    const before = await balance()
    expect(before).toEqual({ owner_share_atomic: 95n, fees_atomic: 5n })

    const created = await ensurePartitions(sql, { nowMs: now })
    const suffix = old.replace('-', '_')
    expect(created.sort()).toEqual([
      `call_deliveries_${suffix}`,
      `calls_${suffix}`,
      `ledger_entries_${suffix}`,
    ])
    for (const table of ['calls', 'ledger_entries', 'call_deliveries'] as const) {
      expect(await defaultPartitionRows(sql, table)).toBe(0)
    }
    expect(await sql`SELECT tableoid::regclass::text AS p FROM calls WHERE id = 'call_old_1'`).toEqual([
      { p: `calls_${suffix}` },
    ])
    expect(await balance()).toEqual(before)
    // Idempotent: nothing more to make.
    expect(await ensurePartitions(sql, { nowMs: now })).toEqual([])
    // A month later the job makes the month that is then two ahead.
    const later = await ensurePartitions(sql, { nowMs: monthBounds(addMonths(current, 1)).from.getTime() })
    expect(later).toContain(`calls_${addMonths(current, 3).replace('-', '_')}`)
  })

  it('a replayed flush of delivery records is a no-op (their key holds the time)', async () => {
    const at = new Date(now)
    const delivered = ['rcpt_twice_a', 'rcpt_twice_b', 'rcpt_twice_c'].map((receiptId, i) => ({
      receiptId,
      bodySha256: `cd${i}`,
      bodyBytes: 2 + i,
      deliveredAt: at,
    }))
    // The flush whose commit was not acknowledged is sent again, whole, with the same times.
    for (let i = 0; i < 2; i++) await addObserved(sql, [], [], delivered)
    const rows = await sql<{ receipt_id: string; body_sha256: string; body_bytes: string }[]>`
      SELECT receipt_id, body_sha256, body_bytes::text FROM call_deliveries WHERE receipt_id LIKE 'rcpt_twice_%'
      ORDER BY receipt_id`
    expect(rows.map((r) => [r.receipt_id, r.body_sha256, r.body_bytes])).toEqual([
      ['rcpt_twice_a', 'cd0', '2'],
      ['rcpt_twice_b', 'cd1', '3'],
      ['rcpt_twice_c', 'cd2', '4'],
    ])
  })

  it('ranged reads of calls prune to the partitions of their range (EXPLAIN)', async () => {
    await insertCall('call_now_1', new Date(now))
    const { from, to } = monthBounds(current)
    // GET /calls with created[gte]/[lt] inside one month.
    const listed = await listCalls(sql, {
      accountId: 'acct_p',
      endpointId: null,
      limit: 10,
      startingAfter: null,
      createdGte: from,
      createdLt: to,
    })
    expect(listed.map((c) => c.id)).toEqual(['call_now_1'])
    const plan = async (text: string, params: unknown[]) =>
      (await sql.unsafe(`EXPLAIN ${text}`, params as never[]))
        .map((r) => r['QUERY PLAN'] as string)
        .join('\n')
    const listPlan = await plan(
      `SELECT id FROM calls WHERE account_id = $1 AND created_at >= $2 AND created_at < $3
       ORDER BY created_at DESC, id DESC LIMIT 10`,
      ['acct_p', from, to],
    )
    const scanned = (p: string) => [...new Set(p.match(/\bcalls_(\d{4}_\d{2}|default)\b/g) ?? [])]
    expect(scanned(listPlan)).toEqual([`calls_${current.replace('-', '_')}`])
    // Reconcile's split: calls of a range (here the old month only).
    const old0 = monthBounds(old)
    const splitPlan = await plan(
      'SELECT count(*) FROM calls c WHERE c.created_at >= $1 AND c.created_at < $2',
      [old0.from, old0.to],
    )
    expect(scanned(splitPlan)).toEqual([`calls_${old.replace('-', '_')}`])
    // Ledger entries of a range (the balances' incremental scope).
    const ledgerPlan = await plan('SELECT DISTINCT account_id FROM ledger_entries WHERE created_at >= $1', [
      from,
    ])
    expect(ledgerPlan).not.toContain(`ledger_entries_${old.replace('-', '_')}`)
  })
})
