// The settlement jobs' polled reads (every second or so, on every instance) look for authorizations and
// permits, whose claims live in the days of their validBefore or deadline, never in claims_vouchers. They
// say so, and that partition, the largest under channel traffic, is not read by any of them.
import { describe, expect, it } from 'vitest'
import { listDueSettlements, listSentSettlements, readSettlementBacklog } from '../../src/books/settlement.ts'
import {
  listDueUptoSettlements,
  listSentUptoSettlements,
  readUptoSettlementBacklog,
} from '../../src/books/upto-settlement.ts'
import { createSql, type Sql } from '../../src/db/sql.ts'
import { freshDatabaseUrl, usingServer } from '../helpers/database.ts'

/** Scans of claims_vouchers so far, as the statistics of this session's own statements show them. */
async function voucherScans(one: Sql): Promise<bigint> {
  await one`SELECT pg_stat_force_next_flush()`
  await one`SELECT pg_stat_clear_snapshot()`
  const [r] = await one<{ n: bigint }[]>`
    SELECT (coalesce(seq_scan, 0) + coalesce(idx_scan, 0))::bigint AS n FROM pg_stat_user_tables
    WHERE relname = 'claims_vouchers'`
  return r!.n
}

describe.runIf(usingServer)('the settlement jobs’ polled reads', () => {
  it('leave the vouchers’ partition out', async () => {
    const one = createSql((await freshDatabaseUrl())!, { max: 1 })
    try {
      // Voucher claims present, as under channel traffic.
      await one`
        INSERT INTO claims (proof_key, kind, target_type, target_id, account_id, payer, amount_atomic, status,
                            retry_until, lease_until, captured_at, horizon_at)
        SELECT 'batch:0x' || lpad(to_hex(g), 64, '0') || ':1000', 'batch', 'call', 'ep_1', 'acct_1', '0xab', 1000,
               'captured', now(), now(), now(), claim_horizon_at('batch', NULL, NULL)
        FROM generate_series(1, 50) g`
      const reads = {
        listSentSettlements: () => listSentSettlements(one),
        listDueSettlements: () => listDueSettlements(one, { limit: 10 }),
        readSettlementBacklog: () => readSettlementBacklog(one),
        listSentUptoSettlements: () => listSentUptoSettlements(one),
        listDueUptoSettlements: () => listDueUptoSettlements(one, { limit: 10 }),
        readUptoSettlementBacklog: () => readUptoSettlementBacklog(one),
      }
      const scans: Record<string, bigint> = {}
      for (const [name, read] of Object.entries(reads)) {
        const before = await voucherScans(one)
        await read()
        scans[name] = (await voucherScans(one)) - before
      }
      expect(scans).toEqual(Object.fromEntries(Object.keys(reads).map((k) => [k, 0n])))
    } finally {
      await one.end()
    }
  })
})
