// `npm run bench -- history [--rows N] [--ci]`: the reads, jobs and paid path on a database with a history
// (default 50 M rows = 25 M paid calls, whose entries a per-call ledger would have had; --ci 200 k; their
// revenue booked per capture batch of --calls-per-batch calls, 10, or 0: per call) against the same on an
// empty database, in one run, both on a PostgreSQL server (BENCH_DATABASE_URL, else postgres://postgres@127.0.0.1:5432/postgres).
// Two tollgate processes (jobs off, so nothing moves under the measurements), one per database; the reads
// that the service caches (GET /account keeps a balance 2 s) are also timed at the query itself.
// Results: bench/results/<date>-history-<N>-rows.json, scenarios `history-<what>` with rows, p50_ms, p99_ms, ratio_to_empty.
// The seeded database is tollgate_history_<rows>: `--keep` leaves it on the server, and a later run with the
// same --rows finds it and measures again without seeding (`--reseed` seeds afresh).
import { execFileSync } from 'node:child_process'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { parseArgs } from 'node:util'
import { connectChain } from '../../src/chain/connect.ts'
import { startDevChain } from '../../src/chain/dev-chain.ts'
import { loadConfig } from '../../src/config/load.ts'
import { reconcile } from '../../src/control-plane/jobs/reconcile.ts'
import { marksBehindNow, resetSnapshots } from '../../src/control-plane/jobs/reconcile-balances.ts'
import { reconcileFromCheckpoint } from '../../src/control-plane/jobs/reconcile-checkpoint.ts'
import { listListedEndpoints, readObserved } from '../../src/db/discovery.ts'
import { accountBalance, lockPayableBatch, someWalletOwedAtLeast } from '../../src/db/ledger.ts'
import { createSql, type Sql } from '../../src/db/sql.ts'
import { LATENCY_BUCKETS } from '../../src/discovery/observed.ts'
import { recordFailedPayouts } from '../history/recent-payouts.ts'
import { seedHistory } from '../history/seed.ts'
import {
  databaseUrl,
  dropDatabase,
  findSeeded,
  recordSeeded,
  recreateDatabase,
  resetToSeeded,
  type SeedRecord,
  seededDatabaseName,
} from '../history/seeded-database.ts'
import { load } from '../load.ts'
import { makeProofs } from '../proofs.ts'
import { machine, resultsName } from '../report.ts'
import { postJson } from '../targets/api.ts'
import { freePort, ROOT, startNode } from '../targets/processes.ts'

const HARD_LIMIT_MS = 6 * 60 * 60_000
/** GET /payouts?limit= this, and as many recent payouts in each database. */
const PAYOUTS_PAGE = 100
const INTERLEAVE_ROUND = 10
/** Above this many entries the full reconcile (which reads every claim of history into the process) is skipped. */
const FULL_RECONCILE_MAX_ENTRIES = 4_000_000

export interface HistoryResult {
  name: string
  rows: number
  p50_ms: number
  p99_ms: number
  ratio_to_empty: number | null
  /** The tail beside the median: p99 on the history ÷ p99 on the empty database. */
  p99_ratio_to_empty: number | null
  empty_p50_ms: number
  empty_p99_ms: number
  note?: string
}

interface Instance {
  label: 'empty' | 'history'
  base: string
  sql: Sql
  apiKey: string
  accountId: string
  endpointId: string
  meteredUrl: string
  dbUrl: string
  /** Runs `fn` with the service stopped (on the same ports after): nothing reads a table while it is loaded. */
  stoppedDuring<T>(fn: () => Promise<T>): Promise<T>
  stop(): Promise<void>
}

const log = (line: string) => process.stdout.write(`${line}\n`)

