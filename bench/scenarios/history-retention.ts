// `npm run bench -- history-retention [--rate 10000] [--seconds 90] [--month-seconds 15]`: does the per-call
// history stay flat at a sustained paid-call rate? For a bounded time, SQL writes `rate` paid calls a second
// (a captured tx claim, its call, owner share + fee entries paid by a confirmed payout, a delivery record),
// dated on a simulated clock on which a month passes every --month-seconds, while retention runs beside it as
// the leader would: claims dropped a day at a time once the day is below the stored horizon
// (chain.max_proof_age_ms 10 s here; the proofs' block times are on the simulated clock, and what is left
// goes row by row in batches of retention.batch_rows), the partitions job (months of history, days of
// claims), and archiving (files + drop) of every month before the previous one. Prints, every 5 s, the size of each table and the rows written, pruned and archived per
// second. On a PostgreSQL server (BENCH_DATABASE_URL, else postgres://postgres@127.0.0.1:5432/postgres), in
// a database of its own, dropped after. A run of 600 s or more writes bench/results/<date>-history-retention.json.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { parseArgs } from 'node:util'
import { archiveMonths } from '../../src/books/archive.ts'
import { loadConfig } from '../../src/config/load.ts'
import { pruneHistory } from '../../src/control-plane/jobs/retention.ts'
import { migrate } from '../../src/db/migrate.ts'
import { addMonths, ensureClaimPartitions, ensurePartitions, monthOf } from '../../src/db/partitions.ts'
import { createSql, type Sql } from '../../src/db/sql.ts'
import { databaseUrl, dropDatabase, recreateDatabase } from '../history/seeded-database.ts'

const TABLES = ['calls', 'ledger_entries', 'call_deliveries', 'claims'] as const
const DAY_MS = 86_400_000
const MONTH_MS = 30 * DAY_MS
const log = (line: string) => process.stdout.write(`${line}\n`)

interface Sample {
  t_s: number
  sim_month: string
  mb: Record<(typeof TABLES)[number], number>
  written_per_s: number
  /** Claims deleted row by row (vouchers, the default partition), and day partitions dropped whole so far. */
  claims_pruned_per_s: number
  claim_days_dropped: number
  claims_rows: number
  rows_archived_per_s: number
}

async function sizesMb(sql: Sql): Promise<Sample['mb']> {
  const [row] = await sql<Record<string, string>[]>`
    SELECT (SELECT coalesce(sum(pg_total_relation_size(relid)), 0) FROM pg_partition_tree('calls')) AS calls,
           (SELECT coalesce(sum(pg_total_relation_size(relid)), 0) FROM pg_partition_tree('ledger_entries')) AS ledger_entries,
           (SELECT coalesce(sum(pg_total_relation_size(relid)), 0) FROM pg_partition_tree('call_deliveries')) AS call_deliveries,
           (SELECT coalesce(sum(pg_total_relation_size(relid)), 0) FROM pg_partition_tree('claims')) AS claims`
  const mb = (k: string) => Math.round(Number(row![k]) / 2 ** 20)
  return {
    calls: mb('calls'),
    ledger_entries: mb('ledger_entries'),
    call_deliveries: mb('call_deliveries'),
    claims: mb('claims'),
  }
}

