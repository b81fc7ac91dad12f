// payer_reserved (migrations 0065, 0070, 0078, 0079) runs in every x402 claim and every facilitator /verify.
// Each of its sums must read the payer's rows only, by an index on lower(payer), on every partition but the
// vouchers' (no x402 claim is there): a sum that walks another index and filters by payer costs every claim
// in flight of every payer. The upto 'settling' sum did until migration 0078 (0.72 ms of the function's 1.2
// with 4,000 facilitator claims in flight). Since 0079 there are three sums, not eight: each partition's
// index descents were most of the function's cost. A captured permit's call is looked up by its id. The query is
// read from the function as installed and planned generic (as the function runs it, migration 0077), with
// sequential scans off so that a missing index shows on tables this small.
import { afterAll, beforeAll, expect, it } from 'vitest'
import type { Sql } from '../../src/db/sql.ts'
import { migratedDatabase } from '../helpers/database.ts'

let db: Awaited<ReturnType<typeof migratedDatabase>> | undefined
let sql: Sql

beforeAll(async () => {
  db = await migratedDatabase({ max: 1 })
  sql = db.sql
})
afterAll(() => db?.stop())

/** The sums' one query, from the installed function's source, with its arguments as parameters. */
async function reservedQuery(): Promise<string> {
  const [fn] = await sql<
    { src: string }[]
  >`SELECT prosrc AS src FROM pg_proc WHERE proname = 'payer_reserved'`
  const body = fn!.src.slice(fn!.src.indexOf('END IF;'))
  const query = /(SELECT[\s\S]*?)\s+INTO reserved/.exec(body)?.[1]
  expect(query, 'the SELECT … INTO reserved of payer_reserved').toBeTruthy()
  return query!.replaceAll('payer_l', '$1').replaceAll('since_block', '$2')
}

it("reads each of its sums by the payer's index, on every partition of claims", async () => {
  const query = await reservedQuery()
  const plan = await sql.begin(async (tx) => {
    await tx`SET LOCAL enable_seqscan = off`
    await tx`SET LOCAL plan_cache_mode = force_generic_plan`
    await tx.unsafe(`PREPARE reserved_plan(text, bigint) AS ${query}`)
    const rows = await tx.unsafe<{ 'QUERY PLAN': string }[]>(
      `EXPLAIN (COSTS OFF) EXECUTE reserved_plan('0xabc', 1)`,
    )
    await tx.unsafe('DEALLOCATE reserved_plan')
    return rows.map((r) => r['QUERY PLAN'])
  })
  const scans: Array<{ node: string; cond: string }> = []
  for (const [i, line] of plan.entries()) {
    if (!/ on claims_\w+/.test(line) || !/Scan/.test(line)) continue
    // The condition the scan looks its rows up by: its own Index Cond, or a bitmap heap scan's Recheck Cond.
    const cond = plan.slice(i + 1).find((l) => /Index Cond:|Recheck Cond:|Scan/.test(l)) ?? ''
    scans.push({ node: line.trim(), cond: cond.trim() })
  }
  const partitions = (
    await sql<{ name: string }[]>`
      SELECT c.relname AS name FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
      WHERE i.inhparent = 'claims'::regclass`
  ).map((r) => r.name)
  expect(partitions).toContain('claims_vouchers')
  // Three sums, each on every partition but the vouchers'.
  expect(scans.length, plan.join('\n')).toBe(3 * (partitions.length - 1))
  expect(plan.join('\n')).not.toMatch(/claims_vouchers/)
  for (const s of scans) {
    expect(s.node, plan.join('\n')).not.toMatch(/Seq Scan/)
    expect(s.cond, `${s.node}\n${plan.join('\n')}`).toMatch(
      /^(Index|Recheck) Cond: \(+lower\(\w*\.?payer\) = \$1/,
    )
  }
  // The call of a captured permit: by its id, never a walk of calls.
  const callScans = plan.filter((l) => / on calls_\w+/.test(l))
  expect(callScans.length, plan.join('\n')).toBeGreaterThan(0)
  for (const l of callScans) expect(l, plan.join('\n')).toMatch(/Index (Only )?Scan/)
})