export async function runHistoryBench(argv: string[]): Promise<void> {
  const { values } = parseArgs({
    args: argv,
    options: {
      rows: { type: 'string' },
      ci: { type: 'boolean' },
      proofs: { type: 'string' },
      samples: { type: 'string' },
      keep: { type: 'boolean' },
      reseed: { type: 'boolean' },
      'calls-per-batch': { type: 'string' },
    },
  })
  const callsPerBatch =
    values['calls-per-batch'] === undefined ? undefined : Number(values['calls-per-batch'])
  const rows = Number(values.rows ?? (values.ci ? 200_000 : 50_000_000))
  const proofs = Number(values.proofs ?? (values.ci ? 400 : 2_000))
  const samples = Number(values.samples ?? (values.ci ? 50 : 200))
  const hardStop = setTimeout(() => {
    process.stderr.write('bench history: hard time limit reached\n')
    process.exit(2)
  }, HARD_LIMIT_MS)
  hardStop.unref()
  execFileSync(process.execPath, [join(ROOT, 'scripts', 'build.mjs'), '--if-stale'], { stdio: 'inherit' })
  const server = process.env.BENCH_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres'
  const chain = await startDevChain({ chainId: 84532, payers: 1, payerFunding: 100_000_000_000n })
  const dir = mkdtempSync(join(tmpdir(), 'tollgate-bench-history-'))
  const instances: Instance[] = []
  try {
    const emptyDb = `tollgate_bench_history_empty_${process.pid}`
    await recreateDatabase(server, emptyDb)
    instances.push(
      await startInstance('empty', {
        server,
        dir,
        chain,
        db: emptyDb,
        seeded: null,
        keep: false,
      }),
    )
    const historyDb = seededDatabaseName(rows)
    const seeded = values.reseed ? null : await findSeeded(server, historyDb, rows)
    if (seeded) {
      log(
        `history: reusing ${historyDb} (seeded ${seeded.seeded_at.toISOString()} in ${seeded.seed_seconds} s)`,
      )
      await resetToSeeded(databaseUrl(server, historyDb), seeded)
    } else {
      await recreateDatabase(server, historyDb)
    }
    const history = await startInstance('history', {
      server,
      dir,
      chain,
      db: historyDb,
      seeded,
      keep: values.keep ?? false,
    })
    instances.push(history)
    const [empty] = instances as [Instance]
    let seedSeconds = seeded?.seed_seconds ?? null
    if (!seeded) {
      // A reused seed keeps the layout it was seeded with: --reseed after changing --calls-per-batch.
      log(`history: seeding ${(rows / 2).toLocaleString('en')} paid calls into ${historyDb}`)
      const target = {
        accountId: history.accountId,
        wallet: chain.payers[0]!.address,
        endpointId: history.endpointId,
        payer: chain.payers[0]!.address,
        treasury: chain.treasury.address,
      }
      // With the service stopped: its once-a-second settlement backlog read would scan the claims table while
      // the seed has its indexes down.
      seedSeconds = await history.stoppedDuring(
        async () => (await seedHistory(history.dbUrl, target, { entries: rows, callsPerBatch, log })).seconds,
      )
      await recordSeeded(history.dbUrl, {
        entries: rows,
        account_id: history.accountId,
        api_key: history.apiKey,
        endpoint_id: history.endpointId,
        seeded_at: new Date(),
        seed_seconds: seedSeconds,
      })
    }
    const deps = { chain, rows, proofs, samples }
    // Sized as seeded, before the measurements add their own calls.
    const storage = await storageScenario(history, rows)
    log(
      `history: ${storage.storage_bytes_per_million_calls.toLocaleString('en')} bytes per million calls, ` +
        `${storage.stays_online_bytes_per_million_calls.toLocaleString('en')} without the claims (they leave by day)`,
    )
    const results: Array<HistoryResult | StorageResult> = [
      storage,
      ...(await measureAll(deps, empty, history)),
    ]
    const file = join(
      ROOT,
      'bench',
      'results',
      resultsName(new Date(), { full: false, label: `history-${rows}-rows`, scenarios: [] }),
    )
    const meta = machine({
      database: 'postgresql server',
      command: `npm run bench -- history ${argv.join(' ')}`.trim(),
      rows,
      proofs_per_instance: proofs,
      samples,
      seed_seconds: seedSeconds,
      seed_reused: seeded !== null,
    })
    writeFileSync(file, `${JSON.stringify({ machine: meta, scenarios: results }, null, 2)}\n`)
    log(
      `\n${table(results.filter((r): r is HistoryResult => r.name !== 'history-storage'))}\n\nresults: ${file}`,
    )
  } finally {
    for (const i of instances) await i.stop()
    await chain.stop()
    rmSync(dir, { recursive: true, force: true })
  }
}

