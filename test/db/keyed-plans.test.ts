// The books pool's keyed plans (src/db/sql.ts keyedPlans): with statistics taken while the claims were
// empty, as after a quiet ANALYZE or on a new day's partition, the capture's prepared plan read the day's
// partition whole, once per statement, more with every call. On the keyed pool no statement reads claims by
// a sequential scan, and the captures land the same.
import { describe, expect, it } from 'vitest'
import { type Capture, type ClaimRequest, claimAndCapture } from '../../src/books/claims.ts'
import { migrate } from '../../src/db/migrate.ts'
import { createSql } from '../../src/db/sql.ts'
import { freshDatabaseUrl, usingServer } from '../helpers/database.ts'

const PAYER = `0x${'ab'.repeat(20)}`

/** Batches of 10 claims, each with the captures of the batch before, as under steady paid load. */
async function paidLoad(keyedPlans: boolean): Promise<{ seqRead: number; captured: number }> {
  const url = (await freshDatabaseUrl())!
  const sql = createSql(url, { max: 1, keyedPlans })
  try {
    await migrate(sql)
    await sql`INSERT INTO accounts (id, wallet_address, business_name, mode)
              VALUES ('acct_1', '0x0000000000000000000000000000000000000001', 'Owner', 'test')`
    // Statistics of empty tables, before the first claim.
    await sql`ANALYZE`
    let serial = 0
    let open: Capture[] = []
    let captured = 0
    const at = Date.now() - 60_000
    for (let batch = 0; batch < 60; batch++) {
      const claims: ClaimRequest[] = Array.from({ length: 10 }, () => {
        serial++
        return {
          proofKey: `tx:0x${serial.toString(16).padStart(64, '0')}`,
          kind: 'tx',
          proofAtMs: at,
          targetType: 'call',
          targetId: `call_${serial}`,
          accountId: 'acct_1',
          payer: PAYER,
          amountAtomic: 10_000n,
          retryWindowMs: 60_000,
          leaseMs: 30_000,
          authorization: null,
        }
      })
      const r = await claimAndCapture(sql, { claims, captures: open })
      captured += r.captured.size
      open = claims.map((c, i) => {
        const won = r.claims[i]!
        if (won.outcome !== 'won') throw new Error(`claim ${c.proofKey}: ${won.outcome}`)
        return {
          callId: c.targetId,
          proofKey: c.proofKey,
          endpointId: 'ep_1',
          accountId: 'acct_1',
          ownerWallet: '0x0000000000000000000000000000000000000001',
          payer: PAYER,
          amountAtomic: c.amountAtomic,
          ownerShareAtomic: 9_500n,
          feeAtomic: 500n,
          upstreamStatus: 200,
          method: 'GET',
          horizonAt: won.horizonAt,
        }
      })
    }
    // This backend's counts are reported at the end of the next transaction, not a second later.
    await sql`SELECT pg_stat_force_next_flush()`
    const [row] = await sql<{ n: string }[]>`
      SELECT coalesce(sum(seq_tup_read), 0)::text AS n FROM pg_stat_user_tables WHERE relname LIKE 'claims%'`
    return { seqRead: Number(row!.n), captured }
  } finally {
    await sql.end()
  }
}

describe.runIf(usingServer)('keyed plans of the books pool', () => {
  it('capture without reading the claims partition whole, whatever the statistics said', async () => {
    const plain = await paidLoad(false)
    const keyed = await paidLoad(true)
    // The hazard, shown: the plain pool's plan read claims rows by sequential scans.
    expect(plain.seqRead).toBeGreaterThan(0)
    expect(keyed.seqRead).toBe(0)
    expect(keyed.captured).toBe(590)
    expect(plain.captured).toBe(590)
  }, 60_000)
})