/** One second of intake: `n` paid calls dated `at`, with their claims, entries (paid by `payout`) and deliveries. */
async function writeSecond(
  sql: Sql,
  q: { n: number; first: number; at: Date; payout: string },
): Promise<void> {
  const lo = q.first
  const hi = q.first + q.n - 1
  await sql.begin(async (tx) => {
    await tx`INSERT INTO payouts (id, wallet, amount_atomic, status, entries_count, confirmed_at)
             VALUES (${q.payout}, '0xowner', ${q.n * 950}, 'confirmed', ${q.n}, now())`
    await tx`
      INSERT INTO claims (proof_key, kind, target_type, target_id, account_id, payer, amount_atomic, status,
                          claimed_at, captured_at, proof_at, horizon_at, call_id)
      SELECT 'tx:r' || g, 'tx', 'call', 'ep_r', 'acct_r', '0xpayer', 1000, 'captured', now(), now(), ${q.at},
             claim_horizon_at('tx', ${q.at}, NULL), 'call_r' || g
      FROM generate_series(${lo}::bigint, ${hi}::bigint) g`
    await tx`
      INSERT INTO calls (id, proof_key, endpoint_id, account_id, payer, amount_atomic, owner_share_atomic,
                         fee_atomic, upstream_status, method, receipt_id, created_at)
      SELECT 'call_r' || g, 'tx:r' || g, 'ep_r', 'acct_r', '0xpayer', 1000, 950, 50, 200, 'GET', '', ${q.at}
      FROM generate_series(${lo}::bigint, ${hi}::bigint) g`
    await tx`
      INSERT INTO ledger_entries (account_id, kind, wallet, amount_atomic, source_type, source_id, payout_id, created_at)
      SELECT 'acct_r', k.kind, k.wallet, k.amount, 'call', 'call_r' || g, k.payout, ${q.at}
      FROM generate_series(${lo}::bigint, ${hi}::bigint) g,
           (VALUES ('owner_share', '0xowner', 950, ${q.payout}::text), ('fee', NULL, 50, NULL)) AS k(kind, wallet, amount, payout)`
    await tx`
      INSERT INTO call_deliveries (receipt_id, body_sha256, body_bytes, created_at)
      SELECT 'rcpt_r' || g, md5(g::text), 512, ${q.at} FROM generate_series(${lo}::bigint, ${hi}::bigint) g`
  })
}

