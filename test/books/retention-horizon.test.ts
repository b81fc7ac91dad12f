// Retention by a stored horizon, at the SQL: a prune run announces the horizon it used and deletes only
// below one announced a propagation delay earlier; a claim whose proof's block time is past the horizon stays
// whatever its claim time (a chain clock ahead of the database's); vouchers go once settled and below their
// channel's charged total (the top one never); an unmatched inflow goes with the claim that resolved it,
// an open one stays; nothing unsettled or unpaid goes.
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { loadConfig } from '../../src/config/load.ts'
import { pruneHistory } from '../../src/control-plane/jobs/retention.ts'
import { loadRefusedBefore } from '../../src/db/proof-horizons.ts'
import type { Sql } from '../../src/db/sql.ts'
import { migratedDatabase } from '../helpers/database.ts'

const AGE_MS = 60_000
let db: Awaited<ReturnType<typeof migratedDatabase>>
let sql: Sql
const config = loadConfig({
  env: { NODE_ENV: 'test' },
  overrides: {
    chain: { max_proof_age_ms: AGE_MS },
    retention: { claims_margin_ms: 0, voucher_claims_ms: 0 },
  },
})

beforeAll(async () => {
  db = await migratedDatabase({ max: 1 })
  sql = db.sql
})
afterAll(async () => {
  await db?.stop()
})

async function txClaim(key: string, q: { proofAt: Date | null; claimedAt: Date; status?: string }) {
  await sql`
    INSERT INTO claims (proof_key, kind, target_type, target_id, account_id, payer, amount_atomic, status,
                        claimed_at, captured_at, proof_at, horizon_at)
    VALUES (${key}, 'tx', 'call', 'ep_h', 'acct_h', '0xpayer', 1000, ${q.status ?? 'captured'},
            ${q.claimedAt}, ${q.claimedAt}, ${q.proofAt}, coalesce(${q.proofAt}::timestamptz, ${q.claimedAt}::timestamptz))`
}

const left = async (prefix: string) =>
  (await sql<{ proof_key: string }[]>`SELECT proof_key FROM claims WHERE proof_key LIKE ${`${prefix}%`}`)
    .map((r) => r.proof_key)
    .sort()

