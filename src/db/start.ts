// The database subsystem: embedded PGlite when no URL is given, the pools, the migrations, a readiness check.
import type { Config } from '../config/schema.ts'
import type { Logger } from '../observability/logger.ts'
import { dbPoolSize } from '../observability/metrics.ts'
import type { Started } from '../subsystem.ts'
import { startEmbeddedDatabase } from './embedded.ts'
import { migrate } from './migrate.ts'
import { createSql, type Sql } from './sql.ts'

export interface Database extends Started {
  sql: Sql
  /** Pool for writes that may be lost in a crash (captures); the main pool on the embedded database. */
  url: string
  /** The embedded single-session database: one connection, no LISTEN, always the job leader. */
  embedded: boolean
}

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
    dbPoolSize.set(poolMax)
    const migrated = await migrate(sql)
    if (migrated.applied.length) deps.logger.info('migrations applied', { applied: migrated.applied })
    return {
      sql,
      url,
      embedded,
      stop,
      readiness: [
        {
          name: 'database',
          check: async () => {
            await sql`SELECT 1`
            return { ok: true }
          },
        },
      ],
    }
  } catch (err) {
    await stop()
    throw err
  }
}