async function startInstance(
  label: Instance['label'],
  o: {
    server: string
    dir: string
    chain: Awaited<ReturnType<typeof startDevChain>>
    db: string
    /** A reused seeded database: its account is already there (its key in the seed record). */
    seeded: SeedRecord | null
    /** Leave the database on the server at the end. */
    keep: boolean
  },
): Promise<Instance> {
  const { server, chain, db } = o
  const dbUrl = databaseUrl(server, db)
  const port = await freePort()
  const adminPort = await freePort()
  const configFile = join(o.dir, `${label}.json`)
  writeFileSync(
    configFile,
    JSON.stringify({
      chain: { poll_interval_ms: 250 },
      rate_limits: { enabled: false },
      server: { workers: 1 },
      // Nothing moves under the measurements: the bench runs the batcher's and reconcile's work itself.
      jobs: { enabled: false },
    }),
  )
  const launch = () =>
    startNode(
      'dist/main.js',
      {
        NODE_ENV: 'development',
        NETWORK: 'base-sepolia',
        PORT: String(port),
        ADMIN_PORT: String(adminPort),
        RPC_URL: chain.rpcUrl,
        USDC_ADDRESS: chain.usdcAddress,
        TREASURY_PRIVATE_KEY: chain.treasury.privateKey,
        ALLOW_PRIVATE_UPSTREAMS: 'true',
        LOG_LEVEL: 'warn',
        TOLLGATE_CONFIG: configFile,
        DATABASE_URL: dbUrl,
      },
      /tollgate listening on/,
      120_000,
    )
  let child = await launch()
  const base = `http://127.0.0.1:${port}`
  const post = (path: string, body: unknown, key?: string) => postJson(base, label, path, body, key)
  const account = o.seeded
    ? { apiKey: o.seeded.api_key, id: o.seeded.account_id }
    : await post('/api/v1/register', { wallet_address: chain.payers[0]!.address, business_name: label }).then(
        (reg) => ({ apiKey: reg.api_key as string, id: reg.account.id as string }),
      )
  // The upstream: tollgate's own /healthz-free 402 answer would do, but a paid call needs a 2xx upstream.
  // A reused database gets a new endpoint for it (the seeded one named the last run's upstream).
  const upstream = await startTinyUpstream()
  const ep = await post('/api/v1/endpoints', { upstream_url: upstream.url, price: '0.001' }, account.apiKey)
  const sql = createSql(dbUrl, { max: 4, applicationName: `bench-history-${label}` })
  return {
    label,
    base,
    sql,
    apiKey: account.apiKey,
    accountId: account.id,
    endpointId: ep.id,
    meteredUrl: ep.metered_url,
    dbUrl,
    async stoppedDuring<T>(fn: () => Promise<T>): Promise<T> {
      await child.stop()
      const result = await fn()
      child = await launch()
      return result
    },
    async stop() {
      await child.stop()
      await upstream.stop()
      await sql.end({ timeout: 5 })
      if (o.keep) log(`history: kept ${db} on the server (drop it with DROP DATABASE ${db})`)
      else await dropDatabase(server, db)
    },
  }
}

async function startTinyUpstream(): Promise<{ url: string; stop(): Promise<void> }> {
  const { createServer } = await import('node:http')
  const server = createServer((_req, res) => {
    res.writeHead(200, { 'content-type': 'application/json' })
    res.end('{"ok":true}')
  })
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r))
  const { port } = server.address() as { port: number }
  return {
    url: `http://127.0.0.1:${port}/data`,
    stop: () => new Promise((r) => server.close(() => r())),
  }
}

/** n sequential runs of `fn`, each in ms. */
async function samplesMs(n: number, fn: () => Promise<unknown>): Promise<number[]> {
  const ms: number[] = []
  for (let i = 0; i < n; i++) {
    const s = performance.now()
    await fn()
    ms.push(performance.now() - s)
  }
  return ms
}

function percentiles(samples: number[]): { p50: number; p99: number } {
  const ms = [...samples].sort((a, b) => a - b)
  const q = (p: number) => Math.round(ms[Math.min(ms.length - 1, Math.floor(p * ms.length))]! * 1000) / 1000
  return { p50: q(0.5), p99: q(0.99) }
}

