// The facilitator's /verify read (readClaimedOrReserved) asks, for each payload of a group, whether any claim
// holds its proof key. Written as EXISTS, PostgreSQL may plan that as a hashed subplan: every claim of every
// partition read once per statement to build a hash of proof keys. With a few thousand claims and a group of
// up to 64 reads that was its choice (auto_explain in the facilitator bench: 8.6 ms of a 14.8 ms statement at
// 4,500 claims), and a connection's cached plan went on reading the whole table as it grew. Each proof key
// must be looked up by the primary key's index, whatever the table's size and statistics. The statement is
// taken from the function itself (a recording tag in place of the driver) and planned on a table of 3,000
// claims, analyzed, with the planner's own costs (the EXISTS form read them all there).
import { afterAll, beforeAll, expect, it } from 'vitest'
import { readClaimedOrReserved } from '../../src/books/facilitator.ts'
import type { Sql } from '../../src/db/sql.ts'
import { migratedDatabase } from '../helpers/database.ts'

let db: Awaited<ReturnType<typeof migratedDatabase>> | undefined
let sql: Sql

beforeAll(async () => {
  db = await migratedDatabase({ max: 1 })
  sql = db.sql
  await sql`
    INSERT INTO claims (proof_key, kind, target_type, target_id, account_id, payer, amount_atomic, status,
                        horizon_at)
    SELECT 'tx:0x' || lpad(to_hex(i), 64, '0'), 'tx', 'call', 'c', 'acct', '0xabc', 1000, 'captured', now()
    FROM generate_series(1, 3000) AS i`
  await sql`ANALYZE claims`
})
afterAll(() => db?.stop())

/** The statement readClaimedOrReserved sends, with $n placeholders, and its parameters. */
async function statementOf(reads: Parameters<typeof readClaimedOrReserved>[1]) {
  let text = ''
  let params: unknown[] = []
  const recorder = ((strings: TemplateStringsArray, ...values: unknown[]) => {
    text = strings.reduce((all, s, i) => (i === 0 ? s : `${all}$${i}${s}`), '')
    params = values
    return Promise.resolve([])
  }) as unknown as Sql
  await readClaimedOrReserved(recorder, reads)
  return { text, params }
}

it('looks each proof key up by the index of claims, never reads every claim', async () => {
  const reads = Array.from({ length: 64 }, (_, i) => ({
    proofKey: `auth:0x${i.toString(16).padStart(40, '0')}:0x${'1'.repeat(64)}`,
    payer: `0x${(i % 8).toString(16).padStart(40, '0')}`,
    block: 100n,
  }))
  const { text, params } = await statementOf(reads)
  expect(text).toMatch(/FROM claims/)
  const rows = await sql.unsafe<{ 'QUERY PLAN': string }[]>(`EXPLAIN ${text}`, params as never[])
  const plan = rows.map((r) => r['QUERY PLAN'])
  // The partition holding the claims: by its primary key's index (the empty ones cost nothing either way).
  const [row] = await sql<{ part: string }[]>`SELECT tableoid::regclass::text AS part FROM claims LIMIT 1`
  const part = row!.part
  const scans = plan.filter((l) => new RegExp(` on ${part} `).test(l))
  expect(scans.length, plan.join('\n')).toBe(1)
  expect(scans[0], plan.join('\n')).toMatch(new RegExp(`Index (Only )?Scan using ${part}_pkey`))
  // And the answer is still right: one of them claimed, the others not.
  expect(await readClaimedOrReserved(sql, [{ ...reads[0]!, proofKey: `tx:0x${'0'.repeat(63)}1` }])).toEqual([
    { claimed: true },
  ])
})