export async function runHistoryRetentionBench(argv: string[]): Promise<void> {
  const { values } = parseArgs({
    args: argv,
    options: {
      rate: { type: 'string', default: '10000' },
      seconds: { type: 'string', default: '90' },
      'month-seconds': { type: 'string', default: '15' },
    },
  })
  const rate = Number(values.rate)
  const seconds = Number(values.seconds)
  const monthSeconds = Number(values['month-seconds'])
  const server = process.env.BENCH_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres'
  const name = `tollgate_bench_retention_${process.pid}`
  await recreateDatabase(server, name)
  const intake = createSql(databaseUrl(server, name), { max: 2, applicationName: 'bench-retention-intake' })
  const jobs = createSql(databaseUrl(server, name), { max: 3, applicationName: 'bench-retention-jobs' })
  let stop = false
  const out = mkdtempSync(join(tmpdir(), 'tollgate-bench-archive-'))
  const config = loadConfig({
    env: { NODE_ENV: 'test' },
    overrides: {
      chain: { max_proof_age_ms: 10_000 },
      retention: { claims_margin_ms: 0, batch_rows: 10_000, max_batches: 1 },
    },
  })
  try {
    await migrate(intake)
    await intake`SET synchronous_commit = off`
    const startMs = Date.now()
    const simNow = () => startMs + ((Date.now() - startMs) / 1000 / monthSeconds) * MONTH_MS
    let written = 0
    let pruned = 0
    let daysDropped = 0
    let archived = 0
    // Two loops, as the leader runs the retention and history-archive jobs: neither waits for the other.
    const pruning = (async () => {
      while (!stop) {
        // One batch a call (max_batches 1), so the rate shows as it goes; again at once while batches are full.
        const p = await pruneHistory({ sql: jobs, config }, { propagationMs: 0, nowMs: simNow() }).catch(
          (err: Error) => {
            log(`prune: ${err.stack}`)
            return { claims: 0, claim_days_dropped: [] }
          },
        )
        pruned += p.claims
        daysDropped += p.claim_days_dropped.length
        if (p.claims < config.retention.batch_rows) await new Promise((r) => setTimeout(r, 500))
      }
    })()
    // The partitions job, on its own as on the leader. It makes tomorrow's claims partition, and an hourly job
    // has 24 tries at it; on this clock a simulated day is a few seconds, so the bench keeps four simulated
    // days ahead for the same slack (else claims would land in the default partition and go row by row).
    const partitions = (async () => {
      while (!stop) {
        const now = simNow()
        await ensurePartitions(jobs, { nowMs: now }).catch((err: Error) => log(`partitions: ${err.stack}`))
        await ensureClaimPartitions(jobs, {
          nowMs: now + 4 * DAY_MS,
          oldestMs: now - config.chain.max_proof_age_ms,
        }).catch((err: Error) => log(`claim partitions: ${err.stack}`))
        await new Promise((r) => setTimeout(r, 250))
      }
    })()
    const retention = (async () => {
      while (!stop) {
        const now = simNow()
        const done = await archiveMonths(jobs, {
          before: addMonths(monthOf(now), -1),
          outDir: out,
          nowMs: now,
        }).catch((err: Error) => {
          log(`archive: ${err.stack}`)
          return []
        })
        archived += done.flatMap((d) => d.files).reduce((s, f) => s + Number(f.rows), 0)
        await new Promise((r) => setTimeout(r, 500))
      }
    })()
    const samples: Sample[] = []
    let last = { t: Date.now(), written: 0, pruned: 0, archived: 0 }
    for (let s = 0; s < seconds; s++) {
      const tick = Date.now()
      await writeSecond(intake, { n: rate, first: written, at: new Date(simNow()), payout: `po_r${s}` })
      written += rate
      if ((s + 1) % 5 === 0) {
        const dt = (Date.now() - last.t) / 1000
        const sample: Sample = {
          t_s: Math.round((Date.now() - startMs) / 1000),
          sim_month: monthOf(simNow()),
          mb: await sizesMb(jobs),
          written_per_s: Math.round((written - last.written) / dt),
          claims_pruned_per_s: Math.round((pruned - last.pruned) / dt),
          claim_days_dropped: daysDropped,
          claims_rows: Number((await jobs<{ n: string }[]>`SELECT count(*) AS n FROM claims`)[0]!.n),
          rows_archived_per_s: Math.round((archived - last.archived) / dt),
        }
        samples.push(sample)
        log(JSON.stringify(sample))
        last = { t: Date.now(), written, pruned, archived }
      }
      const spare = 1000 - (Date.now() - tick)
      if (spare > 0) await new Promise((r) => setTimeout(r, spare))
    }
    stop = true
    await retention
    await partitions
    await pruning
    const elapsed = (Date.now() - startMs) / 1000
    const summary = {
      scenario: 'history-retention',
      target_rate: rate,
      written_per_s: Math.round(written / elapsed),
      claims_pruned_per_s: Math.round(pruned / elapsed),
      claim_days_dropped: daysDropped,
      rows_archived_per_s: Math.round(archived / elapsed),
      first_mb: samples[0]?.mb,
      last_mb: samples.at(-1)?.mb,
      max_mb: Object.fromEntries(TABLES.map((t) => [t, Math.max(...samples.map((x) => x.mb[t]))])),
    }
    log(JSON.stringify(summary))
    // A run of at least the ten minutes backs a claim: its samples are kept beside the full runs.
    if (seconds >= 600) {
      const file = join(
        'bench',
        'results',
        `${new Date().toISOString().slice(0, 19).replaceAll(':', '-')}-history-retention.json`,
      )
      writeFileSync(
        file,
        `${JSON.stringify({ ...summary, month_seconds: monthSeconds, seconds, samples }, null, 2)}\n`,
      )
      log(`wrote ${file}`)
    }
  } finally {
    stop = true
    await intake.end({ timeout: 5 })
    await jobs.end({ timeout: 5 })
    await dropDatabase(server, name)
    rmSync(out, { recursive: true, force: true })
  }
}