/** n sequential runs of `fn`: p50 and p99 in ms. */
async function timed(n: number, fn: () => Promise<unknown>): Promise<{ p50: number; p99: number }> {
  return percentiles(await samplesMs(n, fn))
}

/**
 * The same read on both databases, in alternating rounds of INTERLEAVE_ROUND samples: on a shared machine a
 * burst of someone else's load then falls on both sides alike instead of on whichever was being timed.
 */
async function interleaved(
  n: number,
  e: () => Promise<unknown>,
  h: () => Promise<unknown>,
): Promise<[{ p50: number; p99: number }, { p50: number; p99: number }]> {
  const es: number[] = []
  const hs: number[] = []
  for (let done = 0; done < n; done += INTERLEAVE_ROUND) {
    const k = Math.min(INTERLEAVE_ROUND, n - done)
    es.push(...(await samplesMs(k, e)))
    hs.push(...(await samplesMs(k, h)))
  }
  return [percentiles(es), percentiles(hs)]
}

async function getJson(i: Instance, path: string): Promise<any> {
  const r = await fetch(`${i.base}${path}`, { headers: { authorization: `Bearer ${i.apiKey}` } })
  if (r.status !== 200) throw new Error(`${i.label} GET ${path}: ${r.status} ${await r.text()}`)
  return r.json()
}

interface MeasureDeps {
  chain: Awaited<ReturnType<typeof startDevChain>>
  rows: number
  proofs: number
  samples: number
}

type Measured = { p50: number; p99: number; note?: string } | { skipped: string }
type Measure = (i: Instance) => Promise<Measured>

