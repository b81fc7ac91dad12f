// What one claim/capture statement (src/books/claims.ts claimAndCapture, the hot path's one durable write)
// costs the database, by batch size: B fresh claims plus the captures of the previous B, as under steady
// load. Per statement: wall time and the PostgreSQL backend's CPU (from /proc), so the fixed part of a
// statement and the part per call can be told apart, and this process's CPU (the driver's side).
// Needs a PostgreSQL server on this machine.
// --stale takes the statistics while the tables are empty (a new day's partition, or an ANALYZE at a quiet
// moment), as the prepared plans then see them; --keyed runs on a pool with keyed plans (src/db/sql.ts), as
// the books pool does. Each size also reports the claims rows its statements read by sequential scans.
// usage: npx tsx bench/history/claim-batch-cost.ts [--rounds 400] [--sizes 1,2,4,8,16,32] [--stale] [--keyed]
import { parseArgs } from 'node:util'
import { type Capture, type ClaimRequest, claimAndCapture } from '../../src/books/claims.ts'
import { migrate } from '../../src/db/migrate.ts'
import { createSql } from '../../src/db/sql.ts'
import { backendCpuUs, captureOf } from './claim-statement-fixtures.ts'
import { databaseUrl, dropDatabase, recreateDatabase } from './seeded-database.ts'

const { values } = parseArgs({
  options: {
    rounds: { type: 'string', default: '400' },
    sizes: { type: 'string', default: '1,2,4,8,16,32' },
    settings: { type: 'string', default: '' },
    stale: { type: 'boolean', default: false },
    keyed: { type: 'boolean', default: false },
    url: {
      type: 'string',
      default: process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres',
    },
  },
})
const rounds = Number(values.rounds)
const sizes = values.sizes.split(',').map(Number)

const name = `tollgate_claim_cost_${process.pid}`
await recreateDatabase(values.url, name)
const sql = createSql(databaseUrl(values.url, name), { max: 1, keyedPlans: values.keyed })
let serial = 0
const BLOCK_AT_MS = Date.now() - 60_000
function claim(): ClaimRequest {
  serial++
  return {
    proofKey: `tx:0x${serial.toString(16).padStart(64, '0')}`,
    kind: 'tx',
    proofAtMs: BLOCK_AT_MS,
    targetType: 'call',
    targetId: `call_${serial}`,
    accountId: 'acct_1',
    payer: '0xpayer',
    amountAtomic: 10_000n,
    retryWindowMs: 60_000,
    leaseMs: 30_000,
    authorization: null,
  }
}
try {
  await migrate(sql)
  await sql`INSERT INTO accounts (id, wallet_address, business_name, mode) VALUES ('acct_1', '0xowner', 'Owner', 'test')`
  for (const s of values.settings.split(';').filter(Boolean)) await sql.unsafe(s)
  if (values.stale) await sql`ANALYZE`
  // This backend's counts, reported at the end of the next transaction rather than up to a second later.
  const seqRead = async () => {
    await sql`SELECT pg_stat_force_next_flush()`
    const [row] = await sql<{ n: string }[]>`
      SELECT coalesce(sum(seq_tup_read), 0)::text AS n FROM pg_stat_user_tables WHERE relname LIKE 'claims%'`
    return Number(row!.n)
  }
  const [backend] = await sql<{ pid: number }[]>`SELECT pg_backend_pid() AS pid`
  const pid = backend!.pid
  const out = []
  for (const size of sizes) {
    let open: Capture[] = []
    const run = async () => {
      const claims = Array.from({ length: size }, claim)
      const r = await claimAndCapture(sql, { claims, captures: open })
      if (r.captured.size !== open.length) throw new Error('refused')
      open = claims.map((c, i) => {
        const won = r.claims[i]!
        if (won.outcome !== 'won') throw new Error('refused')
        return captureOf(c, won.horizonAt)
      })
    }
    for (let i = 0; i < 20; i++) await run() // warm: plans cached, pages in memory
    const read0 = await seqRead()
    const cpu0 = backendCpuUs(pid)
    const own0 = process.cpuUsage()
    const t0 = performance.now()
    for (let i = 0; i < rounds; i++) await run()
    const wallUs = ((performance.now() - t0) * 1000) / rounds
    const cpuUs = (backendCpuUs(pid) - cpu0) / rounds
    const own = process.cpuUsage(own0)
    const read = (await seqRead()) - read0
    const nodeUs = (own.user + own.system) / rounds
    out.push({
      calls_per_statement: size,
      statement_wall_us: Math.round(wallUs),
      statement_db_cpu_us: Math.round(cpuUs),
      db_cpu_us_per_call: Math.round(cpuUs / size),
      // This process: building the statement's parameters, the driver, the socket, reading the answer.
      statement_node_cpu_us: Math.round(nodeUs),
      claims_rows_seq_read_per_statement: Math.round(read / rounds),
    })
  }
  console.log(
    JSON.stringify(
      { settings: values.settings || null, stale: values.stale, keyed: values.keyed, rows: out },
      null,
      1,
    ),
  )
} finally {
  await sql.end()
  await dropDatabase(values.url, name)
}
