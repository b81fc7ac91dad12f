// Migration 0015 gives payout_accounts its payout's created_at, so GET /payouts pages an account's payouts by
// an index walk instead of sorting all of them: applied on a database that already has payouts it backfills
// every row, the batcher's write sets it from then on, and the pages keep their order and cursor rules.
import { copyFileSync, mkdtempSync, readdirSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { recordPayouts } from '../../src/books/payouts.ts'
import { startEmbeddedDatabase } from '../../src/db/embedded.ts'
import { migrate } from '../../src/db/migrate.ts'
import { listAccountPayouts } from '../../src/db/payouts.ts'
import { createSql, type Sql } from '../../src/db/sql.ts'
import { freshDatabaseUrl, startEmbeddedDatabasesEmpty } from '../helpers/database.ts'

// These tests apply the migrations themselves: their databases start from before the first.
startEmbeddedDatabasesEmpty()
const DIR = join(import.meta.dirname, '../../src/db/migrations')
const closers: Array<() => unknown> = []
let sql: Sql

beforeAll(async () => {
  let url = await freshDatabaseUrl({ empty: true })
  if (!url) {
    const db = await startEmbeddedDatabase({ dataDir: 'memory://' })
    closers.push(() => db.stop())
    url = db.url
  }
  sql = createSql(url, { max: 1 })
  closers.push(() => sql.end())
}, 60_000)
afterAll(async () => {
  for (const c of closers.reverse()) await c()
})

/** Every payout of acct_a in the order GET /payouts promises: newest first, id breaking ties. */
async function expectedOrder(accountId: string): Promise<string[]> {
  const rows = await sql<{ id: string }[]>`
    SELECT p.id FROM payouts p JOIN payout_accounts pa ON pa.payout_id = p.id AND pa.account_id = ${accountId}
    ORDER BY p.created_at DESC, p.id DESC`
  return rows.map((r) => r.id)
}

async function pageThrough(accountId: string, limit: number): Promise<string[]> {
  const seen: string[] = []
  let cursor: string | null = null
  for (;;) {
    const rows = await listAccountPayouts(sql, { accountId, limit, startingAfter: cursor, status: null })
    seen.push(...rows.map((r) => r.id))
    if (rows.length < limit) return seen
    cursor = rows.at(-1)!.id
  }
}

describe('migration 0015', () => {
  it('backfills created_at on existing rows; the batcher sets it; pages keep their order', async () => {
    const before = mkdtempSync(join(tmpdir(), 'tollgate-migrations-'))
    closers.push(() => rmSync(before, { recursive: true, force: true }))
    for (const f of readdirSync(DIR).filter((f) => f.endsWith('.sql') && f < '0015'))
      copyFileSync(join(DIR, f), join(before, f))
    await migrate(sql, before)

    // Books written before the migration: five payouts, two of them at the same instant (the id breaks the
    // tie), one failed; acct_a is in all of them, acct_b shares one.
    await sql`
      INSERT INTO payouts (id, wallet, amount_atomic, status, treasury, nonce, created_at)
      VALUES ('po_1', '0xowner', 100, 'confirmed', '0xt', 1, '2026-01-01T00:00:00.000001Z'),
             ('po_2', '0xowner', 100, 'failed',    '0xt', 2, '2026-01-02T00:00:00.000002Z'),
             ('po_3', '0xowner', 100, 'confirmed', '0xt', 3, '2026-01-03T00:00:00.000003Z'),
             ('po_4', '0xowner', 100, 'confirmed', '0xt', 4, '2026-01-03T00:00:00.000003Z'),
             ('po_5', '0xowner', 100, 'confirmed', '0xt', 5, '2026-01-05T00:00:00.000005Z')`
    await sql`
      INSERT INTO payout_accounts (payout_id, account_id, owner_share_atomic, refund_atomic, entries_count)
      SELECT id, 'acct_a', 90, 0, 1 FROM payouts
      UNION ALL SELECT 'po_3', 'acct_b', 10, 0, 1`

    // 0015 and whatever came after it (later migrations are not this test's subject).
    const applied = (await migrate(sql)).applied
    expect(applied[0]).toBe('0015_payout_accounts_created.sql')
    expect(applied.every((f) => f >= '0015')).toBe(true)
    const mismatched = await sql`
      SELECT pa.payout_id FROM payout_accounts pa JOIN payouts p ON p.id = pa.payout_id
      WHERE pa.created_at IS DISTINCT FROM p.created_at`
    expect(mismatched).toEqual([])
    const [col] = await sql`
      SELECT is_nullable FROM information_schema.columns
      WHERE table_name = 'payout_accounts' AND column_name = 'created_at'`
    expect(col!.is_nullable).toBe('NO')

    // The batcher's write after the migration: two accounts' entries on one wallet, one payout.
    await sql`
      INSERT INTO ledger_entries (account_id, kind, wallet, amount_atomic, source_type, source_id)
      VALUES ('acct_a', 'owner_share', '0xnew', 500, 'call', 'c1'),
             ('acct_b', 'owner_share', '0xnew', 300, 'call', 'c2')`
    const recorded = await recordPayouts(sql, {
      treasury: '0xt',
      firstNonce: 6,
      minAtomic: 1n,
      maxWallets: 10,
      maxEntries: 100,
      afford: () => null,
      sign: async ({ nonce }) => ({ rawTx: '0x', hash: `0x${nonce.toString(16).padStart(64, '0')}` }),
    })
    expect(recorded.ok && recorded.payouts.map((p) => p.wallet)).toEqual(['0xnew'])
    expect(
      await sql`
        SELECT pa.account_id FROM payout_accounts pa JOIN payouts p ON p.id = pa.payout_id
        WHERE p.wallet = '0xnew' AND pa.created_at = p.created_at ORDER BY 1`,
    ).toEqual([{ account_id: 'acct_a' }, { account_id: 'acct_b' }])

    // Pages of every size walk the same order as the old sort over payouts, none missed or repeated.
    const want = await expectedOrder('acct_a')
    expect(want).toHaveLength(6)
    expect(want.slice(1)).toEqual(['po_5', 'po_4', 'po_3', 'po_2', 'po_1'])
    for (const limit of [1, 2, 4, 10]) expect(await pageThrough('acct_a', limit)).toEqual(want)
    expect(await pageThrough('acct_b', 1)).toEqual(await expectedOrder('acct_b'))

    const failed = await listAccountPayouts(sql, {
      accountId: 'acct_a',
      limit: 10,
      startingAfter: null,
      status: 'failed',
    })
    expect(failed.map((r) => [r.id, r.account_amount_atomic])).toEqual([['po_2', 90n]])
    // A cursor naming another account's payout (or none) pages nothing, as every other list's cursor.
    const foreign = await listAccountPayouts(sql, {
      accountId: 'acct_b',
      limit: 10,
      startingAfter: 'po_5',
      status: null,
    })
    expect(foreign).toEqual([])
  })

  it('serves a page in index order: no sort, whatever the number of payouts', async () => {
    // Sorting is made prohibitively dear for the planner: a plan with a Sort node here means the index
    // cannot give the order, and the page would cost a sort of every payout of the account.
    // The migration backfills created_at (HOT updates) and then builds the index on it, so PostgreSQL marks
    // the index indcheckxmin: no plan may use it while any transaction in the cluster is older than its
    // build. In CI other test files hold such transactions, and this plan sorted (one failed run). A rewrite
    // clears the mark; what is checked here is that the index gives the order, once usable.
    await sql`VACUUM FULL payout_accounts`
    const [mark] = await sql<{ indcheckxmin: boolean }[]>`
      SELECT indcheckxmin FROM pg_index WHERE indexrelid = 'payout_accounts_account_created'::regclass`
    expect(mark!.indcheckxmin).toBe(false)
    const plan = await sql.begin(async (tx) => {
      await tx`SET LOCAL enable_sort = off`
      await tx`SET LOCAL enable_seqscan = off`
      const rows = await tx.unsafe(
        `EXPLAIN SELECT p.id FROM payout_accounts pa JOIN payouts p ON p.id = pa.payout_id
         WHERE pa.account_id = 'acct_a'
           AND (pa.created_at, pa.payout_id) < (SELECT created_at, payout_id FROM payout_accounts
                                                 WHERE account_id = 'acct_a' AND payout_id = 'po_4')
         ORDER BY pa.created_at DESC, pa.payout_id DESC LIMIT 3`,
      )
      return rows.map((r) => r['QUERY PLAN'] as string).join('\n')
    })
    expect(plan).toContain('payout_accounts_account_created')
    expect(plan).not.toMatch(/\bSort\b/)
  })
})