describe('retention by a stored horizon', () => {
  it('announces first and deletes only below a horizon announced a propagation delay before', async () => {
    const t0 = Date.now()
    const old = new Date(t0 - 10 * AGE_MS)
    await txClaim('tx:h-old', { proofAt: old, claimedAt: old })
    // First run: the horizon is announced (every verifier refuses below it from now on), nothing deleted.
    const first = await pruneHistory({ sql, config }, { propagationMs: 60_000, nowMs: t0 })
    expect(first.claims).toBe(0)
    expect(await left('tx:h-')).toEqual(['tx:h-old'])
    const announced = await loadRefusedBefore(sql)
    expect(announced.tx).toBeCloseTo(t0 - AGE_MS, -2)
    // Still inside the propagation delay: unchanged.
    expect((await pruneHistory({ sql, config }, { propagationMs: 60_000, nowMs: t0 + 1000 })).claims).toBe(0)
    // Once the announcement is older than the delay, what it named goes.
    await sql`UPDATE proof_horizons SET announced_at = now() - interval '2 minutes'`
    const later = await pruneHistory({ sql, config }, { propagationMs: 60_000, nowMs: t0 + 2000 })
    // The claim goes row by row from today's partition or, in the minutes after midnight UTC, with the whole
    // of yesterday's (its day ends below the horizon); either way once.
    const dayOfOld = `claims_d${old.toISOString().slice(0, 10).replaceAll('-', '')}`
    const droppedWithDay = later.claim_days_dropped.includes(dayOfOld) ? 1 : 0
    expect(later.claims + droppedWithDay).toBe(1)
    expect(await left('tx:h-')).toEqual([])
    // A run with a larger age never lowers the horizon: the largest ever used stands.
    const bigger = loadConfig({
      env: { NODE_ENV: 'test' },
      overrides: { chain: { max_proof_age_ms: 100 * AGE_MS }, retention: { claims_margin_ms: 0 } },
    })
    await pruneHistory({ sql, config: bigger }, { propagationMs: 0, nowMs: t0 + 3000 })
    expect((await loadRefusedBefore(sql)).tx).toBeGreaterThanOrEqual(announced.tx)
    const [row] = await sql<{ max_age_ms: bigint }[]>`SELECT max_age_ms FROM proof_horizons WHERE kind = 'tx'`
    expect(row!.max_age_ms).toBe(BigInt(100 * AGE_MS))
  })

  it("compares the proof's own block time: a chain clock ahead of the database keeps the row", async () => {
    const now = Date.now()
    const claimedLongAgo = new Date(now - 10 * AGE_MS)
    // Claimed long ago by the database's clock, but its block time is recent (a chain running ahead, margin 0):
    // the verifier still accepts that proof by age, so its row must stay.
    await txClaim('tx:s-ahead', { proofAt: new Date(now - AGE_MS / 2), claimedAt: claimedLongAgo })
    await txClaim('tx:s-behind', { proofAt: claimedLongAgo, claimedAt: claimedLongAgo })
    // Not closed: owed a refund, whatever its age.
    await txClaim('tx:s-due', { proofAt: claimedLongAgo, claimedAt: claimedLongAgo, status: 'refund_due' })
    // Written before proof_at existed: its claim time stands in for it.
    await txClaim('tx:s-legacy', { proofAt: null, claimedAt: claimedLongAgo })
    await pruneHistory({ sql, config }, { propagationMs: 0, nowMs: now })
    expect(await left('tx:s-')).toEqual(['tx:s-ahead', 'tx:s-due'])
  })

  it('prunes settled vouchers below the channel total, never the top one, an unsettled or an in-doubt one', async () => {
    await sql`
      INSERT INTO batch_channels (channel_id, config, payer, balance_atomic, charged_atomic, claimed_atomic)
      VALUES ('0xch', '{}', '0xpayer', 10000, 3000, 2000)`
    const settled = new Date(Date.now() - 60_000)
    for (const [cum, status, settledAt] of [
      [1000, 'captured', settled],
      [2000, 'captured', settled],
      // The charged top: its row is what refuses that voucher a second time.
      [3000, 'captured', settled],
    ] as const) {
      await sql`
        INSERT INTO claims (proof_key, kind, target_type, target_id, account_id, payer, amount_atomic, status,
                            captured_at, settled_at, horizon_at)
        VALUES (${`batch:0xch:${cum}`}, 'batch', 'call', 'ep_h', 'acct_h', '0xpayer', 1000, ${status},
                now(), ${settledAt}, 'infinity')`
    }
    await sql`
      INSERT INTO batch_channels (channel_id, config, payer, balance_atomic, charged_atomic, claimed_atomic)
      VALUES ('0xcu', '{}', '0xpayer', 10000, 3000, 0)`
    // Served, not yet claimed on chain (unpaid); in doubt ('claimed'): both stay.
    await sql`
      INSERT INTO claims (proof_key, kind, target_type, target_id, account_id, payer, amount_atomic, status,
                          captured_at, horizon_at)
      VALUES ('batch:0xcu:1000', 'batch', 'call', 'ep_h', 'acct_h', '0xpayer', 1000, 'captured', now(), 'infinity'),
             ('batch:0xcu:2000', 'batch', 'call', 'ep_h', 'acct_h', '0xpayer', 1000, 'claimed', NULL, 'infinity')`
    await pruneHistory({ sql, config }, { propagationMs: 0 })
    expect(await left('batch:')).toEqual(['batch:0xch:3000', 'batch:0xcu:1000', 'batch:0xcu:2000'])
  })

  it('an unmatched inflow goes with the claim that resolved it; one never claimed stays', async () => {
    const old = new Date(Date.now() - 10 * AGE_MS)
    await txClaim('tx:0xresolved', { proofAt: old, claimedAt: old })
    await sql`
      INSERT INTO unmatched_inflows (tx_hash, payer, amount_atomic, block_number, seen_at)
      VALUES ('0xresolved', '0xpayer', 1000, 1, ${old}), ('0xopen', '0xpayer', 1000, 2, ${old})`
    const pruned = await pruneHistory({ sql, config }, { propagationMs: 0 })
    expect(pruned.unmatched_inflows).toBe(1)
    const inflows = await sql<{ tx_hash: string }[]>`SELECT tx_hash FROM unmatched_inflows ORDER BY 1`
    expect(inflows.map((r) => r.tx_hash)).toEqual(['0xopen'])
    expect(await left('tx:0xresolved')).toEqual([])
  })

  it('keeps an applied proof while its payment is pending: it is owed back if the payment expires', async () => {
    const old = new Date(Date.now() - 10 * AGE_MS)
    // A payment may stay pending 30 days; part of it was paid by a transaction long below the horizon.
    await sql`INSERT INTO payments (id, account_id, amount_atomic, amount_requested_atomic, status, description,
                                    expires_at)
              VALUES ('pay_h', 'acct_h', 5000, 5000, 'pending', 'underpaid', now() + interval '20 days')`
    await sql`
      INSERT INTO claims (proof_key, kind, target_type, target_id, account_id, payer, amount_atomic, status,
                          claimed_at, captured_at, proof_at, horizon_at)
      VALUES ('tx:h-applied', 'tx', 'payment', 'pay_h', 'acct_h', '0xpayer', 1000, 'applied', ${old}, ${old},
              ${old}, ${old})`
    await pruneHistory({ sql, config }, { propagationMs: 0 })
    expect(await left('tx:h-applied')).toEqual(['tx:h-applied'])
    // Once the payment is over (paid, or expired and its proofs marked refund due), the row may go.
    await sql`UPDATE payments SET status = 'paid' WHERE id = 'pay_h'`
    await pruneHistory({ sql, config }, { propagationMs: 0 })
    expect(await left('tx:h-applied')).toEqual([])
  })
})
