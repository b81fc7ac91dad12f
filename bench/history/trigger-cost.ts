// The cost of the running-balance triggers on the hot path's capture statement: W concurrent writers (as the
// data-plane workers' batch writers) capture batches for ONE account (the worst case: every statement
// updates the same balance row), with the triggers on and off, alternating. Needs a PostgreSQL server.
// usage: npx tsx bench/history/trigger-cost.ts [--writers 4] [--batch 64] [--batches 200]
import { parseArgs } from 'node:util'
import { type Capture, claimAndCapture } from '../../src/books/claims.ts'
import { migrate } from '../../src/db/migrate.ts'
import { createSql } from '../../src/db/sql.ts'
import { databaseUrl, dropDatabase, recreateDatabase } from './seeded-database.ts'

const { values } = parseArgs({
  options: {
    writers: { type: 'string', default: '4' },
    batch: { type: 'string', default: '64' },
    batches: { type: 'string', default: '200' },
    url: {
      type: 'string',
      default: process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres',
    },
  },
})
const W = Number(values.writers)
const B = Number(values.batch)
const N = Number(values.batches)

function captures(tag: string, w: number, b: number): Capture[] {
  return Array.from({ length: B }, (_, j) => {
    const i = (w * N + b) * B + j + 1
    return {
      callId: `call_${tag}_${i}`,
      proofKey: `tx:${tag}_${i}`,
      endpointId: 'ep_hot',
      accountId: 'acct_hot',
      ownerWallet: '0xowner',
      payer: '0xpayer',
      amountAtomic: 10_000n,
      ownerShareAtomic: 9_500n,
      feeAtomic: 500n,
      upstreamStatus: 200,
      method: 'GET',
    }
  })
}

const name = `tollgate_trigger_cost_${process.pid}`
await recreateDatabase(values.url, name)
const sql = createSql(databaseUrl(values.url, name), { max: W })
try {
  await migrate(sql)
  await sql`INSERT INTO accounts (id, wallet_address, business_name, mode) VALUES ('acct_hot', '0xowner', 'Hot', 'test')`
  for (const triggers of [true, false, true, false, true, false]) {
    await sql.unsafe(
      `ALTER TABLE ledger_entries ${triggers ? 'ENABLE' : 'DISABLE'} TRIGGER ledger_entries_balances_insert`,
    )
    const tag = `${triggers ? 'on' : 'off'}_${Date.now()}`
    await sql`
      INSERT INTO claims (proof_key, kind, target_type, target_id, account_id, payer, amount_atomic, status, retry_until,
                          proof_at, horizon_at)
      SELECT 'tx:' || ${tag} || '_' || i, 'tx', 'call', 'ep_hot', 'acct_hot', '0xpayer', 10000, 'claimed',
             now() + interval '1 hour', now(), now()
      FROM generate_series(1, ${W * B * N}) i`
    const lat: number[] = []
    const t0 = performance.now()
    await Promise.all(
      Array.from({ length: W }, async (_, w) => {
        for (let b = 0; b < N; b++) {
          const s = performance.now()
          await claimAndCapture(sql, { claims: [], captures: captures(tag, w, b) })
          lat.push(performance.now() - s)
        }
      }),
    )
    const total = performance.now() - t0
    lat.sort((a, b) => a - b)
    const q = (p: number) => lat[Math.min(lat.length - 1, Math.floor(p * lat.length))]!.toFixed(2)
    console.log(
      `triggers ${triggers ? 'on ' : 'off'}: ${W} writers × ${N} batches × ${B} captures: ` +
        `${Math.round((W * N * B) / (total / 1000))} captures/s, batch p50 ${q(0.5)} ms p99 ${q(0.99)} ms`,
    )
  }
} finally {
  await sql.end()
  await dropDatabase(values.url, name)
}
