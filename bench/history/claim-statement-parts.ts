// Where one claim/capture statement (src/books/claims.ts claimAndCapture) spends the database's time, by
// kind of proof: B fresh claims plus the captures of the previous B, as under steady paid load. Reports the
// backend's CPU per statement and per call (from /proc), the HOT share of the updates of claims and calls
// (pg_stat_user_tables n_tup_hot_upd / n_tup_upd, all partitions), and, with --explain, one statement's
// plan with its timing per node (auto_explain, nested statements included: the payer reservation's sums).
// Needs a PostgreSQL server on this machine. --no-captures sends claims only; --setup runs SQL after the
// migrations (a variant of the indexes, session settings); --module names another copy of claims.ts, for a
// before/after pair run back to back on the same setup.
// usage: npx tsx bench/history/claim-statement-parts.ts [--kind tx|eip3009] [--rounds 300] [--size 16]
//        [--payers 4] [--no-captures] [--explain] [--setup SQL] [--module path]
import { parseArgs } from 'node:util'
import postgres from 'postgres'
import type { Capture, ClaimRequest } from '../../src/books/claims.ts'
import { migrate } from '../../src/db/migrate.ts'
import type { Sql } from '../../src/db/sql.ts'
import { backendCpuUs, captureOf } from './claim-statement-fixtures.ts'
import { databaseUrl, dropDatabase, recreateDatabase } from './seeded-database.ts'

const { values } = parseArgs({
  options: {
    kind: { type: 'string', default: 'tx' },
    rounds: { type: 'string', default: '300' },
    size: { type: 'string', default: '16' },
    payers: { type: 'string', default: '4' },
    explain: { type: 'boolean', default: false },
    setup: { type: 'string', default: '' },
    'no-captures': { type: 'boolean', default: false },
    module: { type: 'string', default: '../../src/books/claims.ts' },
    url: {
      type: 'string',
      default: process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres',
    },
  },
})
const { claimAndCapture } = (await import(values.module)) as typeof import('../../src/books/claims.ts')
const kind = values.kind as 'tx' | 'eip3009'
const rounds = Number(values.rounds)
const size = Number(values.size)
const payers = Array.from(
  { length: Number(values.payers) },
  (_, i) => `0x${(i + 1).toString(16).padStart(40, 'a')}`,
)

const name = `tollgate_claim_parts_${process.pid}`
await recreateDatabase(values.url, name)
const notices: string[] = []
// As the books pool: keyed plans (src/db/sql.ts), notices kept for the plans auto_explain sends.
const sql = postgres(databaseUrl(values.url, name), {
  max: 1,
  types: { bigint: postgres.BigInt },
  onnotice: (n) => notices.push(n.message ?? ''),
  connection: { enable_seqscan: 'off', enable_bitmapscan: 'off' },
}) as unknown as Sql
let serial = 0
const nowS = Math.floor(Date.now() / 1000)
function claim(): ClaimRequest {
  serial++
  const payer = payers[serial % payers.length]!
  const base = {
    targetType: 'call' as const,
    targetId: `call_${serial}`,
    accountId: 'acct_1',
    payer,
    amountAtomic: 10_000n,
    retryWindowMs: 60_000,
    leaseMs: 30_000,
  }
  if (kind === 'tx')
    return {
      ...base,
      proofKey: `tx:0x${serial.toString(16).padStart(64, '0')}`,
      kind,
      proofAtMs: Date.now() - 60_000,
      authorization: null,
    }
  const nonce = `0x${serial.toString(16).padStart(64, '0')}`
  return {
    ...base,
    proofKey: `auth:8453:0xusdc:${payer}:${nonce}`,
    kind,
    proofAtMs: null,
    authorization: {
      from: payer,
      to: '0xowner',
      value: '10000',
      validAfter: '0',
      validBefore: String(nowS + 3600),
      nonce,
      signature: `0x${'11'.repeat(65)}`,
    },
    reserve: { balanceAtomic: 10n ** 15n, block: 100n },
  }
}
async function counters() {
  await sql`SELECT pg_stat_force_next_flush()`
  const rows = await sql<{ t: string; upd: string; hot: string; ins: string }[]>`
    SELECT CASE WHEN relname LIKE 'claims%' THEN 'claims' ELSE 'calls' END AS t,
           sum(n_tup_upd)::text AS upd, sum(n_tup_hot_upd)::text AS hot, sum(n_tup_ins)::text AS ins
    FROM pg_stat_user_tables WHERE relname LIKE 'claims%' OR relname LIKE 'calls%' GROUP BY 1`
  return Object.fromEntries(
    rows.map((r) => [r.t, { upd: Number(r.upd), hot: Number(r.hot), ins: Number(r.ins) }]),
  )
}

try {
  await migrate(sql)
  await sql`INSERT INTO accounts (id, wallet_address, business_name, mode) VALUES ('acct_1', '0xowner', 'Owner', 'test')`
  if (values.setup) await sql.unsafe(values.setup)
  const [backend] = await sql<{ pid: number }[]>`SELECT pg_backend_pid() AS pid`
  const pid = backend!.pid
  let open: Capture[] = []
  const run = async () => {
    const claims = Array.from({ length: size }, claim)
    const r = await claimAndCapture(sql, { claims, captures: values['no-captures'] ? [] : open })
    if (!values['no-captures'] && r.captured.size !== open.length)
      throw new Error(`captured ${r.captured.size} of ${open.length}`)
    open = claims.map((c, i) => {
      const won = r.claims[i]!
      if (won.outcome !== 'won') throw new Error(`claim ${won.outcome}`)
      return captureOf(c, won.horizonAt, kind === 'tx' ? 'tx-hash' : 'exact')
    })
  }
  for (let i = 0; i < 30; i++) await run() // warm: plans cached, pages in memory
  const c0 = await counters()
  const cpu0 = backendCpuUs(pid)
  const t0 = performance.now()
  for (let i = 0; i < rounds; i++) await run()
  const wallUs = ((performance.now() - t0) * 1000) / rounds
  const cpuUs = (backendCpuUs(pid) - cpu0) / rounds
  const c1 = await counters()
  const delta = (t: string) => ({
    updates: c1[t]!.upd - c0[t]!.upd,
    hot: c1[t]!.hot - c0[t]!.hot,
    inserts: c1[t]!.ins - c0[t]!.ins,
  })
  const plans = await sql<{ generic: string; custom: string }[]>`
    SELECT generic_plans::text AS generic, custom_plans::text AS custom FROM pg_prepared_statements
    WHERE statement LIKE '%json_to_recordset%'`
  if (values.explain) {
    await sql.unsafe(`LOAD 'auto_explain'`)
    await sql.unsafe(`SET auto_explain.log_min_duration = 0`)
    await sql.unsafe(`SET auto_explain.log_analyze = on`)
    await sql.unsafe(`SET auto_explain.log_buffers = on`)
    await sql.unsafe(`SET auto_explain.log_nested_statements = on`)
    await sql.unsafe(`SET auto_explain.log_level = notice`)
    notices.length = 0
    await run()
    await sql.unsafe(`SET auto_explain.log_min_duration = -1`)
  }
  console.log(
    JSON.stringify(
      {
        kind,
        calls_per_statement: size,
        rounds,
        statement_wall_us: Math.round(wallUs),
        statement_db_cpu_us: Math.round(cpuUs),
        db_cpu_us_per_call: Math.round(cpuUs / size),
        claims: delta('claims'),
        calls: delta('calls'),
        plans,
      },
      null,
      1,
    ),
  )
  for (const n of notices) console.log(n)
} finally {
  await sql.end()
  await dropDatabase(values.url, name)
}