async function measureAll(d: MeasureDeps, empty: Instance, history: Instance): Promise<HistoryResult[]> {
  // A deep page: the cursor of a call half-way through the history (the empty database has its own calls).
  const middle = async (i: Instance) => {
    const [row] = await i.sql<{ id: string }[]>`
      SELECT id FROM calls WHERE account_id = ${i.accountId} ORDER BY created_at DESC, id DESC
      OFFSET (SELECT count(*) / 2 FROM calls WHERE account_id = ${i.accountId}) LIMIT 1`
    return row?.id ?? null
  }
  // Reads timed interleaved (see `interleaved`); null: nothing to read on that database.
  const reads: Array<[string, number, (i: Instance) => (() => Promise<unknown>) | null]> = [
    ['balance-read', d.samples, (i) => () => accountBalance(i.sql, i.accountId)],
    // GET /account keeps a balance 2 s: most of these are cache hits; balance-read is the uncached cost.
    ['account', d.samples, (i) => () => getJson(i, '/api/v1/account')],
    ['calls-first-page', d.samples, (i) => () => getJson(i, '/api/v1/calls?limit=100')],
    [
      'calls-deep-page',
      d.samples,
      (i) => {
        const cursor = cursors.get(i)
        return cursor ? () => getJson(i, `/api/v1/calls?limit=100&starting_after=${cursor}`) : null
      },
    ],
    ['payouts', d.samples, (i) => () => getJson(i, `/api/v1/payouts?limit=${PAYOUTS_PAGE}`)],
    // The public listing's uncached read (the route keeps answers 5 s): listed endpoints and their hourly
    // figures, which must not depend on how many calls are stored.
    ['discovery-read', d.samples, (i) => () => discoveryRead(i)],
    ['discovery-resources', d.samples, (i) => () => getJson(i, '/discovery/resources?limit=20')],
    ['payout-batcher', Math.max(5, d.samples / 10), (i) => () => batcherWork(i)],
  ]
  const cursors = new Map<Instance, string | null>()
  const results: HistoryResult[] = []
  const compare = (what: string, m: Measure) =>
    compareBoth(what, async () => [await m(empty), await m(history)])
  const compareBoth = async (what: string, both: () => Promise<[Measured, Measured]>) => {
    log(`history: ${what}…`)
    const before = await seqScans(history)
    const [e, measured] = await both()
    const h =
      'skipped' in measured
        ? measured
        : {
            ...measured,
            note: [measured.note, `seq scans: ${await seqScansSince(history, before)}`]
              .filter(Boolean)
              .join('; '),
          }
    if ('skipped' in e || 'skipped' in h) {
      log(`  skipped: ${'skipped' in h ? h.skipped : (e as { skipped: string }).skipped}`)
      return
    }
    const r: HistoryResult = {
      name: `history-${what}`,
      rows: d.rows,
      p50_ms: h.p50,
      p99_ms: h.p99,
      ratio_to_empty: e.p50 > 0 ? Math.round((h.p50 / e.p50) * 100) / 100 : null,
      p99_ratio_to_empty: e.p99 > 0 ? Math.round((h.p99 / e.p99) * 100) / 100 : null,
      empty_p50_ms: e.p50,
      empty_p99_ms: e.p99,
      ...(h.note ? { note: h.note } : {}),
    }
    log(
      `  empty p50 ${e.p50} p99 ${e.p99} ms · history p50 ${h.p50} p99 ${h.p99} ms · ratio ${r.ratio_to_empty}`,
    )
    results.push(r)
  }
  // Reconcile checkpoints before the paid calls: the incremental run then checks those calls only.
  const contexts = new Map<Instance, Awaited<ReturnType<typeof reconcileDeps>>>()
  for (const i of [empty, history]) {
    const rd = await reconcileDeps(i, d.chain)
    contexts.set(i, rd)
    // As a clean full run leaves it: snapshots recomputed from the entries as of the marks, then the marks.
    const marks = await marksBehindNow(i.sql, 0)
    await resetSnapshots(i.sql, marks)
    await i.sql`
      INSERT INTO reconcile_checkpoints (name, to_time, to_block, ledger_entry_id, payouts_confirmed_before,
                                         full_run)
      VALUES (${`${d.chain.treasury.address.toLowerCase()}:${d.chain.usdcAddress.toLowerCase()}`}, now(), 0,
              ${marks.entryId.toString()}::bigint, ${marks.confirmedBefore}, true)
      ON CONFLICT (name) DO UPDATE SET to_time = now(), ledger_entry_id = EXCLUDED.ledger_entry_id,
        payouts_confirmed_before = EXCLUDED.payouts_confirmed_before`
  }
  await compare('paid', (i) => paidLoad(i, d))
  // GET /payouts then reads a full page in both (see recent-payouts.ts).
  for (const i of [empty, history]) {
    const made = await recordFailedPayouts(i.sql, { count: PAYOUTS_PAGE, entriesEach: 10 })
    if (made < PAYOUTS_PAGE) throw new Error(`${i.label}: ${made} of ${PAYOUTS_PAGE} payouts recorded`)
  }
  for (const i of [empty, history]) {
    // Statistics as autovacuum would keep them (it may be off on a bench server: the empty database then
    // has none at all, and its plans are guesses the history's are not).
    await i.sql`ANALYZE`
    cursors.set(i, await middle(i))
  }
  for (const [what, n, read] of reads) {
    await compareBoth(what, async () => {
      const [e, h] = [read(empty), read(history)]
      if (!e || !h) return [{ skipped: 'nothing to read' }, { skipped: 'nothing to read' }]
      return interleaved(n, e, h)
    })
  }

  await compare('reconcile-incremental', async (i) => {
    let balances = ''
    const t = await timed(3, () =>
      resetCheckpointThen(i, async () => {
        const r = await reconcileFromCheckpoint(contexts.get(i)!, { full: false, commitLagMs: 0 })
        balances = `accounts checked ${r.balances.accounts_checked}, balance drift ${r.balances.drifted_accounts}`
      }),
    )
    return { ...t, note: balances }
  })
  await compare('reconcile-full', async (i) =>
    i.label === 'history' && d.rows > FULL_RECONCILE_MAX_ENTRIES
      ? {
          skipped: `full reconcile reads every claim into the process: run at ≤ ${FULL_RECONCILE_MAX_ENTRIES} entries`,
        }
      : timed(1, () => reconcile(contexts.get(i)!, {})),
  )
  for (const rd of contexts.values()) await rd.chain.close()
  return results
}

const BIG_TABLES = ['claims', 'calls', 'ledger_entries', 'events'] as const

