// What recording one payout batch costs the process that runs it (which is also the data plane's process in a
// single-instance deployment): N unpaid owner shares over W wallets, one recordPayouts call, its wall time,
// this process's CPU time and the longest event-loop stall it caused. Needs a PostgreSQL server.
// usage: npx tsx bench/history/payout-record-cost.ts [--entries 100000] [--wallets 1]
import { monitorEventLoopDelay } from 'node:perf_hooks'
import { parseArgs } from 'node:util'
import { recordPayouts } from '../../src/books/payouts.ts'
import { migrate } from '../../src/db/migrate.ts'
import { createSql } from '../../src/db/sql.ts'
import { databaseUrl, dropDatabase, recreateDatabase } from './seeded-database.ts'

const { values } = parseArgs({
  options: {
    entries: { type: 'string', default: '100000' },
    wallets: { type: 'string', default: '1' },
    url: {
      type: 'string',
      default: process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres',
    },
  },
})
const N = Number(values.entries)
const W = Number(values.wallets)

const name = `tollgate_payout_cost_${process.pid}`
await recreateDatabase(values.url, name)
const sql = createSql(databaseUrl(values.url, name), { max: 2 })
try {
  await migrate(sql)
  await sql`
    INSERT INTO accounts (id, wallet_address, business_name, mode)
    SELECT 'acct_' || w, '0xowner' || w, 'Owner ' || w, 'test' FROM generate_series(1, ${W}) w`
  await sql`
    INSERT INTO ledger_entries (account_id, kind, wallet, amount_atomic, source_type, source_id)
    SELECT 'acct_' || (i % ${W} + 1), k.kind, CASE k.kind WHEN 'fee' THEN NULL ELSE '0xowner' || (i % ${W} + 1) END,
           CASE k.kind WHEN 'fee' THEN 50 ELSE 950 END, 'call', 'call_' || i
    FROM generate_series(1, ${N}) i CROSS JOIN (VALUES ('owner_share'), ('fee')) k(kind)`
  await sql`VACUUM ANALYZE ledger_entries`
  const loop = monitorEventLoopDelay({ resolution: 5 })
  loop.enable()
  const cpu = process.cpuUsage()
  const t0 = performance.now()
  const result = await recordPayouts(sql, {
    treasury: '0xtreasury',
    firstNonce: 0,
    minAtomic: 1n,
    maxWallets: 500,
    maxEntries: 1_000_000,
    afford: () => null,
    sign: async ({ nonce }) => ({ rawTx: `0x${nonce}`, hash: `0x${nonce.toString(16).padStart(64, '0')}` }),
  })
  const wallMs = performance.now() - t0
  const used = process.cpuUsage(cpu)
  loop.disable()
  if (!result.ok) throw new Error('refused')
  const [linked] = await sql<
    { n: number }[]
  >`SELECT count(*)::int AS n FROM ledger_entries WHERE payout_id IS NOT NULL`
  console.log(
    JSON.stringify({
      entries: N,
      wallets: W,
      payouts: result.payouts.length,
      linked: linked?.n,
      wall_ms: Math.round(wallMs),
      process_cpu_ms: Math.round((used.user + used.system) / 1000),
      max_event_loop_stall_ms: Math.round(loop.max / 1e6),
    }),
  )
} finally {
  await sql.end()
  await dropDatabase(values.url, name)
}
