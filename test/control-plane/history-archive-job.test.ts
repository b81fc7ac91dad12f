// Retention by partitions (retention.archive_after_months): the leader's history-archive job archives the
// months older than the setting and drops their partitions whole; 0 (the default) keeps everything. The
// balances recomputed from the entries plus the archived sums still equal the stored ones.
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { Config } from '../../src/config/schema.ts'
import { archiveOldMonths } from '../../src/control-plane/jobs/partitions.ts'
import { checkBalances } from '../../src/control-plane/jobs/reconcile-balances.ts'
import {
  addMonths,
  ensurePartitions,
  monthBounds,
  monthOf,
  monthPartitions,
} from '../../src/db/partitions.ts'
import type { Sql } from '../../src/db/sql.ts'
import { createLogger } from '../../src/observability/logger.ts'
import { migratedDatabase } from '../helpers/database.ts'

let db: Awaited<ReturnType<typeof migratedDatabase>>
let sql: Sql
let out: string
const now = Date.now()
const current = monthOf(now)
const logger = createLogger('silent')

function config(keep: number): Config {
  return { retention: { archive_after_months: keep, archive_dir: out } } as unknown as Config
}

beforeAll(async () => {
  db = await migratedDatabase({ max: 1 })
  sql = db.sql
  out = mkdtempSync(join(tmpdir(), 'tollgate-history-'))
  // Fees only (nothing owed to a wallet, nothing to pay out): five months back and one month back.
  for (const [i, month] of [addMonths(current, -5), addMonths(current, -1)].entries()) {
    const at = new Date(monthBounds(month).from.getTime() + 3_600_000)
    await sql`
      INSERT INTO calls (id, proof_key, endpoint_id, account_id, payer, amount_atomic, owner_share_atomic,
                         fee_atomic, upstream_status, method, created_at)
      VALUES (${`call_h${i}`}, ${`tx:h${i}`}, 'ep_h', 'acct_h', '0xpayer', 7, 0, 7, 200, 'GET', ${at})`
    await sql`
      INSERT INTO ledger_entries (account_id, kind, wallet, amount_atomic, source_type, source_id, created_at)
      VALUES ('acct_h', 'fee', NULL, 7, 'call', ${`call_h${i}`}, ${at})`
  }
  await ensurePartitions(sql, { nowMs: now })
})
afterAll(async () => {
  await db?.stop()
  if (out) rmSync(out, { recursive: true, force: true })
})

describe('retention by partitions', () => {
  it('off (0): keeps every month', async () => {
    expect(await archiveOldMonths({ sql, config: config(0), logger }, now)).toEqual({
      archived: [],
      refused: null,
    })
    expect((await monthPartitions(sql, 'calls')).map((p) => p.month)).toContain(addMonths(current, -5))
  })

  it('archives and drops whole the months older than the setting; balances still recompute', async () => {
    const r = await archiveOldMonths({ sql, config: config(3), logger }, now)
    expect(r).toEqual({ archived: [addMonths(current, -5)], refused: null })
    const months = (await monthPartitions(sql, 'calls')).map((p) => p.month)
    expect(months).not.toContain(addMonths(current, -5))
    expect(months).toContain(addMonths(current, -1))
    expect(await sql`SELECT id FROM calls WHERE account_id = 'acct_h'`).toEqual([{ id: 'call_h1' }])
    const [stored] = await sql`SELECT fees_atomic FROM account_balance_totals WHERE account_id = 'acct_h'`
    expect(stored).toEqual({ fees_atomic: 14n })
    const check = await checkBalances(sql, null)
    expect(check.differences).toEqual([])
  })
})