/** Sequential scans so far of the tables that grow with history (pg_stat_user_tables). */
const listedOnce = new Map<Instance, Promise<unknown>>()
/** Lists the instance's endpoint once, then reads a listing page as GET /discovery/resources does uncached. */
async function discoveryRead(i: Instance): Promise<unknown> {
  let listed = listedOnce.get(i)
  if (listed === undefined) {
    listed = (async () => {
      await i.sql`UPDATE endpoints SET listed = true WHERE id = ${i.endpointId}`
      await seedObserved(i)
    })()
    listedOnce.set(i, listed)
  }
  await listed
  const { rows } = await listListedEndpoints(i.sql, {
    tag: null,
    minPriceAtomic: null,
    maxPriceAtomic: null,
    type: null,
    limit: 20,
    offset: 0,
  })
  return readObserved(
    i.sql,
    rows.map((r) => r.id),
    new Date(Date.now() - 7 * 86_400_000),
  )
}

/**
 * The same 8 days of observed traffic on both databases (the listing keeps 8 days whatever the history):
 * every hour's counters, and 1,000 distinct payers a day, each with a few calls. The read then differs
 * between the two only by what else is stored, which is what the comparison is about.
 */
async function seedObserved(i: Instance): Promise<void> {
  const buckets = `{${new Array(LATENCY_BUCKETS)
    .fill(0)
    .map((_, k) => (k === 3 ? 2_000 : k === 6 ? 40 : 0))
    .join(',')}}`
  await i.sql`
    INSERT INTO endpoint_hourly (endpoint_id, hour, paid_calls, succeeded, unserved, latency_buckets)
    SELECT ${i.endpointId}, date_trunc('hour', now()) - h * interval '1 hour', 2040, 2030, 10, ${buckets}::bigint[]
    FROM generate_series(0, 8 * 24 - 1) h
    ON CONFLICT DO NOTHING`
  await i.sql`
    INSERT INTO endpoint_payer_days (endpoint_id, day, payer, calls)
    SELECT ${i.endpointId}, (now() - d * interval '1 day')::date,
           '0x' || lpad(to_hex(p), 40, '0'), 1 + (p % 5)
    FROM generate_series(0, 7) d, generate_series(1, 1000) p
    ON CONFLICT DO NOTHING`
  await i.sql`ANALYZE endpoint_hourly`
  await i.sql`ANALYZE endpoint_payer_days`
}

export interface StorageResult {
  name: 'history-storage'
  rows: number
  calls: number
  /** Every table of the schema, indexes and TOAST included (pg_total_relation_size), per million paid calls. */
  storage_bytes_per_million_calls: number
  /**
   * The same without claims, which leave a closed day at a time a day past their proofs' horizon: what stays
   * online with the months kept. (The seed's claims are a year old and stay: retention does not run here.)
   */
  stays_online_bytes_per_million_calls: number
  /** The same per table (a partitioned table as the sum of its partitions), largest first. */
  tables: Record<string, number>
}

/** What the history costs on disk: all online tables, indexes included, per million of its paid calls. */
async function storageScenario(i: Instance, rows: number): Promise<StorageResult> {
  const calls = Math.floor(rows / 2)
  const sizes = await i.sql<{ relname: string; bytes: string }[]>`
    SELECT coalesce(p.inhparent::regclass::text, c.relname) AS relname,
           sum(pg_total_relation_size(c.oid))::text AS bytes
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
      LEFT JOIN pg_inherits p ON p.inhrelid = c.oid
    WHERE c.relkind = 'r' AND n.nspname = current_schema()
    GROUP BY 1 ORDER BY sum(pg_total_relation_size(c.oid)) DESC`
  const perMillion = (bytes: number) => Math.round((bytes * 1_000_000) / calls)
  const tables: Record<string, number> = {}
  let total = 0
  for (const r of sizes) {
    total += Number(r.bytes)
    tables[r.relname] = perMillion(Number(r.bytes))
  }
  const claims = sizes.find((r) => r.relname === 'claims')
  return {
    name: 'history-storage',
    rows,
    calls,
    storage_bytes_per_million_calls: perMillion(total),
    stays_online_bytes_per_million_calls: perMillion(total - Number(claims?.bytes ?? 0)),
    tables,
  }
}

async function seqScans(i: Instance): Promise<Map<string, number>> {
  const rows = await i.sql<{ relname: string; n: string }[]>`
    SELECT relname, seq_scan::text AS n FROM pg_stat_user_tables WHERE relname = ANY(${[...BIG_TABLES]}::text[])`
  return new Map(rows.map((r) => [r.relname, Number(r.n)]))
}

