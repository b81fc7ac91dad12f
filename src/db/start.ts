// The database subsystem: embedded PGlite when no URL is given, the pools, the migrations, a readiness check.
import type { Config } from '../config/schema.ts'
import type { Logger } from '../observability/logger.ts'
import { dbPoolSize } from '../observability/metrics.ts'
import type { Started } from '../subsystem.ts'
import { startEmbeddedDatabase } from './embedded.ts'
import { untilReachable } from './first-reach.ts'
import { migrate } from './migrate.ts'
import { type ReplicationWatch, startReplicationWatch } from './replication-watch.ts'
import { createSql, type Sql } from './sql.ts'

export interface Database extends Started {
  sql: Sql
  /**
   * The books writer's own connections (claims and captures of the hot path): its statement is never
   * queued behind another subsystem's query on a shared connection. The main pool on the embedded database.
   */
  books: Sql
  url: string
  /** The embedded single-session database: one connection, no LISTEN, always the job leader. */
  embedded: boolean
  /** The primary's standbys, read on a timer: whether a failover could forget claims (and paid calls wait). */
  replication: ReplicationWatch
}

/** How long a worker's start waits for the database its parent serves. */
const FIRST_REACH_BUDGET_MS = 60_000

/** Connections of the books writer's own pool (on a server). */
export const BOOKS_POOL_MAX = 2

export async function startDatabase(deps: {
  config: Config
  logger: Logger
  /** A database URL served by a parent process (the workers' shared embedded database). */
  url?: string
  embedded?: boolean
}): Promise<Database> {
  const stops: Array<() => Promise<void>> = []
  const stop = async () => {
    for (const s of stops.splice(0).reverse()) await s()
  }
  try {
    let url = deps.url ?? deps.config.database.url
    let embedded = deps.embedded ?? false
    if (!url) {
      const db = await startEmbeddedDatabase({ dataDir: deps.config.database.data_dir })
      stops.push(() => db.stop())
      url = db.url
      embedded = true
    }
    // The embedded database is one session: one connection is the only safe pool size there.
    const poolMax = embedded ? 1 : deps.config.database.pool_max
    // Outages answer fast: a bounded reconnect pause (sql.ts), a connect timeout, and on a server a
    // statement timeout, so a query fails (503) rather than waits while the database is away.
    const sql = createSql(url, {
      max: poolMax,
      connectTimeoutMs: deps.config.database.connect_timeout_ms,
      statementTimeoutMs: embedded ? 0 : deps.config.database.statement_timeout_ms,
    })
    stops.push(() => sql.end({ timeout: 5 }))
    // The driver pipelines a query on a busy connection once none is open or closed (postgres 3.4.9,
    // index.js handler): on one shared pool a claim could wait behind a job's slow read, as after a
    // database restart, when every connection reconnects at once and the jobs' first runs read a cold
    // cache, and every paid call of the process waits with it (one books write in flight). Two
    // connections: the batch in flight, and the releases and lookups beside it.
    // Keyed plans: the capture finds its claims in the day's partition, and a prepared plan keeps the way
    // it settled on first. Made while the partition looked empty (a new day, or statistics taken at a quiet
    // moment), that way was a sequential scan, reading the whole partition once per statement as it grew:
    // PostgreSQL's CPU per call 142 µs growing to 238 over 11,000 claims, keyed 108-123 and flat
    // (bench/history/claim-batch-cost.ts --stale [--keyed]); a 15 s paid-warm run 440 µs against 220. Bitmap
    // scans off too: a bitmap scan of the unfinished claims' partial index visits the entry of every claim
    // captured since the last vacuum, where a plain index scan marks them dead as it passes.
    const books = embedded
      ? sql
      : createSql(url, {
          max: BOOKS_POOL_MAX,
          sessions: 0,
          applicationName: 'tollgate-books',
          keyedPlans: true,
          connectTimeoutMs: deps.config.database.connect_timeout_ms,
          statementTimeoutMs: deps.config.database.statement_timeout_ms,
        })
    if (books !== sql) stops.push(() => books.end({ timeout: 5 }))
    dbPoolSize.set(poolMax + (books === sql ? 0 : BOOKS_POOL_MAX))
    // A worker on its parent's embedded database waits for it to accept (first-reach.ts); a process of its
    // own fails its start at once, as before, when its database is down.
    const migrated =
      deps.url && embedded
        ? await untilReachable(() => migrate(sql), {
            budgetMs: FIRST_REACH_BUDGET_MS,
            onRetry: (err, attempt) =>
              deps.logger.warn('database not reachable yet, retrying', {
                attempt,
                code: (err as { code?: string }).code,
              }),
          })
        : await migrate(sql)
    if (migrated.applied.length) deps.logger.info('migrations applied', { applied: migrated.applied })
    // The main pool's sessions see the same synchronous_commit as the books pool's (same role and
    // database, neither sets it), so what this pool reads is what a claim's commit waits for.
    const replication = await startReplicationWatch({
      sql,
      logger: deps.logger,
      embedded,
      require: deps.config.database.require_synchronous_standby,
      checkMs: deps.config.database.replication_check_ms,
    })
    stops.push(async () => replication.stop())
    return {
      sql,
      books,
      url,
      embedded,
      replication,
      stop,
      readiness: [
        {
          name: 'database',
          check: async () => {
            await sql`SELECT 1`
            return { ok: true }
          },
        },
        replication.readiness,
      ],
    }
  } catch (err) {
    await stop()
    throw err
  }
}
