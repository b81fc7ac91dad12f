// Migration 0011 fills the running balances of a database that already has books: applied on top of entries
// written before it, the stored balances equal the sums of those entries.
import { copyFileSync, mkdtempSync, readdirSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
import { checkBalances } from '../../src/control-plane/jobs/reconcile-balances.ts'
import { startEmbeddedDatabase } from '../../src/db/embedded.ts'
import { migrate } from '../../src/db/migrate.ts'
import { createSql } from '../../src/db/sql.ts'
import { freshDatabaseUrl, startEmbeddedDatabasesEmpty } from '../helpers/database.ts'

// These tests apply the migrations themselves: their databases start from before the first.
startEmbeddedDatabasesEmpty()
const DIR = join(import.meta.dirname, '../../src/db/migrations')
const closers: Array<() => unknown> = []
afterAll(async () => {
  for (const c of closers.reverse()) await c()
})

describe('migration 0011', () => {
  it('fills the running balances from the entries already there', async () => {
    let url = await freshDatabaseUrl({ empty: true })
    if (!url) {
      const db = await startEmbeddedDatabase({ dataDir: 'memory://' })
      closers.push(() => db.stop())
      url = db.url
    }
    const sql = createSql(url, { max: 1 })
    closers.push(() => sql.end())
    const before = mkdtempSync(join(tmpdir(), 'tollgate-migrations-'))
    closers.push(() => rmSync(before, { recursive: true, force: true }))
    for (const f of readdirSync(DIR).filter((f) => f.endsWith('.sql') && f < '0011'))
      copyFileSync(join(DIR, f), join(before, f))
    await migrate(sql, before)
    await sql`
      INSERT INTO payouts (id, wallet, amount_atomic, status, treasury, nonce)
      VALUES ('po_c', '0xowner', 950, 'confirmed', '0xt', 1), ('po_s', '0xowner', 950, 'submitted', '0xt', 2)`
    await sql`
      INSERT INTO ledger_entries (account_id, kind, wallet, amount_atomic, source_type, source_id, payout_id)
      VALUES ('acct_a', 'owner_share', '0xowner', 950, 'call', 'c1', 'po_c'),
             ('acct_a', 'fee', NULL, 50, 'call', 'c1', NULL),
             ('acct_a', 'owner_share', '0xowner', 950, 'call', 'c2', 'po_s'),
             ('acct_a', 'fee', NULL, 50, 'call', 'c2', NULL),
             ('acct_a', 'owner_share', '0xowner', 950, 'call', 'c3', NULL),
             ('acct_a', 'refund', '0xpayer', 700, 'claim', 'tx:1', NULL)`
    expect((await migrate(sql)).applied).toContain('0011_running_balances.sql')
    const [b] = await sql`SELECT * FROM account_balance_totals WHERE account_id = 'acct_a'`
    expect(b).toMatchObject({
      owner_share_atomic: 2850n,
      fees_atomic: 100n,
      refunds_atomic: 700n,
      paid_out_atomic: 950n,
      in_flight_atomic: 950n,
      refunded_atomic: 0n,
    })
    const wallets = await sql`SELECT wallet, unpaid_atomic FROM wallet_balance_totals ORDER BY wallet`
    expect(wallets).toEqual([
      { wallet: '0xowner', unpaid_atomic: 950n },
      { wallet: '0xpayer', unpaid_atomic: 700n },
    ])
    expect((await checkBalances(sql, null)).differences).toEqual([])
  })
})