/** Which big tables were scanned since `before` ("none": every query was served by an index). */
async function seqScansSince(i: Instance, before: Map<string, number>): Promise<string> {
  // The other sessions' counters reach the shared statistics when they go idle (at most a second later).
  await new Promise((r) => setTimeout(r, 1_500))
  const after = await seqScans(i)
  const scanned = [...after]
    .filter(([t, n]) => n > (before.get(t) ?? 0))
    .map(([t, n]) => `${t} ×${n - before.get(t)!}`)
  return scanned.length ? scanned.join(', ') : 'none'
}

/** The batcher's database work per run: the threshold check, and locking a batch of payable entries. */
async function batcherWork(i: Instance): Promise<void> {
  await someWalletOwedAtLeast(i.sql, { minAtomic: 10_000n })
  await i.sql
    .begin(async (tx) => {
      await lockPayableBatch(tx, { limit: 5_000, minAtomic: 1n, maxWallets: 500 })
      throw new Error('rollback')
    })
    .catch((err) => {
      if ((err as Error).message !== 'rollback') throw err
    })
}

async function reconcileDeps(i: Instance, chain: MeasureDeps['chain']) {
  const config = loadConfig({
    env: {
      NODE_ENV: 'development',
      NETWORK: 'base-sepolia',
      RPC_URL: chain.rpcUrl,
      USDC_ADDRESS: chain.usdcAddress,
      TREASURY_PRIVATE_KEY: chain.treasury.privateKey,
      DATABASE_URL: i.dbUrl,
    },
    // No look-back: the incremental run covers exactly what came after the checkpoint.
    overrides: { payouts: { reconcile_lookback_ms: 1 } },
  })
  return { sql: i.sql, chain: await connectChain(config), config }
}

/** Each incremental run starts from the same checkpoint (a clean run would move it past everything). */
async function resetCheckpointThen<T>(i: Instance, fn: () => Promise<T>): Promise<T> {
  const saved = await i.sql`SELECT * FROM reconcile_checkpoints`
  const snapshots = await i.sql`SELECT * FROM reconcile_balance_snapshots`
  const result = await fn()
  for (const c of saved) {
    await i.sql`UPDATE reconcile_checkpoints SET to_time = ${c.to_time}, ledger_entry_id = ${c.ledger_entry_id},
                payouts_confirmed_before = ${c.payouts_confirmed_before} WHERE name = ${c.name}`
  }
  await i.sql.begin(async (tx) => {
    await tx`DELETE FROM reconcile_balance_snapshots`
    if (snapshots.length) await tx`INSERT INTO reconcile_balance_snapshots ${tx(snapshots)}`
  })
  return result
}

async function paidLoad(i: Instance, d: MeasureDeps): Promise<{ p50: number; p99: number; note: string }> {
  const hashes = await makeProofs({
    rpcUrl: d.chain.rpcUrl,
    chainId: d.chain.chainId,
    usdc: d.chain.usdcAddress,
    payerKey: d.chain.payers[0]!.privateKey,
    treasury: d.chain.treasury.address,
    value: 1_000n,
    count: d.proofs,
  })
  // Let the watcher pre-verify them, as in the main bench's paid scenarios.
  await new Promise((r) => setTimeout(r, 1_500))
  const m = await load({
    url: i.meteredUrl,
    connections: 16,
    durationS: 10,
    perRequest: { header: 'x-payment', values: hashes },
    expectStatus: 200,
  })
  return { p50: m.p50_ms, p99: m.p99_ms, note: `${m.rps} req/s, ${m.errors} errors, ${m.requests} requests` }
}

function table(results: HistoryResult[]): string {
  return [
    '| scenario | rows | p50 ms | p99 ms | empty p50 ms | empty p99 ms | ratio to empty (p50) | (p99) |',
    '|---|---|---|---|---|---|---|---|',
    ...results.map(
      (r) =>
        `| ${r.name} | ${r.rows} | ${r.p50_ms} | ${r.p99_ms} | ${r.empty_p50_ms} | ${r.empty_p99_ms} | ${r.ratio_to_empty ?? '–'} | ${r.p99_ratio_to_empty ?? '–'} |${r.note ? ` ${r.note}` : ''}`,
    ),
  ].join('\n')
}
